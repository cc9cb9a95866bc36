package lease

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The lease commands are small protobuf messages written with protowire:
// etcd's API has no message for a batch of expirations or for a lease-clock
// checkpoint, and these two are on the hot path of expiry storms, so they
// are packed by hand rather than generated.

// Checkpoint is one checkpoint entry: the lease clock now, leases renewed
// since their last checkpoint (back to "full"), and new checkpointed
// expiries.
//
//	message Checkpoint {
//	  int64 clock = 1;
//	  repeated int64 resets = 2 [packed];
//	  repeated Expiry expiries = 3; // Expiry { int64 id = 1; int64 expiry = 2; }
//	}
type Checkpoint struct {
	Clock    int64
	Resets   []int64
	Expiries []Expiry
}

// Expiry is one lease's checkpointed deadline on the lease clock.
type Expiry struct {
	ID     int64
	Expiry int64
}

// Expire is a batch of leases the leader found expired.
//
//	message Expire { repeated int64 ids = 1 [packed]; }
type Expire struct {
	IDs []int64
}

func packedSize(vs []int64) int {
	n := 0
	for _, v := range vs {
		n += protowire.SizeVarint(uint64(v))
	}
	return n
}

func appendPacked(b []byte, num protowire.Number, vs []int64) []byte {
	if len(vs) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(packedSize(vs)))
	for _, v := range vs {
		b = protowire.AppendVarint(b, uint64(v))
	}
	return b
}

func expirySize(e Expiry) int {
	return protowire.SizeTag(1) + protowire.SizeVarint(uint64(e.ID)) + protowire.SizeTag(2) + protowire.SizeVarint(uint64(e.Expiry))
}

// Size implements the fsm message interface.
func (c *Checkpoint) Size() int {
	n := 0
	if c.Clock != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(c.Clock))
	}
	if len(c.Resets) > 0 {
		p := packedSize(c.Resets)
		n += protowire.SizeTag(2) + protowire.SizeBytes(p)
	}
	for _, e := range c.Expiries {
		n += protowire.SizeTag(3) + protowire.SizeBytes(expirySize(e))
	}
	return n
}

// Marshal implements the fsm message interface.
func (c *Checkpoint) Marshal() ([]byte, error) {
	b := make([]byte, 0, c.Size())
	if c.Clock != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(c.Clock))
	}
	b = appendPacked(b, 2, c.Resets)
	for _, e := range c.Expiries {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(expirySize(e)))
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.ID))
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.Expiry))
	}
	return b, nil
}

// Unmarshal implements the fsm message interface.
func (c *Checkpoint) Unmarshal(b []byte) error {
	*c = Checkpoint{}
	return walk(b, func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			c.Clock = int64(v)
		case num == 2:
			ids, err := int64s(typ, v, data)
			if err != nil {
				return err
			}
			c.Resets = append(c.Resets, ids...)
		case num == 3 && typ == protowire.BytesType:
			var e Expiry
			err := walk(data, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
				if typ != protowire.VarintType {
					return nil
				}
				switch num {
				case 1:
					e.ID = int64(v)
				case 2:
					e.Expiry = int64(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			c.Expiries = append(c.Expiries, e)
		}
		return nil
	})
}

// Size implements the fsm message interface.
func (e *Expire) Size() int {
	if len(e.IDs) == 0 {
		return 0
	}
	return protowire.SizeTag(1) + protowire.SizeBytes(packedSize(e.IDs))
}

// Marshal implements the fsm message interface.
func (e *Expire) Marshal() ([]byte, error) {
	return appendPacked(make([]byte, 0, e.Size()), 1, e.IDs), nil
}

// Unmarshal implements the fsm message interface.
func (e *Expire) Unmarshal(b []byte) error {
	*e = Expire{}
	return walk(b, func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error {
		if num != 1 {
			return nil
		}
		ids, err := int64s(typ, v, data)
		e.IDs = append(e.IDs, ids...)
		return err
	})
}

var errMalformed = errors.New("lease: malformed message")

// walk calls f for each field; unknown fields are skipped so that newer
// writers can add fields.
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var data []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, data); err != nil {
			return err
		}
	}
	return nil
}

// int64s reads a repeated int64 field, packed or not.
func int64s(typ protowire.Type, v uint64, data []byte) ([]int64, error) {
	switch typ {
	case protowire.VarintType:
		return []int64{int64(v)}, nil
	case protowire.BytesType:
		var out []int64
		for len(data) > 0 {
			x, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return nil, fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
			}
			out = append(out, int64(x))
			data = data[n:]
		}
		return out, nil
	}
	return nil, errMalformed
}

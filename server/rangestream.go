package server

import (
	"bytes"
	"context"
	"errors"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/kv"
)

var (
	// ErrStreamSortOrder refuses a RangeStream in an order a chunk of keys
	// in key order cannot be given in (etcd's Unimplemented).
	ErrStreamSortOrder = errors.New("RangeStream does not support custom sort orders")
	// ErrStreamRevisionFilter refuses a RangeStream with revision filters
	// (etcd's Unimplemented).
	ErrStreamRevisionFilter = errors.New("RangeStream does not support revision filters")
)

// rangeStreamFirstChunk is the first chunk's key count; later chunks grow
// or shrink toward rangeStreamChunkBytes (etcd starts at 10 too).
const rangeStreamFirstChunk = 10

// RangeStream answers r as Range would, in chunks handed to send: every
// chunk at the revision the stream started at (a linearizable stream waits
// once, before its first chunk), keys in order, and the last chunk alone
// carrying a header (its revision), More and Count, as etcd 3.7's. Sort
// orders and revision filters are refused, as in etcd, so a client falls
// back to Range. An error of send is returned as it came.
func (s *Server) RangeStream(ctx context.Context, r *pb.RangeRequest, send func(*pb.RangeResponse) error) error {
	if err := kv.CheckRange(r); err != nil {
		return err
	}
	// As etcd's: the orders a chunk of keys in key order can be given in
	// (an unspecified order sorts each chunk by its target, as Range does).
	if r.SortOrder != pb.RangeRequest_NONE && !(r.SortOrder == pb.RangeRequest_ASCEND && r.SortTarget == pb.RangeRequest_KEY) {
		return ErrStreamSortOrder
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return ErrStreamRevisionFilter
	}
	if s.Corrupt() {
		return ErrCorrupt
	}
	store := s.node.Store()
	// The revision every chunk is read at: the current one once the read
	// is allowed and, unless serializable, once this member holds every
	// write acknowledged before the call.
	start := func() (int64, error) {
		if err := s.AuthorizeRead(ctx, r); err != nil {
			return 0, err
		}
		return store.Rev(), nil
	}
	var rev int64
	var err error
	if r.Serializable {
		rev, err = start()
	} else {
		rev, err = Linearizable(s, ctx, start)
	}
	if err != nil {
		return err
	}
	if r.Revision == 0 {
		r.Revision = rev
	}
	header := func() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

	if r.CountOnly {
		resp, err := store.Range(r)
		if err != nil {
			return err
		}
		return send(&pb.RangeResponse{Header: header(), Count: resp.Count})
	}
	total := r.Limit
	if total <= 0 {
		total = math.MaxInt64
	}
	target := s.limits.MaxRequestBytes // New set the default
	chunk := &pb.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, Revision: r.Revision, KeysOnly: r.KeysOnly,
		SortOrder: r.SortOrder, SortTarget: r.SortTarget, Serializable: true, Limit: min(rangeStreamFirstChunk, total)}
	var sent int64
	for {
		resp, err := store.Range(chunk)
		if err != nil {
			return err
		}
		sent += int64(len(resp.Kvs))
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || sent == total
		var next []byte
		if resp.More {
			// The chunk's keys are the next ones in key order, sorted by
			// the request's target: go on after the greatest.
			last := resp.Kvs[0].Key
			for _, kv := range resp.Kvs[1:] {
				if bytes.Compare(kv.Key, last) > 0 {
					last = kv.Key
				}
			}
			next = append(bytes.Clone(last), 0)
		}
		if done {
			out.Header, out.More, out.Count = header(), resp.More, sent
			if resp.More {
				rest, err := store.Range(&pb.RangeRequest{Key: next, RangeEnd: r.RangeEnd, Revision: r.Revision, CountOnly: true})
				if err != nil {
					return err
				}
				out.Count += rest.Count
			}
		}
		if err := send(out); err != nil {
			return err
		}
		if done {
			return nil
		}
		chunk.Key = next
		chunk.Limit = min(nextChunkLimit(chunk.Limit, resp.Size(), target), total-sent)
	}
}

// nextChunkLimit doubles a chunk's key count while its chunks come out
// under half the target size and halves it while they come out over twice
// that, so chunks settle near the target without many round trips.
func nextChunkLimit(limit int64, size, target int) int64 {
	switch {
	case size < target/2 && limit < math.MaxInt64/2:
		return limit * 2
	case size > 2*target && limit > 1:
		return limit / 2
	}
	return limit
}

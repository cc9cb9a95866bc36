package kv

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// change collects the writes of one main revision. Nothing is published
// (s.rev, watchers) until commit, and the write lock is held throughout, so
// readers never see a half-applied revision.
type change struct {
	rev   int64 // the main revision the writes get
	sub   int64 // number of writes so far
	start int   // len(s.log) when the revision began
}

func (s *Store) begin() change { return change{rev: s.rev + 1, start: len(s.log)} }

// viewRev is the revision a response reports part-way through a write.
func (s *Store) viewRev(c *change) int64 {
	if c.sub > 0 {
		return c.rev
	}
	return s.rev
}

func (s *Store) commit(c *change) {
	if c.sub == 0 {
		return
	}
	s.rev = c.rev
	s.notify(c.rev, s.log[c.start:])
}

func (s *Store) appendRecord(c *change, e *keyEntry, r *record) {
	r.sub = c.sub
	c.sub++
	e.recs = append(e.recs, r)
	s.log = append(s.log, r)
	s.size.Add(r.cost())
}

// Put writes one key at a new revision.
func (s *Store) Put(p *pb.PutRequest) (*pb.PutResponse, error) {
	if err := CheckPut(p); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkPutState(p); err != nil {
		return nil, err
	}
	c := s.begin()
	resp := s.doPut(&c, p)
	s.commit(&c)
	return resp, nil
}

// checkPutState holds the checks etcd makes when the entry applies: they
// depend on the state, so they cannot be decided before.
func (s *Store) checkPutState(p *pb.PutRequest) error {
	if p.IgnoreValue || p.IgnoreLease {
		e := s.lookup(p.Key)
		if e == nil || e.latest() == nil {
			return ErrKeyNotFound
		}
	}
	if p.Lease != 0 && (s.leaseExists == nil || !s.leaseExists(p.Lease)) {
		return ErrLeaseNotFound
	}
	return nil
}

// doPut applies a put that passed checkPut and checkPutState; it cannot fail.
func (s *Store) doPut(c *change, p *pb.PutRequest) *pb.PutResponse {
	e := s.entry(p.Key)
	prev := e.latest()
	r := &record{kv: mvccpb.KeyValue{Key: e.key, ModRevision: c.rev, Lease: p.Lease}}
	if p.IgnoreValue {
		r.kv.Value = prev.kv.Value // immutable, so sharing is safe
	} else if len(p.Value) > 0 {
		// The request may be reused by the caller; the record must outlive it.
		r.kv.Value = bytes.Clone(p.Value)
	}
	if p.IgnoreLease {
		r.kv.Lease = prev.kv.Lease
	}
	if prev != nil {
		r.kv.CreateRevision = prev.kv.CreateRevision
		r.kv.Version = prev.kv.Version + 1
		if prev.kv.Lease != r.kv.Lease {
			s.detach(e, prev.kv.Lease)
			s.attach(e, r.kv.Lease)
		}
	} else {
		r.kv.CreateRevision = c.rev
		r.kv.Version = 1
		s.live++
		s.attach(e, r.kv.Lease)
	}
	s.appendRecord(c, e, r)
	rh := &struct {
		resp pb.PutResponse
		hdr  pb.ResponseHeader
	}{}
	resp := &rh.resp
	rh.hdr.Revision = c.rev
	resp.Header = &rh.hdr
	if p.PrevKv && prev != nil {
		resp.PrevKv = prev.copyKV()
	}
	return resp
}

// DeleteRange deletes the live keys in the range, all at one new revision;
// the revision is not bumped if nothing was deleted.
func (s *Store) DeleteRange(d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if d == nil || len(d.Key) == 0 {
		return nil, ErrEmptyKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.begin()
	resp := s.doDelete(&c, d)
	s.commit(&c)
	return resp, nil
}

func (s *Store) doDelete(c *change, d *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	resp := &pb.DeleteRangeResponse{}
	s.scan(mkSpan(d.Key, d.RangeEnd), func(e *keyEntry) bool {
		prev := e.latest()
		if prev == nil {
			return true
		}
		if d.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, prev.copyKV())
		}
		s.tombstone(c, e, prev)
		resp.Deleted++
		return true
	})
	resp.Header = &pb.ResponseHeader{Revision: s.viewRev(c)}
	return resp
}

func (s *Store) tombstone(c *change, e *keyEntry, prev *record) {
	s.detach(e, prev.kv.Lease)
	s.live--
	s.appendRecord(c, e, &record{kv: mvccpb.KeyValue{Key: e.key, ModRevision: c.rev}, tomb: true})
}

// DeleteKeys deletes the given keys (those that exist) in ONE new revision, emitting DELETE
// events; used by lease revoke/expiry. Returns the revision after the call (unchanged if
// nothing existed).
func (s *Store) DeleteKeys(keys [][]byte) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.begin()
	for _, k := range keys {
		e := s.lookup(k)
		if e == nil {
			continue
		}
		// A key listed twice is already a tombstone the second time round.
		if prev := e.latest(); prev != nil {
			s.tombstone(&c, e, prev)
		}
	}
	s.commit(&c)
	return s.rev
}

package kv

import (
	"bytes"
	"cmp"
	"math"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// latestRev asks a read for the newest version of every key, including the
// changes a transaction in progress has already made.
const latestRev = math.MaxInt64

// Range returns the keys in the requested range, following etcd's semantics
// for limit, count, sorting and revision filters. The returned KeyValues are
// the caller's; their Key and Value bytes are shared with the store and must
// not be modified.
func (s *Store) Range(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := CheckRange(r); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.checkRangeRev(r.Revision); err != nil {
		return nil, err
	}
	return s.doRange(r, s.rev), nil
}

// CheckRange validates a Range request as etcd does; the server calls it
// before forwarding so a bad request never leaves the member.
func CheckRange(r *pb.RangeRequest) error {
	if r == nil || len(r.Key) == 0 {
		return ErrEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return ErrInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return ErrInvalidSortOption
	}
	return nil
}

// checkRangeRev follows etcd: the compaction revision itself stays readable,
// anything older is gone.
func (s *Store) checkRangeRev(rev int64) error {
	switch {
	case rev <= 0:
		return nil
	case rev > s.rev:
		return ErrFutureRev
	case rev < s.compactRev:
		return ErrCompacted
	}
	return nil
}

// doRange runs a validated range request. header is the revision the
// response reports; inside a txn it includes the txn's own writes.
func (s *Store) doRange(r *pb.RangeRequest, header int64) *pb.RangeResponse {
	at := int64(latestRev)
	if r.Revision > 0 {
		at = r.Revision
	}
	order := r.SortOrder
	if order == pb.RangeRequest_NONE && r.SortTarget != pb.RangeRequest_KEY {
		order = pb.RangeRequest_ASCEND
	}
	// Keys come out of the index in ascending order already.
	resort := order == pb.RangeRequest_DESCEND ||
		(order == pb.RangeRequest_ASCEND && r.SortTarget != pb.RangeRequest_KEY)
	filtered := r.MinModRevision != 0 || r.MaxModRevision != 0 ||
		r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
	// Without a resort the first limit+1 survivors are the answer and tell
	// whether there is more; count still needs the whole range, as in etcd.
	keep := -1
	if r.Limit > 0 && !resort {
		keep = int(min(r.Limit, math.MaxInt32)) + 1
	}

	var one [1]*record
	var recs []*record
	var count int64
	if sp := mkSpan(r.Key, r.RangeEnd); sp.single {
		// The hot path: no closure, no scratch slice on the heap.
		if e := s.lookup(sp.key); e != nil {
			if rec := e.at(at); rec != nil {
				count = 1
				if !r.CountOnly && (!filtered || passFilters(r, &rec.kv)) {
					one[0] = rec
					recs = one[:]
				}
			}
		}
	} else {
		recs, count = s.collect(sp, r, at, keep, filtered)
	}

	if resort {
		sortRecords(recs, r.SortTarget, order)
	}
	// The response and its header share one allocation.
	rh := &struct {
		resp pb.RangeResponse
		hdr  pb.ResponseHeader
	}{}
	resp := &rh.resp
	rh.hdr.Revision = header
	resp.Header, resp.Count = &rh.hdr, count
	if r.Limit > 0 && int64(len(recs)) > r.Limit {
		recs = recs[:r.Limit]
		resp.More = true
	}
	if len(recs) == 1 {
		b := &struct {
			kv  mvccpb.KeyValue
			ptr [1]*mvccpb.KeyValue
		}{kv: recs[0].kv}
		if r.KeysOnly {
			b.kv.Value = nil
		}
		b.ptr[0] = &b.kv
		resp.Kvs = b.ptr[:]
	} else if len(recs) > 1 {
		kvs := make([]mvccpb.KeyValue, len(recs))
		resp.Kvs = make([]*mvccpb.KeyValue, len(recs))
		for i, rec := range recs {
			kvs[i] = rec.kv
			if r.KeysOnly {
				kvs[i].Value = nil
			}
			resp.Kvs[i] = &kvs[i]
		}
	}
	return resp
}

// collect gathers the visible records of a multi-key span: count counts
// them all, recs keeps at most keep (-1: all) of those passing the filters.
func (s *Store) collect(sp span, r *pb.RangeRequest, at int64, keep int, filtered bool) (recs []*record, count int64) {
	if keep > 0 {
		recs = make([]*record, 0, min(keep, 1024))
	}
	s.scan(sp, func(e *keyEntry) bool {
		rec := e.at(at)
		if rec == nil {
			return true
		}
		count++
		if r.CountOnly || (keep >= 0 && len(recs) >= keep) {
			return true
		}
		if filtered && !passFilters(r, &rec.kv) {
			return true
		}
		recs = append(recs, rec)
		return true
	})
	return recs, count
}

// passFilters applies the min/max revision filters, which in etcd narrow the
// returned kvs but not the count.
func passFilters(r *pb.RangeRequest, kv *mvccpb.KeyValue) bool {
	return (r.MaxModRevision == 0 || kv.ModRevision <= r.MaxModRevision) &&
		(r.MinModRevision == 0 || kv.ModRevision >= r.MinModRevision) &&
		(r.MaxCreateRevision == 0 || kv.CreateRevision <= r.MaxCreateRevision) &&
		(r.MinCreateRevision == 0 || kv.CreateRevision >= r.MinCreateRevision)
}

// sortRecords sorts stably so that ties keep ascending key order: etcd's
// unstable sort leaves tie order unspecified, and every member must return
// the same answer.
func sortRecords(recs []*record, target pb.RangeRequest_SortTarget, order pb.RangeRequest_SortOrder) {
	desc := order == pb.RangeRequest_DESCEND
	if target == pb.RangeRequest_KEY {
		if desc {
			slices.Reverse(recs)
		}
		return
	}
	var c func(a, b *record) int
	switch target {
	case pb.RangeRequest_VERSION:
		c = func(a, b *record) int { return cmp.Compare(a.kv.Version, b.kv.Version) }
	case pb.RangeRequest_CREATE:
		c = func(a, b *record) int { return cmp.Compare(a.kv.CreateRevision, b.kv.CreateRevision) }
	case pb.RangeRequest_MOD:
		c = func(a, b *record) int { return cmp.Compare(a.kv.ModRevision, b.kv.ModRevision) }
	case pb.RangeRequest_VALUE:
		c = func(a, b *record) int { return bytes.Compare(a.kv.Value, b.kv.Value) }
	default:
		return
	}
	if desc {
		asc := c
		c = func(a, b *record) int { return asc(b, a) }
	}
	slices.SortStableFunc(recs, c)
}

package member

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/corenode/corenode/kv"
)

type fakePeers struct {
	local kv.KVHash
	peers map[uint64]kv.KVHash
	errs  map[uint64]error
}

func (f fakePeers) Self() uint64 { return 1 }
func (f fakePeers) Voters() ([]uint64, error) {
	ids := []uint64{1}
	for id := range f.peers {
		ids = append(ids, id)
	}
	for id := range f.errs {
		ids = append(ids, id)
	}
	return ids, nil
}
func (f fakePeers) LocalHash(int64) (kv.KVHash, error) { return f.local, nil }
func (f fakePeers) PeerHash(_ context.Context, id uint64, _ int64) (kv.KVHash, error) {
	if err := f.errs[id]; err != nil {
		return kv.KVHash{}, err
	}
	return f.peers[id], nil
}

func TestInitialCheck(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := kv.KVHash{Hash: 7, Revision: 10, CompactRevision: 3}
	for name, c := range map[string]struct {
		f    fakePeers
		fail bool
	}{
		"alone":             {fakePeers{local: h}, false},
		"same":              {fakePeers{local: h, peers: map[uint64]kv.KVHash{2: h, 3: h}}, false},
		"one differs":       {fakePeers{local: h, peers: map[uint64]kv.KVHash{2: h, 3: {Hash: 8, Revision: 10, CompactRevision: 3}}}, true},
		"other compaction":  {fakePeers{local: h, peers: map[uint64]kv.KVHash{2: {Hash: 8, Revision: 10, CompactRevision: 5}}}, false},
		"peer behind, down": {fakePeers{local: h, errs: map[uint64]error{2: rpctypes.ErrGRPCFutureRev, 3: context.DeadlineExceeded}}, false},
	} {
		if err := initialCheck(context.Background(), c.f, log); (err != nil) != c.fail {
			t.Errorf("%s: %v", name, err)
		}
	}
}

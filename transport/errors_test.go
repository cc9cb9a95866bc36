package transport

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/server"
)

// What the leader answered a forwarded call with becomes the typed error
// it was there, and reaches the client as the same gRPC error.
func TestErrTableBothWays(t *testing.T) {
	ctx := context.Background()
	for _, e := range errTable {
		sent := mapErr(ctx, e.err)
		back := mapErr(ctx, peerErr(sent))
		if status.Convert(back).Code() != status.Convert(sent).Code() || status.Convert(back).Message() != status.Convert(sent).Message() {
			t.Errorf("%v: a client hears %v when the leader answered it, %v when this member did", e.err, back, sent)
		}
	}
	for grpcErr, want := range map[error]error{
		rpctypes.ErrGRPCNotLeader:       server.ErrNotLeader,
		rpctypes.ErrGRPCAuthOldRevision: auth.ErrAuthOldRevision,
	} {
		if got := peerErr(grpcErr); !errors.Is(got, want) {
			t.Errorf("peerErr(%v) = %v, want %v", grpcErr, got, want)
		}
	}
	var u *server.Unreachable
	if got := peerErr(rpctypes.ErrGRPCNoLeader); !errors.As(got, &u) {
		t.Errorf("an Unavailable answer is %v, want server.Unreachable (an idempotent call may go again)", got)
	}
}

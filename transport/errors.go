package transport

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/checkpoint"
	"github.com/corenode/corenode/lessor"
	"github.com/corenode/corenode/node"
	"github.com/corenode/corenode/readlease"
)

// errTable is the one place where an error from below the edge becomes
// the gRPC error etcd sends for it (etcd's v3rpc/util.go plays this part).
// Errors that are already gRPC statuses (rpctypes.ErrGRPC*, used by kv and
// lease for etcd's exact messages) pass through unchanged.
var errTable = []struct {
	err  error
	grpc error
}{
	// Each leader-only layer says "not the leader" in its own words; a
	// client (or the forwarding member) hears etcd's, and retries.
	{node.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{checkpoint.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{readlease.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{lessor.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{context.DeadlineExceeded, rpctypes.ErrGRPCTimeout},
	{node.ErrBadTransferee, rpctypes.ErrGRPCBadLeaderTransferee},

	{auth.ErrRootUserNotExist, rpctypes.ErrGRPCRootUserNotExist},
	{auth.ErrRootRoleNotExist, rpctypes.ErrGRPCRootRoleNotExist},
	{auth.ErrUserAlreadyExist, rpctypes.ErrGRPCUserAlreadyExist},
	{auth.ErrUserEmpty, rpctypes.ErrGRPCUserEmpty},
	{auth.ErrUserNotFound, rpctypes.ErrGRPCUserNotFound},
	{auth.ErrRoleAlreadyExist, rpctypes.ErrGRPCRoleAlreadyExist},
	{auth.ErrRoleNotFound, rpctypes.ErrGRPCRoleNotFound},
	{auth.ErrRoleEmpty, rpctypes.ErrGRPCRoleEmpty},
	{auth.ErrPermissionNotGiven, rpctypes.ErrGRPCPermissionNotGiven},
	{auth.ErrAuthFailed, rpctypes.ErrGRPCAuthFailed},
	{auth.ErrNoPasswordUser, rpctypes.ErrGRPCAuthFailed},
	{auth.ErrPermissionDenied, rpctypes.ErrGRPCPermissionDenied},
	{auth.ErrRoleNotGranted, rpctypes.ErrGRPCRoleNotGranted},
	{auth.ErrPermissionNotGranted, rpctypes.ErrGRPCPermissionNotGranted},
	{auth.ErrAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
	{auth.ErrAuthOldRevision, rpctypes.ErrGRPCAuthOldRevision},
	{auth.ErrInvalidAuthToken, rpctypes.ErrGRPCInvalidAuthToken},
	{auth.ErrInvalidAuthMgmt, rpctypes.ErrGRPCInvalidAuthMgmt},
}

// mapErr turns an error from below the edge into the gRPC error etcd
// sends: through errTable, a cancelled request as codes.Canceled, anything
// else as codes.Unknown with its text.
func mapErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range errTable {
		if errors.Is(err, e.err) {
			return e.grpc
		}
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// notLeader reports whether err says this member does not lead (in any
// layer's words, those errTable maps to etcd's "not leader"): the request
// may then go to the leader.
func notLeader(err error) bool {
	for _, e := range errTable {
		if e.grpc == rpctypes.ErrGRPCNotLeader && errors.Is(err, e.err) {
			return true
		}
	}
	return false
}

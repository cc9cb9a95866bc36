package transport

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/server"
)

// errTable is the one place where an error from below the edge becomes
// the gRPC error etcd sends for it (etcd's v3rpc/util.go plays this part).
// Errors that are already gRPC statuses (the edge's own checks, and what a
// leader answered a forwarded request) pass through unchanged.
var errTable = []struct {
	err  error
	grpc error
}{
	// Every leader-only layer says "not the leader" with one error
	// (lessor.ErrNotLeader); a client (or the forwarding member) hears
	// etcd's, and retries.
	{server.ErrNotLeader, rpctypes.ErrGRPCNotLeader},
	{server.ErrNotSent, rpctypes.ErrGRPCNotLeader},
	{server.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
	{server.ErrCorrupt, rpctypes.ErrGRPCCorrupt},
	{server.ErrRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge},
	{server.ErrDowngradeVersionFormat, rpctypes.ErrGRPCWrongDowngradeVersionFormat},
	{server.ErrDowngradeTarget, rpctypes.ErrGRPCInvalidDowngradeTargetVersion},
	{server.ErrStreamSortOrder, status.Error(codes.Unimplemented, server.ErrStreamSortOrder.Error())},
	{server.ErrStreamRevisionFilter, status.Error(codes.Unimplemented, server.ErrStreamRevisionFilter.Error())},
	{server.ErrUnknownMethod, status.Error(codes.InvalidArgument, "etcdserver: unknown method")},
	{context.DeadlineExceeded, rpctypes.ErrGRPCTimeout},
	{server.ErrBadTransferee, rpctypes.ErrGRPCBadLeaderTransferee},
	{server.ErrTransferTimeout, errGRPCTimeoutLeaderTransfer},
	{server.ErrLeaderChanged, rpctypes.ErrGRPCLeaderChanged},
	{server.ErrReadLeaseChanged, rpctypes.ErrGRPCLeaderChanged},
	{server.ErrStopped, rpctypes.ErrGRPCStopped},
	{server.ErrCatchingUp, errGRPCCatchingUp},
	{server.ErrTimeout, rpctypes.ErrGRPCTimeout},
	{server.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
	{server.ErrMemberNotFound, rpctypes.ErrGRPCMemberNotFound},
	{server.ErrPeerURLExists, rpctypes.ErrGRPCPeerURLExist},
	{server.ErrBadPeerURLs, rpctypes.ErrGRPCMemberBadURLs},
	{server.ErrMemberNotLearner, rpctypes.ErrGRPCMemberNotLearner},
	{server.ErrLearnerNotReady, rpctypes.ErrGRPCLearnerNotReady},
	{server.ErrTooManyLearners, rpctypes.ErrGRPCTooManyLearners},
	{server.ErrNotEnoughStarted, rpctypes.ErrGRPCMemberNotEnoughStarted},
	{server.ErrUnhealthy, rpctypes.ErrGRPCUnhealthy},
	{server.ErrTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},

	{server.ErrEmptyKey, rpctypes.ErrGRPCEmptyKey},
	{server.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
	{server.ErrValueProvided, rpctypes.ErrGRPCValueProvided},
	{server.ErrLeaseProvided, rpctypes.ErrGRPCLeaseProvided},
	{server.ErrDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
	{server.ErrTooManyOps, rpctypes.ErrGRPCTooManyOps},
	{server.ErrInvalidSortOption, rpctypes.ErrGRPCInvalidSortOption},
	{server.ErrCompacted, rpctypes.ErrGRPCCompacted},
	{server.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
	{server.ErrKeysLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{server.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{server.ErrLeaseExists, rpctypes.ErrGRPCLeaseExist},

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

// errGRPCTimeoutLeaderTransfer is what etcd answers a MoveLeader that took
// too long: its ErrTimeoutLeaderTransfer has no entry in etcd's gRPC error
// map (rpctypes has no status for it), so it goes out as codes.Unknown with
// etcd's text.
var errGRPCTimeoutLeaderTransfer = status.Error(codes.Unknown, "etcdserver: request timed out, leader transfer took too long")

// errGRPCCatchingUp has no etcd counterpart (an etcd member replays its
// WAL before it serves). Unavailable sends etcd's clients to another member.
var errGRPCCatchingUp = status.Error(codes.Unavailable, "corenode: this member is still catching up with the cluster since it started")

// mapErr turns an error from below the edge into the gRPC error etcd
// sends: through errTable, a cancelled request as codes.Canceled, anything
// else as codes.Unknown with its text.
func mapErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var u *server.Unreachable
	if errors.As(err, &u) {
		// What the connection to the leader said, as it said it.
		err = u.Err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, server.ErrSnapshot) {
		// Another member may take it: Unavailable, with what went wrong.
		return status.Error(codes.Unavailable, err.Error())
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

// ErrorOptions returns the client port's interceptors that pass every
// error a handler returns through mapErr, so an error from below the edge
// reaches a client as etcd's even where a handler returns it as it came.
func ErrorOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			return resp, mapErr(ctx, err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return mapErr(ss.Context(), h(srv, ss))
		}),
	}
}

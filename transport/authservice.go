package transport

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/corenode/corenode/auth"
	"github.com/corenode/corenode/server"
)

// authService is etcd's Auth service. Every request but Authenticate goes
// through the log as fsm.OpAuth with the caller in its header, as etcd's
// does; passwords are hashed here, never in the log.
type authService struct{ s *Server }

// authResponse is what every Auth service answer is.
type authResponse interface {
	server.Message
	GetHeader() *pb.ResponseHeader
}

func authCall[R any, T interface {
	*R
	authResponse
}](a *authService, ctx context.Context, r *pb.InternalRaftRequest) (T, error) {
	m, err := a.s.req.ProposeAuth(ctx, r, func() server.Message { return T(new(R)) })
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	resp, ok := m.(T)
	if !ok {
		return nil, mapErr(ctx, fmt.Errorf("transport: auth request answered with %T", m))
	}
	a.s.header(resp.GetHeader())
	return resp, nil
}

func (a *authService) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return authCall[pb.AuthEnableResponse](a, ctx, &pb.InternalRaftRequest{AuthEnable: r})
}

func (a *authService) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return authCall[pb.AuthDisableResponse](a, ctx, &pb.InternalRaftRequest{AuthDisable: r})
}

func (a *authService) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return authCall[pb.AuthStatusResponse](a, ctx, &pb.InternalRaftRequest{AuthStatus: r})
}

func (a *authService) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if r.Options == nil || !r.Options.NoPassword {
		h, err := auth.HashPassword(r.Password, a.s.authStore().BcryptCost())
		if err != nil {
			return nil, mapErr(ctx, err)
		}
		r = &pb.AuthUserAddRequest{Name: r.Name, Options: r.Options, HashedPassword: h}
	}
	return authCall[pb.AuthUserAddResponse](a, ctx, &pb.InternalRaftRequest{AuthUserAdd: r})
}

func (a *authService) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return authCall[pb.AuthUserGetResponse](a, ctx, &pb.InternalRaftRequest{AuthUserGet: r})
}

func (a *authService) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return authCall[pb.AuthUserListResponse](a, ctx, &pb.InternalRaftRequest{AuthUserList: r})
}

func (a *authService) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return authCall[pb.AuthUserDeleteResponse](a, ctx, &pb.InternalRaftRequest{AuthUserDelete: r})
}

func (a *authService) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	h, err := auth.HashPassword(r.Password, a.s.authStore().BcryptCost())
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	r = &pb.AuthUserChangePasswordRequest{Name: r.Name, HashedPassword: h}
	return authCall[pb.AuthUserChangePasswordResponse](a, ctx, &pb.InternalRaftRequest{AuthUserChangePassword: r})
}

func (a *authService) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return authCall[pb.AuthUserGrantRoleResponse](a, ctx, &pb.InternalRaftRequest{AuthUserGrantRole: r})
}

func (a *authService) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return authCall[pb.AuthUserRevokeRoleResponse](a, ctx, &pb.InternalRaftRequest{AuthUserRevokeRole: r})
}

func (a *authService) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return authCall[pb.AuthRoleAddResponse](a, ctx, &pb.InternalRaftRequest{AuthRoleAdd: r})
}

func (a *authService) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return authCall[pb.AuthRoleGetResponse](a, ctx, &pb.InternalRaftRequest{AuthRoleGet: r})
}

func (a *authService) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return authCall[pb.AuthRoleListResponse](a, ctx, &pb.InternalRaftRequest{AuthRoleList: r})
}

func (a *authService) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return authCall[pb.AuthRoleDeleteResponse](a, ctx, &pb.InternalRaftRequest{AuthRoleDelete: r})
}

func (a *authService) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return authCall[pb.AuthRoleGrantPermissionResponse](a, ctx, &pb.InternalRaftRequest{AuthRoleGrantPermission: r})
}

func (a *authService) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return authCall[pb.AuthRoleRevokePermissionResponse](a, ctx, &pb.InternalRaftRequest{AuthRoleRevokePermission: r})
}

func (a *authService) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	resp, err := a.s.req.Authenticate(ctx, r)
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	a.s.header(resp.Header)
	return resp, nil
}

package transport

import (
	"context"
	"fmt"
	"net"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// AskMembers asks the member at peer address addr, over the peer port, for
// the cluster's members as of a read index (peerService.Members): a member
// started to join a running cluster finds there the ID it was added with.
func AskMembers(ctx context.Context, peers *PeerMux, addr string) ([]*pb.Member, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()), // the mux's own TLS, if any
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return peers.DialGRPC(ctx, a) }))
	if err != nil {
		return nil, fmt.Errorf("transport: connect to %s: %w", addr, err)
	}
	defer conn.Close()
	var resp pb.MemberListResponse
	if err := conn.Invoke(ctx, "/corenode.Peer/Members", &pb.MemberListRequest{}, &resp); err != nil {
		return nil, fmt.Errorf("transport: ask %s for the members: %w", addr, err)
	}
	return resp.Members, nil
}

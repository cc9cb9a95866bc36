package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

// gatewayRegistrations are the services whose HTTP routes etcd's gateway
// serves under /v3/. etcd also serves its v3lock and v3election services
// there; corenode has no such gRPC services (clients lock and elect with
// plain KV and lease calls), so their routes answer 404.
var gatewayRegistrations = []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
	gw.RegisterKVHandler,
	gw.RegisterWatchHandler,
	gw.RegisterLeaseHandler,
	gw.RegisterClusterHandler,
	gw.RegisterMaintenanceHandler,
	gw.RegisterAuthHandler,
}

// DialGateway opens the gRPC connection the JSON gateway calls through:
// a connection over pipe to this member's own gRPC server, so every
// gateway request passes through the same interceptors, validation and
// forwarding as a gRPC client's. The answer size is unbounded, as etcd's
// gateway dials its own port: the server's send limit is the one that
// applies.
func DialGateway(pipe *PipeListener) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///corenode-gateway",
		grpc.WithContextDialer(pipe.Dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
	)
	if err != nil {
		return nil, fmt.Errorf("transport: gateway connection: %w", err)
	}
	return conn, nil
}

// NewGateway returns etcd's JSON/HTTP gateway over conn: the handlers
// generated from etcd's own API definitions, with the marshaler options
// etcd 3.6 uses (proto field names, zero values omitted, unknown fields
// ignored), so paths, field names, encodings and error bodies are etcd's.
func NewGateway(conn *grpc.ClientConn) (http.Handler, error) {
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{
		Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	for _, register := range gatewayRegistrations {
		// The generated registrations keep no context: each handler runs
		// under its HTTP request's.
		if err := register(context.Background(), mux, conn); err != nil {
			return nil, fmt.Errorf("transport: register gateway handlers: %w", err)
		}
	}
	return mux, nil
}

// versions is etcd's /version answer. Clients such as Patroni read the
// server version to choose the gateway's path prefix (/v3 from 3.4 on).
type versions struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
	Storage string `json:"storage"`
}

func serveVersion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(versions{Server: APIVersion, Cluster: APIVersion, Storage: APIVersion})
	w.Write(b)
}

// withCORS answers as etcd does with its default --cors "*": every answer
// allows any origin, and a preflight OPTIONS request is answered at once.
// It also maps etcd 3.3's /v3beta/ prefix to /v3/, as etcd still does for
// old gateway clients.
func withCORS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/v3beta/"); ok {
			r.URL.Path = "/v3/" + rest
		}
		h := w.Header()
		h.Add("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
		h.Add("Access-Control-Allow-Origin", "*")
		h.Add("Access-Control-Allow-Headers", "accept, content-type, authorization")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		next.ServeHTTP(w, r)
	})
}

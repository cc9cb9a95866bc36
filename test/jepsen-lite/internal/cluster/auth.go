package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// AuthEnv carries the credentials, "user:password", that NewClient logs in
// with. A run with auth sets it before its first client, so the holder and
// reader processes it starts inherit it.
const AuthEnv = "JEPSEN_LITE_AUTH"

// The users of a run with auth: root, for the nemesis (MoveLeader needs
// it), and the workloads' user, whose one role grants readwrite on every
// key and nothing else, so each workload request passes the permission
// check a service's would.
const (
	RootUser         = "root"
	RootPassword     = "jepsen-root"
	WorkloadUser     = "jepsen"
	WorkloadPassword = "jepsen-pw"
)

// credentials are AuthEnv's user and password ("" for none).
func credentials() (user, password string) {
	user, password, _ = strings.Cut(os.Getenv(AuthEnv), ":")
	return user, password
}

// EnableAuth makes the run's users and turns auth on, as an operator
// would with etcdctl; it uses cli's connection without logging in.
func EnableAuth(ctx context.Context, cli *clientv3.Client) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"add root", func() error { _, err := cli.UserAdd(ctx, RootUser, RootPassword); return err }},
		{"grant root", func() error { _, err := cli.UserGrantRole(ctx, RootUser, "root"); return err }},
		{"add the workload user", func() error { _, err := cli.UserAdd(ctx, WorkloadUser, WorkloadPassword); return err }},
		{"add its role", func() error { _, err := cli.RoleAdd(ctx, WorkloadUser); return err }},
		{"grant it every key", func() error {
			_, err := cli.RoleGrantPermission(ctx, WorkloadUser, "\x00", clientv3.GetPrefixRangeEnd(""), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"grant the role", func() error { _, err := cli.UserGrantRole(ctx, WorkloadUser, WorkloadUser); return err }},
		{"enable auth", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("cluster: auth: %s: %w", s.what, err)
		}
	}
	return nil
}

// JWTFlag writes a fresh ES256 key into dir and returns the --auth-token
// value that makes members sign and verify JWTs with it.
func JWTFlag(dir string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("cluster: jwt key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("cluster: jwt key: %w", err)
	}
	p := filepath.Join(dir, "jwt.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", fmt.Errorf("cluster: jwt key: %w", err)
	}
	return "jwt,sign-method=ES256,priv-key=" + p, nil
}

package authmatrix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
)

// Callers, in the order they run each RPC (root last: its writes and
// revokes succeed, and must not change what the others see).
var Callers = []string{"anonymous", "bob", "alice", "root"}

const rootPassword, userPassword = "rootpw", "pw"

// Setup prepares a fresh cluster as root: role svc-a with readwrite on the
// prefix /svc/a/, user alice holding it, user bob holding nothing, keys on
// both prefixes with a lease each, then enables auth.
func Setup(ctx context.Context, cfg clientv3.Config) (la, lb clientv3.LeaseID, err error) {
	cli, err := clientv3.New(cfg)
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "svc-a"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "svc-a", "/svc/a/", "/svc/a0", clientv3.PermissionType(authpb.READWRITE))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "alice", userPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "alice", "svc-a"); return err },
		func() error { _, err := cli.UserAdd(ctx, "bob", userPassword); return err },
		func() error { _, err := cli.Put(ctx, "/svc/a/k", "a"); return err },
		func() error { _, err := cli.Put(ctx, "/svc/b/k", "b"); return err },
		func() error {
			g, err := cli.Grant(ctx, 600)
			if err == nil {
				la = g.ID
				_, err = cli.Put(ctx, "/svc/a/leased", "x", clientv3.WithLease(la))
			}
			return err
		},
		func() error {
			g, err := cli.Grant(ctx, 600)
			if err == nil {
				lb = g.ID
				_, err = cli.Put(ctx, "/svc/b/leased", "x", clientv3.WithLease(lb))
			}
			return err
		},
		func() error { _, err := cli.Compact(ctx, 2); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return 0, 0, fmt.Errorf("authmatrix: setup step %d: %w", i+1, err)
		}
	}
	return la, lb, nil
}

// Row is one RPC's outcomes, by caller in Callers order.
type Row struct {
	Name     string
	Outcomes []string
}

// Run runs every case as every caller; cfg reaches the cluster (its
// Username and Password are set per caller). la and lb are Setup's leases.
func Run(ctx context.Context, cfg clientv3.Config, la, lb clientv3.LeaseID) ([]Row, error) {
	cases := cases(la, lb)
	rows := make([]Row, len(cases))
	for i, c := range cases {
		rows[i].Name = c.name
	}
	for _, who := range Callers {
		ccfg := cfg
		switch who {
		case "root":
			ccfg.Username, ccfg.Password = "root", rootPassword
		case "alice", "bob":
			ccfg.Username, ccfg.Password = who, userPassword
		}
		cli, err := clientv3.New(ccfg)
		if err != nil {
			return nil, fmt.Errorf("authmatrix: connect as %s: %w", who, err)
		}
		for i, c := range cases {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			rows[i].Outcomes = append(rows[i].Outcomes, outcome(c.run(cctx, cli, who)))
			cancel()
		}
		cli.Close()
	}
	return rows, nil
}

// Format renders rows as the golden file's text.
func Format(rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# rpc | %s\n", strings.Join(Callers, " | "))
	for _, r := range rows {
		fmt.Fprintf(&b, "%s | %s\n", r.Name, strings.Join(r.Outcomes, " | "))
	}
	return b.String()
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return rpctypes.ErrorDesc(err)
}

type testCase struct {
	name string
	run  func(ctx context.Context, cli *clientv3.Client, who string) error
}

func cases(la, lb clientv3.LeaseID) []testCase {
	get := func(key string, opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, string) error {
		return func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Get(ctx, key, opts...)
			return err
		}
	}
	put := func(key string, opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, string) error {
		return func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Put(ctx, key, "v", opts...)
			return err
		}
	}
	watch := func(key string, opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, string) error {
		return func(ctx context.Context, cli *clientv3.Client, _ string) error {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			defer cancel()
			wch := cli.Watch(wctx, key, append(opts, clientv3.WithCreatedNotify())...)
			select {
			case resp, ok := <-wch:
				if !ok {
					return errors.New("watch channel closed")
				}
				if err := resp.Err(); err != nil {
					return err
				}
				if resp.Canceled {
					return errors.New("watch canceled")
				}
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	maint := func(f func(ctx context.Context, cli *clientv3.Client, ep string) error) func(context.Context, *clientv3.Client, string) error {
		return func(ctx context.Context, cli *clientv3.Client, _ string) error {
			return f(ctx, cli, cli.Endpoints()[0])
		}
	}
	return []testCase{
		{"Range /svc/a/k", get("/svc/a/k")},
		{"Range /svc/b/k", get("/svc/b/k")},
		{"Range prefix /svc/a/", get("/svc/a/", clientv3.WithPrefix())},
		{"Range prefix /svc/", get("/svc/", clientv3.WithPrefix())},
		{"Range serializable /svc/a/k", get("/svc/a/k", clientv3.WithSerializable())},
		{"Range every key", get("", clientv3.WithFromKey())},
		{"Put /svc/a/k", put("/svc/a/k")},
		{"Put /svc/b/k", put("/svc/b/k")},
		{"Put /svc/a/k prev_kv", put("/svc/a/k", clientv3.WithPrevKV())},
		{"Put /svc/a/n with /svc/b's lease", put("/svc/a/n", clientv3.WithLease(lb))},
		{"DeleteRange /svc/a/none", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Delete(ctx, "/svc/a/none")
			return err
		}},
		{"DeleteRange prefix /svc/b/none", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Delete(ctx, "/svc/b/none", clientv3.WithPrefix())
			return err
		}},
		{"Txn within /svc/a/", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("/svc/a/k"), ">", 0)).
				Then(clientv3.OpPut("/svc/a/t", "v")).Else(clientv3.OpGet("/svc/a/k")).Commit()
			return err
		}},
		{"Txn else branch writes /svc/b/", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("/svc/a/k"), ">", 0)).
				Then(clientv3.OpPut("/svc/a/t", "v")).Else(clientv3.OpPut("/svc/b/t", "v")).Commit()
			return err
		}},
		{"Txn compare on /svc/b/k", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("/svc/b/k"), ">", 0)).
				Then(clientv3.OpPut("/svc/a/t", "v")).Commit()
			return err
		}},
		{"Txn read-only /svc/b/k", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Txn(ctx).Then(clientv3.OpGet("/svc/b/k")).Commit()
			return err
		}},
		{"Compact 2", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Compact(ctx, 2)
			return err
		}},
		{"Watch prefix /svc/a/", watch("/svc/a/", clientv3.WithPrefix())},
		{"Watch /svc/b/k", watch("/svc/b/k")},
		{"LeaseGrant", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Grant(ctx, 60)
			return err
		}},
		{"LeaseKeepAliveOnce (a lease on /svc/a/)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.KeepAliveOnce(ctx, la)
			return err
		}},
		{"LeaseKeepAliveOnce (a lease on /svc/b/)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.KeepAliveOnce(ctx, lb)
			return err
		}},
		{"LeaseTimeToLive (a lease on /svc/b/)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.TimeToLive(ctx, lb)
			return err
		}},
		{"LeaseTimeToLive keys (a lease on /svc/b/)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.TimeToLive(ctx, lb, clientv3.WithAttachedKeys())
			return err
		}},
		{"LeaseTimeToLive keys (a lease on /svc/a/)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.TimeToLive(ctx, la, clientv3.WithAttachedKeys())
			return err
		}},
		{"LeaseLeases", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Leases(ctx)
			return err
		}},
		{"LeaseRevoke (a lease on /svc/a/)", func(ctx context.Context, cli *clientv3.Client, who string) error {
			if who == "root" {
				return nil // root would take it from the rows below
			}
			_, err := cli.Revoke(ctx, la)
			return err
		}},
		{"LeaseRevoke (a lease on /svc/b/)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Revoke(ctx, lb)
			return err
		}},
		{"MemberList", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.MemberList(ctx)
			return err
		}},
		{"MemberUpdate (no such member)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.MemberUpdate(ctx, 1, []string{"http://127.0.0.1:1"})
			return err
		}},
		{"MemberRemove (no such member)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.MemberRemove(ctx, 1)
			return err
		}},
		{"MemberAddAsLearner (never started)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.MemberAddAsLearner(ctx, []string{"http://127.0.0.1:1"})
			return err
		}},
		{"MemberPromote (no such member)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.MemberPromote(ctx, 1)
			return err
		}},
		{"Status", maint(func(ctx context.Context, cli *clientv3.Client, ep string) error {
			_, err := cli.Status(ctx, ep)
			return err
		})},
		{"AlarmList", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.AlarmList(ctx)
			return err
		}},
		{"AlarmDisarm", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{Alarm: pb.AlarmType_NOSPACE})
			return err
		}},
		{"HashKV", maint(func(ctx context.Context, cli *clientv3.Client, ep string) error {
			_, err := cli.HashKV(ctx, ep, 0)
			return err
		})},
		{"Snapshot", maint(func(ctx context.Context, cli *clientv3.Client, _ string) error {
			rc, err := cli.Snapshot(ctx)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			return err
		})},
		{"Defragment", maint(func(ctx context.Context, cli *clientv3.Client, ep string) error {
			_, err := cli.Defragment(ctx, ep)
			return err
		})},
		{"MoveLeader (no such member)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.MoveLeader(ctx, 1)
			return err
		}},
		{"Downgrade cancel (none in flight)", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.Downgrade(ctx, clientv3.DowngradeCancel, "")
			return err
		}},
		{"AuthStatus", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.AuthStatus(ctx)
			return err
		}},
		{"UserGet self", func(ctx context.Context, cli *clientv3.Client, who string) error {
			_, err := cli.UserGet(ctx, who)
			return err
		}},
		{"UserGet root", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.UserGet(ctx, "root")
			return err
		}},
		{"UserList", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.UserList(ctx)
			return err
		}},
		{"RoleGet svc-a", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.RoleGet(ctx, "svc-a")
			return err
		}},
		{"RoleList", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.RoleList(ctx)
			return err
		}},
		{"UserAdd", func(ctx context.Context, cli *clientv3.Client, who string) error {
			_, err := cli.UserAdd(ctx, "made-by-"+who, "x")
			return err
		}},
		{"RoleGrantPermission", func(ctx context.Context, cli *clientv3.Client, _ string) error {
			_, err := cli.RoleGrantPermission(ctx, "svc-a", "/svc/b/", "/svc/b0", clientv3.PermissionType(authpb.READ))
			return err
		}},
		{"UserChangePassword self (unchanged)", func(ctx context.Context, cli *clientv3.Client, who string) error {
			name, password := who, userPassword
			switch who {
			case "anonymous":
				name = "bob"
			case "root":
				password = rootPassword
			}
			_, err := cli.UserChangePassword(ctx, name, password)
			return err
		}},
	}
}

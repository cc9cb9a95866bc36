package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMetricsExtensiveExportsRaftTimings starts a member with --metrics
// basic and then extensive, writes once, and looks for raft's own commit
// timing among the registry's series: only extensive has it.
func TestMetricsExtensiveExportsRaftTimings(t *testing.T) {
	for _, level := range []string{"basic", "extensive"} {
		t.Run(level, func(t *testing.T) {
			names := writeOnceAndGather(t, level)
			has := func(name string) bool { return strings.Contains(names, " "+name+" ") }
			for _, name := range []string{"corenode_raft_commitTime", "corenode_raft_fsm_applyBatch", "corenode_raft_leader_dispatchLog"} {
				if has(name) != (level == "extensive") {
					t.Errorf("--metrics %s: has %s: %v; series: %s", level, name, has(name), names)
				}
			}
			if !has("corenode_proposals_total") {
				t.Errorf("--metrics %s: no corenode_proposals_total among %s", level, names)
			}
		})
	}
}

// writeOnceAndGather runs a one-member cluster with --metrics level, puts
// one key and returns the names of the registry's series, each between
// spaces.
func writeOnceAndGather(t *testing.T, level string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	client := oneMember(t, reg, "--metrics="+level, "--log-outputs="+filepath.Join(t.TempDir(), "log"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := " "
	for _, f := range families {
		names += f.GetName() + " "
	}
	return names
}

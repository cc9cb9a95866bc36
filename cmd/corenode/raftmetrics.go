package main

import (
	"fmt"

	gometrics "github.com/armon/go-metrics"
	gometricsprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// exportRaftMetrics makes hashicorp/raft's own measurements series of reg,
// for --metrics extensive: the timings Consul's operators read
// (corenode_raft_commitTime, corenode_raft_leader_dispatchLog,
// corenode_raft_rpc_appendEntries_storeLogs, corenode_raft_fsm_applyBatch, ...),
// summaries in milliseconds as raft emits them. They say where a write's
// time goes between the leader's log, the followers and the state machine.
//
// raft reports to go-metrics' one global sink, so this is for a process
// that runs one member (the binary). With basic, the default, that sink
// stays go-metrics' blackhole: raft's calls cost a few nanoseconds each.
func exportRaftMetrics(reg prometheus.Registerer) error {
	sink, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{
		Registerer: reg,
		Name:       "corenode_raft_metrics",
	})
	if err != nil {
		return fmt.Errorf("--metrics extensive: exporting raft's metrics: %w", err)
	}
	cfg := gometrics.DefaultConfig("corenode")
	cfg.EnableHostname = false       // a key per host name would split one member's series
	cfg.HostName = ""                // Prometheus's instance label names the member
	cfg.EnableRuntimeMetrics = false // the Go collector exports these already, without a poller
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return fmt.Errorf("--metrics extensive: exporting raft's metrics: %w", err)
	}
	return nil
}

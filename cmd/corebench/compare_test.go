package main

import (
	"strings"
	"testing"
)

func TestRatioOrientation(t *testing.T) {
	for _, tc := range []struct {
		better, unit string
		base, other  float64
		want         float64
		bound        string
		ok           bool
	}{
		{"higher", "req/s", 1000, 2000, 2, "", true}, // twice the throughput
		{"higher", "req/s", 2000, 1000, 0.5, "", true},
		{"lower", "ms", 100, 50, 2, "", true}, // half the latency
		{"lower", "ms", 50, 100, 0.5, "", true},
		{"lower", "leases", 0, 0, 1, "", true}, // 0 early against 0 early
		{"lower", "leases", 0, 3, 0, "", false},
		{"lower", "ms", 1600, -2, 1600, "≥", true}, // a negative lag counts as 1 ms
		{"lower", "ms", 0.5, 300, 1.0 / 300, "≤", true},
		{"lower", "ms", 0.2, 0.4, 1, "≈", true},
		{"higher", "ms", 0.5, 10, 10, "≥", true},
		{"", "ms", 5, 10, 0, "", false},
	} {
		got, bound, ok := ratio(tc.better, tc.unit, tc.base, tc.other)
		if ok != tc.ok || bound != tc.bound || (ok && got != tc.want) {
			t.Errorf("ratio(%q, %q, %v, %v) = %v, %q, %v; want %v, %q, %v",
				tc.better, tc.unit, tc.base, tc.other, got, bound, ok, tc.want, tc.bound, tc.ok)
		}
	}
}

const etcdJSONL = `{"system":"etcd","workload":"put","metrics":[{"name":"rps","value":1000,"unit":"req/s","better":"higher","headline":true},{"name":"avg_ms","value":9,"unit":"ms","better":"lower"}]}
{"system":"etcd","workload":"failover","metrics":[{"name":"failover_ms","value":1500,"unit":"ms","better":"lower","headline":true}]}
{"system":"etcd","workload":"failover","metrics":[{"name":"failover_ms","value":1700,"unit":"ms","better":"lower","headline":true}]}
{"system":"etcd","workload":"failover","metrics":[{"name":"failover_ms","value":9000,"unit":"ms","better":"lower","headline":true}]}
{"system":"etcd","workload":"expiry","metrics":[{"name":"lag_p50_ms","value":1600,"unit":"ms","better":"lower","headline":true}]}
`

const corenodeJSONL = `
{"system":"corenode","workload":"expiry","metrics":[{"name":"lag_p50_ms","value":-2,"unit":"ms","better":"lower","headline":true}]}
{"system":"corenode","workload":"put","metrics":[{"name":"rps","value":1500,"unit":"req/s","better":"higher","headline":true}]}
{"system":"corenode","workload":"failover","metrics":[{"name":"failover_ms","value":800,"unit":"ms","better":"lower","headline":true}]}
{"system":"corenode","workload":"watch","metrics":[{"name":"delivery_p99_ms","value":3,"unit":"ms","better":"lower","headline":true}]}
`

func TestCompareTable(t *testing.T) {
	base, err := loadResults(strings.NewReader(etcdJSONL))
	if err != nil {
		t.Fatal(err)
	}
	other, err := loadResults(strings.NewReader(corenodeJSONL))
	if err != nil {
		t.Fatal(err)
	}
	rows := buildRows(base, other, false)
	var got []string
	for _, r := range rows {
		got = append(got, r.workload+"/"+r.metric+"="+verdict(r))
	}
	// Base order first, headline metrics only, the median of three
	// failovers (1700 ms), a sub-millisecond lag as a bound.
	want := []string{
		"put/rps=1.50",
		"failover/failover_ms=2.12",
		"expiry/lag_p50_ms=≥1600",
		"watch/delivery_p99_ms=—",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
	if all := buildRows(base, other, true); len(all) != len(rows)+1 {
		t.Errorf("--all gave %d rows, want %d", len(all), len(rows)+1)
	}

	var b strings.Builder
	renderTable(&b, label(base, "base"), label(other, "other"), rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+len(rows) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), 2+len(rows), b.String())
	}
	for _, want := range []string{"| workload", " etcd |", "corenode", "ratio (>1: corenode better)", "1000 req/s", "1500 req/s", "1700 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	width := len([]rune(lines[0]))
	for _, l := range lines {
		if len([]rune(l)) != width {
			t.Errorf("ragged table:\n%s", b.String())
			break
		}
	}
}

func TestSingleSystemTable(t *testing.T) {
	base, err := loadResults(strings.NewReader(etcdJSONL))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	renderTable(&b, "etcd", "", buildRows(base, nil, false))
	if strings.Contains(b.String(), "ratio") || !strings.Contains(b.String(), "1700 ms") {
		t.Errorf("single-system table:\n%s", b.String())
	}
}

func TestLoadResultsRejectsNonJSON(t *testing.T) {
	if _, err := loadResults(strings.NewReader("{\"workload\":\"put\"}\nSummary:\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("err = %v, want a line-2 error", err)
	}
}

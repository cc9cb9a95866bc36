package main

import (
	"strings"
	"testing"
	"time"
)

func durations(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	// 1..100 ms shuffled: the nearest-rank p-th percentile is p ms.
	var in []int
	for i := 100; i >= 1; i-- {
		in = append(in, i)
	}
	s := newStats(durations(in...), time.Second)
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{0, 1 * time.Millisecond},
		{1, 1 * time.Millisecond},
		{50, 50 * time.Millisecond},
		{90, 90 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{99.9, 100 * time.Millisecond},
		{100, 100 * time.Millisecond},
	} {
		if got := s.Percentile(tc.p); got != tc.want {
			t.Errorf("p%g = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := s.RPS(); got != 100 {
		t.Errorf("RPS = %v, want 100", got)
	}
	if s.Min() != time.Millisecond || s.Max() != 100*time.Millisecond {
		t.Errorf("min/max = %v/%v", s.Min(), s.Max())
	}
	if got, want := s.Mean(), 50500*time.Microsecond; got != want {
		t.Errorf("mean = %v, want %v", got, want)
	}
}

func TestPercentileSmallAndEmpty(t *testing.T) {
	var empty stats
	if empty.Percentile(99) != 0 || empty.Max() != 0 || empty.Mean() != 0 || empty.RPS() != 0 {
		t.Error("empty stats should report zeros")
	}
	// With 3 samples p50 is the 2nd and p99 the 3rd: never interpolated.
	s := newStats(durations(30, 10, 20), time.Second)
	if got := s.Percentile(50); got != 20*time.Millisecond {
		t.Errorf("p50 = %v", got)
	}
	if got := s.Percentile(99); got != 30*time.Millisecond {
		t.Errorf("p99 = %v", got)
	}
	// Lags can be negative (deleted just before the acknowledged deadline).
	neg := newStats(durations(-5, 3, -1), time.Second)
	if neg.Min() != -5*time.Millisecond || neg.Percentile(50) != -1*time.Millisecond {
		t.Errorf("negative samples: min %v p50 %v", neg.Min(), neg.Percentile(50))
	}
}

func TestHistogramCountsEverySample(t *testing.T) {
	s := newStats(durations(1, 1, 2, 5, 9, 10, 10, 10), time.Second)
	bounds, counts := s.histogram(3)
	if len(bounds) != 3 || bounds[2] != 10*time.Millisecond {
		t.Fatalf("bounds = %v", bounds)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	if total != s.Count() {
		t.Errorf("histogram holds %d samples, want %d (%v)", total, s.Count(), counts)
	}
	if counts[0] != 3 || counts[2] != 4 {
		t.Errorf("counts = %v, want [3 1 4]", counts)
	}
	// All samples equal: zero-width buckets must still hold the sample once.
	one := newStats(durations(7, 7), time.Second)
	if _, c := one.histogram(10); c[0]+c[9] != 2 {
		t.Errorf("equal samples counts = %v", c)
	}
}

func TestSummaryLooksLikeEtcds(t *testing.T) {
	s := newStats(durations(1, 2, 3), 3*time.Second)
	s.NErr, s.Errors = 2, map[string]int{"etcdserver: request timed out": 2}
	var b strings.Builder
	s.writeSummary(&b, "Requests")
	for _, want := range []string{"Summary:", "Total:\t3.0000 secs.", "Slowest:\t0.0030 secs.", "Fastest:\t0.0010 secs.",
		"Requests/sec:\t1.0000", "Latency distribution:", "99% in 0.0030 secs.", "[2]\tetcdserver: request timed out"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

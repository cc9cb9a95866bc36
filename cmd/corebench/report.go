package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Metric is one number a workload reports. Better says which direction wins
// ("higher", "lower", or "" for context that has no winner), so the compare
// table can orient every ratio the same way without knowing the workload.
type Metric struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Better string  `json:"better,omitempty"`
	// Headline metrics make the compare table; the rest stay in the JSON.
	Headline bool `json:"headline,omitempty"`
}

// Result is one workload run against one system: the JSON line that
// `corebench compare` reads, plus the human summary.
type Result struct {
	System       string            `json:"system"`
	Workload     string            `json:"workload"`
	Started      time.Time         `json:"started"`
	Params       map[string]string `json:"params,omitempty"`
	Metrics      []Metric          `json:"metrics"`
	Errors       int               `json:"errors"`
	ErrorSamples map[string]int    `json:"error_samples,omitempty"`
	Text         string            `json:"-"`
}

func (r *Result) add(name string, value float64, unit, better string, headline bool) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: value, Unit: unit, Better: better, Headline: headline})
}

// addLatency adds the distribution of s as metrics named prefix_p50_ms and
// so on; the p50 and p99 are headlines.
func (r *Result) addLatency(prefix string, s stats) {
	if s.Count() == 0 {
		return
	}
	r.add(prefix+"avg_ms", ms(s.Mean()), "ms", "lower", false)
	r.add(prefix+"p50_ms", ms(s.Percentile(50)), "ms", "lower", true)
	r.add(prefix+"p90_ms", ms(s.Percentile(90)), "ms", "lower", false)
	r.add(prefix+"p99_ms", ms(s.Percentile(99)), "ms", "lower", true)
	r.add(prefix+"max_ms", ms(s.Max()), "ms", "lower", false)
}

func (r *Result) addErrors(s stats) {
	r.Errors += s.NErr
	if len(s.Errors) == 0 {
		return
	}
	if r.ErrorSamples == nil {
		r.ErrorSamples = map[string]int{}
	}
	for k, v := range s.Errors {
		r.ErrorSamples[k] += v
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// stats is the outcome of many timed operations: the latencies of the ones
// that succeeded (sorted), the errors of the ones that failed, and the wall
// time they took together.
type stats struct {
	Wall   time.Duration
	Sorted []time.Duration
	NErr   int
	Errors map[string]int
}

func newStats(lats []time.Duration, wall time.Duration) stats {
	s := stats{Wall: wall, Sorted: slices.Clone(lats)}
	slices.Sort(s.Sorted)
	return s
}

func (s stats) Count() int { return len(s.Sorted) }

func (s stats) Min() time.Duration {
	if len(s.Sorted) == 0 {
		return 0
	}
	return s.Sorted[0]
}

func (s stats) Max() time.Duration {
	if len(s.Sorted) == 0 {
		return 0
	}
	return s.Sorted[len(s.Sorted)-1]
}

func (s stats) Mean() time.Duration {
	if len(s.Sorted) == 0 {
		return 0
	}
	var sum float64
	for _, d := range s.Sorted {
		sum += float64(d)
	}
	return time.Duration(sum / float64(len(s.Sorted)))
}

func (s stats) Stddev() time.Duration {
	if len(s.Sorted) < 2 {
		return 0
	}
	mean := float64(s.Mean())
	var sq float64
	for _, d := range s.Sorted {
		sq += (float64(d) - mean) * (float64(d) - mean)
	}
	return time.Duration(math.Sqrt(sq / float64(len(s.Sorted))))
}

// Percentile is the nearest-rank percentile: the smallest latency that at
// least p percent of the samples do not exceed. Unlike interpolation it is
// always a latency that was actually observed, as in etcd's report.
func (s stats) Percentile(p float64) time.Duration {
	n := len(s.Sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return s.Sorted[rank-1]
}

// RPS counts successes only, as etcd's benchmark does, so a run full of
// fast failures cannot look fast.
func (s stats) RPS() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(len(s.Sorted)) / s.Wall.Seconds()
}

// histogram splits [Min, Max] into n equal buckets and counts the samples
// in each, as etcd's "Response time histogram" does. Each bucket is named
// by its upper bound.
func (s stats) histogram(n int) (bounds []time.Duration, counts []int) {
	if len(s.Sorted) == 0 || n < 1 {
		return nil, nil
	}
	lo, hi := s.Min(), s.Max()
	width := (hi - lo) / time.Duration(n)
	bounds = make([]time.Duration, n)
	for i := range bounds {
		bounds[i] = lo + width*time.Duration(i+1)
	}
	bounds[n-1] = hi // integer division must not drop the slowest sample
	counts = make([]int, n)
	b := 0
	for _, d := range s.Sorted {
		for b < n-1 && d > bounds[b] {
			b++
		}
		counts[b]++
	}
	return bounds, counts
}

// writeSummary prints s the way etcd's benchmark tool does, so readers who
// know its output can read ours; "what" names the timed operations.
func (s stats) writeSummary(w io.Writer, what string) {
	fmt.Fprintf(w, "\nSummary:\n")
	fmt.Fprintf(w, "  Total:\t%.4f secs.\n", s.Wall.Seconds())
	fmt.Fprintf(w, "  Slowest:\t%.4f secs.\n", s.Max().Seconds())
	fmt.Fprintf(w, "  Fastest:\t%.4f secs.\n", s.Min().Seconds())
	fmt.Fprintf(w, "  Average:\t%.4f secs.\n", s.Mean().Seconds())
	fmt.Fprintf(w, "  Stddev:\t%.4f secs.\n", s.Stddev().Seconds())
	fmt.Fprintf(w, "  %s/sec:\t%.4f\n", what, s.RPS())
	if bounds, counts := s.histogram(10); len(bounds) > 0 {
		fmt.Fprintf(w, "\nResponse time histogram:\n")
		most := slices.Max(counts)
		for i := range bounds {
			bar := 0
			if most > 0 {
				bar = counts[i] * 40 / most
			}
			fmt.Fprintf(w, "  %.4f [%d]\t|%s\n", bounds[i].Seconds(), counts[i], strings.Repeat("∎", bar))
		}
		fmt.Fprintf(w, "\nLatency distribution:\n")
		for _, p := range []float64{10, 25, 50, 75, 90, 95, 99, 99.9} {
			fmt.Fprintf(w, "  %g%% in %.4f secs.\n", p, s.Percentile(p).Seconds())
		}
	}
	if s.NErr > 0 {
		fmt.Fprintf(w, "\nError distribution:\n")
		keys := slices.Collect(maps.Keys(s.Errors))
		sort.Slice(keys, func(i, j int) bool { return s.Errors[keys[i]] > s.Errors[keys[j]] })
		for _, k := range keys {
			fmt.Fprintf(w, "  [%d]\t%s\n", s.Errors[k], k)
		}
	}
}

// recorder collects outcomes from many goroutines. Workers keep latencies
// in their own slices and merge once, so the lock is not on the hot path.
type recorder struct {
	done, failed atomic.Int64

	mu     sync.Mutex
	lats   []time.Duration
	errors map[string]int
}

// maxErrorKinds bounds the error map when a server returns errors that
// differ per request (ids in the text), so a failing run cannot eat memory.
const maxErrorKinds = 50

func (r *recorder) fail(err error) {
	r.failed.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errors == nil {
		r.errors = map[string]int{}
	}
	msg := err.Error()
	if _, ok := r.errors[msg]; !ok && len(r.errors) >= maxErrorKinds {
		msg = "(other errors)"
	}
	r.errors[msg]++
}

func (r *recorder) merge(lats []time.Duration) {
	r.mu.Lock()
	r.lats = append(r.lats, lats...)
	r.mu.Unlock()
}

func (r *recorder) stats(wall time.Duration) stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := newStats(r.lats, wall)
	s.NErr = int(r.failed.Load())
	s.Errors = maps.Clone(r.errors)
	return s
}

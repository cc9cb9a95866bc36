package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// compareMain prints a table of two systems' results side by side, with a
// ratio oriented so that above 1 always means the second system did better.
func compareMain(args []string) error {
	fs := flag.NewFlagSet("corebench compare", flag.ContinueOnError)
	all := fs.Bool("all", false, "show every metric, not only the headline ones")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: corebench compare [--all] BASE.jsonl [OTHER.jsonl]\n\n"+
			"Each file holds the JSON lines of corebench --json runs of one system; a workload run\n"+
			"several times is summarised by the median of each metric. The ratio is OTHER/BASE for\n"+
			"higher-is-better metrics and BASE/OTHER for lower-is-better ones, so >1 means OTHER is better.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 && fs.NArg() != 2 {
		fs.Usage()
		return errors.New("want one or two files")
	}
	var sides [2][]Result
	for i := range fs.NArg() {
		f, err := os.Open(fs.Arg(i))
		if err != nil {
			return err
		}
		sides[i], err = loadResults(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(i), err)
		}
	}
	if fs.NArg() == 1 {
		renderTable(os.Stdout, label(sides[0], "base"), "", buildRows(sides[0], nil, *all))
		return nil
	}
	renderTable(os.Stdout, label(sides[0], "base"), label(sides[1], "other"), buildRows(sides[0], sides[1], *all))
	return nil
}

func label(rs []Result, fallback string) string {
	for _, r := range rs {
		if r.System != "" {
			return r.System
		}
	}
	return fallback
}

// loadResults reads JSON lines; lines that are not JSON objects (a stray
// log line in a redirected stdout) are an error, not silently dropped.
func loadResults(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

type row struct {
	workload, metric, unit, better string
	base, other                    float64
	hasBase, hasOther              bool
}

// buildRows lines up the metrics of two runs: workloads in the order they
// first appear (base first), metrics in the order each workload reports
// them, repeated runs reduced to their median.
func buildRows(base, other []Result, all bool) []row {
	type key struct{ workload, metric string }
	var order []key
	seen := map[key]*row{}
	values := [2]map[key][]float64{{}, {}}
	for side, rs := range [2][]Result{base, other} {
		for _, r := range rs {
			for _, m := range r.Metrics {
				if !all && !m.Headline {
					continue
				}
				k := key{r.Workload, m.Name}
				if _, ok := seen[k]; !ok {
					seen[k] = &row{workload: k.workload, metric: k.metric, unit: m.Unit, better: m.Better}
					order = append(order, k)
				}
				values[side][k] = append(values[side][k], m.Value)
			}
		}
	}
	// Keep a workload's rows together even if the other side reported a
	// metric the base side did not.
	var workloads []string
	for _, k := range order {
		if !slices.Contains(workloads, k.workload) {
			workloads = append(workloads, k.workload)
		}
	}
	var out []row
	for _, w := range workloads {
		for _, k := range order {
			if k.workload != w {
				continue
			}
			r := seen[k]
			if v := values[0][k]; len(v) > 0 {
				r.base, r.hasBase = median(v), true
			}
			if v := values[1][k]; len(v) > 0 {
				r.other, r.hasOther = median(v), true
			}
			out = append(out, *r)
		}
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// msFloor is the smallest latency a ratio takes at face value. Below a
// millisecond the numbers are this client's timing noise, and expiry lags
// can even be negative (the deadline is only known to within the grant's
// round trip), where a quotient would be meaningless.
const msFloor = 1.0

// ratio orients other against base so that >1 means other is better:
// other/base for higher-is-better metrics, base/other for lower-is-better.
// Millisecond values under msFloor count as msFloor, and bound says which
// way the true ratio may lie then ("≥", "≤", or "≈" when both were raised).
// It is undefined (ok false) when the metric has no better direction or,
// for other units, a value is zero or negative.
func ratio(better, unit string, base, other float64) (q float64, bound string, ok bool) {
	if better != "higher" && better != "lower" {
		return 0, "", false
	}
	if base == other {
		return 1, "", true
	}
	if unit == "ms" {
		lowBase, lowOther := base < msFloor, other < msFloor
		base, other = max(base, msFloor), max(other, msFloor)
		switch {
		case lowBase && lowOther:
			bound = "≈"
		case lowOther == (better == "lower"):
			// The raised value is the better side's: the true ratio is
			// at least as far in its favour.
			bound = "≥"
		default:
			bound = "≤"
		}
		if !lowBase && !lowOther {
			bound = ""
		}
	}
	if base <= 0 || other <= 0 {
		return 0, "", false
	}
	if better == "higher" {
		return other / base, bound, true
	}
	return base / other, bound, true
}

// verdict is the ratio column; where a quotient is undefined it says in
// words which side is better.
func verdict(r row) string {
	if !r.hasBase || !r.hasOther {
		return "—"
	}
	if q, bound, ok := ratio(r.better, r.unit, r.base, r.other); ok {
		switch {
		case q >= 100:
			return fmt.Sprintf("%s%.0f", bound, q)
		case q >= 10:
			return fmt.Sprintf("%s%.1f", bound, q)
		}
		return fmt.Sprintf("%s%.2f", bound, q)
	}
	switch {
	case r.better == "lower" && r.other < r.base, r.better == "higher" && r.other > r.base:
		return "n/a (better)"
	case r.better == "lower" && r.other > r.base, r.better == "higher" && r.other < r.base:
		return "n/a (worse)"
	}
	return "n/a"
}

func formatValue(v float64, unit string, ok bool) string {
	if !ok {
		return "—"
	}
	var s string
	switch {
	case math.Abs(v) >= 100 || v == math.Trunc(v):
		s = fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

// renderTable prints a markdown table; with no otherLabel it lists the
// base system's numbers alone.
func renderTable(w io.Writer, baseLabel, otherLabel string, rows []row) {
	header := []string{"workload", "metric", "better", baseLabel}
	if otherLabel != "" {
		header = append(header, otherLabel, "ratio (>1: "+otherLabel+" better)")
	}
	cells := [][]string{header}
	for _, r := range rows {
		better := r.better
		if better == "" {
			better = "—"
		}
		c := []string{r.workload, r.metric, better, formatValue(r.base, r.unit, r.hasBase)}
		if otherLabel != "" {
			c = append(c, formatValue(r.other, r.unit, r.hasOther), verdict(r))
		}
		cells = append(cells, c)
	}
	widths := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range row {
			pad := widths[i] - len([]rune(c))
			if i >= 3 { // numbers align right
				fmt.Fprintf(&b, " %s%s |", strings.Repeat(" ", pad), c)
			} else {
				fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", pad))
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(cells[0])
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", widths[i])
		if i >= 3 {
			sep[i] = sep[i][:widths[i]-1] + ":"
		}
	}
	line(sep)
	for _, row := range cells[1:] {
		line(row)
	}
}

package checker

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// regState is one key: its value ("" = absent; the workload never writes
// "") and its mod revision when known. A write whose answer was lost
// leaves the revision unknown until a read shows it.
type regState struct {
	Value string
	Rev   int64
	Known bool
}

type regIn struct {
	Kind      string
	Value     string // written
	Expect    string
	ExpectRev int64
}

type regOut struct {
	Unknown bool
	// get: Value/Rev read. put, swapped cas: Rev written.
	Value   string
	Rev     int64
	Swapped bool
	// failed cas: what its else branch read.
	Found   bool
	Read    string
	ReadRev int64
}

// registerModel is the sequential spec of one etcd key under get, put and
// compare-and-set on value or mod revision. Besides values it checks
// revisions: a read returns the revision of the write it reads, and each
// write's revision is above the previous one's.
var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{Known: true}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regIn), output.(regOut)
		written := func(rev int64) []any {
			if out.Unknown {
				return []any{regState{Value: in.Value}}
			}
			if s.Known && rev <= s.Rev {
				return nil
			}
			return []any{regState{Value: in.Value, Rev: rev, Known: true}}
		}
		// observe checks a read of (found, value, rev) against the state
		// and learns the revision if it was unknown.
		observe := func(value string, rev int64) []any {
			if value != s.Value || (s.Known && rev != s.Rev) {
				return nil
			}
			return []any{regState{Value: s.Value, Rev: rev, Known: true}}
		}
		switch in.Kind {
		case history.KindGet:
			return observe(out.Value, out.Rev)
		case history.KindPut:
			return written(out.Rev)
		case history.KindCASValue:
			holds := s.Value == in.Expect
			switch {
			case out.Unknown && holds:
				return written(0)
			case out.Unknown:
				return []any{s}
			case out.Swapped:
				if !holds {
					return nil
				}
				return written(out.Rev)
			default:
				if holds {
					return nil
				}
				return observe(out.Read, out.ReadRev)
			}
		case history.KindCASRev:
			// An absent key compares as mod revision 0, as in etcd.
			if out.Unknown {
				switch {
				case !s.Known:
					return append(written(0), s)
				case s.Rev == in.ExpectRev:
					return written(0)
				default:
					return []any{s}
				}
			}
			if out.Swapped {
				if s.Known && s.Rev != in.ExpectRev {
					return nil
				}
				return written(out.Rev)
			}
			if out.ReadRev == in.ExpectRev {
				return nil // the else branch read what the compare said was not there
			}
			return observe(out.Read, out.ReadRev)
		}
		return nil
	},
	Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(regIn), output.(regOut)
		res := ""
		switch {
		case out.Unknown:
			res = "?"
		case in.Kind == history.KindGet:
			res = fmt.Sprintf("%q@%d", out.Value, out.Rev)
		case in.Kind == history.KindPut || out.Swapped:
			res = fmt.Sprintf("ok@%d", out.Rev)
		default:
			res = fmt.Sprintf("no, saw %q@%d", out.Read, out.ReadRev)
		}
		switch in.Kind {
		case history.KindGet:
			return "get -> " + res
		case history.KindPut:
			return fmt.Sprintf("put(%s) -> %s", in.Value, res)
		case history.KindCASValue:
			return fmt.Sprintf("cas(value=%s, %s) -> %s", in.Expect, in.Value, res)
		default:
			return fmt.Sprintf("cas(rev=%d, %s) -> %s", in.ExpectRev, in.Value, res)
		}
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		if !s.Known {
			return fmt.Sprintf("%q@?", s.Value)
		}
		return fmt.Sprintf("%q@%d", s.Value, s.Rev)
	},
}

// Linearizable checks the register ops key by key with porcupine. Ops with
// an unknown outcome return at the end of the history: they may take
// effect at any time after they started, or never. Failed reads are left
// out (they have no effect). Illegal keys get a visualization in outDir.
func Linearizable(ops []history.Op, prefix string, budget time.Duration, outDir string) Result {
	r := Result{Name: "linearizable"}
	var endOfHistory int64
	byKey := map[string][]history.Op{}
	for _, op := range ops {
		endOfHistory = max(endOfHistory, op.End)
		if !strings.HasPrefix(op.Key, prefix) {
			continue
		}
		switch op.Kind {
		case history.KindGet:
			if op.Result != history.OK {
				continue
			}
		case history.KindPut, history.KindCASValue, history.KindCASRev:
		default:
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	model := registerModel.ToModel()
	deadline := time.Now().Add(budget)
	var nops, unknown, undecided int
	for _, key := range keys {
		var pops []porcupine.Operation
		for _, op := range byKey[key] {
			in := regIn{Kind: op.Kind, Value: op.Value, Expect: op.Expect, ExpectRev: op.ExpectRev}
			out := regOut{Value: op.Value, Rev: op.Rev, Swapped: op.Swapped, Found: op.Found, Read: op.Read, ReadRev: op.ReadRev}
			ret := op.End
			if op.Result == history.Unknown {
				out = regOut{Unknown: true}
				ret = endOfHistory + 1
				unknown++
			}
			pops = append(pops, porcupine.Operation{ClientId: op.Process, Input: in, Call: op.Start, Output: out, Return: ret, Metadata: op.ID})
		}
		nops += len(pops)
		left := time.Until(deadline)
		if left <= 0 {
			undecided++
			continue
		}
		res, info := porcupine.CheckOperationsVerbose(model, pops, min(left, budget/2))
		switch res {
		case porcupine.Illegal:
			base := filepath.Join(outDir, "linearizability-"+strings.ReplaceAll(strings.TrimPrefix(key, prefix), "/", "_"))
			files := base + ".html, " + base + ".txt"
			if err := porcupine.VisualizePath(model, info, base+".html"); err != nil {
				files = "visualization failed: " + err.Error()
			}
			if err := writeKeyHistory(base+".txt", byKey[key]); err != nil {
				files += "; " + err.Error()
			}
			r.add(fmt.Sprintf("history of %s is not linearizable (%d ops; see %s)", key, len(pops), files))
		case porcupine.Unknown:
			undecided++
		}
	}
	if undecided > 0 {
		r.Unknown = true
		r.stat("%d keys undecided within the %v budget", undecided, budget)
	}
	r.stat("%d keys, %d ops (%d indeterminate)", len(keys), nops, unknown)
	return r
}

// writeKeyHistory saves one key's ops for narrowing an anomaly down.
func writeKeyHistory(path string, ops []history.Op) error {
	var b strings.Builder
	for _, op := range ops {
		b.WriteString(Describe(op))
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("checker: write %s: %w", path, err)
	}
	return nil
}

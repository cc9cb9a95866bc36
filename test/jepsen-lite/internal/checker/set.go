package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// Set checks the set workload against the final reads: every acknowledged
// add is there with its value, nothing is there that was never added, and
// every member returns the same set (the reads ran after the faults healed
// and the writes stopped, so each is linearizable and must agree).
func Set(ops []history.Op, prefix string) Result {
	r := Result{Name: "set"}
	adds := map[string]history.Op{}
	for _, op := range ops {
		if op.Kind == history.KindAdd {
			adds[op.Key] = op
		}
	}
	final := map[int]history.Op{} // member -> its last successful read
	for _, op := range ops {
		if op.Kind == history.KindRead && op.Key == prefix && op.Result == history.OK {
			final[op.Member] = op
		}
	}
	if len(final) == 0 {
		r.add("no final read succeeded: lost writes cannot be ruled out")
		return r
	}
	members := make([]int, 0, len(final))
	for m := range final {
		members = append(members, m)
	}
	slices.Sort(members)
	var acked, unknownIn, unknownOut int
	for _, m := range members {
		read := final[m]
		got := map[string]string{}
		for i, k := range read.Keys {
			got[k] = read.Values[i]
		}
		var lost, wrong []string
		for k, add := range adds {
			v, ok := got[k]
			switch {
			case add.Result == history.OK && !ok:
				lost = append(lost, k)
			case ok && v != add.Value:
				wrong = append(wrong, fmt.Sprintf("%s=%s (wrote %s)", k, v, add.Value))
			}
			if m == members[0] {
				switch {
				case add.Result == history.OK:
					acked++
				case ok:
					unknownIn++
				default:
					unknownOut++
				}
			}
		}
		var phantom []string
		for k := range got {
			if _, ok := adds[k]; !ok {
				phantom = append(phantom, k)
			}
		}
		slices.Sort(lost)
		slices.Sort(wrong)
		slices.Sort(phantom)
		if len(lost) > 0 {
			var lostOps []history.Op
			for _, k := range lost[:min(len(lost), 10)] {
				lostOps = append(lostOps, adds[k])
			}
			lostOps = append(lostOps, read)
			r.add(fmt.Sprintf("%d acknowledged adds missing from the final read through member %d: %s",
				len(lost), m+1, abbreviate(lost)), lostOps...)
		}
		if len(wrong) > 0 {
			r.add(fmt.Sprintf("%d keys with a value never written to them, read through member %d: %s", len(wrong), m+1, abbreviate(wrong)), read)
		}
		if len(phantom) > 0 {
			r.add(fmt.Sprintf("%d keys never added, read through member %d: %s", len(phantom), m+1, abbreviate(phantom)), read)
		}
	}
	ref := final[members[0]]
	for _, m := range members[1:] {
		if !slices.Equal(ref.Keys, final[m].Keys) || !slices.Equal(ref.Values, final[m].Values) {
			r.add(fmt.Sprintf("members %d and %d return different sets after the run (%d vs %d keys)",
				members[0]+1, m+1, len(ref.Keys), len(final[m].Keys)), ref, final[m])
		}
	}
	r.stat("%d adds acknowledged, %d indeterminate of which %d present, %d final reads", acked, unknownIn+unknownOut, unknownIn, len(final))
	return r
}

func abbreviate(s []string) string {
	if len(s) > 10 {
		return strings.Join(s[:10], ", ") + fmt.Sprintf(", ... (%d more)", len(s)-10)
	}
	return strings.Join(s, ", ")
}

package member_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

// TestLogVerification: with checkpoints every 100 ms, every member
// verifies ranges of its raft log against the leader's sums while the
// cluster takes writes, and none reports a mismatch (a false alarm would
// raise CORRUPT on a healthy member).
func TestLogVerification(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(i int, cfg *member.Config) {
		cfg.Metrics = prometheus.NewRegistry()
		cfg.LogVerifyInterval = 100 * time.Millisecond
	}))
	ctx := ctxT(t)
	cli := c.Client(c.WaitLeader())
	count := func(i int, result string) float64 {
		return scrape(t, c.ClientURL(i))[`corenode_log_verifications_total{result="`+result+`"}`]
	}
	for i := range 200 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/verify/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	membertest.Eventually(t, 10*time.Second, func() bool {
		for i := range 3 {
			if count(i, "ok") < 3 {
				return false
			}
		}
		return true
	}, "not every member verified three ranges of its log")
	for i := range 3 {
		if n := count(i, "mismatch"); n != 0 {
			t.Errorf("member %d reported %v mismatches on a healthy cluster", i, n)
		}
	}
}

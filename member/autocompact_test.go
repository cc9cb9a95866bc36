package member

import (
	"testing"
	"time"
)

func TestPeriodicTarget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := []revSample{{t0, 10}, {t0.Add(time.Minute), 20}, {t0.Add(2 * time.Minute), 30}, {t0.Add(3 * time.Minute), 40}}
	for _, c := range []struct {
		now        time.Duration
		want, left int
	}{
		{now: 30 * time.Second, want: 0, left: 4}, // nothing an hour old yet... nor keep old
		{now: 2 * time.Minute, want: 10, left: 4}, // the first sample is exactly keep old
		{now: 3*time.Minute + time.Second, want: 20, left: 3},
		{now: 10 * time.Minute, want: 40, left: 1}, // the newest stays, for next time
	} {
		got, rest := periodicTarget(s, t0.Add(c.now), 2*time.Minute)
		if got != int64(c.want) || len(rest) != c.left {
			t.Errorf("at +%v: target %d with %d samples left, want %d with %d", c.now, got, len(rest), c.want, c.left)
		}
	}
}

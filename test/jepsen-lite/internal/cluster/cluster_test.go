package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/corenode/corenode/member"
)

// The docker-compose members get no --read-lease-duration, so the
// cached-read workload sizes its pauses on DefaultSettings.ReadLeaseMS as
// the binary's default.
func TestDefaultReadLeaseIsTheBinarys(t *testing.T) {
	if got := DefaultSettings.ReadLease(); got != member.DefaultReadLeaseDuration {
		t.Fatalf("DefaultSettings.ReadLeaseMS is %v, corenode's default %v", got, member.DefaultReadLeaseDuration)
	}
}

func TestSettingsFlags(t *testing.T) {
	s := DefaultSettings
	s.ReadLeaseMS = 1500
	f := s.flags()
	i := slices.Index(f, "--read-lease-duration")
	if i < 0 || i+1 >= len(f) {
		t.Fatalf("no --read-lease-duration in %v", f)
	}
	if d, err := time.ParseDuration(f[i+1]); err != nil || d != 1500*time.Millisecond {
		t.Fatalf("--read-lease-duration %q: %v %v", f[i+1], d, err)
	}
	s.ReadLeaseMS = 0
	if slices.Contains(s.flags(), "--read-lease-duration") {
		t.Fatalf("ReadLeaseMS 0 still passes --read-lease-duration: %v", s.flags())
	}
}

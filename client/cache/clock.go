package cache

import "time"

// Clock is the monotonic clock the cache judges leases by (WithClock), so
// unit tests step a fake clock and assert the exact instant an entry stops
// being served. The real clock's readings carry Go's monotonic reading, so
// deadlines never follow a wall-clock step: only the clock's rate matters
// (see DefaultDriftMargin).
//
// Only lease deadlines go through it. The reconnect backoff uses real
// timers: it decides nothing about safety, and tests should not have to
// step the lease clock to get a session re-opened.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

package auth

import (
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Failed logins slow a guesser down per user: after FreeFailures
// consecutive failures, a user's next attempt is refused, without looking
// at the password, until a back-off has passed since the last failure. The
// back-off starts at FirstBackoff and doubles with each further failure up
// to MaxBackoff; a successful login resets it. A guesser thus gets about
// one try per MaxBackoff per user per member, while the real user, once the
// guessing stops, waits at most MaxBackoff. Refusals cost no bcrypt, so a
// flood of them costs the member nothing either.
const (
	FreeFailures = 5
	FirstBackoff = 100 * time.Millisecond
	MaxBackoff   = 10 * time.Second
)

// logins tracks consecutive failures by user name. Only names of existing
// users are tracked, so the table is bounded by the users there are.
type logins struct {
	now func() time.Time

	mu       sync.Mutex
	failures map[string]failures
}

type failures struct {
	count int
	last  time.Time
}

func newLogins(now func() time.Time) *logins {
	return &logins{now: now, failures: map[string]failures{}}
}

// backoff is how long after the last of n consecutive failures the next
// attempt is refused.
func backoff(n int) time.Duration {
	if n < FreeFailures {
		return 0
	}
	d := FirstBackoff
	for i := FreeFailures; i < n && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

func (l *logins) allowed(user string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.failures[user]
	return l.now().Sub(f.last) >= backoff(f.count)
}

func (l *logins) record(user string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		delete(l.failures, user)
		return
	}
	f := l.failures[user]
	l.failures[user] = failures{count: f.count + 1, last: l.now()}
}

// LoginError says why a login failed, for the failure metric: "password",
// "user" (no such user, or one without a password) or "backoff" (refused
// unchecked after too many failures). Err is what the client hears.
type LoginError struct {
	Reason string
	Err    error
}

func (e *LoginError) Error() string { return e.Err.Error() }
func (e *LoginError) Unwrap() error { return e.Err }

// Login checks a user's password against this member's state, as etcd's
// CheckPassword, and returns the auth revision it was checked at: the
// Authenticate entry carries it, and applies only if nothing changed
// since. It costs one bcrypt comparison, outside any lock.
func (s *Store) Login(name, password string) (uint64, error) {
	st := s.cur.Load()
	if !st.enabled {
		return 0, ErrAuthNotEnabled
	}
	u := st.users[name]
	if u == nil {
		return 0, &LoginError{Reason: "user", Err: ErrAuthFailed}
	}
	if u.Options != nil && u.Options.NoPassword {
		return 0, &LoginError{Reason: "user", Err: ErrNoPasswordUser}
	}
	if !s.logins.allowed(name) {
		return 0, &LoginError{Reason: "backoff", Err: ErrAuthFailed}
	}
	if bcrypt.CompareHashAndPassword(u.Password, []byte(password)) != nil {
		s.logins.record(name, false)
		return 0, &LoginError{Reason: "password", Err: ErrAuthFailed}
	}
	s.logins.record(name, true)
	return st.revision, nil
}

package auth

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Config sets a member's local auth behaviour; the replicated state is the
// same on every member whatever it says.
type Config struct {
	// Tokens is the kind of token this member issues and accepts (etcd's
	// --auth-token); the zero value is simple tokens. Every member of a
	// cluster should have the same: a client's token is judged by whichever
	// member it reaches.
	Tokens TokenKind
	// TokenTTL is how long a simple token stays valid after its last use
	// (etcd's --auth-token-ttl). Zero means 300 s, as etcd. A JWT carries
	// its own expiry (the jwt option ttl).
	TokenTTL time.Duration
	// BcryptCost is the cost of password hashes made on this member
	// (etcd's --bcrypt-cost). Zero means bcrypt.DefaultCost (10).
	BcryptCost int
	// Now is the member's clock; nil means time.Now. Token lifetimes and
	// the back-off after failed logins are judged on it.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.TokenTTL <= 0 {
		c.TokenTTL = 300 * time.Second
	}
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// ValidBcryptCost reports whether cost is one bcrypt accepts.
func ValidBcryptCost(cost int) bool { return cost >= bcrypt.MinCost && cost <= bcrypt.MaxCost }

// tokenProvider issues and resolves one kind of token. Implementations
// are safe for concurrent use: Apply issues and invalidates (one call at a
// time, in log order) while any goroutine resolves.
type tokenProvider interface {
	// issue returns the token for user, logged in by the entry at index
	// when the auth revision was rev; prefix is the random part the
	// member that received the login chose.
	issue(prefix string, index uint64, user string, rev uint64) (string, error)
	// info resolves token; current is the auth revision now. ok is false
	// for a token that is unknown, forged or expired.
	info(token string, current uint64) (ai Info, ok bool)
	// invalidateUser drops user's tokens (a password change, a deletion).
	invalidateUser(user string)
	// clear drops every token (AuthDisable).
	clear()
}

// tokens are the simple tokens this member knows: issued by applying an
// Authenticate entry (so every member knows every token), each valid until
// TokenTTL passes without a use, as etcd's simple tokens.
type tokens struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	byToken   map[string]tokenEntry
	lastSweep time.Time
}

type tokenEntry struct {
	user string
	used time.Time
}

func newTokens(ttl time.Duration, now func() time.Time) *tokens {
	return &tokens{ttl: ttl, now: now, byToken: map[string]tokenEntry{}, lastSweep: now()}
}

// tokenFor is etcd's simple token: the random prefix the receiving member
// chose, then the raft index of the entry that issued it, which makes it
// unique even if two prefixes collide.
func tokenFor(prefix string, index uint64) string {
	return prefix + "." + strconv.FormatUint(index, 10)
}

// NewTokenPrefix returns a fresh random token prefix (16 letters, as etcd).
func NewTokenPrefix() (string, error) {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: token prefix: %w", err)
	}
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b), nil
}

func (t *tokens) issue(prefix string, index uint64, user string, _ uint64) (string, error) {
	token := tokenFor(prefix, index)
	t.assign(token, user)
	return token, nil
}

// info resolves a simple token at the current revision: a simple token is
// dropped, not aged, when its user's credentials change.
func (t *tokens) info(token string, current uint64) (Info, bool) {
	user, ok := t.lookup(token)
	if !ok {
		return Info{}, false
	}
	return Info{User: user, Revision: current}, true
}

func (t *tokens) assign(token, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweepLocked(now)
	t.byToken[token] = tokenEntry{user: user, used: now}
}

// lookup returns the token's user and renews its lifetime.
func (t *tokens) lookup(token string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	e, ok := t.byToken[token]
	if !ok {
		return "", false
	}
	if now.Sub(e.used) >= t.ttl {
		delete(t.byToken, token)
		return "", false
	}
	e.used = now
	t.byToken[token] = e
	t.sweepLocked(now)
	return e.user, true
}

// sweepLocked drops expired tokens at most once per TTL, so the table is
// bounded by the tokens issued in two TTLs without a timer of its own.
func (t *tokens) sweepLocked(now time.Time) {
	if now.Sub(t.lastSweep) < t.ttl {
		return
	}
	t.lastSweep = now
	for k, e := range t.byToken {
		if now.Sub(e.used) >= t.ttl {
			delete(t.byToken, k)
		}
	}
}

func (t *tokens) invalidateUser(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.byToken {
		if e.user == user {
			delete(t.byToken, k)
		}
	}
}

func (t *tokens) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.byToken)
}

// InfoFromToken returns who a token acts for and at which auth revision:
// the current one for a simple token, the one it was issued at for a JWT
// (so any auth change since makes it ErrAuthOldRevision, and clients log
// in again, as with etcd). It returns ErrInvalidAuthToken for a token this
// member does not know, cannot verify, or that has expired.
func (s *Store) InfoFromToken(token string) (Info, error) {
	token = strings.TrimPrefix(token, "Bearer ")
	ai, ok := s.tokens.info(token, s.Revision())
	if !ok {
		return Info{}, ErrInvalidAuthToken
	}
	return ai, nil
}

// InfoFromCommonName returns who a client certificate acts for (its
// common name is the user, as etcd's --client-cert-auth), or the zero
// Info when no such user exists.
func (s *Store) InfoFromCommonName(cn string) Info {
	st := s.cur.Load()
	if cn == "" || st.users[cn] == nil {
		return Info{}
	}
	return Info{User: cn, Revision: st.revision}
}

// HashPassword returns the base64 bcrypt hash that UserAdd and
// UserChangePassword carry through the log in place of the password.
func HashPassword(password string, cost int) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		return "", fmt.Errorf("auth: hash password: %w", err)
	}
	return base64.StdEncoding.EncodeToString(h), nil
}

// BcryptCost is the cost this member hashes new passwords with.
func (s *Store) BcryptCost() int { return s.cost }

// Package auth is corenode's access control, with etcd's model and
// answers: users with bcrypt password hashes (or none, for certificate
// users), roles that grant read, write or both on a key, a range or a
// prefix, the "root" role that may do everything, and the auth revision,
// which every change advances so a request checked against an older
// revision is refused where it applies (ErrAuthOldRevision) rather than
// acted on with permissions that were since taken away.
//
// Its contract. The replicated state changes only through Apply and
// Restore, called by the state machine one at a time in log order, and
// Apply decides from the entry and the state before it alone, so every
// member decides alike. Permission checks (the Is*Permitted and Check*
// methods) read an immutable view that Apply swaps in atomically, so the
// request path takes no lock; every method but Apply, Restore and Marshal
// may be called from any goroutine. The package starts no goroutine.
// Password hashing and checking (bcrypt, tens of milliseconds by design)
// happen on the member that receives the request (Login, HashPassword),
// never in Apply: a log entry carries a hash, never a password, and
// applying it costs microseconds.
//
// What is member-local, not replicated: tokens and the back-off after
// failed logins, both judged on the clock in Config.Now. Simple tokens
// (tokens.go) are learned by applying the Authenticate entry, as etcd's
// are, and forgotten after the TTL, a restart, a password change or
// AuthDisable. JWTs (jwt.go) are signed and carry their user, revision and
// expiry, so any member with the key verifies them without having seen the
// login.
//
// A login, followed through: Login (logins.go) checks the password
// against this member's state and returns the auth revision it checked
// at; the request layer proposes an Authenticate entry carrying that
// revision; Apply (store.go) issues the token only if the revision is
// still the current one.
//
// Where it sits: auth imports nothing of corenode's. The state machine
// (fsm) applies it; the request layer (server) checks reads and the Auth
// service against it; the edge (transport) asks it who a call's token or
// certificate names. It must never import kv, fsm, node, server or
// transport: callers hand it the keys a request touches (a LeaseKeys
// function for the keys of a lease), so it decides on keys and users
// without knowing the store.
package auth

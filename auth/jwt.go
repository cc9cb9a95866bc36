package auth

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrVerifyOnly is a login on a member that holds only the public key of a
// JWT pair: it can check tokens but not sign them (etcd's text).
var ErrVerifyOnly = errors.New("auth: token signing attempted with verify-only key")

// TokenKind is a parsed --auth-token: simple tokens (the zero value) or
// signed JWTs.
type TokenKind struct {
	jwt *jwtOptions
}

// DefaultJWTTTL is how long a JWT is valid when the ttl option is not
// given, as etcd.
const DefaultJWTTTL = 5 * time.Minute

// jwtMethods are the sign-method names, for the error on an unknown one.
const jwtMethods = "RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, HS256, HS384, HS512"

// jwtOptions are etcd's JWT options, checked and loaded.
type jwtOptions struct {
	method jwt.SigningMethod
	// sign is the private key (the secret for HMAC); nil on a member
	// given only the public key.
	sign any
	// verify checks a signature: the public key (the secret for HMAC).
	verify any
	ttl    time.Duration
}

// ParseTokenKind parses the --auth-token flag with etcd's syntax:
// "simple", or "jwt," followed by comma-separated options: sign-method
// (required: RS256/384/512, PS256/384/512, ES256/384/512, EdDSA,
// HS256/384/512), priv-key and pub-key (PEM files; the secret's file for
// HS*, given as priv-key), ttl (a Go duration, default 5m). A member with
// only pub-key verifies tokens but cannot issue them. Unlike etcd, which
// logs a warning, an unknown option is refused: a misspelt key name would
// otherwise surface only as a missing key.
func ParseTokenKind(flag string) (TokenKind, error) {
	kind, rest, _ := strings.Cut(flag, ",")
	switch kind {
	case "simple":
		if rest != "" {
			return TokenKind{}, fmt.Errorf("--auth-token simple takes no options, got %q", rest)
		}
		return TokenKind{}, nil
	case "jwt":
	default:
		return TokenKind{}, fmt.Errorf("--auth-token %q: the kind must be simple or jwt", kind)
	}
	opts := map[string]string{}
	if rest != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || v == "" {
				return TokenKind{}, fmt.Errorf("--auth-token jwt: option %q is not name=value", kv)
			}
			if _, dup := opts[k]; dup {
				return TokenKind{}, fmt.Errorf("--auth-token jwt: option %s given twice", k)
			}
			switch k {
			case "sign-method", "priv-key", "pub-key", "ttl":
			default:
				return TokenKind{}, fmt.Errorf("--auth-token jwt: unknown option %q (known: sign-method, priv-key, pub-key, ttl)", k)
			}
			opts[k] = v
		}
	}
	o, err := loadJWTOptions(opts)
	if err != nil {
		return TokenKind{}, fmt.Errorf("--auth-token jwt: %w", err)
	}
	return TokenKind{jwt: o}, nil
}

// String names the kind as a log line would: "simple" or "jwt RS256 ttl 5m0s".
func (k TokenKind) String() string {
	if k.jwt == nil {
		return "simple"
	}
	s := fmt.Sprintf("jwt %s ttl %s", k.jwt.method.Alg(), k.jwt.ttl)
	if k.jwt.sign == nil {
		s += " verify-only"
	}
	return s
}

func loadJWTOptions(opts map[string]string) (*jwtOptions, error) {
	o := &jwtOptions{ttl: DefaultJWTTTL}
	if v := opts["ttl"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("ttl %q is not a positive duration", v)
		}
		o.ttl = d
	}
	name := opts["sign-method"]
	if name == "" {
		return nil, errors.New("sign-method is required")
	}
	o.method = jwt.GetSigningMethod(name)
	if o.method == nil || o.method == jwt.SigningMethodNone {
		return nil, fmt.Errorf("sign-method %q is unknown (one of %s)", name, jwtMethods)
	}
	var priv, pub []byte
	for _, f := range []struct {
		opt string
		dst *[]byte
	}{{"priv-key", &priv}, {"pub-key", &pub}} {
		if path := opts[f.opt]; path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.opt, err)
			}
			*f.dst = b
		}
	}
	if len(priv) == 0 && len(pub) == 0 {
		return nil, fmt.Errorf("sign-method %s needs priv-key or pub-key", name)
	}
	if _, ok := o.method.(*jwt.SigningMethodHMAC); ok {
		if len(priv) == 0 {
			return nil, fmt.Errorf("sign-method %s needs the shared secret's file as priv-key", name)
		}
		o.sign, o.verify = priv, priv
		return o, nil
	}
	var err error
	switch o.method.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		err = loadPair(o, priv, pub, jwt.ParseRSAPrivateKeyFromPEM, jwt.ParseRSAPublicKeyFromPEM)
	case *jwt.SigningMethodECDSA:
		err = loadPair(o, priv, pub, jwt.ParseECPrivateKeyFromPEM, jwt.ParseECPublicKeyFromPEM)
	case *jwt.SigningMethodEd25519:
		err = loadPair(o, priv, pub,
			func(b []byte) (ed25519.PrivateKey, error) {
				k, err := jwt.ParseEdPrivateKeyFromPEM(b)
				if err != nil {
					return nil, err
				}
				return k.(ed25519.PrivateKey), nil
			},
			func(b []byte) (ed25519.PublicKey, error) {
				k, err := jwt.ParseEdPublicKeyFromPEM(b)
				if err != nil {
					return nil, err
				}
				return k.(ed25519.PublicKey), nil
			})
	default:
		err = fmt.Errorf("sign-method %s is not supported", name)
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// keyPair is what every asymmetric private key offers.
type keyPair interface {
	Public() crypto.PublicKey
}

// publicKey is what every asymmetric public key offers.
type publicKey interface {
	Equal(crypto.PublicKey) bool
}

// loadPair parses the PEM keys given and sets o's signing and verifying
// keys; a public key given beside a private one must be its pair, or
// tokens signed here would fail on members given only the public key.
func loadPair[Priv keyPair, Pub publicKey](o *jwtOptions, priv, pub []byte,
	parsePriv func([]byte) (Priv, error), parsePub func([]byte) (Pub, error)) error {
	var havePub bool
	var pk Pub
	if len(pub) > 0 {
		k, err := parsePub(pub)
		if err != nil {
			return fmt.Errorf("pub-key: %w", err)
		}
		pk, havePub = k, true
		o.verify = k
	}
	if len(priv) == 0 {
		return nil
	}
	k, err := parsePriv(priv)
	if err != nil {
		return fmt.Errorf("priv-key: %w", err)
	}
	if havePub && !pk.Equal(k.Public()) {
		return errors.New("pub-key is not the public half of priv-key")
	}
	o.sign, o.verify = k, k.Public()
	return nil
}

// jwtTokens are signed tokens carrying the user, the auth revision at
// login and an expiry; nothing is stored, so a restart, a member that did
// not see the login, or AuthDisable changes nothing, and the revision is
// what retires them (InfoFromToken).
type jwtTokens struct {
	jwtOptions
	now func() time.Time
}

// The claims, by etcd's names, so a token from either server reads alike.
const (
	claimUser     = "username"
	claimRevision = "revision"
)

func (t *jwtTokens) issue(_ string, _ uint64, user string, rev uint64) (string, error) {
	if t.sign == nil {
		return "", ErrVerifyOnly
	}
	tok := jwt.NewWithClaims(t.method, jwt.MapClaims{
		claimUser:     user,
		claimRevision: rev,
		"exp":         t.now().Add(t.ttl).Unix(),
	})
	s, err := tok.SignedString(t.sign)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
}

func (t *jwtTokens) info(token string, _ uint64) (Info, bool) {
	parsed, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return t.verify, nil },
		jwt.WithValidMethods([]string{t.method.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(t.now))
	if err != nil || !parsed.Valid {
		return Info{}, false
	}
	claims, ok := parsed.Claims.(jwt.MapClaims)
	if !ok {
		return Info{}, false
	}
	user, ok := claims[claimUser].(string)
	if !ok {
		return Info{}, false
	}
	// JSON numbers decode as float64; a revision is far below 2^53.
	rev, ok := claims[claimRevision].(float64)
	if !ok || rev < 1 || rev != float64(uint64(rev)) {
		return Info{}, false
	}
	return Info{User: user, Revision: uint64(rev)}, true
}

func (t *jwtTokens) invalidateUser(string) {}
func (t *jwtTokens) clear()                {}

var (
	_ tokenProvider = (*tokens)(nil)
	_ tokenProvider = (*jwtTokens)(nil)
)

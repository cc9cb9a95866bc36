package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// keyFiles writes a fresh key pair of the kind method needs as PEM files
// and returns their paths (the secret's file twice for HMAC).
func keyFiles(t *testing.T, method string) (priv, pub string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var public any
	switch method[:2] {
	case "HS":
		p := filepath.Join(dir, "secret")
		if err := os.WriteFile(p, []byte(rand.Text()), 0o600); err != nil {
			t.Fatal(err)
		}
		return p, p
	case "RS", "PS":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		public = k.Public()
		priv = write("priv.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k))
	case "ES":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		public = k.Public()
		priv = write("priv.pem", "EC PRIVATE KEY", der)
	case "Ed":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		public = k.Public()
		priv = write("priv.pem", "PRIVATE KEY", der)
	default:
		t.Fatalf("no keys for %s", method)
	}
	der, err := x509.MarshalPKIXPublicKey(public)
	if err != nil {
		t.Fatal(err)
	}
	return priv, write("pub.pem", "PUBLIC KEY", der)
}

func TestJWTTokens(t *testing.T) {
	for _, method := range []string{"RS256", "PS384", "ES256", "EdDSA", "HS256"} {
		t.Run(method, func(t *testing.T) {
			priv, pub := keyFiles(t, method)
			kind, err := ParseTokenKind("jwt,sign-method=" + method + ",priv-key=" + priv + ",pub-key=" + pub + ",ttl=2m")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := kind.String(), "jwt "+method+" ttl 2m0s"; got != want {
				t.Errorf("kind %q, want %q", got, want)
			}
			h := newHarnessWith(t, kind)
			h.enableWithRoot()
			token, err := h.token("root", "rootpw")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(token, ".") != 2 {
				t.Fatalf("token %q is not a JWT", token)
			}
			ai, err := h.s.InfoFromToken(token)
			if err != nil || ai.User != "root" || ai.Revision != h.s.Revision() {
				t.Fatalf("info %+v %v, want root at %d", ai, err, h.s.Revision())
			}
			if err := h.s.IsRangePermitted(ai, []byte("k"), nil); err != nil {
				t.Errorf("root's token: %v", err)
			}

			// Another member with the same keys, which never saw the login,
			// accepts it: nothing is stored.
			other := New(Config{Tokens: kind, Now: h.clock.now})
			if ai, err := other.InfoFromToken(token); err != nil || ai.User != "root" {
				t.Errorf("another member: %+v %v", ai, err)
			}

			// A token carries the revision it was issued at, so any auth
			// change retires it for key access (clients log in again, as
			// with etcd), where a simple token would read the new state.
			// etcd's admin check does not look at the revision; nor does
			// ours.
			h.addUser("late", "pw", as("root", h.s.Revision()))
			ai, err = h.s.InfoFromToken(token)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.s.IsRangePermitted(ai, []byte("k"), nil); !errors.Is(err, ErrAuthOldRevision) {
				t.Errorf("after a change: %v, want ErrAuthOldRevision", err)
			}
			if err := h.s.IsAdminPermitted(ai); err != nil {
				t.Errorf("admin after a change: %v", err)
			}

			// It expires at ttl on the injected clock, whatever its use.
			token, err = h.token("root", "rootpw")
			if err != nil {
				t.Fatal(err)
			}
			h.clock.step(2*time.Minute - time.Second)
			if _, err := h.s.InfoFromToken(token); err != nil {
				t.Errorf("a second before expiry: %v", err)
			}
			h.clock.step(time.Second)
			if _, err := h.s.InfoFromToken(token); !errors.Is(err, ErrInvalidAuthToken) {
				t.Errorf("at expiry: %v, want ErrInvalidAuthToken", err)
			}

			// A token signed with other keys is refused.
			priv2, pub2 := keyFiles(t, method)
			stranger, err := ParseTokenKind("jwt,sign-method=" + method + ",priv-key=" + priv2 + ",pub-key=" + pub2)
			if err != nil {
				t.Fatal(err)
			}
			forged, err := stranger.jwt.sign2(h.clock.now(), "root", h.s.Revision())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.s.InfoFromToken(forged); !errors.Is(err, ErrInvalidAuthToken) {
				t.Errorf("token signed with other keys: %v, want ErrInvalidAuthToken", err)
			}
		})
	}
}

// sign2 signs a token as a member with o would, at now.
func (o *jwtOptions) sign2(now time.Time, user string, rev uint64) (string, error) {
	return (&jwtTokens{jwtOptions: *o, now: func() time.Time { return now }}).issue("", 0, user, rev)
}

func TestJWTVerifyOnlyMember(t *testing.T) {
	priv, pub := keyFiles(t, "ES256")
	signer, err := ParseTokenKind("jwt,sign-method=ES256,priv-key=" + priv)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := ParseTokenKind("jwt,sign-method=ES256,pub-key=" + pub)
	if err != nil {
		t.Fatal(err)
	}
	if got := verifier.String(); got != "jwt ES256 ttl 5m0s verify-only" {
		t.Errorf("kind %q", got)
	}
	h := newHarnessWith(t, verifier)
	h.enable()
	if _, err := h.token("root", "rootpw"); !errors.Is(err, ErrVerifyOnly) {
		t.Errorf("login on a verify-only member: %v, want ErrVerifyOnly", err)
	}
	token, err := signer.jwt.sign2(h.clock.now(), "root", h.s.Revision())
	if err != nil {
		t.Fatal(err)
	}
	if ai, err := h.s.InfoFromToken(token); err != nil || ai.User != "root" {
		t.Errorf("verify-only member reads a signed token: %+v %v", ai, err)
	}
}

func TestJWTRefusesUnsignedAndOtherMethods(t *testing.T) {
	priv, pub := keyFiles(t, "HS256")
	kind, err := ParseTokenKind("jwt,sign-method=HS256,priv-key=" + priv + ",pub-key=" + pub)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, kind)
	h.enableWithRoot()
	claims := jwt.MapClaims{"username": "root", "revision": h.s.Revision(), "exp": h.clock.now().Add(time.Minute).Unix()}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	// The right secret under another HMAC size is still another method.
	hs512, err := jwt.NewWithClaims(jwt.SigningMethodHS512, claims).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	noExp, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"username": "root", "revision": h.s.Revision()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	good, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"alg none": none, "HS512": hs512, "no exp": noExp, "garbage": "a.b.c"} {
		if _, err := h.s.InfoFromToken(tok); !errors.Is(err, ErrInvalidAuthToken) {
			t.Errorf("%s: %v, want ErrInvalidAuthToken", name, err)
		}
	}
	if ai, err := h.s.InfoFromToken("Bearer " + good); err != nil || ai.User != "root" {
		t.Errorf("the same claims, signed right: %+v %v", ai, err)
	}
}

func TestParseTokenKind(t *testing.T) {
	rsPriv, rsPub := keyFiles(t, "RS256")
	_, otherPub := keyFiles(t, "RS256")
	esPriv, _ := keyFiles(t, "ES256")
	if k, err := ParseTokenKind("simple"); err != nil || k.String() != "simple" {
		t.Errorf("simple: %v %v", k, err)
	}
	bad := []struct{ flag, want string }{
		{"", `the kind must be simple or jwt`},
		{"opaque", `the kind must be simple or jwt`},
		{"simple,ttl=1m", "simple takes no options"},
		{"jwt", "sign-method is required"},
		{"jwt,sign-method=RS256", "needs priv-key or pub-key"},
		{"jwt,sign-method=XX1,priv-key=" + rsPriv, `sign-method "XX1" is unknown`},
		{"jwt,sign-method=none,priv-key=" + rsPriv, `sign-method "none" is unknown`},
		{"jwt,sign-method=RS256,priv_key=" + rsPriv, `unknown option "priv_key"`},
		{"jwt,sign-method=RS256,priv-key", `option "priv-key" is not name=value`},
		{"jwt,sign-method=RS256,sign-method=RS384,priv-key=" + rsPriv, "sign-method given twice"},
		{"jwt,sign-method=RS256,ttl=soon,priv-key=" + rsPriv, `ttl "soon" is not a positive duration`},
		{"jwt,sign-method=RS256,ttl=-1m,priv-key=" + rsPriv, `ttl "-1m" is not a positive duration`},
		{"jwt,sign-method=RS256,priv-key=/nonexistent/key.pem", "priv-key: open /nonexistent/key.pem"},
		{"jwt,sign-method=RS256,priv-key=" + rsPriv + ",pub-key=" + otherPub, "pub-key is not the public half of priv-key"},
		{"jwt,sign-method=RS256,priv-key=" + esPriv, "priv-key:"},
		{"jwt,sign-method=HS256,pub-key=" + rsPub, "needs the shared secret's file as priv-key"},
	}
	for _, c := range bad {
		if _, err := ParseTokenKind(c.flag); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.flag, err, c.want)
		}
	}
	if k, err := ParseTokenKind("jwt,pub-key=" + rsPub + ",sign-method=RS512"); err != nil || k.String() != "jwt RS512 ttl 5m0s verify-only" {
		t.Errorf("verify-only RS512: %v %v", k, err)
	}
}

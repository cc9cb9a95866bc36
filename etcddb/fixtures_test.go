package etcddb

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	"golang.org/x/crypto/bcrypt"
)

// TestReadEtcdSnapshots reads what `etcdctl snapshot save` wrote from etcd
// 3.4, 3.5, 3.6 and 3.7 after the same writes (testdata/make-snapshots):
// every revision etcd kept, the current and compacted revisions, the
// lease with its key, users with their password hashes, roles with their
// permissions, and auth on.
func TestReadEtcdSnapshots(t *testing.T) {
	// What testdata/make-snapshots wrote, compacted at 23: every key's
	// newest revision at or before 23, and everything after, in revision
	// order.
	want := make([]string, 28)
	for i := range 20 {
		rev, val, version := i+2, fmt.Sprintf("v%d", i), 1
		if i == 5 {
			rev, val, version = 23, "v5c", 3
		}
		want[rev] = fmt.Sprintf("%d.0 k/%02d=%s create %d version %d lease false", rev, i, val, i+2, version)
	}
	want = append(slices.DeleteFunc(want, func(s string) bool { return s == "" }),
		"24.0 k/00 deleted",
		"25.0 leased=x create 25 version 1 lease true",
		"26.0 t/1=one create 26 version 1 lease false",
		"26.1 t/2=two create 26 version 1 lease false",
		"26.2 k/01 deleted",
		"27.0 svc/a=1 create 27 version 1 lease false",
	)

	for version, storage := range map[string]string{"3.4": "", "3.5": "", "3.6": "3.6.0", "3.7": "3.7.0"} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			c, info, err := Read(filepath.Join("testdata", "etcd-"+version+".db"))
			if err != nil {
				t.Fatal(err)
			}
			if info.StorageVersion != storage {
				t.Errorf("storage version %q, want %q", info.StorageVersion, storage)
			}
			if c.KV.Rev() != 27 || c.KV.CompactRev() != 23 {
				t.Errorf("revision %d, compacted at %d; want 27 and 23", c.KV.Rev(), c.KV.CompactRev())
			}
			if len(c.Leases) != 1 || c.Leases[0].TTL != 600 || c.Leases[0].Expiry != 0 {
				t.Fatalf("leases %v, want one of TTL 600, not checkpointed", c.Leases)
			}
			var got []string
			for r := range c.KV.Records() {
				kv := r.KV
				s := fmt.Sprintf("%d.%d %s", kv.ModRevision, r.Sub, kv.Key)
				if r.Tombstone {
					s += " deleted"
				} else {
					if kv.Lease != 0 && kv.Lease != c.Leases[0].ID {
						t.Errorf("%s: lease %x, want %x", kv.Key, kv.Lease, c.Leases[0].ID)
					}
					s += fmt.Sprintf("=%s create %d version %d lease %v", kv.Value, kv.CreateRevision, kv.Version, kv.Lease != 0)
				}
				got = append(got, s)
			}
			if !slices.Equal(got, want) {
				t.Errorf("records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}

			a := c.Auth
			if !a.Enabled || a.Revision < 2 || len(a.Users) != 2 || len(a.Roles) != 1 {
				t.Fatalf("auth %+v, want on, revision at least 2, users root and svc, role svc-rw", a)
			}
			for i, u := range []struct{ name, password, role string }{{"root", "rootpw", "root"}, {"svc", "svcpw", "svc-rw"}} {
				got := a.Users[i]
				if string(got.Name) != u.name || !slices.Equal(got.Roles, []string{u.role}) {
					t.Errorf("user %d: %v, want %s with role %s", i, got, u.name, u.role)
				} else if u.name == "svc" && bcrypt.CompareHashAndPassword(got.Password, []byte(u.password)) != nil {
					// One user's hash is checked: bcrypt costs etcd's 10 rounds.
					t.Errorf("user %s: the password hash does not match %q", u.name, u.password)
				}
			}
			perms := a.Roles[0].KeyPermission
			slices.SortFunc(perms, func(a, b *authpb.Permission) int { return strings.Compare(string(a.Key), string(b.Key)) })
			if string(a.Roles[0].Name) != "svc-rw" || fmt.Sprint(perms) != fmt.Sprint([]*authpb.Permission{
				{Key: []byte("cfg")},
				{PermType: authpb.READWRITE, Key: []byte("svc/"), RangeEnd: []byte("svc0")},
			}) {
				t.Errorf("role %v", a.Roles[0])
			}
		})
	}
}

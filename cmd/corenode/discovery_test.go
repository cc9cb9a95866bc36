package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/corenode/corenode/member/membertest"
)

type fakeDNS struct {
	srv   map[string][]*net.SRV
	hosts map[string][]string
}

func (f fakeDNS) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	k := "_" + service + "._" + proto + "." + name
	if r, ok := f.srv[k]; ok {
		return k, r, nil
	}
	return "", nil, errors.New("no such host")
}

func (f fakeDNS) LookupHost(_ context.Context, host string) ([]string, error) {
	if r, ok := f.hosts[host]; ok {
		return r, nil
	}
	return nil, errors.New("no such host " + host)
}

func TestDiscoverySRV(t *testing.T) {
	dns := fakeDNS{
		srv: map[string][]*net.SRV{
			"_etcd-server-ssl._tcp.example.com": {
				{Target: "infra0.example.com.", Port: 2380}, {Target: "infra1.example.com.", Port: 2380}, {Target: "infra2.example.com.", Port: 2380},
			},
			"_etcd-server-ssl-blue._tcp.example.com": {{Target: "infra0.example.com.", Port: 2390}},
		},
		hosts: map[string][]string{"infra0.example.com": {"10.0.1.10"}, "infra1.example.com": {"10.0.1.11"}, "infra2.example.com": {"10.0.1.12"}},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	got, err := srvCluster(ctx, dns, "example.com", "", "infra1", []string{"https://infra1.example.com:2380"}, log)
	if want := "0=https://infra0.example.com:2380,infra1=https://infra1.example.com:2380,1=https://infra2.example.com:2380"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	got, err = srvCluster(ctx, dns, "example.com", "blue", "infra0", []string{"https://infra0.example.com:2390"}, log)
	if err != nil || got != "infra0=https://infra0.example.com:2390" {
		t.Errorf("--discovery-srv-name: %q, %v", got, err)
	}
	// Advertised by IP: the others would derive another member ID.
	if _, err := srvCluster(ctx, dns, "example.com", "", "infra1", []string{"https://10.0.1.11:2380"}, log); err == nil ||
		!strings.Contains(err.Error(), "advertise https://infra1.example.com:2380") {
		t.Errorf("advertised by IP: %v", err)
	}
	if _, err := srvCluster(ctx, dns, "example.com", "", "infra9", []string{"https://10.0.1.19:2380"}, log); err == nil ||
		!strings.Contains(err.Error(), "cannot find local member") {
		t.Errorf("not in the records: %v", err)
	}
	if _, err := srvCluster(ctx, dns, "nowhere.example", "", "infra1", []string{"https://infra1.example.com:2380"}, log); err == nil {
		t.Error("no records: no error")
	}
}

// TestDiscoveryV3 runs etcd's v3 discovery against a corenode member as
// the discovery service: three members register and each gets the same
// initial cluster, the first three by registration; a fourth finds the
// cluster full.
func TestDiscoveryV3(t *testing.T) {
	svc := membertest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := svc.Client(0).Put(ctx, "/_etcd/registry/tok/_config/size", "3"); err != nil {
		t.Fatal(err)
	}
	d := discoveryConfig{endpoints: svc.Endpoints(), token: "tok", dialTimeout: 2 * time.Second, requestTimeout: 5 * time.Second,
		keepaliveTime: 2 * time.Second, keepaliveTimeout: 6 * time.Second, insecureTransport: true, fallback: "exit"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	got := make([]string, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			name := fmt.Sprintf("m%d", i)
			got[i], errs[i] = v3Discovery(ctx, d, name, "cluster-token", []string{fmt.Sprintf("http://10.0.0.%d:2380", i)}, log)
		})
		time.Sleep(50 * time.Millisecond) // registration order m0, m1, m2
	}
	wg.Wait()
	want := "m0=http://10.0.0.0:2380,m1=http://10.0.0.1:2380,m2=http://10.0.0.2:2380"
	for i := range 3 {
		if errs[i] != nil || got[i] != want {
			t.Errorf("m%d: %q, %v; want %q", i, got[i], errs[i], want)
		}
	}
	if _, err := v3Discovery(ctx, d, "m3", "cluster-token", []string{"http://10.0.0.3:2380"}, log); err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("a fourth member: %v", err)
	}
	if r, err := svc.Client(0).Get(ctx, "/_etcd/registry/tok/members/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 3 {
		t.Errorf("registrations: %v %v", r, err)
	}
	// A restarted member, registered already, gets the same answer.
	if got, err := v3Discovery(ctx, d, "m1", "cluster-token", []string{"http://10.0.0.1:2380"}, log); err != nil || got != want {
		t.Errorf("m1 again: %q, %v", got, err)
	}
	d.token = "none"
	if _, err := v3Discovery(ctx, d, "m0", "cluster-token", []string{"http://10.0.0.0:2380"}, log); err == nil || !strings.Contains(err.Error(), "size key not found") {
		t.Errorf("no size key: %v", err)
	}
}

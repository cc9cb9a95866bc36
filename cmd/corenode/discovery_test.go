package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
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

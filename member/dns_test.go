package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/corenode/corenode/client/discovery"
	"github.com/corenode/corenode/member"
	"github.com/corenode/corenode/member/membertest"
)

func lookupSRV(t *testing.T, addr, name string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeSRV)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("SRV %s at %s: %v", name, addr, err)
	}
	return r
}

// TestDNSFollowsRegistrations: every member, followers too, answers SRV
// queries for a registered endpoint from its own state; a revoked
// registration is gone from every member's answer; a member cut off from
// the others answers SERVFAIL once it has been without a leader for an
// election timeout, so resolvers move on rather than trust its stale set.
func TestDNSFollowsRegistrations(t *testing.T) {
	c := membertest.New(t, 3, membertest.WithConfig(func(_ int, cfg *member.Config) { cfg.DNS.Addr = "127.0.0.1:0" }))
	leader := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := discovery.Register(ctx, c.Client(), "web", "10.0.0.7:8080", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	for i, m := range c.Members {
		r := lookupSRV(t, m.DNSAddr(), "web.service.corenode.")
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.SRV).Port != 8080 {
			t.Fatalf("member %d (leader %d): %v", i, leader, r)
		}
	}
	if err := reg.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	c.CatchUp(leader)
	for i, m := range c.Members {
		if r := lookupSRV(t, m.DNSAddr(), "web.service.corenode."); r.Rcode != dns.RcodeNameError {
			t.Fatalf("member %d after the deregistration: %v, want NXDOMAIN", i, r)
		}
	}

	follower := (leader + 1) % 3
	for i := range c.Members {
		if i != follower {
			c.Stop(i)
		}
	}
	addr := c.Members[follower].DNSAddr()
	membertest.Eventually(t, 10*time.Second, func() bool {
		return lookupSRV(t, addr, "web.service.corenode.").Rcode == dns.RcodeServerFailure
	}, "a member without a leader still answers from its state")
}

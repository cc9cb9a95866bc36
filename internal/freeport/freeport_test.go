package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctFreeAndOutsideEphemeralRange(t *testing.T) {
	ports, err := Ports("127.0.0.1", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 20 {
		t.Fatalf("got %d ports, want 20", len(ports))
	}
	elow, ehigh, err := ephemeralRange()
	if err != nil {
		elow, ehigh = defaultEphemeralLow, defaultEphemeralHigh
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		if p >= elow && p <= ehigh {
			t.Errorf("port %d lies in the ephemeral range %d-%d", p, elow, ehigh)
		}
		if p < lowest || p > 65535 {
			t.Errorf("port %d outside %d-65535", p, lowest)
		}
		// Ports closes its listeners: the caller can bind each port.
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d not free after Ports returned: %v", p, err)
			continue
		}
		ln.Close()
	}
}

func TestChoosableAvoidsEphemeralRange(t *testing.T) {
	for _, tc := range []struct {
		in        string
		low, high int
	}{
		{"32768\t60999\n", lowest, 32767},
		{"1024 10000", 10001, 65535},
		{"49152 65535", lowest, 49151},
	} {
		elow, ehigh, err := parseRange(tc.in)
		if err != nil {
			t.Fatalf("parseRange(%q): %v", tc.in, err)
		}
		low, high := pick(elow, ehigh)
		if low != tc.low || high != tc.high {
			t.Errorf("ephemeral %q: chose %d-%d, want %d-%d", tc.in, low, high, tc.low, tc.high)
		}
	}
	for _, bad := range []string{"", "1", "a b", "60999 32768", "0 70000"} {
		if _, _, err := parseRange(bad); err == nil {
			t.Errorf("parseRange(%q) accepted", bad)
		}
	}
}

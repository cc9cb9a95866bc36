package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the bottom of the range we choose from, clear of the ports
// that well-known services listen on.
const lowest = 10000

// Linux's default ephemeral range; also what we assume where the kernel's
// own range cannot be read. Other systems use 49152-65535, which lies
// inside it.
const (
	defaultEphemeralLow  = 32768
	defaultEphemeralHigh = 65535
)

// Listen listens on host at a port outside the kernel's ephemeral range,
// claimed for this process (see claim).
func Listen(host string) (net.Listener, error) {
	low, high := choosable()
	if high-low < 100 {
		return nil, fmt.Errorf("freeport: only ports %d-%d lie outside the ephemeral range", low, high)
	}
	var lastErr error
	for range 200 {
		port := low + rand.IntN(high-low+1)
		if !claim(port) {
			lastErr = fmt.Errorf("port %d already claimed", port)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return ln, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("freeport: no free port on %s in %d-%d: %w", host, low, high, lastErr)
}

// Ports returns n distinct ports that were free on host a moment ago,
// outside the kernel's ephemeral range and claimed for this process (see
// claim). A process that does not use this package may still take one
// before the caller binds it.
func Ports(host string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := Listen(host)
		if err != nil {
			return nil, err
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	return ports, nil
}

var (
	claimMu sync.Mutex
	claimed = map[int]bool{}
)

// claim hands port out at most once in this process's life, and never
// while another process that uses this package holds it (lock). Test
// packages run in parallel, and members are killed and restarted on their
// ports: without claims, a cluster started meanwhile, here or in another
// test binary, could pick the port of a member that is down.
func claim(port int) bool {
	claimMu.Lock()
	defer claimMu.Unlock()
	if claimed[port] || !lock(port) {
		return false
	}
	claimed[port] = true
	return true
}

// choosable is the widest stretch of ports outside the ephemeral range:
// below it if there is room, else above it.
func choosable() (low, high int) {
	elow, ehigh, err := ephemeralRange()
	if err != nil {
		elow, ehigh = defaultEphemeralLow, defaultEphemeralHigh
	}
	return pick(elow, ehigh)
}

// pick chooses between the ports below the ephemeral range elow-ehigh
// (from lowest up) and those above it.
func pick(elow, ehigh int) (low, high int) {
	below := elow - 1 - lowest
	above := 65535 - (ehigh + 1)
	if below >= above {
		return lowest, elow - 1
	}
	return ehigh + 1, 65535
}

func ephemeralRange() (low, high int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	return parseRange(string(b))
}

func parseRange(s string) (low, high int, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("freeport: ephemeral range %q: want two numbers", s)
	}
	low, err1 := strconv.Atoi(f[0])
	high, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("freeport: ephemeral range %q: %w", s, err)
	}
	if low < 1 || high > 65535 || low > high {
		return 0, 0, fmt.Errorf("freeport: ephemeral range %q out of order", s)
	}
	return low, high, nil
}

package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// badValue is a usage error in a value given, not in the shape of the
// command line: it is said in one line, without the synopsis, which would
// not help.
type badValue struct{ error }

func badValuef(format string, a ...any) error { return badValue{fmt.Errorf(format, a...)} }

// usageLines is how a usage error is printed: one line for a bad value,
// else the error and the synopsis.
func usageLines(cmd string, err error, synopsis string) string {
	var bv badValue
	if errors.As(err, &bv) {
		return fmt.Sprintf("%s: %v\n", cmd, err)
	}
	return fmt.Sprintf("%s: %v\nUsage: %s (%s -h for the flags)\n", cmd, err, synopsis, cmd)
}

// checkHoldName refuses an empty lock or election name: its prefix would
// be "/", and the holder would wait for every key under it to go.
func checkHoldName(kind, name string) error {
	if name == "" {
		what := "lock"
		if kind == "elect" {
			what = "election"
		}
		return badValuef("the %s name is empty: give NAME, the key prefix the holders share", what)
	}
	return nil
}

// checkServiceName accepts what the members' DNS server can answer for
// (transport/nameserver): SERVICE.service.DOMAIN, so SERVICE is one or
// more DNS labels joined by dots. Lowercase only: DNS matches names without
// case and the server looks up the name as it was asked, in lowercase, so
// a service with a capital letter would never be found.
func checkServiceName(s string) error {
	bad := func(why string) error {
		return badValuef("service name %q: %s (a DNS name: labels of a-z, 0-9 and '-', 1-63 characters, not starting or ending with '-', joined by '.')", s, why)
	}
	if s == "" {
		return bad("empty")
	}
	if len(s) > 253 {
		return bad("longer than 253 characters")
	}
	for _, label := range strings.Split(s, ".") {
		switch {
		case label == "":
			return bad("an empty label")
		case len(label) > 63:
			return bad(fmt.Sprintf("label %q is longer than 63 characters", label))
		case label[0] == '-' || label[len(label)-1] == '-':
			return bad(fmt.Sprintf("label %q starts or ends with '-'", label))
		}
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			case c >= 'A' && c <= 'Z':
				return bad("a capital letter, which DNS would never find: it looks names up in lowercase")
			default:
				return bad(fmt.Sprintf("%q is not allowed", c))
			}
		}
	}
	return nil
}

// checkHostPort accepts host:port with a host and a port in 1-65535, as
// the endpoint's clients and its SRV record need.
func checkHostPort(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return badValuef("%s %q is not HOST:PORT: %v", what, addr, err)
	}
	if host == "" {
		return badValuef("%s %q has no host", what, addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return badValuef("%s %q: port %q is not a number from 1 to 65535", what, addr, port)
	}
	return nil
}

// checkHTTPURL accepts an absolute http or https URL with a host.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return badValuef("--check-http %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
		return badValuef("--check-http %q is not an http:// or https:// URL with a host", raw)
	}
	return nil
}

package freeport

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
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

func TestClaimIsOncePerProcess(t *testing.T) {
	ln, err := Listen("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if claim(port) {
		t.Fatalf("port %d handed out twice in one process", port)
	}
}

// TestClaimExcludesOtherProcesses runs this test binary again as a second
// process that claims a port and holds it until its stdin closes.
func TestClaimExcludesOtherProcesses(t *testing.T) {
	if port := os.Getenv("FREEPORT_TEST_HOLD"); port != "" {
		p, _ := strconv.Atoi(port)
		if !claim(p) {
			fmt.Println("refused")
			os.Exit(1)
		}
		fmt.Println("claimed")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	if runtime.GOOS == "windows" {
		t.Fatal("claims are not exclusive across processes on windows")
	}
	// A port another process holds already is refused to the helper too;
	// try a few.
	low, high := choosable()
	var port int
	var stdin io.WriteCloser
	var cmd *exec.Cmd
	for attempt := 0; ; attempt++ {
		port = low + rand.IntN(high-low+1)
		cmd = exec.Command(os.Args[0], "-test.run", "^TestClaimExcludesOtherProcesses$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("FREEPORT_TEST_HOLD=%d", port))
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line == "claimed\n" {
			break
		}
		stdin.Close()
		cmd.Wait()
		if attempt == 4 {
			t.Fatalf("the helper could claim none of 5 ports; last answer %q, %v", line, err)
		}
	}
	if claim(port) {
		t.Errorf("port %d claimed here while another process holds it", port)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	// The helper's exit dropped its lock: a process that never handed the
	// port out may claim it now. This one tried once, so it may not.
	if !lock(port) {
		t.Errorf("port %d still locked after its holder exited", port)
	}
}

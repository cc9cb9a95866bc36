package main

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestDogState: the watchdog's decisions, on instants it is handed: SIGTERM
// at the term deadline, SIGKILL at the kill deadline, later deadlines move
// both, a deadline heard after the end revives nothing, and the timer is
// armed for the next decision only.
func TestDogState(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState.Sys().(syscall.WaitStatus)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	group := -cmd.Process.Pid
	d := &dogState{group: group, all: func(sig syscall.Signal) { _ = syscall.Kill(group, sig) }}
	for _, line := range []string{"D 100 150", "D 90 140", "D 200 250"} {
		if !d.apply(line) {
			t.Fatalf("apply(%q) = false", line)
		}
	}
	if d.termAt != 200 || d.killAt != 250 || d.next() != 200 {
		t.Fatalf("after three deadlines: term %d kill %d next %d, want 200 250 200 (an earlier one never moves them back)", d.termAt, d.killAt, d.next())
	}
	for _, bad := range []string{"", "D 1", "D x 2", "S", "Q"} {
		if d.apply(bad) {
			t.Errorf("apply(%q) = true, want false", bad)
		}
	}
	d.tick(199)
	if d.termSent || d.stopping {
		t.Fatal("acted before the term deadline")
	}
	d.tick(200)
	if !d.termSent || d.next() != 250 {
		t.Fatalf("at the term deadline: termSent %v, next %d; want SIGTERM sent and the timer at the kill deadline", d.termSent, d.next())
	}
	// sleep dies of the SIGTERM.
	select {
	case ws := <-exited:
		if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Fatalf("CMD ended with %v, want SIGTERM", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CMD still running 5s after the watchdog's SIGTERM")
	}
	d.apply("D 1000 2000")
	if d.killAt != 250 {
		t.Fatalf("a deadline after the end moved the kill deadline to %d", d.killAt)
	}
	d.tick(250)
	if !d.killed || d.next() != 0 {
		t.Fatalf("at the kill deadline: killed %v, next %d; want SIGKILL sent and no timer", d.killed, d.next())
	}
}

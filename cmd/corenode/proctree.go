package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Descendants of a process, found through /proc, for when CMD cannot run
// in a PID namespace of its own (watchdog.go): there the watchdog and the
// supervisor are child subreapers, so whatever CMD started and left
// behind (a double fork, setsid) is reparented to one of them, not to
// init, and stays findable by its parent chain.

// procEntry is one process as /proc showed it.
type procEntry struct {
	pid, ppid int
	start     uint64 // start time in clock ticks since boot: pid and start name one process
	zombie    bool
}

// readProcStat parses /proc/pid/stat.
func readProcStat(pid int) (procEntry, error) { return procStat(strconv.Itoa(pid)) }

// procStat parses /proc/name/stat, name a pid or "self".
func procStat(name string) (procEntry, error) {
	b, err := os.ReadFile("/proc/" + name + "/stat")
	if err != nil {
		return procEntry{}, err
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// the fields that follow start after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procEntry{}, fmt.Errorf("/proc/%s/stat: %q", name, s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 {
		return procEntry{}, fmt.Errorf("/proc/%s/stat: %q", name, s)
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procEntry{}, fmt.Errorf("/proc/%s/stat: %q", name, s)
	}
	pid, err := strconv.Atoi(strings.Fields(s)[0])
	if err != nil {
		return procEntry{}, fmt.Errorf("/proc/%s/stat: %q", name, s)
	}
	return procEntry{pid: pid, ppid: ppid, start: start, zombie: f[0] == "Z"}, nil
}

// descendants lists the processes whose parent chain leads to root, root
// excluded, as /proc shows them now.
func descendants(root int) ([]procEntry, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	children := map[int][]procEntry{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		p, err := readProcStat(pid)
		if err != nil {
			continue // gone since the listing
		}
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []procEntry
	queue := []int{root}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
		queue = queue[1:]
	}
	return out, nil
}

// signalProc sends sig to p unless p's pid now names another process: the
// pidfd pins the process, and the start time read after it was opened
// says whether it is still the one listed.
func signalProc(p procEntry, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		_ = unix.Kill(p.pid, sig) // before Linux 5.3: a pid reused this instant is the risk
		return
	}
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if now, err := readProcStat(p.pid); err != nil || now.start != p.start {
		return
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
}

// signalDescendants sends sig once to every live descendant of root; it
// returns how many it found (zombies do not count: they run no more).
func signalDescendants(root int, sig syscall.Signal) int {
	ds, err := descendants(root)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range ds {
		if !p.zombie {
			signalProc(p, sig)
			n++
		}
	}
	return n
}

// killDescendants SIGKILLs every descendant of this process and reaps
// those that are its children, until none is left. Only a subreaper
// should call it, and only when no other code of the process waits for a
// child: it reaps any child.
func killDescendants(onReap func(pid int, ws unix.WaitStatus)) {
	self := os.Getpid()
	for {
		signalDescendants(self, syscall.SIGKILL)
		reapAll(onReap)
		ds, err := descendants(self)
		if err != nil || len(ds) == 0 {
			return
		}
		// Left: zombies whose parent is dying, or processes forked since
		// the walk. A killed parent's children come to this process.
		var ws unix.WaitStatus
		if pid, err := unix.Wait4(-1, &ws, 0, nil); pid > 0 && onReap != nil {
			onReap(pid, ws)
		} else if errors.Is(err, unix.ECHILD) {
			time.Sleep(time.Millisecond) // a descendant that is not (yet) a child
		}
	}
}

// reapAll reaps every child that has exited, without waiting.
func reapAll(onReap func(pid int, ws unix.WaitStatus)) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if pid <= 0 {
			return
		}
		if onReap != nil {
			onReap(pid, ws)
		}
	}
}

package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progressOut is where progress lines go; nil turns them off (--progress=false).
var progressOut io.Writer = os.Stderr

// progress prints, every second while a phase runs, how far it got and its
// rate over the last second, so a stalled cluster shows at once rather than
// at the end of a long run.
type progress struct {
	label        string
	total        int64
	done, failed *atomic.Int64
	tty          bool
	stopc        chan struct{}
	wg           sync.WaitGroup
}

// startProgress reports done (and failed) against total; total 0 means
// open-ended.
func startProgress(label string, total int64, done, failed *atomic.Int64) *progress {
	p := &progress{label: label, total: total, done: done, failed: failed, stopc: make(chan struct{})}
	if progressOut == nil {
		return p
	}
	if f, ok := progressOut.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	var last int64
	for {
		select {
		case <-p.stopc:
			if p.tty {
				p.print(time.Since(start), -1)
				fmt.Fprintln(progressOut)
			}
			return
		case <-t.C:
			n := p.done.Load()
			p.print(time.Since(start), n-last)
			if !p.tty {
				fmt.Fprintln(progressOut)
			}
			last = n
		}
	}
}

// print writes one status line; rate < 0 means the phase is over.
func (p *progress) print(elapsed time.Duration, rate int64) {
	n := p.done.Load()
	line := fmt.Sprintf("%s: %d", p.label, n)
	if p.total > 0 {
		line += fmt.Sprintf("/%d (%d%%)", p.total, n*100/p.total)
	}
	if rate >= 0 {
		line += fmt.Sprintf(", %d/s", rate)
	}
	line += fmt.Sprintf(", %.0fs", elapsed.Seconds())
	if p.failed != nil {
		if f := p.failed.Load(); f > 0 {
			line += fmt.Sprintf(", %d failed", f)
		}
	}
	if p.tty {
		fmt.Fprintf(progressOut, "\r\033[K%s", line)
	} else {
		fmt.Fprint(progressOut, line)
	}
}

func (p *progress) stop() {
	select {
	case <-p.stopc:
		return
	default:
	}
	close(p.stopc)
	p.wg.Wait()
}

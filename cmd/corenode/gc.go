package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The Go runtime lets the heap grow to twice its live size between
// collections (GOGC=100). That is the wrong shape for corenode at both ends.
// A small heap under heavy writes is collected very often, for little gain:
// a write allocates a few kilobytes on its way through gRPC, raft and the
// FSM, almost all of it garbage at once. A large heap is mostly the key
// space and the lease table, which only grow with the data, so at a million
// leases doubling means hundreds of megabytes holding garbage. corenode
// instead asks for 64 MiB of headroom, or a quarter of the live heap when
// that is more: fewer collections while the heap is small, less memory
// when it is large (and a large live heap rarely churns: keep-alives
// allocate little).
const (
	gcMinHeadroom  = 64 << 20 // bytes of headroom however small the heap
	gcHeadroomPart = 4        // otherwise a quarter of the live heap
	gcMinPercent   = 25
	gcMaxPercent   = 400
)

// gcPercent is the GOGC value that gives a live heap of live bytes its
// headroom.
func gcPercent(live uint64) int {
	if live == 0 {
		return 100 // nothing measured yet: Go's default
	}
	headroom := max(uint64(gcMinHeadroom), live/gcHeadroomPart)
	return int(min(max(headroom*100/live, gcMinPercent), gcMaxPercent))
}

// tuneGC keeps GOGC at gcPercent of the live heap until ctx ends. An
// operator's own GOGC or GOMEMLIMIT takes precedence: tuneGC then does
// nothing.
func tuneGC(ctx context.Context, logger *slog.Logger) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		logger.Info("GOGC or GOMEMLIMIT set: heap headroom left to the Go runtime")
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := 100
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		if p := gcPercent(sample[0].Value.Uint64()); p != current {
			debug.SetGCPercent(p)
			logger.Debug("heap headroom", "gogc", p, "live-bytes", sample[0].Value.Uint64())
			current = p
		}
	}
}

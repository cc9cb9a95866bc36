package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/corenode/corenode/internal/rateclock"
	"github.com/corenode/corenode/test/jepsen-lite/internal/history"
)

// clockFiles is every rate file the fault writes, by process name: the
// members' and the holders' and readers'.
func (n *Nemesis) clockFiles() map[string]string {
	files := maps.Clone(n.cfg.ClockFiles)
	if files == nil {
		files = map[string]string{}
	}
	for i := range n.c.Size() {
		if f := n.c.ClockFile(i); f != "" {
			files[n.c.Name(i)] = f
		}
	}
	return files
}

// clockRates is the ClockRate fault: until ctx ends, it gives every process
// a new rate every ClockEveryMin..Max and records each set of rates as a
// fault lasting until the next; then it sets every rate back to 1. Its own
// random source, from the seed, since it runs beside the schedule.
func (n *Nemesis) clockRates(ctx context.Context) {
	rng := rand.New(rand.NewPCG(n.cfg.Seed, 0xc10c))
	files := n.clockFiles()
	names := slices.Sorted(maps.Keys(files))
	for ctx.Err() == nil {
		start := n.rec.Clock().Now()
		rates := make(map[string]float64, len(names))
		for _, name := range names {
			// Each process on its own side of 1: about half the pairs of
			// an issuer and a holder differ by twice the spread.
			sign := 1.0
			if rng.IntN(2) == 0 {
				sign = -1
			}
			rates[name] = 1 + sign*n.cfg.ClockSpread
		}
		err := writeRates(files, names, rates)
		d := n.cfg.ClockEveryMin
		if n.cfg.ClockEveryMax > d {
			d += time.Duration(rng.Int64N(int64(n.cfg.ClockEveryMax - d)))
		}
		sleep(ctx, d)
		n.record(ClockRate, start, describeRates(names, rates, n.cfg.ClockSpread), err)
	}
	ones := make(map[string]float64, len(names))
	for _, name := range names {
		ones[name] = 1
	}
	if err := writeRates(files, names, ones); err != nil {
		n.log.Error("fault", "fault", ClockRate, "heal", "every rate back to 1", "err", err)
		n.rec.Add(history.Op{Process: -1, Member: -1, Kind: history.KindFault, Start: n.rec.Clock().Now(), End: n.rec.Clock().Now(),
			Result: history.Fail, Error: err.Error(), Detail: string(ClockRate) + ": every rate back to 1"})
	}
}

func writeRates(files map[string]string, names []string, rates map[string]float64) error {
	var errs []error
	for _, name := range names {
		if err := rateclock.WriteRate(files[name], rates[name]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// describeRates is the fault's detail.
func describeRates(names []string, rates map[string]float64, spread float64) string {
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s=%.4f", name, rates[name]))
	}
	return fmt.Sprintf("spread %g: %s", spread, strings.Join(parts, " "))
}

package drift

import "time"

// Parts of the margin; see Margin.
const (
	fraction = 100                   // the margin is d/fraction ...
	floor    = 50 * time.Millisecond // ... plus this
)

// Margin is the drift margin for a lease of duration d: 1% of d plus 50 ms.
//
// The margin is the only slack between one side's deadline and the
// other's. Everything else already errs on the safe side: a holder starts
// its deadline when it sends its request, the issuer when it processes it,
// later; the issuer never ends a lease early. What is left is that the two
// measure the lease on different clocks, and clocks run at slightly
// different rates. Quartz oscillators are within about 100 ppm of their
// nominal rate, and NTP slews a clock's rate by at most 500 ppm, so two
// monotonic clocks differ in rate by roughly 1,000 ppm (0.1%) at worst: 1%
// is ten times that. The floor covers what a rate cannot: the scheduling
// delay between a check of the deadline and acting on it (a Get's return,
// a consumer of Done such as the `corenode lock` supervisor being
// scheduled).
//
// Spent on a rate alone, the margin tolerates a rate difference of
// margin/(d - margin), about 1% + 50 ms/d: jepsen-lite's clock-rate fault
// finds the first early lease just past it (docs/leases.md, "Clock rates").
func Margin(d time.Duration) time.Duration {
	return d/fraction + floor
}

package datapath

import (
	"slices"
	"time"
)

// Quantile is the q-quantile of sorted xs by nearest rank; 0 for none.
func Quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// HoldErrors are each exchange's round trip minus base minus hold,
// sorted: how much later than the delay asked for the reply came.
func HoldErrors(rtt []time.Duration, base, hold time.Duration) []time.Duration {
	e := make([]time.Duration, len(rtt))
	for i, r := range rtt {
		e[i] = r - base - hold
	}
	slices.Sort(e)
	return e
}

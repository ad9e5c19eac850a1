package experiments

import "math"

// The reader's wait is judged at its initiator, but the daemon measures
// reads at the target's devices. What lies between (the target's
// protocol stack, its CPU, the network) is invisible to the daemon and
// cannot be throttled away; where the threshold is a few milliseconds it
// can be a fifth of it. The report shows both for the same seconds, so
// that a miss can be told apart: the law missing at the devices, or the
// path adding what the devices did not.

// activeSeconds are the indexes of the seconds with writers active and a
// sample of the reader (the seconds activeWaits returns).
func (tl Timeline) activeSeconds() []int {
	var out []int
	for i, a := range tl.Active {
		if a && !math.IsNaN(tl.WaitMs[i]) {
			out = append(out, i)
		}
	}
	return out
}

// targetWaits summarises, over the timeline's seconds secs, the mean read
// latency at the target's devices in each second, from the ticks in the
// second (its end - 1, end], weighted by their reads: each tick's mean of
// the reads the probe timed, or where it timed none (diskstats) its raw
// signal if that is a mean (rawIsMean). Those are every reader's reads
// of the resource; a raw signal also counts a read long in flight by its
// age. Seconds without a sample of the reader or a read counted at the
// target are left out; nil when none is left.
func targetWaits(ticks []Tick, tl Timeline, secs []int, rawIsMean bool) *Stats {
	var per []float64
	for _, i := range secs {
		if math.IsNaN(tl.WaitMs[i]) {
			continue
		}
		end := tl.T[i]
		var sum float64
		var n uint64
		for _, t := range ticks {
			v, ok := t.MeanMs, t.MeanMs > 0
			if !ok && rawIsMean {
				v, ok = t.RawMs, true
			}
			if t.T > end-1 && t.T <= end && t.Reads > 0 && ok {
				sum += v * float64(t.Reads)
				n += t.Reads
			}
		}
		if n > 0 {
			per = append(per, sum/float64(n))
		}
	}
	if len(per) == 0 {
		return nil
	}
	s := statsOf(per)
	return &s
}

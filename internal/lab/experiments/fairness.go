package experiments

import (
	"fmt"
	"math"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// Fairness among the writers: Jain's index per burst (MinJain).

// threadBurst is one burst line of a thread: its on time on the common
// axis and the MB/s it got while on.
type threadBurst struct {
	thread     string
	start, end float64
	mbs        float64
}

// burstLines collects every writer thread's burst lines on the common
// time axis.
func burstLines(writers []WriterLog) []threadBurst {
	var out []threadBurst
	for _, w := range writers {
		for _, r := range w.Records {
			if r.Kind != iolog.KindBurst || r.Op != iolog.OpWrite {
				continue
			}
			out = append(out, threadBurst{thread: threadKey(w.Host, r.Thread),
				start: r.T - r.Dur + w.Offset, end: r.T + w.Offset, mbs: r.MBs})
		}
	}
	return out
}

func threadKey(host string, thread int) string { return fmt.Sprintf("%s/%d", host, thread) }

// minJainBurstS: a burst shorter than this, or than half the run's median
// burst, is not judged for fairness.
// Such a burst is the tail of a run: the writers' time ends a second into
// a new burst that only the host running ahead of the others had started
// (the hosts' on/off schedules drift), so its Jain index over the threads
// says 0.33 about a schedule, not about the throttle. A whole burst lasts
// about 10 s; a writer starved in one is still caught by MaxStallMs.
const minJainBurstS = 3

// minSharedS is how many whole seconds every thread of a burst must have
// been on together for the burst to be judged by what each moved in
// them. The hosts' schedules drift apart, so a burst's threads are not
// all on for all of it: a thread on alone for a few seconds gets the
// disk to itself, and its rate over its own on time then says more
// about the schedule than about the throttle. Fairness is a statement
// about threads that compete, so it is judged over the seconds they do.
const minSharedS = 2

// burstJain is Jain's index over the writer threads in each burst: over
// the bytes each moved in the seconds all of them were on (see
// minSharedS), or, from logs without per-thread seconds, over the rate
// of each thread's burst lines (their mean, when hosts drifting apart
// gave a thread several in one burst). A burst whose threads shared
// fewer than minSharedS seconds is not judged.
func burstJain(bs []Burst, writers []WriterLog) []float64 {
	lines := burstLines(writers)
	secs := threadSeconds(writers)
	// A burst under half the median length is a fragment (see
	// minJainBurstS), however long the run's bursts are.
	var lens []float64
	for _, b := range bs {
		lens = append(lens, b.EndS-b.OnsetS)
	}
	minLen := float64(minJainBurstS)
	if len(lens) > 0 {
		minLen = max(minLen, statsOf(lens).P50/2)
	}
	var out []float64
	for _, b := range bs {
		if b.EndS-b.OnsetS < minLen {
			continue
		}
		var in []threadBurst
		for _, l := range lines {
			// A host's burst may start up to a second before the
			// aggregate's first active second.
			if l.start >= b.OnsetS-1 && l.start < b.EndS {
				in = append(in, l)
			}
		}
		var xs []float64
		switch {
		case len(in) == 0:
			xs = ratesOf(intervalRates(writers, b))
		case len(secs) == 0:
			xs = ratesOf(lineRates(in))
		default:
			var ok bool
			if xs, ok = sharedRates(in, secs); !ok {
				continue
			}
		}
		if len(xs) == 0 {
			continue
		}
		out = append(out, iolog.Round3(iolog.JainIndex(xs)))
	}
	return out
}

// lineRates is each thread's burst-line MB/s.
func lineRates(in []threadBurst) map[string][]float64 {
	per := map[string][]float64{}
	for _, l := range in {
		per[l.thread] = append(per[l.thread], l.mbs)
	}
	return per
}

func ratesOf(per map[string][]float64) []float64 {
	var xs []float64
	for _, v := range per {
		xs = append(xs, iolog.Mean(v))
	}
	return xs
}

// threadSecond is one per-thread interval line of a writer on the common
// axis: the second (from, to] and the bytes written in it.
type threadSecond struct {
	from, to float64
	bytes    int64
}

// threadSeconds is every writer thread's whole-second interval lines by
// thread (the last, shorter, part of a second is left out: it is no
// second to compare).
func threadSeconds(writers []WriterLog) map[string][]threadSecond {
	out := map[string][]threadSecond{}
	for _, w := range writers {
		for _, r := range w.Records {
			if r.Kind != iolog.KindInterval || r.Thread == 0 || r.Op != iolog.OpWrite || r.Dur < 0.999 {
				continue
			}
			k := threadKey(w.Host, r.Thread)
			out[k] = append(out[k], threadSecond{from: r.T - r.Dur + w.Offset, to: r.T + w.Offset, bytes: r.Bytes})
		}
	}
	return out
}

// sharedRates is each thread's MB/s over the seconds of the burst in
// which every thread of it was on; false when they shared fewer than
// minSharedS. A thread was on for a second that lies within one of its
// burst lines (from the schedule's start to its last completion);
// seconds of hosts whose clocks differ by a fraction are matched on
// the common axis's whole second, as the timeline does.
func sharedRates(in []threadBurst, secs map[string][]threadSecond) ([]float64, bool) {
	on := map[string][]threadBurst{}
	for _, l := range in {
		on[l.thread] = append(on[l.thread], l)
	}
	bytes := map[string]map[int]int64{}
	count := map[int]int{}
	for th, ls := range on {
		bytes[th] = map[int]int64{}
		for _, s := range secs[th] {
			for _, l := range ls {
				if s.from >= l.start-0.01 && s.to <= l.end+0.01 {
					k := int(math.Round(s.to))
					if _, dup := bytes[th][k]; !dup {
						count[k]++
					}
					bytes[th][k] += s.bytes
					break
				}
			}
		}
	}
	var shared []int
	for k, n := range count {
		if n == len(on) {
			shared = append(shared, k)
		}
	}
	if len(shared) < minSharedS {
		return nil, false
	}
	var xs []float64
	for th := range on {
		var sum int64
		for _, k := range shared {
			sum += bytes[th][k]
		}
		xs = append(xs, float64(sum)/float64(len(shared))/1e6)
	}
	return xs, true
}

// intervalRates is each writer thread's bytes in the burst's seconds over
// their length, from the per-thread interval lines.
func intervalRates(writers []WriterLog, b Burst) map[string][]float64 {
	per := map[string][]float64{}
	for _, w := range writers {
		bytes := map[int]int64{}
		for _, r := range w.Records {
			if r.Kind != iolog.KindInterval || r.Thread == 0 || r.Op != iolog.OpWrite {
				continue
			}
			if k := float64(secondOf(r.T, w.Offset)); k > b.OnsetS && k <= b.EndS {
				bytes[r.Thread] += r.Bytes
			}
		}
		for th, n := range bytes {
			per[threadKey(w.Host, th)] = []float64{float64(n) / (b.EndS - b.OnsetS) / 1e6}
		}
	}
	return per
}

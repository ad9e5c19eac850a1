package experiments

import (
	"maps"
	"math"
	"slices"

	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// Windows and limits of the analysis; each has its reason.
const (
	// ActiveMBs: a second in which the writers together moved more than
	// this counts as "writers active". 12 sync writers, even under the
	// largest delay, move several MB/s; 0.5 MB/s is far below that and
	// far above nothing.
	ActiveMBs = 0.5
	// onKBs: a daemon tick whose consumers wrote more than this (kB/s) has
	// writers on; it is the read-over-write policy's default join rate.
	onKBs = 500
	// minOffS: a pause of the writers shorter than this is a hiccup, not a
	// stop (the on/off schedule pauses 5 s).
	minOffS = 1.5
	// ReleaseLimitS: nothing may be throttled this long after the writers
	// stop (the requirement).
	ReleaseLimitS = 2.0
	// OverFactor: a second "over threshold" is above this × threshold
	// (the 18 ms at 15 ms).
	OverFactor = 1.2
)

// Stats summarises 1-second samples (ms).
type Stats struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
}

func statsOf(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	return Stats{
		Mean: iolog.Round3(iolog.Mean(xs)),
		P50:  iolog.Round3(iolog.Percentile(xs, 50)),
		P95:  iolog.Round3(iolog.Percentile(xs, 95)),
		Max:  iolog.Round3(slices.Max(xs)),
		N:    len(xs),
	}
}

// WriterLog is the per-second log of one writer host, started Offset
// seconds after the reader.
type WriterLog struct {
	Host    string
	Offset  float64
	Records []iolog.Record
}

// Timeline is one run on the common time axis: second k (1-based) is the
// interval ending k seconds after the reader started.
type Timeline struct {
	T         []float64 // k
	WaitMs    []float64 // reader's mean wait; NaN when it had no sample
	ReaderKBs []float64 // reader's throughput, kB/s (10^3 B/s)
	WriteMBs  []float64 // writers' aggregate MB/s (10^6 B/s)
	Active    []bool    // WriteMBs > ActiveMBs
	// HostMBs is each writer host's MB/s (key: host).
	HostMBs map[string][]float64
	// WriteBins is, per second, the writers' bytes in each 100 ms of it,
	// summed over the hosts (nil where a log has no bins).
	WriteBins [][]int64
	// HostBins is each writer host's 100 ms bins in time order (none
	// where its log has no bins): what a throttle did within a second.
	HostBins map[string][]Bin
}

// Bin is one host's 100 ms of load on the run's axis: when it ended and
// the rate in it.
type Bin struct {
	End float64
	MBs float64
}

// fineBins are r's 100 ms bins on the run's axis (offset added); a bin
// under a millisecond long is the ticker's jitter.
func fineBins(r iolog.Record, offset float64) []Bin {
	start, end := r.T+offset-r.Dur, r.T+offset
	var out []Bin
	for i, b := range r.BinsBytes {
		from := start + float64(i)*iolog.BinSeconds
		to := min(from+iolog.BinSeconds, end)
		if to-from < 1e-3 {
			continue
		}
		out = append(out, Bin{End: to, MBs: float64(b) / (to - from) / 1e6})
	}
	return out
}

// secondOf maps an interval's end time to its second on the common axis.
// Intervals are whole seconds from the job's start except the last, which
// may be shorter; rounding puts a 59.9996 s end in second 60.
func secondOf(t, offset float64) int { return int(math.Round(t + offset)) }

// buildTimeline lines up the reader's and writers' per-second records.
// reader may be nil (an experiment of writers only).
func buildTimeline(reader []iolog.Record, writers []WriterLog) Timeline {
	n := 0
	rd := map[int]iolog.Record{}
	for _, r := range iolog.Select(reader, iolog.KindInterval, 0, iolog.OpRead) {
		k := secondOf(r.T, 0)
		if old, ok := rd[k]; !ok || r.Dur > old.Dur {
			rd[k] = r
		}
		n = max(n, k)
	}
	hosts := map[string]map[int]iolog.Record{}
	bins := map[int][]int64{}
	hostBins := map[string][]Bin{}
	for _, w := range writers {
		m := map[int]iolog.Record{}
		for _, r := range iolog.Select(w.Records, iolog.KindInterval, 0, "") {
			k := secondOf(r.T, w.Offset)
			if old, ok := m[k]; !ok || r.Dur > old.Dur {
				m[k] = r
			}
			n = max(n, k)
		}
		hosts[w.Host] = m
		for _, k := range slices.Sorted(maps.Keys(m)) {
			hostBins[w.Host] = append(hostBins[w.Host], fineBins(m[k], w.Offset)...)
		}
		for k, r := range m {
			if len(r.BinsBytes) == 0 {
				continue
			}
			b := bins[k]
			if len(b) < len(r.BinsBytes) {
				b = append(b, make([]int64, len(r.BinsBytes)-len(b))...)
			}
			for i, x := range r.BinsBytes {
				b[i] += x
			}
			bins[k] = b
		}
	}
	tl := Timeline{HostMBs: map[string][]float64{}, HostBins: hostBins}
	for k := 1; k <= n; k++ {
		tl.T = append(tl.T, float64(k))
		if r, ok := rd[k]; ok && r.IOs > 0 {
			tl.WaitMs = append(tl.WaitMs, r.Lat.Mean)
		} else {
			tl.WaitMs = append(tl.WaitMs, math.NaN())
		}
		if r, ok := rd[k]; ok {
			tl.ReaderKBs = append(tl.ReaderKBs, r.MBs*1000)
		} else {
			tl.ReaderKBs = append(tl.ReaderKBs, 0)
		}
		var sum float64
		for _, w := range writers {
			v := hosts[w.Host][k].MBs
			tl.HostMBs[w.Host] = append(tl.HostMBs[w.Host], v)
			sum += v
		}
		tl.WriteMBs = append(tl.WriteMBs, sum)
		tl.Active = append(tl.Active, sum > ActiveMBs)
		tl.WriteBins = append(tl.WriteBins, bins[k])
	}
	return tl
}

// activeWaits are the reader's samples in seconds with writers active.
func (tl Timeline) activeWaits() []float64 {
	var out []float64
	for _, i := range tl.activeSeconds() {
		out = append(out, tl.WaitMs[i])
	}
	return out
}

// windowWaits are the reader's samples of the seconds ending in (from, to].
func (tl Timeline) windowWaits(from, to float64) []float64 {
	var out []float64
	for _, i := range tl.secondsIn(from, to) {
		if !math.IsNaN(tl.WaitMs[i]) {
			out = append(out, tl.WaitMs[i])
		}
	}
	return out
}

// windowMean is the mean of xs over the seconds ending in (from, to].
func (tl Timeline) windowMean(xs []float64, from, to float64) float64 {
	var v []float64
	for _, i := range tl.secondsIn(from, to) {
		v = append(v, xs[i])
	}
	return iolog.Mean(v)
}

// secondsIn are the indexes of the seconds ending in (from, to].
func (tl Timeline) secondsIn(from, to float64) []int {
	var out []int
	for i, t := range tl.T {
		if t > from && t <= to {
			out = append(out, i)
		}
	}
	return out
}

// activeMean is the mean of xs over the seconds with writers active.
func (tl Timeline) activeMean(xs []float64) float64 {
	var v []float64
	for i, a := range tl.Active {
		if a {
			v = append(v, xs[i])
		}
	}
	return iolog.Mean(v)
}

// overPct is the share (%) of samples above limit.
func overPct(xs []float64, limit float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	n := 0
	for _, x := range xs {
		if x > limit {
			n++
		}
	}
	return 100 * float64(n) / float64(len(xs))
}

// Tick is one line of the daemon's --record, reduced to what the
// experiments use, on the common time axis.
type Tick struct {
	T        float64 // seconds since the reader started
	SignalMs float64 // largest resource signal
	RawMs    float64 // largest resource raw (unfiltered) signal of the tick
	Reads    uint64  // the reads behind RawMs (its resource's)
	MeanMs   float64 // their mean, completed reads only, where the probe timed them
	DelayMs  float64 // largest resource delay
	Members  int     // members of every throttleable set together
	WriteKBs float64 // every consumer's write rate together
	// HoldErrMs is the data path's largest recent hold beyond the delay;
	// YieldMs and WakeLateMs the packet thread's own stalls behind it.
	HoldErrMs, YieldMs, WakeLateMs float64
	// Takeovers counts, since the daemon started, the times its standby
	// ran the packet path for a stalled packet thread.
	Takeovers uint64
	// Source is where the daemon measured the tick's reads (ebpf, diskstats).
	Source string
	// Conflict: the daemon reported a reservation it could not keep
	// beside a read promise.
	Conflict bool
}

// SignalHold is how well a run's daemon held its own signal (the tick's
// raw mean or percentile from the block-layer probe) under the threshold:
// over the seconds in which the throttleable set had members, the share
// whose mean raw signal was within OverFactor × the threshold.
type SignalHold struct {
	Signal     string  `json:"signal"`
	Source     string  `json:"source"`
	Seconds    int     `json:"seconds"`
	WithinPct  float64 `json:"within_pct"`
	P95RawMs   float64 `json:"p95_raw_ms"`
	LimitMs    float64 `json:"limit_ms"`
	EBPFTicks  int     `json:"ebpf_ticks"`
	TotalTicks int     `json:"total_ticks"`
}

// signalHold computes SignalHold from a run's ticks.
func signalHold(ticks []Tick, signal string, thresholdMs float64) SignalHold {
	h := SignalHold{Signal: signal, LimitMs: OverFactor * thresholdMs, TotalTicks: len(ticks)}
	sums := map[int]float64{}
	ns := map[int]int{}
	for _, t := range ticks {
		if t.Source == "ebpf" {
			h.EBPFTicks++
		}
		if t.Members == 0 {
			continue
		}
		s := int(math.Floor(t.T))
		sums[s] += t.RawMs
		ns[s]++
	}
	var per []float64
	for s, n := range ns {
		per = append(per, sums[s]/float64(n))
	}
	h.Seconds = len(per)
	if h.Seconds == 0 {
		return h
	}
	within := 0
	for _, v := range per {
		if v <= h.LimitMs {
			within++
		}
	}
	h.WithinPct = math.Round(1000*float64(within)/float64(h.Seconds)) / 10
	h.P95RawMs = math.Round(100*statsOf(per).P95) / 100
	h.Source = "diskstats"
	if h.EBPFTicks*2 > h.TotalTicks {
		h.Source = "ebpf"
	}
	return h
}

// Throttling reports whether any packet can be held in this tick: a delay
// with somebody to apply it to.
func (t Tick) Throttling() bool { return t.DelayMs > 0 && t.Members > 0 }

// ticksOf reduces record lines; t0 is the reader's start (Unix seconds).
func ticksOf(recs []status.Record, t0 float64) []Tick {
	out := make([]Tick, 0, len(recs))
	for _, r := range recs {
		t := Tick{T: r.TS - t0, HoldErrMs: r.HoldErrorMaxMs, YieldMs: r.YieldMaxMs, WakeLateMs: r.WakeLateMaxMs, Takeovers: r.Takeovers}
		for i, res := range r.Resources {
			t.SignalMs = max(t.SignalMs, res.SignalMs)
			if i == 0 || res.RawMs > t.RawMs {
				// The worst resource's tick, with its own reads.
				t.RawMs, t.Reads, t.MeanMs = res.RawMs, res.Reads, res.MeanMs
			}
			if res.Source != "" {
				t.Source = res.Source
			}
			t.DelayMs = max(t.DelayMs, res.DelayMs)
			t.Members += res.Members
			t.Conflict = t.Conflict || res.Conflict != ""
		}
		for _, c := range r.Consumers {
			t.WriteKBs += c.WriteKBs
		}
		out = append(out, t)
	}
	return out
}

// Release is what happened after one stop of the writers.
type Release struct {
	// StopS is the last tick with writers on (the writers stopped after it).
	StopS float64 `json:"stop_s"`
	// ClearS is how long after StopS the record first showed delay 0 and
	// every set empty; -1 when it never did before the writers resumed.
	ClearS float64 `json:"clear_s"`
	// UnthrottledS is how long after StopS nothing could be held any more
	// (delay 0 or sets empty); -1 when never.
	UnthrottledS float64 `json:"unthrottled_s"`
	// CutShortS, when not 0, is how long the pause lasted when a writer
	// resumed before ReleaseLimitS and before the sets cleared: the
	// writers on different hosts pause in turn, and a stop of all of
	// them can be shorter than the limit. Such a stop cannot be judged
	// against the limit; it is reported, not counted.
	CutShortS float64 `json:"cut_short_s,omitempty"`
}

// releases finds every stop of the writers in the record (an on tick
// followed by at least minOffS of off ticks) and how long the throttle
// lingered after it. A stop too close to the end of the record to judge
// is left out.
func releases(ticks []Tick) []Release {
	var out []Release
	for i := 1; i < len(ticks); i++ {
		if !(ticks[i-1].WriteKBs > onKBs && ticks[i].WriteKBs <= onKBs) {
			continue
		}
		stop := ticks[i-1].T
		j := i
		for j < len(ticks) && ticks[j].WriteKBs <= onKBs {
			j++
		}
		offEnd := ticks[j-1].T
		if offEnd-stop < minOffS {
			continue // a hiccup, or the record ends too soon to judge
		}
		r := Release{StopS: stop, ClearS: -1, UnthrottledS: -1}
		for k := i; k < j; k++ {
			t := ticks[k]
			if r.UnthrottledS < 0 && !t.Throttling() {
				r.UnthrottledS = iolog.Round3(t.T - stop)
			}
			if t.DelayMs == 0 && t.Members == 0 {
				r.ClearS = iolog.Round3(t.T - stop)
				break
			}
		}
		if r.ClearS < 0 && j < len(ticks) && offEnd-stop < ReleaseLimitS {
			r.CutShortS = iolog.Round3(offEnd - stop)
		}
		out = append(out, r)
		i = j - 1
	}
	return out
}

// ReleaseSummary condenses the releases of a run.
type ReleaseSummary struct {
	Stops int `json:"stops"`
	// MaxClearS is the longest time to delay 0 and empty sets (-1: some
	// stop never cleared).
	MaxClearS float64 `json:"max_clear_s"`
	// MaxUnthrottledS is the longest time until nothing could be held.
	MaxUnthrottledS float64 `json:"max_unthrottled_s"`
	// WithinLimit: every stop cleared within ReleaseLimitS.
	WithinLimit bool `json:"within_limit"`
	// CutShort counts the stops a writer ended before ReleaseLimitS with
	// the sets not yet clear (see Release.CutShortS); Stops and the rest
	// leave them out.
	CutShort int       `json:"cut_short"`
	Events   []Release `json:"events"`
}

func summarizeReleases(rs []Release) ReleaseSummary {
	s := ReleaseSummary{WithinLimit: true, Events: rs}
	for _, r := range rs {
		if r.CutShortS > 0 {
			s.CutShort++
			continue
		}
		s.Stops++
		if r.ClearS < 0 || s.MaxClearS < 0 {
			s.MaxClearS = -1
		} else {
			s.MaxClearS = max(s.MaxClearS, r.ClearS)
		}
		if r.UnthrottledS < 0 || s.MaxUnthrottledS < 0 {
			s.MaxUnthrottledS = -1
		} else {
			s.MaxUnthrottledS = max(s.MaxUnthrottledS, r.UnthrottledS)
		}
		if r.ClearS < 0 || r.ClearS > ReleaseLimitS {
			s.WithinLimit = false
		}
	}
	return s
}

// DelayStats summarise the daemon's delay while the writers were on.
type DelayStats struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
	// ThrottledPct is the share of on ticks in which packets could be held.
	ThrottledPct float64 `json:"throttled_pct"`
	// HoldErrorMaxMs is the longest any packet was held beyond its delay
	// (the daemon's record, over the whole run); HoldErrorOver2Pct the
	// share of on ticks whose recent packets had one held 2 ms too long.
	HoldErrorMaxMs    float64 `json:"hold_error_max_ms"`
	HoldErrorOver2Pct float64 `json:"hold_error_over_2ms_pct"`
}

func delayStats(ticks []Tick) DelayStats {
	var ds []float64
	n, late := 0, 0
	errMax := 0.0
	for _, t := range ticks {
		errMax = max(errMax, t.HoldErrMs)
		if t.WriteKBs <= onKBs {
			continue
		}
		ds = append(ds, t.DelayMs)
		if t.Throttling() {
			n++
		}
		if t.HoldErrMs > 2 {
			late++
		}
	}
	if len(ds) == 0 {
		return DelayStats{HoldErrorMaxMs: iolog.Round3(errMax)}
	}
	return DelayStats{
		Mean:              iolog.Round3(iolog.Mean(ds)),
		Max:               iolog.Round3(slices.Max(ds)),
		ThrottledPct:      iolog.Round3(100 * float64(n) / float64(len(ds))),
		HoldErrorMaxMs:    iolog.Round3(errMax),
		HoldErrorOver2Pct: iolog.Round3(100 * float64(late) / float64(len(ds))),
	}
}

package experiments

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// The tenants experiment (issue 36): per-consumer terms on one resource.
// Three runs, each judged by the promise it exercises: writers with
// shares 1:2:4 split their rate in that proportion while the resource is
// throttled; a writer with a reservation keeps it (or sanqos reports the
// conflict) beside a plain writer and a capped one, and the capped
// writer stays at its cap; two readers with different thresholds take
// turns, and each is held to its own while it is the strictest active.
const (
	// TenantShareTol is how far a writer's share of the throttled
	// seconds' bytes may be from its shares' proportion (relative).
	TenantShareTol = 0.10
	// TenantReservePct is the share of the run's active seconds in
	// which the reserved writer must be at or above its reservation.
	TenantReservePct = 95.0
	// TenantCapTol is how far above its cap the capped writer's rate may
	// be over any TenantCapWindow.
	TenantCapTol    = 0.05
	TenantCapWindow = 10
	// TenantP95Factor bounds each reader's p95 against its own
	// threshold while it is the strictest active reader.
	TenantP95Factor = 1.1
	// tenantActiveS is how long a reader counts as active after its
	// last read, as the daemon's rule does.
	tenantActiveS = 3
	// tenantTurn is how long each of the two readers reads before it
	// pauses for as long and the other reads.
	tenantTurn = 15 * time.Second
)

// LabTenant is one initiator's terms in a tenants run; zero fields are
// the defaults.
type LabTenant struct {
	Host        string  `json:"host"`
	Share       float64 `json:"share,omitempty"`
	ReserveMBs  float64 `json:"reserve_mb_s,omitempty"`
	CapMBs      float64 `json:"cap_mb_s,omitempty"`
	ThresholdMs float64 `json:"threshold_ms,omitempty"`
}

// tenantsTOML is the daemon configuration's [[tenants.consumer]] tables
// for ts, each consumer named by its host and matched by its address.
func tenantsTOML(ts []LabTenant, v labView) string {
	var b strings.Builder
	for _, t := range ts {
		addr := ""
		for _, h := range v.hosts {
			if h.name == t.Host {
				addr = h.addr
			}
		}
		fmt.Fprintf(&b, "\n[[tenants.consumer]]\nname = %q\nmatch = [%q]\n", t.Host, addr)
		if t.Share > 0 {
			fmt.Fprintf(&b, "share = %g\n", t.Share)
		}
		if t.ReserveMBs > 0 {
			fmt.Fprintf(&b, "reserve = \"%gMB/s\"\n", t.ReserveMBs)
		}
		if t.CapMBs > 0 {
			fmt.Fprintf(&b, "cap = \"%gMB/s\"\n", t.CapMBs)
		}
		if t.ThresholdMs > 0 {
			fmt.Fprintf(&b, "threshold = \"%gms\"\n", t.ThresholdMs)
		}
	}
	return b.String()
}

// tenantsPlan returns the three runs.
func tenantsPlan(short bool) []plannedRun {
	total := 180 * time.Second
	if short {
		total = 90 * time.Second
	}
	steady := func(name string, writers int) Workload {
		w := interference(total)
		w.Name, w.Writers, w.On, w.Off = name, writers, "", 0
		return w
	}
	pid := Control{Controller: "pid", ThresholdMs: untunedThreshold}
	shares := pid
	shares.Tenants = []LabTenant{{Host: "b3", Share: 1}, {Host: "b4", Share: 2}, {Host: "b5", Share: 4}}
	limits := pid
	limits.Tenants = []LabTenant{{Host: "b3", ReserveMBs: 6}, {Host: "b5", CapMBs: 2}}
	// Two readers: b2 at the resource's 20 ms, b3 promised 10 ms; the
	// writers on b4 and b5. 10 ms on the emulated array needs more delay
	// than the default ceiling (see controlledRuns).
	readers := Control{Controller: "pid", ThresholdMs: 20, UMaxMs: 60,
		Tenants: []LabTenant{{Host: "b3", ThresholdMs: 10}}}
	turns := steady("readers", 8)
	turns.TurnReader = tenantTurn
	return []plannedRun{
		{"shares-1-2-4", steady("shares", 12), shares},
		{"reserve-cap", steady("reserve-cap", 12), limits},
		{"readers-10-20ms", turns, readers},
	}
}

// tenantsExperiments is issue 36's experiment.
func tenantsExperiments() []Experiment {
	return []Experiment{{
		Name:  "tenants",
		Title: "Tenants: shares, a reservation, a cap and two readers' own promises on one resource (issue 36)",
		Describe: "three runs under sanqos pid with per-consumer terms in the daemon's [tenants]: (1) smalljob on b2 at 15 ms, " +
			"4 sequential 64 KiB writer threads on each of b3, b4, b5 without pause, shares 1:2:4; (2) the same load, b3 " +
			"reserved 6 MB/s, b5 capped at 2 MB/s; (3) smalljob on b2 (the resource's 20 ms) and on b3 (promised 10 ms) " +
			"taking 15 s turns, 4 writer threads on each of b4 and b5. Checks: shares within 10 % of 1:2:4 over the " +
			"throttled seconds, the reservation kept in ≥ 95 % of seconds or the conflict reported, the cap within 5 % " +
			"over any 10 s, each reader's p95 ≤ 1.1 × its own threshold while it is the strictest active reader (from the " +
			"second after its first read of a turn: the daemon learns of a promise from its reader's reads; the first " +
			"seconds are reported), nothing lost (no RTO, every retransmission a DSACKed probe).",
		refMs: untunedThreshold, plan: tenantsPlan, plots: plotTenants,
	}}
}

// turnReaderArgs are the on/off arguments that make a reader of job
// read for turn and pause for turn.
func turnReaderArgs(job string, turn time.Duration) ([]string, error) {
	j, err := loadspec.Preset(job)
	if err != nil {
		return nil, err
	}
	if j.Rate <= 0 {
		return nil, fmt.Errorf("reader %s has no rate: it cannot take turns by bytes", job)
	}
	kib := int64(float64(j.Rate) * turn.Seconds() / 1024)
	return []string{"--on", fmt.Sprintf("%dk", kib), "--off", turn.String()}, nil
}

// TenantResult is what a tenants run measured against its terms.
type TenantResult struct {
	// ThrottledSeconds are the seconds in which every tick held a delay.
	ThrottledSeconds int `json:"throttled_seconds"`
	// Writers: each writer's rate and its terms.
	Writers []TenantWriter `json:"writers,omitempty"`
	// Readers: each reader's p95 while it was the strictest active one.
	Readers []TenantReader `json:"readers,omitempty"`
	// ConflictSeconds are the seconds the daemon reported a reservation
	// it could not keep beside the read promise.
	ConflictSeconds int `json:"conflict_seconds"`
	// readerWaits are each reader's 1-second mean waits by second, for
	// the plot.
	readerWaits map[string]map[int]float64
}

// TenantWriter is one writer host's result.
type TenantWriter struct {
	LabTenant
	// SharePct is its part of the writers' bytes in the throttled
	// seconds; WantPct what its shares ask.
	SharePct, WantPct float64
	// MeanMBs over the writers' time; ReservedPct the seconds at or
	// above the reservation; MaxWindowMBs the highest mean over any
	// TenantCapWindow seconds.
	MeanMBs, ReservedPct, MaxWindowMBs float64
	Seconds                            int
}

// TenantReader is one reader host's result.
type TenantReader struct {
	Host        string  `json:"host"`
	ThresholdMs float64 `json:"threshold_ms"`
	// Seconds it read while it was the strictest active reader, having
	// read in the second before, and its 1-second mean wait's p95 over
	// them.
	Seconds int     `json:"seconds"`
	P95Ms   float64 `json:"p95_ms"`
	// OnsetSeconds are the seconds of its first reads after a pause (the
	// daemon cannot act on a promise before its reader reads), and
	// OnsetMaxMs the longest wait among them: reported, not judged.
	OnsetSeconds int     `json:"onset_seconds"`
	OnsetMaxMs   float64 `json:"onset_max_ms"`
}

// analyzeTenants measures a run against its terms: writers' per-second
// rates from the load generator's logs, the throttled seconds from the
// daemon's ticks, readers' waits from their logs.
// offsets are the seconds after t0 at which each reader started (its
// log counts from its own start).
func analyzeTenants(tl Timeline, ticks []Tick, readers map[string][]iolog.Record, offsets map[string]float64, c Control, from, to float64) *TenantResult {
	res := &TenantResult{}
	throttled := throttledSeconds(ticks)
	res.ThrottledSeconds = len(throttled)
	res.ConflictSeconds = conflictSeconds(ticks)
	res.Writers = tenantWriters(tl, throttled, c, from, to)
	res.Readers, res.readerWaits = tenantReaders(readers, offsets, c)
	return res
}

// throttledSeconds are the seconds k (interval (k−1, k]) whose every
// tick held a delay on a member.
func throttledSeconds(ticks []Tick) map[int]bool {
	held, all := map[int]int{}, map[int]int{}
	for _, t := range ticks {
		k := int(math.Ceil(t.T))
		all[k]++
		if t.DelayMs > 0 && t.Members > 0 {
			held[k]++
		}
	}
	out := map[int]bool{}
	for k, n := range all {
		if n >= 5 && held[k] == n {
			out[k] = true
		}
	}
	return out
}

func conflictSeconds(ticks []Tick) int {
	seen := map[int]bool{}
	for _, t := range ticks {
		if t.Conflict {
			seen[int(math.Ceil(t.T))] = true
		}
	}
	return len(seen)
}

func tenantWriters(tl Timeline, throttled map[int]bool, c Control, from, to float64) []TenantWriter {
	terms := map[string]LabTenant{}
	for _, t := range c.Tenants {
		terms[t.Host] = t
	}
	hosts := make([]string, 0, len(tl.HostMBs))
	for h := range tl.HostMBs {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	var out []TenantWriter
	var heldTotal, shareTotal float64
	held := map[string]float64{}
	for _, h := range hosts {
		t := terms[h]
		t.Host = h
		w := TenantWriter{LabTenant: t}
		var active []float64
		for i, mbs := range tl.HostMBs[h] {
			k := i + 1
			if float64(k) <= from || float64(k) > to {
				continue
			}
			active = append(active, mbs)
			if throttled[k] {
				held[h] += mbs
			}
		}
		w.Seconds = len(active)
		w.MeanMBs = iolog.Round3(iolog.Mean(active))
		if t.ReserveMBs > 0 {
			w.ReservedPct = iolog.Round3(100 * float64(countAtLeast(active, t.ReserveMBs)) / float64(max(1, len(active))))
		}
		w.MaxWindowMBs = iolog.Round3(maxWindowMean(active, TenantCapWindow))
		heldTotal += held[h]
		shareTotal += effectiveShare(t.Share)
		out = append(out, w)
	}
	for i := range out {
		if heldTotal > 0 {
			out[i].SharePct = iolog.Round3(100 * held[out[i].Host] / heldTotal)
		}
		out[i].WantPct = iolog.Round3(100 * effectiveShare(out[i].Share) / shareTotal)
	}
	return out
}

func effectiveShare(s float64) float64 {
	if s <= 0 {
		return 1
	}
	return s
}

func countAtLeast(xs []float64, lim float64) int {
	n := 0
	for _, x := range xs {
		if x >= lim {
			n++
		}
	}
	return n
}

// maxWindowMean is the highest mean of n consecutive values (of all,
// when there are fewer).
func maxWindowMean(xs []float64, n int) float64 {
	if len(xs) == 0 {
		return 0
	}
	n = min(n, len(xs))
	var sum, best float64
	for i, x := range xs {
		sum += x
		if i >= n {
			sum -= xs[i-n]
		}
		if i >= n-1 {
			best = max(best, sum/float64(n))
		}
	}
	return best
}

// tenantReaders judges each reader over the seconds in which it read
// and its threshold was the strictest among the readers active then (a
// reader is active for tenantActiveS after its last read).
func tenantReaders(readers map[string][]iolog.Record, offsets map[string]float64, c Control) ([]TenantReader, map[string]map[int]float64) {
	th := map[string]float64{}
	waits := map[string]map[int]float64{}
	for h, recs := range readers {
		th[h] = c.ThresholdMs
		waits[h] = map[int]float64{}
		for _, r := range iolog.Select(recs, iolog.KindInterval, 0, iolog.OpRead) {
			if r.IOs > 0 {
				waits[h][secondOf(r.T, offsets[h])] = r.Lat.Mean
			}
		}
	}
	for _, t := range c.Tenants {
		if _, ok := th[t.Host]; ok && t.ThresholdMs > 0 {
			th[t.Host] = t.ThresholdMs
		}
	}
	active := func(h string, k int) bool {
		for j := k - tenantActiveS + 1; j <= k; j++ {
			if _, ok := waits[h][j]; ok {
				return true
			}
		}
		return false
	}
	hosts := make([]string, 0, len(readers))
	for h := range readers {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	var out []TenantReader
	for _, h := range hosts {
		var ws []float64
		tr := TenantReader{Host: h, ThresholdMs: th[h]}
		for k, w := range waits[h] {
			strictest := true
			for _, o := range hosts {
				if o != h && active(o, k) && th[o] < th[h] {
					strictest = false
				}
			}
			if !strictest {
				continue
			}
			if _, before := waits[h][k-1]; !before {
				// Its first reads of a turn: the daemon learns of its
				// promise from them (reported, not judged).
				tr.OnsetSeconds++
				tr.OnsetMaxMs = max(tr.OnsetMaxMs, iolog.Round3(w))
				continue
			}
			ws = append(ws, w)
		}
		tr.Seconds, tr.P95Ms = len(ws), iolog.Round3(iolog.Percentile(ws, 95))
		out = append(out, tr)
	}
	return out, waits
}

// tenantChecks are issue 36's checks of every tenants run.
func tenantChecks(s *Summary) []Check {
	var out []Check
	for _, r := range s.Runs {
		tr := r.Tenants
		if tr == nil {
			continue
		}
		out = append(out, tenantWriterChecks(r.Name, tr)...)
		for _, rd := range tr.Readers {
			lim := TenantP95Factor * rd.ThresholdMs
			out = append(out, Check{r.Name, fmt.Sprintf("%s's p95 wait while strictest (%d s; %d s of first reads up to %.1f ms, not judged)",
				rd.Host, rd.Seconds, rd.OnsetSeconds, rd.OnsetMaxMs),
				fmt.Sprintf("≤ %.4g ms", lim), fmt.Sprintf("%.1f ms", rd.P95Ms), rd.Seconds > 0 && rd.P95Ms <= lim})
		}
	}
	return out
}

func tenantWriterChecks(run string, tr *TenantResult) []Check {
	var out []Check
	shares := false
	for _, w := range tr.Writers {
		shares = shares || w.Share > 0
	}
	for _, w := range tr.Writers {
		if shares {
			dev := math.Abs(w.SharePct/w.WantPct - 1)
			out = append(out, Check{run, fmt.Sprintf("%s's part of the throttled seconds' bytes (share %g, %d s throttled)", w.Host, effectiveShare(w.Share), tr.ThrottledSeconds),
				fmt.Sprintf("%.1f %% ± %g %%", w.WantPct, 100*TenantShareTol), fmt.Sprintf("%.1f %%", w.SharePct),
				tr.ThrottledSeconds > 0 && dev <= TenantShareTol})
		}
		if w.ReserveMBs > 0 {
			ok := w.ReservedPct >= TenantReservePct || tr.ConflictSeconds > 0
			out = append(out, Check{run, fmt.Sprintf("%s's seconds at or above its %g MB/s reservation (conflict reported in %d s)", w.Host, w.ReserveMBs, tr.ConflictSeconds),
				fmt.Sprintf("≥ %g %% or a conflict", TenantReservePct), fmt.Sprintf("%.1f %%", w.ReservedPct), ok})
		}
		if w.CapMBs > 0 {
			lim := (1 + TenantCapTol) * w.CapMBs
			out = append(out, Check{run, fmt.Sprintf("%s's highest %d s mean rate (cap %g MB/s)", w.Host, TenantCapWindow, w.CapMBs),
				fmt.Sprintf("≤ %.3g MB/s", lim), fmt.Sprintf("%.2f MB/s", w.MaxWindowMBs), w.MaxWindowMBs <= lim})
		}
	}
	return out
}

package sim

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/tenant"
)

// The tenants experiment (issue 36): on the thesis's array, three writers
// with shares 1:2:4, a writer with a reserved rate and a capped one, all
// writing without pause, against two readers with their own read
// promises that take turns. Its checks are the issue's: while the
// resource is throttled the three writers' rates split 1:2:4 within
// 10 %; the reserved writer is at or above its reservation in 95 % of
// the seconds, or a conflict was reported; the capped writer is within
// 5 % of its cap over every 10 s; each reader's p95 is within 1.1× its
// own threshold while it is the strictest active reader.

// The tenants' terms.
const (
	tenantStrictMs = 10.0
	tenantLooseMs  = 20.0
	tenantReserve  = 5e6   // bytes/s
	tenantCap      = 1.0e6 // bytes/s
	tenantBurst    = 4e6   // bytes
	tenantTurn     = 30 * time.Second
)

// TenantsScenario is the tenants experiment's workload and book.
func TenantsScenario() Scenario {
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	sc := ThesisScenario()
	sc.Name = "tenants"
	sc.Devices = []Device{
		{Name: "dm-0", Addr: ip("10.0.0.240"), Reader: true, Turn: Turn{On: tenantTurn, Every: 2 * tenantTurn}},
		{Name: "dm-1", Addr: ip("10.0.0.241"), Reader: true, Turn: Turn{At: tenantTurn, On: tenantTurn, Every: 2 * tenantTurn}},
		{Name: "dm-2", Addr: ip("10.0.0.242"), Threads: 4},
		{Name: "dm-3", Addr: ip("10.0.0.243"), Threads: 4},
		{Name: "dm-4", Addr: ip("10.0.0.244"), Threads: 4},
		{Name: "dm-5", Addr: ip("10.0.0.245"), Threads: 2},
		{Name: "dm-6", Addr: ip("10.0.0.246"), Threads: 4},
	}
	// Writers that never pause: the split is measured while they all
	// write.
	sc.BurstBytes, sc.PerHostBursts = 1<<40, true
	entry := func(addr string, t tenant.Terms) tenant.Entry {
		return tenant.Entry{Match: []string{addr}, Terms: t}
	}
	book, err := tenant.New([]tenant.Entry{
		entry("10.0.0.240", tenant.Terms{Name: "reader-strict", ThresholdMs: tenantStrictMs}),
		entry("10.0.0.241", tenant.Terms{Name: "reader-loose", ThresholdMs: tenantLooseMs}),
		entry("10.0.0.242", tenant.Terms{Name: "share-1", Share: 1}),
		entry("10.0.0.243", tenant.Terms{Name: "share-2", Share: 2}),
		entry("10.0.0.244", tenant.Terms{Name: "share-4", Share: 4}),
		entry("10.0.0.245", tenant.Terms{Name: "reserved", ReserveBps: tenantReserve}),
		entry("10.0.0.246", tenant.Terms{Name: "capped", CapBps: tenantCap, BurstBytes: tenantBurst}),
	}, tenant.PromiseWins)
	if err != nil {
		panic(err) // the book above is valid
	}
	sc.Tenants = book
	return sc
}

// TenantReport is the tenants experiment's checks on a run.
type TenantReport struct {
	// ShareErr is the largest relative error of a share writer's part of
	// the three's rate against its share's part, over each run of 10
	// throttled seconds; Parts their measured parts over all of them
	// (1:2:4 is 0.143, 0.286, 0.571).
	ShareErr float64
	Parts    [3]float64
	// ThrottledS counts the seconds the share split is measured over.
	ThrottledS int
	// ReservedOK is the fraction of writing seconds the reserved writer
	// was at or above its reservation or a conflict was reported;
	// Conflicts counts the seconds with a conflict; ReservedAbove is the
	// fraction at or above the reservation, conflict or not.
	ReservedOK, ReservedAbove float64
	Conflicts                 int
	// CapErr is the largest relative error of the capped writer's rate
	// over a 10 s window against its cap (see capError).
	CapErr float64
	// ReaderP95 is each reader's p95 of its per-second mean wait over the
	// seconds it set the threshold; ReaderS how many.
	ReaderP95 [2]float64
	ReaderS   [2]int
}

// Failures lists the checks the report fails.
func (r TenantReport) Failures() []string {
	var out []string
	if r.ThrottledS < 10 || r.ShareErr > 0.10 {
		out = append(out, fmt.Sprintf("share split off by %.1f %% over %d throttled s (want ≤ 10 %%)", 100*r.ShareErr, r.ThrottledS))
	}
	if r.ReservedOK < 0.95 {
		out = append(out, fmt.Sprintf("reserved writer at its reservation (or in conflict) in %.1f %% of seconds (want ≥ 95 %%)", 100*r.ReservedOK))
	}
	if r.CapErr > 0.05 {
		out = append(out, fmt.Sprintf("capped writer off its cap by %.1f %% over 10 s (want ≤ 5 %%)", 100*r.CapErr))
	}
	for k, want := range []float64{tenantStrictMs, tenantLooseMs} {
		if r.ReaderS[k] < 10 || r.ReaderP95[k] > 1.1*want {
			out = append(out, fmt.Sprintf("reader %d p95 %.2f ms over %d s (want ≤ %.1f ms)", k, r.ReaderP95[k], r.ReaderS[k], 1.1*want))
		}
	}
	return out
}

// String is the report in one line per check.
func (r TenantReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "shares: parts %.3f %.3f %.3f (want 0.143 0.286 0.571), worst error over 10 throttled s %.1f %% (%d throttled s)\n",
		r.Parts[0], r.Parts[1], r.Parts[2], 100*r.ShareErr, r.ThrottledS)
	fmt.Fprintf(&b, "reservation: kept or conflict reported in %.1f %% of seconds, kept in %.1f %% (%d s with a conflict)\n",
		100*r.ReservedOK, 100*r.ReservedAbove, r.Conflicts)
	fmt.Fprintf(&b, "cap: worst 10 s window off the cap by %.1f %%\n", 100*r.CapErr)
	fmt.Fprintf(&b, "readers: strict p95 %.2f ms over %d s (promise %g), loose p95 %.2f ms over %d s (promise %g)\n",
		r.ReaderP95[0], r.ReaderS[0], tenantStrictMs, r.ReaderP95[1], r.ReaderS[1], tenantLooseMs)
	return b.String()
}

// CheckTenants computes the tenants experiment's checks on res, a run of
// TenantsScenario. The first settle seconds of the writers' time are
// left out of the share and reservation checks (the loops start from
// rest there).
func CheckTenants(res *Result, settle time.Duration) TenantReport {
	var r TenantReport
	sc := res.Config.Scenario
	from := (sc.Start + settle).Seconds()
	tickOf := ticksBySecond(res.Ticks, len(res.Seconds))
	var shareMB [3]float64
	var okS, aboveS, writeS int
	var window [3]float64
	windowS := 0
	for i, s := range res.Seconds {
		if len(s.DevWriteMBs) < 7 || s.T <= sc.Start.Seconds() {
			continue
		}
		ts := tickOf[i]
		conflict, throttled := false, len(ts) > 0
		for _, t := range ts {
			conflict = conflict || t.Conflict != ""
			throttled = throttled && t.DelayMs > 0
		}
		if conflict {
			r.Conflicts++
		}
		if s.T > from {
			writeS++
			above := s.DevWriteMBs[5] >= tenantReserve/1e6
			if conflict || above {
				okS++
			}
			if above {
				aboveS++
			}
			if throttled {
				r.ThrottledS++
				windowS++
				for k := range shareMB {
					shareMB[k] += s.DevWriteMBs[2+k]
					window[k] += s.DevWriteMBs[2+k]
				}
				if windowS == 10 {
					r.ShareErr = max(r.ShareErr, shareError(window))
					window, windowS = [3]float64{}, 0
				}
			}
		}
		for k, name := range []string{"reader-strict", "reader-loose"} {
			if len(ts) > 0 && allBy(ts, name) && !math.IsNaN(s.ReaderMs[k]) {
				r.ReaderS[k]++
			}
		}
	}
	if writeS > 0 {
		r.ReservedOK = float64(okS) / float64(writeS)
		r.ReservedAbove = float64(aboveS) / float64(writeS)
	}
	total := shareMB[0] + shareMB[1] + shareMB[2]
	for k := range shareMB {
		if total > 0 {
			r.Parts[k] = shareMB[k] / total
		}
	}
	r.CapErr = capError(res, sc)
	r.ReaderP95 = readerP95(res, tickOf)
	return r
}

// shareError is the largest relative error of the three share writers'
// parts of mb against 1:2:4.
func shareError(mb [3]float64) float64 {
	total := mb[0] + mb[1] + mb[2]
	if !(total > 0) {
		return 1
	}
	worst := 0.0
	for k, share := range []float64{1, 2, 4} {
		worst = max(worst, math.Abs(mb[k]/total/(share/7)-1))
	}
	return worst
}

// capError is the capped writer's largest relative error against its
// cap over 10 s windows of its writing time: above it (beyond its burst
// allowance, which it may spend once) in any window, below it in the
// windows that start after capSettle (the writer is then owed nothing
// and can write faster than its cap).
func capError(res *Result, sc Scenario) float64 {
	var mb []float64
	for _, s := range res.Seconds {
		if len(s.DevWriteMBs) >= 7 && s.T > sc.Start.Seconds() {
			mb = append(mb, s.DevWriteMBs[6])
		}
	}
	want := tenantCap / 1e6 * 10
	worst := 0.0
	for i := 0; i+10 <= len(mb); i++ {
		sum := 0.0
		for _, v := range mb[i : i+10] {
			sum += v
		}
		if over := (sum - tenantBurst/1e6) / want; over > 1 {
			worst = max(worst, over-1)
		}
		if i >= int(capSettle.Seconds()) {
			worst = max(worst, 1-sum/want)
		}
	}
	return worst
}

// capSettle is how long the capped writer's first overshoot (its burst,
// and what it wrote while its delay rose) takes to be repaid: the engine
// holds it below its cap until its bucket is out of debt.
const capSettle = 20 * time.Second

// readerP95 is each reader's p95 of its per-second mean wait over the
// seconds in which it set the threshold at every tick.
func readerP95(res *Result, tickOf [][]Tick) [2]float64 {
	var out [2]float64
	for k, name := range []string{"reader-strict", "reader-loose"} {
		var v []float64
		for i, s := range res.Seconds {
			if len(s.ReaderMs) > k && len(tickOf[i]) > 0 && allBy(tickOf[i], name) && !math.IsNaN(s.ReaderMs[k]) {
				v = append(v, s.ReaderMs[k])
			}
		}
		if len(v) > 0 {
			sort.Float64s(v)
			out[k] = quantile(v, 0.95)
		}
	}
	return out
}

// ticksBySecond groups ticks by the 1-second sample they fall in.
func ticksBySecond(ticks []Tick, n int) [][]Tick {
	out := make([][]Tick, n)
	for _, t := range ticks {
		if i := int(math.Ceil(t.T-1e-9)) - 1; i >= 0 && i < n {
			out[i] = append(out[i], t)
		}
	}
	return out
}

func allBy(ts []Tick, name string) bool {
	for _, t := range ts {
		if t.ThresholdBy != name {
			return false
		}
	}
	return true
}

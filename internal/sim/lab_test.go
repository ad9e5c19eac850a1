package sim

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// labPoint is one measurement of the lab (docs/results.md): the reader's
// p95 wait at the initiator and the writers' MB/s over the seconds the
// writers were on.
type labPoint struct {
	name        string
	fixedMs     float64 // a static throttle (frontier --short), or 0
	thresholdMs float64 // pid's threshold (fig5.11 --short), or 0
	p95, mbs    float64
}

// labMeasured are the lab's runs: the frontier's static throttles of
// 2026-11-25 (35 s runs: 5 s lead, 25 s of writers) and fig5.11 --short
// under pid at 15 ms of 2026-11-26 with returning writers armed. The code
// before arming measured 16.3 ms and 27.4 MB/s in the same session, -9 %
// and +10 % from the simulator of that code (14.8 ms, 30.0 MB/s): each
// onset's unheld first tick cost the lab more than the simulator.
var labMeasured = []labPoint{
	{"fixed 0 ms", 0, 0, 57.1, 37.3},
	{"fixed 10 ms", 10, 0, 18.9, 34.3},
	{"fixed 20 ms", 20, 0, 12.8, 18.3},
	{"fixed 40 ms", 40, 0, 11.3, 9.8},
	{"pid 15 ms", 0, 15, 14.9, 31.4},
}

// simulateLab runs the lab scenario as the lab ran pt, averaged over
// seeds 1–4 (the lab's numbers are single runs; the seeds average out
// which threads collide on a spindle).
func simulateLab(t *testing.T, pt labPoint) (p95, mbs float64) {
	t.Helper()
	const seeds = 4
	for seed := int64(1); seed <= seeds; seed++ {
		cfg := DefaultConfig()
		cfg.Scenario, cfg.Seed = LabScenario(), seed
		if pt.thresholdMs > 0 {
			cfg.ThresholdMs, cfg.Duration = pt.thresholdMs, 120*time.Second
		} else {
			// frontier --short: writers from 5 s to 30 s of a 35 s run.
			cfg.Scenario.Start, cfg.Scenario.Tail = 5*time.Second, 5*time.Second
			cfg.Controller, cfg.FixedDelayMs, cfg.Duration = "none", pt.fixedMs, 35*time.Second
		}
		s := run(t, cfg).Summary
		p95 += s.ReadLatencyMs.P95 / seeds
		mbs += s.WriteMBs / seeds
	}
	return p95, mbs
}

// TestLabScenarioAgreesWithLab holds the lab scenario to the lab's
// measurements (issue 12, item 6): the reader's p95 and the writers' MB/s
// within 10 % of the lab's at every point of the static frontier and
// under pid at 15 ms. The scenario's differences from the thesis scenario
// are all facts of the lab (LabScenario), none fitted to these numbers.
func TestLabScenarioAgreesWithLab(t *testing.T) {
	for _, pt := range labMeasured {
		t.Run(pt.name, func(t *testing.T) {
			p95, mbs := simulateLab(t, pt)
			dp, dm := 100*(p95/pt.p95-1), 100*(mbs/pt.mbs-1)
			t.Logf("%s: p95 %.1f ms (lab %.1f, %+.1f %%), writers %.1f MB/s (lab %.1f, %+.1f %%)", pt.name, p95, pt.p95, dp, mbs, pt.mbs, dm)
			if math.Abs(dp) > 10 || math.Abs(dm) > 10 {
				t.Errorf("%s: simulator %s from the lab, want within 10 %%", pt.name, fmt.Sprintf("p95 %+.1f %%, MB/s %+.1f %%", dp, dm))
			}
		})
	}
}

// TestLabScenarioIsTheLabs: the lab scenario differs from the thesis's
// only where the lab does (see LabScenario).
func TestLabScenarioIsTheLabs(t *testing.T) {
	th, lab := ThesisScenario(), LabScenario()
	if lab.Disk != th.Disk || lab.WriteDelayFactor != th.WriteDelayFactor || lab.WriteNetMs != th.WriteNetMs {
		t.Errorf("the lab scenario changed the array or the actuator: %+v", lab)
	}
	if got := lab.ReadNetMs + lab.ResponseNetMs; math.Abs(got-0.34) > 1e-9 {
		t.Errorf("read path %.2f ms, want the measured 0.34", got)
	}
	// 360 GB array / 8 = 45 GB, rounded down to a 640 KiB stripe row.
	if r := LabRegionBytes(lab.Disk); r != 44999639040 || lab.LUNStride != r {
		t.Errorf("LUN regions %d apart (LabRegionBytes %d), want 44999639040", lab.LUNStride, r)
	}
}

// TestLabWorkloadPerHost: in the lab scenario each writer host bursts on
// its own barrier, so after a few bursts the hosts start at different
// times, and the writers stop Tail before the end of the run.
func TestLabWorkloadPerHost(t *testing.T) {
	sc := LabScenario()
	p, err := newPlant(sc, epoch, 1)
	if err != nil {
		t.Fatal(err)
	}
	const total = 300 * time.Second
	p.writersEnd = epoch.Add(total - sc.Tail)
	starts := map[int][]time.Time{} // burst group → its bursts' starts
	var writesAtStop uint64
	stopSeen := false
	for p.q.Len() > 0 && p.q[0].at.Before(epoch.Add(total)) {
		e := p.q.pop()
		if !stopSeen && !e.at.Before(p.writersEnd.Add(time.Second)) {
			// A second after the stop every write in flight is done.
			stopSeen = true
			for i := range p.dev {
				writesAtStop += p.dev[i].writes
			}
		}
		if e.kind == evBurst && !p.stopped(e.at) {
			starts[e.actor] = append(starts[e.actor], e.at)
		}
		p.handle(e)
	}
	var writesAtEnd uint64
	for i := range p.dev {
		writesAtEnd += p.dev[i].writes
	}
	if !stopSeen || writesAtEnd != writesAtStop {
		t.Errorf("writes went on after the writers' runtime: %d a second after the stop, %d at the end", writesAtStop, writesAtEnd)
	}
	// Group -1 is the first burst of all; then one group per writer host.
	if len(starts[-1]) != 1 || len(starts) != 4 {
		t.Fatalf("burst groups %v: want the first burst of all, then one group per writer host", starts)
	}
	drift := time.Duration(0)
	for g := 1; g <= 3; g++ {
		a, b := starts[g], starts[1]
		for k := 0; k < min(len(a), len(b)); k++ {
			drift = max(drift, a[k].Sub(b[k]), b[k].Sub(a[k]))
		}
	}
	if drift < 100*time.Millisecond {
		t.Errorf("the hosts' bursts never start more than %v apart: they are not on barriers of their own", drift)
	}
	t.Logf("bursts per host %d/%d/%d, largest drift between hosts %v", len(starts[1]), len(starts[2]), len(starts[3]), drift)
}

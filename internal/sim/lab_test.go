package sim

import (
	"math"
	"testing"
	"time"
)

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

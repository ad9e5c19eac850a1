package control

import "testing"

// TestFloorReleasesAHealthyResource: the floor's case, which the
// ablation's scores (the reader's latency, the writers' rate) do not
// see: writers that go on writing once the overload is over, lightly
// enough that the resource is healthy, are released to 0 and the
// controller comes to rest. Without the release (Rules.Floor off) the
// delay falls to just under the floor and stays there for as long as
// they write: a healthy resource whose writers are held for ever.
func TestFloorReleasesAHealthyResource(t *testing.T) {
	run := func(release bool) (ticks int, last float64) {
		p := DefaultParams()
		c := NewPID(p)
		c.noRelease = !release
		for range 50 {
			c.Update(3 * p.TargetMs) // the overload: the delay climbs
		}
		if c.u == 0 {
			t.Fatal("the overload set no delay: the case is not exercised")
		}
		const healthy = 600 // a minute of ticks at half the set point
		for k := range healthy {
			if last = c.Update(p.TargetMs / 2); last == 0 && ticks == 0 {
				ticks = k + 1
			}
		}
		return ticks, last
	}
	ticks, last := run(true)
	offTicks, offLast := run(false)
	t.Logf("released after %d ticks at half the set point; without the release %.3f ms after 600", ticks, offLast)
	if ticks == 0 || last != 0 || ticks > 300 {
		t.Errorf("with the floor's release: delay 0 after %d ticks, %v at the end; want 0 within 30 s and kept", ticks, last)
	}
	floor := FloorShare * DefaultParams().TargetMs
	if offTicks != 0 || offLast < floor/2 {
		t.Errorf("without the release: delay 0 after %d ticks, %v ms at the end; want it held near the floor (%v ms) for the whole minute, the case the rule is for", offTicks, offLast, floor)
	}
}

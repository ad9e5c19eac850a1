package diskemu

import (
	"testing"

	"github.com/sanqos/sanqos/internal/sim"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// TestLabRegionIsTheEmulators: the simulator's lab scenario lays its LUNs
// out as this emulator does (sim.LabRegionBytes is regionFor's rule; the
// simulator is a pure package and cannot import this one).
func TestLabRegionIsTheEmulators(t *testing.T) {
	for _, name := range diskmodel.Profiles() {
		p, err := diskmodel.ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewModel(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sim.LabRegionBytes(p), regionFor(m); got != want {
			t.Errorf("%s: the simulator lays LUNs %d bytes apart, the emulator %d", name, got, want)
		}
	}
}

package diskstats

import (
	"testing"
	"time"
)

// A device re-created (a loop device re-attached, a dm table reloaded)
// starts its counters at zero again. Finding 7 of issue 14: that used to
// be read as a 32-bit wrap, and an idle consumer showed 6.5e9 kB/s.
func TestCounterResetIsNotAWrap(t *testing.T) {
	tests := []struct {
		name      string
		cur, prev uint64
		want      uint64
		ok        bool
	}{
		{"growth", 10, 3, 7, true},
		{"32-bit wrap near the top", 4, 1<<32 - 6, 10, true},
		{"reset from a small value", 5, 1000, 0, false},
		{"reset from the middle of the 32-bit range", 10, 1 << 31, 0, false},
		{"reset from above 2^32", 1, 1 << 33, 0, false},
		{"reset to a value that would imply a huge wrap", 3_000_000_000, 1<<32 - 296, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := CounterDelta(tt.cur, tt.prev)
			if got != tt.want || ok != tt.ok {
				t.Errorf("CounterDelta(%d, %d) = %d, %v, want %d, %v", tt.cur, tt.prev, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestSubAfterResetGivesNoRate(t *testing.T) {
	// An idle consumer whose loop device was re-attached: every counter
	// is back near zero.
	prev := Stat{ReadIOs: 5000, ReadSectors: 80000, ReadTicks: 9000, WriteIOs: 7000, WriteSectors: 3_000_000, WriteTicks: 12000}
	cur := Stat{ReadIOs: 3, ReadSectors: 24, ReadTicks: 2, WriteIOs: 1, WriteSectors: 8, WriteTicks: 1}
	d := Sub(&cur, &prev)
	if !d.Reset {
		t.Errorf("Sub across a reset: Reset false, want true")
	}
	r := d.Rates(100 * time.Millisecond)
	if r != (Rates{}) {
		t.Errorf("rates across a reset = %+v, want none (re-baseline)", r)
	}
	// One counter back, the others forward: still a reset (the kernel
	// never moves one counter back alone), still no rate.
	cur2 := prev
	cur2.WriteSectors = 10
	if d := Sub(&cur2, &prev); !d.Reset || d.Rates(100*time.Millisecond).WriteKBs != 0 {
		t.Errorf("one counter back: %+v, want a reset without rate", d)
	}
	// A true 32-bit wrap of the ms counter keeps its rate.
	p := Stat{ReadIOs: 100, ReadTicks: 1<<32 - 10}
	c := Stat{ReadIOs: 105, ReadTicks: 40}
	if d := Sub(&c, &p); d.Reset || d.ReadTicks != 50 {
		t.Errorf("a wrap of the ms counter: %+v, want 50 ms and no reset", d)
	}
}

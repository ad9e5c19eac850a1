package control

import (
	"testing"
	"time"
)

// TestPauseArmsAtTheHeldDelay: at a burst's tail the reads get fast while
// the writers still write and the delay winds down; the pause that
// follows arms the delay the burst held, not the wound-down one, and the
// armed delay is what the next burst meets. Without the armed rule the
// pause keeps nothing of it. A tail long enough to wind the delay to
// nothing arms it too.
func TestPauseArmsAtTheHeldDelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		off    []string
		tail   int     // ticks of fast reads with the writers still on
		tailMs float64 // their read latency
		toZero bool    // the tail winds the delay all the way to 0
	}{
		{"armed", nil, 15, 4, false},
		{"armed off", []string{"armed"}, 15, 4, false},
		{"tail to zero", nil, 40, 0.5, true},
		{"tail to zero, armed off", []string{"armed"}, 40, 0.5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, step := writersLoop(t, tc.off)
			var peak float64
			for range 20 { // the onset: far over
				peak = max(peak, step(40, 3).ControlMs)
			}
			var held float64
			for range 60 { // held near the set point
				held = step(13, 3).ControlMs
			}
			wound := held
			for range tc.tail { // the tail: fast reads, the writers still on
				wound = step(tc.tailMs, 3).ControlMs
			}
			if wound >= held/1.5 || tc.toZero && wound != 0 {
				t.Fatalf("the tail wound the delay down to %.2f ms only, from %.2f: the case is not made", wound, held)
			}
			pause := step(tc.tailMs, 0)
			if tc.off == nil && (!pause.Armed || pause.ControlMs < 0.9*held || pause.ControlMs > peak) {
				t.Errorf("the pause armed %.2f ms (armed %v); want what the burst held (%.2f at its end, %.2f at its peak), not the wound-down %.2f",
					pause.ControlMs, pause.Armed, held, peak, wound)
			}
			if tc.off != nil && pause.ControlMs > wound {
				t.Errorf("with armed off the pause kept %.2f ms, more than the wound-down %.2f", pause.ControlMs, wound)
			}
			for range 20 {
				step(tc.tailMs, 0)
			}
			if back := step(20, 3); tc.off == nil && back.DelayMs < 0.9*pause.ControlMs {
				t.Errorf("the next burst met %.2f ms, want the armed %.2f", back.DelayMs, pause.ControlMs)
			}
		})
	}
}

// writersLoop is a pid loop at T = 15 ms with the rules off switched off,
// and step, which runs one tick of reads at rawMs with members writers
// writing.
func writersLoop(t *testing.T, off []string) (*Loop, func(rawMs float64, members int) Output) {
	t.Helper()
	l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 15, Alpha: 0.25,
		UMaxLimitMs: DefaultUMaxLimitMs, Off: off})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	return l, func(rawMs float64, members int) Output {
		now = now.Add(100 * time.Millisecond)
		return l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: rawMs, Members: members, Writing: members > 0})
	}
}

package control

import (
	"testing"
	"time"
)

// TestRecallStartsTheClimbAtTheLastBurstsDelay: writers back after more
// than ArmHold meet a loop at rest. Within RecallWindow the overload they
// bring makes the delay jump to what their last burst needed; past it,
// or with the rule off, the delay climbs from the floor.
func TestRecallStartsTheClimbAtTheLastBurstsDelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		off    []string
		pause  time.Duration
		recall bool
	}{
		{"recall", nil, ArmHold + 15*time.Second, true},
		{"recall off", []string{"recall"}, ArmHold + 15*time.Second, false},
		{"past the window", nil, RecallWindow + time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, step := writersLoop(t, tc.off)
			for range 20 { // the first burst's onset, from rest
				step(40, 3)
			}
			var held float64
			for range 60 { // held near the set point
				held = step(13, 3).ControlMs
			}
			var rest Output
			for range int(tc.pause / (100 * time.Millisecond)) { // the pause, healthy
				rest = step(4, 0)
			}
			if u := l.PID().u; u != 0 {
				t.Fatalf("after a pause of %v the controller is at %.2f ms, not at rest: the case is not made", tc.pause, u)
			}
			if got := rest.RecallMs > 0; got != tc.recall {
				t.Errorf("at rest after the pause the output says it would recall %.2f ms; want a delay to recall %v", rest.RecallMs, tc.recall)
			}
			var back float64
			for range 5 { // the writers are back: an overload
				back = step(40, 3).DelayMs
			}
			if tc.recall && back < 0.9*held {
				t.Errorf("half a second into the overload the delay is %.2f ms, want the last burst's %.2f recalled", back, held)
			}
			if !tc.recall && back >= 0.9*held {
				t.Errorf("half a second into the overload the delay is %.2f ms: it did not climb from the floor (the last burst held %.2f)", back, held)
			}
		})
	}
}

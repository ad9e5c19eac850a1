package control

import "time"

// Onsets (step 3 of the law, doc.go): more members writing than the
// output was learned with scale it at once. Only where members are found
// by their writes (LoopConfig.ByWrites).
const (
	// ActiveWindow: a member counts as writing for this long after its
	// last write, so a writer held at a long delay that completes no
	// write in some tick is not counted out and back in (each return
	// would scale the delay up again).
	ActiveWindow = time.Second
	// learnAfter: a lower count is learned after it: about two of pid's
	// integral times (Ti 500 ms), by which it has adapted to the count.
	learnAfter = 2 * time.Second
)

// onsetState is a resource's memory for the onset feedforward.
type onsetState struct {
	// writers is how many members the controller's output was learned
	// with (0: none yet); lowerSince when fewer started to write.
	writers    int
	lowerSince time.Time
}

// feedForward scales the output when more members write than it was
// learned with (step 3 in doc.go). It runs before the controller's step;
// running says whether the controller is stepped in this tick (a lower
// count is learned only while it is).
func (l *Loop) feedForward(o Observation, running bool) {
	if !running {
		l.onset.lowerSince = time.Time{}
		return
	}
	if !l.cfg.ByWrites {
		return
	}
	n, now := o.Active, o.Now
	st := &l.onset
	switch {
	case n == 0:
		st.lowerSince = time.Time{}
	case n > st.writers:
		if l.rules.Onset && st.writers > 0 && l.controlMs > 0 {
			l.controlMs = l.pid.Scale(float64(n) / float64(st.writers))
		}
		st.writers, st.lowerSince = n, time.Time{}
	case n < st.writers:
		if st.lowerSince.IsZero() {
			st.lowerSince = now
		} else if now.Sub(st.lowerSince) >= learnAfter {
			st.writers, st.lowerSince = n, time.Time{}
		}
	default:
		st.lowerSince = time.Time{}
	}
}

// OnsetWriters is how many writing members the output stands for (see
// step 3 in doc.go; 0: none yet).
func (l *Loop) OnsetWriters() int { return l.onset.writers }

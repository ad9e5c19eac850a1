package control

import "time"

// Onsets. A per-packet delay slows each writer by about one delay per
// I/O, so the delay a resource needs grows with the number of writers
// it holds (Little's law: outstanding I/Os × service time; see
// "Authority"). The controller learns the delay for the writers it
// sees, from the read latency, which rises only after a newcomer's
// first I/Os have queued at the disk: a writer that starts while others
// are held meets a delay learned for fewer and lets a second or two
// through. Measured in the simulator's lab scenario, whose hosts drift
// apart as the lab's do: a host alone brings the delay down to 3–5 ms
// and each host that starts after it lifts the reader's wait over
// 1.2 × threshold, 2–6 % of the seconds at 15 and 20 ms.
//
// So the engine counts the set's members that wrote in the last
// activeWindow and, when more of them write than the output was learned
// with, scales the output by the ratio at once (the pid moves by
// factors anyway); the controller then corrects from there. The count
// the output stands for rises at once and falls only after the lower
// count has held for learnAfter with the controller running, so writers
// that stop together (and leave the window a tick apart) and come back
// together meet the delay they left, not a multiple of it. No member
// writing keeps the count (the output is armed for them). Only the
// read-over-write policy, whose members are found writing, and only a
// controller that can be scaled (pid; not thesis's copy).
const (
	// ActiveWindow: a member counts as writing for this long after its
	// last write, so a writer held at a long delay that completes no
	// write in some tick is not counted out and back in (each return
	// would scale the delay up again).
	ActiveWindow = time.Second
	// learnAfter: about two of the pid's integral times (Ti 500 ms), by
	// which it has adapted the output to a lower count.
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
// learned with (see "Onsets"). It runs before the controller's step;
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
// "Onsets"; 0: none yet).
func (l *Loop) OnsetWriters() int { return l.onset.writers }

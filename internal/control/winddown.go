package control

import "time"

// Wind-down. The writers of a burst do not all stop at once: their
// threads finish one after another, the read latency falls with each,
// and the controller, following it, lowers the delay over the burst's
// last seconds. Armed through the pause, the set then keeps that
// wound-down delay, learned for the last few threads, and the next burst
// starts with all of them at it. Near saturation that is the difference
// between holding and not: in the lab's fig5.11 at 20 ms (2026-11-27,
// frontier's pid-20ms) the delay held the bursts at 9–13 ms, fell to
// 5–6 ms as each burst ended, and the bursts that came back to it peaked
// at 25–30 ms for a second, where the static frontier of the same hour put
// the reader's p95 at 44 ms under a fixed 7.5 ms and at 18.6 ms under
// 10 ms.
//
// So the engine keeps the highest output of the controller's running
// ticks with members over the last burstMemory, and once no member has
// written for activeWindow (a pause, not a quiet tick inside a burst)
// lifts the output to it, once per pause: writers that come back meet
// the delay that held their burst, and the controller corrects from
// there. A burst's onset, where the ceiling may have driven the delay to
// many times its steady value to drain a backlog, lies further back than
// burstMemory in every burst longer than a few seconds. Only controllers
// whose output can be set (pid).
const burstMemory = 4 * time.Second

// burstSlots: one place per whole second of burstMemory, and the current
// second's.
const burstSlots = int(burstMemory/time.Second) + 1

// burstPeak is the highest controller output per whole second, for the
// seconds of the last burstMemory (allocation-free: one place a second).
type burstPeak struct {
	sec [burstSlots]int64
	max [burstSlots]float64
	// lifted: the output was lifted in the current pause.
	lifted bool
}

func (b *burstPeak) slot(s int64) int {
	n := int64(len(b.sec))
	return int((s%n + n) % n)
}

// note records output u of a running tick at now.
func (b *burstPeak) note(now time.Time, u float64) {
	s := now.Unix()
	i := b.slot(s)
	if b.sec[i] != s {
		b.sec[i], b.max[i] = s, 0
	}
	b.max[i] = max(b.max[i], u)
	b.lifted = false
}

// peak is the highest output noted within burstMemory of now.
func (b *burstPeak) peak(now time.Time) float64 {
	s, m := now.Unix(), 0.0
	for i, t := range b.sec {
		if t <= s && s-t <= int64(burstMemory/time.Second) {
			m = max(m, b.max[i])
		}
	}
	return m
}

// windDown notes the output of a running tick, or, in a pause of every
// member, lifts it to the burst's (see "Wind-down"). It runs after the
// controller's step; running says whether it was stepped.
func (l *Loop) windDown(o Observation, armed, running bool) {
	b := &l.burst
	switch {
	case running && o.Members > 0:
		b.note(o.Now, l.controlMs)
	case !armed || b.lifted || o.Active > 0:
	default:
		b.lifted = true
		if l.rules.WindDown {
			if p := b.peak(o.Now); p > l.controlMs {
				l.controlMs = l.pid.SetOutput(p)
			}
		}
	}
}

package control

import "time"

// Wind-down (step 5 of the law, doc.go): in a pause, the output is
// lifted to the highest of the burst's last burstMemory, so writers that
// come back meet the delay that held their burst, not the one learned
// for its last threads. burstMemory: a long burst's onset, where the
// ceiling may have driven the delay to many times its steady value, lies
// further back.
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
// member, lifts it to the burst's (step 5 in doc.go). It runs after the
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

package control

import "time"

// Gain (step 8 of the law, doc.go): the loop measures what its delay
// buys. A delay is worth its cost to the writers only if the plant's gain
// is there: less read latency for more delay. Where the readers wait for
// something packet delay does not reach (the target's CPU, the network,
// a device that is not the bottleneck), the controller, seeing the signal
// over its set point, adds delay without end and only costs the writers.
//
// The gain cannot be read off the loop's record passively: in closed
// loop the delay is high exactly when the latency is, so signal and delay
// correlate positively whatever the plant does. So the loop asks the
// plant, at bounded cost: a loop that has been losing (delay in force,
// signal over the set point) releases its delay for one probe and
// compares the reads under it with those of the ticks just before, at
// the same load, then confirms by applying it again. A delay that bought
// too little is held at 0 (Futile) and tried again now and then, so a
// change of workload where delay helps is caught. doc.go has the rule
// whole.
const (
	// gainSuspectAfter: a loop losing this long is probed.
	gainSuspectAfter = 2 * time.Second
	// gainLosingWeight: a tick under the set point takes this many
	// ticks off the losing count.
	gainLosingWeight = 3
	// gainProbeEvery: between two probes of a loop whose delay helped.
	gainProbeEvery = 30 * time.Second
	// gainConfirmAfter: a first futile verdict leaves the delay
	// released and is confirmed by a probe that applies it again this
	// long after (once the window has refilled without it): released and
	// applied, the two probes cancel a drift of the load.
	gainConfirmAfter = time.Second
	// gainConfirmations: futile verdicts in a row that make the loop
	// Futile.
	gainConfirmations = 2
	// gainRecheckEvery: between the verdict and the first probe of a
	// futile loop; each probe that finds the delay still futile doubles
	// the wait, up to gainRecheckMax. A probe applies the delay for
	// gainProbeTicks, so rechecking costs the writers at most
	// gainProbeTicks·T / gainRecheckEvery (5 %) of a minute and under 1 %
	// of a workload that stays futile for long.
	gainRecheckEvery = 30 * time.Second
	gainRecheckMax   = 4 * time.Minute
	// gainWindow: ticks with reads before a probe that it is compared
	// with (1 s: about 30 of smalljob's reads).
	gainWindow = 10
	// gainSettle, gainProbeTicks: a probe lasts gainProbeTicks ticks,
	// of which the first gainSettle are not counted (writers released
	// refill the device's queue, writers delayed drain it, within a few
	// hundred ms).
	gainSettle     = 5
	gainProbeTicks = 15
	// gainMinBenefit: releasing a delay that raises the latency by less
	// than this share of it is releasing a delay that bought nothing (a
	// tick's mean of a few reads scatters by about this much over a
	// probe). gainResumeBenefit: a futile loop resumes control only for a
	// delay that buys twice that, so noise does not toggle it.
	gainMinBenefit    = 0.1
	gainResumeBenefit = 0.2
)

// gainPhase is where the gain rule is.
type gainPhase int

const (
	gainWatching  gainPhase = iota // the delay is the controller's
	gainReleasing                  // a probe: the delay released
	gainFutile                     // the delay bought nothing: held at 0
	gainApplying                   // a futile loop's probe: delay applied
)

// gainState is the gain rule's memory.
type gainState struct {
	phase gainPhase
	// losing counts the comparable ticks with delay in force and the
	// signal over the set point, less gainLosingWeight for each under.
	losing    int
	lastProbe time.Time
	verdicts  int // futile verdicts in a row
	// recheck is the wait of a futile loop between probes.
	recheck time.Duration
	// raw and delay are the last ticks' reads and delay in force, a ring
	// of comparable ticks (same writers, running); active their count of
	// writing members.
	raw, delay [gainWindow]float64
	n, next    int
	active     int
	// probeDelay is the delay a probe compares with none; base the mean
	// read latency of the ticks before it; ticks, sum and reads the
	// probe's own.
	probeDelay, base float64
	ticks, reads     int
	sum              float64
	// gain is the last measured gain, ms of read latency per ms of delay
	// (0 until measured).
	gain float64
}

// clearWindow forgets the comparable ticks, for a change of load.
func (g *gainState) clearWindow(active int) {
	g.n, g.next, g.active = 0, 0, active
}

func (g *gainState) add(raw, delay float64) {
	g.raw[g.next], g.delay[g.next] = raw, delay
	g.next = (g.next + 1) % gainWindow
	g.n = min(g.n+1, gainWindow)
}

// means are the window's mean read latency and delay.
func (g *gainState) means() (raw, delay float64) {
	for i := range g.n {
		raw += g.raw[i]
		delay += g.delay[i]
	}
	return raw / float64(g.n), delay / float64(g.n)
}

// checkGain runs the gain rule (step 8 in doc.go) after every other
// step: it may release the controller's output or set it for a probe,
// and reports the verdict in out.
func (l *Loop) checkGain(o Observation, running bool, out *Output) {
	g := &l.gain
	if !l.rules.Gain {
		return
	}
	if !l.emptySince.IsZero() && o.Now.Sub(l.emptySince) >= ArmHold {
		// The writers have gone: a new workload is judged afresh.
		*g = gainState{gain: g.gain}
	}
	// Comparable: the controller ran on a tick's news with its members
	// writing, as many of them as the window's. A pause (no members, or
	// none writing: armed) neither counts nor breaks the record: on
	// flash a burst may last 2 s.
	comparable := running && o.Members > 0 && o.Writing && (!l.cfg.ByWrites || o.Active == g.active)
	if running && o.Members > 0 && !comparable {
		g.clearWindow(o.Active)
		g.losing = 0
		l.abortProbe()
	}
	switch g.phase {
	case gainWatching:
		l.watchGain(o, comparable)
	case gainReleasing, gainApplying:
		if comparable {
			l.probeTick(o, out.UMaxLimitMs)
		}
	}
	switch g.phase {
	case gainReleasing, gainFutile:
		l.controlMs = l.pid.SetOutput(0)
	case gainApplying:
		l.controlMs = l.pid.SetOutput(g.probeDelay)
	}
	if g.phase == gainFutile && comparable && o.Reads {
		g.add(o.RawMs, 0)
		if g.n == gainWindow && o.Now.Sub(g.lastProbe) >= g.recheck && l.signalMs > l.TargetMs() {
			l.startProbe(o, gainApplying)
		}
	}
	out.ControlMs = l.controlMs
	if o.Members > 0 {
		out.DelayMs = l.controlMs
	}
	out.Futile = l.Futile()
	out.Probing = g.phase == gainReleasing || g.phase == gainApplying
	out.GainMsPerMs = g.gain
}

// watchGain keeps the window of a loop whose delay is the controller's
// and starts a probe once it has been losing for gainSuspectAfter.
func (l *Loop) watchGain(o Observation, comparable bool) {
	g := &l.gain
	if !comparable {
		return
	}
	if o.Reads {
		g.add(o.RawMs, l.controlMs)
	}
	if !(l.controlMs > 0 && l.signalMs > l.TargetMs()) {
		// A tick under the set point outweighs gainLosingWeight over
		// it: a loop that holds its set point never suspects its delay,
		// while the signal's climb at a burst's onset does not clear a
		// record of losing.
		g.losing = max(g.losing-gainLosingWeight, 0)
		return
	}
	g.losing++
	every := gainProbeEvery
	if g.verdicts > 0 {
		every = gainConfirmAfter
	}
	if g.n == gainWindow && time.Duration(g.losing)*l.cfg.Params.T >= gainSuspectAfter && o.Now.Sub(g.lastProbe) >= every {
		l.startProbe(o, gainReleasing)
	}
}

// startProbe compares the window with a probe in phase (releasing the
// delay, or applying it).
func (l *Loop) startProbe(o Observation, phase gainPhase) {
	g := &l.gain
	base, delay := g.means()
	if phase == gainApplying {
		delay = g.probeDelay // the delay of the futile verdict
	}
	g.phase, g.base, g.probeDelay = phase, base, delay
	g.ticks, g.reads, g.sum = 0, 0, 0
	g.lastProbe = o.Now
}

// probeTick counts a comparable tick of a probe and, at its end, gives
// the verdict.
func (l *Loop) probeTick(o Observation, limitMs float64) {
	g := &l.gain
	g.ticks++
	if g.ticks > gainSettle && o.Reads {
		g.sum += o.RawMs
		g.reads++
	}
	if g.ticks < gainProbeTicks {
		return
	}
	if g.reads == 0 || g.probeDelay <= 0 {
		l.abortProbe()
		return
	}
	probe := g.sum / float64(g.reads)
	// without and with: the read latency with the delay released and
	// with it in force.
	without, with := probe, g.base
	if g.phase == gainApplying {
		without, with = g.base, probe
	}
	g.gain = (without - with) / g.probeDelay
	g.lastProbe = o.Now
	g.clearWindow(g.active)
	switch {
	case g.phase == gainReleasing && !l.buys(without, with, gainMinBenefit, limitMs):
		// The delay stays released; the confirmation applies it again
		// once the window has refilled without it.
		g.phase, g.verdicts, g.recheck = gainFutile, 1, gainConfirmAfter
	case g.phase == gainReleasing:
		g.verdicts = 0
		l.resume()
	case l.buys(without, with, l.resumeShare(), limitMs):
		g.verdicts = 0
		l.resume()
	case g.verdicts < gainConfirmations:
		g.phase, g.verdicts, g.recheck = gainFutile, g.verdicts+1, gainRecheckEvery
	default:
		g.phase, g.recheck = gainFutile, min(2*g.recheck, gainRecheckMax)
	}
}

// resumeShare is the benefit a probe applying the delay must show: a
// confirmation, the verdict's; a futile loop's recheck, twice that.
func (l *Loop) resumeShare() float64 {
	if l.gain.verdicts < gainConfirmations {
		return gainMinBenefit
	}
	return gainResumeBenefit
}

// buys says whether the probe's delay bought its keep: the read latency
// without and with it differ by at least share of the latency without
// (adverse: nothing bought), and at the gain measured the delay that
// would bring the signal down to the set point, D + (with − r)/gain, is
// within the ceiling's limit. The extrapolation is linear, optimistic for
// a plant whose returns diminish, so the test errs toward keeping
// control; a delay that cannot deliver the promise even at the limit
// only costs the writers.
func (l *Loop) buys(without, with, share, limitMs float64) bool {
	g := &l.gain
	if !(without > 0) || (without-with)/without < share {
		return false
	}
	need := g.probeDelay + max(with-l.TargetMs(), 0)/g.gain
	return need <= limitMs
}

// abortProbe ends a probe the load changed under, without a verdict.
func (l *Loop) abortProbe() {
	g := &l.gain
	switch g.phase {
	case gainReleasing:
		l.resume()
	case gainApplying:
		g.phase = gainFutile
	}
}

// resume gives the controller back the probe's delay, with the signal as
// its error history (no kick from the probe's change of error).
func (l *Loop) resume() {
	g := &l.gain
	g.phase, g.losing = gainWatching, 0
	l.controlMs = l.pid.SetOutput(g.probeDelay)
	sig := l.signalMs
	if c := l.cfg.Params.ErrCap; c > 0 {
		sig = min(sig, (1+c)*l.TargetMs()) // as Adopt rebases
	}
	l.pid.Rebase(sig)
}

// Futile reports that the loop found its delay bought nothing and holds
// it released (step 8 in doc.go).
func (l *Loop) Futile() bool {
	g := &l.gain
	return (g.phase == gainFutile || g.phase == gainApplying) && g.verdicts >= gainConfirmations
}

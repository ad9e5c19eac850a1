package control

import (
	"math"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/decide/smoothing"
)

// Gain (step 6 of the law, doc.go): the loop measures what its delay
// buys. A delay is worth its cost to the writers only if the plant's gain
// is there: less read latency for more delay. Where the readers wait for
// something packet delay does not reach (the target's CPU, the network,
// a device that is not the bottleneck), the controller, seeing the signal
// over its set point, adds delay without end and only costs the writers.
//
// The gain cannot be read off the loop's record passively: in closed
// loop the delay is high exactly when the latency is, so signal and
// delay correlate positively whatever the plant does. So the loop asks
// the plant, at bounded cost: a loop that has been losing (delay in
// force, signal over the set point) steps its delay down a staircase and
// compares the reads on each step with those of the ticks just before,
// at the same load. It suspects its delay after losing for long, or
// sooner once the delay has slowed the writers' completions without
// making the reads faster. The first step where the reads get slower
// ends the probe (the delay helps); a staircase down to 0 without any
// makes the loop Futile: the delay is held at 0 and tried again now and
// then, so a change of workload where delay helps is caught. doc.go has
// the rule whole.
const (
	// gainSuspectAfter: a loop losing this long is probed. Longer than a
	// deep queue's onset, which loses for 2–4 s while the ceiling rises:
	// probed then, the released delay let the queue refill (the scenario
	// matrix, docs/results.md).
	gainSuspectAfter = 6 * time.Second
	// gainLosingWeight: a tick under the set point takes this many
	// ticks off the losing count.
	gainLosingWeight = 3
	// gainProbeEvery: between two probes of a loop whose delay helped.
	gainProbeEvery = 30 * time.Second
	// gainRecheckEvery: between the verdict and the first probe of a
	// futile loop; each probe that finds the delay still futile doubles
	// the wait, up to gainRecheckMax. A probe applies the delay for
	// gainProbeTicks, so rechecking costs the writers at most 5 % of the
	// first minute and under 1 % of a workload that stays futile.
	gainRecheckEvery = 30 * time.Second
	gainRecheckMax   = 4 * time.Minute
	// gainWindow: ticks with reads before a probe that it is compared
	// with (1 s: about 30 of smalljob's reads).
	gainWindow = 10
	// gainSettle, gainProbeTicks: a step of a probe lasts gainProbeTicks
	// ticks, of which the first gainSettle are not counted (writers
	// released refill the device's queue, writers delayed drain it,
	// within a few hundred ms).
	gainSettle     = 5
	gainProbeTicks = 15
	// gainStepShare, gainSteps: the staircase's steps are D × share,
	// D × share², … for gainSteps steps, then 0. A loop that is losing
	// needs more delay than D if delay helps at all, yet D may be more
	// than the reads need (a mean held over the set point by a heavy
	// tail): stepping down finds the need before it lets a backlog in. A
	// release to 0 at once filled the ssd's 64 MiB write cache and its
	// reads waited 60 ms for seconds.
	gainStepShare = 0.25
	gainSteps     = 1
	// gainClearRise: a step whose signal rises over this many times the
	// latency before the probe ends at once: the delay helps (on the
	// thesis's disk a release answers within a tick, 8 → 50 ms, and on
	// the ssd every tick more lets in a backlog the reads wait behind for
	// seconds). The signal, not a tick's reads: one tick of a few slow
	// reads moves it by a quarter of their excess, so noise does not end
	// a futile loop's probe.
	gainClearRise = 2.0
	// gainMinBenefit: a step whose reads are slower than those with the
	// delay by less than this share of them found the delay bought
	// nothing (about what a tick's mean of a few reads scatters over a
	// step). gainResumeBenefit: a futile loop resumes control only for a
	// delay that halves the latency. Applying a delay answers faster
	// than releasing it (writers slow at once and recover only as TCP
	// reopens its window), and a delay that makes each read a little
	// faster makes the writers' bursts longer, so more reads wait behind
	// them: in the lab's ssd a futile loop's probes saw 40-50 % less
	// latency under the delay, yet the run was slower with it (mean 4.3
	// → 4.9 ms). Where delay helps a queue it helps by factors (the
	// thesis's disk 47 → 8.5 ms, the simulated ssd 122 → 1 ms).
	gainMinBenefit    = 0.1
	gainResumeBenefit = 0.5
	// gainTookEffect: a losing loop whose writers' completions fell
	// under this share of the streak's peak for two windows is probed
	// before gainSuspectAfter. At a deep queue's onset the device
	// completes writes at its full rate until the backlog has drained,
	// and the reads get faster as it drains; writers slowed this much
	// for a second, not by the devices (deviceHolds), with the reads no
	// faster say the delay has reached them and bought nothing.
	gainTookEffect = 0.25
)

// gainPhase is where the gain rule is.
type gainPhase int

const (
	gainWatching  gainPhase = iota // the delay is the controller's
	gainReleasing                  // a probe: stepping the delay down
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
	// emptySince: when the set last became empty (zero: it has members).
	emptySince time.Time
	// recheck is the wait of a futile loop between probes.
	recheck time.Duration
	// raw and delay are the last ticks' reads and delay in force, a ring
	// of comparable ticks (same writers, running); active their count of
	// writing members; prev the mean read latency of the last whole
	// window before the one filling (0: none yet).
	raw, delay, write, await [gainWindow]float64
	n, next                  int
	active                   int
	prev, prevWrite          float64
	// peakWrite is the highest write rate of a tick of the losing
	// streak (0: not losing); freeReads, freeSum and freeAwait the
	// reads and write await of its ticks with the writers at half of it
	// or more.
	peakWrite, freeSum, freeAwait float64
	freeReads                     int
	// probeDelay is the delay D a probe compares with less (releasing)
	// or none (applying); level the delay of the step; base the mean read
	// latency of the window before it; signalBefore the signal then.
	probeDelay, level, base, signalBefore float64
	// ticks, reads and sum are the step's counted ticks (past
	// gainSettle); allReads and allSum every tick's of the step.
	ticks, reads, allReads int
	sum, allSum            float64
	// baseWrite and baseAwait are the window's write rate and longest
	// write await before the probe; held counts the applying step's last
	// ticks in a row with the writers held under gainTookEffect of it (and
	// not by the devices), heldReads and heldSum their reads.
	baseWrite, baseAwait float64
	held, heldReads      int
	heldSum              float64
	// gain is the last measured gain, ms of read latency per ms of delay
	// (0 until measured).
	gain float64
}

// clearWindow forgets the comparable ticks, for a change of load.
func (g *gainState) clearWindow(active int) {
	g.n, g.next, g.active, g.prev, g.prevWrite = 0, 0, active, 0, 0
}

func (g *gainState) add(raw, delay float64, o Observation) {
	g.raw[g.next], g.delay[g.next] = raw, delay
	g.write[g.next], g.await[g.next] = o.WriteKBs, o.WriteAwaitMs
	g.next = (g.next + 1) % gainWindow
	g.n = min(g.n+1, gainWindow)
	if g.next == 0 && g.n == gainWindow {
		g.prev, _ = g.means()
		g.prevWrite = g.meanWrite()
	}
}

// meanWrite is the window's mean write rate, maxAwait its longest
// write await.
func (g *gainState) meanWrite() float64 {
	w := 0.0
	for i := range g.n {
		w += g.write[i]
	}
	return w / float64(g.n)
}

func (g *gainState) maxAwait() float64 { return slices.Max(g.await[:g.n]) }

// deviceHolds says writes waited at the devices longer than awaitMs by
// more than gainMinBenefit of the reads' readMs: the device, not the
// delay, is what holds the writers (a write-back cache that filled, a
// queue), so their slowing says nothing of what the delay buys.
func deviceHolds(await, awaitMs, readMs float64) bool {
	return await > awaitMs+gainMinBenefit*readMs
}

// boughtNothing says the delay has reached the writers and bought no
// read latency: the devices' write rate, over the window and the one
// before it, is under gainTookEffect of the losing streak's peak
// without the devices holding the writes longer than with the writers
// free (the streak's ticks at half the peak or more), and the window's
// reads are within gainMinBenefit of those of the free ticks: no faster
// (nothing bought), and no slower (reads that still get slower with the
// writers cut wait behind a backlog the delay has not drained yet, as a
// write-back cache's destaging).
func (g *gainState) boughtNothing() bool {
	lim := gainTookEffect * g.peakWrite
	if g.peakWrite <= 0 || g.prev <= 0 || g.freeReads == 0 || g.prevWrite > lim || g.meanWrite() > lim {
		return false
	}
	free := g.freeSum / float64(g.freeReads)
	if deviceHolds(g.maxAwait(), g.freeAwait/float64(g.freeReads), free) {
		return false
	}
	now, _ := g.means()
	return math.Abs(now-free) < gainMinBenefit*free
}

// means are the window's mean read latency and delay.
func (g *gainState) means() (raw, delay float64) {
	for i := range g.n {
		raw += g.raw[i]
		delay += g.delay[i]
	}
	return raw / float64(g.n), delay / float64(g.n)
}

// median is the window's median read latency.
func (g *gainState) median() float64 {
	xs := make([]float64, g.n)
	copy(xs, g.raw[:g.n])
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// checkGain runs the gain rule (step 6 in doc.go) after every other
// step: it may release the controller's output or set it for a probe,
// and reports the verdict in out.
func (l *Loop) checkGain(o Observation, running bool, out *Output) {
	g := &l.gain
	if !l.rules.Gain {
		return
	}
	switch {
	case o.Members > 0:
		g.emptySince = time.Time{}
	case g.emptySince.IsZero():
		g.emptySince = o.Now
	case o.Now.Sub(g.emptySince) >= ArmHold:
		// The writers have gone: a new workload is judged afresh. (The
		// loop's own emptySince does not run for a futile loop, whose
		// output is 0.)
		*g = gainState{gain: g.gain, emptySince: g.emptySince}
	}
	// Comparable: the controller ran on a tick's news with its members
	// writing, as many of them as the window's. A pause (no members, or
	// none writing: armed) neither counts nor breaks the record: on
	// flash a burst may last 2 s.
	comparable := running && o.Members > 0 && o.Writing && (!l.cfg.ByWrites || o.Members == g.active)
	if running && o.Members > 0 && !comparable {
		g.clearWindow(o.Members)
		g.losing = 0
		l.abortProbe()
	}
	switch g.phase {
	case gainWatching:
		l.watchGain(o, comparable)
	case gainReleasing, gainApplying:
		if comparable {
			l.probeTick(o)
		}
	case gainFutile:
		if comparable && o.Reads {
			g.add(o.RawMs, 0, o)
			if g.n == gainWindow && o.Now.Sub(g.lastProbe) >= g.recheck && l.signalMs > l.TargetMs() {
				l.startProbe(o, gainApplying)
			}
		}
	}
	switch g.phase {
	case gainReleasing, gainApplying:
		l.controlMs = l.pid.SetOutput(g.level)
	case gainFutile:
		l.controlMs = l.pid.SetOutput(0)
	}
	out.SignalMs, out.ControlMs = l.signalMs, l.controlMs
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
		g.add(o.RawMs, l.controlMs, o)
	}
	if !(l.controlMs > 0 && l.signalMs > l.TargetMs()) {
		// A tick under the set point outweighs gainLosingWeight over
		// it: a loop that holds its set point never suspects its delay,
		// while the signal's climb at a burst's onset does not clear a
		// record of losing.
		g.losing = max(g.losing-gainLosingWeight, 0)
		if g.losing == 0 {
			g.peakWrite, g.freeSum, g.freeAwait, g.freeReads = 0, 0, 0, 0
		}
		return
	}
	g.losing++
	g.peakWrite = max(g.peakWrite, o.WriteKBs)
	if o.Reads && o.WriteKBs >= g.peakWrite/2 {
		g.freeSum += o.RawMs
		g.freeAwait += o.WriteAwaitMs
		g.freeReads++
	}
	if g.n < gainWindow || o.Now.Sub(g.lastProbe) < gainProbeEvery {
		return
	}
	if time.Duration(g.losing)*l.cfg.Params.T < gainSuspectAfter && !g.boughtNothing() {
		return
	}
	if med := g.median(); med <= l.TargetMs() {
		// Most of the window's ticks are under the set point: the mean
		// is held over it by a heavy tail, which more delay may not
		// cure but less would not either; not a loop losing for want
		// of delay (on the ssd at 0.2 ms a probe there tipped the loop
		// into holding three times the delay).
		return
	}
	if now, _ := g.means(); now < (1-gainMinBenefit)*g.prev {
		// The reads are getting faster under the delay (a burst's
		// backlog draining): it is working, and a probe would only
		// refill the queue.
		return
	}
	l.startProbe(o, gainReleasing)
}

// startProbe compares the window with a probe in phase: a staircase
// down from the window's mean delay (releasing), or the delay of the
// futile verdict applied (applying).
func (l *Loop) startProbe(o Observation, phase gainPhase) {
	g := &l.gain
	base, delay := g.means()
	level := delay * gainStepShare
	if phase == gainApplying {
		delay = g.probeDelay
		level = delay
	}
	g.phase, g.base, g.probeDelay, g.level = phase, base, delay, level
	g.signalBefore, g.baseWrite, g.baseAwait = l.signalMs, g.meanWrite(), g.maxAwait()
	g.lastProbe = o.Now
	g.startStep()
}

func (g *gainState) startStep() {
	g.ticks, g.reads, g.sum, g.allReads, g.allSum = 0, 0, 0, 0, 0
	g.held, g.heldReads, g.heldSum = 0, 0, 0
}

// probeTick counts a comparable tick of a probe's step and, at its end,
// moves to the next step or gives the verdict.
func (l *Loop) probeTick(o Observation) {
	g := &l.gain
	g.ticks++
	if o.Reads {
		g.allSum += o.RawMs
		g.allReads++
		if g.ticks > gainSettle {
			g.sum += o.RawMs
			g.reads++
		}
	}
	if g.phase == gainReleasing && g.allReads > 0 && l.signalMs > gainClearRise*g.base {
		// A step the reads answer at once is answered: where delay
		// helps, every tick more of it costs the reader.
		g.sum, g.reads, g.ticks = g.allSum, g.allReads, gainProbeTicks
	}
	if g.phase == gainApplying {
		l.heldTick(o)
	}
	if g.ticks < gainProbeTicks {
		return
	}
	if g.reads == 0 || g.probeDelay <= 0 {
		l.abortProbe()
		return
	}
	step := g.sum / float64(g.reads)
	// without and with: the read latency with less delay (or none) and
	// with more.
	without, with, less := step, g.base, g.level
	if g.phase == gainApplying {
		without, with, less = g.base, step, 0
	}
	g.gain = (without - with) / (g.probeDelay - less)
	g.lastProbe = o.Now
	switch {
	case g.phase == gainReleasing && buys(without, with, gainMinBenefit):
		l.resume()
	case g.phase == gainReleasing && g.level > 0:
		// The next step down, or 0 after gainSteps.
		g.level *= gainStepShare
		if g.level < g.probeDelay*pow(gainStepShare, gainSteps)*0.999 {
			g.level = 0
		}
		g.startStep()
	case g.phase == gainReleasing:
		g.phase, g.recheck = gainFutile, gainRecheckEvery
		g.clearWindow(g.active)
	case buys(without, with, gainResumeBenefit):
		l.resume()
	default:
		g.phase, g.recheck = gainFutile, min(2*g.recheck, gainRecheckMax)
		g.clearWindow(g.active)
	}
}

func pow(x float64, n int) float64 {
	p := 1.0
	for range n {
		p *= x
	}
	return p
}

// buys says whether more delay bought its keep: the read latency without
// and with it differ by at least share of the latency without (adverse:
// nothing bought).
func buys(without, with, share float64) bool {
	return without > 0 && (without-with)/without >= share
}

// heldTick ends an applying step early once the delay (not the devices)
// has held the writers under gainTookEffect of their rate for
// gainSettle ticks: the
// reads of those ticks are the answer, and every tick more costs the
// writers (where delay helps a queue the device completes writes at its
// full rate until the backlog has drained, so they are held only once
// the reads are fast).
func (l *Loop) heldTick(o Observation) {
	g := &l.gain
	if !(o.WriteKBs <= gainTookEffect*g.baseWrite && g.baseWrite > 0) || deviceHolds(o.WriteAwaitMs, g.baseAwait, g.base) {
		g.held, g.heldReads, g.heldSum = 0, 0, 0
		return
	}
	g.held++
	if o.Reads {
		g.heldSum += o.RawMs
		g.heldReads++
	}
	if g.held >= gainSettle && g.heldReads > 0 {
		g.sum, g.reads, g.ticks = g.heldSum, g.heldReads, gainProbeTicks
	}
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
	if g.phase == gainReleasing {
		// The steps' reads measured the plant with less delay, not what
		// the writers need: the signal goes on from where the probe
		// found it, or the controller would chase the probe's backlog
		// with a delay many times the one it had.
		l.ewma, _ = smoothing.NewEWMAAt(l.cfg.Alpha, g.signalBefore) // alpha validated in NewLoop
		l.signalMs = g.signalBefore
	}
	g.phase, g.losing = gainWatching, 0
	g.clearWindow(g.active)
	l.controlMs = l.pid.SetOutput(g.probeDelay)
	l.pid.Rebase(l.signalMs)
}

// Futile reports that the loop found its delay bought nothing and holds
// it released (step 6 in doc.go).
func (l *Loop) Futile() bool { return l.gain.phase == gainFutile || l.gain.phase == gainApplying }

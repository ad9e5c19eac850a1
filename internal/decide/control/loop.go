package control

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/smoothing"
)

// The signals a resource's loop can follow (the engine measures them).
const (
	SignalMean = "mean"
	SignalP95  = "p95"
	SignalP99  = "p99"
)

// LoopConfig configures one resource's Loop.
type LoopConfig struct {
	// Law is the controller the loop steps: pid, thesis or none.
	Law string
	// Params configure the controller; TargetMs is overwritten with the
	// set point, ThresholdMs·(1−Headroom).
	Params Params
	// ThresholdMs is the read latency promised for the resource.
	ThresholdMs float64
	// Alpha weighs the signal's EWMA.
	Alpha float64
	// Headroom is the fraction of the threshold the set point lies below
	// it (see doc.go).
	Headroom float64
	// UMaxLimitMs is the top of the ceiling (≤ Params.UMaxMs: fixed).
	UMaxLimitMs float64
	// IdleHold bridges ticks without reads (IdleHold in doc.go); 0 is
	// the thesis's rule, every tick without a read decays the signal.
	IdleHold time.Duration
	// ByWrites: the set's members are found by their writes (the
	// read-over-write policy), so a set none of whose members writes is
	// pausing. Named members (the manual policy) are not.
	ByWrites bool
	// Off switches rules off by name (RuleNames), on top of the law's
	// table: for ablations.
	Off []string
}

// Rules says which of the law's rules a loop runs. The idle hold and armed
// pauses run under every law; the others act on pid's state. The
// saturation report, a report that changes no decision, has no switch.
type Rules struct {
	// IdleHold: a tick without reads within IdleHold of the last read
	// keeps the signal and delay (step 1).
	IdleHold bool
	// Armed: the controller is not stepped while no member writes, or
	// for ArmHold once the set is empty (step 2).
	Armed bool
	// ErrCap: pid's relative error is capped at Params.ErrCap (step 3).
	ErrCap bool
	// Floor: a delay falling under the floor is released to 0 (step 3;
	// the floor as the starting point from rest is pid's core).
	Floor bool
	// Rest: at 0 under the set point pid's error history is cleared
	// (step 3).
	Rest bool
	// FirstClimb: in its first climb pid's Δε and D terms count only
	// when they add (step 3).
	FirstClimb bool
	// Relapse: a delay falling back toward the one that let the last
	// overload in falls slowly (step 3).
	Relapse bool
	// Recall: an overload from rest within RecallWindow of the last
	// burst starts at the delay that burst needed (step 3).
	Recall bool
	// Rebase: a controller stepped again after a pause, or rebuilt at a
	// reload, takes the signal as its error history (no Δε or D kick).
	Rebase bool
	// Ceiling: the output's clamp follows the writers' need.
	Ceiling bool
	// FarRaise: the ceiling rises after raiseAfterFar, not raiseAfter,
	// with the signal farOver × the threshold or more.
	FarRaise bool
	// Retarget: the set point moves without a restart at a reload's new
	// threshold or headroom.
	Retarget bool
	// Gain: the loop probes what its delay buys and releases a delay
	// that buys nothing (Futile).
	Gain bool
}

// LawRules is the table of the rules each law runs. thesis is a faithful
// copy of a listing that has none of these inputs; none never delays.
var LawRules = map[string]Rules{
	"pid": {IdleHold: true, Armed: true, ErrCap: true, Floor: true, Rest: true, FirstClimb: true,
		Relapse: true, Recall: true, Rebase: true, Ceiling: true, FarRaise: true, Retarget: true, Gain: true},
	"thesis": everyLaw,
	"none":   everyLaw,
}

// everyLaw are the rules that do not reach into pid's state: the idle hold
// of the signal and the armed pauses.
var everyLaw = Rules{IdleHold: true, Armed: true}

// pidOnly is r without the rules every law runs (everyLaw).
func (r Rules) pidOnly() Rules {
	r.IdleHold, r.Armed = false, false
	return r
}

// RuleNames lists the switchable rules' names, as LoopConfig.Off takes
// them.
func RuleNames() []string {
	names := make([]string, 0, len(ruleFields))
	for n := range ruleFields {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var ruleFields = map[string]func(*Rules) *bool{
	"idle-hold":   func(r *Rules) *bool { return &r.IdleHold },
	"armed":       func(r *Rules) *bool { return &r.Armed },
	"err-cap":     func(r *Rules) *bool { return &r.ErrCap },
	"floor":       func(r *Rules) *bool { return &r.Floor },
	"rest":        func(r *Rules) *bool { return &r.Rest },
	"first-climb": func(r *Rules) *bool { return &r.FirstClimb },
	"relapse":     func(r *Rules) *bool { return &r.Relapse },
	"recall":      func(r *Rules) *bool { return &r.Recall },
	"rebase":      func(r *Rules) *bool { return &r.Rebase },
	"ceiling":     func(r *Rules) *bool { return &r.Ceiling },
	"far-raise":   func(r *Rules) *bool { return &r.FarRaise },
	"retarget":    func(r *Rules) *bool { return &r.Retarget },
	"gain":        func(r *Rules) *bool { return &r.Gain },
}

// CheckRules reports the first name in off that is not a rule.
func CheckRules(off []string) error {
	for _, n := range off {
		if _, ok := ruleFields[n]; !ok {
			return fmt.Errorf("rule %q: want one of %s", n, strings.Join(RuleNames(), ", "))
		}
	}
	return nil
}

// Observation is what the engine measured of a resource in one tick,
// sampled before the loop is stepped.
type Observation struct {
	Now time.Time
	// Measured: the resource has been measured, in this tick or before
	// (until then the loop leaves the signal alone).
	Measured bool
	// RawMs is the tick's read latency (the signal's statistic), valid
	// when Reads.
	RawMs float64
	Reads bool
	// Members is the size of the throttleable set; Writing that one of
	// them completed writes in the tick or has I/O at its device.
	Members int
	Writing bool
	// WriteKBs is the rate the resource's devices completed writes at
	// in the tick, WriteAwaitMs their mean time at the devices (0: none
	// completed): whether the delay, not the device, holds the writers
	// (step 6).
	WriteKBs, WriteAwaitMs float64
}

// Output is the loop's decision for a tick.
type Output struct {
	// SignalMs is the filtered signal; TargetMs the set point the tick
	// was judged against.
	SignalMs, TargetMs float64
	// ControlMs is the controller's output, kept through pauses; DelayMs
	// the delay in force on the members (ControlMs with members, else 0).
	ControlMs, DelayMs float64
	// UMaxMs is the ceiling now, UMaxLimitMs the highest it may go.
	UMaxMs, UMaxLimitMs float64
	// Held: no evidence this tick, signal and delay kept (starvation).
	// Armed: the controller was not stepped (a pause, an empty set).
	// Saturated: the delay sits at the ceiling's limit with the latency
	// over the set point (packet delay alone is not holding the writers).
	Held, Armed, Saturated bool
	// Futile: the loop measured that its delay bought no read latency
	// and holds it released (step 6); Probing: a probe of the gain is
	// under way this tick. GainMsPerMs is the last measured gain, ms of
	// read latency bought per ms of delay (0 until measured; negative:
	// the delay made reads slower).
	Futile, Probing bool
	GainMsPerMs     float64
	// RelapseMs: while the relapse guard holds (step 3), the delay that
	// let the last overload in, under 1.5 × which the delay falls slowly;
	// 0 while it does not.
	RelapseMs float64
	// RecallMs is the delay a climb from rest would start at (step 3,
	// recall): what the last burst needed, within RecallWindow of it; 0
	// when nothing is remembered.
	RecallMs float64
}

// DefaultIdleHold bridges the think time of slow readers (a reader of a
// few reads a second leaves most ticks without a read in flight), so that
// the delay is neither released between two reads nor kept on stale news
// once the readers have gone.
const DefaultIdleHold = time.Second

// ArmHold is how long a loop whose set emptied stays armed (see "Armed
// through pauses" in doc.go): past it, the resource being healthy, the
// controller winds down to rest.
const ArmHold = 120 * time.Second

// ActiveWindow: a member that has not written for this long has paused
// (the engine's returning writers), so a writer held at a long delay
// that completes no write in some tick is not counted out and back in.
const ActiveWindow = time.Second

// Loop is one resource's control law: every rule, stepped once per tick
// in the order of doc.go. It is deterministic and not safe for
// concurrent use.
type Loop struct {
	cfg   LoopConfig
	rules Rules
	ctrl  Controller
	pid   *PID // ctrl when the law is pid, for the rules that reach into it

	ewma       *smoothing.EWMA
	signalMs   float64
	lastSample time.Time // when the signal last had a read sample
	controlMs  float64   // the controller's last output
	// emptySince: when the set last became empty (zero: it has members,
	// or never had any); frozen: the controller was armed last tick.
	emptySince time.Time
	frozen     bool
	// held: the controller's output over the last heldTicks running
	// ticks with members writing, oldest first.
	held []float64
	// recallMs: the delay the last burst needed (the median of held when
	// its set emptied), recallAt when; recalled: this climb from rest
	// has been given it.
	recallMs float64
	recallAt time.Time
	recalled bool
	ceiling  float64
	// satSince, lowSince: when the delay started to press on the ceiling,
	// or to sit under half of it.
	satSince, lowSince time.Time
	gain               gainState
}

// NewLoop returns a loop at rest.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	rules, ok := LawRules[cfg.Law]
	if !ok {
		return nil, fmt.Errorf("unknown controller %q: want one of %s", cfg.Law, strings.Join(Names(), ", "))
	}
	if err := CheckRules(cfg.Off); err != nil {
		return nil, err
	}
	for _, n := range cfg.Off {
		*ruleFields[n](&rules) = false
	}
	ewma, err := smoothing.NewEWMA(cfg.Alpha)
	if err != nil {
		return nil, err
	}
	if rules.pidOnly() != (Rules{}) && cfg.Law != "pid" {
		// The switchable rules act on pid's state (its output, clamp,
		// set point and error history).
		return nil, fmt.Errorf("controller %s runs no switchable rule", cfg.Law)
	}
	l := &Loop{cfg: cfg, rules: rules, ewma: ewma, ceiling: cfg.Params.UMaxMs}
	if err := l.build(); err != nil {
		return nil, err
	}
	return l, nil
}

// build makes l's controller at rest with l's set point.
func (l *Loop) build() error {
	p := l.cfg.Params
	p.TargetMs = l.TargetMs()
	if !l.rules.ErrCap {
		p.ErrCap = 0
	}
	c, err := New(l.cfg.Law, p)
	if err != nil {
		return err
	}
	l.ctrl = c
	l.pid, _ = c.(*PID)
	if l.pid != nil {
		l.pid.noRelease, l.pid.noRest, l.pid.noClimb = !l.rules.Floor, !l.rules.Rest, !l.rules.FirstClimb
		l.pid.noRelapse = !l.rules.Relapse
	}
	return nil
}

// TargetMs is the set point: the threshold less the headroom.
func (l *Loop) TargetMs() float64 { return l.cfg.ThresholdMs * (1 - l.cfg.Headroom) }

// PID is the loop's pid controller (nil under another law), for tests.
func (l *Loop) PID() *PID { return l.pid }

// Step runs the law for one tick: every rule, in the order of doc.go.
func (l *Loop) Step(o Observation) Output {
	out := Output{TargetMs: l.TargetMs()}
	// 1. The signal, held through ticks without evidence.
	news := l.measure(o, &out)
	// 2. Armed through pauses: the controller is not stepped.
	out.Armed = l.armed(o)
	running := news && !out.Armed
	// 3. The controller (pid: error cap, floor, rest, first climb,
	// relapse), rebased after a pause; a climb from rest recalls the
	// last burst's delay.
	if running {
		if l.rules.Rebase && l.frozen {
			l.pid.Rebase(l.signalMs)
		}
		l.controlMs = l.ctrl.Update(l.signalMs)
		l.recall(o.Now)
	}
	if running && o.Members > 0 && o.Writing {
		l.held = append(l.held, l.controlMs)
		if len(l.held) > heldTicks {
			l.held = l.held[1:]
		}
	}
	l.frozen = out.Armed
	out.ControlMs = l.controlMs
	if l.pid != nil {
		out.RelapseMs = l.pid.relapse.holding(l.pid.p.T)
	}
	out.RecallMs = l.recallable(o.Now)
	if o.Members > 0 {
		out.DelayMs = l.controlMs // the delay in force
	}
	// 4. The ceiling follows the writers' need; saturation.
	l.scaleCeiling(o, &out)
	// 6. Gain: a delay that buys nothing is released (5, the headroom,
	// is the set point TargetMs).
	l.checkGain(o, running, &out)
	return out
}

// measure moves the signal with the tick's reads (step 1 in doc.go);
// it says whether the controller has news to act on.
func (l *Loop) measure(o Observation, out *Output) (news bool) {
	if o.Measured {
		switch {
		case o.Reads:
			l.signalMs = l.ewma.Update(o.RawMs)
			l.lastSample = o.Now
			news = true
		case l.rules.IdleHold && !l.lastSample.IsZero() && o.Now.Sub(l.lastSample) < l.cfg.IdleHold:
			out.Held = true
		default:
			l.signalMs = l.ewma.Decay()
			news = true
		}
	}
	out.SignalMs = l.signalMs
	return news
}

// heldTicks is how many of the last writing ticks' delays a pause
// remembers.
const heldTicks = 100

// armAtHeld arms the pause at the delay the writers were held at for most
// of their last seconds, where the last output is lower: at a burst's
// tail the reads get fast while the writers still write and the delay
// winds down, and the next burst's onset needs what the burst needed.
func (l *Loop) armAtHeld(now time.Time) {
	defer func() { l.held = l.held[:0] }()
	if l.pid == nil || len(l.held) == 0 {
		return
	}
	h := append([]float64(nil), l.held...)
	sort.Float64s(h)
	m := h[len(h)/2]
	if m > 0 {
		l.recallMs, l.recallAt = m, now
	}
	if m > l.controlMs {
		l.controlMs = l.pid.SetOutput(m)
	}
}

// RecallWindow is how long the delay a burst needed is recalled for an
// overload from rest (see "Recall" in doc.go).
const RecallWindow = 30 * time.Minute

// recall: on the tick the controller leaves rest, within RecallWindow of
// the last burst, the delay jumps to what that burst needed rather than
// climbing to it from the floor; once a climb.
func (l *Loop) recall(now time.Time) {
	if l.pid == nil || !l.rules.Recall {
		return
	}
	if l.pid.u == 0 {
		l.recalled = false
		return
	}
	if l.recalled || !l.pid.Rising() || l.recallable(now) == 0 {
		return
	}
	l.recalled = true
	if l.recallMs > l.controlMs {
		l.controlMs = l.pid.SetOutput(l.recallMs)
	}
}

// recallable is the delay a climb from rest would recall now, or 0.
func (l *Loop) recallable(now time.Time) float64 {
	if l.pid == nil || !l.rules.Recall || now.Sub(l.recallAt) > RecallWindow {
		return 0
	}
	return l.recallMs
}

// armed says whether the controller is frozen this tick (see "Armed
// through pauses" in doc.go).
func (l *Loop) armed(o Observation) bool {
	switch {
	case !l.rules.Armed:
		return false
	case o.Members > 0:
		l.emptySince = time.Time{}
		return !o.Writing && l.cfg.ByWrites
	case !l.emptySince.IsZero():
		return o.Now.Sub(l.emptySince) < ArmHold
	}
	// The set has just emptied. A tail can wind the delay to nothing
	// while the writers still write, so the burst's held delay decides
	// whether there is anything to arm, not the last output.
	l.armAtHeld(o.Now)
	if l.controlMs > 0 {
		l.emptySince = o.Now
		return true
	}
	return false
}

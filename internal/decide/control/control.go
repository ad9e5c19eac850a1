package control

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/fielderr"
)

// Controller turns a resource's read-latency signal into a packet delay.
// It is called once per tick with the filtered signal and keeps whatever
// history it needs; it is deterministic and not safe for concurrent use.
type Controller interface {
	// Update takes the tick's signal (ms) and returns the delay (ms) to
	// apply to the resource's throttleable consumers, in [0, UMaxMs].
	Update(signalMs float64) (delayMs float64)
	// Reset returns the controller to rest: no delay, no history.
	Reset()
	// Name is the name the controller was registered under.
	Name() string
}

// Gains are pid's tuning, in control's units: Kp dimensionless, the
// integral and derivative times as durations (so T/Ti and Td/T cannot be
// computed in mixed units by mistake), the delay ceiling in ms like every
// latency and delay the engine handles. They are the one shape of the
// gains: the config's [pid] section (its TOML spelling), the simulator
// and the lab's experiments all carry a Gains, and its JSON is the lab's.
type Gains struct {
	// Kp is the proportional gain of pid, dimensionless: a relative error
	// (signal − set point)/set point of 1 multiplies the delay by e^Kp
	// at once (see PID.Update for why the law is in relative terms).
	Kp float64 `json:"kp"`
	// Ti is the integral time: the integral term alone adds Kp·ε per Ti.
	Ti time.Duration `json:"ti"`
	// Td is the derivative time; 0 disables the D term.
	Td time.Duration `json:"td"`
	// UMaxMs caps the delay (ms); the thesis's range ended at 20 ms. It is
	// also the anti-windup clamp, and the engine's ceiling starts there.
	UMaxMs float64 `json:"u_max_ms"`
}

// DefaultGains are pid's default tuning; each value has its reason in
// doc.go.
func DefaultGains() Gains {
	return Gains{Kp: 0.6, Ti: 500 * time.Millisecond, Td: 50 * time.Millisecond, UMaxMs: 20}
}

// WithDefaults fills the zero fields of g from DefaultGains (Td 0, no D
// term, cannot be asked for this way: set it in a Params).
func (g Gains) WithDefaults() Gains {
	d := DefaultGains()
	if g.Kp == 0 {
		g.Kp = d.Kp
	}
	if g.Ti == 0 {
		g.Ti = d.Ti
	}
	if g.Td == 0 {
		g.Td = d.Td
	}
	if g.UMaxMs == 0 {
		g.UMaxMs = d.UMaxMs
	}
	return g
}

// Params configure a controller: its set point, its gains, its tick.
type Params struct {
	// TargetMs is the controller's set point (ms): the latency it holds
	// the signal at. It is not the threshold the user promised: the
	// engine aims a headroom below that (threshold × (1 − headroom)), so
	// that single seconds keep the promise.
	TargetMs float64
	Gains
	// T is the tick: the time between two Updates.
	T time.Duration
	// ErrCap bounds pid's relative error to ErrCap (DefaultErrCap), that
	// is the signal to (1 + ErrCap) × TargetMs; 0 leaves it unbounded,
	// as before it was introduced.
	ErrCap float64
}

// DefaultParams is the default tuning of the pid controller; each value
// has its reason in doc.go. Callers (flags, the simulator) change a copy,
// never a global.
func DefaultParams() Params {
	return Params{
		TargetMs: 15,
		Gains:    DefaultGains(),
		T:        100 * time.Millisecond,
		ErrCap:   DefaultErrCap,
	}
}

// DelayBoundsMs are the bounds of a delay ceiling (UMaxMs, and the
// engine's UMaxLimitMs, how far it may rise), in ms: from a tenth of a
// millisecond, under which no packet path delays, to a second, beyond
// which a held ACK outlives TCP's retransmission timeout even once the
// RTT has adapted.
func DelayBoundsMs() (lo, hi float64) { return 0.1, 1000 }

// Validate reports every parameter that makes no sense, saying what to
// use instead. Each error is a *fielderr.Error, so that a caller that
// filled p from its own keys can name them.
func (p Params) Validate() error {
	var errs []error
	bad := func(field, name string, v any, want string) {
		errs = append(errs, fielderr.New("control.Params."+field, name, v, want))
	}
	if !(p.TargetMs > 0) || math.IsInf(p.TargetMs, 0) {
		bad("TargetMs", "target", fmt.Sprintf("%v ms", p.TargetMs), "must be a positive latency, e.g. 15 ms")
	}
	if !(p.Kp > 0) || math.IsInf(p.Kp, 0) {
		bad("Kp", "Kp", p.Kp, fmt.Sprintf("must be > 0 (a finite gain, e.g. %v)", DefaultParams().Kp))
	}
	if p.Ti < time.Millisecond || p.Ti > time.Hour {
		bad("Ti", "Ti", p.Ti, "must be between 1ms and 1h (the integral time)")
	}
	if p.Td < 0 || p.Td > time.Minute {
		bad("Td", "Td", p.Td, "must be between 0s (no D term) and 1m0s")
	}
	if p.T <= 0 {
		bad("T", "tick", p.T, "must be a positive period, e.g. 100ms")
	}
	if lo, hi := DelayBoundsMs(); !(p.UMaxMs >= lo && p.UMaxMs <= hi) {
		bad("UMaxMs", "maximum delay", fmt.Sprintf("%v ms", p.UMaxMs), fmt.Sprintf("must be between %v and %v", msDuration(lo), msDuration(hi)))
	}
	if !(p.ErrCap >= 0) || math.IsInf(p.ErrCap, 0) {
		bad("ErrCap", "error cap", p.ErrCap, fmt.Sprintf("must be 0 (none) or a positive multiple of the threshold, e.g. %v", DefaultErrCap))
	}
	return errors.Join(errs...)
}

// msDuration is ms as a duration, for messages.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

var registry = map[string]func(Params) Controller{
	"pid":    func(p Params) Controller { return NewPID(p) },
	"thesis": func(p Params) Controller { return NewThesis(p) },
	"none":   func(Params) Controller { return None{} },
}

// names lists the registered controllers in the order users read them:
// the default first, the baseline last.
var names = []string{"pid", "thesis", "none"}

// Names lists the registered controllers, the default first.
func Names() []string { return slices.Clone(names) }

// New returns the controller registered as name, configured by p.
func New(name string, p Params) (Controller, error) {
	mk, ok := registry[name]
	if !ok {
		return nil, fielderr.New("control.LoopConfig.Law", "controller", strconv.Quote(name), "must be one of "+quoted(Names()))
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("controller %s: %w", name, err)
	}
	return mk(p), nil
}

// quoted is names as a list of quoted words.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

func clamp(x, lo, hi float64) float64 {
	if x < lo || math.IsNaN(x) {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

// DefaultErrCap bounds the error pid acts on to 3 × the set point: a
// latency many times over says "more delay" and nothing about how much
// more, and uncapped, the P term of a falling spike undid the clamped
// delay while the latency was still far over (step 3 in doc.go).
const DefaultErrCap = 3

// FloorShare is the smallest delay pid applies, as a share of its set
// point: the delay it starts from when it leaves rest, and the delay
// under which a falling delay is released to 0. A law that acts by
// factors needs a starting point above 0; 5 % of the set point (0.64 ms
// at 15 ms, 9 µs at 0.2 ms) is under what these writers need and is
// passed on the first tick of a real violation.
const FloorShare = 0.05

// PID is the single-sided velocity-form PID controller of doc.go, in
// relative terms: the error is normalised by the set point and the
// output moves by factors.
type PID struct {
	p      Params
	ti, td float64 // T/Ti and Td/T
	u      float64 // u_{k−1}
	e1, e2 float64 // e_{k−1}, e_{k−2}, relative to the set point
	// rising: the output left rest and the signal has not yet come down
	// to the set point since (see Update, "The first climb").
	rising bool
	// noRelease, noRest, noClimb, noRelapse: the floor's release, the
	// rest's clearing of the history, the first climb and the relapse
	// guard are switched off (Rules.Floor, Rules.Rest, Rules.FirstClimb,
	// Rules.Relapse).
	noRelease, noRest, noClimb, noRelapse bool
	relapse                               relapseGuard
}

// NewPID returns a pid controller at rest. p must be valid (see New).
func NewPID(p Params) *PID {
	return &PID{p: p, ti: float64(p.T) / float64(p.Ti), td: float64(p.Td) / float64(p.T)}
}

func (c *PID) Name() string { return "pid" }

func (c *PID) Reset() { c.u, c.e1, c.e2, c.rising, c.relapse = 0, 0, 0, false, relapseGuard{} }

// TargetMs is the set point.
func (c *PID) TargetMs() float64 { return c.p.TargetMs }

// Update applies, with r the set point and ε_k = (signal − r)/r,
//
//	Δv = Kp·[(ε_k − ε_{k−1}) + (T/Ti)·ε_k + (Td/T)·(ε_k − 2ε_{k−1} + ε_{k−2})]
//	u_k = clamp(max(u_{k−1}, u_floor)·e^Δv, 0, u_max)
//
// that is the velocity-form PID on the logarithm of the delay, driven by
// the error relative to the set point; u_floor = FloorShare·r, and a
// delay falling under it is released to 0. ε_k is capped at ErrCap.
//
// Why relative, both ways. The signal's scale is the threshold: 1 ms
// over means nothing at 50 ms and everything at 0.5 ms, so the error is
// taken relative to the set point. The output's scale is the device's:
// a per-I/O delay cuts a writer's rate by the ratio of its I/O time with
// and without the delay, and that I/O time is a fraction of a
// millisecond on flash and tens of ms on the thesis's array. A delay
// step in ms is therefore either far too large for one or far too small
// for the other whatever the threshold. Moving the delay by factors
// makes each step proportionate to the delay these writers already
// need, so the same gains hold 0.2 ms on flash and 50 ms on disks
// (internal/sim TestThresholdsFitTheDevice) without retuning; at the
// thesis's operating point (15 ms, about 7.5 ms of delay) the loop gain
// is that of the former law in ms with the same Kp.
//
// When the delay is 0 with the signal under the set point the controller
// is back at rest and its error history is cleared (as after Reset): how
// far under the threshold a healthy resource is carries no information,
// and remembering it, or a stale error of the active phase, would let
// the Δε and D terms throttle a signal that never crosses the threshold.
//
// The first climb. From rest until the signal first comes down to the
// set point, a falling error takes nothing away: the Δε and D terms
// count only when they add, and the integral term keeps adding while
// the signal is over. A burst's first ticks fill the disk's queue before
// any delay acts; as the delay drains that backlog the signal falls from
// many times the set point to just over it, and the Δε term of that
// fall, a correction meant for a loop that has overshot, took the delay
// back while the writers were not yet held. No delay has yet been too
// much while the signal has never reached the set point. For the same
// reason the error is not capped in the first climb: the cap is there
// for the P term of a falling spike, and here a fall takes nothing. A
// burst far over then takes the delay to its ceiling within a tick or
// two instead of about ten at the cap's pace, while one tick over from
// rest, which may be one noisy tick, is still capped: the climb begins
// with the tick that leaves rest.
func (c *PID) Update(signalMs float64) float64 {
	if math.IsNaN(signalMs) {
		signalMs = 0 // no signal: treat as healthy; fail open
	}
	r := c.p.TargetMs
	e := c.relErr(signalMs)
	if e <= 0 {
		c.rising = false
	}
	de, dde := e-c.e1, e-2*c.e1+c.e2
	if c.rising && !c.noClimb {
		de, dde = max(de, 0), max(dde, 0) // the first climb (see above)
	}
	dv := c.p.Kp * (de + c.ti*e + c.td*dde)
	if !c.noRelapse {
		dv = c.relapse.limit(c.u, e, dv, c.p.T)
	}
	floor := FloorShare * r
	switch {
	case c.u == 0 && dv <= 0:
		// At rest and not pushed: stay there.
	default:
		if c.u == 0 {
			c.rising = e > 0
		}
		u := math.Max(c.u, floor) * math.Exp(dv)
		if u < floor && !c.noRelease {
			u = 0 // fell through the floor: release
		}
		c.u = clamp(u, 0, c.p.UMaxMs)
	}
	if c.u == 0 && e < 0 && !c.noRest {
		// Back at rest: forget the history, as Reset does.
		c.e1, c.e2, c.relapse = 0, 0, relapseGuard{}
		return 0
	}
	c.e2, c.e1 = c.e1, e
	return c.u
}

// Rising reports that the output left rest and the signal has not yet
// come down to the set point since: the first climb of a burst (see
// Update).
func (c *PID) Rising() bool { return c.rising }

// SetUMax moves the clamp of the output to umax (> 0), for a ceiling
// that follows the writers (step 4 in doc.go). An
// output above the new clamp is brought down to it at once.
func (c *PID) SetUMax(umax float64) {
	if !(umax > 0) || math.IsInf(umax, 0) {
		return
	}
	c.p.UMaxMs = umax
	c.u = math.Min(c.u, umax)
}

// Rebase makes signalMs the error history, as if the signal had been
// there all along: a controller that was not stepped for a while (the
// engine freezes it while no writer writes) resumes from its output with
// no Δe or D kick from an error it last saw seconds ago.
//
// The history is the error Update would take from signalMs, capped as
// it caps: an uncapped history many times over the set point would read
// at the next step as a fall to the cap and release the delay (a burst
// that resumes after a pause with its reads far over).
func (c *PID) Rebase(signalMs float64) {
	if math.IsNaN(signalMs) {
		return
	}
	c.e1 = c.relErr(signalMs)
	c.e2 = c.e1
}

// relErr is the error Update acts on: the signal's distance from the set
// point relative to it, capped at ErrCap but in the first climb (see
// Update).
func (c *PID) relErr(signalMs float64) float64 {
	e := (signalMs - c.p.TargetMs) / c.p.TargetMs
	if c.p.ErrCap > 0 && (!c.rising || c.noClimb) {
		e = math.Min(e, c.p.ErrCap)
	}
	return e
}

// StepTarget moves the set point to targetMs (> 0) and keeps the error
// history as it was, relative to the old one: the next Update sees the
// move as a step of its error and answers it as it answers a step of the
// signal (a stricter reader's promise, see Loop.SetThreshold).
func (c *PID) StepTarget(targetMs float64) {
	if targetMs > 0 && !math.IsInf(targetMs, 0) {
		c.p.TargetMs = targetMs
	}
}

// Retarget moves the set point to targetMs (> 0) with no kick: the error
// history is re-expressed against the new set point, as if it had been
// there all along, and the output carries on.
func (c *PID) Retarget(targetMs float64) {
	if !(targetMs > 0) || math.IsInf(targetMs, 0) {
		return
	}
	old := c.p.TargetMs
	c.p.TargetMs = targetMs
	if c.u == 0 && c.e1 == 0 && c.e2 == 0 {
		return // at rest with no history (see Update): nothing to carry
	}
	c.e1 = ((1+c.e1)*old - targetMs) / targetMs
	c.e2 = ((1+c.e2)*old - targetMs) / targetMs
}

// SetOutput moves the output to u (clamped to [0, UMaxMs]) without a
// step: a controller that starts from a delay already held.
func (c *PID) SetOutput(u float64) float64 {
	if !math.IsNaN(u) {
		c.u = clamp(u, 0, c.p.UMaxMs)
	}
	return c.u
}

// None never throttles: it is the baseline of every comparison.
type None struct{}

func (None) Update(float64) float64 { return 0 }
func (None) Reset()                 {}
func (None) Name() string           { return "none" }

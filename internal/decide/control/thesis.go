package control

import "math"

// The constants of thesis Listing A.2 (reg.pl), used as they are. They are
// dimensionless there: T = 16 is not the 100 ms tick of the loop.
const (
	ThesisKp          = 0.3
	ThesisTi          = 500.0
	ThesisTd          = 1.0
	ThesisT           = 16.0
	ThesisMaxThrottle = -40.0 // lowest u_k: mark 40
)

// Thesis is a deliberate, faithful copy of the controller arithmetic of the
// thesis (Listing A.2, reg.pl), kept so that a run can compare it with pid
// on the same signal. It is buggy and must not be "fixed":
//
//   - Every step adds the constant Kp·(1 − T/Ti) ≈ 0.29, whatever the error.
//     (Equation 4.2 of the text says Kp·(1 + T/Ti) and a P term on e_{k−1};
//     the code, which produced Figures 5.9 and 5.10, says Kp·(1 − T/Ti) and
//     Kp·e_k. We follow the code.) The constant pulls u toward "no
//     throttle", so the signal must exceed the set point by about
//     1 ms (0.29/Kp) before throttling grows at all.
//   - The P term acts on e_k, not on e_k − e_{k−1}: in a velocity form
//     that is an integral with gain Kp per tick, and there is no real
//     proportional action.
//   - The error has the opposite sign to pid's (set point − signal), so u
//     is ≤ 0 and more negative means more throttling.
//
// u_k is capped to [−40, 0]; the iptables mark is −ceil(u_k) and picks a
// netem class of Listing B.2: mark k ≥ 1 delays 0.1 + 0.5·(k−1) ms, mark 0
// does not delay. Two things of the original are not copied, because they
// are plumbing around the arithmetic rather than the arithmetic: reg.pl
// left the mark unchanged when u_k was exactly 0 (so a capped u could
// leave a stale mark installed), and Listing B.2 created only 20 classes
// (up to 9.6 ms), so marks 21–40 fell to the HTB default class and were
// not delayed at all. Here mark 0 always means no delay and the delay of
// a mark is clamped to UMaxMs instead.
type Thesis struct {
	setpoint, umax float64
	u              float64    // u_{k−1}
	e              [3]float64 // e_k, e_{k−1}, e_{k−2} (prev_devs)
	mark           int
}

// NewThesis returns the thesis controller with set point p.TargetMs and
// delay cap p.UMaxMs; the gains are the listing's constants.
func NewThesis(p Params) *Thesis { return &Thesis{setpoint: p.TargetMs, umax: p.UMaxMs} }

func (c *Thesis) Name() string { return "thesis" }

func (c *Thesis) Reset() { c.u, c.e, c.mark = 0, [3]float64{}, 0 }

// Mark is the iptables mark of the last Update (0 to 40).
func (c *Thesis) Mark() int { return c.mark }

// Update runs one step of pid_reg() on the (already EWMA-filtered) signal.
func (c *Thesis) Update(signalMs float64) float64 {
	if math.IsNaN(signalMs) {
		signalMs = 0
	}
	// unshift(@prev_devs, $setpoint - $cur_ewma); … pop(@prev_devs)
	c.e[2], c.e[1], c.e[0] = c.e[1], c.e[0], c.setpoint-signalMs
	uk := c.u + ThesisKp*(1-(ThesisT/ThesisTi)) + ThesisKp*c.e[0] +
		((ThesisKp*ThesisTd)/ThesisT)*(c.e[0]-2*c.e[1]+c.e[2])
	if uk > 0 {
		uk = 0
	} else if uk < ThesisMaxThrottle {
		uk = ThesisMaxThrottle
	}
	c.u = uk
	c.mark = int(-math.Ceil(uk))
	return MarkDelayMs(c.mark, c.umax)
}

// MarkDelayMs is the delay of netem class mark (Listing B.2), clamped to
// umax: 0 for mark ≤ 0, else 0.1 + 0.5·(mark − 1) ms.
func MarkDelayMs(mark int, umax float64) float64 {
	if mark <= 0 {
		return 0
	}
	return clamp(0.1+0.5*float64(mark-1), 0, umax)
}

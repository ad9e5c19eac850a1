package control

import (
	"math"
	"time"
)

// The relapse guard's constants (step 3 in doc.go).
const (
	// relapseOnset is the relative error at which an overload has begun:
	// the signal at twice the set point, far past the scatter of a loop
	// holding it.
	relapseOnset = 1.0
	// relapseHold is how long the guard remembers an onset; an onset
	// while it holds, or within a hold of its end, doubles it, up to
	// relapseHoldMax: a cliff found again as soon as the guard lets go
	// is a property of the plant, not of one overload.
	relapseHold    = time.Minute
	relapseHoldMax = 4 * time.Minute
	// relapseMargin: the guard slows a delay falling under this multiple
	// of the remembered one; relapseHalfLife is how slowly it then falls.
	relapseMargin   = 1.5
	relapseHalfLife = 35 * time.Second
)

// relapseGuard remembers the delay that let the last overload in, the
// delay in force when the signal was last at or under the set point, and
// slows a delay falling back toward it (the relapse guard, step 3 in
// doc.go). Its age counts ticks.
type relapseGuard struct {
	at       float64 // the delay that let the last overload in; 0: none
	age      int     // ticks since that overload began
	hold     int     // ticks the guard holds after it; 0: relapseHold's
	healthyU float64 // the delay in force at the last tick at or under the set point
	lastE    float64 // the last tick's relative error
}

// holdTicks is how many ticks the guard holds after an onset.
func (g *relapseGuard) holdTicks(tick time.Duration) int {
	if g.hold == 0 {
		return int(relapseHold / tick)
	}
	return g.hold
}

// holding is the remembered delay while the guard holds, else 0.
func (g *relapseGuard) holding(tick time.Duration) float64 {
	if g.age >= g.holdTicks(tick) {
		return 0
	}
	return g.at
}

// onset remembers the delay that let an overload in. One that begins
// while the guard holds, or within a hold of its end, doubles the hold;
// a later one starts from relapseHold again.
func (g *relapseGuard) onset(tick time.Duration) {
	h := g.holdTicks(tick)
	switch {
	case g.at > 0 && g.age < 2*h:
		g.hold = min(2*h, int(relapseHoldMax/tick))
	default:
		g.hold = int(relapseHold / tick)
	}
	g.at, g.age = g.healthyU, 0
}

// limit takes the controller's move dv of the log-delay from the delay u
// at relative error e, and returns it slowed where it would take the delay
// under relapseMargin × the remembered onset's delay.
func (g *relapseGuard) limit(u, e, dv float64, tick time.Duration) float64 {
	g.age++
	if e <= 0 {
		g.healthyU = u
	}
	if e >= relapseOnset && g.lastE < relapseOnset && g.healthyU > 0 {
		g.onset(tick)
	}
	g.lastE = e
	if g.at == 0 || g.age >= g.holdTicks(tick) || dv >= 0 || u == 0 {
		return dv
	}
	zone := relapseMargin * g.at
	if u*math.Exp(dv) >= zone {
		return dv
	}
	slowest := math.Min(u, zone) * math.Exp2(-float64(tick)/float64(relapseHalfLife))
	return math.Log(math.Max(u*math.Exp(dv), slowest) / u)
}

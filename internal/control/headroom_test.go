package control

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestHeadroomFor(t *testing.T) {
	for _, c := range []struct {
		name     string
		m, s     float64
		min, max float64
	}{
		{"steady iSCSI (fig5.11, σ 0.09): the floor", 0, 0.09, headroomMin, headroomMin},
		{"very steady: the floor", 0, 0.02, headroomMin, headroomMin},
		{"a heavier tail (σ 0.16)", 0, 0.16, 0.16, 0.17},
		{"NFS (σ 0.21)", 0, 0.21, 0.21, 0.23},
		{"NFS held 3 % above its set point", 0.03, 0.21, 0.23, 0.25},
		{"not holding its median (flash at 1 ms): the default", 0.24, 0.29, headroomMin, headroomMin},
		{"below the set point is not credited", -0.1, 0.2, 0.2, 0.22},
		{"wild: the ceiling", 0, 1, headroomMax, headroomMax},
	} {
		h := headroomFor(c.m, c.s)
		if h < c.min || h > c.max {
			t.Errorf("%s: headroom %.3f, want %.3f–%.3f", c.name, h, c.min, c.max)
		}
		// What it promises: a second's p95 and p98 within the margins.
		if h > headroomMin && h < headroomMax {
			p95 := (1 - h) * (1 + math.Max(c.m, 0) + z95*c.s)
			p98 := (1 - h) * (1 + math.Max(c.m, 0) + z98*c.s)
			if p95 > p95Margin+1e-9 || p98 > overMargin+1e-9 {
				t.Errorf("%s: p95 %.3f, p98 %.3f of the threshold", c.name, p95, p98)
			}
		}
	}
}

func TestRobustScatter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	normal := make([]float64, 120)
	for i := range normal {
		normal[i] = 0.1 * r.NormFloat64()
	}
	// A few onsets left over must not count: the robust σ ignores them.
	withBursts := append([]float64{3, 2.5, 4}, normal[3:]...)
	// A heavy upper tail (a fifth of the seconds 40 % over) is scatter.
	heavy := make([]float64, 120)
	for i := range heavy {
		heavy[i] = 0.05 * r.NormFloat64()
		if i%5 == 0 {
			heavy[i] += 0.4
		}
	}
	for _, c := range []struct {
		name     string
		xs       []float64
		min, max float64
	}{
		{"normal σ 0.1", normal, 0.08, 0.12},
		{"normal with three onsets", withBursts, 0.08, 0.13},
		{"heavy upper tail", heavy, 0.2, 0.4},
	} {
		_, s := robust(append([]float64(nil), c.xs...))
		if s < c.min || s > c.max {
			t.Errorf("%s: scatter %.3f, want %.2f–%.2f", c.name, s, c.min, c.max)
		}
	}
}

// heldRig steps adaptHeadroom on one resource as the engine does, each
// 100 ms tick's raw signal the set point of its second × (1 + x) with x
// drawn per second from the scatter.
type heldRig struct {
	l   *Loop
	pid *PID
	now time.Time
	// gaps: every third tick completes no read (a reader slower than a
	// tick), which must not disqualify its second.
	gaps bool
}

func newHeldRig(auto bool) *heldRig {
	l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 15, Alpha: 0.25,
		Headroom: DefaultHeadroom, AutoHeadroom: auto, Signal: SignalMean})
	if err != nil {
		panic(err)
	}
	l.pid.Update(30) // holding: a delay on
	return &heldRig{l: l, pid: l.pid, now: time.Unix(1000, 0)}
}

// step runs the headroom rule for one tick with members (0 or 1) and the
// tick's raw signal (0: no read completed).
func (h *heldRig) step(members int, raw float64, armed bool) {
	h.l.adaptHeadroom(Observation{Now: h.now, Measured: true, Reads: raw > 0, RawMs: raw, Members: members},
		&Output{ControlMs: 12, Armed: armed})
	h.now = h.now.Add(100 * time.Millisecond)
}

func (h *heldRig) run(seconds int, x func(s int) float64, armed bool) {
	for s := 0; s < seconds; s++ {
		raw := h.l.TargetMs() * (1 + x(s))
		for k := 0; k < 10; k++ {
			if h.gaps && k%3 == 0 {
				h.step(1, 0, armed)
				continue
			}
			h.step(1, raw, armed)
		}
	}
}

func TestHeadroomFollowsTheScatter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	gauss := func(sigma float64) func(int) float64 {
		return func(int) float64 { return sigma * r.NormFloat64() }
	}
	for _, c := range []struct {
		name       string
		auto, gaps bool
		armed      bool
		sigma      float64
		min, max   float64
		signal     string
	}{
		{"a p95 signal: the default", true, false, false, 0.25, DefaultHeadroom, DefaultHeadroom, SignalP95},
		{"steady: the default, no less", true, false, false, 0.06, DefaultHeadroom, DefaultHeadroom, ""},
		{"swinging: more", true, false, false, 0.25, 0.25, 0.32, ""},
		{"swinging, ticks without reads", true, true, false, 0.25, 0.25, 0.32, ""},
		{"fixed headroom stays", false, false, false, 0.25, DefaultHeadroom, DefaultHeadroom, ""},
		{"armed (writers pausing): nothing measured", true, false, true, 0.25, DefaultHeadroom, DefaultHeadroom, ""},
		{"not holding: seconds 25 % over the set point", true, false, false, -1, DefaultHeadroom, DefaultHeadroom, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHeldRig(c.auto)
			h.gaps = c.gaps
			if c.signal != "" {
				h.l.cfg.Signal = c.signal
			}
			x := gauss(c.sigma)
			if c.sigma < 0 {
				x = func(int) float64 { return 0.25 + 0.3*r.NormFloat64() }
			}
			h.run(300, x, c.armed)
			got := h.l.headroom
			if got < c.min || got > c.max {
				t.Errorf("headroom %.3f after 300 s at σ %.2f, want %.3f–%.3f", got, c.sigma, c.min, c.max)
			}
			if want := 15 * (1 - got); math.Abs(h.pid.TargetMs()-want) > 1e-9 && c.auto && !c.armed {
				t.Errorf("controller's set point %.3f ms, the headroom's %.3f", h.pid.TargetMs(), want)
			}
		})
	}
}

// TestHeadroomIgnoresOnsets: the first settleAfter of every burst is the
// onset's, not the steady state's, and a second step is bounded.
func TestHeadroomIgnoresOnsets(t *testing.T) {
	h := newHeldRig(true)
	prev := h.l.headroom
	for burst := 0; burst < 40; burst++ {
		for s := 0; s < 12; s++ {
			// 3 s at four times the threshold, then steady (σ 0).
			raw := h.l.TargetMs()
			if s < 3 {
				raw *= 4
			}
			for k := 0; k < 10; k++ {
				h.step(1, raw, false)
				if d := math.Abs(h.l.headroom - prev); d > headroomStep+1e-12 {
					t.Fatalf("headroom moved %.4f in one step, more than %v", d, headroomStep)
				}
				prev = h.l.headroom
			}
		}
		for k := 0; k < 30; k++ { // a pause: the set empties
			h.step(0, 0, false)
		}
	}
	if h.l.headroom != headroomMin {
		t.Errorf("headroom %.3f after steady bursts with 3 s onsets at 4 × the set point, want the floor %v", h.l.headroom, headroomMin)
	}
}

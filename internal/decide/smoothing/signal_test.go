package smoothing

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestEWMASteps(t *testing.T) {
	e, err := NewEWMA(0.25)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		op   string
		x    float64
		want float64
	}{
		{"update", 40, 10},   // 0 + .25·40
		{"update", 40, 17.5}, // 10 + .25·30
		{"decay", 0, 13.125}, // 17.5 − .25·17.5
		{"update", 13.125, 13.125},
		{"update", 0, 9.84375},
	}
	for i, s := range steps {
		var got float64
		if s.op == "decay" {
			got = e.Decay()
		} else {
			got = e.Update(s.x)
		}
		if !near(got, s.want) || !near(e.Value(), s.want) {
			t.Fatalf("step %d %s(%v) = %v, want %v", i, s.op, s.x, got, s.want)
		}
	}
	e.Reset()
	if e.Value() != 0 {
		t.Fatalf("after Reset value %v", e.Value())
	}
}

func TestEWMADecaysTowardZero(t *testing.T) {
	e, _ := NewEWMA(ThesisAlpha)
	e.Update(100)
	prev := e.Value()
	for i := 0; i < 50; i++ {
		v := e.Decay()
		if v >= prev || v < 0 {
			t.Fatalf("decay step %d: %v after %v, want strictly smaller and ≥ 0", i, v, prev)
		}
		prev = v
	}
	if prev > 0.1 {
		t.Fatalf("after 50 idle ticks EWMA still %v", prev)
	}
}

func TestEWMAConvergesAndStaysInRange(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, alpha := range []float64{0.05, 0.25, 1} {
		e, _ := NewEWMA(alpha)
		lo, hi := 0.0, 0.0
		for i := 0; i < 1000; i++ {
			x := r.Float64() * 50
			hi = math.Max(hi, x)
			v := e.Update(x)
			if v < lo-1e-9 || v > hi+1e-9 {
				t.Fatalf("alpha %v: value %v outside samples' range [%v, %v]", alpha, v, lo, hi)
			}
		}
		for i := 0; i < 200; i++ {
			e.Update(7)
		}
		if math.Abs(e.Value()-7) > 0.01 {
			t.Errorf("alpha %v: constant input 7 gives %v", alpha, e.Value())
		}
	}
}

func TestBadAlpha(t *testing.T) {
	for _, a := range []float64{0, -0.1, 1.5, math.NaN()} {
		if _, err := NewEWMA(a); err == nil {
			t.Errorf("alpha %v accepted", a)
		}
	}
}

// One slow tick moves the EWMA by alpha of the step: the thesis filter
// smooths an outlier, it does not ignore it.
func TestEWMAFollowsAnOutlier(t *testing.T) {
	e, _ := NewEWMA(ThesisAlpha)
	for i := 0; i < 10; i++ {
		e.Update(10)
	}
	if ev := e.Update(500); ev <= 100 {
		t.Errorf("EWMA %v barely moved on an outlier of 500; expected > 100", ev)
	}
}

func TestReadLatency(t *testing.T) {
	var a ReadLatency
	if _, ok := a.Value(); ok {
		t.Fatal("empty aggregate reports a value")
	}
	a.Add(0, 0)   // idle device
	a.Add(10, 50) // 5 ms each
	a.Add(30, 450)
	ms, ok := a.Value()
	if !ok || ms != 12.5 || a.Reads() != 40 {
		t.Fatalf("Value = %v, %v (reads %d); want 12.5 ms over 40 reads", ms, ok, a.Reads())
	}
	a.Reset()
	if _, ok := a.Value(); ok {
		t.Fatal("after Reset still has a value")
	}
}

package policy

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

func consumer(ip, iqn, dev string) topology.Consumer {
	return topology.Consumer{Addr: netip.MustParseAddr(ip), IQNs: []string{iqn}, Device: dev}
}

func TestReadOverWriteHysteresis(t *testing.T) {
	// alpha 1 makes the EWMA the rate itself, to test the thresholds alone.
	h, err := NewReadOverWrite(1, 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := consumer("10.0.0.2", "", "loop0")
	var st State
	steps := []struct {
		kbs  float64
		want bool
	}{
		{0, false},
		{499, false},
		{500, false}, // strictly above to join
		{501, true},
		{300, true}, // between leave (250) and join: stays
		{251, true},
		{250, true}, // strictly below to leave
		{249, false},
		{400, false}, // between: stays out
		{9000, true},
		{-5, false}, // nonsense rate counts as 0
	}
	for i, s := range steps {
		if got := h.Update(&st, c, s.kbs); got != s.want || st.Member != s.want {
			t.Fatalf("step %d rate %v: member %v, want %v", i, s.kbs, got, s.want)
		}
	}
	if !h.Counts(c) {
		t.Error("read-over-write must count every consumer's reads")
	}
}

func TestReadOverWriteEWMA(t *testing.T) {
	h, _ := NewReadOverWrite(0.25, 500, 250)
	var st State
	c := consumer("10.0.0.2", "", "loop0")
	// A 2000 kB/s writer: EWMA 500, 875 → joins on the second tick.
	if h.Update(&st, c, 2000) {
		t.Fatal("joined on the first tick at EWMA 500")
	}
	if st.WriteEWMAKBs != 500 {
		t.Fatalf("EWMA %v, want 500", st.WriteEWMAKBs)
	}
	if !h.Update(&st, c, 2000) || st.WriteEWMAKBs != 875 {
		t.Fatalf("second tick: member %v EWMA %v, want member at 875", st.Member, st.WriteEWMAKBs)
	}
	// It stops writing: it leaves once the EWMA falls under 250:
	// 875·0.75^k < 250 ⇒ k = 5.
	ticks := 0
	for h.Update(&st, c, 0) {
		ticks++
	}
	if ticks != 4 {
		t.Fatalf("left after %d idle ticks, want on the 5th", ticks+1)
	}
}

// A writer whose rate hovers around the join threshold must not flap
// every tick: hysteresis bounds the number of transitions.
func TestReadOverWriteNoFlapping(t *testing.T) {
	h, _ := NewReadOverWrite(0.25, 500, 250)
	r := rand.New(rand.NewPCG(5, 6))
	var st State
	c := consumer("10.0.0.2", "", "loop0")
	flips, prev := 0, false
	for i := 0; i < 10000; i++ {
		m := h.Update(&st, c, 400+r.Float64()*200) // 400–600 kB/s
		if m != prev {
			flips++
		}
		prev = m
	}
	if flips > 1 {
		t.Fatalf("%d membership changes for a writer hovering at 400–600 kB/s", flips)
	}
	// Without hysteresis (leave = join) the same writer flaps.
	nh, _ := NewReadOverWrite(0.25, 500, 500)
	st, flips, prev = State{}, 0, false
	for i := 0; i < 10000; i++ {
		m := nh.Update(&st, c, 400+r.Float64()*200)
		if m != prev {
			flips++
		}
		prev = m
	}
	if flips < 10 {
		t.Fatalf("control case: only %d flips without hysteresis; the test proves nothing", flips)
	}
}

func TestReadOverWriteBadConfig(t *testing.T) {
	tests := []struct {
		alpha, join, leave float64
		want               string
	}{
		{0, 500, 0, "alpha"},
		{0.25, 0, 0, "join"},
		{0.25, 500, 600, "leave"},
		{0.25, 500, -1, "leave"},
	}
	for _, tt := range tests {
		if _, err := NewReadOverWrite(tt.alpha, tt.join, tt.leave); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewReadOverWrite(%v, %v, %v) err = %v, want one about %s", tt.alpha, tt.join, tt.leave, err, tt.want)
		}
	}
}

func TestManual(t *testing.T) {
	m, err := NewManual(0.25, ManualConfig{
		Protected: []string{"10.0.0.2", "iqn.2010-01.b3:reader"},
		Throttle:  []string{"loop4", "::ffff:10.0.0.5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		c                topology.Consumer
		counts, throttle bool
	}{
		{consumer("10.0.0.2", "", "loop1"), true, false},
		{consumer("10.0.0.3", "iqn.2010-01.b3:reader", "loop2"), true, false},
		{consumer("10.0.0.4", "", "loop4"), false, true},
		{consumer("10.0.0.5", "", "loop5"), false, true},
		{consumer("10.0.0.6", "", "loop6"), false, false},
	}
	for _, tt := range tests {
		var st State
		if got := m.Counts(tt.c); got != tt.counts {
			t.Errorf("%v: counts %v, want %v", tt.c, got, tt.counts)
		}
		// Membership is the list, whatever the write rate.
		for _, kbs := range []float64{0, 1e6} {
			if got := m.Update(&st, tt.c, kbs); got != tt.throttle {
				t.Errorf("%v at %v kB/s: throttle %v, want %v", tt.c, kbs, got, tt.throttle)
			}
		}
		if st.WriteEWMAKBs == 0 {
			t.Errorf("%v: write EWMA not kept for monitoring", tt.c)
		}
	}
	topo := topology.Topology{Resources: []topology.Resource{{Name: "r", Consumers: []topology.Consumer{
		consumer("10.0.0.2", "", "loop1"), consumer("10.0.0.4", "", "loop4"),
	}}}}
	if got, want := m.Unmatched(topo), []string{"10.0.0.5", "iqn.2010-01.b3:reader"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Unmatched = %v, want %v", got, want)
	}
}

func TestManualBadConfig(t *testing.T) {
	tests := []struct {
		cfg  ManualConfig
		want string
	}{
		{ManualConfig{Throttle: []string{"a"}}, "protected"},
		{ManualConfig{Protected: []string{"a"}}, "to throttle"},
		{ManualConfig{Protected: []string{"a", "10.0.0.1"}, Throttle: []string{"::ffff:10.0.0.1"}}, "both"},
	}
	for _, tt := range tests {
		if _, err := NewManual(0.25, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewManual(%+v) err = %v, want one about %q", tt.cfg, err, tt.want)
		}
	}
}

// A writer held by the throttle is judged by its demand: it stays while
// its writes are outstanding, whatever rate the delay leaves it, and
// leaves once it stops or is no longer held (issue 33); a writer joins
// by its writes outstanding whether held or not. want is the
// membership after each tick, m for member, - for not.
func TestReadOverWriteDemand(t *testing.T) {
	c := consumer("10.0.0.2", "", "loop0")
	// A member at EWMA 1000 kB/s with 3.5 writes outstanding.
	member := State{WriteEWMAKBs: 1000, OutstandingEWMA: 3.5, Member: true}
	held := func(kbs, out float64) Sample { return Sample{WriteKBs: kbs, HeldMs: 200, Outstanding: out} }
	tests := []struct {
		name  string
		start State
		tick  Sample
		want  string
	}{
		// 12 threads of 4 KiB random writes on three hosts held at 200 ms.
		{"held hard, still writing: stays", member, held(64, 3.4), strings.Repeat("m", 40)},
		// Outstanding 3.5·0.75^k < 0.5 from k = 7; the rate left at k = 5.
		{"held, then stops: leaves within a second", member, held(0, 0), "mmmmmm----"},
		{"not held at that rate: leaves by its rate", member, Sample{WriteKBs: 64, Outstanding: 0.02}, "mmmmm-----"},
		{"held, but a few writes a second: leaves", member, held(12, 0.3), "mmmmmmmmm-----"},
		{"armed returning writer with writes outstanding: joins", State{WriteEWMAKBs: 40}, held(64, 3.4), "-mmmm"},
		{"armed light writer: does not join", State{WriteEWMAKBs: 40}, held(12, 0.6), strings.Repeat("-", 20)},
		// Behind a full write-back cache: the array's rate, its writes
		// outstanding as before.
		{"unheld with writes outstanding: joins by them", State{}, Sample{WriteKBs: 177, Outstanding: 3}, "-" + strings.Repeat("m", 19)},
		{"unheld light writer: does not join", State{}, Sample{WriteKBs: 12, Outstanding: 0.3}, strings.Repeat("-", 20)},
		// Outstanding 0.8 + 2.7·0.75^k < 1 from k = 10; the rate left at k = 5.
		{"unheld member: stays while one write is outstanding, then leaves by its rate", member, Sample{WriteKBs: 64, Outstanding: 0.8}, "mmmmmmmmm---"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := NewReadOverWrite(0.25, 500, 250)
			if err != nil {
				t.Fatal(err)
			}
			st := tt.start
			var got strings.Builder
			for range tt.want {
				if h.Judge(&st, c, tt.tick) {
					got.WriteByte('m')
				} else {
					got.WriteByte('-')
				}
			}
			if got.String() != tt.want {
				t.Errorf("membership %s, want %s (state after: %+v)", got.String(), tt.want, st)
			}
		})
	}
}

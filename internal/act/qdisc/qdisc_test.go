package qdisc

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/act/plan/plantest"
)

// idleStates are a throttle that starts and ends: a known consumer
// nobody throttles, the same consumer delayed, and idle again.
func idleStates() (idle, busy plan.State) {
	g := plan.Group{Name: "vg", Members: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	idle = plan.State{Groups: []plan.Group{g}}
	g.WriteDelay, g.ReadRate = 5*time.Millisecond, 1<<20
	busy = plan.State{Groups: []plan.Group{g}}
	return idle, busy
}

// waitLocked polls cond (under lock) until it holds or a second passed.
func waitLocked(t *testing.T, lock func() func(), cond func() bool) bool {
	t.Helper()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		unlock := lock()
		ok := cond()
		unlock()
		if ok {
			return true
		}
	}
	return false
}

// backend is what the tests use of a tc backend: throttle.Backend and
// throttle.Verifier.
type backend interface {
	Name() string
	Apply(ctx context.Context, s plan.State) error
	Verify(ctx context.Context) ([]owned.Drift, error)
	Close() error
}

// The tc backends keep no qdisc on the device while nobody is throttled:
// the first throttle installs the tree in the same Apply, and it goes
// IdleGrace after the last one ended (not at once: it may hold packets),
// unless a throttle came back meanwhile.
func TestTCRootIdle(t *testing.T) {
	ctx := context.Background()
	idle, busy := idleStates()
	for _, mk := range []func(TCConfig) (backend, *tcRoot, error){
		func(c TCConfig) (backend, *tcRoot, error) {
			b, err := NewNetem(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			return b, &b.tcRoot, nil
		},
		func(c TCConfig) (backend, *tcRoot, error) {
			b, err := NewHTB(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			return b, &b.tcRoot, nil
		},
	} {
		rec := &acttest.Recorder{}
		k := owned.NewFakeKernel()
		b, root, err := mk(TCConfig{Dev: "veth-t", Instance: "ti", Run: rec, Firewall: k, Sets: k, IdleGrace: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		lock := func() func() { root.mu.Lock(); return root.mu.Unlock }
		if rec.Root != "" {
			t.Fatalf("%s: root qdisc %q after start, want none", b.Name(), rec.Root)
		}
		if err := b.Apply(ctx, idle); err != nil || rec.Root != "" || len(chains(k)) != 0 {
			t.Fatalf("%s idle: err %v, root %q, rules %q; want nothing installed", b.Name(), err, rec.Root, chains(k))
		}
		if d, err := b.Verify(ctx); err != nil || len(d) != 0 || rec.Root != "" {
			t.Errorf("%s: Verify while idle: %v %v, root %q; want nothing to repair", b.Name(), d, err, rec.Root)
		}
		if err := b.Apply(ctx, busy); err != nil || rec.Root == "" || len(chains(k)) == 0 {
			t.Fatalf("%s throttled: err %v, root %q, rules %q; want both in one apply", b.Name(), err, rec.Root, chains(k))
		}
		if err := b.Apply(ctx, idle); err != nil || len(chains(k)) != 0 {
			t.Fatalf("%s idle again: err %v, rules %q", b.Name(), err, chains(k))
		}
		if rec.Root == "" {
			t.Errorf("%s: the tree went at once, with packets maybe in it", b.Name())
		}
		// Throttled again within the grace: the tree stays.
		if err := b.Apply(ctx, busy); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
		if unlock := lock(); rec.Root == "" {
			unlock()
			t.Fatalf("%s: the tree went while throttled", b.Name())
		} else {
			unlock()
		}
		if err := b.Apply(ctx, idle); err != nil {
			t.Fatal(err)
		}
		if !waitLocked(t, lock, func() bool { return rec.Root == "" && !root.installed }) {
			t.Errorf("%s: root qdisc %q still there after the grace", b.Name(), rec.Root)
		}
		if err := b.Apply(ctx, busy); err != nil || rec.Root == "" {
			t.Errorf("%s: throttled after the teardown: %v, root %q", b.Name(), err, rec.Root)
		}
		if err := b.Close(); err != nil || rec.Root != "" {
			t.Errorf("%s: close: %v, root %q", b.Name(), err, rec.Root)
		}
	}
}

// chains lists the fake kernel's chains.
func chains(k *owned.FakeKernel) []string {
	cs, _ := k.Chains(context.Background())
	return cs
}

func TestSplitGroupsRules(t *testing.T) {
	n := &Netem{newTCRoot(TCConfig{SmallSegment: 128, SmallSegments: map[uint16]int{2049: 256, 3260: 128}, Steps: DefaultNetemSteps(), Logger: quietLog()}, "netem", NetemHandle)}
	rules := n.Rules(plan.State{Groups: []plan.Group{{Name: "fs-a", Ports: []uint16{3260, 2049, 10809}, WriteDelay: 5 * time.Millisecond}}})
	want := []string{
		"-A SANQOS -p tcp -m multiport --sports 3260,10809 -m set --match-set sanqos-fs-a dst -m length --length 0:228 -j CLASSIFY",
		"-A SANQOS -p tcp -m tcp --sport 2049 -m set --match-set sanqos-fs-a dst -m length --length 0:356 -j CLASSIFY",
	}
	if len(rules) != len(want) {
		t.Fatalf("rules:\n%s\nwant one per split", strings.Join(rules, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(rules[i], w) {
			t.Errorf("rule %d:\n%s\nwant it to start\n%s", i, rules[i], w)
		}
	}
	one := plan.SplitGroups([]uint16{3260, 3261}, nil, 128)
	if len(one) != 1 || len(one[0].Ports) != 2 {
		t.Errorf("one split: %+v, want one group of both ports", one)
	}
}

func TestNetemGolden(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	k := owned.NewFakeKernel()
	b, err := NewNetem(ctx, TCConfig{Dev: "veth-t", Run: rec, Sets: k, Steps: []time.Duration{
		100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range plantest.GoldenStates() {
		fmt.Fprintf(&rec.Log, "# state %d\n", i)
		if err := b.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintf(&rec.Log, "# close\n")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	acttest.Golden(t, *update, "netem.golden", rec.Log.String())
}

func TestHTBGolden(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	k := owned.NewFakeKernel()
	b, err := NewHTB(ctx, TCConfig{Dev: "veth-t", Run: rec, Sets: k})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for i, s := range plantest.GoldenStates() {
		fmt.Fprintf(&rec.Log, "# state %d\n", i)
		if err := b.Apply(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	acttest.Golden(t, *update, "htb.golden", rec.Log.String())
}

// netemMissing answers like this machine: no sch_netem.
type netemMissing struct{ acttest.Recorder }

func (r *netemMissing) Run(ctx context.Context, stdin, name string, args ...string) (string, error) {
	if strings.Contains(strings.Join(args, " ")+stdin, " netem ") {
		return "Error: Specified qdisc kind is unknown.", fmt.Errorf("exit status 2")
	}
	return r.Recorder.Run(ctx, stdin, name, args...)
}

func TestNetemMissingNamesNfqueue(t *testing.T) {
	_, err := NewNetem(context.Background(), TCConfig{Dev: "veth-t", Run: &netemMissing{}, Sets: owned.NewFakeKernel()})
	if err == nil || !strings.Contains(err.Error(), "nfqueue") {
		t.Fatalf("error %v, want one naming the nfqueue backend", err)
	}
}

func TestQuantize(t *testing.T) {
	steps := DefaultNetemSteps()
	for _, c := range []struct {
		d    time.Duration
		want time.Duration // -1: no class
	}{
		{0, -1},
		{40 * time.Microsecond, -1},
		{60 * time.Microsecond, 100 * time.Microsecond},
		{4600 * time.Microsecond, 4500 * time.Microsecond},
		{4800 * time.Microsecond, 5 * time.Millisecond},
		{time.Second, 20 * time.Millisecond},
	} {
		i := Quantize(steps, c.d)
		got := time.Duration(-1)
		if i >= 0 {
			got = steps[i]
		}
		if got != c.want {
			t.Errorf("Quantize(%v) = %v, want %v", c.d, got, c.want)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

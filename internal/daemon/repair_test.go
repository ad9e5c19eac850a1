package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
)

// tcFake answers tc like a device whose root qdisc is the one last
// added, and every other command with success.
type tcFake struct {
	mu   sync.Mutex
	root string
}

func (r *tcFake) Run(_ context.Context, stdin string, name string, args ...string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd := name + " " + strings.Join(args, " ")
	switch {
	case cmd == "tc -batch -":
		for _, l := range strings.Split(stdin, "\n") {
			if f := strings.Fields(l); len(f) > 6 && f[0] == "qdisc" && f[1] == "add" && f[4] == "root" {
				r.root = f[6]
			}
		}
	case strings.HasPrefix(cmd, "tc qdisc add") && args[4] == "root":
		r.root = args[6]
	case strings.HasPrefix(cmd, "tc qdisc del") && args[4] == "root":
		r.root = ""
	case strings.HasPrefix(cmd, "tc qdisc show") && r.root != "":
		return fmt.Sprintf("qdisc htb %s root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0\n", r.root), nil
	case strings.HasPrefix(cmd, "tc qdisc show"):
		return "qdisc noqueue 0: root refcnt 2\n", nil
	}
	return "", nil
}

// runUntil runs the daemon's loop on the fake clock, 100 ms at a time,
// until done holds or limit has passed on the fake clock; it returns the
// fake time that took.
func runUntil(clk *clock.Fake, limit time.Duration, done func() bool) (time.Duration, bool) {
	start := clk.Now()
	for clk.Now().Sub(start) < limit {
		clk.Advance(100 * time.Millisecond)
		// Let the loop and the verifier take their ticks.
		time.Sleep(2 * time.Millisecond)
		if done() {
			return clk.Now().Sub(start), true
		}
	}
	return clk.Now().Sub(start), false
}

// What another tool flushes (the jump, the whole ruleset, the set
// members) is put back within 10 s, logged once and counted (audit N1).
// The daemon applies an unchanged state only once, so before the
// verifier it stayed flushed for good.
func TestDaemonRepairsWhatOthersFlushed(t *testing.T) {
	k := owned.NewFakeKernel()
	be, err := throttle.NewNetem(context.Background(), throttle.TCConfig{Dev: "sqfake0", Instance: "tfake", Run: &tcFake{},
		Firewall: k, Sets: k, Logger: newLogger(&logBuf{})})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	clk := clock.NewFake(t0)
	d, err := New(Options{Clock: clk, Decider: &fakeEngine{decisions: []Decision{dec(20, 5, "10.99.0.3")}},
		Stats: &fakeStats{fail: map[int]bool{}}, Backend: be, Logger: newLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if _, ok := runUntil(clk, 5*time.Second, func() bool { return strings.Contains(k.String(), "10.99.0.3") }); !ok {
		t.Fatalf("the throttle was never installed:\n%s", k.String())
	}
	installed := k.String()
	for _, c := range []struct {
		name, object string
		flush        func()
	}{
		{"iptables -t mangle -F POSTROUTING", "jump", k.FlushHook},
		{"nft flush ruleset", "chain", k.FlushRuleset},
		{"ipset flush", "member", k.FlushSets},
	} {
		warned := logs.count("level=WARN")
		c.flush()
		if k.String() == installed {
			t.Fatalf("%s: the fake did not flush anything", c.name)
		}
		took, ok := runUntil(clk, 10*time.Second, func() bool { return k.String() == installed })
		if !ok {
			t.Errorf("%s: not repaired within %v; the kernel holds:\n%s", c.name, took, k.String())
			continue
		}
		t.Logf("%s: repaired after %v", c.name, took)
		// A few more seconds: the repair is logged once, not at every look.
		runUntil(clk, 6*time.Second, func() bool { return false })
		if n := logs.count("level=WARN") - warned; n != 1 {
			t.Errorf("%s: %d warnings, want 1:\n%s", c.name, n, logs)
		}
		if !strings.Contains(scrape(t, d), fmt.Sprintf(`sanqos_kernel_repairs_total{object=%q}`, c.object)) {
			t.Errorf("%s: no repair of a %s counted", c.name, c.object)
		}
	}
}

// scrape returns the daemon's /metrics page.
func scrape(t *testing.T, d *Daemon) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// verifying is a backend whose read-back returns what the test sets.
type verifying struct {
	fakeBackend
	drifts  []throttle.Drift
	err     error
	resyncs int
}

func (v *verifying) Verify(context.Context) ([]throttle.Drift, error) { return v.drifts, v.err }
func (v *verifying) Resync()                                          { v.resyncs++ }

// One event is one warning however many looks it takes to repair; each
// look that finds drift is counted and asks for a re-apply; a clean look
// ends the event; the periodic full resync re-applies with no drift; a
// failing read-back is logged when it starts and when it ends.
func TestRepairReportedOncePerEvent(t *testing.T) {
	r := newRig(t, dec(20, 2, "10.99.0.3"))
	v := &verifying{}
	r.d.o.Backend = v
	vt := r.d.verifyTargets()[0]
	ctx := context.Background()
	jump := throttle.Drift{Object: "jump", Name: "POSTROUTING -> SANQOS-q3260", Want: "present", Found: "absent"}
	steps := []struct {
		drifts       []throttle.Drift
		err          error
		full         bool
		warns, errs  int // logged so far
		req          bool
		resyncs      int
		jumpsCounted string
	}{
		{nil, nil, false, 0, 0, false, 0, ""},
		{[]throttle.Drift{jump}, nil, false, 1, 0, true, 0, `sanqos_kernel_repairs_total{object="jump"} 1`},
		{[]throttle.Drift{jump}, nil, false, 1, 0, true, 0, `sanqos_kernel_repairs_total{object="jump"} 2`},
		{nil, nil, false, 1, 0, false, 0, ""},
		{[]throttle.Drift{jump}, nil, false, 2, 0, true, 0, `sanqos_kernel_repairs_total{object="jump"} 3`},
		{nil, nil, true, 2, 0, true, 1, ""},
		{nil, errors.New("iptables-save: exit status 1"), false, 2, 1, false, 1, "sanqos_kernel_verify_errors_total 1"},
		{nil, errors.New("iptables-save: exit status 1"), false, 2, 1, false, 1, "sanqos_kernel_verify_errors_total 2"},
	}
	for i, s := range steps {
		v.drifts, v.err = s.drifts, s.err
		r.d.verifyOnce(ctx, vt, s.full)
		if got := r.logs.count("level=WARN", "re-installing"); got != s.warns {
			t.Errorf("look %d: %d warnings, want %d", i, got, s.warns)
		}
		if got := r.logs.count("level=ERROR", "reading back"); got != s.errs {
			t.Errorf("look %d: %d errors logged, want %d", i, got, s.errs)
		}
		if got := r.d.rep.req.Swap(false); got != s.req {
			t.Errorf("look %d: re-apply asked %v, want %v", i, got, s.req)
		}
		if v.resyncs != s.resyncs {
			t.Errorf("look %d: %d resyncs, want %d", i, v.resyncs, s.resyncs)
		}
		if s.jumpsCounted != "" && !strings.Contains(scrape(t, r.d), s.jumpsCounted) {
			t.Errorf("look %d: /metrics lacks %q", i, s.jumpsCounted)
		}
	}
	// Each event ends with one line saying it is repaired (looks 3 and 5);
	// a failed read-back says nothing of the kind.
	if got := r.logs.count("level=INFO", "kernel objects repaired", "was=\"jump POSTROUTING -> SANQOS-q3260: want present, found absent\""); got != 2 {
		t.Errorf("%d repaired lines, want 2:\n%s", got, r.logs)
	}
	if !strings.Contains(r.logs.String(), "drift=\"jump POSTROUTING -> SANQOS-q3260: want present, found absent\"") {
		t.Errorf("the warning does not say what changed:\n%s", r.logs)
	}
	// A request is taken by the next tick, which re-applies an unchanged state.
	r.ticks(2)
	before, _, _ := v.counts()
	v.drifts, v.err = []throttle.Drift{jump}, nil
	r.d.verifyOnce(ctx, vt, false)
	r.ticks(1)
	if after, _, _ := v.counts(); after != before+1 {
		t.Errorf("applies %d after a drift, want %d: the unchanged state was not re-applied", after, before+1)
	}
}

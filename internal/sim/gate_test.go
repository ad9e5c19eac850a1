package sim

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/engine"
)

// The gate. The control law is moved and reshaped under this test: it
// runs the simulator, closed loop, on fixed-seed scenarios that exercise
// every rule of the law, and compares everything the engine decides each
// tick (signal, delay, ceiling, set, returning writers, flags) with
// testdata/gate.txt (a digest per 10 s of each run), bit for bit. A refactoring that is meant to keep
// the behaviour must keep this file; one that changes the behaviour
// regenerates it with -update and says why in its commit.
//
// The plant is part of the loop, so a change to the plant model changes
// the golden file too: regenerate it on the commit that changes the plant.

var updateGate = flag.Bool("update", false, "rewrite testdata/gate.txt from the current engine")

const gateFile = "testdata/gate.txt"

// gateRun is one closed-loop run of the gate.
type gateRun struct {
	name       string
	scenario   func() Scenario
	controller string
	threshold  float64
	seed       int64
	duration   time.Duration
	signal     string
	noProbe    bool
	// reload, when set, replaces the engine at reloadAt by one built
	// with reload(config), which adopts the running one's state.
	reloadAt time.Duration
	reload   func(engine.Config) engine.Config
	// off switches rules of the law off (engine.Config.RulesOff).
	off []string
}

func gateRuns() []gateRun {
	var runs []gateRun
	add := func(r gateRun) {
		if r.duration == 0 {
			r.duration = 120 * time.Second
		}
		if r.threshold == 0 {
			r.threshold = 15
		}
		if r.controller == "" {
			r.controller = "pid"
		}
		runs = append(runs, r)
	}
	for _, seed := range []int64{1, 2, 3} {
		add(gateRun{name: "thesis", scenario: ThesisScenario, seed: seed})
	}
	add(gateRun{name: "thesis-diskstats", scenario: ThesisScenario, seed: 1, noProbe: true})
	add(gateRun{name: "thesis-ctl-thesis", scenario: ThesisScenario, controller: "thesis", seed: 1})
	add(gateRun{name: "thesis-ctl-none", scenario: ThesisScenario, controller: "none", seed: 1})
	for _, th := range []float64{10, 15, 20} {
		for _, seed := range []int64{1, 2} {
			add(gateRun{name: fmt.Sprintf("lab-%g", th), scenario: LabScenario, threshold: th, seed: seed})
		}
	}
	for _, seed := range []int64{1, 2} {
		add(gateRun{name: "slow-reader", scenario: slowReaderScenario, seed: seed})
	}
	add(gateRun{name: "slow-reader-diskstats", scenario: slowReaderScenario, seed: 3, noProbe: true})
	add(gateRun{name: "lab-diskstats", scenario: LabScenario, seed: 3, noProbe: true})
	for _, seed := range []int64{1, 2} {
		add(gateRun{name: "surge24", scenario: Surge24Scenario, seed: seed})
		add(gateRun{name: "randw", scenario: RandWScenario, seed: seed})
	}
	add(gateRun{name: "randw-10", scenario: RandWScenario, threshold: 10, seed: 3})
	add(gateRun{name: "randw-ctl-thesis", scenario: RandWScenario, controller: "thesis", seed: 1})
	add(gateRun{name: "surge24-diskstats", scenario: Surge24Scenario, seed: 1, noProbe: true})
	add(gateRun{name: "ssd-p95", scenario: SSDScenario, threshold: 1, signal: engine.SignalP95, seed: 1})
	add(gateRun{name: "ssd-mean", scenario: SSDScenario, threshold: 0.5, seed: 2})
	// Reloads (engine.Adopt) in the middle of the writers' bursts.
	reload := func(name string, sc func() Scenario, ctl string, f func(engine.Config) engine.Config) {
		add(gateRun{name: "reload-" + name, scenario: sc, controller: ctl, seed: 1,
			reloadAt: 47 * time.Second, reload: f})
	}
	reload("same", LabScenario, "pid", func(c engine.Config) engine.Config { return c })
	reload("threshold", LabScenario, "pid", func(c engine.Config) engine.Config { c.ThresholdMs = 11; return c })
	reload("headroom", LabScenario, "pid", func(c engine.Config) engine.Config { c.Headroom = 0.25; return c })
	reload("gains", Surge24Scenario, "pid", func(c engine.Config) engine.Config { c.Control.Kp = 0.8; return c })
	reload("alpha", RandWScenario, "pid", func(c engine.Config) engine.Config { c.Alpha = 0.5; return c })
	reload("limit", Surge24Scenario, "pid", func(c engine.Config) engine.Config { c.UMaxLimitMs = 30; return c })
	reload("to-thesis", LabScenario, "pid", func(c engine.Config) engine.Config { c.Controller = "thesis"; return c })
	reload("to-pid", LabScenario, "thesis", func(c engine.Config) engine.Config { c.Controller = "pid"; return c })
	reload("thesis-threshold", LabScenario, "thesis", func(c engine.Config) engine.Config { c.ThresholdMs = 12; return c })
	return runs
}

// slowReaderScenario is the thesis's with a reader of four reads a
// second: most ticks complete none, which the starvation rule holds.
func slowReaderScenario() Scenario {
	sc := ThesisScenario()
	sc.Name = "slow-reader"
	sc.ReaderBps = 32 << 10
	return sc
}

// recordTick writes a tick's whole decision to out: every resource's,
// and which consumers are throttleable.
func recordTick(out *bytes.Buffer, now time.Time, d engine.Decision) {
	fmt.Fprintf(out, "%s", now.Sub(epoch))
	for _, r := range d.Resources {
		writeResourceDecision(out, r)
	}
	for _, c := range d.Consumers {
		fmt.Fprintf(out, " %s:%t", c.Addr, c.Throttleable)
	}
	out.WriteByte('\n')
}

// writeResourceDecision writes every field of r, floats exactly.
func writeResourceDecision(w *bytes.Buffer, r engine.ResourceDecision) {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	fmt.Fprintf(w, " %s sig=%s raw=%s thr=%s tgt=%s ctl=%s delay=%s umax=%s lim=%s sat=%t held=%t armed=%t pend=%s reads=%d %s/%s mean=%s p95=%s p99=%s dir=%v miss=%d m=%v ret=%v",
		r.Name, f(r.SignalMs), f(r.RawMs), f(r.ThresholdMs), f(r.TargetMs), f(r.ControlMs), f(r.DelayMs),
		f(r.UMaxMs), f(r.UMaxLimitMs), r.Saturated, r.Held, r.Armed, f(r.PendingMs), r.Reads,
		r.Signal, r.Source, f(r.MeanMs), f(r.P95Ms), f(r.P99Ms), r.Direction, r.MissingDevices,
		r.Members, r.Returning)
}

// gateOutput runs every gate run and returns their ticks as text.
func gateOutput(t *testing.T) []byte { return gateRunsOutput(t, gateRuns()) }

// gateRunsOutput runs runs and returns their ticks as text.
func gateRunsOutput(t *testing.T, runs []gateRun) []byte {
	t.Helper()
	var all bytes.Buffer
	for _, run := range runs {
		cfg := DefaultConfig()
		cfg.Scenario = run.scenario()
		cfg.Controller = run.controller
		cfg.ThresholdMs = run.threshold
		cfg.Seed = run.seed
		cfg.Duration = run.duration
		cfg.Signal = run.signal
		cfg.NoProbe = run.noProbe
		cfg.RulesOff = run.off
		st, err := newReloadStepper(cfg, run.reloadAt, run.reload)
		if err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		fmt.Fprintf(&all, "run %s seed=%d controller=%s threshold=%g signal=%q probe=%t %v\n",
			run.name, run.seed, run.controller, run.threshold, run.signal, !run.noProbe, run.duration)
		st.onReload = func() { fmt.Fprintf(&all, "reload %s\n", run.name) }
		st.onStep = func(now time.Time, d engine.Decision) { recordTick(&all, now, d) }
		if _, err := RunWith(cfg, st); err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		if st.err != nil {
			t.Fatalf("%s: reload: %v", run.name, st.err)
		}
	}
	return all.Bytes()
}

// gateDigest condenses the gate's output to a digest per run and per
// gateWindow of ticks: the full text is about 15 MB, and the digest of
// the window that changed is what a failing gate needs to point at.
func gateDigest(out []byte) []string {
	var digest []string
	var win []byte
	n, from := 0, 0
	flush := func() {
		if len(win) > 0 {
			digest = append(digest, fmt.Sprintf("  ticks %4d-%4d %x", from, n-1, sha256.Sum256(win)))
		}
		win, from = win[:0], n
	}
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		switch {
		case len(line) == 0:
		case bytes.HasPrefix(line, []byte("run ")):
			flush()
			n, from = 0, 0
			digest = append(digest, string(bytes.TrimSuffix(line, []byte("\n"))))
		default:
			win = append(win, line...)
			if bytes.HasPrefix(line, []byte("reload ")) {
				continue
			}
			if n++; n%gateWindow == 0 {
				flush()
			}
		}
	}
	flush()
	return digest
}

// gateWindow is the ticks per digest: 10 s.
const gateWindow = 100

// TestGateLawUnchanged is the gate (see above).
func TestGateLawUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("the gate runs about an hour of virtual time")
	}
	out := gateOutput(t)
	if dump := os.Getenv("SANQOS_GATE_DUMP"); dump != "" {
		if err := os.WriteFile(dump, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := gateDigest(out)
	if *updateGate {
		if err := os.WriteFile(gateFile, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(gateFile)
	if err != nil {
		t.Fatalf("%v (generate it with go test ./internal/sim -run Gate -update)", err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	run := ""
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if strings.HasPrefix(w, "run ") {
			run = w
		}
		if g != w {
			t.Fatalf("the law's output changed in %s:\n got: %s\nwant: %s\n(SANQOS_GATE_DUMP=FILE writes every tick; compare with the previous commit's)", run, g, w)
		}
	}
}

// TestRulesSwitchOff: each rule the ablation switches off by name
// changes what the law decides in a run that exercises it, so an
// ablation of it measures the rule and not a switch wired to nothing.
func TestRulesSwitchOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator twice per rule")
	}
	byName := map[string]gateRun{}
	for _, r := range gateRuns() {
		if _, dup := byName[r.name]; !dup {
			byName[r.name] = r
		}
	}
	// Pauses longer than control.ArmHold, for the floor's release.
	byName["long-lull"] = gateRun{name: "long-lull", controller: "pid", threshold: 15, seed: 1, duration: longLullDuration,
		scenario: LongLullScenario}
	// A target whose reads the delay cannot speed up, for the gain rule
	// (TestFutileDelayIsReleased).
	byName["host-bound"] = gateRun{name: "host-bound", controller: "pid", threshold: 0.5, seed: 1, duration: 120 * time.Second,
		scenario: func() Scenario { return hostBound("ssd", 2) }}
	// A volume behind an IOPS and throughput cap, for the relapse guard.
	byName["cloud-seq1m"] = gateRun{name: "cloud-seq1m", controller: "pid", threshold: 3, seed: 1, duration: time.Minute,
		scenario: func() Scenario {
			sc, err := MatrixOptions{}.scenario(Cell{Disk: "cloud-3000", Writers: matrixWriters[4], ThresholdMs: 3}, 0)
			if err != nil {
				t.Fatal(err)
			}
			return sc
		}}
	// The run that exercises each rule.
	exercise := map[string]string{
		"rebase": "lab-15", "ceiling": "surge24",
		"far-raise": "surge24", "retarget": "reload-threshold",
		"idle-hold": "slow-reader", "armed": "lab-15", "err-cap": "ssd-mean",
		"floor": "long-lull", "rest": "lab-15", "first-climb": "lab-10",
		"gain": "host-bound", "relapse": "cloud-seq1m", "recall": "long-lull",
	}
	for _, rule := range control.RuleNames() {
		if _, ok := exercise[rule]; !ok {
			t.Errorf("rule %s has no run that exercises it", rule)
		}
	}
	for rule, name := range exercise {
		run, ok := byName[name]
		if !ok {
			t.Fatalf("no gate run %s", name)
		}
		full := gateRunsOutput(t, []gateRun{run})
		run.off = []string{rule}
		without := gateRunsOutput(t, []gateRun{run})
		if bytes.Equal(full[bytes.IndexByte(full, '\n'):], without[bytes.IndexByte(without, '\n'):]) {
			t.Errorf("switching %s off changed nothing in %s", rule, name)
		}
	}
	if err := engineConfigRejects([]string{"no-such-rule"}); err == nil {
		t.Error("an unknown rule name was accepted")
	}
}

func engineConfigRejects(off []string) error {
	ec := DefaultConfig().EngineConfig()
	ec.RulesOff = off
	_, err := engine.New(ec, ThesisScenario().Topology())
	return err
}

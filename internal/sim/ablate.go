package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
)

// The ablation (issue 33, "each rule earns its keep"): the law with one
// rule off, against the full law, on the lab suite's scenarios, cells of
// the matrix and the cases a rule exists for, over several seeds. A rule
// whose removal changes nothing beyond the run-to-run spread has no case
// here; docs/ablation.md holds the table and the decisions.

// AblationCase is one workload of the ablation.
type AblationCase struct {
	Name        string
	ThresholdMs float64
	Duration    time.Duration
	Scenario    Scenario
	// NoProbe: the reads from /proc/diskstats alone, as where eBPF
	// cannot run.
	NoProbe bool
	// Reload, when set, rebuilds the engine at ReloadAt with
	// Reload(config), adopting the running one's state (a daemon's
	// reload).
	Reload   func(engine.Config) engine.Config
	ReloadAt time.Duration
}

// AblationVariant is one law: the full law or one with rules off.
type AblationVariant struct {
	Name string
	Off  []string
}

// Metrics are what the ablation compares, over the seconds the writers
// were on: the reader's p95 over the threshold, the share of seconds
// over 1.2 × T (%), the mean settle time of a burst (s; see settleS)
// and the writers' rate (MB/s).
type Metrics struct {
	P95OverT, OverPct, SettleS, WriteMBs float64
}

// AblationCases are the ablation's workloads: the lab suite's simulated
// scenarios at the lab's --short length (fig5.11 as the lab runs it at
// 10, 15 and 20 ms, surge24, randw, ssd), five matrix cells (a deep
// queue, a steady random writer, raid6-hdd, and on cloud-3000 a steady
// random writer and sequential 1 MiB writers, whose latency is a cliff)
// at the matrix's 60 s, and the cases rules exist for that the suite
// does not exercise:
// writers joining one host after another (onsets), pauses longer than
// control.ArmHold (the release to rest), a reader of four
// reads a second (the holds), the reads from /proc/diskstats alone (the
// daemon without eBPF), and reloads of the threshold and the gains
// mid-burst.
func AblationCases() ([]AblationCase, error) {
	const short, cell = 120 * time.Second, 60 * time.Second
	cs := []AblationCase{
		{Name: "lab-10", ThresholdMs: 10, Duration: short, Scenario: LabScenario()},
		{Name: "lab-15", ThresholdMs: 15, Duration: short, Scenario: LabScenario()},
		{Name: "lab-20", ThresholdMs: 20, Duration: short, Scenario: LabScenario()},
		{Name: "surge24", ThresholdMs: 15, Duration: short, Scenario: Surge24Scenario()},
		{Name: "randw", ThresholdMs: 15, Duration: short, Scenario: RandWScenario()},
		{Name: "ssd", ThresholdMs: 0.5, Duration: short, Scenario: SSDScenario()},
	}
	for _, c := range []struct {
		name string
		cell Cell
	}{
		{"deep-qd32", Cell{Disk: "thesis-2010", Writers: Writers{Random: true, Bytes: 16 << 10, Threads: 3, IODepth: 32}, ThresholdMs: 15}},
		{"steady-rand4k", Cell{Disk: "thesis-2010", Writers: Writers{Random: true, Bytes: 4 << 10, Threads: 12, IODepth: 1}, ThresholdMs: 15}},
		{"raid6-seq64k", Cell{Disk: "raid6-hdd", Writers: Writers{Bytes: 64 << 10, Threads: 12, IODepth: 1, Bursty: true}, ThresholdMs: 30}},
		{"cloud-rand4k", Cell{Disk: "cloud-3000", Writers: Writers{Random: true, Bytes: 4 << 10, Threads: 12, IODepth: 1}, ThresholdMs: 3}},
		{"cloud-seq1m", Cell{Disk: "cloud-3000", Writers: Writers{Bytes: 1 << 20, Threads: 3, IODepth: 4}, ThresholdMs: 3}},
	} {
		sc, err := ablationCellScenario(c.cell)
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.name, err)
		}
		cs = append(cs, AblationCase{Name: c.name, ThresholdMs: c.cell.ThresholdMs, Duration: cell, Scenario: sc})
	}
	// Writers that join one host after another, each 20 s after the
	// last, and stay: the onsets the suite's simultaneous starts lack.
	join, err := MatrixScenario(Cell{Disk: "thesis-2010", Writers: Writers{Random: true, Bytes: 8 << 10, Threads: 12, IODepth: 1}, ThresholdMs: 15}, 0)
	if err != nil {
		return nil, err
	}
	join.Name, join.HostStagger = "join", 20*time.Second
	cs = append(cs, AblationCase{Name: "join-rand8k", ThresholdMs: 15, Duration: short, Scenario: join})
	// Pauses of 45 s, nine times the lab's: the delay is held through
	// them (within control.ArmHold) for the next burst's onset.
	lull := LabScenario()
	lull.Name, lull.Pause = "lull", 45*time.Second
	cs = append(cs, AblationCase{Name: "lull", ThresholdMs: 15, Duration: 180 * time.Second, Scenario: lull})
	// Pauses longer than control.ArmHold: the delay winds down to rest
	// between bursts, and each burst starts from the floor.
	cs = append(cs, AblationCase{Name: "long-lull", ThresholdMs: 15, Duration: longLullDuration, Scenario: LongLullScenario()})
	slow := ThesisScenario()
	slow.Name, slow.ReaderBps = "slow-reader", 32<<10
	cs = append(cs,
		AblationCase{Name: "slow-reader", ThresholdMs: 15, Duration: short, Scenario: slow},
		AblationCase{Name: "slow-reader-diskstats", ThresholdMs: 15, Duration: short, Scenario: slow, NoProbe: true},
		AblationCase{Name: "lab-15-diskstats", ThresholdMs: 15, Duration: short, Scenario: LabScenario(), NoProbe: true},
		AblationCase{Name: "reload-threshold", ThresholdMs: 15, Duration: short, Scenario: LabScenario(),
			ReloadAt: 47 * time.Second, Reload: func(c engine.Config) engine.Config { c.ThresholdMs = 11; return c }},
		AblationCase{Name: "reload-gains", ThresholdMs: 15, Duration: short, Scenario: Surge24Scenario(),
			ReloadAt: 47 * time.Second, Reload: func(c engine.Config) engine.Config { c.Control.Kp = 0.8; return c }},
	)
	return cs, nil
}

// ablationCellScenario is a cell's scenario, a bursty cell's bursts
// sized as RunCell sizes them (from seed 1's uncontrolled steady rate,
// so every seed runs the same workload).
func ablationCellScenario(c Cell) (Scenario, error) {
	var burst int64
	if c.Writers.Bursty {
		steady, err := MatrixScenario(c, 0)
		if err != nil {
			return Scenario{}, err
		}
		cfg := DefaultConfig()
		cfg.Scenario, cfg.Controller, cfg.ThresholdMs, cfg.Duration = steady, "none", c.ThresholdMs, 60*time.Second
		r, err := Run(cfg)
		if err != nil {
			return Scenario{}, err
		}
		const burstSeconds = 10 // RunCell's default
		burst = int64(r.Summary.WriteMBs * 1e6 * burstSeconds / float64(c.Writers.Threads))
	}
	return MatrixScenario(c, burst)
}

// RunAblation runs one case under one variant with one seed.
func RunAblation(c AblationCase, v AblationVariant, seed int64) (Metrics, error) {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.ThresholdMs, cfg.Duration, cfg.Seed = c.Scenario, c.ThresholdMs, c.Duration, seed
	cfg.RulesOff, cfg.NoProbe = v.Off, c.NoProbe
	var st Stepper
	var err error
	if c.Reload == nil {
		st, err = newEngineStepper(cfg)
	} else {
		st, err = newReloadStepper(cfg, c.ReloadAt, c.Reload)
	}
	if err != nil {
		return Metrics{}, err
	}
	res, err := RunWith(cfg, st)
	if err != nil {
		return Metrics{}, err
	}
	if rs, ok := st.(*reloadStepper); ok && rs.err != nil {
		return Metrics{}, fmt.Errorf("reload: %w", rs.err)
	}
	return Metrics{
		P95OverT: res.Summary.ReadLatencyMs.P95 / c.ThresholdMs,
		OverPct:  res.Summary.OverThresholdPct,
		SettleS:  settleS(res.Seconds, 1.2*c.ThresholdMs),
		WriteMBs: res.Summary.WriteMBs,
	}, nil
}

// settleS is the mean over the writers' bursts (burstSpans) of the time
// from a burst's onset until the reader's wait was under limitMs to the
// burst's end, as the lab's burst analysis measures it (a second without
// a read counts as over; a burst still over at its end counts its
// length).
func settleS(secs []Second, limitMs float64) float64 {
	spans := burstSpans(secs)
	if len(spans) == 0 {
		return 0
	}
	var sum float64
	for _, b := range spans {
		settle := 0.0
		for k := b.start; k <= b.end; k++ {
			if overSecond(secs[k], limitMs) {
				settle = float64(k - b.start + 1)
			}
		}
		sum += settle
	}
	return sum / float64(len(spans))
}

// span is a burst of the writers: the seconds from start to end.
type span struct{ start, end int }

// burstSpans are the writers' bursts as the lab's burst analysis finds
// them: spans of writing, two less than 2 s apart being one.
func burstSpans(secs []Second) []span {
	const minOff = 2
	var out []span
	for i := 0; i < len(secs); i++ {
		if !secs[i].WritersOn {
			continue
		}
		b := span{i, i}
		for j := i; j < len(secs) && j-b.end <= minOff; j++ {
			if secs[j].WritersOn {
				b.end = j
			}
		}
		out = append(out, b)
		i = b.end
	}
	return out
}

// overSecond says whether the reader's wait in s was over limitMs (a
// second without a read counts as over).
func overSecond(s Second, limitMs float64) bool {
	return math.IsNaN(s.ReadMs) || s.ReadMs > limitMs
}

// reloadStepper drives the production engine as engineStepper does, and
// at a set time (reload set) replaces it by one built for a new
// configuration that adopts its state, as the daemon's reload does.
type reloadStepper struct {
	engineStepper
	cfg    engine.Config
	topo   Scenario
	at     time.Duration
	reload func(engine.Config) engine.Config
	err    error
	// onReload and onStep, when set, are told of the reload and of
	// each tick's whole decision (the gate records them).
	onReload func()
	onStep   func(now time.Time, d engine.Decision)
}

func newReloadStepper(cfg Config, at time.Duration, reload func(engine.Config) engine.Config) (*reloadStepper, error) {
	st, err := newEngineStepper(cfg)
	if err != nil {
		return nil, err
	}
	es := st.(engineStepper)
	ec := cfg.EngineConfig()
	ec.InFlight = es.plant
	if es.probe {
		ec.Fine = es.plant
	}
	return &reloadStepper{engineStepper: es, cfg: ec, topo: cfg.Scenario, at: at, reload: reload}, nil
}

func (s *reloadStepper) Step(now time.Time, snap []diskstats.Stat) Decision {
	if s.reload != nil && now.Sub(epoch) == s.at {
		cfg := s.reload(s.cfg)
		ne, err := engine.New(cfg, s.topo.Topology())
		if err != nil {
			s.err = err
		} else {
			ne.Adopt(s.e)
			s.e, s.cfg = ne, cfg
		}
		if s.onReload != nil {
			s.onReload()
		}
	}
	d := s.engineStepper.decide(now, snap)
	if s.onStep != nil {
		s.onStep(now, d)
	}
	return simDecision(d)
}

// AblationVariants are the full law and the law with each switchable
// rule off (control.RuleNames).
func AblationVariants() []AblationVariant {
	vs := []AblationVariant{{Name: "full law"}}
	for _, r := range control.RuleNames() {
		vs = append(vs, AblationVariant{Name: "−" + r, Off: []string{r}})
	}
	return vs
}

// longLullDuration holds three bursts of LongLullScenario.
const longLullDuration = 3*control.ArmHold + 60*time.Second

// LongLullScenario is the lab's load with pauses longer than
// control.ArmHold, where the loop stops holding the delay for the
// writers' return.
func LongLullScenario() Scenario {
	sc := LabScenario()
	sc.Name, sc.Pause = "long-lull", control.ArmHold+15*time.Second
	return sc
}

// Package sim is a deterministic, event-driven model of the thesis
// experiment (Fig. 5.9–5.13): twelve sequential sync writers on three
// consumers and one rate-limited random reader share a striped disk array,
// and sanqos's real control path keeps the reader's latency under a
// threshold by delaying the writers' packets.
//
// The plant (array, initiators, throttle) runs in virtual time. Every tick
// it renders the consumer devices' counters as /proc/diskstats text, which
// goes through the production parser (internal/observe/diskstats) into the
// production engine (internal/decide/engine: signal, policy, controller). The
// delay the engine decides is applied to the I/O of the consumers in the
// throttled set, in proportion to how many delayed packets each I/O waits
// for (Scenario.WriteDelayFactor). Same seed, same result, bit for bit;
// 300 s of virtual time take well under a second.
package sim

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
)

// Config is one simulation run.
type Config struct {
	Scenario    Scenario
	Controller  string // pid, thesis, none
	ThresholdMs float64
	Duration    time.Duration
	Seed        int64
	Tick        time.Duration
	// Gains, when non-zero, override the pid controller's defaults.
	Gains Gains
	// Signal is what the controller follows (engine.SignalMean, …; ""
	// is the mean).
	Signal string
	// NoProbe measures the reads from the simulated /proc/diskstats only
	// (whole milliseconds), as the daemon does where eBPF cannot run; by
	// default the engine also reads the plant's block-layer probe.
	NoProbe bool
	// FixedDelayMs, with Controller "none", delays every writer's packets
	// by this much for the whole run, as the lab's frontier experiment
	// does with manual throttles: the plant's delay→throughput curve,
	// without a controller in the loop.
	FixedDelayMs float64
	// RulesOff switches rules of the law off by name (engine.Config's),
	// for ablations.
	RulesOff []string
}

// Gains are the PID tuning the run uses: control's one gains type.
type Gains = control.Gains

// DefaultConfig is the thesis scenario under pid at 15 ms for 300 s.
func DefaultConfig() Config {
	return Config{
		Scenario:    ThesisScenario(),
		Controller:  "pid",
		ThresholdMs: 15,
		Duration:    300 * time.Second,
		Seed:        1,
		Tick:        100 * time.Millisecond,
		Gains:       SimGains(),
	}
}

// Stepper is the control path the plant drives once per tick: it gets the
// devices' diskstats and returns the delay for the throttled consumers.
// engineStepper is the production one.
type Stepper interface {
	Step(now time.Time, snap []diskstats.Stat) Decision
}

// Decision is what a Stepper decided for the (single) resource.
type Decision struct {
	SignalMs, RawMs, DelayMs float64
	Members                  []netip.Addr
	// Armed are held at ArmedMs from their first write on, as the data
	// path's arming does (engine "Returning writers").
	Armed   []netip.Addr
	ArmedMs float64
	// Own are consumers held at their own delay (engine "Tenants");
	// ThresholdBy names the reader whose promise is the threshold,
	// Conflict the reservation the promise cannot afford ("" none).
	Own                   []engine.Hold
	ThresholdMs           float64
	ThresholdBy, Conflict string
}

// Summary is the result of a run in the shape `sanqos sim --json` prints.
type Summary struct {
	Scenario         string  `json:"scenario"`
	Controller       string  `json:"controller"`
	ThresholdMs      float64 `json:"threshold_ms"`
	Seed             int64   `json:"seed"`
	DurationS        float64 `json:"duration_s"`
	Gains            *Gains  `json:"gains,omitempty"`
	ReadLatencyMs    Dist    `json:"read_latency_ms"`
	OverThresholdPct float64 `json:"over_threshold_pct"`
	WriteMBs         float64 `json:"write_mb_s"`
	ThrottleMs       MeanMax `json:"throttle_ms"`
	ReaderKBs        float64 `json:"reader_kb_s"`
	ReaderIdleMs     float64 `json:"reader_idle_latency_ms"`
	ActiveSamples    int     `json:"active_samples"`
}

// Dist summarises the 1-second samples of the reader's mean wait.
type Dist struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// MeanMax summarises the throttle delay over the active seconds.
type MeanMax struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// Second is one 1-second sample.
type Second struct {
	T            float64 // seconds since start, end of the sample
	ReadMs       float64 // reader's mean wait; NaN when no read completed
	Reads        int
	WriteMBs     float64
	ReaderKBs    float64
	DelayMs      float64 // mean over the second's ticks
	WritersOn    bool
	WriteAwaitMs float64
	// ReaderMs is each reader's mean wait (NaN: no read completed), in
	// the order of the scenario's readers; DevWriteMBs each device's
	// writes (MB, acknowledged at the target), in device order.
	ReaderMs    []float64
	DevWriteMBs []float64
}

// Tick is one controller step.
type Tick struct {
	T                        float64
	SignalMs, RawMs, DelayMs float64
	Members                  int
	// ThresholdMs, ThresholdBy and Conflict are the decision's (see
	// Decision).
	ThresholdMs           float64
	ThresholdBy, Conflict string
}

// Result is a finished run.
type Result struct {
	Config  Config
	Summary Summary
	Seconds []Second
	Ticks   []Tick
	// Leaves counts, per address, the ticks at which it left the
	// throttleable set while it was in it the tick before: a steady
	// writer that flaps in and out shows here (issue 33).
	Leaves map[netip.Addr]int
}

// epoch is the virtual start time; fixed so runs are reproducible.
var epoch = time.Date(2010, 5, 1, 12, 0, 0, 0, time.UTC)

// Run runs the simulation with the production engine.
func Run(cfg Config) (*Result, error) {
	if cfg.FixedDelayMs > 0 {
		if cfg.Controller != "none" {
			return nil, fmt.Errorf("a fixed delay of %g ms replaces the controller: use controller none, not %q", cfg.FixedDelayMs, cfg.Controller)
		}
		return RunWith(cfg, fixedStepper{cfg.Scenario.writers(), cfg.FixedDelayMs})
	}
	st, err := newEngineStepper(cfg)
	if err != nil {
		return nil, err
	}
	return RunWith(cfg, st)
}

// RunWith runs the simulation with the given control path.
func RunWith(cfg Config, st Stepper) (*Result, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("duration %v: want a positive virtual time, e.g. 300s", cfg.Duration)
	}
	p, err := newPlant(cfg.Scenario, epoch, cfg.Seed)
	if err != nil {
		return nil, err
	}
	if t := cfg.Scenario.Tail; t > 0 {
		p.writersEnd = epoch.Add(cfg.Duration - t)
	}
	if a, ok := st.(interface{ attach(*plant) }); ok {
		a.attach(p)
	}
	res := &Result{Config: cfg, Leaves: map[netip.Addr]int{}}
	var was []netip.Addr // the set of the previous tick
	end := epoch.Add(cfg.Duration)
	nextTick := epoch.Add(cfg.Tick)
	nextSecond := epoch.Add(time.Second)
	var (
		sb       strings.Builder
		parser   diskstats.Parser
		snap     []diskstats.Stat
		delaySum float64
		delayN   int
	)
	for {
		// Ticks and second boundaries are processed before plant events at
		// the same instant: the controller sees what completed before it.
		at := nextTick
		if nextSecond.Before(at) {
			at = nextSecond
		}
		if p.q.Len() > 0 && p.q[0].at.Before(at) {
			p.handle(p.q.pop())
			continue
		}
		if at.After(end) {
			break
		}
		if at.Equal(nextTick) {
			var d Decision
			var err error
			if snap, d, err = p.stepControl(at, st, &sb, &parser, snap); err != nil {
				return nil, err
			}
			res.Ticks = append(res.Ticks, Tick{
				T: at.Sub(epoch).Seconds(), SignalMs: d.SignalMs, RawMs: d.RawMs,
				DelayMs: d.DelayMs, Members: len(d.Members),
				ThresholdMs: d.ThresholdMs, ThresholdBy: d.ThresholdBy, Conflict: d.Conflict,
			})
			was = countLeaves(res.Leaves, was, d.Members)
			delaySum += d.DelayMs
			delayN++
			nextTick = nextTick.Add(cfg.Tick)
		}
		if at.Equal(nextSecond) {
			res.Seconds = append(res.Seconds, p.second(at, delaySum, delayN))
			delaySum, delayN = 0, 0
			nextSecond = nextSecond.Add(time.Second)
		}
	}
	res.Summary = summarize(cfg, res.Seconds)
	return res, nil
}

// countLeaves adds to leaves each address of was that is not in now,
// and returns was refilled with now.
func countLeaves(leaves map[netip.Addr]int, was, now []netip.Addr) []netip.Addr {
	for _, a := range was {
		if !slices.Contains(now, a) {
			leaves[a]++
		}
	}
	return append(was[:0], now...)
}

// stepControl renders the plant's counters at at as /proc/diskstats
// text, passes them through the production parser to the control path
// and applies its decision to the plant; snap is reused.
func (p *plant) stepControl(at time.Time, st Stepper, sb *strings.Builder, parser *diskstats.Parser, snap []diskstats.Stat) ([]diskstats.Stat, Decision, error) {
	p.snapshot(at, sb)
	snap, bad := parser.Parse(snap[:0], []byte(sb.String()))
	if len(bad) > 0 {
		return snap, Decision{}, fmt.Errorf("parsing the simulated diskstats: %v", bad[0])
	}
	d := st.Step(at, snap)
	p.delayMs = d.DelayMs
	clear(p.throttled)
	for _, a := range d.Members {
		p.throttled[a] = true
	}
	clear(p.own)
	for _, h := range d.Own {
		p.own[h.Addr] = h.DelayMs
	}
	p.armedMs = d.ArmedMs
	clear(p.armed)
	for _, a := range d.Armed {
		p.armed[a] = true
	}
	for a := range p.joined {
		if !p.armed[a] {
			delete(p.joined, a)
		}
	}
	return snap, d, nil
}

// second closes the 1-second sample ending at at (delaySum over delayN
// ticks) and starts the next.
func (p *plant) second(at time.Time, delaySum float64, delayN int) Second {
	o := &p.obs
	s := Second{
		T: at.Sub(epoch).Seconds(), ReadMs: math.NaN(), Reads: o.readCount,
		WriteMBs:  float64(o.writeBytes) / 1e6,
		ReaderKBs: float64(o.readBytes) / 1024,
		WritersOn: o.activeSecond, WriteAwaitMs: math.NaN(),
	}
	if o.readCount > 0 {
		s.ReadMs = o.readLatSum / float64(o.readCount)
	}
	if o.writeCount > 0 {
		s.WriteAwaitMs = o.writeLatSum / float64(o.writeCount)
	}
	if delayN > 0 {
		s.DelayMs = delaySum / float64(delayN)
	}
	if len(p.readers) > 1 {
		s.ReaderMs = make([]float64, len(p.readers))
		for k := range s.ReaderMs {
			s.ReaderMs[k] = math.NaN()
			if k < len(o.perReader) && o.perReader[k].n > 0 {
				s.ReaderMs[k] = o.perReader[k].sum / float64(o.perReader[k].n)
			}
		}
		s.DevWriteMBs = make([]float64, len(p.sc.Devices))
		for i := range s.DevWriteMBs {
			if i < len(o.devWrite) {
				s.DevWriteMBs[i] = float64(o.devWrite[i]) / 1e6
			}
		}
	}
	*o = observer{activeSecond: p.active}
	return s
}

// summarize computes the figures of merit over the seconds in which the
// writers were on (the reader alone is not what is being controlled).
func summarize(cfg Config, secs []Second) Summary {
	s := Summary{
		Scenario: cfg.Scenario.Name, Controller: cfg.Controller,
		ThresholdMs: cfg.ThresholdMs, Seed: cfg.Seed,
		DurationS: cfg.Duration.Seconds(),
	}
	if cfg.Controller == "pid" {
		g := cfg.Gains
		s.Gains = &g
	}
	var lat []float64
	var writeSum, delaySum, readKB float64
	var active, over, idleN int
	var idleSum float64
	for _, x := range secs {
		readKB += x.ReaderKBs
		if !x.WritersOn {
			if !math.IsNaN(x.ReadMs) && x.T <= cfg.Scenario.Start.Seconds() {
				idleSum += x.ReadMs
				idleN++
			}
			continue
		}
		active++
		writeSum += x.WriteMBs
		delaySum += x.DelayMs
		s.ThrottleMs.Max = math.Max(s.ThrottleMs.Max, x.DelayMs)
		if math.IsNaN(x.ReadMs) {
			continue
		}
		lat = append(lat, x.ReadMs)
		if x.ReadMs > 1.2*cfg.ThresholdMs {
			over++
		}
	}
	s.ActiveSamples = active
	if len(secs) > 0 {
		s.ReaderKBs = round(readKB/float64(len(secs)), 1)
	}
	if idleN > 0 {
		s.ReaderIdleMs = round(idleSum/float64(idleN), 2)
	}
	if active > 0 {
		s.WriteMBs = round(writeSum/float64(active), 2)
		s.ThrottleMs.Mean = round(delaySum/float64(active), 2)
	}
	s.ThrottleMs.Max = round(s.ThrottleMs.Max, 2)
	if len(lat) > 0 {
		s.OverThresholdPct = round(100*float64(over)/float64(len(lat)), 1)
		sort.Float64s(lat)
		var sum float64
		for _, v := range lat {
			sum += v
		}
		s.ReadLatencyMs = Dist{
			Mean: round(sum/float64(len(lat)), 2),
			P50:  round(quantile(lat, 0.50), 2),
			P95:  round(quantile(lat, 0.95), 2),
			P99:  round(quantile(lat, 0.99), 2),
			Max:  round(lat[len(lat)-1], 2),
		}
	}
	return s
}

// quantile of sorted values, linear interpolation between closest ranks.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 1 {
		return sorted[0]
	}
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	f := pos - float64(i)
	return sorted[i]*(1-f) + sorted[i+1]*f
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

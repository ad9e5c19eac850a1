// Package engine is the pure per-tick step of sanqos: a diskstats snapshot
// in, a decision out (each resource's signal and delay, and who is in its
// throttleable set). The daemon calls it every tick with /proc/diskstats;
// the simulator calls it with the snapshots of its disk model, so the
// simulator exercises exactly the production decision code.
//
// The engine does no I/O and reads no clock: the caller passes the time of
// the snapshot, and rates use the real time elapsed between snapshots, not
// the nominal tick, so a late tick does not look like a burst. Nor does it
// link the data path: it says per resource who is held, in which Direction
// and by how much (Decision.Throttles), and the daemon translates that to
// the throttle backend's state, so the engine and the simulator build and
// test on any OS.
//
// The control law is not here: each resource has a control.Loop, which
// runs every rule in one order (package control describes them). A Step
// reads every device first (the snapshot, the probe's tick, reads in
// flight), then per resource measures its signal, updates its
// throttleable set, steps its loop with what it measured and names its
// returning writers. The engine keeps the measurement, attribution,
// membership and bookkeeping; it never asks a controller what it can do.
package engine

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/policy"
	"github.com/sanqos/sanqos/internal/decide/smoothing"
	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/latency"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// ManualConfig names the consumers of the manual policy (see policy).
type ManualConfig = policy.ManualConfig

// Config is the engine's configuration.
type Config struct {
	// Tick is the nominal period of Step, 10 ms to 10 s; it is the
	// controller's T (Control.T is overwritten with it).
	Tick time.Duration
	// Alpha weighs the read-latency EWMA (thesis: 0.25).
	Alpha float64
	// WriteAlpha weighs each consumer's write-rate EWMA (thesis: 0.25).
	WriteAlpha float64
	// Controller is a name registered in package control: pid, thesis, none.
	Controller string
	// ThresholdMs is the default threshold (ms), the read latency the
	// user promises; topology.Resource.ThresholdMs overrides it per
	// resource.
	ThresholdMs float64
	// Control configures the controller; its TargetMs is set per
	// resource to the threshold × (1 − Headroom).
	Control control.Params
	// Headroom is the fraction of the threshold the controller aims below
	// it: its set point is threshold·(1−Headroom). A threshold is a promise
	// about every second, and a controller that holds the mean at the
	// threshold leaves half of the seconds above it; 0 aims at the
	// threshold itself, as the thesis did.
	Headroom float64
	// JoinKBs and LeaveKBs are the read-over-write policy's write-rate
	// thresholds (kB/s); LeaveKBs 0 means JoinKBs/2.
	JoinKBs, LeaveKBs float64
	// Policy is "read-over-write" or "manual".
	Policy string
	Manual ManualConfig
	// Direction is what the delay slows: Write (default) delays
	// the ACKs and R2Ts of the set's writes.
	Direction Direction
	// UMaxLimitMs is how far the delay ceiling may rise above
	// Control.UMaxMs when the writers need more delay than that (see
	// "4. The ceiling" in package control); 0, or a value ≤ Control.UMaxMs, keeps the
	// ceiling at Control.UMaxMs. At most 1 s (control.DelayBoundsMs).
	UMaxLimitMs float64
	// InFlight, when set, says how many reads a device has in flight. It
	// lets a tick in which no read completed tell "the reads are slower
	// than a tick" from "nobody reads" (see "1. Signal" in package control). Nil: such
	// a tick is idle, as in the thesis. It must answer from a sample
	// taken before Step (diskstats.InFlightSnapshot, sampled by the
	// daemon), as Fine does: the engine reads no device while it decides.
	InFlight InFlight
	// Fine, when set, gives each tick's reads of a device from the block
	// layer (internal/observe/blkprobe): latencies in microseconds with their
	// histogram, and the age of the oldest read in flight. Devices it
	// does not have are measured from /proc/diskstats.
	Fine FineReads
	// Signal is the statistic of a resource's reads the controller
	// follows, unless the resource names its own: SignalMean (the
	// thesis's r_await), SignalP95 or SignalP99. Percentiles need Fine;
	// without it a tick's signal is the mean and the decision says so.
	Signal string
	// RulesOff switches rules of the law off by name
	// (control.RuleNames), for ablations; nil runs the law whole.
	RulesOff []string
	// Tenants gives consumers their names and terms (shares,
	// reservations, caps, read promises); nil: everyone the defaults.
	// SetTenants replaces it at reload.
	Tenants *tenant.Book
}

// DefaultConfig is the configuration of the thesis's experiments with the
// pid controller.
func DefaultConfig() Config {
	return Config{
		Tick:        100 * time.Millisecond,
		Alpha:       smoothing.ThesisAlpha,
		WriteAlpha:  smoothing.ThesisAlpha,
		Controller:  "pid",
		ThresholdMs: control.DefaultParams().TargetMs,
		Control:     control.DefaultParams(),
		Headroom:    DefaultHeadroom,
		JoinKBs:     policy.DefaultJoinKBs,
		LeaveKBs:    policy.DefaultJoinKBs / 2,
		Policy:      policy.ReadOverWrite,
		Direction:   direction.Write,
		// UMaxLimitMs: see DefaultUMaxLimitMs.
		UMaxLimitMs: DefaultUMaxLimitMs,
	}
}

// device is the per-device memory: the last snapshot's counters and the
// interval values of the current Step.
type device struct {
	name    string
	cur     diskstats.Stat
	seenGen uint64 // Step in which cur was filled
	prev    diskstats.Stat
	prevAt  time.Time
	hasPrev bool
	// valid: rates below hold this Step's interval values.
	valid bool
	rates diskstats.Rates
	// elapsed is the interval of rates, in seconds.
	elapsed float64
	// sig: the device's reads are part of some resource's signal.
	sig bool
	// pendingSince is the first Step that saw reads in flight with none
	// completed since (zero: none); pendingMs the age that proves.
	pendingSince time.Time
	pending      bool
	pendingMs    float64
	// fine: the block-layer probe is trusted for this device: it has
	// counted reads on it, and never none while diskstats counted some.
	fine bool
	// probe is the probe's tick for this device, read in the observe
	// phase (probeOK false: not probed); probeStuck that its oldest read
	// would count as pending but the kernel counts fewer reads in flight
	// than the probe's probeInFlight.
	probe         latency.Ops
	oldest        time.Duration
	probeInFlight int
	probeOK       bool
	probeStuck    bool
}

type consumer struct {
	c         topology.Consumer
	dev       int // index into Engine.devs, -1 without a device
	st        policy.State
	lastWrite time.Time // the last Step that judged it writing (returning writers)
	// memberAt: the last Step it was in its set; returning, rejoinSince:
	// it is armed, and writing since then ("Returning writers").
	memberAt, rejoinSince time.Time
	returning             bool
	// heldMs is the delay the last Step put on its writes (demand.go).
	heldMs float64
	ten    tenantMemo
}

type resource struct {
	name      string
	threshold float64
	signal    string // SignalMean, SignalP95, SignalP99
	// hist is the tick's histogram of the resource's probed reads, kept
	// to save an allocation per tick.
	hist latency.Histogram
	// loop is the resource's control law (package control).
	loop *control.Loop
	// started: the resource has been measured at least once; from then on
	// a tick without measurements counts as a tick without reads.
	started   bool
	consumers []int // indices into Engine.cons
	devs      []int // distinct devices of all consumers
	sigDevs   []int // distinct devices whose reads are the signal
	ten       resTenants
}

// Engine holds the state of every resource between Steps. It is not safe
// for concurrent use.
type Engine struct {
	cfg    Config
	pol    policy.Policy
	devIdx map[string]int
	devs   []device
	cons   []consumer
	res    []resource
	gen    uint64
	// hintName/hintDev remember, per position in the previous snapshot,
	// the device name and its index in devs (-1: not in the topology).
	// Snapshots list devices in a stable order, so this saves a map
	// lookup per line on most ticks.
	hintName []string
	hintDev  []int
	// idleHold is the const idleHold; a test sets 0 to run the thesis's
	// rule beside the current one.
	idleHold time.Duration
	wire     wireState // per-client wire rates, see wire.go
}

// New validates cfg and topo and returns an engine at rest.
func New(cfg Config, topo topology.Topology) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Control.T = cfg.Tick
	pol, err := cfg.policy()
	if err != nil {
		return nil, err
	}
	if err := ValidateTopology(topo, cfg); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, pol: pol, idleHold: idleHold}
	e.SetTopology(topo)
	return e, nil
}

// Config returns the engine's configuration (with Control.T = Tick).
func (e *Engine) Config() Config { return e.cfg }

// Step takes the snapshot taken at now and returns the decision. The first
// Step (and the first Step that sees a device) only records counters: with
// no interval there is nothing to measure, so nothing is throttled.
func (e *Engine) Step(now time.Time, snap []diskstats.Stat) Decision {
	missing := e.readSnapshot(now, snap)
	dec := Decision{At: now, MissingDevices: missing,
		Resources: make([]ResourceDecision, len(e.res)),
		Consumers: make([]ConsumerRates, len(e.cons)),
	}
	// One backing array for every resource's members: one allocation.
	members := make([]netip.Addr, 0, len(e.cons))
	for ri := range e.res {
		dec.Resources[ri], members = e.stepResource(&e.res[ri], now, members, dec.Consumers)
	}
	return dec
}

// readSnapshot files snap's counters under the engine's devices and
// computes each device's interval rates; it returns how many topology
// devices the snapshot lacks. It is the observe phase of Step: the
// probe's tick and the reads in flight, sampled by the caller before
// Step, are taken here, before any resource's law runs.
func (e *Engine) readSnapshot(now time.Time, snap []diskstats.Stat) (missing int) {
	e.gen++
	if len(e.hintDev) != len(snap) {
		e.hintName = make([]string, len(snap))
		e.hintDev = make([]int, len(snap))
	}
	for i := range snap {
		name := snap[i].Device
		di := e.hintDev[i]
		if name == "" || e.hintName[i] != name {
			var ok bool
			if di, ok = e.devIdx[name]; !ok {
				di = -1
			}
			e.hintName[i], e.hintDev[i] = name, di
		}
		if di >= 0 {
			d := &e.devs[di]
			d.cur = snap[i]
			d.seenGen = e.gen
		}
	}
	for i := range e.devs {
		d := &e.devs[i]
		d.valid = false
		if d.seenGen != e.gen {
			missing++
			continue
		}
		if d.hasPrev {
			if !now.After(d.prevAt) {
				// No time passed (or the caller's clock stepped back): keep
				// the older snapshot so the growth is measured next Step.
				continue
			}
			d.rates = diskstats.Sub(&d.cur, &d.prev).Rates(now.Sub(d.prevAt))
			d.elapsed = now.Sub(d.prevAt).Seconds()
			d.valid = true
			e.updateFine(d)
			e.updatePending(d, now)
			e.checkOldest(d)
		}
		d.prev, d.prevAt, d.hasPrev = d.cur, now, true
	}

	return missing
}

// stepResource measures r, updates its throttleable set (appending the
// members to members and each consumer's rates to cons), steps its loop
// and names its returning writers.
func (e *Engine) stepResource(r *resource, now time.Time, members []netip.Addr, cons []ConsumerRates) (ResourceDecision, []netip.Addr) {
	rd, obs := e.observe(r, now)
	start := len(members)
	writing := false
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		terms := e.cfg.Tenants.Terms(c.c)
		cr := ConsumerRates{Resource: r.name, Device: c.c.Device, Addr: c.c.Addr,
			WriteEWMAKBs: c.st.WriteEWMAKBs, Throttleable: c.st.Member,
			Name: tenant.Label(c.c, terms), Terms: terms}
		var d *device
		c.ten.kbs, c.ten.elapsed = 0, 0
		if c.dev >= 0 && e.devs[c.dev].valid {
			d = &e.devs[c.dev]
			rt := &d.rates
			cr.ReadKBs, cr.WriteKBs, cr.RAwaitMs = rt.ReadKBs, rt.WriteKBs, rt.RAwaitMs
			kbs, from := e.writeKBs(c, rt.WriteKBs)
			cr.Throttleable, cr.WriteFrom = e.pol.Judge(&c.st, c.c, sample(c, d, kbs)), from
			cr.WriteEWMAKBs, cr.OutstandingWrites = c.st.WriteEWMAKBs, c.st.OutstandingEWMA
			noteWrite(c, kbs, now)
			c.ten.kbs, c.ten.elapsed = kbs, d.elapsed
		}
		if !r.started {
			// Nothing measured on this resource yet (first Step): no
			// one is throttled.
			cr.Throttleable = false
		}
		noteMember(c, cr.Throttleable, now)
		if cr.Throttleable {
			if !containsAddr(members[start:], c.c.Addr) {
				members = append(members, c.c.Addr)
			}
			// Writing: writes completed this tick, or I/O at the device.
			writing = writing || (d != nil && (d.rates.Writes > 0 || d.cur.InProgress > 0))
		}
		cons[ci] = cr
	}
	if len(members) > start {
		rd.Members = members[start:len(members):len(members)]
	}
	obs.Members, obs.Writing = len(rd.Members), writing
	rd.ThresholdBy = e.readThreshold(r, cons, now)
	rd.ThresholdMs = r.loop.ThresholdMs()
	out := r.loop.Step(obs)
	rd.SignalMs, rd.TargetMs = out.SignalMs, out.TargetMs
	rd.ControlMs, rd.DelayMs = out.ControlMs, out.DelayMs
	rd.UMaxMs, rd.UMaxLimitMs = out.UMaxMs, out.UMaxLimitMs
	rd.Held, rd.Armed, rd.Saturated = out.Held, out.Armed, out.Saturated
	rd.Futile, rd.Probing, rd.GainMsPerMs, rd.RelapseMs, rd.RecallMs = out.Futile, out.Probing, out.GainMsPerMs, out.RelapseMs, out.RecallMs
	e.returning(r, &rd, now)
	e.tenantDelays(r, &rd, cons, now)
	e.noteHeld(r, &rd, cons)
	return rd, members
}

// observe measures r's reads for this Step into rd and the loop's
// observation.
func (e *Engine) observe(r *resource, now time.Time) (ResourceDecision, control.Observation) {
	rd := ResourceDecision{Name: r.name, ThresholdMs: r.threshold, Direction: e.cfg.Direction}
	measured := false
	var writeKBs, writeMs float64
	var writes uint64
	for _, di := range r.devs {
		d := &e.devs[di]
		if d.seenGen != e.gen {
			rd.MissingDevices++
		}
		if d.valid {
			measured = true
			writeKBs += d.rates.WriteKBs
			writeMs += d.rates.WAwaitMs * float64(d.rates.Writes)
			writes += d.rates.Writes
		}
	}
	raw, ok := e.measure(r, &rd)
	if measured || r.started {
		// A resource whose devices all vanished from the snapshot is
		// treated as idle: after the idle hold its signal decays and the
		// throttle winds down (fail open) rather than holding the last
		// delay.
		r.started = true
		if ok {
			rd.RawMs = raw
		}
	}
	obs := control.Observation{Now: now, Measured: r.started, RawMs: raw, Reads: ok, WriteKBs: writeKBs}
	if writes > 0 {
		obs.WriteAwaitMs = writeMs / float64(writes)
	}
	return rd, obs
}

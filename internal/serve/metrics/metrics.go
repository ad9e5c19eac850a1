// Package metrics exports the daemon's state in the Prometheus text format.
//
// Two kinds: gauges of the last tick, from the status snapshot (what the
// controller sees and does now), and totals the daemon adds up at every
// tick (slo.go: reads, read time, a read-latency histogram, seconds over
// the threshold, throttled and saturated), which rate() and increase()
// read over any window: a 15 s scrape sees one tick in 150, the totals
// see them all.
//
// Per-resource and per-consumer values are not kept in gauge vectors that
// the control loop would have to update (and prune) every tick: a collector
// reads the daemon's latest status snapshot when /metrics is scraped, so a
// resource that disappears from the topology disappears from the output,
// and the 100 ms loop pays nothing for metrics but one histogram
// observation. Units are Prometheus base units (seconds, bytes), unlike the
// milliseconds and kB/s of /status and the logs, which follow the thesis.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sanqos/sanqos/internal/serve/status"
)

// Metrics holds the daemon's registry and the metrics the loop updates.
type Metrics struct {
	reg             *prometheus.Registry
	tickDuration    prometheus.Histogram
	ticks           prometheus.Counter
	applies         prometheus.Counter
	applyErrors     prometheus.Counter
	statsErrors     prometheus.Counter
	discoveryOK     prometheus.Gauge
	discoveryErrors prometheus.Counter
	kernelRepairs   *prometheus.CounterVec
	verifyErrors    prometheus.Counter
	reloads         *prometheus.CounterVec
	reloadOK        prometheus.Gauge
	reloadTime      prometheus.Gauge
	slo             *sloCollector
}

// New returns metrics registered in a registry of their own (so tests and
// embedding programs never collide with the global one). snapshot is
// called at every scrape for the per-resource, per-consumer and data-path
// values.
func New(snapshot func() status.Status) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		tickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sanqos_tick_duration_seconds",
			Help: "Time one control step took: read diskstats, step the engine, apply the throttle state.",
			// From 50 µs (an idle small target) to 100 ms (the whole tick:
			// above it the loop cannot keep up).
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3},
		}),
		ticks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sanqos_ticks_total", Help: "Control steps completed.",
		}),
		applies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sanqos_throttle_applies_total", Help: "Throttle states handed to the backend (only when the state changed or a resync was due).",
		}),
		applyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sanqos_throttle_apply_errors_total", Help: "Failed applies of the throttle state; each is retried at the next tick.",
		}),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sanqos_diskstats_errors_total", Help: "Ticks whose /proc/diskstats read failed, plus malformed lines skipped.",
		}),
		discoveryOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sanqos_discovery_success", Help: "1 if the last topology discovery succeeded, 0 if it failed (the last good topology stays in use).",
		}),
		discoveryErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sanqos_discovery_errors_total", Help: "Failed topology discoveries.",
		}),
	}
	m.kernelRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sanqos_kernel_repairs_total",
		Help: "Objects sanqos installed in the kernel that it found removed or changed by someone else and re-installed, by kind: jump, chain, rule, set, member, qdisc.",
	}, []string{"object"})
	// Every kind exists from the start at 0, so that increase() sees the
	// first repair and a dashboard shows "none" rather than "no data".
	for _, o := range []string{"jump", "chain", "rule", "set", "member", "qdisc"} {
		m.kernelRepairs.WithLabelValues(o)
	}
	m.verifyErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sanqos_kernel_verify_errors_total", Help: "Read-backs of the installed kernel objects that failed (the next one comes a few seconds later).",
	})
	m.reg.MustRegister(m.tickDuration, m.ticks, m.applies, m.applyErrors, m.statsErrors,
		m.discoveryOK, m.discoveryErrors, m.kernelRepairs, m.verifyErrors, &snapshotCollector{snapshot: snapshot})
	m.slo = &sloCollector{}
	m.reg.MustRegister(m.newReloadMetrics()...)
	m.reg.MustRegister(m.slo)
	// The process's own health: goroutines, heap, descriptors and RSS let
	// an administrator (and the soak) see a daemon that grows.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry holding the sanqos metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ObserveTick records one completed control step and how long it took.
func (m *Metrics) ObserveTick(d time.Duration) {
	m.ticks.Inc()
	m.tickDuration.Observe(d.Seconds())
}

// Applied records a throttle apply and whether it failed.
func (m *Metrics) Applied(err error) {
	m.applies.Inc()
	if err != nil {
		m.applyErrors.Inc()
	}
}

// StatsErrors adds n diskstats errors.
func (m *Metrics) StatsErrors(n int) { m.statsErrors.Add(float64(n)) }

// Discovered records the outcome of one discovery.
func (m *Metrics) Discovered(err error) {
	if err != nil {
		m.discoveryOK.Set(0)
		m.discoveryErrors.Inc()
		return
	}
	m.discoveryOK.Set(1)
}

// KernelRepair counts one installed object of kind object (jump, chain,
// rule, set, member, qdisc) found altered by someone else.
func (m *Metrics) KernelRepair(object string) { m.kernelRepairs.WithLabelValues(object).Inc() }

// VerifyFailed counts a failed read-back of the installed objects.
func (m *Metrics) VerifyFailed() { m.verifyErrors.Inc() }

// resDesc, conDesc and pathDesc describe a metric of a resource, of a
// consumer and of the data path.
func resDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("sanqos_resource_"+name, help, resLabels, nil)
}

func conDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("sanqos_consumer_"+name, help, conLabels, nil)
}

func pathDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("sanqos_datapath_"+name, help, nil, nil)
}

var (
	resLabels = []string{"resource"}
	// name is the consumer's tenant.Label: its configured name, else its
	// initiator name, else its address.
	conLabels = []string{"resource", "addr", "device", "name"}

	descInfo   = prometheus.NewDesc("sanqos_build_info", "Version and throttle backend of the running daemon; always 1.", []string{"version", "backend"}, nil)
	descUptime = prometheus.NewDesc("sanqos_uptime_seconds", "Time since the daemon started.", nil, nil)
)

// What the controller sees of each resource.
var (
	descSignal    = resDesc("read_latency_seconds", "EWMA-filtered read latency (r_await) of the resource: the controlled signal.")
	descRaw       = resDesc("read_latency_raw_seconds", "Unfiltered read latency of the last tick (0 when it had no reads).")
	descThreshold = resDesc("threshold_seconds", "Read latency the controller keeps the resource under.")
	descTarget    = resDesc("target_seconds", "The controller's set point: the threshold less the headroom.")
)

// What the controller does about it.
var (
	descDelay     = resDesc("throttle_delay_seconds", "Packet delay applied to the resource's throttleable set.")
	descControl   = resDesc("controller_output_seconds", "The controller's output delay, kept while the throttleable set is empty.")
	descInForce   = resDesc("throttle_delay_in_force_seconds", "Packet delay the data path has for the resource's throttleable set: the last state applied to the backend successfully.")
	descCeiling   = resDesc("delay_ceiling_seconds", "The controller's current delay ceiling: u_max, raised toward u_max_limit while the writers need more.")
	descSaturated = resDesc("saturated", "1 while the delay sits at u_max_limit with the read latency over the threshold: packet delay alone is not holding the writers.")
	descFutile    = resDesc("futile", "1 while the loop holds its delay released because it measured that delaying the writers buys the reads nothing.")
	descConflict  = resDesc("tenant_conflict", "1 while the resource's reservations and its read promise cannot both be met (tenants.conflict says which gives way).")
	descRelapse   = resDesc("relapse_delay_seconds", "While the law's relapse guard holds: the delay that let the last overload in, under 1.5 times which the delay falls slowly (0: not holding).")
	descRecall    = resDesc("recall_delay_seconds", "The delay an overload from rest starts at: what the last burst needed, remembered for 30 minutes (0: none).")
	descGain      = resDesc("delay_gain_ratio", "The last measured gain of the delay: seconds of read latency bought per second of delay (0: none measured yet; negative: the delay made reads slower).")
)

// The block-layer probe's view of the reads.
var (
	descPending = resDesc("pending_read_age_seconds", "Age of the oldest read in flight for more than a tick (0: none); counted in the signal before it completes.")
	descP95     = resDesc("read_latency_p95_seconds", "95th percentile of the last tick's completed reads (eBPF probe only; 0 without it).")
	descP99     = resDesc("read_latency_p99_seconds", "99th percentile of the last tick's completed reads (eBPF probe only; 0 without it).")
	descFollows = prometheus.NewDesc("sanqos_resource_signal_info", "The statistic the controller holds under the threshold (mean, p95, p99) and where the reads were measured (ebpf, diskstats); always 1.", []string{"resource", "signal", "source"}, nil)
)

// Who is throttled, and why.
var (
	descSetSize   = resDesc("throttle_members", "Consumers in the resource's throttleable set.")
	descArmed     = resDesc("armed_writers", "Writers out of the set that were in it lately: the data path holds each from its first write.")
	descReadBps   = conDesc("read_bytes_per_second", "Consumer's read rate in the last tick.")
	descWriteBps  = conDesc("write_bytes_per_second", "Consumer's write rate in the last tick.")
	descWriteEWMA = conDesc("write_ewma_bytes_per_second", "Filtered write rate that decides membership of the throttleable set.")
	descThrottle  = conDesc("throttleable", "1 if the consumer is in its resource's throttleable set.")
	descOutstand  = conDesc("outstanding_writes", "Estimated writes of the consumer in flight (EWMA): write rate times (write await + the delay on its flows); a held writer stays in the set while it has writes outstanding.")
	descConDelay  = conDesc("throttle_delay_seconds", "Packet delay the engine put on the consumer's flows: its resource's delay as a member, the armed delay as a returning writer.")
	descConForce  = conDesc("throttle_delay_in_force_seconds", "Packet delay the data path holds the consumer's flows at: what the backend programs of the last state applied successfully.")
)

// The consumer's tenant terms ([tenants] and 'sanqos throttle').
var (
	descShare     = conDesc("share", "The consumer's share among the writers of a throttled resource (1 unless set).")
	descReserve   = conDesc("reserve_bytes_per_second", "Write rate the consumer is never delayed below (0: no reservation).")
	descCap       = conDesc("cap_bytes_per_second", "Write rate the consumer is capped at (0: no cap).")
	descReadPromi = conDesc("read_threshold_seconds", "The consumer's own read promise (0: its resource's threshold).")
)

// The data path.
var (
	descHeld       = pathDesc("packets_held_total", "Packets the backend delayed.")
	descPassed     = pathDesc("packets_passed_total", "Packets the backend released.")
	descBacklog    = pathDesc("backlog_packets", "Packets held right now.")
	descErrP50     = pathDesc("delay_error_p50_seconds", "Median of actual hold time minus requested delay.")
	descErrAvg     = pathDesc("delay_error_avg_seconds", "edt: fq's moving average of how late it released a held flow (edt keeps no p50 or max; nfqueue reports those and 0 here).")
	descErrMax     = pathDesc("delay_error_max_seconds", "Maximum of actual hold time minus requested delay.")
	descTakeovers  = pathDesc("standby_takeovers_total", "Times the standby thread ran the packet path because the packet thread's CPU had stalled.")
	descBypassed   = pathDesc("packets_bypassed_total", "Packets the backend let pass at once, undelayed, because the backlog of held packets (all of it, or the consumer's share of it) was at its limit: fail open rather than hold unbounded memory.")
	descDropped    = pathDesc("packets_dropped_total", "Packets the backend's kernel queue dropped (edt: fq over its limits, which sanqos sets past any real backlog). It should stay 0.")
	descPathErrors = pathDesc("packet_errors_total", "Packets the backend could not parse or whose verdict it could not send; the kernel lets them pass (fail open).")
	descConBypass  = prometheus.NewDesc("sanqos_datapath_consumer_bypassed_packets_total", "Packets of the consumer that passed undelayed because it was over its share of the backlog or the backlog was at its hard limit; only consumers that had any (at most 16, the most first).", []string{"addr"}, nil)
	descConDelayed = prometheus.NewDesc("sanqos_datapath_consumer_delayed_packets_total", "Packets of the consumer the backend delayed; for the consumers of sanqos_datapath_consumer_bypassed_packets_total.", []string{"addr"}, nil)
	descUnresolved = prometheus.NewDesc("sanqos_discovery_unresolved_luns", "LUNs the last discovery left out because their backing device could not be resolved: their initiators are neither measured nor throttled.", nil, nil)
)

// snapshotCollector turns the daemon's status snapshot into metrics.
type snapshotCollector struct {
	snapshot func() status.Status
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descUptime, descSignal, descRaw, descThreshold, descTarget, descDelay, descControl, descInForce, descCeiling, descSaturated, descFutile, descConflict, descRelapse, descRecall, descGain, descPending, descP95, descP99, descFollows, descSetSize, descArmed,
		descReadBps, descWriteBps, descWriteEWMA, descThrottle, descOutstand, descConDelay, descConForce, descShare, descReserve, descCap, descReadPromi, descHeld, descPassed, descBacklog, descErrP50, descErrMax, descErrAvg, descTakeovers, descBypassed, descDropped, descPathErrors, descConBypass, descConDelayed, descUnresolved} {
		ch <- d
	}
}

const (
	msToS     = 1e-3
	kBsToBps  = 1024 // diskstats kB are 1024 bytes (two sectors), as iostat -k
	gauge     = prometheus.GaugeValue
	counterVT = prometheus.CounterValue
)

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	ch <- prometheus.MustNewConstMetric(descInfo, gauge, 1, s.Version, s.Backend)
	ch <- prometheus.MustNewConstMetric(descUptime, gauge, s.UptimeS)
	for _, r := range s.Resources {
		ch <- prometheus.MustNewConstMetric(descSignal, gauge, r.SignalMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descRaw, gauge, r.RawMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descThreshold, gauge, r.ThresholdMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descTarget, gauge, r.TargetMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descDelay, gauge, r.DelayMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descControl, gauge, r.ControlMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descInForce, gauge, r.InForceMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descCeiling, gauge, r.UMaxMs*msToS, r.Name)
		sat := 0.0
		if r.Saturated {
			sat = 1
		}
		ch <- prometheus.MustNewConstMetric(descSaturated, gauge, sat, r.Name)
		futile := 0.0
		if r.Futile {
			futile = 1
		}
		ch <- prometheus.MustNewConstMetric(descFutile, gauge, futile, r.Name)
		conflict := 0.0
		if r.Conflict != "" {
			conflict = 1
		}
		ch <- prometheus.MustNewConstMetric(descConflict, gauge, conflict, r.Name)
		ch <- prometheus.MustNewConstMetric(descRelapse, gauge, r.RelapseMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descRecall, gauge, r.RecallMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descGain, gauge, r.GainMsPerMs, r.Name)
		ch <- prometheus.MustNewConstMetric(descPending, gauge, r.PendingMs*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descP95, gauge, r.P95Ms*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descP99, gauge, r.P99Ms*msToS, r.Name)
		ch <- prometheus.MustNewConstMetric(descFollows, gauge, 1, r.Name, r.Signal, r.Source)
		ch <- prometheus.MustNewConstMetric(descSetSize, gauge, float64(len(r.Members)), r.Name)
		ch <- prometheus.MustNewConstMetric(descArmed, gauge, float64(len(r.Returning)), r.Name)
	}
	for _, k := range s.Consumers {
		name := k.Name
		if name == "" {
			name = k.Addr
		}
		ch <- prometheus.MustNewConstMetric(descReadBps, gauge, k.ReadKBs*kBsToBps, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descWriteBps, gauge, k.WriteKBs*kBsToBps, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descWriteEWMA, gauge, k.WriteEWMAKBs*kBsToBps, k.Resource, k.Addr, k.Device, name)
		t := 0.0
		if k.Throttleable {
			t = 1
		}
		ch <- prometheus.MustNewConstMetric(descThrottle, gauge, t, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descOutstand, gauge, k.OutstandingWrites, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descConDelay, gauge, k.DelayMs*msToS, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descConForce, gauge, k.InForceMs*msToS, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descShare, gauge, k.Terms.EffectiveShare(), k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descReserve, gauge, k.Terms.ReserveBps, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descCap, gauge, k.Terms.CapBps, k.Resource, k.Addr, k.Device, name)
		ch <- prometheus.MustNewConstMetric(descReadPromi, gauge, k.Terms.ThresholdMs*msToS, k.Resource, k.Addr, k.Device, name)
	}
	b := s.Throttle
	ch <- prometheus.MustNewConstMetric(descHeld, counterVT, float64(b.PacketsHeld))
	ch <- prometheus.MustNewConstMetric(descPassed, counterVT, float64(b.PacketsPassed))
	ch <- prometheus.MustNewConstMetric(descBacklog, gauge, float64(b.Backlog))
	ch <- prometheus.MustNewConstMetric(descErrP50, gauge, b.DelayErrorP50Ms*msToS)
	ch <- prometheus.MustNewConstMetric(descErrMax, gauge, b.DelayErrorMaxMs*msToS)
	ch <- prometheus.MustNewConstMetric(descErrAvg, gauge, b.DelayErrorAvgMs*msToS)
	ch <- prometheus.MustNewConstMetric(descTakeovers, counterVT, float64(b.Takeovers))
	ch <- prometheus.MustNewConstMetric(descBypassed, counterVT, float64(b.Bypassed))
	ch <- prometheus.MustNewConstMetric(descDropped, counterVT, float64(b.Dropped))
	ch <- prometheus.MustNewConstMetric(descPathErrors, counterVT, float64(b.Errors))
	for _, c := range b.Bypassers {
		ch <- prometheus.MustNewConstMetric(descConBypass, counterVT, float64(c.Bypassed), c.Addr)
		ch <- prometheus.MustNewConstMetric(descConDelayed, counterVT, float64(c.Delayed), c.Addr)
	}
	ch <- prometheus.MustNewConstMetric(descUnresolved, gauge, float64(len(s.Discovery.Unresolved)))
}

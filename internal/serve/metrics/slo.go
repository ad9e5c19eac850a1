package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The gauges of snapshotCollector are the last tick's: a scrape every
// 15 s sees one tick in 150, and what happened between scrapes is lost.
// The metrics here are what the daemon adds up at every tick (counters of
// reads and of seconds in a state, and the probe's reads in a histogram),
// so that rate() and increase() over any window see every tick, and an
// SLO (fraction of reads under a bound, fraction of time over the
// threshold) can be computed from them.

// ReadBuckets are the upper bounds, in seconds, of the read-latency
// histogram: 0.1 ms (a flash read) to 200 ms (a disk far past any
// threshold), with bounds at the usual thresholds (10, 15, 20, 30 ms).
var ReadBuckets = []float64{100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 15e-3, 20e-3, 30e-3, 50e-3, 100e-3, 200e-3}

// SLO is what the daemon has accumulated since it started, read at each
// scrape (the daemon's slo.go fills it).
type SLO struct {
	Resources []SLOResource
	// Clients are the wire counters' clients (empty without wire
	// counters: attribution off, the dry-run backend, or no ipset).
	Clients []Client
	// Manual are the manual throttles in force (control socket and
	// manual.read_rates).
	Manual []Manual
}

// SLOResource is one resource's totals.
type SLOResource struct {
	Name string
	// Reads and ReadSeconds are the reads completed on the resource's
	// devices and the time they took, from /proc/diskstats (as r_await
	// is: ReadSeconds/Reads is the mean over any window).
	Reads       uint64
	ReadSeconds float64
	// Timed are the reads the eBPF probe timed one by one, TimedSeconds
	// their sum, and Buckets how many of them fell at or under each of
	// ReadBuckets (not cumulative: Buckets[i] counts the reads above
	// ReadBuckets[i-1]); the ones above the last bound are Timed less the
	// buckets' sum.
	Timed        uint64
	TimedSeconds float64
	Buckets      []uint64
	// Seconds of control periods (ticks × tick length) in which the
	// filtered signal was over the threshold, a delay was in force on the
	// data path, and the controller was saturated.
	OverThresholdSeconds float64
	ThrottledSeconds     float64
	SaturatedSeconds     float64
}

// Client is one client address's bytes on the wire.
type Client struct {
	Addr string
	// Name is what discovery knows the client as (its initiator IQNs,
	// comma separated); empty when it knows none.
	Name          string
	SentBytes     uint64
	ReceivedBytes uint64
}

// Manual is one manual throttle: a delay (Direction write, read or both)
// or a read rate cap.
type Manual struct {
	Addr      string
	Direction string
	Delay     time.Duration
	ReadRate  uint64 // bytes per second; 0: a delay
}

// SetSLO makes every scrape include the totals slo returns. Call it
// before the first scrape.
func (m *Metrics) SetSLO(slo func() SLO) { m.slo.source = slo }

// ConfigLoaded records that the configuration the daemon started with
// was loaded at at (a successful load, as Prometheus counts its own).
func (m *Metrics) ConfigLoaded(at time.Time) {
	m.reloadOK.Set(1)
	m.reloadTime.Set(float64(at.UnixNano()) / 1e9)
}

// Reloaded records the outcome of one configuration reload (SIGHUP) at
// at. A refused reload leaves the running configuration and the
// timestamp of the last good one.
func (m *Metrics) Reloaded(err error, at time.Time) {
	if err != nil {
		m.reloads.WithLabelValues("failure").Inc()
		m.reloadOK.Set(0)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.ConfigLoaded(at)
}

func (m *Metrics) newReloadMetrics() []prometheus.Collector {
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sanqos_config_reloads_total",
		Help: "Configuration reloads (SIGHUP) by result: success (applies at the next tick) or failure (refused; the running configuration stays).",
	}, []string{"result"})
	// Both results exist from the start, so that increase() sees the
	// first failure.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sanqos_config_last_reload_successful",
		Help: "1 if the last configuration load (at start or on SIGHUP) succeeded, 0 if the last reload was refused.",
	})
	m.reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sanqos_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful configuration load (at start or on SIGHUP).",
	})
	return []prometheus.Collector{m.reloads, m.reloadOK, m.reloadTime}
}

var (
	descReads     = resDesc("reads_total", "Reads completed on the resource's devices, from /proc/diskstats (every read, probe or not).")
	descReadSecs  = resDesc("read_seconds_total", "Time the resource's completed reads took, from /proc/diskstats (milliseconds, summed by the kernel): read_seconds_total / reads_total over a window is the mean read latency (r_await) of that window.")
	descReadHist  = resDesc("read_duration_seconds", "Read latency of each read the eBPF block-layer probe timed (microseconds, in the kernel). A read counts in the first bucket whose bound is at or above the top of its probe bucket (at most 6.25 % wide), so a read just under a bound may count above it, never below. Reads measured only from /proc/diskstats (no probe: no BTF, no CAP_BPF, probe = \"off\") are not here: their per-tick means cannot give a distribution; compare _count with sanqos_resource_reads_total.")
	descOverSecs  = resDesc("over_threshold_seconds_total", "Time (control periods: ticks × tick length) the filtered read latency, the controlled signal, was over the resource's threshold.")
	descThrotSecs = resDesc("throttled_seconds_total", "Time (control periods) a packet delay was in force on the resource's throttleable set.")
	descSatSecs   = resDesc("saturated_seconds_total", "Time (control periods) the controller was saturated: the delay at u_max_limit with the read latency over the threshold.")

	clientLabels = []string{"addr", "name"}
	descSent     = prometheus.NewDesc("sanqos_client_sent_bytes_total", "Bytes of TCP data segments the client sent to the storage ports (its writes, plus its requests), counted in the kernel by the wire counters. Only with wire counters (attribution on, a kernel backend); one series per client address of the topology (cardinality: the number of initiators and NFS clients), name: its initiator IQNs where discovery knows them.", clientLabels, nil)
	descRecv     = prometheus.NewDesc("sanqos_client_received_bytes_total", "Bytes of TCP data segments the storage ports sent the client (its reads, plus replies), counted in the kernel by the wire counters. Same series as sanqos_client_sent_bytes_total.", clientLabels, nil)

	descManualDelay = prometheus.NewDesc("sanqos_manual_throttle_delay_seconds", "Packet delay of a manual throttle ('sanqos throttle --delay'); one series per throttled address.", []string{"addr", "direction"}, nil)
	descManualRate  = prometheus.NewDesc("sanqos_manual_read_rate_bytes_per_second", "Read rate cap of a manual throttle ('sanqos throttle --rate', manual.read_rates); one series per capped address.", []string{"addr"}, nil)
)

// sloCollector turns the daemon's totals into metrics.
type sloCollector struct {
	source func() SLO // nil until SetSLO: nothing is exported
}

func (c *sloCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReads, descReadSecs, descReadHist, descOverSecs, descThrotSecs, descSatSecs, descSent, descRecv, descManualDelay, descManualRate} {
		ch <- d
	}
}

func (c *sloCollector) Collect(ch chan<- prometheus.Metric) {
	if c.source == nil {
		return
	}
	s := c.source()
	for _, r := range s.Resources {
		ch <- prometheus.MustNewConstMetric(descReads, counterVT, float64(r.Reads), r.Name)
		ch <- prometheus.MustNewConstMetric(descReadSecs, counterVT, r.ReadSeconds, r.Name)
		buckets := make(map[float64]uint64, len(ReadBuckets))
		var cum uint64
		for i, le := range ReadBuckets {
			if i < len(r.Buckets) {
				cum += r.Buckets[i]
			}
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descReadHist, r.Timed, r.TimedSeconds, buckets, r.Name)
		ch <- prometheus.MustNewConstMetric(descOverSecs, counterVT, r.OverThresholdSeconds, r.Name)
		ch <- prometheus.MustNewConstMetric(descThrotSecs, counterVT, r.ThrottledSeconds, r.Name)
		ch <- prometheus.MustNewConstMetric(descSatSecs, counterVT, r.SaturatedSeconds, r.Name)
	}
	for _, k := range s.Clients {
		ch <- prometheus.MustNewConstMetric(descSent, counterVT, float64(k.SentBytes), k.Addr, k.Name)
		ch <- prometheus.MustNewConstMetric(descRecv, counterVT, float64(k.ReceivedBytes), k.Addr, k.Name)
	}
	for _, t := range s.Manual {
		if t.ReadRate > 0 {
			ch <- prometheus.MustNewConstMetric(descManualRate, gauge, float64(t.ReadRate), t.Addr)
			continue
		}
		ch <- prometheus.MustNewConstMetric(descManualDelay, gauge, t.Delay.Seconds(), t.Addr, t.Direction)
	}
}

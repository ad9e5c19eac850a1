// Package status is the read-only view of a running sanqos daemon: the JSON
// document its /status endpoint serves, the per-tick record lines written by
// --record, and a small client that 'sanqos status' and 'sanqos top' use.
//
// The types are plain data with JSON tags so that other programs (the lab's
// plots, scripts) can decode them without importing the daemon.
package status

import (
	"time"

	"github.com/sanqos/sanqos/internal/decide/tenant"
)

// Status is the document served at /status.
type Status struct {
	Version string `json:"version"`
	Backend string `json:"backend"`
	// BackendWhy says why the data path is Backend: "as configured", or
	// what backend auto found.
	BackendWhy string    `json:"backend_why,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	// UptimeS is the time since StartedAt, in seconds, when the document
	// was made.
	UptimeS float64 `json:"uptime_s"`
	// TickMs is the configured control period.
	TickMs float64 `json:"tick_ms"`
	// Ticks counts completed control steps; At is the time of the last.
	Ticks uint64    `json:"ticks"`
	At    time.Time `json:"at"`
	// LastTickMs is how long the last control step took (read diskstats,
	// step the engine, apply).
	LastTickMs float64 `json:"last_tick_ms"`

	Resources []Resource   `json:"resources"`
	Consumers []Consumer   `json:"consumers"`
	Throttle  BackendStats `json:"throttle"`
	Discovery Discovery    `json:"discovery"`
	// ApplyError is the last error of the backend while it has not been
	// resolved by a later successful apply; empty when the data path is in
	// the desired state.
	ApplyError string `json:"apply_error,omitempty"`
	// StatsError is the last error reading the block device statistics
	// while it persists.
	StatsError string `json:"stats_error,omitempty"`
}

// Resource is one shared resource at the last tick.
type Resource struct {
	Name string `json:"name"`
	// SignalMs is the filtered read latency the controller acts on; RawMs
	// the unfiltered value of the last tick (0 when it had no reads).
	SignalMs    float64 `json:"signal_ms"`
	RawMs       float64 `json:"raw_ms"`
	ThresholdMs float64 `json:"threshold_ms"`
	// ThresholdBy names the reader whose own promise (tenant threshold)
	// the resource holds, "" for the resource's threshold.
	ThresholdBy string `json:"threshold_by,omitempty"`
	// Conflict says why the reservations and the read promise cannot
	// both be met and which one gives way; "" when they can.
	Conflict string `json:"conflict,omitempty"`
	// TargetMs is the controller's set point: the threshold less the
	// headroom.
	TargetMs float64 `json:"target_ms"`
	// DelayMs is the packet delay applied to the members (0 while there
	// are none); ControlMs the controller's output, which it keeps while
	// the set is empty.
	DelayMs   float64 `json:"delay_ms"`
	ControlMs float64 `json:"control_ms"`
	// InForceMs is the delay the data path has for the members: what the
	// daemon last applied to the backend successfully. It is DelayMs
	// unless an apply failed (the kernel keeps the last state) or a
	// manual throttle of the same name replaced the engine's.
	InForceMs float64 `json:"in_force_ms"`
	// UMaxMs is the largest delay the controller may set now (the ceiling
	// rises while the writers need more), UMaxLimitMs how high it may go.
	UMaxMs      float64 `json:"u_max_ms"`
	UMaxLimitMs float64 `json:"u_max_limit_ms"`
	// Saturated: the delay sits at the ceiling's limit and the read
	// latency is still over the threshold; packet delay alone is not
	// holding these writers.
	Saturated bool `json:"saturated,omitempty"`
	// Futile: the loop measured that delaying the writers buys the reads
	// nothing and holds the delay released; Probing: it is measuring
	// that now; GainMsPerMs is the last gain measured, ms of read latency
	// per ms of delay (0: none yet).
	Futile      bool    `json:"futile,omitempty"`
	Probing     bool    `json:"probing,omitempty"`
	GainMsPerMs float64 `json:"gain_ms_per_ms,omitempty"`
	// RelapseMs: while the law's relapse guard holds, the delay that let
	// the last overload in; the delay falls slowly under 1.5 × it.
	RelapseMs float64 `json:"relapse_ms,omitempty"`
	// RecallMs: the delay a burst from rest starts at, what the last
	// burst needed (remembered for 30 minutes); 0 when none.
	RecallMs float64 `json:"recall_ms,omitempty"`
	// Held: the last tick had no read sample (reads in flight not yet a
	// tick old, or a short gap between reads); signal and delay were kept.
	Held bool `json:"held,omitempty"`
	// PendingMs is the age of the oldest read in flight for over a tick.
	PendingMs float64 `json:"pending_ms,omitempty"`
	// Signal is what the controller follows (mean, p95, p99); Source
	// where the tick's reads came from: "ebpf" (the block-layer probe)
	// or "diskstats" (millisecond counts; a percentile signal then falls
	// back to the mean).
	Signal string `json:"signal,omitempty"`
	Source string `json:"source,omitempty"`
	// MeanMs, P95Ms and P99Ms are the tick's completed reads from the
	// probe (0 without it).
	MeanMs    float64  `json:"mean_ms,omitempty"`
	P95Ms     float64  `json:"p95_ms,omitempty"`
	P99Ms     float64  `json:"p99_ms,omitempty"`
	Reads     uint64   `json:"reads"`
	Direction string   `json:"direction"`
	Members   []string `json:"members"`
	// Returning are writers that were in the set lately: the data path
	// holds each at ControlMs from its first write (nfqueue backend).
	Returning []string `json:"returning,omitempty"`
	// MissingDevices counts the resource's devices absent from
	// /proc/diskstats at the last tick (a stale topology, or a LUN whose
	// device went away); they are skipped, not fatal.
	MissingDevices int `json:"missing_devices,omitempty"`
}

// Throttling reports whether the resource's members are being delayed.
func (r Resource) Throttling() bool { return r.DelayMs > 0 && len(r.Members) > 0 }

// Consumer is one initiator on one device at the last tick.
type Consumer struct {
	Resource string `json:"resource"`
	Device   string `json:"device"`
	Addr     string `json:"addr"`
	// Name is how the consumer is called (tenant.Label): its configured
	// name, else its initiator name, else its address.
	Name string `json:"name,omitempty"`
	// Terms are its tenant terms in force (the configuration's with the
	// runtime ones over them); the zero value is the defaults.
	Terms tenant.Terms `json:"terms"`
	// The rates are in KiB/s (1024 B/s: diskstats' two sectors), as
	// 'sanqos status' heads them; the JSON names keep their old "kbs"
	// spelling so that scripts reading /status go on working.
	ReadKBs      float64 `json:"read_kbs"`
	WriteKBs     float64 `json:"write_kbs"`
	WriteEWMAKBs float64 `json:"write_ewma_kbs"`
	RAwaitMs     float64 `json:"r_await_ms"`
	Throttleable bool    `json:"throttleable"`
	// WriteFrom is where the judged write rate came from: "wire" (the
	// client's bytes, where clients share a device; ReadKBs and WriteKBs
	// are then the client's on the wire) or "device"; empty without wire
	// counters.
	WriteFrom string `json:"write_from,omitempty"`
	// OutstandingWrites estimates its writes in flight (EWMA), what the
	// policy judges a held writer by (policy "Demand").
	OutstandingWrites float64 `json:"outstanding_writes"`
	// DelayMs is the delay the engine put on its flows (its resource's
	// delay as a member, the armed delay as a returning writer);
	// InForceMs the one the data path holds it at: what the backend
	// programs of the last state applied successfully. They differ when
	// an apply failed, a manual throttle holds it, or the backend leaves
	// it out (an IPv6 consumer on an IPv4-only backend, arming off
	// nfqueue, dry-run).
	DelayMs   float64 `json:"delay_ms"`
	InForceMs float64 `json:"in_force_ms"`
}

// Label is how status shows the consumer: its address, after its name
// when it has one other than the address ("db1 (10.0.0.5)").
func (c Consumer) Label() string {
	if c.Name == "" || c.Name == c.Addr {
		return c.Addr
	}
	return c.Name + " (" + c.Addr + ")"
}

// BackendStats are the data-path counters of the throttle backend.
type BackendStats struct {
	PacketsHeld     uint64  `json:"packets_held"`
	PacketsPassed   uint64  `json:"packets_passed"`
	Backlog         int     `json:"backlog"`
	DelayErrorP50Ms float64 `json:"delay_error_p50_ms"`
	DelayErrorMaxMs float64 `json:"delay_error_max_ms"`
	// DelayErrorAvgMs is edt's hold error: fq's moving average of how
	// late it released a held flow (it keeps no p50 or max).
	DelayErrorAvgMs float64 `json:"delay_error_avg_ms,omitempty"`
	// PureAcks says whether the write direction holds pure ACKs ("held") or
	// lets them pass ("passed", the default); empty for backends that
	// delay whole classes of packets.
	PureAcks   string `json:"pure_acks,omitempty"`
	AcksPassed uint64 `json:"acks_passed"`
	Bypassed   uint64 `json:"bypassed"`
	// Dropped counts packets the backend's kernel queue dropped (edt's
	// fq); it should stay 0.
	Dropped uint64 `json:"dropped"`
	// Errors counts packets the backend could not parse or whose verdict
	// it could not send (the kernel lets them pass: fail open).
	Errors uint64 `json:"errors"`
	// Takeovers counts the times the nfqueue standby thread ran the
	// packet path because the packet thread's CPU had stalled.
	Takeovers uint64 `json:"takeovers"`
	// Bypassers are the consumers whose packets passed undelayed because
	// they were over their share of the backlog (or it was at its hard
	// limit), the most bypassed first (nfqueue; at most 16).
	Bypassers []ConsumerBypass `json:"bypassers,omitempty"`
}

// ConsumerBypass is one consumer's share of the data path's counters.
type ConsumerBypass struct {
	Addr     string `json:"addr"`
	Held     int    `json:"held"`     // its packets held now
	Delayed  uint64 `json:"delayed"`  // its packets that were held
	Bypassed uint64 `json:"bypassed"` // its packets passed at once over its share
}

// Discovery is the state of topology discovery.
type Discovery struct {
	// OK is false while the last discovery failed (the last good topology
	// stays in use).
	OK          bool      `json:"ok"`
	LastSuccess time.Time `json:"last_success"`
	LastError   string    `json:"last_error,omitempty"`
	Errors      uint64    `json:"errors"`
	// Unresolved lists the backing stores of LUNs left out of the last
	// successful discovery because their device could not be resolved:
	// their initiators are neither measured nor throttled.
	Unresolved []string `json:"unresolved,omitempty"`
}

// Record is one line of the --record file: the time series of one tick.
type Record struct {
	// T is the tick time; TS the same in Unix seconds, easy to plot.
	T         time.Time        `json:"t"`
	TS        float64          `json:"ts"`
	Resources []RecordResource `json:"resources"`
	Consumers []Consumer       `json:"consumers"`
	// HoldErrorMaxMs is the largest amount by which one of the data
	// path's last few hundred packets was held longer than asked: a
	// stall there makes ACKs late and TCP probe for loss.
	HoldErrorMaxMs float64 `json:"hold_error_max_ms"`
	// Backlog is the packets held at the tick.
	Backlog int `json:"backlog"`
	// YieldMaxMs and WakeLateMaxMs are the packet thread's recent
	// longest yield to the Go scheduler and latest wake-up for a release
	// (nfqueue only; see throttle.Stats).
	YieldMaxMs    float64 `json:"yield_max_ms,omitempty"`
	WakeLateMaxMs float64 `json:"wake_late_max_ms,omitempty"`
	// Takeovers counts, since the start, the times the standby ran the
	// packet path for a stalled packet thread; TakeoverMaxMs is the
	// longest of the recent ones; TakeoversDeclined the standby's looks
	// that found that thread away but packets still in its CPU's receive
	// backlog, which a takeover could overtake (nfqueue only; see
	// throttle.Stats).
	Takeovers         uint64  `json:"takeovers,omitempty"`
	TakeoverMaxMs     float64 `json:"takeover_max_ms,omitempty"`
	TakeoversDeclined uint64  `json:"takeovers_declined,omitempty"`
}

// RecordResource is a resource's state in a Record.
type RecordResource struct {
	Name        string  `json:"name"`
	SignalMs    float64 `json:"signal_ms"`
	RawMs       float64 `json:"raw_ms"`
	ThresholdMs float64 `json:"threshold_ms"`
	// ThresholdBy and Conflict are Resource's.
	ThresholdBy string  `json:"threshold_by,omitempty"`
	Conflict    string  `json:"conflict,omitempty"`
	TargetMs    float64 `json:"target_ms"`
	DelayMs     float64 `json:"delay_ms"`
	ControlMs   float64 `json:"control_ms"`
	InForceMs   float64 `json:"in_force_ms"`
	UMaxMs      float64 `json:"u_max_ms,omitempty"`
	Saturated   bool    `json:"saturated,omitempty"`
	Futile      bool    `json:"futile,omitempty"`
	Probing     bool    `json:"probing,omitempty"`
	GainMsPerMs float64 `json:"gain_ms_per_ms,omitempty"`
	RelapseMs   float64 `json:"relapse_ms,omitempty"`
	RecallMs    float64 `json:"recall_ms,omitempty"`
	Held        bool    `json:"held,omitempty"`
	PendingMs   float64 `json:"pending_ms,omitempty"`
	Signal      string  `json:"signal,omitempty"`
	Source      string  `json:"source,omitempty"`
	MeanMs      float64 `json:"mean_ms,omitempty"`
	P95Ms       float64 `json:"p95_ms,omitempty"`
	P99Ms       float64 `json:"p99_ms,omitempty"`
	Reads       uint64  `json:"reads"`
	Members     int     `json:"members"`
	// Armed counts the returning writers held from their first write.
	Armed int `json:"armed,omitempty"`
}

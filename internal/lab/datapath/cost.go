package datapath

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// CostConfig is the shape of the cost measurement.
type CostConfig struct {
	// Backends are measured in interleaved rounds, each round running
	// every backend once, the order rotated; "none" (no sanqos) is the
	// baseline and must be among them.
	Backends []string
	Bin      string // the sanqos binary
	// Warm exchanges precede Pings timed ones per hold per arm: nfqueue's
	// rise limit ramps a flow's delay up over about 25 RTT samples.
	Warm, Pings int
	Holds       []time.Duration // the ping-pong's write delays
	Bulk        time.Duration   // each arm's bulk flow
	ReadDelay   time.Duration   // the bulk flow's per-segment delay
	// RateCap is a rate backend's (htb's) cap on the bulk flow, as
	// 'sanqos throttle --rate' reads it: it delays no packet by a
	// fixed time, so it has no hold error and its bulk flow is capped.
	RateCap string
	Rounds  int
	// Progress, if set, is told each arm as it starts.
	Progress func(format string, args ...any)
}

// RateOnly says whether a backend caps rates instead of delaying (htb).
func RateOnly(backend string) bool { return backend == "htb" }

// BulkArm is one bulk flow with what the backend counted meanwhile.
type BulkArm struct {
	BulkResult
	Held, Bypassed, Drops uint64
}

// Cost is the cost measurement's raw results per backend.
type Cost struct {
	Config CostConfig
	// RTT are the timed round trips per backend and hold ("none": at 0).
	RTT  map[string]map[time.Duration][]time.Duration
	Bulk map[string][]BulkArm
	// Own are the backend's counters at the end of its last arm.
	Own map[string]Stats
	// Problems are what the measurement found wrong beyond noise: a
	// retransmitting ping-pong, a packet not delayed, an exchange back
	// sooner than its delay. The guest test fails on them.
	Problems []string
	Took     time.Duration
}

// MeasureCost runs the cost measurement on a network Setup made.
func MeasureCost(ctx context.Context, cfg CostConfig) (*Cost, error) {
	if !slices.Contains(cfg.Backends, "none") {
		return nil, fmt.Errorf("the backends %v need none, the baseline", cfg.Backends)
	}
	srv, err := StartServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	c := &Cost{Config: cfg, RTT: map[string]map[time.Duration][]time.Duration{}, Bulk: map[string][]BulkArm{}, Own: map[string]Stats{}}
	start := time.Now()
	for r := range cfg.Rounds {
		for i := range cfg.Backends {
			if err := ctx.Err(); err != nil {
				return c, err
			}
			b := cfg.Backends[(i+r)%len(cfg.Backends)]
			if cfg.Progress != nil {
				cfg.Progress("cost: round %d of %d, %s (%d of %d)", r+1, cfg.Rounds, b, i+1, len(cfg.Backends))
			}
			if err := c.arm(srv, b); err != nil {
				return c, fmt.Errorf("%s, round %d: %w", b, r+1, err)
			}
		}
	}
	c.Took = time.Since(start)
	c.checkHolds()
	return c, nil
}

// arm runs one backend's ping-pongs and bulk flow with a daemon of its
// own, or none.
func (c *Cost) arm(srv *Server, backend string) error {
	var d *Daemon
	if backend != "none" {
		var err error
		if d, err = StartManual(c.Config.Bin, backend); err != nil {
			return err
		}
		defer d.Close()
	}
	if err := c.pingPongs(srv, d, backend); err != nil {
		return err
	}
	pid := 0
	if d != nil {
		pid = d.Pid()
		args := []string{"--ip", ClientIP, "--delay", c.Config.ReadDelay.String(), "--direction", "read"}
		if RateOnly(backend) {
			args = []string{"--ip", ClientIP, "--rate", c.Config.RateCap}
		}
		if _, err := d.Throttle(args...); err != nil {
			return err
		}
	}
	s0, err := d.Stats()
	if err != nil {
		return err
	}
	q0, err := d.Drops()
	if err != nil {
		return err
	}
	res, err := srv.BulkFlow(c.Config.Bulk, pid)
	if err != nil {
		return err
	}
	s1, err := d.Stats()
	if err != nil {
		return err
	}
	q1, err := d.Drops()
	if err != nil {
		return err
	}
	arm := BulkArm{BulkResult: res, Held: s1.Held - s0.Held, Bypassed: s1.Bypassed - s0.Bypassed, Drops: q1 - q0}
	c.Bulk[backend] = append(c.Bulk[backend], arm)
	c.Own[backend] = s1
	// Every data segment is held, give or take a few in a thousand: edt
	// has counted a handful fewer than the sender's data segments in an
	// arm (which ones is not known yet), nfqueue none.
	if slack := max(4, uint64(res.Segs)/1000); d != nil && !RateOnly(backend) && (arm.Held+slack < uint64(res.Segs) || arm.Held > uint64(res.Segs)+slack) {
		c.problem("%s: %d packets delayed of the bulk flow's %d data segments (%d bypassed): not every packet of the flow was delayed",
			backend, arm.Held, res.Segs, arm.Bypassed)
	}
	return d.Stop()
}

// pingPongs runs the arm's ping-pong at each hold (none: once, unheld;
// a rate backend: not at all, it holds no packet for a time).
func (c *Cost) pingPongs(srv *Server, d *Daemon, backend string) error {
	if RateOnly(backend) {
		return nil
	}
	if c.RTT[backend] == nil {
		c.RTT[backend] = map[time.Duration][]time.Duration{}
	}
	holds := c.Config.Holds
	if d == nil {
		holds = []time.Duration{0}
	}
	for _, hold := range holds {
		if d != nil {
			if _, err := d.Throttle("--ip", ClientIP, "--delay", hold.String(), "--direction", "write"); err != nil {
				return err
			}
		}
		s0, err := d.Stats()
		if err != nil {
			return err
		}
		rtt, retrans, err := srv.PingPong(c.Config.Warm, c.Config.Pings)
		if err != nil {
			return err
		}
		s1, err := d.Stats()
		if err != nil {
			return err
		}
		if retrans != 0 {
			c.problem("%s at %v: the ping-pong retransmitted %d segments", backend, hold, retrans)
		}
		if d != nil && s1.Held-s0.Held < uint64(c.Config.Pings) {
			c.problem("%s at %v: %d packets delayed during %d held exchanges: not every reply was held",
				backend, hold, s1.Held-s0.Held, c.Config.Pings+c.Config.Warm)
		}
		c.RTT[backend][hold] = append(c.RTT[backend][hold], rtt...)
	}
	return nil
}

func (c *Cost) problem(format string, args ...any) {
	c.Problems = append(c.Problems, fmt.Sprintf(format, args...))
}

// Base is the median round trip without sanqos.
func (c *Cost) Base() time.Duration {
	none := slices.Clone(c.RTT["none"][0])
	slices.Sort(none)
	return Quantile(none, 0.5)
}

// Errors are a backend's hold errors at hold, sorted (none: its round
// trips' spread about their median).
func (c *Cost) Errors(backend string, hold time.Duration) []time.Duration {
	if backend == "none" {
		hold = 0
	}
	return HoldErrors(c.RTT[backend][hold], c.Base(), hold)
}

// checkHolds adds what no emulation can blur: no exchange came back
// sooner than its delay, and the median reply did not leave early.
func (c *Cost) checkHolds() {
	base := c.Base()
	for _, b := range c.Config.Backends {
		if b == "none" || RateOnly(b) {
			continue
		}
		for _, hold := range c.Config.Holds {
			e := c.Errors(b, hold)
			if len(e) == 0 {
				continue
			}
			if e[0]+base < 0 {
				c.problem("%s at %v: an exchange came back in %v, sooner than the delay", b, hold, e[0]+base+hold)
			}
			if p50 := Quantile(e, 0.5); p50 < 0 {
				c.problem("%s at %v: median hold error %v: replies left early", b, hold, p50)
			}
		}
	}
}

// Totals is one backend's bulk flows summed over its arms.
type Totals struct {
	Arms int
	// Pkts are the packets delayed (none and a rate backend: the data
	// segments sent, every one of which crossed the path).
	Pkts                    uint64
	CPU                     CPUSpan
	Wall                    time.Duration
	NsLo, NsHi              float64 // the lowest and highest arm's CPU (ours) ns per packet
	Bytes                   int64
	Segs, Retrans, Bypassed uint64
	Drops                   uint64 // the backend's kernel queue's
}

// NsPerPkt is CPU per packet: ours, and every CPU's busy time.
func (t Totals) NsPerPkt() float64     { return float64(t.CPU.Ours) / float64(max(t.Pkts, 1)) }
func (t Totals) BusyNsPerPkt() float64 { return float64(t.CPU.Busy) / float64(max(t.Pkts, 1)) }

// DaemonNsPerPkt is the daemon's own CPU per packet.
func (t Totals) DaemonNsPerPkt() float64 { return float64(t.CPU.Daemon) / float64(max(t.Pkts, 1)) }

// PerCore is packets/s per core of CPU (ours); BusyPerCore of every
// CPU's busy time.
func (t Totals) PerCore() float64     { return float64(t.Pkts) / max(t.CPU.Ours.Seconds(), 1e-9) }
func (t Totals) BusyPerCore() float64 { return float64(t.Pkts) / max(t.CPU.Busy.Seconds(), 1e-9) }

// Totals sums a backend's bulk arms.
func (c *Cost) Totals(b string) Totals {
	t := Totals{NsLo: 1e18}
	for _, arm := range c.Bulk[b] {
		pkts := arm.Held
		if b == "none" || RateOnly(b) {
			pkts = uint64(arm.Segs)
		}
		t.Arms++
		t.Pkts += pkts
		t.CPU.Busy += arm.CPU.Busy
		t.CPU.Ours += arm.CPU.Ours
		t.CPU.Daemon += arm.CPU.Daemon
		t.Wall += arm.Wall
		t.Bytes += arm.Bytes
		t.Segs += uint64(arm.Segs)
		t.Retrans += uint64(arm.Retrans)
		t.Bypassed += arm.Bypassed
		t.Drops += arm.Drops
		ns := float64(arm.CPU.Ours) / float64(max(pkts, 1))
		t.NsLo, t.NsHi = min(t.NsLo, ns), max(t.NsHi, ns)
	}
	return t
}

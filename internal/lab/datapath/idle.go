package datapath

import (
	"context"
	"fmt"
	"time"

	"github.com/sanqos/sanqos/internal/stats"
)

// IdleConfig is the shape of the idle measurement.
type IdleConfig struct {
	Backends []string // each measured with its own daemon, none excluded
	Bin      string
	// Pairs of arms per backend, ABBA: daemon running, daemon stopped
	// (SIGSTOP), then the other way round.
	Pairs int
	// Arm is each workload's time per arm (after a warm-up).
	Arm      time.Duration
	Progress func(format string, args ...any)
}

// Idle is one backend's idle measurement: per workload the rate of each
// arm, running and stopped, pair by pair.
type Idle struct {
	Backend string
	// Bulk (bytes/s) and RR (round trips/s), [0] stopped, [1] running.
	Bulk, RR [2][]float64
	// Retrans are the client's retransmitted segments in the uploads.
	Retrans [2]uint64
}

// Ratio is one workload's running/stopped ratios pair by pair, their
// median and its 99 % interval.
type Ratio struct {
	Median, Lo, Hi float64
	N              int
}

// Within says whether the interval lies inside 1 ± tol.
func (r Ratio) Within(tol float64) bool { return r.Lo >= 1-tol && r.Hi <= 1+tol }

func ratioOf(off, on []float64) Ratio {
	rs := make([]float64, min(len(off), len(on)))
	for i := range rs {
		rs[i] = on[i] / off[i]
	}
	med, lo, hi := stats.MedianCI(rs, 0.99)
	return Ratio{Median: med, Lo: lo, Hi: hi, N: len(rs)}
}

// BulkRatio and RRRatio are the running/stopped ratios of the workloads.
func (r Idle) BulkRatio() Ratio { return ratioOf(r.Bulk[0], r.Bulk[1]) }
func (r Idle) RRRatio() Ratio   { return ratioOf(r.RR[0], r.RR[1]) }

// MeasureIdle runs the idle measurement on a network Setup made, with
// the kernel's default segmentation offload: for each
// backend one daemon (StartIdle) runs throughout, held stopped (SIGSTOP)
// through the arms without it. With nobody throttled nothing of the
// daemon's is on the path, so what the two arms differ in is the
// daemon's own CPU and memory traffic: what an idle daemon can cost a
// transfer beside it.
func MeasureIdle(ctx context.Context, cfg IdleConfig) ([]Idle, error) {
	if err := SetOnePacketPerMSS(false); err != nil {
		return nil, err
	}
	defer SetOnePacketPerMSS(true)
	srv, err := StartServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	var out []Idle
	for _, b := range cfg.Backends {
		r, err := idleBackend(ctx, srv, cfg, b)
		if err != nil {
			return out, fmt.Errorf("idle %s: %w", b, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func idleBackend(ctx context.Context, srv *Server, cfg IdleConfig, b string) (Idle, error) {
	r := Idle{Backend: b}
	d, err := StartIdle(cfg.Bin, b)
	if err != nil {
		return r, err
	}
	defer d.Close()
	time.Sleep(300 * time.Millisecond) // a few ticks: the wire counters read
	for i := range cfg.Pairs {
		if cfg.Progress != nil && (i%5 == 0 || i == cfg.Pairs-1) {
			cfg.Progress("idle: %s, pair %d of %d", b, i+1, cfg.Pairs)
		}
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, a := range order {
			if err := ctx.Err(); err != nil {
				return r, err
			}
			if a == 1 {
				if err := d.Resume(); err != nil {
					return r, fmt.Errorf("resuming the daemon: %w", err)
				}
				time.Sleep(100 * time.Millisecond) // a tick: it is running again
			} else if err := d.Pause(); err != nil {
				return r, fmt.Errorf("stopping the daemon: %w", err)
			}
			bulk, retrans, err := srv.Upload(200*time.Millisecond, cfg.Arm)
			if err != nil {
				return r, err
			}
			rr, err := srv.RoundTrips(cfg.Arm)
			if err != nil {
				return r, err
			}
			r.Bulk[a] = append(r.Bulk[a], bulk)
			r.RR[a] = append(r.RR[a], rr)
			r.Retrans[a] += uint64(retrans)
		}
	}
	return r, d.Stop()
}

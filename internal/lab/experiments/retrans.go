package experiments

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// RetransmitEvent places retransmissions in time: a second of a run in
// which an initiator namespace's TcpRetransSegs rose, with what else the
// machine did in that second. StealMs is the time the hypervisor ran
// something else while one of this machine's CPUs had work (10 ms a
// clock tick): such a stall delays every thread at once, and a loss
// probe fires 2·SRTT plus 2 ms after the last ACK. HoldErrorMaxMs is the
// largest hold beyond the delay the daemon's ticks of that second report.
type RetransmitEvent struct {
	T              float64 `json:"t_s"` // end of the second, since the reader started
	Host           string  `json:"host"`
	Segments       uint64  `json:"segments"`
	StealMs        float64 `json:"steal_ms"`
	HoldErrorMaxMs float64 `json:"hold_error_max_ms"`
	// YieldMaxMs and WakeLateMaxMs say what held the packet thread up:
	// a yield to the Go scheduler, or a late wake-up by the kernel.
	YieldMaxMs    float64 `json:"yield_max_ms"`
	WakeLateMaxMs float64 `json:"wake_late_max_ms"`
	// Takeovers counts the times the daemon's standby thread ran the
	// packet path in that second, each for a packet thread that stalled.
	Takeovers uint64 `json:"takeovers"`
}

// tcpSample is one look at the run's initiators and the machine.
type tcpSample struct {
	T       float64           `json:"t_s"`
	Retrans map[string]uint64 `json:"retrans_segs"` // by host, cumulative
	StealMs float64           `json:"steal_ms"`     // all CPUs, cumulative
}

// nsProc is a process known to live in a host's network namespace: its
// /proc/PID/net/snmp holds that namespace's counters, read without
// starting a process in the namespace once a second.
type nsProc struct {
	host, ns string
	pid      int
}

// sampleTCP samples every second until ctx ends and returns the samples.
// A process that has left its namespace (ended) or not yet entered it
// (ip netns exec before its setns) is skipped in that sample.
func sampleTCP(ctx context.Context, procs []nsProc, t0 time.Time) []tcpSample {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil
	}
	var out []tcpSample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s := tcpSample{T: time.Since(t0).Seconds(), Retrans: map[string]uint64{}}
		if st, err := fs.Stat(); err == nil {
			s.StealMs = st.CPUTotal.Steal * 1000
		}
		for _, p := range procs {
			if _, ok := s.Retrans[p.host]; ok || !inNamespace(p.pid, p.ns) {
				continue
			}
			proc, err := fs.Proc(p.pid)
			if err != nil {
				continue
			}
			snmp, err := proc.Snmp()
			if err != nil || snmp.Tcp.RetransSegs == nil {
				continue
			}
			s.Retrans[p.host] = uint64(*snmp.Tcp.RetransSegs)
		}
		out = append(out, s)
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// inNamespace reports whether process pid is in the named network
// namespace (/run/netns/NAME, as ip netns names it).
func inNamespace(pid int, ns string) bool {
	var want, got unix.Stat_t
	if unix.Stat(filepath.Join("/run/netns", ns), &want) != nil ||
		unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/net", &got) != nil {
		return false
	}
	return want.Ino == got.Ino && want.Dev == got.Dev
}

// retransmitEvents finds the seconds in which a host's retransmissions
// rose between two samples that both saw it, and joins each with the
// steal time of that interval and the daemon's ticks inside it.
func retransmitEvents(samples []tcpSample, ticks []Tick) []RetransmitEvent {
	var out []RetransmitEvent
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		for _, h := range slices.Sorted(maps.Keys(cur.Retrans)) {
			before, ok := prev.Retrans[h]
			if !ok || cur.Retrans[h] <= before {
				continue
			}
			ev := RetransmitEvent{T: round1(cur.T), Host: h, Segments: cur.Retrans[h] - before,
				StealMs: round1(cur.StealMs - prev.StealMs)}
			var first, last uint64 // the standby's count before and at the end of the second
			for _, t := range ticks {
				if t.T <= prev.T {
					first = t.Takeovers
				}
				if t.T > prev.T && t.T <= cur.T {
					ev.HoldErrorMaxMs = max(ev.HoldErrorMaxMs, t.HoldErrMs)
					ev.YieldMaxMs = max(ev.YieldMaxMs, t.YieldMs)
					ev.WakeLateMaxMs = max(ev.WakeLateMaxMs, t.WakeLateMs)
					last = t.Takeovers
				}
			}
			if last > first {
				ev.Takeovers = last - first
			}
			out = append(out, ev)
		}
	}
	return out
}

// stealDuring is the steal time between the first and the last sample.
func stealDuring(samples []tcpSample) float64 {
	if len(samples) < 2 {
		return 0
	}
	return round1(samples[len(samples)-1].StealMs - samples[0].StealMs)
}

// describeEvents says in one line where a run's retransmissions fell.
func describeEvents(evs []RetransmitEvent) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = fmt.Sprintf("%d on %s at %.0f s (steal %.0f ms, held late ≤ %.1f ms, yield ≤ %.1f ms, woken late ≤ %.1f ms, standby took over %d×)",
			e.Segments, e.Host, e.T, e.StealMs, e.HoldErrorMaxMs, e.YieldMaxMs, e.WakeLateMaxMs, e.Takeovers)
	}
	return strings.Join(parts, ", ")
}

// writeSamples keeps the raw samples beside the run's other logs.
func writeSamples(path string, samples []tcpSample) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return f.Close()
}

package nfqbackend_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/nfqbackend"
	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// fixedDecider decides the same throttle state every tick.
type fixedDecider struct{ s throttle.State }

func (fixedDecider) SetTopology(topology.Topology) {}
func (d fixedDecider) Step(time.Time, []diskstats.Stat) daemon.Decision {
	return daemon.Decision{State: d.s}
}

type noDisks struct{}

func (noDisks) Read() ([]diskstats.Stat, []diskstats.LineError, error) { return nil, nil, nil }

// lockedBuf is a log sink the daemon's goroutines and the test share.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// repairs reads sanqos_kernel_repairs_total{object} from the daemon.
func repairs(t *testing.T, d *daemon.Daemon, object string) float64 {
	t.Helper()
	mfs, err := d.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sanqos_kernel_repairs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "object" && lp.GetValue() == object {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// held waits until round trips on c take at least min three times in a
// row, and says how long that took (false: not within limit).
func held(rl *nfqbackend.RepairLab, c net.Conn, min, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	n := 0
	for time.Since(start) < limit {
		if rl.RTT(c) >= min {
			n++
		} else {
			n = 0
		}
		if n == 3 {
			return time.Since(start), true
		}
	}
	return time.Since(start), false
}

// Another tool flushing what sanqos installed (a firewall reload, `nft
// flush ruleset`, `ipset flush`) must not switch throttling off for
// good: the daemon notices, says so once, counts it and re-installs
// everything within 10 s (audit N1).
func TestLiveRepairAfterExternalFlush(t *testing.T) {
	for _, tool := range []string{"nft", "ipset"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to flush with: %v", tool, err)
		}
	}
	rl := nfqbackend.NewRepairLab(t)
	const delay = 50 * time.Millisecond
	s := throttle.State{Groups: []throttle.Group{{Name: "tt", Members: []netip.Addr{netip.MustParseAddr(nfqbackend.ClientIP)},
		WriteDelay: delay, ReadDelay: delay}}}
	logs := &lockedBuf{}
	d, err := daemon.New(daemon.Options{Clock: clock.Real{}, Decider: fixedDecider{s}, Stats: noDisks{},
		Backend: rl.Backend, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c := rl.Dial()
	defer c.Close()
	if took, ok := held(rl, c, delay*4/5, 10*time.Second); !ok {
		t.Fatalf("the throttle never took hold (%v)", took)
	}
	for _, f := range []struct{ cmd, object string }{
		{"iptables -w -t mangle -F POSTROUTING", "jump"},
		{"nft flush ruleset", "chain"},
		{"ipset flush", "member"},
	} {
		warned, counted := logs.count("level=WARN"), repairs(t, d, f.object)
		rl.InTarget(t, f.cmd)
		if rtt := rl.RTT(c); rtt >= delay*4/5 {
			t.Errorf("%s: the next round trip still took %v: the flush did not switch the throttle off", f.cmd, rtt)
		}
		took, ok := held(rl, c, delay*4/5, 10*time.Second)
		if !ok {
			t.Errorf("%s: the throttle was not back within %v", f.cmd, took)
			continue
		}
		t.Logf("%s: throttle back in force after %v", f.cmd, took.Round(time.Millisecond))
		if n := logs.count("level=WARN") - warned; n != 1 {
			t.Errorf("%s: %d warnings logged, want 1:\n%s", f.cmd, n, logs.b.String())
		}
		if got := repairs(t, d, f.object) - counted; got < 1 {
			t.Errorf("%s: sanqos_kernel_repairs_total{object=%q} rose by %v, want at least 1", f.cmd, f.object, got)
		}
	}
	// What the kernel holds now reads back as installed: no drift that
	// a repair cannot clear (rules iptables-save prints otherwise).
	if drifts, err := rl.Backend.Verify(t.Context()); err != nil || len(drifts) != 0 {
		t.Errorf("after the repairs: drift %v, err %v", drifts, err)
	}
}

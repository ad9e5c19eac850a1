package main

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/attribution"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
)

// portsConfig writes text as the configuration file of dir and returns
// the command line that runs with it and its options.
func portsConfig(t *testing.T, dir, text string) ([]string, runOptions) {
	t.Helper()
	p := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", p, "--consumer", "fs,10.0.0.3,loop1"}
	o, err := parseRunOptions(args, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return args, o
}

// N8: a change of ports is reloadable. It is refused only where the
// running data path cannot follow: a new port whose small-segment split
// differs from the one the backend gives a port it was not started with,
// or read rates bound to the start-up ports; and the refusal names that,
// not "backend settings".
func TestReloadPorts(t *testing.T) {
	dir := t.TempDir()
	_, a := portsConfig(t, dir, "ports = [3260]\n")
	_, b := portsConfig(t, dir, "ports = [3260, 3263]\n")
	if got := restartOnly(a, b); len(got) != 0 {
		t.Errorf("adding port 3263 refused: %v", got)
	}
	if got := restartOnly(b, a); len(got) != 0 {
		t.Errorf("removing port 3263 refused: %v", got)
	}
	_, nfs := portsConfig(t, dir, "ports = [3260, 2049]\n")
	got := strings.Join(restartOnly(a, nfs), ", ")
	if want := "small segment of port 2049 (running 128 bytes, configured 256)"; got != want {
		t.Errorf("adding NFS's port: %q, want %q", got, want)
	}
	_, set := portsConfig(t, dir, "ports = [3260, 2049]\n[small_segment]\n\"2049\" = 128\n")
	if got := restartOnly(a, set); len(got) != 0 {
		t.Errorf("adding port 2049 with the running split refused: %v", got)
	}
	_, rates := portsConfig(t, dir, "ports = [3260]\nrate_dev = \"eth1\"\n[manual]\nread_rates = { \"10.0.0.4\" = \"10MB/s\" }\n")
	_, ratesMoved := portsConfig(t, dir, "ports = [3260, 3263]\nrate_dev = \"eth1\"\n[manual]\nread_rates = { \"10.0.0.4\" = \"10MB/s\" }\n")
	if got := strings.Join(restartOnly(rates, ratesMoved), ", "); !strings.Contains(got, "manual.read_rates") || strings.Contains(got, "backend") {
		t.Errorf("ports moved under read rates: %q, want the read rates named", got)
	}
}

// portsWire is a wire counter that records the ports it counts.
type portsWire struct {
	ports []uint16
	small map[uint16]int
	fail  bool
}

func (w *portsWire) SetClients([]netip.Addr) error { return nil }
func (w *portsWire) Read() (map[netip.Addr]attribution.Counters, error) {
	return map[netip.Addr]attribution.Counters{}, nil
}
func (w *portsWire) SetPorts(_ context.Context, ports []uint16, small map[uint16]int) error {
	if w.fail && len(ports) > 1 {
		return io.ErrClosedPipe
	}
	w.ports, w.small = slices.Clone(ports), maps.Clone(small)
	return nil
}

type noStats struct{}

func (noStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) { return nil, nil, nil }

// N8: a reload of the ports moves the wire counters to them (else the
// clients of a new port count as not writing); when they cannot follow,
// the reload is refused and they count the running ports.
func TestReloadPortsMovesWireCounters(t *testing.T) {
	for _, fail := range []bool{false, true} {
		dir := t.TempDir()
		args, o := portsConfig(t, dir, "ports = [3260]\n")
		eng, err := engine.New(o.engine, o.topo)
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		d, err := daemon.New(daemon.Options{Clock: clock.NewFake(time.Unix(0, 0)), Decider: daemon.FromEngine(eng, o.ports, nil),
			Stats: noStats{}, Backend: throttle.NewDryRun(log), Logger: log, Topology: o.topo})
		if err != nil {
			t.Fatal(err)
		}
		w := &portsWire{ports: o.ports, fail: fail}
		r := &reloader{args: args, cur: o, d: d, log: log, wire: w}
		portsConfig(t, dir, "ports = [3260, 3263]\n")
		err = r.reload(t.Context())
		switch {
		case !fail && err != nil:
			t.Fatalf("reload of ports [3260, 3263]: %v", err)
		case !fail && (!slices.Equal(w.ports, []uint16{3260, 3263}) || w.small[3263] != throttle.DefaultSmallSegment):
			t.Errorf("wire counts ports %v with splits %v, want 3260 and 3263", w.ports, w.small)
		case !fail && !slices.Equal(r.cur.ports, []uint16{3260, 3263}):
			t.Errorf("running ports %v after the reload", r.cur.ports)
		case fail && (err == nil || !strings.Contains(err.Error(), "nothing was reloaded")):
			t.Errorf("wire counters failed to move, reload error %v", err)
		case fail && (!slices.Equal(w.ports, []uint16{3260}) || !slices.Equal(r.cur.ports, []uint16{3260})):
			t.Errorf("after a refused reload the wire counts %v, the daemon runs %v; want 3260", w.ports, r.cur.ports)
		}
	}
}

package guesttest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/datapath"
	"github.com/sanqos/sanqos/internal/lab/vm"
)

// The measurement's network, as the IPv6 test shares it.
const (
	dpTargetNS  = datapath.TargetNS
	dpClientNS  = datapath.ClientNS
	dpTargetDev = datapath.TargetDev
	dpClientDev = datapath.ClientDev
	dpPort      = datapath.Port
	dpMsg       = datapath.Msg
)

var inNS = datapath.InNS

// TestDatapathCost (issue 35) measures each delay backend's data path
// side by side with no sanqos, in one guest, over veth between two
// network namespaces, in interleaved rounds (each round runs every
// backend once, the order rotated), with internal/lab/datapath:
//
//   - hold error: a TCP ping-pong of small requests and replies whose
//     replies the backend holds D (write direction): per exchange, its
//     round trip minus the median round trip without sanqos minus D.
//   - cost per delayed packet: a bulk flow from the target to the client
//     whose every data segment the backend holds 1 ms (read direction),
//     against the guest's busy CPU time (and the daemon's own).
//
// It prints a table of every number and the two criteria as
// measured, and asserts only what emulation cannot blur: every packet of
// the bulk flow was delayed, no exchange came back sooner than its delay
// and the median hold error is not negative (nothing left early), and
// the ping-pong retransmitted nothing. The guest runs under qemu's TCG:
// its absolute figures are an emulator's, its ratios are what to read.
//
// SANQOS_DATAPATH_BACKENDS (default none,nfqueue,edt) and
// SANQOS_DATAPATH_BIN (default the guest's sanqos) let it run elsewhere,
// e.g. nfqueue on a host whose kernel has no fq.
func TestDatapathCost(t *testing.T) {
	inGuest(t)
	backends := []string{"none", "nfqueue", "edt"}
	if s := os.Getenv("SANQOS_DATAPATH_BACKENDS"); s != "" {
		backends = strings.Split(s, ",")
		if !slices.Contains(backends, "none") {
			t.Fatalf("SANQOS_DATAPATH_BACKENDS=%q: the list needs none, the baseline", s)
		}
	}
	bin := vm.GuestBin
	if s := os.Getenv("SANQOS_DATAPATH_BIN"); s != "" {
		bin = s
	}
	dpSetup(t)
	// The shape is kept to a few minutes of emulated guest time.
	cfg := datapath.CostConfig{Backends: backends, Bin: bin, Warm: 40, Pings: 200, Rounds: 4, Bulk: 3 * time.Second,
		Holds: []time.Duration{time.Millisecond, 5 * time.Millisecond}, ReadDelay: time.Millisecond, RateCap: "100MB/s"}
	c, err := datapath.MeasureCost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "datapath: %d rounds of %s took %v (guest clock)\n", cfg.Rounds, strings.Join(backends, ", "), c.Took.Round(time.Second))
	var out strings.Builder
	c.HoldTable(&out)
	fmt.Fprintln(&out)
	c.BulkTable(&out)
	fmt.Fprintln(&out)
	c.Criteria(&out)
	fmt.Fprint(os.Stderr, out.String())
	for _, p := range c.Problems {
		t.Error(p)
	}
}

// dpSetup creates the namespaces and the veth pair, removed at the end
// of the test (and first, what a killed earlier run left).
func dpSetup(t *testing.T) {
	t.Helper()
	t.Cleanup(datapath.Teardown)
	if err := datapath.Setup(); err != nil {
		t.Fatal(err)
	}
}

// dpDaemon is a datapath.Daemon that fails the test on errors.
type dpDaemon struct{ d *datapath.Daemon }

// startDaemon starts 'sanqos run --manual' with backend in the target
// namespace, ended with the test.
func startDaemon(t *testing.T, bin, backend string) *dpDaemon {
	t.Helper()
	d, err := datapath.StartManual(bin, backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return &dpDaemon{d}
}

func (d *dpDaemon) throttle(t *testing.T, args ...string) string {
	t.Helper()
	out, err := d.d.Throttle(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (d *dpDaemon) stats(t *testing.T) datapath.Stats {
	t.Helper()
	s, err := d.d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (d *dpDaemon) stop(t *testing.T) {
	t.Helper()
	if err := d.d.Stop(); err != nil {
		t.Error(err)
	}
}

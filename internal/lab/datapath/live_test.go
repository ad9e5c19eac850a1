package datapath

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
)

// TestLiveMeasure runs both measurements at their smallest, none and
// nfqueue, and checks their shape and that the namespaces are gone
// after: as root, when no lab or experiment holds the lab's lock (the
// measurement's namespaces are the experiment's).
func TestLiveMeasure(t *testing.T) {
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("needs root, and not -short: it builds sanqos and runs a daemon")
	}
	for _, c := range []string{"ip", "nsenter", "iptables", "tc", "go"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("no %s", c)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	release, err := lab.Hold(ctx, nil)
	cancel()
	if err != nil {
		t.Skipf("the lab's lock is held (a lab or an experiment runs): %v", err)
	}
	defer release()
	bin := filepath.Join(t.TempDir(), "sanqos")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sanqos/sanqos/cmd/sanqos").CombinedOutput(); err != nil {
		t.Fatalf("building sanqos: %v\n%s", err, out)
	}
	defer Teardown()
	if err := Setup(); err != nil {
		t.Fatal(err)
	}
	idle, err := MeasureIdle(context.Background(), IdleConfig{Backends: []string{"nfqueue"}, Bin: bin, Pairs: 2, Arm: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(idle) != 1 || len(idle[0].Bulk[0]) != 2 || len(idle[0].RR[1]) != 2 || idle[0].Bulk[1][0] <= 0 || idle[0].RR[0][0] <= 0 {
		t.Errorf("idle: %+v: want 2 pairs of positive rates", idle)
	}
	cfg := CostConfig{Backends: []string{"none", "nfqueue"}, Bin: bin, Warm: 10, Pings: 20, Rounds: 1, Bulk: 300 * time.Millisecond,
		Holds: []time.Duration{time.Millisecond}, ReadDelay: time.Millisecond}
	c, err := MeasureCost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Problems {
		t.Error(p)
	}
	if e := c.Errors("nfqueue", time.Millisecond); len(e) != 20 || e[0]+c.Base() < 0 {
		t.Errorf("nfqueue's hold errors %v: want 20, none back before the delay", e)
	}
	if tot := c.Totals("nfqueue"); tot.Pkts == 0 || tot.CPU.Ours <= 0 || tot.CPU.Daemon <= 0 {
		t.Errorf("nfqueue's bulk totals %+v: want packets delayed and CPU counted, the daemon's too", tot)
	}
	Teardown()
	for _, ns := range []string{TargetNS, ClientNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}

package experiments

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
)

// TestSweepEndToEnd runs fig5.5 --short on the real lab: b2 reads 16 MB
// twice with no delay and twice with its data segments held 9.6 ms by the
// observing daemon (set through its control socket, as 'sanqos throttle'
// does). The delayed transfers must take longer, by more than their
// noise: the thesis's claim that the delay throttles reads predictably.
// About two minutes, as root.
func TestSweepEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds the lab and runs the daemon's nfqueue backend")
	}
	for _, tool := range []string{"tgtd", "tgtadm", "iptables", "ipset", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps): %v", tool, err)
		}
	}
	if testing.Short() {
		t.Skip("takes about two minutes; not in -short")
	}
	bin := t.TempDir()
	sanqos, loadgen := buildBinaries(t, bin)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	o := Options{Out: out, Sanqos: sanqos, Short: true, Progress: testWriter{t}}
	var s *Summary
	x, err := Lookup("fig5.5")
	if err != nil {
		t.Fatal(err)
	}
	err = WithLab(ctx, o, lab.Options{Loadgen: loadgen, Progress: testWriter{t}}, func(l *lab.Lab) error {
		var err error
		s, err = x.RunOn(ctx, l, o)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Sweep
	if r == nil || len(r.Steps) != 2 {
		t.Fatalf("sweep result %+v, want two steps", r)
	}
	free, held := r.Steps[0], r.Steps[1]
	t.Logf("16 MB read: %.3f ± %.4f s (%.1f MB/s) with no delay, %.3f ± %.4f s (%.1f MB/s) at 9.6 ms",
		free.MeanS, free.SES, free.MBs, held.MeanS, held.SES, held.MBs)
	if !r.Monotonic || !(held.MeanS > 2*free.MeanS) {
		t.Errorf("a 9.6 ms read delay took the transfer from %.3f s to %.3f s: want more than twice as long", free.MeanS, held.MeanS)
	}
	if len(s.Plots) != 1 {
		t.Errorf("plots %v, want the sweep's", s.Plots)
	}
}

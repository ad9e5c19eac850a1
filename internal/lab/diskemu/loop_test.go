package diskemu

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func needFio(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("no fio (apt-get install fio)")
	}
}

// fioResult is the part of fio's JSON output the tests read.
type fioResult struct {
	Jobs []struct {
		Read  fioDir `json:"read"`
		Write fioDir `json:"write"`
	} `json:"jobs"`
}

type fioDir struct {
	IOPS float64 `json:"iops"`
	BW   float64 `json:"bw_bytes"`
	Clat struct {
		Mean float64 `json:"mean"` // ns
	} `json:"clat_ns"`
	TotalIOs int64 `json:"total_ios"`
}

func runFio(t testing.TB, args ...string) fioDir {
	t.Helper()
	out := fio(t, append([]string{"--output-format=json"}, args...)...)
	// fio may print warnings before the JSON document.
	if i := strings.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var r fioResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Jobs) == 0 {
		t.Fatalf("parsing fio output: %v\n%s", err, out)
	}
	if r.Jobs[0].Write.TotalIOs > 0 {
		return r.Jobs[0].Write
	}
	return r.Jobs[0].Read
}

// loopRAwait runs a synchronous 8 KiB random direct reader on a loop
// device attached (with direct I/O) to an image on a fresh mount of
// profile, and returns r_await from /proc/diskstats and the mount's stats.
func loopRAwait(t *testing.T, profile string, runtime time.Duration) (float64, Stats) {
	s := mountT(t, Options{Profile: profile, Seed: 1, Nice: -10})
	img := filepath.Join(s.Mountpoint(), "lun0.img")
	makeImage(t, img, 1<<30)
	dev := loopAttach(t, img)
	dio, err := os.ReadFile("/sys/block/" + dev + "/loop/dio")
	if err != nil || strings.TrimSpace(string(dio)) != "1" {
		t.Fatalf("%s: /sys/block/%s/loop/dio = %q (%v), want 1: direct I/O did not take", profile, dev, dio, err)
	}
	r0, ms0 := diskstat(t, dev)
	runFio(t, "--name=r", "--filename=/dev/"+dev, "--ioengine=psync", "--direct=1",
		"--rw=randread", "--bs=8k", "--time_based", "--runtime="+runtime.String())
	r1, ms1 := diskstat(t, dev)
	if r1-r0 < 50 {
		t.Fatalf("%s: only %d reads reached %s", profile, r1-r0, dev)
	}
	rAwait := float64(ms1-ms0) / float64(r1-r0)
	st := s.Stats()
	t.Logf("%-12s %s: %d reads, r_await %.3f ms; model service %.3f ms, FUSE reply %.3f ms, backing pread %.3f ms",
		profile, dev, r1-r0, rAwait, st.ReadServiceMs, st.ReadLatencyMs, st.BackingMs)
	return rAwait, st
}

// TestLoopDirectIOLatency proves the lab's arrangement on this kernel: an
// image on the emulated disk attached to a loop device with direct I/O
// shows the model's service time as r_await in /proc/diskstats.
//
// The kernel path (loop worker, FUSE, wake-ups) adds 0.1 ms on an
// idle machine and 0.6-1.3 ms at load 8-11 on 2 cores, hence a 10 ms
// calibration service (a ±20% band of 2 ms). The thesis profile is then
// checked against its own model service plus that same overhead, measured
// side by side.
func TestLoopDirectIOLatency(t *testing.T) {
	needFUSE(t)
	needFio(t)
	const service = 10.0 // ms
	fixed, _ := loopRAwait(t, "fixed:10ms", 3*time.Second)
	if math.Abs(fixed/service-1) > 0.2 {
		t.Errorf("fixed:10ms gives r_await %.2f ms, want %.0f ms ± 20%%", fixed, service)
	}
	ram, _ := loopRAwait(t, "ram", 2*time.Second)
	if ram > 0.1*fixed {
		t.Errorf("ram adds %.3f ms per read, want < 10%% of fixed:10ms's %.2f ms", ram, fixed)
	}
	if testing.Short() {
		return
	}
	overhead := max(fixed-service, 0)
	thesis, st := loopRAwait(t, "thesis-2010", 3*time.Second)
	if want := st.ReadServiceMs + overhead; math.Abs(thesis/want-1) > 0.2 {
		t.Errorf("thesis-2010 r_await %.2f ms, want model service %.2f ms + path overhead %.2f ms ± 20%%",
			thesis, st.ReadServiceMs, overhead)
	}
}

// TestLoopQueueDepth: with FUSE_ASYNC_DIO a loop device passes its queue to
// the model (fio iodepth 8 puts ~8 requests in flight); without it the
// kernel serialises them (at most 1), which is why the INIT shim exists.
func TestLoopQueueDepth(t *testing.T) {
	needFUSE(t)
	needFio(t)
	for _, sync := range []bool{false, true} {
		s := mountT(t, Options{Profile: "fixed:2ms", SyncDIO: sync})
		img := filepath.Join(s.Mountpoint(), "lun.img")
		makeImage(t, img, 256<<20)
		dev := loopAttach(t, img)
		runFio(t, "--name=q", "--filename=/dev/"+dev, "--ioengine=libaio", "--iodepth=8", "--direct=1",
			"--rw=randread", "--bs=8k", "--time_based", "--runtime=1s")
		maxQ := s.Stats().MaxInFlight
		t.Logf("sync_dio=%v: max in flight %d", sync, maxQ)
		if sync && maxQ != 1 {
			t.Errorf("without async DIO max in flight %d, want 1 (kernel behaviour changed?)", maxQ)
		}
		if !sync && maxQ < 6 {
			t.Errorf("with async DIO max in flight %d, want >= 6 of fio's 8", maxQ)
		}
	}
}

// TestCloseWhileLoopAttached: closing while a loop device still holds an
// image is an error that names the cause, does not hang, and the loop
// device keeps working until it is detached (the server stays up).
func TestCloseWhileLoopAttached(t *testing.T) {
	needFUSE(t)
	d := testDir(t)
	s, err := Mount(Options{Mountpoint: filepath.Join(d, "mnt"), BackingDir: filepath.Join(d, "b"), Profile: "ram"})
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(s.Mountpoint(), "busy.img")
	makeImage(t, img, 16<<20)
	dev := loopAttach(t, img) // detached by its cleanup, after this test's body
	start := time.Now()
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "losetup") {
		t.Fatalf("Close with an attached loop device: %v, want an error pointing at losetup", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	f, err := os.Open("/dev/" + dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Errorf("loop device after a lazy unmount: %v", err)
	}
}

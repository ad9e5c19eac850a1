package blkprobe

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/stats"
)

// The measurements of issue 13: how much the probe costs at high IOPS and
// how well its percentiles agree with the load generator's. They take about
// a few minutes of fio and are timing claims on a shared machine, so they
// run only when asked:
//
//	SANQOS_PROBE_MEASURE=1 go test -count=1 -v -run Measure ./internal/observe/blkprobe
//
// SANQOS_PROBE_PAIRS sets how many attached/detached pairs of half-second
// phases the overhead measurement takes per case (default 120, about two
// minutes): the median's 99 % interval narrows as 1/√pairs, so a probe
// whose cost lies near the 2 % limit needs more of them to be decided
// (each pair takes a second per case: give go test a -timeout to match).

func needMeasure(t *testing.T) {
	t.Helper()
	if os.Getenv("SANQOS_PROBE_MEASURE") == "" {
		t.Skip("a minute of fio timing: set SANQOS_PROBE_MEASURE=1 to run")
	}
	needRoot(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("needs fio (make deps)")
	}
}

// fioResult is the part of fio's JSON output we use.
type fioResult struct {
	Jobs []struct {
		Read struct {
			IOPS     float64 `json:"iops"`
			TotalIOs uint64  `json:"total_ios"`
			ClatNs   struct {
				Mean       float64            `json:"mean"`
				Percentile map[string]float64 `json:"percentile"`
			} `json:"clat_ns"`
		} `json:"read"`
	} `json:"jobs"`
}

// runFioWith runs one random direct reader at queue depth 1 on dev, with
// the block size and further fio arguments given, under the command prefix
// (e.g. chrt).
func runFioWith(t *testing.T, prefix []string, dev string, secs int, bs string, extra ...string) fioResult {
	t.Helper()
	args := append([]string{"--name=sanqos-probe", "--filename=/dev/" + dev, "--rw=randread", "--bs=" + bs,
		"--direct=1", "--ioengine=psync", "--iodepth=1", "--time_based", "--runtime=" + strconv.Itoa(secs),
		"--percentile_list=50:95:99", "--output-format=json"}, extra...)
	argv := append(append(append([]string(nil), prefix...), "fio"), args...)
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("fio on %s: %v", dev, err)
	}
	var r fioResult
	if err := json.Unmarshal(out, &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("fio output: %v\n%s", err, out)
	}
	return r
}

func fioPct(r fioResult, p string) time.Duration {
	return time.Duration(r.Jobs[0].Read.ClatNs.Percentile[p])
}

// TestMeasureOverhead measures the probe's cost in two cases, each a fio
// job run while the probe's programs are attached and detached every half
// second (the probe sampled every 100 ms like the daemon's tick), in ABBA
// order so that drift cancels:
//
//   - "disk": 4 KiB random reads at queue depth 16 (libaio) on a loop
//     device over a file on this machine's disk: a flash-like device under
//     a high IOPS load.
//   - "tmpfs": 4 KiB random reads at queue depth 1 on a loop device over
//     tmpfs, where a read takes a few µs and the CPU, not a device, sets
//     the rate: the worst case for a per-request program.
//
// The reads completed in each phase come from /proc/diskstats, which does
// not depend on the probe, and each phase's IOPS is compared with its
// neighbour's: side by side within a second, so the neighbours' load on
// this shared machine moves both alike. The verdict is on the median of
// the pairs' attached/detached ratios with its distribution-free 99 %
// confidence interval: the probe keeps ≥ 98 % of the throughput when the
// whole interval is at or above 0.98, costs more when the whole interval
// is below, and the test skips, saying so, when the interval straddles
// 0.98 (this machine's neighbours were too loud to decide). The kernel's
// run-time statistics of the two programs (BPF_ENABLE_STATS, for this
// process's lifetime) give the CPU time the probe adds per read; they
// include the statistics' own clock reads, so they bound the cost from
// above, and must stay under 5 % of a read's time.
func TestMeasureOverhead(t *testing.T) {
	needMeasure(t)
	clearLeftovers(t)
	for _, c := range []struct {
		name    string
		tmpfs   bool
		fioArgs []string
	}{
		{"disk", false, []string{"--ioengine=libaio", "--iodepth=16"}},
		{"tmpfs", true, []string{"--ioengine=psync", "--iodepth=1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := loopDevice(t, 256<<20, c.tmpfs)
			ratios, offIOPS := measureOverhead(t, dev, c.fioArgs, measurePairs(t))
			if m := stats.Median(offIOPS); m < 20000 {
				t.Skipf("the device gave %.0f IOPS detached, under the 20k the measurement is for: the machine is busy", m)
			}
			med, lo, hi := stats.MedianCI(ratios, 0.99)
			t.Logf("attached/detached IOPS: median %.4f, 99 %% interval %.4f–%.4f over %d pairs at %.0f IOPS",
				med, lo, hi, len(ratios), stats.Median(offIOPS))
			switch {
			case hi < minOverheadRatio:
				t.Errorf("attached/detached IOPS median %.4f (99 %%: %.4f–%.4f): the probe costs over %.0f %% of throughput",
					med, lo, hi, 100*(1-minOverheadRatio))
			case lo < minOverheadRatio:
				t.Skipf("cannot decide at 99 %%: the interval %.4f–%.4f straddles %.2f (this machine's other load moves single phases by more than the probe)",
					lo, hi, minOverheadRatio)
			}
		})
	}
}

// measurePairs is SANQOS_PROBE_PAIRS, or 120.
func measurePairs(t *testing.T) int {
	v := os.Getenv("SANQOS_PROBE_PAIRS")
	if v == "" {
		return 120
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 16 {
		t.Fatalf("SANQOS_PROBE_PAIRS=%q: want a whole number of pairs, at least 16", v)
	}
	return n
}

// minOverheadRatio: the probe attached keeps at least this share of the
// detached throughput (issue 13: under 2 % of throughput).
const minOverheadRatio = 0.98

// measureOverhead runs fio (4 KiB random direct reads, fioArgs for the
// engine and depth) on dev, attaching the probe in ABBA phases, and
// returns each pair's attached/detached IOPS ratio and detached IOPS.
// Then, still under the same load, it attaches the probe for two more
// seconds with the kernel's run-time statistics on (they slow every program
// run, so they are off while the ratio is measured) and reports the CPU
// time per read.
func measureOverhead(t *testing.T, dev string, fioArgs []string, pairs int) (ratios, offIOPS []float64) {
	t.Helper()
	p, err := Open([]string{dev}, Options{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("probe unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.detach(); err != nil {
		t.Fatal(err)
	}
	defer sampleEvery(t, p, 100*time.Millisecond)()

	fio := exec.Command("fio", append([]string{"--name=sanqos-probe", "--filename=/dev/" + dev, "--rw=randread", "--bs=4k",
		"--direct=1", "--time_based", "--runtime=" + strconv.Itoa(pairs+30), "--output-format=json"}, fioArgs...)...)
	if err := fio.Start(); err != nil {
		t.Fatalf("starting fio: %v", err)
	}
	defer fio.Wait()
	defer fio.Process.Signal(unix.SIGINT)
	time.Sleep(time.Second) // fio's start

	ratios, offIOPS = abbaPhases(t, p, dev, 2*pairs)
	t.Logf("attached/detached IOPS over %d pairs: median %.3f, mean %.3f, range %.3f–%.3f; detached median %.0f IOPS",
		len(ratios), stats.Median(ratios), mean(ratios), slices.Min(ratios), slices.Max(ratios), stats.Median(offIOPS))
	perRead := probeCPUPerRead(t, p, dev)
	readTime := time.Duration(float64(time.Second) / stats.Median(offIOPS))
	t.Logf("probe programs: %v of CPU per read of %s (every device's requests run them and are charged here) = %.2f %% of a read's time (%v at the detached median IOPS)",
		perRead, dev, 100*float64(perRead)/float64(readTime), readTime)
	if float64(perRead) > 0.05*float64(readTime) {
		t.Errorf("probe costs %v per read, %.1f %% of a read's %v", perRead, 100*float64(perRead)/float64(readTime), readTime)
	}
	return ratios, offIOPS
}

// sampleEvery samples p every period, as the daemon's tick does, until
// the returned stop is called.
func sampleEvery(t *testing.T, p *Probe, period time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan error)
	go func() {
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-quit:
				done <- nil
				return
			case now := <-tk.C:
				if _, err := p.Sample(now); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	return func() {
		close(quit)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// abbaPhases runs phases of 0.5 s, the probe detached, attached, attached,
// detached, …, and returns per pair the attached/detached IOPS ratio and
// the detached IOPS, from /proc/diskstats. It checks that the probe timed
// every read diskstats counted while it was attached.
func abbaPhases(t *testing.T, p *Probe, dev string, phases int) (ratios, offIOPS []float64) {
	before, err := p.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	on := []bool{false, true, true, false}
	iops := make([]float64, phases)
	var phaseReads uint64
	for i := 0; i < phases; i++ {
		if on[i%4] {
			if err := p.attach(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond) // let the change settle
		r0, _, _, _ := diskstatsReads(t, dev)
		t0 := time.Now()
		time.Sleep(450 * time.Millisecond)
		r1, _, _, _ := diskstatsReads(t, dev)
		iops[i] = float64(r1-r0) / time.Since(t0).Seconds()
		if on[i%4] {
			phaseReads += r1 - r0
			if err := p.detach(); err != nil {
				t.Fatal(err)
			}
		}
	}
	after, err := p.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if timed := after.Sub(before).Devices[dev].Read.Count; timed < phaseReads {
		t.Errorf("probe timed %d reads, diskstats counted %d in the attached phases", timed, phaseReads)
	}
	for i := 0; i+1 < phases; i += 2 {
		a, b := iops[i], iops[i+1] // ABBA: (off,on), (on,off)
		if on[i%4] {
			a, b = b, a
		}
		offIOPS = append(offIOPS, a)
		ratios = append(ratios, b/a)
	}
	return ratios, offIOPS
}

// probeCPUPerRead attaches p for two seconds with the kernel's BPF
// run-time statistics on and returns the programs' CPU time per read of
// dev completed meanwhile.
func probeCPUPerRead(t *testing.T, p *Probe, dev string) time.Duration {
	runStats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatalf("enabling BPF run-time statistics: %v", err)
	}
	defer runStats.Close()
	progTime := func() (d time.Duration) {
		for _, prog := range p.coll.Programs {
			st, err := prog.Stats()
			if err != nil {
				t.Fatal(err)
			}
			d += st.Runtime
		}
		return d
	}
	t0 := progTime()
	r0, _, _, _ := diskstatsReads(t, dev)
	if err := p.attach(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := p.detach(); err != nil {
		t.Fatal(err)
	}
	r1, _, _, _ := diskstatsReads(t, dev)
	return (progTime() - t0) / time.Duration(max(r1-r0, 1))
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// TestMeasureAgreementWithFio runs one steady reader (500 reads/s, queue
// depth 1) on a loop device over a file on the real disk, so that a read
// takes what it takes on flash, and compares the probe's p50/p95 over the
// run with fio's completion-latency percentiles of the same reads. fio runs
// SCHED_FIFO so that the machine's other load does not delay its wake-ups:
// the comparison is of the I/O path, not of the CPU scheduler. 4 KiB reads
// show the fixed part above the block layer most, larger ones make the
// device's time dominate.
func TestMeasureAgreementWithFio(t *testing.T) {
	needMeasure(t)
	if _, err := exec.LookPath("chrt"); err != nil {
		t.Skip("needs chrt (util-linux)")
	}
	clearLeftovers(t)
	dev := loopDevice(t, 256<<20, false)
	p, err := Open([]string{dev}, Options{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("probe unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, bs := range []string{"4k", "64k", "256k"} {
		before, err := p.Sample(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		f := runFioRT(t, dev, 8, bs)
		after, err := p.Sample(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		d := after.Sub(before).Devices[dev]
		missed, err := p.Missed()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bs %s: missed runs so far %d, untimed %d, untracked %d", bs, missed, d.Untimed, d.Untracked)
		t.Logf("bs %s: fio %d reads, clat mean %v; probe %d reads, mean %v", bs, f.Jobs[0].Read.TotalIOs,
			time.Duration(f.Jobs[0].Read.ClatNs.Mean), d.Read.Count, d.Read.Mean())
		// fio's clat also holds the path above the request (system call,
		// pinning pages, bio and plug, its own wake-up): a constant added
		// to every read, like the network round trip the lab subtracts.
		// It is estimated as the difference of the means, and the
		// percentiles compared after removing it.
		above := time.Duration(f.Jobs[0].Read.ClatNs.Mean) - d.Read.Mean()
		for _, c := range []struct {
			name  string
			fio   time.Duration
			probe time.Duration
		}{
			{"p50", fioPct(f, "50.000000"), d.Read.P50()},
			{"p95", fioPct(f, "95.000000"), d.Read.P95()},
			{"p99", fioPct(f, "99.000000"), d.Read.P99()},
		} {
			raw := float64(c.probe) / float64(c.fio)
			net := float64(c.probe) / float64(c.fio-above)
			t.Logf("  %s %-4s fio %v probe %v: probe/fio %.3f; fio − mean path above (%v) = %v: probe/that %.3f",
				bs, c.name, c.fio, c.probe, raw, above, c.fio-above, net)
			if c.name == "p99" {
				continue
			}
			if c.probe > c.fio+c.fio/50 {
				t.Errorf("bs %s %s: probe %v above fio's %v: the block layer is only part of fio's path", bs, c.name, c.probe, c.fio)
			}
			if math.Abs(1-net) > 0.10 {
				t.Errorf("bs %s %s: probe %v and fio %v − %v differ by more than 10 %%", bs, c.name, c.probe, c.fio, above)
			}
		}
	}
}

// runFioRT is runFio at 500 reads/s under SCHED_FIFO.
func runFioRT(t *testing.T, dev string, secs int, bs string) fioResult {
	t.Helper()
	return runFioWith(t, []string{"chrt", "-f", "20"}, dev, secs, bs, "--rate_iops=500")
}

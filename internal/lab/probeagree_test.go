package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/blkprobe"
)

// TestProbeAgreesWithLoadgen holds the eBPF block-layer probe to the
// latencies the lab's load generator measures itself, on a steady single
// reader (8 KiB random reads on b2's LUN for 20 s): the probe must count
// the same reads, and its p50 and p95 must agree within 10 % with the
// initiator's less the network round trip (the median time of a TCP
// handshake from b2 to the portal, which involves no process). The rest
// of the path above the block layer (libiscsi, tgtd, the loop device's
// submission) is measured as the difference of the two means and
// reported; when it is so long that it, not the disk, decides the
// comparison (a loaded machine), the test skips and says by how much.
func TestProbeAgreesWithLoadgen(t *testing.T) {
	requireLab(t)
	if testing.Short() {
		t.Skip("a 20 s live measurement; not in -short")
	}
	loadgen := buildLoadgen(t)
	l := upForTest(t, loadgen)
	in, err := l.Initiator("b2")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := blkprobe.Open([]string{in.Loop}, blkprobe.Options{})
	if errors.Is(err, blkprobe.ErrUnavailable) {
		t.Skipf("the eBPF probe cannot run on this kernel: %v", err)
	}
	if err != nil {
		t.Fatalf("opening the probe on %s: %v", in.Loop, err)
	}
	defer probe.Close()

	rtt := handshakeRTT(t, in.NS, l.Target().Portal())
	ioLog := filepath.Join(t.TempDir(), "io.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, err := l.LoadCommand(ctx, "b2", "--rw", "randread", "--bs", "8k", "--size", "512m", "--runtime", "20s", "--io-log", ioLog)
	if err != nil {
		t.Fatal(err)
	}
	before, err := probe.Sample(time.Now())
	if err != nil {
		t.Fatalf("sampling the probe: %v", err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("load generator: %v\n%s", err, out)
	}
	after, err := probe.Sample(time.Now())
	if err != nil {
		t.Fatalf("sampling the probe: %v", err)
	}
	reads := after.Sub(before).Devices[in.Loop].Read
	lg := readIOLatencies(t, ioLog)
	if len(lg) < 500 {
		t.Fatalf("the load generator completed only %d reads in 20 s", len(lg))
	}

	if diff := math.Abs(float64(reads.Count)-float64(len(lg))) / float64(len(lg)); diff > 0.01 {
		t.Errorf("the probe counted %d reads on %s, the load generator %d", reads.Count, in.Loop, len(lg))
	}
	lgMean := mean(lg)
	probeMean := float64(reads.Sum.Microseconds()) / float64(max(reads.Count, 1))
	path := lgMean - probeMean
	t.Logf("%d reads: load generator mean %.0f µs p50 %.0f p95 %.0f; probe mean %.0f µs p50 %d p95 %d; network round trip %.0f µs, the whole path above the block layer %.0f µs",
		len(lg), lgMean, quantile(lg, 0.5), quantile(lg, 0.95), probeMean, reads.P50().Microseconds(), reads.P95().Microseconds(), rtt, path)
	if path > 0.1*probeMean {
		t.Skipf("the path above the block layer took %.0f µs per read, over 10 %% of the disk's %.0f µs: the machine is too loaded to compare the two", path, probeMean)
	}
	for _, c := range []struct {
		name  string
		q     float64
		probe time.Duration
	}{{"p50", 0.5, reads.P50()}, {"p95", 0.95, reads.P95()}} {
		want := quantile(lg, c.q) - rtt
		got := float64(c.probe.Microseconds())
		if rel := math.Abs(got-want) / want; rel > 0.10 {
			t.Errorf("%s: probe %.0f µs, load generator less the round trip %.0f µs: %.1f %% apart, want ≤ 10 %%", c.name, got, want, 100*rel)
		}
	}
}

// readIOLatencies reads the load generator's --io-log: one JSON line per
// I/O, latency in µs.
func readIOLatencies(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening the I/O log: %v", err)
	}
	defer f.Close()
	var lat []float64
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var io struct {
			Op    string  `json:"op"`
			LatUs float64 `json:"lat_us"`
		}
		if err := json.Unmarshal(sc.Bytes(), &io); err != nil {
			t.Fatalf("I/O log line %q: %v", sc.Text(), err)
		}
		if io.Op == "read" {
			lat = append(lat, io.LatUs)
		}
	}
	slices.Sort(lat)
	return lat
}

// quantile of sorted values, nearest rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// handshakeRTT is the median time of 31 TCP handshakes with addr from the
// network namespace ns, in µs: the network's round trip, which the kernel
// answers without waking any process.
func handshakeRTT(t *testing.T, ns, addr string) float64 {
	t.Helper()
	var rtts []float64
	err := InNetNS(ns, func() error {
		for range 31 {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			rtts = append(rtts, float64(time.Since(start).Microseconds()))
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("timing TCP handshakes with %s from %s: %v", addr, ns, err)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/blkprobe"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

func probeTopo(devs ...string) topology.Topology {
	r := topology.Resource{Name: "vg"}
	for i, d := range devs {
		r.Consumers = append(r.Consumers, topology.Consumer{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 2)}), Device: d})
	}
	return topology.Topology{Resources: []topology.Resource{r}}
}

// The probe opens on the topology's devices, gives each tick's reads as
// the difference of two samples, reopens when the devices change, and
// gives nothing for a device it does not watch.
func TestProbeTicksAndReopens(t *testing.T) {
	var opened [][]string
	var fake *blkprobe.Fake
	open := func(devs []string) (blkprobe.Sampler, error) {
		opened = append(opened, devs)
		fake = blkprobe.NewFake(devs...)
		return fake, nil
	}
	var logs logBuf
	p := NewProbe(open, newLogger(&logs))
	p.SetTopology(probeTopo("loop1", "loop0", "loop1"))
	if len(opened) != 1 || fmt.Sprint(opened[0]) != "[loop0 loop1]" || p.State() != "ebpf" {
		t.Fatalf("opened %v, state %q; want once on [loop0 loop1], ebpf", opened, p.State())
	}
	p.SetTopology(probeTopo("loop0", "loop1"))
	if len(opened) != 1 {
		t.Fatalf("reopened on the same devices: %v", opened)
	}
	t0 := time.Unix(100, 0)
	fake.Complete("loop0", false, 300*time.Microsecond)
	p.Sample(t0)
	fake.Complete("loop0", false, 500*time.Microsecond)
	fake.Complete("loop0", false, 700*time.Microsecond)
	fake.SetOutstanding("loop1", 1, 40*time.Millisecond)
	p.Sample(t0.Add(100 * time.Millisecond))
	ops, oldest, _, ok := p.TickReads("loop0")
	if !ok || ops.Count != 2 || ops.Mean() != 600*time.Microsecond || oldest != 0 {
		t.Fatalf("loop0 tick: %d reads, mean %v, oldest %v, ok %v; want the tick's 2 reads, mean 600µs", ops.Count, ops.Mean(), oldest, ok)
	}
	if _, oldest, n, ok := p.TickReads("loop1"); !ok || oldest != 40*time.Millisecond || n != 1 {
		t.Fatalf("loop1 oldest %v, %d in flight, ok %v; want 40ms, 1", oldest, n, ok)
	}
	if _, _, _, ok := p.TickReads("sda"); ok {
		t.Fatal("an unwatched device has reads")
	}
	p.SetTopology(probeTopo("loop0", "loop2"))
	if len(opened) != 2 || fmt.Sprint(opened[1]) != "[loop0 loop2]" {
		t.Fatalf("opened %v, want a reopen on [loop0 loop2]", opened)
	}
	if _, _, _, ok := p.TickReads("loop0"); ok {
		t.Fatal("reads before the reopened probe's first sample")
	}
	// A failing sample gives no reads for the tick and is said once.
	fake.Err = errors.New("map lookup failed")
	p.Sample(t0.Add(200 * time.Millisecond))
	p.Sample(t0.Add(300 * time.Millisecond))
	if _, _, _, ok := p.TickReads("loop0"); ok || p.State() != "sampling failed" {
		t.Fatalf("state %q after failing samples; want no reads", p.State())
	}
	if n := logs.count("sampling the eBPF probe failed"); n != 1 {
		t.Errorf("failing samples logged %d times, want once:\n%s", n, logs.String())
	}
}

// Where eBPF cannot run, the probe says so once and never tries again;
// switched off, it does not try at all. A nil probe is a no-op.
func TestProbeUnavailableSaysSoOnce(t *testing.T) {
	tries := 0
	open := func([]string) (blkprobe.Sampler, error) {
		tries++
		return nil, &blkprobe.UnavailableError{Reason: "no kernel BTF"}
	}
	var logs logBuf
	p := NewProbe(open, newLogger(&logs))
	p.SetTopology(probeTopo("loop0"))
	p.SetTopology(probeTopo("loop0", "loop1"))
	p.Sample(time.Unix(1, 0))
	if tries != 1 || logs.count("no kernel BTF") != 1 {
		t.Fatalf("tried %d times, logged:\n%s\nwant one try and one warning naming the reason", tries, logs.String())
	}
	if _, _, _, ok := p.TickReads("loop0"); ok {
		t.Fatal("reads from an unavailable probe")
	}
	off := NewProbe(nil, newLogger(&logs))
	off.SetTopology(probeTopo("loop0"))
	if off.State() == "ebpf" {
		t.Fatal("a probe switched off says ebpf")
	}
	var none *Probe
	none.SetTopology(probeTopo("loop0"))
	none.Sample(time.Unix(1, 0))
	if _, _, _, ok := none.TickReads("loop0"); ok || none.Close() != nil {
		t.Fatal("a nil probe is not a no-op")
	}
}

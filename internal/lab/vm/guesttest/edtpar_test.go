package guesttest

import (
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
)

// openEDT puts the edt path on the target's bridge for one test.
func openEDT(t *testing.T) *edt.EDT {
	t.Helper()
	ns := "/run/netns/" + kstack.TargetNS
	t.Cleanup(func() { edt.Cleanup(ns, kstack.Bridge) })
	e, err := edt.New(ns, kstack.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Attach(); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEDTArmedWriterHeldFromFirstWrite: a writer held at 20 ms leaves
// the throttleable set armed at 20 ms (its entry turned armed, as the
// backend does), pauses and comes back: its first write is held, by the
// ingress program that sees the write and the rise limit that kept its
// flow's ramp while it paused. Freed and not armed, the same return is
// not held (the control: the test can fail).
func TestEDTArmedWriterHeldFromFirstWrite(t *testing.T) {
	s := stack(t)
	writer := s.Initiators[0]
	disk := diskOf(t, s, writer, 2)
	e := openEDT(t)
	addr := netip.MustParseAddr(writer.IP)
	const d = 20 * time.Millisecond
	member := edt.Entry{Split: iscsiSplit, Dir: edt.Write, Delay: d, Rise: edt.DefaultRise}
	armed := edt.Entry{Split: iscsiSplit, Armed: d, Rise: edt.DefaultRise}
	var held, free, back ioStats
	for _, c := range []struct {
		arm bool
		out *ioStats
	}{{false, &free}, {true, &back}} {
		if err := e.SetEntry(addr, kstack.Port, member, time.Hour); err != nil {
			t.Fatal(err)
		}
		timedIO(t, disk, true) // the ramp
		held = timedIO(t, disk, true)
		// Leaving the set: an armed writer's entry turns armed (the
		// backend rewrites it; its flows keep their ramps), one not
		// armed is freed (and its ramps with it).
		if c.arm {
			if err := e.SetEntry(addr, kstack.Port, armed, time.Hour); err != nil {
				t.Fatal(err)
			}
		} else if err := e.Free(addr, kstack.Port); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // a pause, longer than the arming's 1 s
		*c.out = timedIO(t, disk, true)
		if err := e.Free(addr, kstack.Port); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("edt arming: 64 KiB writes held at %v: %v; back after a pause, freed: %v; armed: %v", d, held, free, back)
	if held.Min < d {
		t.Errorf("the member's %v write delay did not hold: %v", d, held)
	}
	if back.Min < d {
		t.Errorf("the armed writer was not held from its first write: minimum %v, want at least %v", back.Min, d)
	}
	if free.Min >= d {
		t.Errorf("a writer freed and not armed was still held on its return (%v): the armed case proves nothing", free)
	}
	tot, err := e.Totals()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("edt arming: classifier totals %+v", tot)
}

// bulkWrite writes 1 MiB O_DIRECT blocks to disk for dur, four at a
// time (a bulk writer with segments in flight, the case a tail loss
// probe fires on), and returns the bytes written.
func bulkWrite(t *testing.T, disk string, dur time.Duration) int64 {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	end := time.Now().Add(dur)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd, err := syscall.Open("/dev/"+disk, os.O_WRONLY|syscall.O_DIRECT, 0)
			if err != nil {
				t.Errorf("opening /dev/%s: %v", disk, err)
				return
			}
			defer syscall.Close(fd)
			buf, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				t.Error(err)
				return
			}
			defer syscall.Munmap(buf)
			for i := 0; time.Now().Before(end); i++ {
				n, err := syscall.Pwrite(fd, buf, int64(w*16+i%16)<<20)
				if err != nil {
					t.Errorf("writing /dev/%s: %v", disk, err)
					return
				}
				mu.Lock()
				total += int64(n)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return total
}

// TestEDTRiseLimitLossProbes: a bulk writer whose ACKs' delay steps
// 0 → 20 ms, five times, with the rise limit and, side by side, without
// it: the initiator's tail loss probes and retransmissions (TCP's own
// counters, nstat) must be none or far fewer with the limit. Without it
// the first ACK after a step arrives past the probe timeout (2·SRTT +
// 2 ms) the sender armed with its sub-millisecond SRTT.
func TestEDTRiseLimitLossProbes(t *testing.T) {
	s := stack(t)
	writer := s.Initiators[0]
	disk := diskOf(t, s, writer, 2)
	e := openEDT(t)
	addr := netip.MustParseAddr(writer.IP)
	const steps = 5
	probes := map[string]map[string]int64{}
	for _, c := range []struct {
		name string
		rise edt.Rise
	}{{"off", edt.Rise{}}, {"on", edt.DefaultRise}} {
		before := tcpCounters(t, false)
		var n int64
		for range steps {
			// Delay 0, as the backend's lingering entry: the flow's
			// packets lower its ramp to 0 while it writes unthrottled.
			zero := edt.Entry{Split: iscsiSplit, Rise: c.rise}
			if err := e.SetEntry(addr, kstack.Port, zero, time.Hour); err != nil {
				t.Fatal(err)
			}
			n += bulkWrite(t, disk, time.Second)
			en := edt.Entry{Split: iscsiSplit, Dir: edt.Write, Delay: 20 * time.Millisecond, Rise: c.rise}
			if err := e.SetEntry(addr, kstack.Port, en, time.Hour); err != nil {
				t.Fatal(err)
			}
			n += bulkWrite(t, disk, 2*time.Second)
		}
		if err := e.Free(addr, kstack.Port); err != nil {
			t.Fatal(err)
		}
		after := tcpCounters(t, false)
		probes[c.name] = map[string]int64{}
		for _, k := range lossKeys {
			probes[c.name][k] = after[k] - before[k]
		}
		t.Logf("rise limit %s: %d steps 0 -> 20ms, %d MB written; initiator %v", c.name, steps, n>>20, probes[c.name])
	}
	on, off := probes["on"]["TcpExtTCPLossProbes"], probes["off"]["TcpExtTCPLossProbes"]
	if on > 1 && 2*on > off {
		t.Errorf("loss probes across %d delay steps: %d with the rise limit, %d without: want none or far fewer with it", steps, on, off)
	}
	ron, roff := probes["on"]["TcpRetransSegs"], probes["off"]["TcpRetransSegs"]
	if ron > 1 && 2*ron > roff {
		t.Errorf("retransmitted segments across %d delay steps: %d with the rise limit, %d without: want none or far fewer with it", steps, ron, roff)
	}
	if off == 0 && roff == 0 {
		t.Logf("without the rise limit the steps caused no loss probe here: this run shows no difference")
	}
}

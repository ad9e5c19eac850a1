package guesttest

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// TestAutonomicLoop runs sanqos as an administrator would on the kernel
// stack: lio discovery, dm/LVM resolution, the PID controller and the
// netem backend. VG0 sits on dm-delay, so its read latency never falls
// below the disk's delay; with the threshold under that floor the resource
// stays over threshold, and the controller must throttle the initiator
// that writes to it (and only by delaying its packets). The guest clock
// runs under emulation, so this asserts direction and clean-up, not the
// thesis's 15 ms hold.
func TestAutonomicLoop(t *testing.T) {
	s := stack(t)
	writer, reader := s.Initiators[0], s.Initiators[1]
	wDisk := diskOf(t, s, writer, 1) // lun2 on VG0
	rDisk := diskOf(t, s, reader, 0) // lun1 on VG0
	threshold := time.Duration(s.DelayMs) * time.Millisecond / 2

	load := startLoad(t, wDisk, rDisk)
	defer load.stop()
	window := load.window

	time.Sleep(3 * time.Second)
	before, n := window(2 * time.Second)
	t.Logf("writer alone with the reader: minimum write latency %v over %d writes", before, n)

	os.Remove("/tmp/sanqos-loop.jsonl") // a record left by an earlier run would pass for this one's
	daemon := inTarget(vm.GuestBin, "run", "--adapter", "lio", "--backend", "netem", "--dev", kstack.Bridge,
		"--threshold", threshold.String(), "--discovery-interval", "1s", "--listen", "", "--socket", "/tmp/sanqos-loop.sock",
		"--record", "/tmp/sanqos-loop.jsonl")
	daemon.Stdout, daemon.Stderr = os.Stderr, os.Stderr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			daemon.Process.Kill()
			daemon.Wait()
		}
		inTarget(vm.GuestBin, "run", "--backend", "netem", "--dev", kstack.Bridge, "--cleanup-only").Run()
	})

	// Direction: within 30 s the writer's every write waits for a delay,
	// and the record says it is the controller's. Both are asked for: under
	// emulation the daemon's own start-up can slow the writer for a second
	// before its first tick is written. The delay must be well past
	// dm-delay's own scatter (minSlowdown): dm-delay waits whole jiffies
	// (4 ms at the guest kernel's HZ of 250), so the writer's minimum
	// latency moves between about 6 and 10 ms as its writes fall into
	// step with the timer or out of it, sanqos or not, and a smaller
	// slowdown cannot be told from a step change after the daemon stops.
	var (
		during time.Duration
		last   status.Record
	)
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(time.Second)
		during, n = window(time.Second)
		var ok bool
		last, ok = lastTick(t, "/tmp/sanqos-loop.jsonl")
		if n > 0 && during > before+minSlowdown && ok && delayed(last, "vg-"+kstack.VG0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller did not slow the writer: minimum write latency %v over the last second, %v before (threshold %v under a %d ms dm-delay floor); last tick recorded: %v",
				during, before, threshold, s.DelayMs, ok)
		}
	}
	t.Logf("with sanqos (threshold %v, read latency floor %d ms): minimum write latency %v", threshold, s.DelayMs, during)
	// Only the writer is throttleable: the reader's LUN (its ACL maps
	// lun1 alone on VG0) is not written to.
	for _, r := range last.Resources {
		t.Logf("last tick: %s delay %.1f ms, %d throttleable", r.Name, r.DelayMs, r.Members)
		if r.Name == "vg-"+kstack.VG0 && r.Members != 1 {
			t.Errorf("%s: %d throttleable consumers at %.1f ms, want the writer alone", r.Name, r.Members, r.DelayMs)
		}
	}

	// Clean-up: SIGTERM removes the data path, and the writer is free:
	// it gets back at least half the slowdown, which is more than
	// dm-delay's scatter.
	daemon.Process.Signal(syscall.SIGTERM)
	if err := daemon.Wait(); err != nil {
		t.Errorf("sanqos run after SIGTERM: %v", err)
	}
	stopped = true
	assertClean(t)
	time.Sleep(2 * time.Second)
	after, n := window(time.Second)
	t.Logf("after sanqos stopped: minimum write latency %v over %d writes", after, n)
	if n > 0 && after > before+(during-before)/2 {
		t.Errorf("the writer stayed slow after sanqos stopped: %v, %v before, %v during", after, before, during)
	}
}

// minSlowdown is how much slower than before the writer's minimum write
// latency must get before the loop is judged to slow it: three of
// dm-delay's jiffies at HZ 250, so that half of it is more than the
// writer's minimum latency moves by itself.
const minSlowdown = 12 * time.Millisecond

// delayed: the tick delayed the resource name.
func delayed(k status.Record, name string) bool {
	for _, r := range k.Resources {
		if r.Name == name && r.DelayMs > 0 {
			return true
		}
	}
	return false
}

// lastTick reads the last complete line of a record the daemon is still
// writing: the one before the final newline (a read may catch a line half
// written). ok is false while there is none.
func lastTick(t *testing.T, path string) (k status.Record, ok bool) {
	t.Helper()
	rec, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return k, false
	}
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(rec), "\n")
	lines = lines[:len(lines)-1]
	if len(lines) == 0 {
		return k, false
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &k); err != nil {
		t.Fatalf("reading the tick record %s: %v", path, err)
	}
	return k, true
}

type sample struct {
	at  time.Time
	lat time.Duration
}

// ioLoad is a writer that writes and a reader that reads, each on its
// initiator's disk without pause, the writer's latencies recorded.
type ioLoad struct {
	mu   sync.Mutex
	wLat []sample
	done chan struct{}
	wg   sync.WaitGroup
}

// startLoad starts 64 KiB O_DIRECT writes on wDisk and 8 KiB reads on
// rDisk until stop.
func startLoad(t *testing.T, wDisk, rDisk string) *ioLoad {
	l := &ioLoad{done: make(chan struct{})}
	loop := func(disk string, write bool) {
		defer l.wg.Done()
		flags := os.O_RDONLY
		size := 8 << 10
		if write {
			flags, size = os.O_WRONLY, 64<<10
		}
		fd, err := syscall.Open("/dev/"+disk, flags|syscall.O_DIRECT, 0)
		if err != nil {
			t.Errorf("opening /dev/%s: %v", disk, err)
			return
		}
		defer syscall.Close(fd)
		buf, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Error(err)
			return
		}
		defer syscall.Munmap(buf)
		for i := 0; ; i = (i + 1) % 512 {
			select {
			case <-l.done:
				return
			default:
			}
			t0 := time.Now()
			if write {
				_, err = syscall.Pwrite(fd, buf, int64(i)*int64(size))
			} else {
				_, err = syscall.Pread(fd, buf, int64(i)*int64(size))
			}
			if err != nil {
				t.Errorf("I/O on /dev/%s: %v", disk, err)
				return
			}
			if write {
				l.mu.Lock()
				l.wLat = append(l.wLat, sample{time.Now(), time.Since(t0)})
				l.mu.Unlock()
			}
		}
	}
	l.wg.Add(2)
	go loop(wDisk, true)
	go loop(rDisk, false)
	return l
}

// stop ends the load and waits for it.
func (l *ioLoad) stop() {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	l.wg.Wait()
}

// window returns the writer's minimum latency over the last d, and the
// number of writes it saw.
func (l *ioLoad) window(d time.Duration) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lat []time.Duration
	for _, x := range l.wLat {
		if time.Since(x.at) <= d {
			lat = append(lat, x.lat)
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	return slices.Min(lat), len(lat)
}

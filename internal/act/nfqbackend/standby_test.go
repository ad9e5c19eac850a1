package nfqbackend

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSoftnetBacklog(t *testing.T) {
	real, err := os.ReadFile("testdata/softnet_stat-6.18")
	if err != nil {
		t.Fatal(err)
	}
	busy := "00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n" +
		"00000020 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 0000002a 00000003 00000028 00000002\n"
	for _, tc := range []struct {
		name  string
		data  string
		cpu   int
		want  int
		found bool
	}{
		{"captured, cpu 0", string(real), 0, 0, true},
		{"captured, cpu 1", string(real), 1, 0, true},
		{"captured, no cpu 2", string(real), 2, 0, false},
		// Rows are per online CPU: the index column, not the row, names it.
		{"cpu 3 in the second row", busy, 3, 42, true},
		{"cpu 1 offline", busy, 1, 0, false},
		{"older kernel: 11 columns", "00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n", 0, 0, false},
		{"not hex", "zz\n", 0, 0, false},
		{"empty", "", 0, 0, false},
	} {
		got, found := softnetBacklog([]byte(tc.data), tc.cpu)
		if got != tc.want || found != tc.found {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, got, found, tc.want, tc.found)
		}
	}
}

func TestPathCPUs(t *testing.T) {
	packet, standby := pathCPUs()
	if standby == packet {
		t.Errorf("standby on the packet thread's CPU %d", packet)
	}
	if standby < -1 || packet < 0 {
		t.Errorf("pathCPUs() = %d, %d", packet, standby)
	}
}

// TestLiveStandbyCoversStalledPacketCPU: a real-time hog on the packet
// thread's CPU keeps that thread away for about 40 ms at a time, as the
// hypervisor or a non-preemptible kernel does in the lab; the standby, on
// the other CPU, releases the held packets meanwhile. The same hog runs
// against a backend without the standby, side by side, to show that it
// does stall the packet thread.
func TestLiveStandbyCoversStalledPacketCPU(t *testing.T) {
	packetCPU, standbyCPU := pathCPUs()
	if standbyCPU < 0 {
		t.Skip("one CPU: there is no standby")
	}
	l := newLab(t)
	const delay = 5 * time.Millisecond
	late := map[bool]time.Duration{}
	for _, standby := range []bool{false, true} {
		b := l.backendWith(t, NfqueueConfig{NoStandby: !standby})
		// The echo client and server run on the standby's CPU: on the
		// hog's they would stall with the packet thread, whoever
		// released.
		unpin := pinOrdinaryThreads(t, standbyCPU)
		c := l.dial('e')
		l.throttle(t, b, delay, delay)
		l.pastRamp(c)
		stop := hog(t, packetCPU, 40*time.Millisecond, 150*time.Millisecond)
		rtts := l.rtts(c, 200)
		stop()
		s := b.Stats()
		c.Close()
		b.Close()
		unpin()
		late[standby] = s.DelayErrorMax
		t.Logf("standby %v: held late ≤ %v, slowest round trip %v (delay %v), takeovers %d (longest %v)",
			standby, s.DelayErrorMax, slices.Max(rtts), delay, s.Takeovers, s.TakeoverMax)
		switch {
		case standby && s.Takeovers == 0:
			t.Errorf("the standby never took over while the packet thread's CPU was taken")
		case !standby && s.Takeovers != 0:
			t.Errorf("without a standby, %d takeovers", s.Takeovers)
		}
	}
	if got := l.ours(t); got != "" {
		t.Errorf("after Close the target still holds:\n%s", got)
	}
	if raceEnabled {
		// The race detector slows the standby's every step several
		// times over (CI saw takeovers that still let packets out 33 ms
		// late): how late is judged by the run without -race, which
		// make test runs first.
		return
	}
	if late[false] < 15*time.Millisecond {
		t.Fatalf("without the standby packets were held at most %v late: the hog did not stall the packet thread, nothing was shown", late[false])
	}
	if late[true] > late[false]/3 || late[true] > 10*time.Millisecond {
		t.Errorf("with the standby packets were held up to %v late, without it %v: want at most a third, and ≤ 10 ms", late[true], late[false])
	}
}

// pinOrdinaryThreads pins every thread of the test process but the
// real-time ones (the packet path's, which pin themselves) to cpu; unpin
// gives them the CPUs they had. The next backend takes its CPUs from the
// affinity of the thread that starts it.
func pinOrdinaryThreads(t *testing.T, cpu int) (unpin func()) {
	var one, had unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedGetaffinity(0, &had); err != nil {
		t.Fatal(err)
	}
	tids, err := processThreads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if a, err := unix.SchedGetAttr(tid, 0); err == nil && a.Policy != unix.SCHED_FIFO {
			_ = unix.SchedSetaffinity(tid, &one)
		}
	}
	return func() {
		tids, _ := processThreads()
		for _, tid := range tids {
			_ = unix.SchedSetaffinity(tid, &had)
		}
	}
}

// hog runs a SCHED_FIFO 50 busy loop on cpu for on, every on+off, until
// the returned stop is called. It is a process of its own: a Go goroutine
// would be preempted by the runtime and let the CPU go early.
func hog(t *testing.T, cpu int, on, off time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			// timeout runs outside the hog's CPU and priority: a
			// FIFO 50 timeout beside the loop would never run.
			cmd := exec.Command("timeout", fmt.Sprintf("%.3f", on.Seconds()), "taskset", "-c", strconv.Itoa(cpu),
				"chrt", "-f", "50", "sh", "-c", "while :; do :; done")
			if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState.ExitCode() != 124 {
				t.Errorf("hog: %v: %s", err, out)
				return
			}
			select {
			case <-done:
				return
			case <-time.After(off):
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// TestStandbyParksWhileIdle: with no rule sending packets to the queue
// the standby waits in the Go scheduler, not in a system call the
// scheduler's monitor would take its P back from (see Park), and starts
// watching once the path is active.
func TestStandbyParksWhileIdle(t *testing.T) {
	b, clk, _ := newFakePath(t, NfqueueConfig{NoRiseLimit: true}, "/nonexistent")
	stop := runThread(t, b, b.standby, b.standbyDone)
	waitFor(t, "the idle standby to park", func() bool { return clk.parked.Load() >= 3 })
	b.active.Store(true)
	parked := clk.parked.Load()
	waitFor(t, "the active standby to watch", func() bool { return clk.Now().Sub(t0) >= time.Duration(parked+10)*standbyIdle })
	stop()
	if n := clk.parked.Load(); n > parked+1 {
		t.Errorf("the standby parked %d times after the path became active; want its watch in ordinary sleeps", n-parked)
	}
}

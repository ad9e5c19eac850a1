package engine

import (
	"slices"
	"testing"
	"time"
)

// closedLoopWriter is a fixture writer: threads of one 4 KiB write each,
// each taking awaitMs at the device plus the delay in force on it, so
// that the delay, not the writer, sets its rate, as it does a held iSCSI
// initiator's.
type closedLoopWriter struct {
	threads  float64
	awaitMs  float64
	carry    float64 // writes due but not yet whole
	stopped  bool
	writeIOs uint64
}

// tick advances d's writer device by one 100 ms tick at delayMs.
func (w *closedLoopWriter) tick(d *disk, dev string, delayMs float64) {
	if w.stopped {
		return
	}
	w.carry += w.threads * 100 / (w.awaitMs + delayMs)
	n := uint64(w.carry)
	w.carry -= float64(n)
	s := d.stats[dev]
	s.WriteIOs += n
	s.WriteSectors += n * 8
	s.WriteTicks += n * uint64(w.awaitMs)
}

// A continuous writer held at the ceiling writes less than the leave
// threshold because of the delay, and stays in the set; once it stops,
// it leaves within a second (issue 33).
func TestHeldWriterStaysInTheSet(t *testing.T) {
	// Held at 200 ms, four threads write 78 kB/s, one 20 kB/s.
	tests := []struct {
		name    string
		threads float64
	}{
		{"four threads", 4},
		{"one thread", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustEngine(t, DefaultConfig(), oneResource(15))
			d := newDisk("loop0", "loop1")
			w := &closedLoopWriter{threads: tt.threads, awaitMs: 5}
			now := time.Unix(0, 0)
			var delayMs float64
			step := func() (ResourceDecision, ConsumerRates) {
				now = now.Add(100 * time.Millisecond)
				// The reader waits behind the writes while they flow.
				d.io("loop0", 10, 150, 0)
				w.tick(d, "loop1", delayMs)
				dec := e.Step(now, d.snap())
				rd, cr := dec.Resources[0], dec.Consumers[1]
				delayMs = 0
				if slices.Contains(rd.Members, writerIP) {
					delayMs = rd.DelayMs
				}
				return rd, cr
			}
			// Unheld, 4 KiB at 5 ms a thread is 800 kB/s a thread: it
			// joins within a few ticks.
			joined := false
			for range 10 {
				if rd, _ := step(); slices.Contains(rd.Members, writerIP) {
					joined = true
				}
			}
			if !joined {
				t.Fatal("the writer never joined the set")
			}
			leaves, held := 0, 0
			var last ConsumerRates
			for range 600 { // 60 s
				rd, cr := step()
				if !slices.Contains(rd.Members, writerIP) {
					leaves++
				}
				if rd.DelayMs >= 150 {
					held++
				}
				if cr.HeldMs != delayMs {
					t.Fatalf("the consumer's held delay %.1f ms is not the one decided, %.1f ms", cr.HeldMs, delayMs)
				}
				last = cr
			}
			if held < 300 {
				t.Fatalf("setup: the delay was at 150 ms or more in %d ticks of 600; the writer was not held hard", held)
			}
			if last.WriteEWMAKBs >= DefaultConfig().LeaveKBs {
				t.Fatalf("setup: held, the writer writes %.0f kB/s, not under the leave threshold", last.WriteEWMAKBs)
			}
			if leaves > 0 {
				t.Fatalf("out of the set in %d ticks of 600 (outstanding %.2f, rate %.0f kB/s)", leaves, last.OutstandingWrites, last.WriteEWMAKBs)
			}
			w.stopped = true
			for k := range 10 {
				rd, _ := step()
				if !slices.Contains(rd.Members, writerIP) {
					t.Logf("left %d ticks after it stopped", k+1)
					return
				}
			}
			t.Fatal("the writer stopped and is still in the set a second later")
		})
	}
}

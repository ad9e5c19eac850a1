package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// work is one thread's I/O loop: one synchronous I/O at a time (or
// --iodepth outstanding, see async.go), paced to the rate, until its share
// is done or ctx ends. It returns nil when stopped by ctx: running out of
// time is not a failure.
func (e *Generator) work(ctx context.Context, w *worker, t0 time.Time, sched *loadspec.Schedule) error {
	job := e.Job
	bs := job.BlockSize
	th := &thread{e: e, w: w, t0: t0, end: t0.Add(job.Runtime), pacer: loadspec.NewPacer(e.Clock, job.Rate),
		buf: make([]byte, bs), scratch: make([]byte, bs)}
	if job.Mode.IsWrite() && !job.Verify {
		// Incompressible data, as fio writes by default, so that nothing on
		// the path gets an easier job than with real data.
		r := rand.New(rand.NewPCG(uint64(job.Seed), uint64(w.id)))
		for i := range th.buf {
			th.buf[i] = byte(r.Uint32())
		}
	}
	th.lastDone = t0
	if job.Depth() > 1 {
		if err := th.startAsync(); err != nil {
			return fmt.Errorf("thread %d: %w", w.id, err)
		}
	}
	offs := loadspec.NewOffsets(w.region, bs, job.Mode.IsRandom(), job.Seed<<16^int64(w.id))
	err := th.loop(ctx, offs, sched)
	// What is still outstanding completes and is counted, as the I/O a
	// synchronous thread is in when its time is up.
	derr := th.drain()
	if errors.Is(err, errRuntimeOver) || ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil
	}
	if err == nil {
		err = derr
	}
	return err
}

// errRuntimeOver stops a thread whose next I/O would start after the
// runtime: the pacer's timer and the runtime's can fire in either order.
var errRuntimeOver = errors.New("runtime over")

type thread struct {
	e            *Generator
	w            *worker
	t0, end      time.Time // end is t0 when there is no runtime
	pacer        *loadspec.Pacer
	buf, scratch []byte
	// lastDone is the previous completion (or the start, or the end of
	// an on/off pause); idle is the time since then spent in waits the
	// job asked for (the rate limit), which is no stall.
	lastDone time.Time
	idle     time.Duration
	// burst accumulates the thread's share of the current on/off burst.
	burst burstStats
	// aio is the outstanding I/Os of a thread with --iodepth > 1.
	aio *asyncState
	// writes counts the thread's writes toward its next --fsync.
	writes int
}

// burstStats is one thread's share of one on/off burst.
type burstStats struct {
	start      time.Time
	ios, bytes int64
	lat        []float64 // ms
	gapMs      float64
}

func (th *thread) loop(ctx context.Context, offs *loadspec.Offsets, sched *loadspec.Schedule) error {
	job := th.e.Job
	op := opRead
	if job.Mode.IsWrite() {
		op = opWrite
	}
	switch {
	case sched != nil:
		defer sched.Leave()
		for {
			b, err := sched.Arrive(ctx)
			if err != nil {
				if errors.Is(err, loadspec.ErrDone) {
					return nil
				}
				return err
			}
			if err := loadspec.Sleep(ctx, th.e.Clock, b.Start.Sub(th.e.Clock.Now())); err != nil {
				return err
			}
			th.pacer.Restart() // no catch-up burst for the pause
			// The pause is the schedule's, not a stall.
			th.lastDone, th.idle = th.e.Clock.Now(), 0
			th.burst = burstStats{start: th.lastDone}
			for moved := int64(0); moved < job.OnSize; moved += job.BlockSize {
				off, _ := offs.Next()
				if err := th.io(ctx, op, off); err != nil {
					return err
				}
			}
			if err := th.drain(); err != nil {
				return err
			}
			if err := th.endBurst(op); err != nil {
				return err
			}
		}
	case job.Verify && job.Mode.IsWrite():
		for i := int64(0); i < offs.Blocks(); i++ {
			off, _ := offs.Next()
			if err := th.io(ctx, opWrite, off); err != nil {
				return err
			}
		}
		if err := th.drain(); err != nil {
			return err
		}
		// Read back in block order: a second, independent pass.
		back := loadspec.NewOffsets(th.w.region, job.BlockSize, false, 0)
		th.pacer.Restart()
		for i := int64(0); i < back.Blocks(); i++ {
			off, _ := back.Next()
			if err := th.io(ctx, opRead, off); err != nil {
				return err
			}
		}
		return nil
	default:
		for {
			off, newPass := offs.Next()
			if newPass && offs.Pass() > 0 && !job.TimeBased {
				return nil
			}
			if err := th.io(ctx, op, off); err != nil {
				return err
			}
		}
	}
}

// io does one paced, timed I/O; with --iodepth > 1 it starts one, waiting
// for a free tag first. Every --fsync writes it flushes.
func (th *thread) io(ctx context.Context, op int, off int64) error {
	var err error
	if th.aio != nil {
		err = th.ioAsync(ctx, op, off)
	} else {
		err = th.ioSync(ctx, op, off)
	}
	if err != nil || op != opWrite || th.e.Job.Fsync <= 0 {
		return err
	}
	if th.writes++; th.writes < th.e.Job.Fsync {
		return nil
	}
	th.writes = 0
	// What is outstanding completes first, as a file's writes before an
	// fsync. The flush's time is the thread's: it shows in the gap
	// before the next completion, as an application's fsync would.
	if err := th.drain(); err != nil {
		return err
	}
	if err := th.w.dev.Sync(); err != nil {
		th.w.stats.addError()
		return fmt.Errorf("thread %d: flush after %d writes: %w", th.w.id, th.e.Job.Fsync, err)
	}
	return nil
}

// ioSync is io with one I/O at a time.
func (th *thread) ioSync(ctx context.Context, op int, off int64) error {
	paced := th.e.Clock.Now()
	if err := th.pacer.Wait(ctx, int64(len(th.buf))); err != nil {
		return err
	}
	th.idle += th.e.Clock.Now().Sub(paced)
	if err := ctx.Err(); err != nil {
		return err
	}
	job := th.e.Job
	if job.Runtime > 0 && !th.e.Clock.Now().Before(th.end) {
		return errRuntimeOver
	}
	if op == opWrite && job.Verify {
		loadspec.FillPattern(th.buf, job.Seed, off)
	}
	clk := th.e.Clock
	issued := clk.Now()
	var err error
	if op == opWrite {
		err = th.w.dev.WriteAt(th.buf, off)
	} else {
		err = th.w.dev.ReadAt(th.buf, off)
	}
	done := clk.Now()
	lat := done.Sub(issued)
	if err != nil {
		th.w.stats.addError()
		return fmt.Errorf("thread %d: %s of %d bytes at offset %d: %w", th.w.id, opNames[op], len(th.buf), off, err)
	}
	return th.record(op, off, th.buf, issued, done, max(done.Sub(th.lastDone)-th.idle, lat))
}

// record counts one completed I/O of buf at off: its latency, the gap
// since the thread's previous completion, its burst, its --io-log line
// and its verify.
func (th *thread) record(op int, off int64, buf []byte, issued, done time.Time, gap time.Duration) error {
	job := th.e.Job
	lat := done.Sub(issued)
	st := th.w.stats
	th.lastDone, th.idle = done, 0
	st.add(op, lat, int64(len(buf)), done.Sub(th.t0), gap)
	if !th.burst.start.IsZero() {
		th.burst.ios++
		th.burst.bytes += int64(len(buf))
		th.burst.lat = append(th.burst.lat, float64(lat)/float64(time.Millisecond))
		th.burst.gapMs = max(th.burst.gapMs, float64(gap)/float64(time.Millisecond))
	}
	if th.e.IOLog != nil {
		rec := iolog.IO{T: float64(issued.Sub(th.t0).Microseconds()) / 1e6, Thread: th.w.id, Op: opNames[op],
			Offset: off, Len: int64(len(buf)), LatUs: float64(lat.Nanoseconds()/100) / 10}
		if err := th.e.IOLog.Write(rec); err != nil {
			return err
		}
	}
	if op == opRead && job.Verify {
		st.addVerified(loadspec.CheckPattern(buf, th.scratch, job.Seed, off))
	}
	return nil
}

// endBurst writes the thread's burst line: what it moved in the burst
// that just ended, how fast while it was on, its longest I/O and gap.
func (th *thread) endBurst(op int) error {
	b := th.burst
	th.burst = burstStats{}
	if b.ios == 0 {
		return nil
	}
	end := th.lastDone
	r := record(iolog.KindBurst, th.e.Job.Name, th.w.id, opNames[op], end.Sub(th.t0).Seconds(), end.Sub(b.start).Seconds(),
		iolog.LatencyOf(b.lat), b.ios, b.bytes)
	r.MaxGapMs = iolog.Round3(b.gapMs)
	return th.e.Out.Write(r)
}

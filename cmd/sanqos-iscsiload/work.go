package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sanqos/sanqos/internal/iolog"
	"github.com/sanqos/sanqos/internal/loadspec"
)

// work is one thread's I/O loop: one synchronous I/O at a time, paced to
// the rate, until its share is done or ctx ends. It returns nil when
// stopped by ctx: running out of time is not a failure.
func (e *Engine) work(ctx context.Context, w *worker, t0 time.Time, sched *loadspec.Schedule) error {
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
	offs := loadspec.NewOffsets(w.region, bs, job.Mode.IsRandom(), job.Seed<<16^int64(w.id))
	err := th.loop(ctx, offs, sched)
	if errors.Is(err, errRuntimeOver) || ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// errRuntimeOver stops a thread whose next I/O would start after the
// runtime: the pacer's timer and the runtime's can fire in either order.
var errRuntimeOver = errors.New("runtime over")

type thread struct {
	e            *Engine
	w            *worker
	t0, end      time.Time // end is t0 when there is no runtime
	pacer        *loadspec.Pacer
	buf, scratch []byte
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
			for moved := int64(0); moved < job.OnSize; moved += job.BlockSize {
				off, _ := offs.Next()
				if err := th.io(ctx, op, off); err != nil {
					return err
				}
			}
		}
	case job.Verify && job.Mode.IsWrite():
		for i := int64(0); i < offs.Blocks(); i++ {
			off, _ := offs.Next()
			if err := th.io(ctx, opWrite, off); err != nil {
				return err
			}
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

// io does one paced, timed I/O.
func (th *thread) io(ctx context.Context, op int, off int64) error {
	if err := th.pacer.Wait(ctx, int64(len(th.buf))); err != nil {
		return err
	}
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
	lat := clk.Now().Sub(issued)
	st := th.w.stats
	if err != nil {
		st.addError()
		return fmt.Errorf("thread %d: %s of %d bytes at offset %d: %w", th.w.id, opNames[op], len(th.buf), off, err)
	}
	st.add(op, lat, int64(len(th.buf)))
	if th.e.IOLog != nil {
		rec := iolog.IO{T: float64(issued.Sub(th.t0).Microseconds()) / 1e6, Thread: th.w.id, Op: opNames[op],
			Offset: off, Len: int64(len(th.buf)), LatUs: float64(lat.Nanoseconds()/100) / 10}
		if err := th.e.IOLog.Write(rec); err != nil {
			return err
		}
	}
	if op == opRead && job.Verify {
		st.addVerified(loadspec.CheckPattern(th.buf, th.scratch, job.Seed, off))
	}
	return nil
}

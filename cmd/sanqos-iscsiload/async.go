package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// asyncState is a thread's outstanding I/Os with --iodepth > 1: the tags
// free to use and what each busy tag is doing. Everything else — pacing,
// the runtime, the per-I/O record — is the synchronous path's.
type asyncState struct {
	dev    AsyncDevice
	free   []int
	slots  []asyncSlot
	n      int // outstanding
	comps  []Completion
	failed bool // the connection failed: nothing more will complete
}

type asyncSlot struct {
	op     int
	off    int64
	issued time.Time
	buf    []byte // a read's destination
}

// reapWait is how long one Reap waits for the connection before the
// thread looks again; libiscsi times commands out in these calls too.
const reapWait = time.Second

func (th *thread) startAsync() error {
	dev, ok := th.w.dev.(AsyncDevice)
	if !ok {
		return errors.New("--iodepth above 1 needs an asynchronous connection, and this one has none")
	}
	depth := th.e.Job.Depth()
	if err := dev.StartAsync(depth, int64(len(th.buf))); err != nil {
		return err
	}
	a := &asyncState{dev: dev, slots: make([]asyncSlot, depth)}
	for tag := depth - 1; tag >= 0; tag-- {
		a.free = append(a.free, tag)
		if !th.e.Job.Mode.IsWrite() || th.e.Job.Verify {
			a.slots[tag].buf = make([]byte, len(th.buf))
		}
	}
	th.aio = a
	return nil
}

// ioAsync starts one paced I/O once a tag is free, taking the completions
// that arrive meanwhile as they come.
func (th *thread) ioAsync(ctx context.Context, op int, off int64) error {
	a, clk, job := th.aio, th.e.Clock, th.e.Job
	for len(a.free) == 0 {
		if err := th.reap(reapWait); err != nil {
			return err
		}
	}
	// Pace, but keep taking completions while waiting: a completion
	// stamped only when the thread next looks would be late.
	due := clk.Now().Add(th.pacer.Delay(int64(len(th.buf))))
	for a.n > 0 && clk.Now().Before(due) {
		if err := th.reap(min(due.Sub(clk.Now()), reapWait)); err != nil {
			return err
		}
	}
	if d := due.Sub(clk.Now()); d > 0 {
		if err := loadspec.Sleep(ctx, clk, d); err != nil {
			return err
		}
		th.idle += d
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if job.Runtime > 0 && !clk.Now().Before(th.end) {
		return errRuntimeOver
	}
	tag := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	s := &a.slots[tag]
	s.op, s.off = op, off
	p := th.buf
	if op == opRead {
		p = s.buf
	} else if job.Verify {
		p = s.buf
		loadspec.FillPattern(p, job.Seed, off)
	}
	s.issued = clk.Now()
	if err := a.dev.Issue(tag, op == opWrite, p, off); err != nil {
		a.failed = true
		th.w.stats.addError()
		return fmt.Errorf("thread %d: %s of %d bytes at offset %d: %w", th.w.id, opNames[op], len(p), off, err)
	}
	a.n++
	// Send it now, and take what has arrived.
	return th.reap(0)
}

// reap services the connection once, waiting up to wait, and records
// what completed.
func (th *thread) reap(wait time.Duration) error {
	a := th.aio
	var err error
	a.comps, err = a.dev.Reap(a.comps[:0], wait)
	done := th.e.Clock.Now()
	if err != nil {
		a.failed = true
		th.w.stats.addError()
		return fmt.Errorf("thread %d: %d I/O(s) outstanding: %w", th.w.id, a.n, err)
	}
	var first error
	for _, c := range a.comps {
		s := a.slots[c.Tag]
		a.free = append(a.free, c.Tag)
		a.n--
		p := th.buf
		if s.buf != nil {
			p = s.buf
		}
		if c.Err != nil {
			th.w.stats.addError()
			if first == nil {
				first = fmt.Errorf("thread %d: %s of %d bytes at offset %d: %w", th.w.id, opNames[s.op], len(p), s.off, c.Err)
			}
			continue
		}
		// Completions overlap: the gap to the previous one can be
		// shorter than this I/O's latency.
		if err := th.record(s.op, s.off, p, s.issued, done, max(done.Sub(th.lastDone)-th.idle, 0)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// drain waits for every outstanding I/O (none on a failed connection).
func (th *thread) drain() error {
	a := th.aio
	if a == nil {
		return nil
	}
	var first error
	for a.n > 0 && !a.failed {
		if err := th.reap(reapWait); err != nil && first == nil {
			first = err
		}
	}
	return first
}

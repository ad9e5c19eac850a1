package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// Device is one thread's connection to the LUN: an iSCSI session in the
// binary, memory in tests. It is used from the OS thread that opened it
// only (libiscsi contexts are not thread-safe).
type Device interface {
	// Capacity is the LUN size in bytes and BlockSize its logical block.
	Capacity() int64
	BlockSize() int64
	ReadAt(p []byte, off int64) error
	WriteAt(p []byte, off int64) error
	// Sync makes the writes completed so far durable (--fsync).
	Sync() error
	// Close logs out and frees the session.
	Close() error
}

// AsyncDevice is a Device that keeps several I/Os outstanding on its one
// connection (--iodepth > 1): libiscsi's and libnfs's asynchronous calls,
// driven by their service functions on the thread that owns the
// connection.
type AsyncDevice interface {
	Device
	// StartAsync prepares depth tags (0..depth-1) for I/Os of up to bs
	// bytes; it is called once, before the first Issue.
	StartAsync(depth int, bs int64) error
	// Issue starts an I/O under a tag that is not outstanding: a write of
	// p (copied before Issue returns) or a read into p (filled by the
	// Reap that reports it).
	Issue(tag int, write bool, p []byte, off int64) error
	// Reap sends what Issue queued and appends the completions that
	// arrived to into, waiting up to timeout (0: not at all) for the
	// connection to have something; it may return none (the caller asks
	// again). An error means the connection failed; the I/Os still
	// outstanding on it are lost.
	Reap(into []Completion, timeout time.Duration) ([]Completion, error)
}

// Completion is one finished asynchronous I/O.
type Completion struct {
	Tag int
	Err error
}

// Generator runs one job: it opens a device per thread, starts all threads
// together, and reports per-second and summary lines.
type Generator struct {
	Job   loadspec.Job
	Clock clock.Clock
	// Open connects thread n (1-based); it is called on the OS thread that
	// will do all of that thread's I/O.
	Open func(thread int) (Device, error)
	// OwnDevices says that each thread's Device is its own (a file of
	// its own on an NFS export), not one LUN shared by all: every
	// thread's region then starts at the job's offset of its device.
	OwnDevices bool
	// Out receives the per-second and summary lines; IOLog, if set, one
	// line per I/O.
	Out       *iolog.Writer
	IOLog     *iolog.Writer
	PerThread bool
	// StartAt delays the first I/O until then (zero: at once), so that
	// load generators in several namespaces start together.
	StartAt time.Time
	// Progress, if set, receives a one-line progress report every
	// ProgressEvery.
	Progress      io.Writer
	ProgressEvery time.Duration
	Log           *slog.Logger
}

// Result is what Run reports beyond the log lines.
type Result struct {
	totals
	Interrupted bool // stopped by ctx (a signal) before the job was done
}

// worker is one I/O thread.
type worker struct {
	id     int
	dev    Device
	region loadspec.Region
	stats  *threadStats
}

type opened struct {
	w   *worker
	err error
}

// genRun is one Run in progress: the worker goroutines, each holding its
// OS thread from opening its session to its logout, and what they share.
type genRun struct {
	e         *Generator
	workers   []*worker
	errs      []error // per worker, written by its goroutine only
	openedCh  chan opened
	start     chan time.Time
	abort     chan struct{}
	runCtx    context.Context
	cancelRun context.CancelFunc
	wg        sync.WaitGroup
	// sched is set before start is sent, which orders it before the
	// workers read it.
	sched *loadspec.Schedule
}

// Run runs the job until it is done, its runtime is over, ctx ends, or a
// thread fails. Every session is logged out on every path.
func (e *Generator) Run(ctx context.Context) (Result, error) {
	n := e.Job.Threads
	g := &genRun{e: e, workers: make([]*worker, n), errs: make([]error, n),
		openedCh: make(chan opened, n), start: make(chan time.Time), abort: make(chan struct{})}
	g.runCtx, g.cancelRun = context.WithCancel(context.Background())
	defer g.cancelRun()
	for i := range n {
		g.launch(i)
	}
	if err := g.ready(ctx); err != nil {
		close(g.abort)
		g.wg.Wait()
		return Result{}, err
	}
	t0 := e.Clock.Now()
	rep := &reporter{job: e.Job.Name, primary: opRead, perThread: e.PerThread, out: e.Out}
	if e.Job.Mode.IsWrite() {
		rep.primary = opWrite
	}
	for _, w := range g.workers {
		rep.threads = append(rep.threads, w.stats)
	}
	if e.Job.OnSize > 0 {
		g.sched = loadspec.NewSchedule(e.Clock, n, e.Job.OffTime, t0.Add(e.Job.Runtime))
	}
	for range n {
		g.start <- t0
	}
	interrupted, outErr := g.supervise(ctx, t0, rep)
	return g.finish(t0, rep, interrupted, outErr)
}

// launch starts worker i: it opens its session, reports, and waits for
// the start (or the abort).
func (g *genRun) launch(i int) {
	e := g.e
	w := &worker{id: i + 1, stats: &threadStats{}}
	g.workers[i] = w
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		dev, err := e.Open(w.id)
		if err != nil {
			g.openedCh <- opened{w, fmt.Errorf("thread %d: %w", w.id, err)}
			return
		}
		w.dev = dev
		defer func() {
			// After a failed I/O the logout usually fails too; that
			// adds nothing to the error already reported.
			if err := dev.Close(); err != nil && g.errs[w.id-1] == nil {
				e.Log.Warn("logout failed", "thread", w.id, "err", err)
			}
		}()
		g.openedCh <- opened{w, nil}
		select {
		case t0 := <-g.start:
			// One failed thread ends the run: its numbers would be
			// missing from every later second.
			if g.errs[w.id-1] = e.work(g.runCtx, w, t0, g.sched); g.errs[w.id-1] != nil {
				g.cancelRun()
			}
		case <-g.abort:
		}
	}()
}

// ready waits for every session (the first failure aborts the others),
// lays the threads out on the LUN and waits for --start-at.
func (g *genRun) ready(ctx context.Context) error {
	e := g.e
	for range len(g.workers) {
		select {
		case o := <-g.openedCh:
			if o.err != nil {
				return o.err
			}
		case <-ctx.Done():
			return fmt.Errorf("interrupted while logging in: %w", ctx.Err())
		}
	}
	if err := e.layout(g.workers); err != nil {
		return err
	}
	if e.StartAt.IsZero() {
		return nil
	}
	if d := e.StartAt.Sub(e.Clock.Now()); d > 0 {
		e.Log.Info("waiting for --start-at", "in", d.Round(time.Millisecond))
		if err := loadspec.Sleep(ctx, e.Clock, d); err != nil {
			return fmt.Errorf("interrupted while waiting for --start-at: %w", err)
		}
	}
	return nil
}

// supervise reports every second and stops the workers on the runtime,
// a signal, or an output error; it returns when they are all done.
func (g *genRun) supervise(ctx context.Context, t0 time.Time, rep *reporter) (interrupted bool, outErr error) {
	e, job := g.e, g.e.Job
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	var runtimeOver <-chan time.Time
	if job.Runtime > 0 {
		runtimeOver = e.Clock.After(job.Runtime)
	}
	tick := e.Clock.NewTicker(time.Second)
	defer tick.Stop()
	var progress <-chan time.Time
	if e.Progress != nil && e.ProgressEvery > 0 {
		pt := e.Clock.NewTicker(e.ProgressEvery)
		defer pt.Stop()
		progress = pt.C()
	}
	timeUp, workersDone := false, false
	sigCh := ctx.Done()
	for {
		select {
		case now := <-tick.C():
			if err := rep.interval(now.Sub(t0).Seconds()); err != nil && outErr == nil {
				outErr = err
				g.cancelRun()
			}
		case now := <-progress:
			e.progress(now.Sub(t0), g.workers)
		case <-runtimeOver:
			timeUp = true
			runtimeOver = nil
			g.cancelRun()
		case <-sigCh:
			interrupted = true
			sigCh = nil
			g.cancelRun()
		case <-done:
			workersDone = true
			done = nil
		}
		// An on/off run lasts its runtime even when no further burst fits
		// in it: the last pause is part of the schedule the lab plots.
		if workersDone && (timeUp || interrupted || job.OnSize == 0) {
			return interrupted, outErr
		}
	}
}

// finish writes the last interval and the summary and picks the error to
// report.
func (g *genRun) finish(t0 time.Time, rep *reporter, interrupted bool, outErr error) (Result, error) {
	elapsed := g.e.Clock.Now().Sub(t0).Seconds()
	// The last, partial interval is worth a line if it saw I/O or is long
	// enough for its rate to mean something.
	if elapsed-rep.last > 0.05 || rep.pending() {
		if err := rep.interval(elapsed); err != nil && outErr == nil {
			outErr = err
		}
	}
	tot, err := rep.summary(elapsed, g.e.Job.Verify)
	if outErr == nil {
		outErr = err
	}
	res := Result{totals: tot, Interrupted: interrupted}
	// The first failure is the one to report (one line); the others
	// usually follow from it.
	for _, err := range g.errs {
		if err != nil {
			return res, err
		}
	}
	return res, outErr
}

// layout checks the LUN against the job and gives each thread its region.
func (e *Generator) layout(workers []*worker) error {
	dev := workers[0].dev
	if bs := dev.BlockSize(); bs <= 0 || e.Job.BlockSize%bs != 0 || e.Job.Offset%bs != 0 {
		return fmt.Errorf("--bs %s and --offset %s must be multiples of the LUN's %d-byte blocks",
			loadspec.FormatSize(e.Job.BlockSize), loadspec.FormatSize(e.Job.Offset), bs)
	}
	if e.OwnDevices {
		// One thread's job on each device: the same region in each.
		one := e.Job
		one.Threads = 1
		for _, w := range workers {
			rs, err := one.Regions(w.dev.Capacity())
			if err != nil {
				return fmt.Errorf("thread %d: %w", w.id, err)
			}
			w.region = rs[0]
		}
		return nil
	}
	rs, err := e.Job.Regions(dev.Capacity())
	if err != nil {
		return err
	}
	for i, w := range workers {
		w.region = rs[i]
	}
	return nil
}

func (e *Generator) progress(el time.Duration, workers []*worker) {
	var b int64
	for _, w := range workers {
		w.stats.mu.Lock()
		b += w.stats.ops[opRead].bytes + w.stats.ops[opWrite].bytes
		w.stats.mu.Unlock()
	}
	fmt.Fprintf(e.Progress, "sanqos-iscsiload: %s %s: %.1f MiB moved, %.2f MB/s on average\n",
		e.Job.Name, el.Round(time.Second), float64(b)/(1<<20), float64(b)/el.Seconds()/1e6)
}

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// asyncMem is an AsyncDevice over a memLUN: every I/O takes lat and
// overlaps the others; it records how many were outstanding at most.
type asyncMem struct {
	memDev
	lat     time.Duration
	pending []asyncOp
	maxOut  *int
	depth   int
}

type asyncOp struct {
	tag   int
	write bool
	p     []byte
	off   int64
	due   time.Time
}

func (d *asyncMem) StartAsync(depth int, bs int64) error { d.depth = depth; return nil }

func (d *asyncMem) Issue(tag int, write bool, p []byte, off int64) error {
	for _, o := range d.pending {
		if o.tag == tag {
			return errors.New("tag reused while outstanding")
		}
	}
	if write {
		p = append([]byte(nil), p...) // Issue copies a write's data
	}
	d.pending = append(d.pending, asyncOp{tag, write, p, off, time.Now().Add(d.lat)})
	*d.maxOut = max(*d.maxOut, len(d.pending))
	return nil
}

func (d *asyncMem) Reap(into []Completion, timeout time.Duration) ([]Completion, error) {
	if len(d.pending) == 0 {
		time.Sleep(timeout)
		return into, nil
	}
	if w := time.Until(d.pending[0].due); w > 0 {
		if w > timeout {
			time.Sleep(timeout)
			return into, nil
		}
		time.Sleep(w)
	}
	now := time.Now()
	keep := d.pending[:0]
	for _, o := range d.pending {
		if o.due.After(now) {
			keep = append(keep, o)
			continue
		}
		var err error
		if o.write {
			err = d.memDev.WriteAt(o.p, o.off)
		} else {
			err = d.memDev.ReadAt(o.p, o.off)
		}
		into = append(into, Completion{Tag: o.tag, Err: err})
	}
	d.pending = keep
	return into, nil
}

func TestIODepthKeepsIOsOutstanding(t *testing.T) {
	for _, depth := range []int{1, 8, 32} {
		l := newMemLUN(4 << 20)
		maxOut := 0
		open := func(th int) (Device, error) {
			d, err := l.open(th)
			if err != nil {
				return nil, err
			}
			return &asyncMem{memDev: d.(memDev), lat: 5 * time.Millisecond, maxOut: &maxOut}, nil
		}
		job := loadspec.Job{Name: "d", Mode: loadspec.RandWrite, BlockSize: 4096, Size: 1 << 20, Threads: 1, IODepth: depth,
			Verify: true, Seed: 3}
		e := &Generator{Job: job, Clock: clock.Real{}, Open: open, Out: iolog.NewWriter(io.Discard),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		begin := time.Now()
		res, err := e.Run(context.Background())
		if err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		took := time.Since(begin)
		// 256 writes and 256 verified reads of 5 ms each.
		if res.verified != 256 || res.mismatches != 0 || res.ios != 512 {
			t.Errorf("depth %d: %d I/Os, verified %d, mismatches %d", depth, res.ios, res.verified, res.mismatches)
		}
		switch {
		case depth == 1 && maxOut != 0:
			t.Errorf("depth 1 went through the asynchronous path (%d outstanding)", maxOut)
		case depth > 1 && maxOut != depth:
			t.Errorf("depth %d: at most %d I/Os outstanding", depth, maxOut)
		}
		// Depth 1 needs 512 × 5 ms = 2.6 s; depth 8 an eighth of it.
		if depth == 8 && took > 1500*time.Millisecond {
			t.Errorf("depth 8 took %v for 512 I/Os of 5 ms: not overlapped", took)
		}
		if l.opened != l.closed {
			t.Errorf("depth %d: %d opened, %d closed", depth, l.opened, l.closed)
		}
	}
}

// A job asking for depth on a device without an asynchronous path says so.
func TestIODepthNeedsAsyncDevice(t *testing.T) {
	job := loadspec.Job{Name: "d", Mode: loadspec.Read, BlockSize: 4096, Size: 64 << 10, Threads: 1, IODepth: 4, Seed: 1}
	_, _, err := runEngine(t, context.Background(), newMemLUN(1<<20), job)
	if err == nil || !strings.Contains(err.Error(), "needs an asynchronous connection") {
		t.Fatalf("err %v", err)
	}
}

// Bursts and the rate limit work at depth as at depth 1: each burst
// moves its share and ends with nothing outstanding, and a paced deep
// reader holds its rate.
func TestIODepthBurstsAndPacing(t *testing.T) {
	l := newMemLUN(1 << 20)
	maxOut := 0
	open := func(th int) (Device, error) {
		d, err := l.open(th)
		if err != nil {
			return nil, err
		}
		return &asyncMem{memDev: d.(memDev), lat: 2 * time.Millisecond, maxOut: &maxOut}, nil
	}
	job := loadspec.Job{Name: "b", Mode: loadspec.Write, BlockSize: 4096, Size: 256 << 10, Threads: 2, IODepth: 4,
		OnSize: 64 << 10, OffTime: 300 * time.Millisecond, Runtime: 1150 * time.Millisecond, Seed: 1}
	var out bytes.Buffer
	e := &Generator{Job: job, Clock: clock.Real{}, Open: open, Out: iolog.NewWriter(&out), PerThread: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(4 * 2 * 64 << 10); res.bytes != want || maxOut != 4 {
		t.Fatalf("moved %d bytes (want %d), at most %d outstanding (want 4)", res.bytes, want, maxOut)
	}
	recs, err := iolog.ReadRecords(&out)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range iolog.Select(recs, iolog.KindBurst, 1, iolog.OpWrite) {
		if b.Bytes != 64<<10 || b.IOs != 16 {
			t.Errorf("burst line %+v: want 64 KiB in 16 I/Os", b)
		}
	}

	// 400 KiB/s of 4 KiB reads: 100 a second, whatever the depth.
	job = loadspec.Job{Name: "r", Mode: loadspec.RandRead, BlockSize: 4096, Threads: 1, IODepth: 8, Rate: 400 << 10,
		Runtime: 1500 * time.Millisecond, TimeBased: true, Seed: 1}
	out.Reset()
	e = &Generator{Job: job, Clock: clock.Real{}, Open: open, Out: iolog.NewWriter(&out),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, _ = iolog.ReadRecords(&out)
	s, _ := iolog.Summary(recs, "")
	if r := float64(s.IOs) / s.Dur; r < 90 || r > 110 {
		t.Errorf("paced deep reader: %.0f I/Os a second, want 100", r)
	}
	if s.Lat.Mean > 10 {
		t.Errorf("paced deep reader: mean latency %.1f ms for 2 ms I/Os: completions stamped late", s.Lat.Mean)
	}
}

// syncCheck is an asyncMem whose Sync records how many I/Os were still
// outstanding: a flush must come after the writes before it completed.
type syncCheck struct {
	*asyncMem
	outstandingAtSync *int
}

func (d syncCheck) Sync() error {
	*d.outstandingAtSync += len(d.pending)
	return d.asyncMem.Sync()
}

// --fsync N flushes after every N writes of a thread, at every depth,
// with nothing outstanding when it does, and writes nothing extra.
func TestFsyncFlushesEveryNWrites(t *testing.T) {
	for _, tc := range []struct {
		depth, fsync int
		syncs        int
		unsynced     int64
	}{
		{1, 4, 16, 0},        // 64 writes of 4 KiB, a flush every 4
		{1, 5, 12, 4 * 4096}, // the last 4 writes are not flushed
		{8, 16, 4, 0},        // deep queue: drained before each flush
		{1, 0, 0, 64 * 4096},
	} {
		l := newMemLUN(1 << 20)
		maxOut, atSync := 0, 0
		open := func(th int) (Device, error) {
			d, err := l.open(th)
			if err != nil {
				return nil, err
			}
			if tc.depth == 1 {
				return d, nil
			}
			return syncCheck{&asyncMem{memDev: d.(memDev), lat: time.Millisecond, maxOut: &maxOut}, &atSync}, nil
		}
		job := loadspec.Job{Name: "f", Mode: loadspec.RandWrite, BlockSize: 4096, Size: 256 << 10, Threads: 1,
			IODepth: tc.depth, Fsync: tc.fsync, Seed: 3}
		e := &Generator{Job: job, Clock: clock.Real{}, Open: open, Out: iolog.NewWriter(io.Discard),
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if _, err := e.Run(context.Background()); err != nil {
			t.Fatalf("depth %d fsync %d: %v", tc.depth, tc.fsync, err)
		}
		if l.syncs != tc.syncs || l.unsynced != tc.unsynced || l.written != 256<<10 {
			t.Errorf("depth %d fsync %d: %d flushes, %d bytes unflushed of %d written; want %d, %d of %d",
				tc.depth, tc.fsync, l.syncs, l.unsynced, l.written, tc.syncs, tc.unsynced, 256<<10)
		}
		if atSync != 0 {
			t.Errorf("depth %d fsync %d: %d I/Os still outstanding at the flushes", tc.depth, tc.fsync, atSync)
		}
	}
}

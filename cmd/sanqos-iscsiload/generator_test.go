package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// memLUN is an in-memory LUN shared by the sessions of one test.
type memLUN struct {
	mu       sync.Mutex
	data     []byte
	opened   int
	closed   int
	corrupt  int64 // flip a byte when reading the block at this offset (-1: never)
	failAt   int64 // fail I/O at this offset (-1: never)
	openFail int   // thread whose login fails (0: none)
	syncs    int   // Sync calls
	// written counts the bytes written, unsynced the bytes written since
	// the last Sync (the flush is of the writes done so far).
	written, unsynced int64
}

func newMemLUN(size int64) *memLUN { return &memLUN{data: make([]byte, size), corrupt: -1, failAt: -1} }

type memDev struct{ l *memLUN }

func (l *memLUN) open(thread int) (Device, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if thread == l.openFail {
		return nil, errors.New("login refused")
	}
	l.opened++
	return memDev{l}, nil
}

func (d memDev) Capacity() int64  { return int64(len(d.l.data)) }
func (d memDev) BlockSize() int64 { return 512 }
func (d memDev) Close() error {
	d.l.mu.Lock()
	d.l.closed++
	d.l.mu.Unlock()
	return nil
}

func (d memDev) Sync() error {
	d.l.mu.Lock()
	defer d.l.mu.Unlock()
	d.l.syncs++
	d.l.unsynced = 0
	return nil
}

func (d memDev) ReadAt(p []byte, off int64) error {
	d.l.mu.Lock()
	defer d.l.mu.Unlock()
	if off == d.l.failAt {
		return errors.New("check condition")
	}
	copy(p, d.l.data[off:])
	if off == d.l.corrupt {
		p[100] ^= 0xff
	}
	return nil
}

func (d memDev) WriteAt(p []byte, off int64) error {
	d.l.mu.Lock()
	defer d.l.mu.Unlock()
	if off == d.l.failAt {
		return errors.New("check condition")
	}
	copy(d.l.data[off:], p)
	d.l.written += int64(len(p))
	d.l.unsynced += int64(len(p))
	return nil
}

func runEngine(t *testing.T, ctx context.Context, l *memLUN, job loadspec.Job) (Result, []iolog.Record, error) {
	t.Helper()
	var out bytes.Buffer
	e := &Generator{Job: job, Clock: clock.Real{}, Open: l.open, Out: iolog.NewWriter(&out), PerThread: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := e.Run(ctx)
	recs, rerr := iolog.ReadRecords(&out)
	if rerr != nil {
		t.Fatalf("output does not parse: %v\n%s", rerr, out.String())
	}
	if l.closed != l.opened {
		t.Errorf("%d sessions opened, %d closed", l.opened, l.closed)
	}
	return res, recs, err
}

func TestVerifyFindsCorruption(t *testing.T) {
	job := loadspec.Job{Name: "v", Mode: loadspec.RandWrite, BlockSize: 4096, Size: 256 << 10, Threads: 3, Verify: true, Seed: 5}
	l := newMemLUN(1 << 20)
	res, recs, err := runEngine(t, context.Background(), l, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.verified != 3*64 || res.mismatches != 0 {
		t.Fatalf("clean run: verified %d, mismatches %d", res.verified, res.mismatches)
	}
	s, _ := iolog.Summary(recs, "")
	if s.Op != iolog.OpRead || *s.Verified != 192 || *s.Mismatches != 0 {
		t.Fatalf("last line %+v", s)
	}
	// The pattern stays on the LUN: a read-only verify run checks it, and
	// finds the one block the device damages on the way back.
	l.corrupt = 256<<10 + 8*4096 // thread 2's ninth block
	job.Mode = loadspec.Read
	res, _, err = runEngine(t, context.Background(), l, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.verified != 192 || res.mismatches != 1 || !strings.Contains(res.firstMismatch, "checksum mismatch") {
		t.Fatalf("verified %d, mismatches %d, first %q", res.verified, res.mismatches, res.firstMismatch)
	}
	// A different seed is someone else's data.
	l.corrupt = -1
	job.Seed = 6
	if res, _, _ = runEngine(t, context.Background(), l, job); res.mismatches != 192 {
		t.Fatalf("wrong seed: %d mismatches, want all 192", res.mismatches)
	}
}

func TestSizeBasedRunMovesSizePerThread(t *testing.T) {
	job := loadspec.Job{Name: "s", Mode: loadspec.Write, BlockSize: 8192, Size: 512 << 10, Threads: 2, Seed: 1}
	l := newMemLUN(2 << 20)
	res, recs, err := runEngine(t, context.Background(), l, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.bytes != 2*512<<10 || res.ios != 128 {
		t.Fatalf("moved %d bytes in %d I/Os", res.bytes, res.ios)
	}
	for th := 1; th <= 2; th++ {
		if s := iolog.Select(recs, iolog.KindSummary, th, iolog.OpWrite); len(s) != 1 || s[0].Bytes != 512<<10 {
			t.Errorf("thread %d summary %+v", th, s)
		}
	}
	// Each thread wrote its own region and nothing beyond.
	if !bytes.Equal(l.data[1<<20:], make([]byte, 1<<20)) || bytes.Equal(l.data[:4096], make([]byte, 4096)) {
		t.Error("writes landed outside the threads' regions")
	}
}

func TestFailuresStopTheRun(t *testing.T) {
	job := loadspec.Job{Name: "f", Mode: loadspec.Read, BlockSize: 4096, Threads: 3, Seed: 1}
	l := newMemLUN(1 << 20)
	l.openFail = 2
	if _, err := (&Generator{Job: job, Clock: clock.Real{}, Open: l.open, Out: iolog.NewWriter(io.Discard),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Run(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "thread 2: login refused") {
		t.Fatalf("login failure: %v", err)
	}
	if l.opened != l.closed {
		t.Fatalf("after a failed login %d sessions opened, %d closed", l.opened, l.closed)
	}

	// A failing thread also stops the others of a long time-based run.
	l = newMemLUN(1 << 20)
	l.failAt = 12288
	job.Runtime, job.TimeBased = time.Hour, true
	begin := time.Now()
	_, _, err := runEngine(t, context.Background(), l, job)
	if time.Since(begin) > 10*time.Second {
		t.Fatalf("the run went on for %v after a thread failed", time.Since(begin))
	}
	if err == nil || !strings.Contains(err.Error(), "thread 1: read of 4096 bytes at offset 12288") {
		t.Fatalf("I/O failure: %v", err)
	}

	job.Runtime, job.TimeBased = 0, false
	job.Size = 1 << 20 // three threads cannot have 1 MiB each
	if _, _, err := runEngine(t, context.Background(), newMemLUN(1<<20), job); err == nil ||
		!strings.Contains(err.Error(), "lower --size or --threads") {
		t.Fatalf("oversized job: %v", err)
	}
}

func TestInterruptStopsCleanly(t *testing.T) {
	job := loadspec.Job{Name: "i", Mode: loadspec.RandRead, BlockSize: 4096, Threads: 2, Rate: 400 << 10,
		Runtime: time.Hour, TimeBased: true, Seed: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 1300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	res, recs, err := runEngine(t, ctx, newMemLUN(1<<20), job)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); !res.Interrupted || took > 3*time.Second {
		t.Fatalf("interrupted=%v after %v", res.Interrupted, took)
	}
	// One full second was reported, and the rest in a last short interval.
	iv := iolog.Select(recs, iolog.KindInterval, 0, iolog.OpRead)
	if len(iv) != 2 || iv[0].Dur != 1 || iv[1].Dur < 0.2 || iv[1].Dur > 0.5 {
		t.Fatalf("intervals %+v", iv)
	}
	// Pacing: 2 threads × 100 I/Os per second.
	if r := iv[0].IOPS; r < 180 || r > 220 {
		t.Errorf("first second had %v IOPS, want about 200", r)
	}
	if s, _ := iolog.Summary(recs, ""); s.IOs != iv[0].IOs+iv[1].IOs {
		t.Errorf("summary has %d I/Os, intervals %d", s.IOs, iv[0].IOs+iv[1].IOs)
	}
}

func TestOnOffBurstsStartTogether(t *testing.T) {
	job := loadspec.Job{Name: "o", Mode: loadspec.Write, BlockSize: 4096, Size: 256 << 10, Threads: 2,
		OnSize: 64 << 10, OffTime: 300 * time.Millisecond, Runtime: 1150 * time.Millisecond, Seed: 1}
	l := newMemLUN(1 << 20)
	var out, ioLog bytes.Buffer
	e := &Generator{Job: job, Clock: clock.Real{}, Open: l.open, Out: iolog.NewWriter(&out), IOLog: iolog.NewWriter(&ioLog),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.IOLog.Flush()
	ios, err := iolog.ReadIOs(&ioLog)
	if err != nil {
		t.Fatal(err)
	}
	// Bursts start at about 0, 0.3, 0.6 and 0.9 s; the next would start
	// after the runtime. Each burst moves 64 KiB per thread.
	if want := int64(4 * 2 * 64 << 10); res.bytes != want {
		t.Fatalf("moved %d bytes, want %d (4 bursts × 2 threads × 64 KiB)", res.bytes, want)
	}
	if res.elapsed < 1.15 {
		t.Errorf("run ended after %.3f s, before its runtime", res.elapsed)
	}
	// Group I/Os into bursts by the gaps between them; both threads take
	// part in every burst, and bursts are at least the off time apart.
	var starts []float64
	threads := map[int]map[int]bool{}
	last := -1.0
	for _, x := range ios {
		if last < 0 || x.T-last > 0.2 {
			starts = append(starts, x.T)
			threads[len(starts)-1] = map[int]bool{}
		}
		threads[len(starts)-1][x.Thread] = true
		last = x.T
	}
	if len(starts) != 4 {
		t.Fatalf("%d bursts at %v, want 4", len(starts), starts)
	}
	for i := range starts {
		if len(threads[i]) != 2 {
			t.Errorf("burst %d ran on threads %v, want both", i, threads[i])
		}
		if i > 0 && starts[i]-starts[i-1] < 0.3 {
			t.Errorf("burst %d started %.3f s after the previous one, less than the off time", i, starts[i]-starts[i-1])
		}
	}
}

// slowDev delays the I/O at one offset, as a stalled target would.
type slowDev struct {
	memDev
	at    int64
	delay time.Duration
}

func (d slowDev) WriteAt(p []byte, off int64) error {
	if off == d.at {
		time.Sleep(d.delay)
	}
	return d.memDev.WriteAt(p, off)
}

// TestStallsAndBinsAreRecorded: a thread's longest I/O and longest gap
// between completions reach the summary (a 250 ms stall of one write),
// the rate limit's own waits are not counted as gaps, thread 0's
// intervals carry 100 ms bins that add up to their bytes, and an on/off
// job writes one burst line per thread and burst.
func TestStallsAndBinsAreRecorded(t *testing.T) {
	l := newMemLUN(1 << 20)
	open := func(th int) (Device, error) {
		d, err := l.open(th)
		if err != nil {
			return nil, err
		}
		return slowDev{memDev: d.(memDev), at: 8 * 4096, delay: 250 * time.Millisecond}, nil
	}
	job := loadspec.Job{Name: "st", Mode: loadspec.Write, BlockSize: 4096, Size: 64 << 10, Threads: 2,
		OnSize: 32 << 10, OffTime: 200 * time.Millisecond, Runtime: 1500 * time.Millisecond, Seed: 1}
	var out bytes.Buffer
	e := &Generator{Job: job, Clock: clock.Real{}, Open: open, Out: iolog.NewWriter(&out), PerThread: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := iolog.ReadRecords(&out)
	if err != nil {
		t.Fatal(err)
	}
	// Thread 1's region starts at 0: its ninth block stalls (in its
	// second burst, the region being 16 blocks); thread 2's never does.
	s1 := iolog.Select(recs, iolog.KindSummary, 1, iolog.OpWrite)[0]
	s2 := iolog.Select(recs, iolog.KindSummary, 2, iolog.OpWrite)[0]
	if s1.Lat.Max < 250 || s1.MaxGapMs < s1.Lat.Max || s1.MaxGapMs > 400 {
		t.Errorf("stalled thread: longest I/O %.1f ms, gap %.1f ms; want ≥ 250 and the gap ≥ the I/O", s1.Lat.Max, s1.MaxGapMs)
	}
	if s2.MaxGapMs > 100 {
		t.Errorf("thread 2 never stalled but its longest gap is %.1f ms", s2.MaxGapMs)
	}
	if all, _ := iolog.Summary(recs, iolog.OpWrite); all.MaxGapMs != max(s1.MaxGapMs, s2.MaxGapMs) {
		t.Errorf("job's longest gap %.1f, threads' %.1f and %.1f", all.MaxGapMs, s1.MaxGapMs, s2.MaxGapMs)
	}
	for _, iv := range iolog.Select(recs, iolog.KindInterval, 0, iolog.OpWrite) {
		var sum int64
		for _, b := range iv.BinsBytes {
			sum += b
		}
		// One bin per BinSeconds begun; a last bin shorter than the
		// ticker's jitter may be folded into the one before, so the
		// count is the floor or the ceiling (with a 1 ms overshoot, the
		// log's rounded duration sits on BinCount's edge either way).
		n, bins := len(iv.BinsBytes), iv.Dur/iolog.BinSeconds
		if sum != iv.Bytes || n < max(1, int(math.Floor(bins))) || n > int(math.Ceil(bins)) {
			t.Errorf("interval at %.3f s: %d bins adding to %d bytes, the interval has %d bytes over %.3f s", iv.T, len(iv.BinsBytes), sum, iv.Bytes, iv.Dur)
		}
	}
	bursts := iolog.Select(recs, iolog.KindBurst, 1, iolog.OpWrite)
	if len(bursts) < 2 {
		t.Fatalf("thread 1 has %d burst lines, want one per burst (at least 2)", len(bursts))
	}
	for _, b := range bursts {
		if b.Bytes != 32<<10 || b.IOs != 8 || b.MBs <= 0 {
			t.Errorf("burst line %+v: want 32 KiB in 8 I/Os at a positive rate", b)
		}
	}
	if b := bursts[1]; b.MaxGapMs < 250 || b.Lat.Max < 250 {
		t.Errorf("the stalled burst says longest I/O %.1f ms, gap %.1f ms", b.Lat.Max, b.MaxGapMs)
	}

	// A rate-limited job waits 100 ms between I/Os by design: no gap.
	job = loadspec.Job{Name: "r", Mode: loadspec.RandRead, BlockSize: 4096, Threads: 1, Rate: 40 << 10,
		Runtime: 700 * time.Millisecond, TimeBased: true, Seed: 1}
	_, recs, err = runEngine(t, context.Background(), newMemLUN(1<<20), job)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := iolog.Summary(recs, ""); s.IOs < 5 || s.MaxGapMs > 50 {
		t.Errorf("paced job: %d I/Os, longest gap %.1f ms; the pacer's 100 ms waits are not stalls", s.IOs, s.MaxGapMs)
	}
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/diskemu"
)

// slowDisk is a diskemu model with unbounded parallelism: every request
// completes d after it arrives, whatever else is in flight. It counts the
// requests in flight at once.
type slowDisk struct {
	d      time.Duration
	mu     sync.Mutex
	ends   []time.Time
	maxOut int
}

func (m *slowDisk) Submit(now time.Time, _ diskemu.Op, _, _ int64, _ uint64) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := m.ends[:0]
	for _, e := range m.ends {
		if e.After(now) {
			keep = append(keep, e)
		}
	}
	m.ends = append(keep, now.Add(m.d))
	m.maxOut = max(m.maxOut, len(m.ends))
	return now.Add(m.d)
}

// reset forgets the deepest queue seen, and says what it was.
func (m *slowDisk) reset() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.maxOut
	m.maxOut = 0
	return n
}

// mountSlowDisk serves dir/slow-backing through an emulated slowDisk at
// dir/slow, with a 64 MiB image; without FUSE the depth test skips.
func (l *lab) mountSlowDisk(dir string) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return
	}
	backing := filepath.Join(dir, "slow-backing")
	if err := os.MkdirAll(backing, 0o755); err != nil {
		l.t.Fatal(err)
	}
	img := filepath.Join(backing, "slow.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		l.t.Fatal(err)
	}
	l.slow = &slowDisk{d: slowService}
	emu, err := diskemu.Mount(diskemu.Options{Mountpoint: filepath.Join(dir, "slow"), BackingDir: backing,
		Model: l.slow, StatsPath: "-", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		l.t.Logf("no emulated disk (%v): the iodepth test will skip", err)
		return
	}
	l.emu = emu
}

// testIODepth: on a disk that overlaps every request, a connection with
// --iodepth 8 keeps 8 commands at the disk and moves about 8 times as
// much as one with iodepth 1 beside it; iodepth 32 verifies its data on
// both LUNs. The slow LUN is measured with reads: tgtd writes with a
// synchronous pwrite, and the kernel holds a FUSE file's inode lock
// across a synchronous direct write, so writes to one image reach the
// disk one at a time whatever the initiator keeps outstanding.
func (l *lab) testIODepth(t *testing.T) {
	if l.emu == nil {
		t.Skip("no FUSE: no emulated disk to count outstanding commands")
	}
	slow := []string{"--target", iqnSlow, "--rw", "randread", "--bs", "16k", "--size", "16m"}

	t.Run("outstanding", func(t *testing.T) {
		l.slow.reset()
		out, stderr, err := l.run(append(slow, "--iodepth", "8", "--runtime", "2s", "--time-based")...)
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		s := lastSummary(t, out)
		deepest := l.slow.reset()
		t.Logf("iodepth 8: %d reads in %.2f s (%.0f IOPS at %v each), at most %d at the disk at once",
			s.IOs, s.Dur, s.IOPS, slowService, deepest)
		if deepest != 8 {
			t.Errorf("the disk saw at most %d commands at once, want 8 (the iodepth)", deepest)
		}
		if s.Errors != 0 {
			t.Errorf("%d errors", s.Errors)
		}
	})

	// Side by side, so that the machine's load weighs on both alike.
	t.Run("throughput-ratio", func(t *testing.T) {
		start := fmt.Sprintf("%.3f", float64(time.Now().Add(1500*time.Millisecond).UnixNano())/1e9)
		var outs [2]bytes.Buffer
		var errs [2]bytes.Buffer
		var cmds [2]interface{ Wait() error }
		for i, depth := range []string{"1", "8"} {
			args := append(append([]string{}, slow...), "--iodepth", depth, "--runtime", "3s", "--time-based",
				"--start-at", start, "--initiator", "iqn.2010-05.sanqos.lg:d"+depth, "--offset", fmt.Sprint(i*32)+"m")
			cmd := l.command(args...)
			cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds[i] = cmd
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("job %d: %v: %s", i, err, errs[i].String())
			}
		}
		one, eight := lastSummary(t, outs[0].String()), lastSummary(t, outs[1].String())
		ratio := eight.IOPS / one.IOPS
		t.Logf("side by side on a %v disk: iodepth 1 %.0f IOPS (p50 %.1f ms), iodepth 8 %.0f IOPS (p50 %.1f ms): ratio %.2f",
			slowService, one.IOPS, one.Lat.P50, eight.IOPS, eight.Lat.P50, ratio)
		if ratio < 5 || ratio > 8.5 {
			t.Errorf("iodepth 8 moved %.2f times what iodepth 1 did, want about 8 (at least 5)", ratio)
		}
	})

	t.Run("32-verify", func(t *testing.T) {
		for _, target := range []string{iqnSlow, iqnOK} {
			l.slow.reset()
			size, blocks := "8m", int64(2*512)
			if target == iqnSlow {
				size, blocks = "2m", 2*128 // its writes are serial (above)
			}
			args := []string{"--target", target, "--rw", "randwrite", "--bs", "16k", "--size", size, "--threads", "2",
				"--iodepth", "32", "--verify"}
			out, stderr, err := l.run(args...)
			if err != nil {
				t.Fatalf("%s: %v: %s", target, err, stderr)
			}
			s := lastSummary(t, out)
			if s.Verified == nil || *s.Verified != blocks || *s.Mismatches != 0 || s.Errors != 0 {
				t.Fatalf("%s: summary %+v", target, s)
			}
			deepest := l.slow.reset()
			t.Logf("%s: iodepth 32 × 2 threads: %d blocks verified; %d at the emulated disk at once", target, *s.Verified, deepest)
			// The read-back pass: tgtd's 16 I/O threads per LUN at most.
			if target == iqnSlow && (deepest < 16 || deepest > 64) {
				t.Errorf("the disk saw at most %d commands at once from 2 connections of iodepth 32", deepest)
			}
		}
		// The reads of a deep queue verify too.
		out, stderr, err := l.run("--target", iqnOK, "--rw", "randread", "--bs", "16k", "--size", "8m", "--threads", "2",
			"--iodepth", "32", "--verify")
		if s := lastSummary(t, out); err != nil || s.Verified == nil || *s.Verified != 1024 || *s.Mismatches != 0 {
			t.Fatalf("read-back at iodepth 32: %v %s %+v", err, stderr, s)
		}
	})

	// --fsync 4: 16 writes flush 4 times, each a SYNCHRONIZE CACHE that
	// tgtd turns into an fsync of the image, which the emulated disk
	// counts.
	t.Run("fsync", func(t *testing.T) {
		before := l.emu.Stats().Fsyncs
		out, stderr, err := l.run("--target", iqnSlow, "--rw", "write", "--bs", "64k", "--size", "1m", "--fsync", "4")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		if s := lastSummary(t, out); s.Errors != 0 || s.IOs != 16 {
			t.Fatalf("summary %+v", s)
		}
		flushed := l.emu.Stats().Fsyncs - before
		t.Logf("--fsync 4 over 16 writes: %d fsyncs at the emulated disk", flushed)
		if flushed < 4 {
			t.Errorf("the emulated disk saw %d fsyncs, want at least the 4 flushes", flushed)
		}
	})
}

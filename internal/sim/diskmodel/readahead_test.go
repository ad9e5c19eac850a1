package diskmodel

import (
	"math/rand"
	"testing"
	"time"
)

// lookAhead is plain() on one spindle (array offsets are spindle offsets)
// with a 256 KiB look-ahead in two segments.
func lookAhead() Profile {
	p := plain()
	p.Spindles = 1
	p.ReadAheadBytes = 256 << 10
	p.ReadAheadSegments = 2
	return p
}

const (
	ki  = 1 << 10
	far = 7629 * 64 * ki // about half the spindle away, on a stripe boundary
)

func TestReadAhead(t *testing.T) {
	full := 1 + (4-1)/meanSqrtRandomDistance
	tests := []struct {
		name  string
		p     func() Profile
		run   func(a *Array) time.Time
		want  time.Duration // -1: only at least min
		min   time.Duration
		hits  int64
		reads int64
	}{
		{"the next read, once the head has read ahead, comes from the buffer: overhead + transfer",
			lookAhead, func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64*ki, 1) // 0.5 + 1 ms, the head then reads on
				return a.Submit(t0.Add(msd(10)), Read, 64*ki, 64*ki, 1)
			}, msd(10 + 0.5 + 1), 0, 1, 2},
		{"a buffered read crosses the shared channel",
			func() Profile { p := lookAhead(); p.BusMBs = 65.536 / 2; return p }, func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64*ki, 1) // media 1 ms, channel 2 ms: ends 2.5
				return a.Submit(t0.Add(msd(10)), Read, 64*ki, 64*ki, 1)
			}, msd(10 + 0.5 + 2), 0, 1, 2},
		{"a read just past what the head has read waits for it (streaming)",
			lookAhead, func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64*ki, 1)
				// At 1.5 ms the head starts on 64–128 KiB and has it at 2.5.
				return a.Submit(t0.Add(msd(1.5)), Read, 64*ki, 64*ki, 1)
			}, msd(1.5 + 0.5 + 1), 0, 1, 2},
		{"the head resumes only when the host reads on past the limit",
			func() Profile {
				// A channel four times the media and no command overhead, so
				// the host could outrun the head.
				p := lookAhead()
				p.BusMBs, p.CommandOverheadMs = 4*65.536, 0
				return p
			}, func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64*ki, 1) // media until 1 ms; the buffer holds 320 KiB by 5 ms
				a.Submit(t0.Add(msd(100)), Read, 64*ki, 64*ki, 1)
				// That moved the limit to 384 KiB: the head reads 320–384 KiB
				// from 100 ms, done at 101, though the host asks at 100.25.
				return a.Submit(t0.Add(msd(100)), Read, 320*ki, 64*ki, 1)
			}, msd(101), 0, 2, 3},
		{"another read takes the head: the segment keeps only what it had",
			lookAhead, func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64*ki, 1)
				a.Submit(t0.Add(msd(1.5)), Read, far, 8*ki, 2) // nothing read ahead yet
				return a.Submit(t0.Add(msd(100)), Read, 64*ki, 64*ki, 1)
			}, -1, msd(100 + 0.5 + 1 + 1), 0, 3},
		{"a write drops the segment holding the sectors it overwrites",
			lookAhead, func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64*ki, 1)
				a.Submit(t0.Add(msd(10)), Write, 128*ki, 8*ki, 2)
				return a.Submit(t0.Add(msd(100)), Read, 64*ki, 64*ki, 1)
			}, -1, msd(100 + 0.5 + 1 + 1), 0, 2},
		{"with one segment, two streams evict each other",
			func() Profile { p := lookAhead(); p.ReadAheadSegments = 1; return p }, twoStreams, -1, msd(100 + 0.5 + full/2 + 1), 0, 6},
		{"with two segments, two streams both read ahead",
			lookAhead, twoStreams, msd(100 + 0.5 + 1), 0, 4, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.p(), 1)
			got := tc.run(a)
			if tc.want >= 0 {
				near(t, tc.name, got, tc.want)
			} else if got.Sub(t0) < tc.min {
				t.Errorf("completes at +%v, want a read from the media, at least +%v", got.Sub(t0), tc.min)
			}
			if s := a.Stats(); s.ReadAheadHits != tc.hits || s.Reads != tc.reads {
				t.Errorf("%d buffered of %d reads, want %d of %d", s.ReadAheadHits, s.Reads, tc.hits, tc.reads)
			}
		})
	}
}

// twoStreams reads two sequential streams half a spindle apart in turn,
// 64 KiB every 20 ms, three reads each, and returns the last completion.
func twoStreams(a *Array) time.Time {
	var last time.Time
	for i := range 6 {
		off := int64(i/2) * 64 * ki
		if i%2 == 1 {
			off += far
		}
		last = a.Submit(t0.Add(time.Duration(i)*msd(20)), Read, off, 64*ki, uint64(i%2))
	}
	return last
}

func TestReadAheadLeavesRandomReadsToTheMedia(t *testing.T) {
	p, _ := ProfileByName("thesis-2010")
	a := New(p, 1)
	rng := rand.New(rand.NewSource(1))
	now := t0
	for range 2000 {
		off := rng.Int63n(8<<30) / (8 * ki) * (8 * ki)
		now = a.Submit(now, Read, off, 8*ki, 1).Add(msd(0.2))
	}
	if s := a.Stats(); s.ReadAheadHits > 20 {
		t.Errorf("%d of 2000 random 8 KiB reads over 8 GiB came from the buffer, want at most 1 %%", s.ReadAheadHits)
	}
}

// seqReaders runs n sequential readers at queue depth 1 on thesis-2010,
// each in its own 4 GiB region, for 20 s of model time with gap between a
// completion and the next request (the host and network path), and returns
// each reader's MB/s.
func seqReaders(n int, bs int64, gap time.Duration) []float64 {
	p, _ := ProfileByName("thesis-2010")
	a := New(p, 1)
	next := make([]time.Time, n)
	pos := make([]int64, n)
	for i := range next {
		next[i] = t0
		pos[i] = int64(i) * 4 << 30
	}
	end := t0.Add(20 * time.Second)
	done := make([]int64, n)
	for {
		r := 0
		for i := range next {
			if next[i].Before(next[r]) {
				r = i
			}
		}
		if !next[r].Before(end) {
			break
		}
		next[r] = a.Submit(next[r], Read, pos[r], bs, uint64(r)).Add(gap)
		pos[r] += bs
		done[r] += bs
	}
	mbs := make([]float64, n)
	for i, b := range done {
		mbs[i] = float64(b) / 20 / 1e6
	}
	return mbs
}

// TestReadAheadCalibration checks thesis-2010 against the thesis's
// sequential readers: one 64 KiB reader moves 22 MB/s (Fig. 5.5 at 0 ms),
// four 32 KiB readers share the channel equally at about 9.5 MB/s each
// (Fig. 5.1). The gap stands for the lab's path above the disk (0.25 ms per
// 64 KiB on the ram profile).
func TestReadAheadCalibration(t *testing.T) {
	if one := seqReaders(1, 64*ki, msd(0.25))[0]; one < 19 || one > 25 {
		t.Errorf("one 64 KiB reader: %.1f MB/s, want 19–25 (thesis 22)", one)
	}
	four := seqReaders(4, 32*ki, msd(0.25))
	sum := 0.0
	for i, r := range four {
		sum += r
		if r < 8 || r > 11 {
			t.Errorf("reader %d of 4: %.1f MB/s, want 8–11 (thesis ~9.5)", i+1, r)
		}
	}
	if sum < 34 || sum > 41 {
		t.Errorf("four readers: %.1f MB/s together, want 34–41 (the channel's ~38)", sum)
	}
	t.Logf("four 32 KiB readers: %.1f MB/s (%.1f each)", sum, four)
}

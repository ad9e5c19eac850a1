package loadspec

import (
	"context"
	"flag"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"4096", 4096, false},
		{"8k", 8192, false},
		{"64KiB", 65536, false},
		{"128m", 128 << 20, false},
		{"2048MB", 2048 << 20, false},
		{"2g", 2 << 30, false},
		{" 1T ", 1 << 40, false},
		{"", 0, true},
		{"k", 0, true},
		{"-1k", 0, true},
		{"1.5m", 0, true},
		{"3x", 0, true},
		{"99999999999t", 0, true},
	} {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	for _, n := range []int64{1, 512, 8192, 3 << 20, 5 << 30, 12345} {
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("FormatSize(%d) = %q does not parse back (%d, %v)", n, FormatSize(n), back, err)
		}
	}
}

func parseJob(t *testing.T, args ...string) (Job, error) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Job{}, err
	}
	return f.Job()
}

func TestFlagsOverridePreset(t *testing.T) {
	j, err := parseJob(t, "--job", "smalljob", "--runtime", "3s", "--threads", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := Job{Name: "smalljob", Mode: RandRead, BlockSize: 8 * KiB, Size: 128 * MiB, Rate: 256 * KiB,
		Threads: 2, Runtime: 3 * time.Second, Seed: 1}
	if j != want {
		t.Fatalf("got %+v\nwant %+v", j, want)
	}
	// Defaults of flags the user did not give must not clobber the preset.
	j, err = parseJob(t, "--job", "seqwrite-64k")
	if err != nil {
		t.Fatal(err)
	}
	if j.Mode != Write || j.BlockSize != 64*KiB || j.Size != 2048*MiB {
		t.Fatalf("seqwrite-64k = %+v", j)
	}
	if j, _ := parseJob(t, "--job", "seqread-32k", "--bs", "4k", "--name", "b2-reader"); j.BlockSize != 4096 || j.Mode != Read || j.Name != "b2-reader" {
		t.Fatalf("--bs did not override the preset: %+v", j)
	}
}

func TestIODepth(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		depth int
	}{
		{nil, 1},
		{[]string{"--iodepth", "1"}, 1},
		{[]string{"--iodepth", "8"}, 8},
		{[]string{"--iodepth", "256"}, 256},
		{[]string{"--job", "randwrite-8k", "--iodepth", "32"}, 32},
	} {
		j, err := parseJob(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if j.Depth() != tc.depth {
			t.Errorf("%v: depth %d, want %d", tc.args, j.Depth(), tc.depth)
		}
		if s := j.String(); strings.Contains(s, "iodepth") != (tc.depth > 1) {
			t.Errorf("%v: String() = %q: iodepth shown only when above 1", tc.args, s)
		}
	}
	// A Job written as a literal leaves IODepth unset: one I/O.
	j := Job{Name: "x", Mode: Read, BlockSize: 4096, Threads: 1}
	if err := j.Validate(); err != nil || j.Depth() != 1 {
		t.Errorf("unset IODepth: %v, depth %d; want valid, 1", err, j.Depth())
	}
	j.IODepth = MaxIODepth + 1
	if err := j.Validate(); err == nil {
		t.Errorf("IODepth %d accepted", j.IODepth)
	}
}

func TestFsyncFlag(t *testing.T) {
	j, err := parseJob(t, "--job", "seqwrite-64k", "--fsync", "64")
	if err != nil {
		t.Fatal(err)
	}
	if j.Fsync != 64 || !strings.Contains(j.String(), "fsync=64") {
		t.Errorf("--fsync 64: Fsync %d, String %q", j.Fsync, j.String())
	}
	if j, _ := parseJob(t, "--job", "seqwrite-64k"); j.Fsync != 0 || strings.Contains(j.String(), "fsync") {
		t.Errorf("no --fsync: Fsync %d, String %q", j.Fsync, j.String())
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--job", "nope"}, "presets are randwrite-16k, randwrite-4k, randwrite-8k, seqread-32k, seqwrite-1m, seqwrite-64k, smalljob"},
		{[]string{"--rw", "readwrite"}, "use read, write, randread or randwrite"},
		{[]string{"--time-based"}, "--time-based needs --runtime"},
		{[]string{"--on", "64m", "--off", "5s"}, "--on needs --runtime"},
		{[]string{"--off", "5s", "--runtime", "1m"}, "--off needs --on"},
		{[]string{"--threads", "0"}, "--threads must be at least 1"},
		{[]string{"--verify", "--bs", "16"}, "at least 32 bytes"},
		{[]string{"--bs", "12q"}, "unknown unit"},
		{[]string{"--iodepth", "0"}, "--iodepth 0: want 1 to 256"},
		{[]string{"--iodepth", "257"}, "--iodepth 257: want 1 to 256"},
		{[]string{"--iodepth", "-3"}, "--iodepth -3: want 1 to 256"},
		{[]string{"--fsync", "-1", "--rw", "write"}, "--fsync -1: want the number of writes"},
		{[]string{"--fsync", "64", "--rw", "randread"}, "--fsync needs a write mode"},
	} {
		_, err := parseJob(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

func TestRegions(t *testing.T) {
	j := Job{Mode: Write, BlockSize: 64 * KiB, Threads: 3, Size: 10 * MiB, Offset: 1 * MiB}
	rs, err := j.Regions(64 * MiB)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if want := (Region{Start: 1*MiB + int64(i)*10*MiB, Len: 10 * MiB}); r != want {
			t.Errorf("region %d = %+v, want %+v", i, r, want)
		}
	}
	// Size 0 splits what is left into whole blocks.
	j.Size = 0
	rs, err = j.Regions(64*MiB + 1000)
	if err != nil {
		t.Fatal(err)
	}
	if rs[2].Start+rs[2].Len > 64*MiB+1000 || rs[0].Len%j.BlockSize != 0 || rs[0].Len != 21*MiB {
		t.Errorf("split regions %+v", rs)
	}
	j.Size = 30 * MiB
	if _, err := j.Regions(64 * MiB); err == nil || !strings.Contains(err.Error(), "lower --size or --threads") {
		t.Errorf("oversized job: error %v", err)
	}
}

func TestOffsetsVisitEveryBlockOncePerPass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		blocks int64
		random bool
	}{{"seq", 10, false}, {"rand-pow2", 64, true}, {"rand-odd", 1000, true}, {"rand-one", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := Region{Start: 4096, Len: tc.blocks * 512}
			o := NewOffsets(r, 512, tc.random, 7)
			var first []int64
			for pass := 0; pass < 2; pass++ {
				seen := map[int64]bool{}
				for i := int64(0); i < tc.blocks; i++ {
					off, np := o.Next()
					if np != (i == 0) {
						t.Fatalf("pass %d i %d: newPass = %v", pass, i, np)
					}
					if off < r.Start || off >= r.Start+r.Len || (off-r.Start)%512 != 0 || seen[off] {
						t.Fatalf("pass %d: bad or repeated offset %d", pass, off)
					}
					seen[off] = true
					if pass == 0 {
						first = append(first, off)
					}
				}
			}
			if tc.random && tc.blocks > 8 {
				inOrder := 0
				for i := 1; i < len(first); i++ {
					if first[i] == first[i-1]+512 {
						inOrder++
					}
				}
				if inOrder > len(first)/4 {
					t.Errorf("random order has %d of %d sequential steps", inOrder, len(first))
				}
			}
		})
	}
	a, b := NewOffsets(Region{Len: 1 << 20}, 4096, true, 1), NewOffsets(Region{Len: 1 << 20}, 4096, true, 2)
	same := 0
	for i := 0; i < 256; i++ {
		x, _ := a.Next()
		y, _ := b.Next()
		if x == y {
			same++
		}
	}
	if same > 32 {
		t.Errorf("seeds 1 and 2 agree on %d of 256 offsets", same)
	}
}

func TestPattern(t *testing.T) {
	const bs = 4096
	buf, scratch := make([]byte, bs), make([]byte, bs)
	FillPattern(buf, 9, 8192)
	if err := CheckPattern(buf, scratch, 9, 8192); err != nil {
		t.Fatalf("intact block: %v", err)
	}
	other := make([]byte, bs)
	FillPattern(other, 9, 12288)
	if string(other[headerLen:]) == string(buf[headerLen:]) {
		t.Fatal("two offsets have the same body")
	}
	damaged := append([]byte(nil), buf...)
	damaged[1000] ^= 1
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"zero", make([]byte, bs), "never written"},
		{"foreign", []byte(strings.Repeat("x", bs)), "foreign data"},
		{"damaged", damaged, "checksum mismatch"},
		{"misplaced", other, "holds the block of offset 12288"},
	} {
		if err := CheckPattern(tc.got, scratch, 9, 8192); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Odd sizes keep their tail deterministic.
	odd1, odd2 := make([]byte, 37), make([]byte, 37)
	FillPattern(odd1, 1, 0)
	if err := CheckPattern(odd1, odd2, 1, 0); err != nil {
		t.Fatalf("37-byte block: %v", err)
	}
}

func TestPacerHoldsRate(t *testing.T) {
	start := time.Unix(1000, 0)
	clk := clock.NewFake(start)
	const rate, bs = 256 * KiB, 8 * KiB // 32 I/Os per second, 31.25 ms apart
	p := NewPacer(clk, rate)
	for i := 0; i < 64; i++ {
		d := p.Delay(bs)
		// The thread starts the I/O after d; pretend the I/O takes 1 ms.
		clk.Advance(d + time.Millisecond)
		started := clk.Now().Add(-time.Millisecond)
		if want := start.Add(time.Duration(i) * 31250 * time.Microsecond); !started.Equal(want) {
			t.Fatalf("I/O %d started at %v, want %v", i, started.Sub(start), want.Sub(start))
		}
	}
	// A 200 ms stall is caught up back to back, then pacing resumes.
	clk.Advance(200 * time.Millisecond)
	zero := 0
	for p.Delay(bs) == 0 {
		zero++
	}
	if zero < 6 || zero > 8 {
		t.Errorf("after a 200 ms stall %d I/Os went without waiting, want about 7", zero)
	}
	p.Restart()
	if d := p.Delay(bs); d != 0 {
		t.Errorf("first I/O after Restart waits %v", d)
	}
	if d := p.Delay(bs); d != 31250*time.Microsecond {
		t.Errorf("second I/O after Restart waits %v, want 31.25ms", d)
	}
	if d := NewPacer(clk, 0).Delay(1 << 30); d != 0 {
		t.Errorf("unlimited pacer waits %v", d)
	}
}

func TestPacerWaitHonoursContext(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	p := NewPacer(clk, 1)
	if err := p.Wait(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx, 10); err == nil {
		t.Fatal("Wait ignored a cancelled context")
	}
}

func TestScheduleStartsBurstsTogether(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clk := clock.NewFake(t0)
	s := NewSchedule(clk, 2, 5*time.Second, t0.Add(30*time.Second))
	ctx := context.Background()

	arrive := func() chan Burst {
		ch := make(chan Burst, 1)
		go func() {
			b, err := s.Arrive(ctx)
			if err != nil {
				b.N = -1
			}
			ch <- b
		}()
		return ch
	}
	waitBlocked := func(ch chan Burst) {
		t.Helper()
		select {
		case b := <-ch:
			t.Fatalf("thread passed the barrier alone: %+v", b)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Burst 0: both start at once, when the second thread arrives.
	a := arrive()
	waitBlocked(a)
	clk.Advance(time.Second)
	b0, err := s.Arrive(ctx)
	if err != nil || b0.N != 0 || !b0.Start.Equal(t0.Add(time.Second)) {
		t.Fatalf("burst 0 = %+v, %v", b0, err)
	}
	if got := <-a; got != b0 {
		t.Fatalf("threads got different bursts %+v and %+v", got, b0)
	}
	// Burst 1: thread A finishes at 8 s, B at 12 s; both restart at 17 s.
	clk.Advance(7 * time.Second)
	a = arrive()
	waitBlocked(a)
	clk.Advance(4 * time.Second)
	b1, err := s.Arrive(ctx)
	if err != nil || b1.N != 1 || !b1.Start.Equal(t0.Add(17*time.Second)) {
		t.Fatalf("burst 1 = %+v, %v (want start at 17 s)", b1, err)
	}
	if got := <-a; got != b1 {
		t.Fatalf("burst 1 differs: %+v vs %+v", got, b1)
	}
	// A thread that leaves no longer holds the others back.
	clk.Advance(10 * time.Second) // 22 s
	a = arrive()
	waitBlocked(a)
	s.Leave()
	if got := <-a; got.N != 2 || !got.Start.Equal(t0.Add(27*time.Second)) {
		t.Fatalf("after Leave: %+v", got)
	}
	// No burst starts at or after the 30 s deadline.
	clk.Advance(time.Second) // 23 s, next start 28 s: still allowed
	if b, err := s.Arrive(ctx); err != nil || b.N != 3 {
		t.Fatalf("burst 3: %+v %v", b, err)
	}
	clk.Advance(3 * time.Second) // 26 s, next start 31 s
	if _, err := s.Arrive(ctx); err != ErrDone {
		t.Fatalf("burst past the deadline: err %v, want ErrDone", err)
	}
}

func TestScheduleArriveCancelled(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s := NewSchedule(clk, 2, time.Second, time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var err error
	go func() { defer wg.Done(); _, err = s.Arrive(ctx) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	wg.Wait()
	if err == nil {
		t.Fatal("Arrive returned nil after cancel")
	}
	// The withdrawn arrival must not count: one arrival alone must block.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, err := s.Arrive(ctx2); err == nil {
		t.Fatal("a single arrival passed a barrier of two")
	}
}

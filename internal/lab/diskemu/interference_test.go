package diskemu

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// reader does synchronous random 8 KiB reads on path until ctx is done and
// returns the mean latency and the count.
func reader(ctx context.Context, t *testing.T, path string, size int64) (time.Duration, int) {
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return 0, 0
	}
	defer f.Close()
	rng := rand.New(rand.NewSource(7))
	buf := make([]byte, 8<<10)
	var sum time.Duration
	n := 0
	for ctx.Err() == nil {
		off := rng.Int63n(size/int64(len(buf))) * int64(len(buf))
		t0 := time.Now()
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Error(err)
			return 0, 0
		}
		sum += time.Since(t0)
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return sum / time.Duration(n), n
}

// writer writes 64 KiB blocks sequentially (wrapping at size) until ctx is
// done and returns the bytes written.
func writer(ctx context.Context, t *testing.T, path string, size int64) int64 {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var off, total int64
	for ctx.Err() == nil {
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Error(err)
			return total
		}
		total += int64(len(buf))
		off = (off + int64(len(buf))) % size
	}
	return total
}

// TestInterference: on one mount of the thesis array, a random 8 KiB
// reader's mean latency rises when sequential 64 KiB writers run on other
// files: they share the spindles (and the write-back cache).
func TestInterference(t *testing.T) {
	const writers, size = 6, 256 << 20
	window := 3 * time.Second
	if testing.Short() {
		window = time.Second
	}
	s := mountT(t, Options{Profile: "thesis-2010", Seed: 1, Nice: -10})
	mnt := s.Mountpoint()
	makeImage(t, filepath.Join(mnt, "reader.img"), size)
	for i := 0; i < writers; i++ {
		makeImage(t, filepath.Join(mnt, fmt.Sprintf("writer%d.img", i)), size)
	}

	ctx, cancel := context.WithTimeout(context.Background(), window)
	alone, nAlone := reader(ctx, t, filepath.Join(mnt, "reader.img"), size)
	cancel()

	ctx, cancel = context.WithTimeout(context.Background(), window)
	defer cancel()
	var wg sync.WaitGroup
	written := make([]int64, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			written[i] = writer(ctx, t, filepath.Join(mnt, fmt.Sprintf("writer%d.img", i)), size)
		}()
	}
	time.Sleep(window / 10) // let the writers fill the cache first
	loaded, nLoaded := reader(ctx, t, filepath.Join(mnt, "reader.img"), size)
	wg.Wait()
	var total int64
	for _, w := range written {
		total += w
	}
	st := s.Stats()
	t.Logf("reader alone: %v mean over %d reads; with %d writers: %v over %d reads (x%.1f); writers %.1f MB/s; max in flight %d",
		alone, nAlone, writers, loaded, nLoaded, float64(loaded)/float64(alone), float64(total)/window.Seconds()/1e6, st.MaxInFlight)
	if st.Model == nil || st.Model.Reads != int64(st.Reads) {
		t.Errorf("model stats %+v do not count the mount's %d reads", st.Model, st.Reads)
	}
	if nAlone < 20 || nLoaded < 5 {
		t.Fatalf("too few reads to compare (%d alone, %d loaded)", nAlone, nLoaded)
	}
	if float64(loaded) < 2*float64(alone) {
		t.Errorf("reader latency with writers %v, alone %v: want at least 2x", loaded, alone)
	}
}

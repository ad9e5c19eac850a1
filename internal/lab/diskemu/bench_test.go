package diskemu

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The FUSE path's own cost, with the "ram" profile (no model time): go test
// -run '^$' -bench . ./internal/diskemu. Compare BenchmarkBacking (the same
// preads on the backing file) to see what FUSE adds; the SyncDIO variants show the async-DIO INIT
// shim costs nothing per request.

func benchFile(b *testing.B, sync bool) (mounted, backing string) {
	s := mountT(b, Options{Profile: "ram", SyncDIO: sync, StatsPath: "-", Logger: slog.New(slog.DiscardHandler)})
	p := filepath.Join(s.Mountpoint(), "bench.img")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	// Real data (not a hole) so the backing reads copy bytes.
	buf := make([]byte, 1<<20)
	for i := 0; i < 64; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	return p, filepath.Join(s.opts.BackingDir, "bench.img")
}

func benchRead(b *testing.B, path string, bs int, parallel bool) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const span = 64 << 20
	b.SetBytes(int64(bs))
	b.ResetTimer()
	if !parallel {
		buf := make([]byte, bs)
		for i := 0; i < b.N; i++ {
			if _, err := f.ReadAt(buf, int64(i*bs)%span); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(8) // 8 x GOMAXPROCS readers: a queue like a busy target's
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, bs)
		i := 0
		for pb.Next() {
			if _, err := f.ReadAt(buf, int64(i*bs)%span); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkRamRead8k(b *testing.B) {
	p, _ := benchFile(b, false)
	benchRead(b, p, 8<<10, false)
}

func BenchmarkRamRead8kParallel(b *testing.B) {
	p, _ := benchFile(b, false)
	benchRead(b, p, 8<<10, true)
}

func BenchmarkRamRead1M(b *testing.B) {
	p, _ := benchFile(b, false)
	benchRead(b, p, 1<<20, false)
}

func BenchmarkRamRead8kSyncDIO(b *testing.B) {
	p, _ := benchFile(b, true)
	benchRead(b, p, 8<<10, false)
}

func BenchmarkRamRead1MSyncDIO(b *testing.B) {
	p, _ := benchFile(b, true)
	benchRead(b, p, 1<<20, false)
}

func BenchmarkBackingRead8k(b *testing.B) {
	_, p := benchFile(b, false)
	benchRead(b, p, 8<<10, false)
}

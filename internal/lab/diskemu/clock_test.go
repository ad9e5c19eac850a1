package diskemu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
)

// TestInjectedClock: replies wait for the injected clock, not the wall
// clock — a read with one hour of model service returns only once the fake
// clock has advanced an hour.
func TestInjectedClock(t *testing.T) {
	fake := clock.NewFake(time.Unix(1e9, 0))
	s := mountT(t, Options{Model: &FixedModel{Service: time.Hour}, Clock: fake, StatsPath: "-"})
	p := filepath.Join(s.Mountpoint(), "img")
	if err := os.WriteFile(filepath.Join(s.opts.BackingDir, "img"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		_, err := f.ReadAt(make([]byte, 4096), 0)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("read returned (%v) before the fake clock moved", err)
	case <-time.After(200 * time.Millisecond):
	}
	// The handler may register its timer after an Advance: keep advancing.
	for i := 0; ; i++ {
		fake.Advance(time.Hour)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.ReadServiceMs != float64(time.Hour/time.Millisecond) {
				t.Errorf("model service %v ms, want one hour", st.ReadServiceMs)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if i > 20 {
			t.Fatal("read did not return after the fake clock advanced")
		}
	}
}

// TestCreateExclusive: O_EXCL on an existing image fails.
func TestCreateExclusive(t *testing.T) {
	s := mountT(t, Options{Profile: "ram", StatsPath: "-"})
	p := filepath.Join(s.Mountpoint(), "img")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, os.ErrExist) {
		t.Errorf("O_EXCL create of an existing image: %v, want exists", err)
	}
}

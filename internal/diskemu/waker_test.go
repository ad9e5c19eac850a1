package diskemu

import (
	"context"
	"testing"
	"time"
)

// TestWakerPrecision compares the waker with a Go timer side by side: both
// wait 5 ms repeatedly; the waker must be late by less on average.
func TestWakerPrecision(t *testing.T) {
	w, err := newWaker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	const n, d = 100, 5 * time.Millisecond
	var lateW, lateT time.Duration
	for i := 0; i < n; i++ {
		at := time.Now().Add(d)
		w.wait(context.Background(), at)
		lateW += time.Since(at)
		at = time.Now().Add(d)
		<-time.After(d)
		lateT += time.Since(at)
	}
	t.Logf("mean lateness: waker %v, Go timer %v", lateW/n, lateT/n)
	if lateW > lateT {
		t.Errorf("waker late by %v on average, Go timer by %v", lateW/n, lateT/n)
	}
}

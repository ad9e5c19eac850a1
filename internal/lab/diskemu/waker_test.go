package diskemu

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestWakerPrecision compares the waker with a Go timer side by side,
// interleaved: both wait 3 ms repeatedly; the waker's median lateness must
// not exceed the timer's (medians, because a noisy machine adds outliers to
// both).
func TestWakerPrecision(t *testing.T) {
	w, err := newWaker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	const n, d = 150, 3 * time.Millisecond
	var lateW, lateT []time.Duration
	for i := 0; i < n; i++ {
		at := time.Now().Add(d)
		w.wait(context.Background(), at)
		lateW = append(lateW, time.Since(at))
		at = time.Now().Add(d)
		<-time.After(d)
		lateT = append(lateT, time.Since(at))
	}
	slices.Sort(lateW)
	slices.Sort(lateT)
	mw, mt := lateW[n/2], lateT[n/2]
	t.Logf("median lateness: waker %v, Go timer %v (p90 %v vs %v)", mw, mt, lateW[n*9/10], lateT[n*9/10])
	if mw > mt {
		t.Errorf("waker median lateness %v exceeds the Go timer's %v", mw, mt)
	}
}

// TestWakerCancel: a cancelled wait returns at once, and close releases
// waiters.
func TestWakerCancel(t *testing.T) {
	w, err := newWaker()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.wait(ctx, time.Now().Add(time.Hour)); close(done) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("cancelled wait did not return")
	}
	done2 := make(chan struct{})
	go func() { w.wait(context.Background(), time.Now().Add(time.Hour)); close(done2) }()
	time.Sleep(10 * time.Millisecond)
	w.close()
	select {
	case <-done2:
	case <-time.After(time.Second):
		t.Fatal("close did not release a waiter")
	}
}

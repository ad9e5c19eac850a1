package diskemu

import (
	"container/heap"
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// waker holds requests until their model completion time with about 0.1 ms
// precision. Go timers are not precise enough here: when the runtime is idle
// it sleeps in epoll_wait, whose timeout is in whole milliseconds, so a 5 ms
// service came back 5.5 ms late on average. The waker instead sleeps on a
// timerfd (an hrtimer, ns resolution) in poll(2) on its own OS thread with a
// 1 ns timer slack, and an eventfd wakes it when an earlier deadline arrives.
type waker struct {
	mu    sync.Mutex
	items waitHeap
	tfd   int // timerfd armed for the earliest deadline
	efd   int // eventfd: a new earliest deadline, or stop
	stop  bool
	done  chan struct{}
}

type waitItem struct {
	at time.Time
	ch chan struct{}
}

type waitHeap []*waitItem

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h waitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)        { *h = append(*h, x.(*waitItem)) }
func (h *waitHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newWaker() (*waker, error) {
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("creating timerfd: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(tfd)
		return nil, fmt.Errorf("creating eventfd: %w", err)
	}
	w := &waker{tfd: tfd, efd: efd, done: make(chan struct{})}
	go w.loop()
	return w, nil
}

// wait returns at time at (or when ctx is done).
func (w *waker) wait(ctx context.Context, at time.Time) {
	if time.Until(at) <= 0 {
		return
	}
	it := &waitItem{at: at, ch: make(chan struct{})}
	w.mu.Lock()
	if w.stop {
		w.mu.Unlock()
		return
	}
	heap.Push(&w.items, it)
	first := w.items[0] == it
	w.mu.Unlock()
	if first {
		w.kick()
	}
	select {
	case <-it.ch:
	case <-ctx.Done():
	}
}

func (w *waker) kick() {
	var one = [8]byte{1}
	unix.Write(w.efd, one[:])
}

func (w *waker) loop() {
	defer close(w.done)
	runtime.LockOSThread() // the timer slack below is per thread
	defer runtime.UnlockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var buf [8]byte
	fds := []unix.PollFd{{Fd: int32(w.tfd), Events: unix.POLLIN}, {Fd: int32(w.efd), Events: unix.POLLIN}}
	for {
		w.mu.Lock()
		if w.stop {
			for _, it := range w.items {
				close(it.ch)
			}
			w.items = nil
			w.mu.Unlock()
			return
		}
		now := time.Now()
		for len(w.items) > 0 && !w.items[0].at.After(now) {
			close(heap.Pop(&w.items).(*waitItem).ch)
		}
		var spec unix.ItimerSpec // zero disarms
		if len(w.items) > 0 {
			spec.Value = unix.NsecToTimespec(max(int64(w.items[0].at.Sub(now)), 1))
		}
		w.mu.Unlock()
		unix.TimerfdSettime(w.tfd, 0, &spec, nil)
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			time.Sleep(time.Millisecond) // should not happen; do not spin
		}
		unix.Read(w.tfd, buf[:])
		unix.Read(w.efd, buf[:])
	}
}

// close releases every waiter and the descriptors.
func (w *waker) close() {
	w.mu.Lock()
	w.stop = true
	w.mu.Unlock()
	w.kick()
	<-w.done
	unix.Close(w.tfd)
	unix.Close(w.efd)
}

package diskemu

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/minheap"
)

// waker holds requests until their model completion time with about 0.1 ms
// precision. Go timers are not precise enough here: when the runtime is idle
// it sleeps in epoll_wait, whose timeout is in whole milliseconds, so a 5 ms
// service came back 5.5 ms late on average. The waker instead sleeps on a
// timerfd (an hrtimer, ns resolution) in poll(2) on its own OS thread with a
// 1 ns timer slack, and an eventfd wakes it when an earlier deadline arrives.
type waker struct {
	mu    sync.Mutex
	items minheap.Heap[*waitItem]
	tfd   int // timerfd armed for the earliest deadline
	efd   int // eventfd: a new earliest deadline, or stop
	stop  bool
	done  chan struct{}
}

type waitItem struct {
	at time.Time
	ch chan struct{}
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
	w := &waker{tfd: tfd, efd: efd, done: make(chan struct{}),
		items: minheap.New(func(a, b *waitItem) bool { return a.at.Before(b.at) })}
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
	w.items.Push(it)
	first := w.items.Items[0] == it
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
			for _, it := range w.items.Items {
				close(it.ch)
			}
			w.items.Items = nil
			w.mu.Unlock()
			return
		}
		now := time.Now()
		for w.items.Len() > 0 && !w.items.Items[0].at.After(now) {
			close(w.items.Pop().ch)
		}
		var spec unix.ItimerSpec // zero disarms
		if w.items.Len() > 0 {
			spec.Value = unix.NsecToTimespec(max(int64(w.items.Items[0].at.Sub(now)), 1))
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

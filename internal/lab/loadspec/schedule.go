package loadspec

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
)

// ErrDone is returned by Schedule.Arrive when no further burst starts
// before the deadline.
var ErrDone = errors.New("schedule finished")

// Schedule is the on/off schedule of thesis Fig. 5.9: all threads start a
// burst together, each moves its share, and when the last one is done they
// all pause for the off time and start the next burst together. It is a
// barrier: a thread that stops early must Leave, so the others do not wait
// for it.
type Schedule struct {
	clk      clock.Clock
	off      time.Duration
	deadline time.Time // zero: no deadline

	mu      sync.Mutex
	live    int
	arrived int
	bursts  int
	next    *round // the round threads are arriving for
}

// round is one opening of the barrier; b is valid once done is closed.
type round struct {
	done chan struct{}
	b    Burst
}

// Burst is one on-period of the schedule.
type Burst struct {
	N     int       // 0 for the first burst
	Start time.Time // when the threads begin moving data
}

// NewSchedule returns a schedule for threads that pause off between bursts
// and start no burst at or after deadline (zero: never stop).
func NewSchedule(clk clock.Clock, threads int, off time.Duration, deadline time.Time) *Schedule {
	return &Schedule{clk: clk, off: off, deadline: deadline, live: threads, next: &round{done: make(chan struct{})}}
}

// Arrive is called by a thread ready for its next burst. It blocks until
// every live thread has arrived and returns the burst, whose start the
// caller waits for (Sleep until Start). The first burst starts as soon as
// all threads are there; later ones off after the last thread finished the
// previous burst. ErrDone means the run is over.
func (s *Schedule) Arrive(ctx context.Context) (Burst, error) {
	s.mu.Lock()
	s.arrived++
	r := s.next
	if s.arrived >= s.live {
		s.openLocked()
	}
	s.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		s.mu.Lock()
		// Only withdraw if the barrier did not open meanwhile.
		if r == s.next {
			s.arrived--
		}
		s.mu.Unlock()
		return Burst{}, ctx.Err()
	}
	b := r.b
	if !s.deadline.IsZero() && !b.Start.Before(s.deadline) {
		return b, ErrDone
	}
	return b, nil
}

// Leave removes a thread that will not arrive again.
func (s *Schedule) Leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live--
	if s.arrived > 0 && s.arrived >= s.live {
		s.openLocked()
	}
}

func (s *Schedule) openLocked() {
	r := s.next
	r.b = Burst{N: s.bursts, Start: s.clk.Now()}
	if s.bursts > 0 {
		r.b.Start = r.b.Start.Add(s.off)
	}
	s.bursts++
	s.arrived = 0
	s.next = &round{done: make(chan struct{})}
	close(r.done)
}

package loadspec

import (
	"context"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
)

// Pacer spreads one thread's I/O evenly to hold a byte rate, like fio's
// rate=: the I/O that follows the first B bytes may start no earlier than
// start + B/rate. A thread that fell behind (a slow I/O) catches up by
// issuing back to back, as fio does, so the long-run rate is the rate asked
// for; Restart drops that debt, e.g. after an on/off pause.
type Pacer struct {
	clk   clock.Clock
	rate  int64 // bytes per second; 0 means unlimited
	start time.Time
	sent  int64
}

// NewPacer returns a pacer for rate bytes per second (0: no limit).
func NewPacer(clk clock.Clock, rate int64) *Pacer {
	return &Pacer{clk: clk, rate: rate}
}

// Delay accounts for an I/O of n bytes about to start and returns how long
// the thread must wait before issuing it.
func (p *Pacer) Delay(n int64) time.Duration {
	if p.rate <= 0 {
		return 0
	}
	now := p.clk.Now()
	if p.start.IsZero() {
		p.start = now
	}
	// Split the division so that sent·1e9 cannot overflow for large runs.
	sec, rem := p.sent/p.rate, p.sent%p.rate
	due := p.start.Add(time.Duration(sec)*time.Second + time.Duration(rem*int64(time.Second)/p.rate))
	p.sent += n
	if d := due.Sub(now); d > 0 {
		return d
	}
	return 0
}

// Wait blocks until an I/O of n bytes may start, or ctx ends.
func (p *Pacer) Wait(ctx context.Context, n int64) error {
	return Sleep(ctx, p.clk, p.Delay(n))
}

// Restart forgets the history, so the next I/O starts at once and pacing
// counts from there.
func (p *Pacer) Restart() {
	p.start = time.Time{}
	p.sent = 0
}

// Sleep waits d on clk, returning early with ctx's error when ctx ends.
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clk.After(d):
		return nil
	}
}

package daemon

import (
	"context"
	"fmt"
	"time"
)

// HealthChecker is implemented by backends that can tell whether their
// data path works (nfqueue: the packet thread has been running lately).
// The watchdog is fed only while it returns nil.
type HealthChecker interface {
	Healthy(now time.Time) error
}

// Notifier is the part of systemd's notification protocol the daemon uses
// (*sdnotify.Notifier).
type Notifier interface {
	Send(states ...string) error
	WatchdogInterval() time.Duration
}

// tickStaleAfter is how long the loop may go without starting a tick
// before it counts as stuck: 20 ticks at 100 ms, far over this VM's worst
// scheduling stall (~100 ms), and under WatchdogSec (3 s in the unit) so
// that systemd kills a stuck daemon within seconds and the queue fails
// open. An Apply blocked that long (the xtables lock) counts as stuck too.
const tickStaleAfter = 2 * time.Second

// Watchdog tells systemd READY=1 after the first tick, WATCHDOG=1 every
// third of the watchdog interval while the loop ticks and the backend is
// healthy, and STOPPING=1 when ctx ends. A daemon that stops ticking (a
// deadlock, SIGSTOP, a hung kernel call) stops feeding the watchdog, and
// systemd kills it: the NFQUEUE rules then let traffic pass (fail open)
// and ExecStopPost removes them.
func (d *Daemon) Watchdog(ctx context.Context, n Notifier) {
	every := n.WatchdogInterval() / 3
	if every <= 0 {
		every = time.Second // READY=1 is still owed
	}
	t := d.o.Clock.NewTicker(min(every, 100*time.Millisecond))
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			if err := n.Send("STOPPING=1"); err != nil {
				d.log.Warn("telling systemd we are stopping", "err", err)
			}
			return
		case now := <-t.C():
			if now.Sub(last) >= every || !d.ready {
				d.feedWatchdog(n, now)
				last = now
			}
		}
	}
}

// feedWatchdog is one check: READY=1 once the loop has ticked, then
// WATCHDOG=1 if healthy. Failures are logged when a streak starts.
func (d *Daemon) feedWatchdog(n Notifier, now time.Time) {
	last := d.lastTick.Load()
	if last == 0 {
		return // not ticking yet: neither ready nor alive
	}
	if !d.ready {
		if err := n.Send("READY=1"); err != nil {
			d.log.Warn("telling systemd we are ready", "err", err)
		}
		d.ready = true
	}
	if n.WatchdogInterval() <= 0 {
		return
	}
	err := d.health(now, time.Unix(0, last))
	if err != nil {
		if !d.unhealthy {
			d.log.Error("not feeding the systemd watchdog: the daemon is stuck; systemd will restart it", "err", err)
		}
		d.unhealthy = true
		return
	}
	if d.unhealthy {
		d.log.Info("healthy again; feeding the systemd watchdog")
	}
	d.unhealthy = false
	if err := n.Send("WATCHDOG=1"); err != nil {
		d.log.Warn("feeding the systemd watchdog", "err", err)
	}
}

func (d *Daemon) health(now, lastTick time.Time) error {
	if age := now.Sub(lastTick); age > tickStaleAfter {
		return fmt.Errorf("no tick for %v (a tick is %v)", age.Round(time.Millisecond), d.o.Tick)
	}
	if hc, ok := d.o.Backend.(HealthChecker); ok {
		if err := hc.Healthy(now); err != nil {
			return fmt.Errorf("backend %s: %w", d.o.Backend.Name(), err)
		}
	}
	return nil
}

package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/units"
)

// MaxRate is the largest read rate accepted, in bytes per second: the
// rate of the HTB root's default class (lineRate, 10 Gbit/s). A cap above
// it caps nothing.
const MaxRate = 10_000_000_000 / 8

// ParseRate reads a rate cap (see units.RateBytes) in bytes per second. Zero,
// negative, unitless and rates above MaxRate are refused.
func ParseRate(s string) (uint64, error) {
	b, ok, err := units.RateBytes(s)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, fmt.Errorf("rate %q: want a number and a unit, like 10MB/s, 512KiB/s or 80Mbit/s", s)
	case !(b >= 1):
		return 0, fmt.Errorf("rate %q is not above 0 bytes per second: give a positive rate (free the throttle to remove a cap)", s)
	case b > MaxRate:
		return 0, fmt.Errorf("rate %q is above %s, the fastest link sanqos caps: give a lower rate", s, FormatRate(MaxRate))
	}
	return uint64(math.Round(b)), nil
}

// FormatRate writes bytes per second the way people read them: MB/s
// with up to three decimals (decimal units, as disks and links count).
func FormatRate(b uint64) string {
	switch {
	case b >= 1e6:
		return strconv.FormatFloat(float64(b)/1e6, 'f', -1, 64) + "MB/s"
	case b >= 1e3:
		return strconv.FormatFloat(float64(b)/1e3, 'f', -1, 64) + "kB/s"
	}
	return strconv.FormatUint(b, 10) + "B/s"
}

// LinkRate reads dev's link speed from sysfs (root is "/sys" outside
// tests) in bytes per second; ok is false where the kernel does not know
// it (virtual interfaces report -1 or refuse the read).
func LinkRate(root, dev string) (rate uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join(root, "class/net", dev, "speed"))
	if err != nil {
		return 0, false
	}
	mbit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || mbit <= 0 {
		return 0, false
	}
	return uint64(mbit) * 1e6 / 8, true
}

// Kinds says what a backend can throttle: delays (nfqueue, netem), read
// rates (htb) or both (a delay backend with a rate backend beside it,
// dry-run). The control socket refuses a throttle the backend would
// ignore.
type Kinds struct{ Delay, Rate bool }

// KindsOf returns what b throttles.
func KindsOf(b Backend) Kinds {
	switch b := b.(type) {
	case *HTB:
		return Kinds{Rate: true}
	case *DryRun:
		return Kinds{Delay: true, Rate: true}
	case *Composite:
		return Kinds{Delay: true, Rate: true}
	case interface{ Kinds() Kinds }:
		return b.Kinds()
	}
	return Kinds{Delay: true}
}

// Composite is a delay backend with an htb backend beside it, on the
// interface towards the initiators, for read rates: each group's delays
// go to the first, its read rate to the second. One consumer has one
// manual throttle, a delay or a rate (the control socket refuses both),
// so a packet meets at most one of them; a controller's delay group
// never carries a rate.
type Composite struct {
	Delay Backend
	Rate  *HTB
}

// Name is the delay backend's name and "+htb".
func (c *Composite) Name() string { return c.Delay.Name() + "+htb" }

// Apply splits s between the two backends. The delay half goes first: a
// consumer moved from a delay to a rate is released before it is capped.
func (c *Composite) Apply(ctx context.Context, s State) error {
	if err := plan.ValidateShape(s); err != nil {
		return err
	}
	var delays, rates State
	for _, g := range s.Groups {
		d, r := g, g
		d.ReadRate = 0
		if d.WriteDelay == 0 && d.ReadDelay == 0 {
			// A rate alone needs nothing of the delay path: its members
			// there would only be queued to be held for nothing. The
			// group stays, empty, so the delay it had is released.
			d.Members, d.Armed = nil, nil
		}
		r.WriteDelay, r.ReadDelay = 0, 0
		delays.Groups = append(delays.Groups, d)
		if r.ReadRate > 0 {
			rates.Groups = append(rates.Groups, r)
		}
	}
	// What one half refuses (an IPv6 consumer, say) does not stop the
	// other; the refusals are reported together.
	var why []string
	for _, apply := range []func() error{
		func() error { return c.Delay.Apply(ctx, delays) },
		func() error { return c.Rate.Apply(ctx, rates) },
	} {
		var ref *Refused
		switch err := apply(); {
		case errors.As(err, &ref):
			why = append(why, ref.Reasons...)
		case err != nil:
			return err
		}
	}
	if len(why) > 0 {
		return &Refused{Reasons: why}
	}
	return nil
}

// Renew passes the tick's renewal on to the delay backend (see Renewer).
func (c *Composite) Renew(ctx context.Context) error {
	if r, ok := c.Delay.(Renewer); ok {
		return r.Renew(ctx)
	}
	return nil
}

// Stats are the delay backend's: the htb classes keep no packets of ours.
func (c *Composite) Stats() Stats { return c.Delay.Stats() }

// Close removes both data paths.
func (c *Composite) Close() error { return errors.Join(c.Delay.Close(), c.Rate.Close()) }

// Healthy passes on the delay backend's health (see Healther).
func (c *Composite) Healthy(now time.Time) error {
	if h, ok := c.Delay.(Healther); ok {
		return h.Healthy(now)
	}
	return nil
}

package ctl

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/units"
)

// Operations on a consumer's tenant terms at runtime (autonomic daemon
// only: manual mode has no controller to keep them).
const (
	// OpTerms sets some of a consumer's terms (Request.Match and the
	// fields given); the others stay as they were.
	OpTerms = "terms"
	// OpClearTerms removes the runtime terms of Request.Match: the
	// configuration's apply again.
	OpClearTerms = "clear-terms"
)

// TermsRequest are a terms request's fields, as the user typed them; ""
// leaves a term as it is.
type TermsRequest struct {
	// Match selects consumers: an address, a prefix, an initiator name or
	// a name from [[tenants.consumer]].
	Match     string `json:"match,omitempty"`
	Share     string `json:"share,omitempty"`
	Reserve   string `json:"reserve,omitempty"`   // a rate, "0" for none
	Cap       string `json:"cap,omitempty"`       // a rate, "0" for none
	Threshold string `json:"threshold,omitempty"` // a duration, "0" for the resource's
}

// TermsOverride is one runtime override in a response.
type TermsOverride struct {
	Match string `json:"match"`
	// Terms is what it sets, compactly ("share 4, cap 50MB/s").
	Terms string `json:"terms"`
}

// ParseTerms validates a terms request as the tenant package will take
// it; its errors name the flag.
func ParseTerms(r TermsRequest) (tenant.Override, error) {
	o := tenant.Override{Match: strings.TrimSpace(r.Match)}
	if o.Match == "" {
		return o, fmt.Errorf("name the consumer: an address, a prefix, an initiator name or a configured tenant name")
	}
	var err error
	if o.Share, err = parseNumber("--share", r.Share); err != nil {
		return o, err
	}
	if o.ReserveBps, err = parseRate("--reserve", r.Reserve); err != nil {
		return o, err
	}
	if o.CapBps, err = parseRate("--cap", r.Cap); err != nil {
		return o, err
	}
	if r.Threshold != "" {
		d, err := time.ParseDuration(strings.TrimSpace(r.Threshold))
		if err != nil && strings.TrimSpace(r.Threshold) != "0" {
			return o, fmt.Errorf("--threshold %q is not a duration (like 10ms; 0 for the resource's)", r.Threshold)
		}
		ms := float64(d) / float64(time.Millisecond)
		o.ThresholdMs = &ms
	}
	if o.Share == nil && o.ReserveBps == nil && o.CapBps == nil && o.ThresholdMs == nil {
		return o, fmt.Errorf("give at least one of --share, --reserve, --cap, --threshold for %s", o.Match)
	}
	if _, err := (*tenant.Book)(nil).Over([]tenant.Override{o}); err != nil {
		return o, fmt.Errorf("terms of %s: %w", o.Match, err)
	}
	return o, nil
}

func parseNumber(flag, s string) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("%s %q is not a number", flag, s)
	}
	return &v, nil
}

// parseRate reads a rate with its unit; a bare 0 means none.
func parseRate(flag, s string) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	v, ok, err := units.RateBytes(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if !ok {
		if f, perr := strconv.ParseFloat(strings.TrimSpace(s), 64); perr != nil || f != 0 {
			return nil, fmt.Errorf("%s %q: give a rate with its unit, like 20MB/s (0 for none)", flag, s)
		}
	}
	return &v, nil
}

// SetTerms lays t over the runtime terms of its match: the fields t sets
// replace, the others stay.
func (o *Overrides) SetTerms(t tenant.Override) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.termsVersion++
	for i, have := range o.terms {
		if have.Match != t.Match {
			continue
		}
		for _, f := range []struct{ dst, src **float64 }{
			{&have.Share, &t.Share}, {&have.ReserveBps, &t.ReserveBps}, {&have.CapBps, &t.CapBps}, {&have.ThresholdMs, &t.ThresholdMs},
		} {
			if *f.src != nil {
				*f.dst = *f.src
			}
		}
		o.terms[i] = have
		return
	}
	o.terms = append(o.terms, t)
}

// ClearTerms removes the runtime terms of match and reports whether it
// had any.
func (o *Overrides) ClearTerms(match string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.terms)
	o.terms = slices.DeleteFunc(o.terms, func(t tenant.Override) bool { return t.Match == strings.TrimSpace(match) })
	if len(o.terms) != n {
		o.termsVersion++
	}
	return len(o.terms) != n
}

// TermOverrides returns the runtime terms, in the order they were first
// set (the first that selects a consumer wins), and a version that
// changes with every change, for the daemon to apply them once.
func (o *Overrides) TermOverrides() ([]tenant.Override, uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.terms), o.termsVersion
}

// TermsList renders the runtime terms for a response.
func (o *Overrides) TermsList() []TermsOverride {
	ts, _ := o.TermOverrides()
	out := make([]TermsOverride, 0, len(ts))
	for _, t := range ts {
		out = append(out, TermsOverride{Match: t.Match, Terms: Describe(t)})
	}
	return out
}

// Describe is what o sets, with "none" for a term set to 0.
func Describe(o tenant.Override) string {
	var parts []string
	add := func(name string, v *float64, t tenant.Terms) {
		if v == nil {
			return
		}
		if *v == 0 {
			parts = append(parts, name+" none")
			return
		}
		parts = append(parts, t.String())
	}
	if o.Share != nil {
		parts = append(parts, "share "+strconv.FormatFloat(*o.Share, 'g', -1, 64))
	}
	add("reserve", o.ReserveBps, tenant.Terms{ReserveBps: deref(o.ReserveBps)})
	add("cap", o.CapBps, tenant.Terms{CapBps: deref(o.CapBps)})
	add("threshold", o.ThresholdMs, tenant.Terms{ThresholdMs: deref(o.ThresholdMs)})
	return strings.Join(parts, ", ")
}

func deref(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

package daemon

import (
	"github.com/sanqos/sanqos/internal/decide/tenant"
)

// TermsSource supplies the runtime tenant terms 'sanqos throttle' set
// (*ctl.Overrides) and a version that changes with them.
type TermsSource interface {
	TermOverrides() ([]tenant.Override, uint64)
}

// TermsTaker is a Decider that takes runtime tenant terms over its
// configuration's (FromEngine's).
type TermsTaker interface {
	SetTermOverrides([]tenant.Override) error
}

// takeTerms gives the Decider the runtime terms when they changed or the
// Decider did (a reload builds a new engine from the file: the runtime
// terms are laid over its new book, so they outlive the reload until
// cleared). It runs on the tick loop, which owns the engine.
func (d *Daemon) takeTerms() {
	src, ok := d.o.Overrides.(TermsSource)
	if !ok {
		return
	}
	tk, ok := d.o.Decider.(TermsTaker)
	if !ok {
		return
	}
	ts, v := src.TermOverrides()
	if v == d.termsVersion && d.o.Decider == d.termsDecider {
		return
	}
	if err := tk.SetTermOverrides(ts); err != nil {
		// Checked when set (ctl.ParseTerms); kept as they were if not.
		d.log.Error("runtime tenant terms refused; the ones before stay", "err", err)
	}
	d.termsVersion, d.termsDecider = v, d.o.Decider
}

// SetTermOverrides lays ts over the engine's configured tenant book.
func (a *engineAdapter) SetTermOverrides(ts []tenant.Override) error {
	b, err := a.e.Config().Tenants.Over(ts)
	if err != nil {
		return err
	}
	a.e.SetTenants(b)
	return nil
}

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/serve/ctl"
)

// CtlHandler serves the control socket in autonomic mode, the same protocol
// as 'sanqos run --manual': throttle and free set manual overrides in o
// (which must be the daemon's Options.Overrides; they take effect at the
// next tick), list and status show the manual throttles and the
// controller's throttles in force, with their resource as source;
// full-status answers what /status serves, so that root can see the
// daemon when local users crowd its HTTP listener.
func (d *Daemon) CtlHandler(o *ctl.Overrides) ctl.Handler {
	return ctl.HandlerFunc(func(_ context.Context, r ctl.Request) ctl.Response {
		switch r.Op {
		case ctl.OpThrottle:
			m, err := ctl.ParseManual(r)
			if err != nil {
				return ctl.Response{Error: err.Error()}
			}
			prev, had := o.Get(m.IP)
			if err := ctl.Check(m, prev, had, d.o.Backend, ""); err != nil {
				return ctl.Response{Error: err.Error()}
			}
			o.Set(m)
			d.log.Info("manual throttle set", "ip", m.IP, "throttle", m.Kind(), "direction", m.Direction)
		case ctl.OpFree:
			a, err := netip.ParseAddr(r.IP)
			if err != nil {
				return ctl.Response{Error: fmt.Sprintf("--ip %q is not an IP address", r.IP)}
			}
			if !o.Free(a.Unmap()) {
				return ctl.Response{Error: fmt.Sprintf("%s has no manual throttle (see 'sanqos throttle --list')", a)}
			}
			d.log.Info("manual throttle freed", "ip", a.Unmap())
		case ctl.OpTerms:
			t, err := ctl.ParseTerms(r.TermsRequest)
			if err != nil {
				return ctl.Response{Error: err.Error()}
			}
			o.SetTerms(t)
			d.log.Info("runtime tenant terms set; they take precedence over the configuration's until cleared", "match", t.Match, "terms", ctl.Describe(t))
		case ctl.OpClearTerms:
			if !o.ClearTerms(r.Match) {
				return ctl.Response{Error: fmt.Sprintf("%q has no runtime terms (see 'sanqos throttle --list')", r.Match)}
			}
			d.log.Info("runtime tenant terms cleared; the configuration's apply", "match", r.Match)
		case ctl.OpList, ctl.OpStatus:
		case ctl.OpFullStatus:
			doc, err := json.Marshal(d.Status())
			if err != nil {
				return ctl.Response{Error: fmt.Sprintf("encoding the status: %v", err)}
			}
			return ctl.Response{OK: true, Mode: "autonomic", Backend: d.o.Backend.Name(), Status: doc}
		default:
			return ctl.Response{Error: fmt.Sprintf("unknown operation %q: want throttle, free, terms, clear-terms, list, status or full-status", r.Op)}
		}
		resp := ctl.Response{OK: true, Mode: "autonomic", Backend: d.o.Backend.Name(), Throttles: o.List(), Terms: o.TermsList()}
		s := d.Status()
		for _, res := range s.Resources {
			if !res.Throttling() {
				continue
			}
			delay := strconv.FormatFloat(res.DelayMs, 'f', 2, 64) + "ms"
			for _, m := range res.Members {
				if a, err := netip.ParseAddr(m); err == nil {
					if _, manual := o.Get(a); manual {
						continue // the manual throttle is the one in force
					}
				}
				resp.Throttles = append(resp.Throttles, ctl.Throttle{IP: m, Delay: delay, Direction: res.Direction,
					Ports: d.ports(res.Name), Source: res.Name})
			}
		}
		if r.Op == ctl.OpStatus {
			st := d.o.Backend.Stats()
			resp.Stats = &st
		}
		return resp
	})
}

// ports returns the target ports of the group last applied for resource.
func (d *Daemon) ports(resource string) []uint16 {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.appliedView.Groups {
		if g.Name == resource {
			return g.Ports
		}
	}
	return throttle.DefaultPorts
}

//go:build linux

package edt

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// Self-repair. The path is four objects on the interface: fq as its
// root qdisc, which holds each packet until its departure time (with our
// limits, see FqLimit); clsact;
// on clsact's egress hook our bpf filter running our classifier, which
// looks the delays up in our map; and on its ingress hook the filter
// running our arming program. A `tc qdisc del dev D root` leaves the
// timestamps with nothing to honour them, a `tc qdisc del dev D clsact`
// takes the filters with it: either ends every delay while the daemon
// goes on reporting it. Verify reads them back and puts back what
// is missing. The program and the map cannot be lost: this process holds
// both (the program holds the map), and a filter that runs any other
// program, or none, is replaced by ours, so the entries the daemon keeps
// renewing are in force again at once.

// Drift is one object of the path that the kernel no longer holds as
// installed (the throttle package's Drift).
type Drift struct {
	Object string // "qdisc" or "filter"
	Name   string
	Want   string
	Found  string
}

// readBack is what one look at the interface found.
type readBack struct {
	root      string // the root qdisc, as "KIND HANDLE"; "" for none
	fq        bool   // the root is our fq
	rootOwned bool   // the root has a handle: someone installed it (not the kernel's default)
	fqLimits  string // our fq's limits where they are not ours (fqLimitsOf)
	clsact    bool
	filter    string // what sits in our egress filter's place; "" for nothing
	ours      bool   // it is our program
	armFilter string // the same on ingress
	armOurs   bool
}

// inspectQdiscs fills the qdisc half of a read-back.
func (r *readBack) inspectQdiscs(qs []netlink.Qdisc) {
	for _, q := range qs {
		a := q.Attrs()
		switch {
		case a.Parent == netlink.HANDLE_ROOT:
			r.root = fmt.Sprintf("%s %s", q.Type(), handleString(a.Handle))
			r.fq = q.Type() == "fq" && a.Handle == fqHandle
			r.rootOwned = a.Handle != 0
			if f, ok := q.(*netlink.Fq); ok && r.fq {
				r.fqLimits = fqLimitsOf(f)
			}
		case q.Type() == "clsact" && a.Parent == netlink.HANDLE_CLSACT:
			r.clsact = true
		}
	}
}

// inspectFilters fills the filter half: the filters of the egress hook.
func (r *readBack) inspectFilters(fs []netlink.Filter, progID ebpf.ProgramID) {
	r.filter, r.ours = inspectHook(fs, progID)
}

// inspectArm fills the ingress filter's part.
func (r *readBack) inspectArm(fs []netlink.Filter, armID ebpf.ProgramID) {
	r.armFilter, r.armOurs = inspectHook(fs, armID)
}

// inspectHook says what sits in our filter's place among fs, and whether
// it runs the program with id.
func inspectHook(fs []netlink.Filter, id ebpf.ProgramID) (found string, ours bool) {
	for _, f := range fs {
		a := f.Attrs()
		if a.Handle != filterHandle || a.Priority != filterPrio {
			continue // someone else's, in a place of its own
		}
		found = f.Type()
		if b, ok := f.(*netlink.BpfFilter); ok {
			found = fmt.Sprintf("bpf %q prog id %d", b.Name, b.Id)
			ours = id != 0 && b.Id == int(id) && b.DirectAction
		}
	}
	return found, ours
}

// drifts says what differs from what New installed.
func (r readBack) drifts(dev string, progID, armID ebpf.ProgramID) []Drift {
	var out []Drift
	if !r.fq {
		out = append(out, Drift{Object: "qdisc", Name: dev + " root", Want: "fq " + handleString(fqHandle), Found: orNone(r.root)})
	}
	if r.fq && r.fqLimits != "" {
		ours := fqLimits(FqLimit, FqFlowLimit, netlink.HORIZON_DROP_POLICY_CAP)
		out = append(out, Drift{Object: "qdisc", Name: dev + " root", Want: r.root + " " + ours, Found: r.root + " " + r.fqLimits})
	}
	if !r.clsact {
		out = append(out, Drift{Object: "qdisc", Name: dev + " clsact", Want: "clsact", Found: "absent"})
	}
	filter := func(ours bool, found, hook, name string, id ebpf.ProgramID) {
		if ours {
			return
		}
		if !r.clsact {
			found = "absent (with clsact)"
		}
		out = append(out, Drift{Object: "filter", Name: dev + " " + hook + " " + name,
			Want: fmt.Sprintf("bpf %q prog id %d", name, id), Found: found})
	}
	filter(r.ours, orNone(r.filter), "egress", FilterName, progID)
	filter(r.armOurs, orNone(r.armFilter), "ingress", ArmFilterName, armID)
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func handleString(h uint32) string {
	return fmt.Sprintf("%x:", h>>16)
}

// Verify reads back fq, clsact and the two filters, puts back what is
// missing or not ours, and returns what it found missing. With force it
// attaches the filter again even when it looks right (the periodic
// backstop against what the read-back does not compare). An interface
// deleted and created again under the same name is followed. Our fq is
// put back only where the kernel's default root qdisc is: a root qdisc
// someone installed is theirs, reported here and left to them (the
// error says so).
func (e *EDT) Verify(force bool) ([]Drift, error) {
	link, err := e.h.LinkByName(e.dev)
	if err != nil {
		return nil, fmt.Errorf("edt: interface %s: %w", e.dev, err)
	}
	e.link = link
	var r readBack
	qs, err := e.h.QdiscList(link)
	if err != nil {
		return nil, fmt.Errorf("edt: listing qdiscs of %s: %w", e.dev, err)
	}
	r.inspectQdiscs(qs)
	if r.clsact {
		fs, err := e.h.FilterList(link, netlink.HANDLE_MIN_EGRESS)
		if err != nil {
			return nil, fmt.Errorf("edt: listing the egress filters of %s: %w", e.dev, err)
		}
		r.inspectFilters(fs, e.progID)
		fs, err = e.h.FilterList(link, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return nil, fmt.Errorf("edt: listing the ingress filters of %s: %w", e.dev, err)
		}
		r.inspectArm(fs, e.armID)
	}
	out := r.drifts(e.dev, e.progID, e.armID)
	var errs []error
	if !r.fq {
		if r.rootOwned {
			errs = append(errs, fmt.Errorf("edt: %s has a root qdisc of someone else's (%s): sanqos leaves it, and delays nothing on %s until it is removed", e.dev, r.root, e.dev))
		} else if err := e.h.QdiscAdd(e.fq()); err != nil {
			errs = append(errs, fmt.Errorf("edt: putting fq back as root qdisc of %s: %w", e.dev, err))
		}
	}
	if r.fq && r.fqLimits != "" {
		// A change, not a new fq: the packets it holds stay.
		if err := e.h.QdiscReplace(e.fq()); err != nil {
			errs = append(errs, fmt.Errorf("edt: putting fq's limits on %s back: %w", e.dev, err))
		}
	}
	if !r.clsact {
		if err := e.h.QdiscAdd(e.clsact()); err != nil {
			errs = append(errs, fmt.Errorf("edt: putting clsact back on %s: %w", e.dev, err))
		}
	}
	if !r.ours || force {
		if err := e.h.FilterReplace(e.filter()); err != nil {
			errs = append(errs, fmt.Errorf("edt: attaching the classifier to %s again: %w", e.dev, err))
		}
	}
	if !r.armOurs || force {
		if err := e.h.FilterReplace(e.armFilter()); err != nil {
			errs = append(errs, fmt.Errorf("edt: attaching the arming program to %s's ingress again: %w", e.dev, err))
		}
	}
	return out, errors.Join(errs...)
}

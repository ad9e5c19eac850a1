package owned

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Verification. A backend changes the kernel only where the state it is
// handed differs from what it installed last (see Reconciler), so what
// another tool removes behind its back — a host firewall reload that
// flushes POSTROUTING, `nft flush ruleset`, `ipset flush`, a `tc qdisc
// del` — would stay removed for as long as the daemon runs, with the
// throttles still reported in force (audit N1). A Verifier reads back
// what it installed; the daemon asks it every few seconds, on its own
// cadence apart from the control tick, and on drift has the backend
// re-install everything at the next Apply. Reading back costs one
// iptables-save per family and one netlink dump of the ipsets (tc
// backends: one tc qdisc show), never anything on the packet path.

// Drift is one object of ours that the kernel no longer holds as we
// installed it.
type Drift struct {
	// Object is the kind: "jump", "chain", "rule", "set", "member" or
	// "qdisc" (the label of sanqos_kernel_repairs_total).
	Object string
	// Name is the object: the jump "POSTROUTING -> SANQOS-q3260", the
	// chain or set name, the device.
	Name string
	// Want and Found say what was installed and what is there now.
	Want, Found string
}

func (d Drift) String() string {
	return fmt.Sprintf("%s %s: want %s, found %s", d.Object, d.Name, d.Want, d.Found)
}

// Installed is what the mangle table holds of one chain.
type Installed struct {
	Exists bool
	// Jumps counts the rules of each built-in chain that jump to it.
	Jumps map[string]int
	// Rules are the chain's rules in iptables-save form.
	Rules []string
}

// ChainReader is a Firewall that can read back a chain; a Firewall
// without it is verified by its sets only.
type ChainReader interface {
	Installed(ctx context.Context, chain string) (Installed, error)
}

// Installed reads chain back with one iptables-save of the mangle table.
// Our rules are written in iptables-save's own form (see RestoreText), so
// what it prints compares equal to what was installed.
func (f *Iptables) Installed(ctx context.Context, chain string) (Installed, error) {
	out, err := f.Run.Run(ctx, "", f.bin()+"-save", "-t", table)
	if err != nil {
		return Installed{}, fmt.Errorf("reading back the %s table: %w", table, err)
	}
	return parseSave(out, chain), nil
}

// parseSave picks chain out of iptables-save output.
func parseSave(out, chain string) Installed {
	in := Installed{Jumps: map[string]int{}}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, ":"+chain+" "):
			in.Exists = true
		case strings.HasPrefix(line, "-A "+chain+" "):
			in.Rules = append(in.Rules, line)
		case strings.HasPrefix(line, "-A ") && strings.HasSuffix(line, " -j "+chain):
			from, _, _ := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
			if line == "-A "+from+" -j "+chain {
				in.Jumps[from]++
			}
		}
	}
	return in
}

// Verify compares the kernel with what r installed; sets is the kernel's
// ipsets (Sets.List). On drift r forgets what it installed (invalidate).
// A reconciler whose last apply failed is not verified: it re-reads the
// kernel at its next try anyway.
func (r *Reconciler) Verify(ctx context.Context, sets map[string][]netip.Addr) ([]Drift, error) {
	if !r.synced || r.lastErr != nil {
		return nil, nil
	}
	var out []Drift
	if cr, ok := r.fw.(ChainReader); ok && r.chain && r.rules != nil {
		in, err := cr.Installed(ctx, r.own.Chain())
		if err != nil {
			return nil, err
		}
		out = append(out, r.verifyChain(in)...)
	}
	for _, n := range sortedKeys(r.members) {
		have, ok := sets[n]
		if !ok {
			out = append(out, Drift{Object: "set", Name: n, Want: "present", Found: "absent"})
			continue
		}
		// The kernel may hold more than we put there: arming adds
		// entries that lapse on their own.
		var missing []string
		for _, a := range sortedAddrs(r.members[n]) {
			if !slices.Contains(have, a) {
				missing = append(missing, a.String())
			}
		}
		if len(missing) > 0 {
			out = append(out, Drift{Object: "member", Name: n, Want: strings.Join(missing, ","), Found: "absent"})
		}
	}
	if len(out) > 0 {
		r.Invalidate()
	}
	return out, nil
}

// verifyChain compares a read-back chain with the installed rules.
func (r *Reconciler) verifyChain(in Installed) []Drift {
	return chainDrift(r.own.Chain(), r.rules, in)
}

// chainDrift compares chain as read back (in) with the rules installed
// in it, jumps included: what is missing or altered.
func chainDrift(chain string, rules []string, in Installed) []Drift {
	var out []Drift
	want, own := splitJumps(chain, rules)
	for _, from := range want {
		if in.Jumps[from] == 0 {
			out = append(out, Drift{Object: "jump", Name: from + " -> " + chain, Want: "present", Found: "absent"})
		}
	}
	switch {
	case !in.Exists:
		out = append(out, Drift{Object: "chain", Name: chain, Want: fmt.Sprintf("%d rules", len(own)), Found: "absent"})
	case !slices.Equal(in.Rules, own):
		out = append(out, Drift{Object: "rule", Name: chain, Want: firstDiff(own, in.Rules), Found: firstDiff(in.Rules, own)})
	}
	return out
}

// firstDiff describes a by the first rule that b lacks, and its length.
func firstDiff(a, b []string) string {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return fmt.Sprintf("%d rules, among them %q", len(a), x)
		}
	}
	return fmt.Sprintf("%d rules", len(a))
}

// Invalidate makes r forget what it believes installed: the next apply
// re-reads the sets, re-fills them, replaces the chain whole and checks
// its jumps (kube-proxy's "full sync").
func (r *Reconciler) Invalidate() {
	r.synced = false
	if f, ok := r.fw.(interface{ forget() }); ok {
		f.forget()
	}
}

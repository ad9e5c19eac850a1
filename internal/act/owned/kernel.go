package owned

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Kernel objects owned by this package. Everything carries the sanqos
// prefix and the name of the instance that made it (see Owner), so that
// a dead run's leftovers can be found and removed without touching
// anything else.
const (
	// Chain is our chain in the mangle table (an instance's is
	// Chain-<instance>); POSTROUTING jumps to it once.
	// mangle/POSTROUTING sees every packet the target sends, after routing,
	// which is where NFQUEUE and CLASSIFY must act.
	Chain = "SANQOS"
	// SetPrefix starts the name of every ipset we create.
	SetPrefix = "sanqos-"
	table     = "mangle"
	hook      = "POSTROUTING"
)

// Runner runs a command, feeding it stdin, and returns its combined output.
// It is the boundary to iptables and tc, so that tests can record the
// commands instead of running them.
type Runner interface {
	Run(ctx context.Context, stdin string, name string, args ...string) (string, error)
}

// ExecRunner runs commands on this machine. Prefix, if set, is prepended
// to every command (e.g. "ip netns exec NS").
type ExecRunner struct{ Prefix []string }

func (r ExecRunner) Run(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	argv := append(append([]string{}, r.Prefix...), name)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Firewall programs our chains. The rules are iptables-save "-A" lines.
type Firewall interface {
	// Replace atomically replaces the rules of chain and makes sure
	// POSTROUTING jumps to it exactly once, and INPUT too when rules
	// hold inputJump(chain) (which is not a rule of the chain).
	Replace(ctx context.Context, chain string, rules []string) error
	// Remove deletes the jumps to chain and the chain; absent ones are no
	// error.
	Remove(ctx context.Context, chain string) error
	// Chains lists the chains of the mangle table whose names start with
	// Chain, of any instance.
	Chains(ctx context.Context) ([]string, error)
}

// Sets manages our ipsets (hash:ip; family inet, or inet6 for the sets
// of an owner's IPv6 half, see isV6Set).
type Sets interface {
	// List returns every set whose name starts with SetPrefix, with members.
	List(ctx context.Context) (map[string][]netip.Addr, error)
	Create(ctx context.Context, name string) error
	Add(ctx context.Context, name string, ip netip.Addr) error
	Del(ctx context.Context, name string, ip netip.Addr) error
	Destroy(ctx context.Context, name string) error
}

// RestoreText is the iptables-restore input that replaces chain with
// rules in one transaction. Declaring the chain flushes it even with
// --noflush, and nothing outside it is touched except the jump rules
// appended to the built-in chains in jumps (POSTROUTING, INPUT). If any
// line is refused, nothing changes: the old rules stay in force.
func RestoreText(chain string, rules []string, jumps []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n", table, chain)
	for _, from := range jumps {
		fmt.Fprintf(&b, "-A %s -j %s\n", from, chain)
	}
	for _, r := range rules {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// InputJump is the rule by which a chain's rules ask for a jump from
// INPUT as well, to see what clients send (see Firewall.Replace).
func InputJump(chain string) string { return "-A INPUT -j " + chain }

// splitJumps takes the INPUT jump out of rules: the jumps a chain needs,
// and its own rules.
func splitJumps(chain string, rules []string) (jumps, own []string) {
	jumps = []string{hook}
	for _, r := range rules {
		if r == InputJump(chain) {
			jumps = append(jumps, "INPUT")
			continue
		}
		own = append(own, r)
	}
	return jumps, own
}

// Iptables is the Firewall on iptables (nft or legacy backend alike);
// with V6, on ip6tables, whose chains and rules are apart from
// iptables' and take the same syntax.
type Iptables struct {
	Run    Runner
	V6     bool
	jumped map[string]bool
}

func (f *Iptables) bin() string {
	if f.V6 {
		return "ip6tables"
	}
	return "iptables"
}

func (f *Iptables) hasJumpFrom(ctx context.Context, from, chain string) bool {
	_, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-C", from, "-j", chain)
	return err == nil
}

func (f *Iptables) Replace(ctx context.Context, chain string, rules []string) error {
	want, own := splitJumps(chain, rules)
	var jumps []string
	for _, from := range want {
		// Checked every time, not taken from f.jumped: another tool
		// (a firewall reload, nft flush ruleset) may have removed the
		// jump since we added it, and a chain nothing jumps to throttles
		// nobody.
		if !f.hasJumpFrom(ctx, from, chain) {
			jumps = append(jumps, from)
		}
	}
	if _, err := f.Run.Run(ctx, RestoreText(chain, own, jumps), f.bin()+"-restore", "-w", "--noflush"); err != nil {
		return fmt.Errorf("installing chain %s: %w", chain, err)
	}
	if f.jumped == nil {
		f.jumped = map[string]bool{}
	}
	for _, from := range want {
		f.jumped[chain+" "+from] = true
	}
	// A jump no longer asked for (INPUT, once nobody is armed) goes.
	for _, from := range jumpsTo(chain) {
		if key := chain + " " + from; f.jumped[key] && !slices.Contains(want, from) {
			if _, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-D", from, "-j", chain); err != nil {
				return fmt.Errorf("removing jump from %s to %s: %w", from, chain, err)
			}
			delete(f.jumped, key)
		}
	}
	return nil
}

func (f *Iptables) Remove(ctx context.Context, chain string) error {
	// A crashed run may have left more than one jump; delete them all.
	// 64 bounds the loop should a jump refuse to go, far above the one
	// jump a run adds.
	for _, from := range jumpsTo(chain) {
		for i := 0; i < 64 && f.hasJumpFrom(ctx, from, chain); i++ {
			if _, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-D", from, "-j", chain); err != nil {
				return fmt.Errorf("removing jump to %s: %w", chain, err)
			}
		}
	}
	for _, from := range jumpsTo(chain) {
		delete(f.jumped, chain+" "+from)
	}
	if _, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-S", chain); err != nil {
		return nil // no chain: nothing to remove
	}
	if _, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-F", chain); err != nil {
		return fmt.Errorf("flushing chain %s: %w", chain, err)
	}
	if err := f.deleteChain(ctx, chain); err != nil {
		return fmt.Errorf("deleting chain %s: %w", chain, err)
	}
	return nil
}

// Deleting a chain right after its last jump went, or a set right after
// the last rule that matched it, can fail with EBUSY under iptables-nft
// ("CHAIN_DEL failed (Device or resource busy)"; ipset's "busy"): nf_tables
// releases what a deleted rule held in a deferred work item after the
// commit, not in it. It clears within moments on a healthy host and
// within a second or two on a slow one (every stop of the daemon under
// systemd in the emulated kernel lab), so deletion is retried with a
// doubling wait, busyFirstWait to about 6 s in all, inside the unit's
// TimeoutStopSec.
const (
	busyTries     = 8
	busyFirstWait = 50 * time.Millisecond
)

// retryBusy runs del until it succeeds, fails otherwise than busy, or
// busyTries are spent; the last error is returned.
func retryBusy(ctx context.Context, del func() (busy bool, err error)) error {
	wait := busyFirstWait
	for i := 1; ; i++ {
		busy, err := del()
		if err == nil || i == busyTries || !busy {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// deleteChain deletes the (empty) chain, retrying while it is busy. A
// chain is also busy while any rule still jumps to it, whoever added it
// and with whatever matches: each busy try first deletes every such rule
// of the table, so that only the kernel's deferred release is waited for.
func (f *Iptables) deleteChain(ctx context.Context, chain string) error {
	return retryBusy(ctx, func() (bool, error) {
		out, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-X", chain)
		if err == nil || !isBusy(out, err) {
			return false, err
		}
		if jerr := f.deleteJumpsTo(ctx, chain); jerr != nil {
			return true, errors.Join(err, jerr)
		}
		return true, err
	})
}

// deleteJumpsTo deletes every rule of the table that jumps to chain.
func (f *Iptables) deleteJumpsTo(ctx context.Context, chain string) error {
	out, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-S")
	if err != nil {
		return fmt.Errorf("listing the %s table: %w", table, err)
	}
	for _, line := range strings.Split(out, "\n") {
		rule, ok := strings.CutPrefix(strings.TrimSpace(line), "-A ")
		if !ok || !strings.HasSuffix(rule, " -j "+chain) || strings.HasPrefix(rule, chain+" ") {
			continue
		}
		args := append([]string{"-w", "-t", table, "-D"}, strings.Fields(rule)...)
		if _, err := f.Run.Run(ctx, "", f.bin(), args...); err != nil {
			return fmt.Errorf("removing a rule that jumps to %s (%s): %w", chain, rule, err)
		}
	}
	return nil
}

// isBusy reports whether iptables failed with EBUSY.
func isBusy(out string, err error) bool {
	return errors.Is(err, unix.EBUSY) || strings.Contains(out+err.Error(), "Device or resource busy")
}

// isSetBusy reports whether the kernel refused to destroy a set because a
// rule still holds it.
func isSetBusy(err error) bool {
	return errors.Is(err, nl.IPSetError(nl.IPSET_ERR_BUSY)) || errors.Is(err, unix.EBUSY)
}

// forget drops what f remembers of the jumps it added, so that the next
// Replace checks every jump in the kernel (see Reconciler.Invalidate).
func (f *Iptables) forget() { f.jumped = nil }

func (f *Iptables) Chains(ctx context.Context) ([]string, error) {
	out, err := f.Run.Run(ctx, "", f.bin(), "-w", "-t", table, "-S")
	if err != nil {
		return nil, fmt.Errorf("listing the chains of the %s table: %w", table, err)
	}
	var cs []string
	for _, line := range strings.Split(out, "\n") {
		if c, ok := strings.CutPrefix(line, "-N "); ok && strings.HasPrefix(c, Chain) {
			cs = append(cs, strings.TrimSpace(c))
		}
	}
	return cs, nil
}

// Ipsets is Sets over netlink. Handle may be bound to another network
// namespace (netlink.NewHandleAt); nil means the current one.
type Ipsets struct{ Handle *netlink.Handle }

func (s Ipsets) h() *netlink.Handle {
	if s.Handle != nil {
		return s.Handle
	}
	return &netlink.Handle{}
}

func (s Ipsets) List(ctx context.Context) (map[string][]netip.Addr, error) {
	all, err := s.h().IpsetListAll()
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	out := map[string][]netip.Addr{}
	for _, r := range all {
		if !strings.HasPrefix(r.SetName, SetPrefix) {
			continue
		}
		var ips []netip.Addr
		for _, e := range r.Entries {
			if a, ok := netip.AddrFromSlice(e.IP); ok {
				ips = append(ips, a.Unmap())
			}
		}
		out[r.SetName] = ips
	}
	return out, nil
}

func (s Ipsets) Create(ctx context.Context, name string) error {
	// With timeout support, so that the entries the kernel adds for an
	// armed consumer lapse on their own (see "Arming"); ours are added
	// with timeout 0, permanent.
	armed := uint32(ArmTimeout)
	opts := netlink.IpsetCreateOptions{Replace: true, Family: unix.AF_INET, Timeout: &armed}
	if IsV6Set(name) {
		opts.Family = unix.AF_INET6
	}
	if err := s.h().IpsetCreate(name, "hash:ip", opts); err != nil {
		return fmt.Errorf("creating ipset %s: %w", name, err)
	}
	return nil
}

func (s Ipsets) Add(ctx context.Context, name string, ip netip.Addr) error {
	// Replace: an armed consumer the kernel has put in the set with a
	// timeout is made permanent, not refused as already there.
	var permanent uint32
	if err := s.h().IpsetAdd(name, &netlink.IPSetEntry{IP: net.IP(ip.AsSlice()), Replace: true, Timeout: &permanent}); err != nil {
		return fmt.Errorf("adding %s to ipset %s: %w", ip, name, err)
	}
	return nil
}

func (s Ipsets) Del(ctx context.Context, name string, ip netip.Addr) error {
	if err := s.h().IpsetDel(name, &netlink.IPSetEntry{IP: net.IP(ip.AsSlice())}); err != nil {
		return fmt.Errorf("removing %s from ipset %s: %w", ip, name, err)
	}
	return nil
}

func (s Ipsets) Destroy(ctx context.Context, name string) error {
	err := retryBusy(ctx, func() (bool, error) {
		err := s.h().IpsetDestroy(name)
		return err != nil && isSetBusy(err), err
	})
	if err != nil {
		return fmt.Errorf("destroying ipset %s: %w", name, err)
	}
	return nil
}

// errBusy is what the fake kernel returns when a set still in use by a
// rule is destroyed, like the real one (EBUSY).
var errBusy = errors.New("set is in use by a rule")

// jumpsTo lists the hooks whose jumps to chain Remove deletes: any chain
// of ours may be jumped to from INPUT too (older wire counters' always,
// the nfqueue backend's while it arms consumers).
func jumpsTo(string) []string { return []string{hook, "INPUT"} }

// ArmTimeout is the default timeout, in seconds, of our ipsets: the
// smallest an ipset entry can live. Our own entries are permanent; those
// the kernel adds for an armed consumer (throttle's arm.go) lapse after it.
const ArmTimeout = 1

package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/attribution"
)

// Wire counts, per client address, the bytes each client sends to the
// storage ports and receives from them, in the kernel, without a packet
// reaching user space (issue 17). Two ipsets of the known clients,
// created with per-entry counters, and two rules in a chain of our own
// that match them and do nothing else:
//
//	-A INPUT -j SANQOS-w<inst>
//	-A POSTROUTING -j SANQOS-w<inst>     (mangle table)
//	-A SANQOS-w<inst> -p tcp -m multiport --dports P -m set --match-set sanqos-w<inst>-sent src
//	-A SANQOS-w<inst> -p tcp -m multiport --sports P -m set --match-set sanqos-w<inst>-recv dst
//
// A matching packet adds its length to its client's entry; the rules have
// no target, so they can neither drop nor delay anything, and a dead
// daemon's leftovers only count. Read reads both sets over netlink once
// per tick. The objects follow the ownership rules of owner.go: the
// instance is "w" and the backend's instance, with its own lock, so
// start-up clean-up of any instance removes a dead one's (Iptables.Remove
// knows a wire chain is also jumped to from INPUT). IPv4 clients only for
// now: an IPv6 client has no wire rate and keeps its device's.
type Wire struct {
	own   owner
	lock  *instanceLock
	fw    Firewall
	h     *netlink.Handle
	ports []uint16
	log   *slog.Logger

	mu      sync.Mutex
	clients map[netip.Addr]bool
}

// WireConfig configures OpenWire. Zero values take defaults.
type WireConfig struct {
	// Instance is the backend's instance (DefaultInstance); the wire
	// counters' is WireInstance of it.
	Instance string
	Ports    []uint16
	Firewall Firewall        // default: iptables here
	Handle   *netlink.Handle // default: this network namespace
	NetNS    int             // for the lock; 0: here
	Logger   *slog.Logger
}

// wireMark starts the instance name of wire counters: Iptables.Remove
// looks for a jump from INPUT too in chains of such instances.
const wireMark = "w"

// WireInstance is the instance name of the wire counters of a backend
// instance: "w" and its name, cut to the 8 characters names may have.
func WireInstance(backend string) string {
	n := wireMark + backend
	if len(n) > maxInstance {
		n = n[:maxInstance]
	}
	return n
}

// jumpsTo lists the hooks whose jumps to chain Remove deletes.
func jumpsTo(chain string) []string {
	if inst, ok := chainOwner(chain); ok && strings.HasPrefix(inst, wireMark) {
		return []string{hook, "INPUT"}
	}
	return []string{hook}
}

// Set names (logical, before the owner's prefix).
const (
	wireSent = SetPrefix + "sent"
	wireRecv = SetPrefix + "recv"
)

// OpenWire removes what a dead earlier run left and installs the
// counting chain and its empty sets; SetClients fills them.
func OpenWire(ctx context.Context, cfg WireConfig) (*Wire, error) {
	if len(cfg.Ports) == 0 {
		return nil, errors.New("wire counters: no ports")
	}
	if cfg.Instance == "" {
		cfg.Instance = DefaultInstance(Options{})
	}
	inst := WireInstance(cfg.Instance)
	if err := CheckInstance(inst); err != nil {
		return nil, err
	}
	if cfg.Firewall == nil {
		cfg.Firewall = &Iptables{Run: ExecRunner{}}
	}
	if cfg.Handle == nil {
		cfg.Handle = &netlink.Handle{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lock, err := lockInstance(cfg.NetNS, inst)
	if err != nil {
		return nil, err
	}
	w := &Wire{own: owner{name: inst}, lock: lock, fw: cfg.Firewall, h: cfg.Handle, ports: cfg.Ports,
		log: cfg.Logger.With("part", "wire", "instance", inst), clients: map[netip.Addr]bool{}}
	rec := newOwnedReconciler(cfg.Firewall, Ipsets{Handle: cfg.Handle}, inst, cfg.NetNS)
	if err := rec.reset(ctx); err != nil {
		lock.release()
		return nil, fmt.Errorf("wire counters: removing leftovers of an earlier run: %w", err)
	}
	if err := w.install(ctx); err != nil {
		return nil, errors.Join(err, w.Close())
	}
	return w, nil
}

// install creates the two counting sets and the chain.
func (w *Wire) install(ctx context.Context) error {
	for _, n := range []string{wireSent, wireRecv} {
		// Revision 1 of hash:ip is the one that added counters: the
		// library's default, 0, has the kernel count all the same, but
		// ipset(8) would not show the counters.
		opts := netlink.IpsetCreateOptions{Replace: true, Family: unix.AF_INET, Counters: true, Revision: 1}
		if err := w.h.IpsetCreate(w.own.set(n), "hash:ip", opts); err != nil {
			return fmt.Errorf("wire counters: creating ipset %s: %w", w.own.set(n), err)
		}
	}
	ports := make([]string, len(w.ports))
	for i, p := range w.ports {
		ports[i] = fmt.Sprint(p)
	}
	ps := strings.Join(ports, ",")
	chain := w.own.chain()
	rules := []string{
		// Replace adds the jump from POSTROUTING; this one, once, from
		// INPUT, which sees what the clients send.
		fmt.Sprintf("-A INPUT -j %s", chain),
		fmt.Sprintf("-A %s -p tcp -m multiport --dports %s -m set --match-set %s src", chain, ps, w.own.set(wireSent)),
		fmt.Sprintf("-A %s -p tcp -m multiport --sports %s -m set --match-set %s dst", chain, ps, w.own.set(wireRecv)),
	}
	if err := w.fw.Replace(ctx, chain, rules); err != nil {
		return fmt.Errorf("wire counters: %w", err)
	}
	return nil
}

// SetClients makes the sets hold exactly addrs (IPv4 ones; others are
// skipped). A client that stays keeps its counters.
func (w *Wire) SetClients(addrs []netip.Addr) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			want[a] = true
		}
	}
	var errs []error
	for a := range want {
		if w.clients[a] {
			continue
		}
		for _, n := range []string{wireSent, wireRecv} {
			if err := w.h.IpsetAdd(w.own.set(n), &netlink.IPSetEntry{IP: net.IP(a.AsSlice()), Replace: true}); err != nil {
				errs = append(errs, fmt.Errorf("wire counters: adding %s to %s: %w", a, w.own.set(n), err))
			}
		}
		w.clients[a] = true
	}
	for a := range w.clients {
		if want[a] {
			continue
		}
		for _, n := range []string{wireSent, wireRecv} {
			if err := w.h.IpsetDel(w.own.set(n), &netlink.IPSetEntry{IP: net.IP(a.AsSlice())}); err != nil {
				errs = append(errs, fmt.Errorf("wire counters: removing %s from %s: %w", a, w.own.set(n), err))
			}
		}
		delete(w.clients, a)
	}
	return errors.Join(errs...)
}

// Read returns every client's counters: two netlink dumps.
func (w *Wire) Read() (map[netip.Addr]attribution.Counters, error) {
	out := map[netip.Addr]attribution.Counters{}
	for _, n := range []string{wireSent, wireRecv} {
		r, err := w.h.IpsetList(w.own.set(n))
		if err != nil {
			return nil, fmt.Errorf("wire counters: reading %s: %w", w.own.set(n), err)
		}
		for _, e := range r.Entries {
			a, ok := netip.AddrFromSlice(e.IP)
			if !ok || e.Bytes == nil {
				continue
			}
			c := out[a.Unmap()]
			if n == wireSent {
				c.Sent = *e.Bytes
			} else {
				c.Received = *e.Bytes
			}
			out[a.Unmap()] = c
		}
	}
	return out, nil
}

// Close removes the chain, its jumps and the sets, and releases the lock.
func (w *Wire) Close() error {
	if w.lock == nil {
		return nil
	}
	rec := newOwnedReconciler(w.fw, Ipsets{Handle: w.h}, w.own.name, 0)
	err := rec.reset(context.Background())
	w.lock.release()
	w.lock = nil
	if err != nil {
		return fmt.Errorf("wire counters: removing: %w", err)
	}
	return nil
}

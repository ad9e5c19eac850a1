package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
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
//	-A SANQOS-w<inst> -p tcp -m multiport --dports P -m length --length L:65535 -m set --match-set sanqos-w<inst>-sent src
//	-A SANQOS-w<inst> -p tcp -m multiport --sports P -m length --length L:65535 -m set --match-set sanqos-w<inst>-recv dst
//
// (L: just over the port's small-segment split and the headers: only
// data segments count, see install).
//
// A matching packet adds its length to its client's entry; the rules have
// no target, so they can neither drop nor delay anything, and a dead
// daemon's leftovers only count. Read reads both sets over netlink once
// per tick. The objects follow the ownership rules of owner.go: the
// instance is "w" and the backend's instance, with its own lock, so
// start-up clean-up of any instance removes a dead one's (Iptables.Remove
// knows a wire chain is also jumped to from INPUT). IPv6 clients are
// counted the same way in ip6tables and sets of family inet6, where
// ip6tables works.
//
// Why not conntrack accounting: it needs the namespace-wide
// nf_conntrack_acct switch (not an object of ours to remove on exit),
// connection tracking of every flow on the host, and a dump of the whole
// table each tick; the sets hold only our clients, are read in two
// messages, and go with the chain. Cost, measured side by side on a bulk
// transfer (TestWireLive): within the run-to-run noise, median ratio
// 0.96–0.98 over seven runs, range 0.89–1.11.
type Wire struct {
	halves []wireHalf // IPv4, and IPv6 where ip6tables works
	lock   *instanceLock
	h      *netlink.Handle
	ns     int
	ports  []uint16
	small  map[uint16]int // the ports' splits (SmallSegments), def else
	def    int
	log    *slog.Logger

	mu      sync.Mutex
	clients map[netip.Addr]bool
}

// wireHalf is the chain and sets of one address family: the IPv6 half's
// owner has v6 set (sets of family inet6, the chain in ip6tables).
type wireHalf struct {
	own owner
	fw  Firewall
}

// WireConfig configures OpenWire. Zero values take defaults.
type WireConfig struct {
	// Instance is the backend's instance (DefaultInstance); the wire
	// counters' is WireInstance of it.
	Instance string
	Ports    []uint16
	// SmallSegment and SmallSegments are the backend's splits: only
	// segments longer count (see install); 0 is DefaultSmallSegment.
	SmallSegment  int
	SmallSegments map[uint16]int
	Firewall      Firewall // default: iptables here
	// Firewall6 counts IPv6 clients; default: ip6tables beside Firewall
	// when that is an *Iptables and ip6tables works, else none.
	Firewall6 Firewall
	Handle    *netlink.Handle // default: this network namespace
	NetNS     int             // for the lock; 0: here
	Logger    *slog.Logger
}

// wireMark starts the instance name of wire counters.
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

// jumpsTo lists the hooks whose jumps to chain Remove deletes: any chain
// of ours may be jumped to from INPUT too (the wire counters' always,
// the nfqueue backend's while it arms consumers).
func jumpsTo(string) []string { return []string{hook, "INPUT"} }

// Set names (logical, before the owner's prefix).
const (
	wireSent = SetPrefix + "sent"
	wireRecv = SetPrefix + "recv"
)

// OpenWire removes what a dead earlier run left and installs the
// counting chains and their empty sets; SetClients fills them.
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
	if ipt, ok := cfg.Firewall.(*Iptables); ok && cfg.Firewall6 == nil && !ipt.V6 {
		cfg.Firewall6 = &Iptables{Run: ipt.Run, V6: true}
	}
	if cfg.Handle == nil {
		cfg.Handle = &netlink.Handle{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SmallSegment == 0 {
		cfg.SmallSegment = DefaultSmallSegment
	}
	if err := ValidateSmallSegments(cfg.SmallSegments); err != nil {
		return nil, err
	}
	lock, err := lockInstance(cfg.NetNS, inst)
	if err != nil {
		return nil, err
	}
	w := &Wire{halves: []wireHalf{{owner{name: inst}, cfg.Firewall}}, lock: lock, h: cfg.Handle, ns: cfg.NetNS,
		ports: cfg.Ports, small: cfg.SmallSegments, def: cfg.SmallSegment, log: cfg.Logger.With("part", "wire", "instance", inst), clients: map[netip.Addr]bool{}}
	if cfg.Firewall6 != nil {
		if _, err := cfg.Firewall6.Chains(ctx); err != nil {
			w.log.Warn("ip6tables does not work here: IPv6 clients keep their devices' rates", "err", err)
		} else {
			w.halves = append(w.halves, wireHalf{owner{name: inst, v6: true}, cfg.Firewall6})
		}
	}
	if err := w.reset(ctx); err != nil {
		lock.release()
		return nil, fmt.Errorf("wire counters: removing leftovers of an earlier run: %w", err)
	}
	for _, hf := range w.halves {
		if err := w.install(ctx, hf); err != nil {
			return nil, errors.Join(err, w.Close())
		}
	}
	return w, nil
}

// reset removes every half's chain, jumps and sets.
func (w *Wire) reset(ctx context.Context) error {
	var errs []error
	for _, hf := range w.halves {
		rec := newOwnedReconciler(hf.fw, Ipsets{Handle: w.h}, hf.own.name, w.ns)
		rec.own = hf.own
		errs = append(errs, rec.reset(ctx))
	}
	return errors.Join(errs...)
}

// install creates the two counting sets and the chain of one half.
func (w *Wire) install(ctx context.Context, hf wireHalf) error {
	for _, n := range []string{wireSent, wireRecv} {
		// Revision 1 of hash:ip is the one that added counters: the
		// library's default, 0, has the kernel count all the same, but
		// ipset(8) would not show the counters.
		opts := netlink.IpsetCreateOptions{Replace: true, Family: unix.AF_INET, Counters: true, Revision: 1}
		if hf.own.v6 {
			opts.Family = unix.AF_INET6
		}
		if err := w.h.IpsetCreate(hf.own.set(n), "hash:ip", opts); err != nil {
			return fmt.Errorf("wire counters: creating ipset %s: %w", hf.own.set(n), err)
		}
	}
	if err := hf.fw.Replace(ctx, hf.own.chain(), w.rules(hf)); err != nil {
		return fmt.Errorf("wire counters: %w", err)
	}
	return nil
}

// SetPorts makes the counters count the target ports ports, with the
// splits small (the backend's, see WireConfig), from now on: a reload of
// the ports. The chains are replaced atomically; the sets, and with them
// every client's counters, stay.
func (w *Wire) SetPorts(ctx context.Context, ports []uint16, small map[uint16]int) error {
	if len(ports) == 0 {
		return errors.New("wire counters: no ports")
	}
	if err := ValidateSmallSegments(small); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ports, w.small = slices.Clone(ports), small
	var errs []error
	for _, hf := range w.halves {
		if err := hf.fw.Replace(ctx, hf.own.chain(), w.rules(hf)); err != nil {
			errs = append(errs, fmt.Errorf("wire counters: %w", err))
		}
	}
	return errors.Join(errs...)
}

// rules are the chain of one half for the ports.
func (w *Wire) rules(hf wireHalf) []string {
	chain := hf.own.chain()
	// Replace adds the jump from POSTROUTING and, asked so, from
	// INPUT, which sees what the clients send.
	rules := []string{inputJump(chain)}
	for _, g := range splitGroups(w.ports, w.small, w.def) {
		// Only segments longer than the port's split count: data. Pure
		// ACKs and requests (a reader's READ calls, its ACKs of the
		// data) are how the protocol asks, not what it writes; counted,
		// a reader at 100 MB/s would "write" a few MB/s.
		data := fmt.Sprintf("-m length --length %d:65535", lengthSplit(g.small)+1)
		list := portList(g.ports)
		rules = append(rules,
			fmt.Sprintf("-A %s -p tcp -m multiport --dports %s %s -m set --match-set %s src", chain, list, data, hf.own.set(wireSent)),
			fmt.Sprintf("-A %s -p tcp -m multiport --sports %s %s -m set --match-set %s dst", chain, list, data, hf.own.set(wireRecv)))
	}
	return rules
}

// half returns the half that counts a, if any.
func (w *Wire) half(a netip.Addr) (wireHalf, bool) {
	for _, hf := range w.halves {
		if hf.own.v6 == a.Is6() {
			return hf, true
		}
	}
	return wireHalf{}, false
}

// SetClients makes the sets hold exactly addrs (those of a family
// counted; see OpenWire). A client that stays keeps its counters.
func (w *Wire) SetClients(addrs []netip.Addr) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		if _, ok := w.half(a.Unmap()); ok {
			want[a.Unmap()] = true
		}
	}
	var errs []error
	for a := range want {
		if !w.clients[a] {
			errs = append(errs, w.member(a, true))
			w.clients[a] = true
		}
	}
	for a := range w.clients {
		if !want[a] {
			errs = append(errs, w.member(a, false))
			delete(w.clients, a)
		}
	}
	return errors.Join(errs...)
}

// member adds a to (or removes it from) both sets of its half.
func (w *Wire) member(a netip.Addr, add bool) error {
	hf, _ := w.half(a)
	verb := "adding"
	if !add {
		verb = "removing"
	}
	var errs []error
	for _, n := range []string{wireSent, wireRecv} {
		var err error
		if add {
			err = w.h.IpsetAdd(hf.own.set(n), &netlink.IPSetEntry{IP: net.IP(a.AsSlice()), Replace: true})
		} else {
			err = w.h.IpsetDel(hf.own.set(n), &netlink.IPSetEntry{IP: net.IP(a.AsSlice())})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("wire counters: %s %s in %s: %w", verb, a, hf.own.set(n), err))
		}
	}
	return errors.Join(errs...)
}

// Read returns every client's counters: two netlink dumps per half.
func (w *Wire) Read() (map[netip.Addr]attribution.Counters, error) {
	out := map[netip.Addr]attribution.Counters{}
	for _, hf := range w.halves {
		for _, n := range []string{wireSent, wireRecv} {
			r, err := w.h.IpsetList(hf.own.set(n))
			if err != nil {
				return nil, fmt.Errorf("wire counters: reading %s: %w", hf.own.set(n), err)
			}
			for _, e := range r.Entries {
				a, ok := netip.AddrFromSlice(e.IP)
				if !ok || e.Bytes == nil {
					continue
				}
				a = a.Unmap()
				c := out[a]
				if n == wireSent {
					c.Sent = *e.Bytes
				} else {
					c.Received = *e.Bytes
				}
				out[a] = c
			}
		}
	}
	return out, nil
}

// Close removes the chains, their jumps and the sets, and releases the
// lock.
func (w *Wire) Close() error {
	if w.lock == nil {
		return nil
	}
	err := w.reset(context.Background())
	w.lock.release()
	w.lock = nil
	if err != nil {
		return fmt.Errorf("wire counters: removing: %w", err)
	}
	return nil
}

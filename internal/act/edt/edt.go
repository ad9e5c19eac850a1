//go:build linux

// Package edt is a kernel-native delay path that fails open: a tc/BPF
// program on the target's egress gives each throttled initiator's packets
// a departure time (Earliest Departure Time, skb->tstamp) of now + delay,
// and the fq qdisc holds each packet until then. It is the technique of
// Cilium's bandwidth manager, used here for delay instead of rate. The
// program is C (bpf/edt.bpf.c), compiled by `make bpf` into edt.bpf.o,
// which is committed and embedded: sanqos needs no compiler at run time.
//
// The daemon writes one map entry per throttled initiator (IPv4 or IPv6;
// the key is its 16-byte address, IPv4 as ::ffff:a.b.c.d) and target
// port: the delay, the directions it applies to (by the port's
// small-segment split of the TCP payload, as nfqueue's: small segments
// and pure ACKs clock writes, longer ones carry reads) and an expiry on
// CLOCK_MONOTONIC. Segments from other ports, and other protocols, pass. The program ignores an expired entry, so when the
// daemon dies (kill -9, OOM, a hang) it stops renewing them and every
// delay is gone one TTL later: the data path fails open on its own, with
// nothing to run at exit. fq and the program stay; they pass unthrottled
// traffic unchanged, and 'sanqos run --cleanup-only' in the unit's
// ExecStopPost (or the next start) removes them. Per entry and CPU the
// program counts the segments it delayed and those it passed at once
// (Counters).
//
// Order: fq keeps a flow (a socket: one TCP connection) in departure-time
// order, so a packet given an earlier time than one before it would
// overtake it when the delay falls. The program never gives a packet a
// departure time before the last one it gave that connection (the
// initiator's address and port and the target's port, both directions),
// so a lowered delay drains the queue in order instead of reordering it;
// and a packet of a live entry that gets no delay of its own (the other
// direction, a delay lowered to 0, an armed entry not active) leaves no
// earlier than that last either, since fq would send a packet without a
// time ahead of its flow's held ones. Another connection of the same
// initiator and port waits for nothing of this one's. A connection's
// segments leave the stack under its socket's lock, so its last has one
// writer at a time; it is forgotten once its held packets have left.
//
// Never drop: fq drops what comes past its limit. The program counts
// the packets it has given a departure time still ahead and past
// HeldLimit gives none, so they pass at once (counted Bypassed), as
// nfqueue lets packets pass past its backlog.
//
// Rise limit: per flow and direction the program ramps the delay as
// nfqueue's RiseLimit does (Entry.Rise, DefaultRise), remembering each
// flow's last applied delay in an LRU map that bounds its memory; Free
// removes an initiator's ramps with its entry. Arming: an entry with Armed holds the write
// direction only once the initiator writes; an ingress program on the
// same device sees the write and activates it for a second.
//
// What the programs write (each connection's last, the arming's
// deadline, the ramps, the count of held packets) is in maps of their
// own: the daemon rewrites an entry whole at every renewal and must not
// undo them.
package edt

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// FilterName and ArmFilterName name our tc filters (egress and
// ingress), so a cleanup finds them.
const (
	FilterName    = "sanqos-edt"
	ArmFilterName = "sanqos-edt-arm"
)

// EDT is the delay path on one interface of one network namespace.
type EDT struct {
	h    *netlink.Handle
	dev  string
	link netlink.Link
	objects
	// The kernel's ids of the programs, as a filter dump names them.
	progID, armID ebpf.ProgramID
	// freed sums the counters of the entries Free removed, so that
	// Totals only grows.
	mu    sync.Mutex
	freed Counters
	// dropped sums the drops of the fqs Detach removed (see Queue).
	dropped uint64
	// rt dumps fq's own statistics (fqstats.go).
	rt *nl.SocketHandle
}

// Direction selects segments by their TCP payload against the port's
// small-segment split: Write holds pure ACKs and small segments (R2T,
// SCSI response), Read holds data segments.
type Direction int

const (
	Write Direction = iota
	Read
	Both // every segment
)

// New loads the programs and their maps for dev, in the network namespace
// at nsPath ("" for the current one), after removing what an earlier run
// left, and checks that the kernel takes fq and the classifier on dev by
// attaching and detaching them once. Nothing of ours stays on dev's path
// until Attach.
func New(nsPath, dev string) (_ *EDT, err error) {
	h, err := handle(nsPath)
	if err != nil {
		return nil, err
	}
	e := &EDT{h: h, dev: dev}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if e.rt, err = routeSocket(nsPath); err != nil {
		return nil, err
	}
	if e.link, err = h.LinkByName(dev); err != nil {
		return nil, fmt.Errorf("edt: interface %s: %w", dev, err)
	}
	cleanup(h, e.link)
	o, err := load()
	if err != nil {
		return nil, err
	}
	e.objects = o
	if info, err := e.prog.Info(); err == nil {
		e.progID, _ = info.ID()
	}
	if info, err := e.arm.Info(); err == nil {
		e.armID, _ = info.ID()
	}
	if err := e.Attach(); err != nil {
		return nil, err
	}
	if err := e.Detach(); err != nil {
		return nil, err
	}
	return e, nil
}

// Attach puts fq as the root qdisc of dev, the classifier on its egress
// and the arming program on its ingress (the first throttle: one netlink
// message each).
func (e *EDT) Attach() error {
	if err := e.h.QdiscReplace(e.fq()); err != nil {
		return fmt.Errorf("edt: fq as root qdisc of %s: %w", e.dev, err)
	}
	if err := e.h.QdiscReplace(e.clsact()); err != nil {
		return fmt.Errorf("edt: clsact on %s: %w", e.dev, err)
	}
	if err := e.h.FilterReplace(e.filter()); err != nil {
		return fmt.Errorf("edt: attaching the classifier to %s: %w", e.dev, err)
	}
	if err := e.h.FilterReplace(e.armFilter()); err != nil {
		return fmt.Errorf("edt: attaching the arming program to %s's ingress: %w", e.dev, err)
	}
	return nil
}

// Detach removes the filters and fq from dev, leaving the programs and
// their maps loaded for the next Attach; dev gets its default qdisc back.
// Packets fq still holds are dropped with it: call it only once the
// last delay has run out.
func (e *EDT) Detach() error {
	link, err := e.h.LinkByName(e.dev)
	if err != nil {
		return fmt.Errorf("edt: interface %s: %w", e.dev, err)
	}
	e.link = link
	e.keepDrops()
	return cleanup(e.h, link)
}

// fqHandle is our fq's handle (5e:), so a cleanup removes only ours.
var fqHandle = netlink.MakeHandle(0x5e, 0)

// Our filters' place on the egress and ingress hooks: handle 1 at
// priority 1.
const (
	filterHandle = 1
	filterPrio   = 1
)

func (e *EDT) clsact() *netlink.GenericQdisc {
	return &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: e.link.Attrs().Index, Parent: netlink.HANDLE_CLSACT, Handle: netlink.MakeHandle(0xffff, 0)}, QdiscType: "clsact"}
}

func (e *EDT) filter() *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: e.link.Attrs().Index, Parent: netlink.HANDLE_MIN_EGRESS, Handle: filterHandle, Protocol: unix.ETH_P_ALL, Priority: filterPrio},
		Fd:          e.prog.FD(), Name: FilterName, DirectAction: true,
	}
}

// armFilter runs the arming program on dev's ingress.
func (e *EDT) armFilter() *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: e.link.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS, Handle: filterHandle, Protocol: unix.ETH_P_ALL, Priority: filterPrio},
		Fd:          e.arm.FD(), Name: ArmFilterName, DirectAction: true,
	}
}

func handle(nsPath string) (*netlink.Handle, error) {
	// Route netlink only: asking for every family fails on kernels
	// without xfrm_user ("protocol not supported").
	if nsPath == "" {
		return netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("edt: network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("edt: netlink in %s: %w", nsPath, err)
	}
	return h, nil
}

func monotonic() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Set delays the TCP segments from the target's port to addr in
// direction dir by delay until ttl from now: Write those whose payload
// is at most split bytes, Read the longer ones; each flow's delay rises
// by DefaultRise. The daemon renews it every tick, so ttl bounds how
// long a delay outlives a dead daemon.
func (e *EDT) Set(addr netip.Addr, port uint16, split int, dir Direction, delay, ttl time.Duration) error {
	return e.set(Key{addr, port}, Entry{Split: split, Dir: dir, Delay: delay, Rise: DefaultRise}, ttl)
}

// SetEntry sets addr's entry on port until ttl from now (see Entry).
func (e *EDT) SetEntry(addr netip.Addr, port uint16, en Entry, ttl time.Duration) error {
	return e.set(Key{addr, port}, en, ttl)
}

// Free removes the delay of addr's flows from port, and their ramps
// (forgetFlows); its queued packets still leave in order. Its counters
// go into the totals.
func (e *EDT) Free(addr netip.Addr, port uint16) error {
	key := Key{addr, port}.bytes()
	if err := e.m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("edt: freeing %s port %d: %w", addr, port, err)
	}
	// The arming goes with the entry; each connection's order stays
	// until its held packets have left.
	e.st.Delete(key)
	ferr := e.forgetFlows(Key{addr, port})
	if c, err := counters(e.cnt, key); err == nil { // else none yet, or unreadable
		e.mu.Lock()
		e.freed.add(c)
		e.mu.Unlock()
		e.cnt.Delete(key)
	}
	return ferr // the entry is gone anyway
}

// Close removes the filters and fq from the interface.
func (e *EDT) Close() error {
	var err error
	if e.link != nil {
		err = cleanup(e.h, e.link)
	}
	e.objects.close()
	if e.h != nil {
		e.h.Close()
	}
	if e.rt != nil {
		e.rt.Close()
	}
	return err
}

// Cleanup removes what an EDT on dev left (after kill -9, the filters
// keep the programs and their maps alive): the clsact qdisc with both
// filters, and fq if it is the root qdisc.
func Cleanup(nsPath, dev string) error {
	h, err := handle(nsPath)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("edt: interface %s: %w", dev, err)
	}
	return cleanup(h, link)
}

func cleanup(h *netlink.Handle, link netlink.Link) error {
	qs, err := h.QdiscList(link)
	if err != nil {
		return fmt.Errorf("edt: listing qdiscs of %s: %w", link.Attrs().Name, err)
	}
	var errs []error
	for _, q := range qs {
		a := q.Attrs()
		if (q.Type() == "clsact" && a.Parent == netlink.HANDLE_CLSACT) || (q.Type() == "fq" && a.Parent == netlink.HANDLE_ROOT && a.Handle == fqHandle) {
			if err := h.QdiscDel(q); err != nil {
				errs = append(errs, fmt.Errorf("edt: removing %s from %s: %w", q.Type(), link.Attrs().Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

package qdisc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// EDTConfig configures the edt backend (see OpenEDT).
type EDTConfig struct {
	// Dev is the interface the target reaches its initiators through.
	Dev      string
	Instance string // see throttle.Options.Instance; "" names it after Dev
	// SmallSegment and SmallSegments are the ports' splits between the
	// directions (plan.DefaultSmallSegment when 0).
	SmallSegment  int
	SmallSegments map[uint16]int
	Logger        *slog.Logger
	// Linger is how long an entry no longer wanted stays at delay 0, so
	// that its flows' ramps come down as the nfqueue backend's do (0:
	// freed at once).
	Linger time.Duration
}

// DefaultEDTTTL is how long an edt delay lives without renewal: ten of the
// daemon's 100 ms ticks, so a daemon that dies or stalls stops delaying
// within a second, while one slow tick does not drop a throttle.
const DefaultEDTTTL = time.Second

// edtPath is the kernel side of the edt backend (package edt on Linux):
// one delay per initiator address and target port, expiring unless set
// again; split is the port's small-segment split.
type edtPath interface {
	Set(k edtKey, e edtEntry, ttl time.Duration) error
	Free(k edtKey) error
	// Verify reads back the qdiscs and the filter, puts back what is
	// missing and returns it; with force it attaches the filter again
	// whatever it finds.
	Verify(force bool) ([]owned.Drift, error)
	// Attach puts fq and the filter on the device; Detach removes them
	// (the program and map stay loaded).
	Attach() error
	Detach() error
	Close() error
	// Totals are the packets the classifier delayed, passed at once,
	// and gave less than the requested delay by the rise limit, for
	// every initiator since the start, and fq's backlog and drops.
	Totals() (edtTotals, error)
}

// edtTotals are the classifier's counters summed over initiators, and
// what fq holds now (backlog) and dropped since the start.
type edtTotals struct {
	held, passed, limited, bypassed uint64
	bypassers                       []packetpath.ConsumerStats // the initiators bypassed most
	backlog                         int
	dropped                         uint64
	late                            time.Duration
}

// edtKey is one delay's place: an initiator and the target port of its
// flows.
type edtKey struct {
	addr netip.Addr
	port uint16
}

func (k edtKey) String() string { return netip.AddrPortFrom(k.addr, k.port).String() }

// edtEntry is what one initiator gets on one port: delay in the
// directions dir (none when delay is 0), and, where armed is not 0, the
// write direction held at armed for a second after each write segment
// the kernel sees (see "Arming" in arm.go); each flow's delay rises by
// rise at most.
type edtEntry struct {
	dir   direction.Direction
	delay time.Duration
	split int
	armed time.Duration
	rise  packetpath.RiseLimit
	// until, when set, says the entry lingers at delay 0 until then
	// (see linger).
	until time.Time
}

// EDT is the kernel-native backend that fails open: a tc/BPF program gives
// each throttled initiator's packets a departure time and fq holds them
// (package edt). The daemon renews every entry each tick (Renew); an
// entry not renewed for TTL is ignored by the program, so the delays of a
// daemon killed or stuck end on their own, and fq keeps a flow's packets
// in order when a delay falls.
//
// It matches an initiator (IPv4 or IPv6) on each of its groups' ports,
// and splits each port's segments into write and read direction by the
// port's small-segment split, as nfqueue does. A flow's delay rises by
// the rise limit (rise, DefaultRiseLimit unless set), as nfqueue's, and
// the groups' armed consumers are held from their first write: the
// ingress program activates their entry's armed delay (see
// bpf/edt.bpf.c).
type EDT struct {
	path  edtPath
	ttl   time.Duration
	log   *slog.Logger
	ilock *owned.Lock
	mu    sync.Mutex
	cur   map[edtKey]edtEntry
	done  bool
	// small and smallDef are the small-segment splits: per port, else
	// smallDef (EDTConfig.SmallSegments, SmallSegment).
	small    map[uint16]int
	smallDef int
	// resync: the next Apply attaches the filter again (Resync).
	resync bool
	// fq and the filter are on the device only while someone is
	// delayed (issue 35): attached says they are; detach removes them
	// grace after the last delay ended (see DefaultIdleGrace).
	attached bool
	detach   *time.Timer
	grace    time.Duration
	// rise is each flow's rise limit; the zero RiseLimit turns it off.
	rise packetpath.RiseLimit
	// linger is how long an entry no longer wanted stays at delay 0
	// before it is freed, so that the flows that go on sending lower
	// their remembered ramp to 0 as nfqueue's lingering members do:
	// freed at once, a flow that keeps sending unthrottled would keep
	// the ramp of its last delay (the program sees no packet without
	// an entry) and jump back to it when throttled again within the
	// ramp's 10 s memory. A flow that pauses keeps its ramp, as a
	// returning writer should. OpenEDT sets EDTConfig.Linger; 0 frees at once.
	linger time.Duration
	now    func() time.Time
	// dropsSeen and bypassSeen are fq's drop count and the classifier's
	// bypass count at the last warning (warnLosses).
	dropsSeen, bypassSeen uint64
}

// newEDT wraps a kernel path; Open's "edt" case builds the real one.
func newEDT(path edtPath, ttl time.Duration, log *slog.Logger) *EDT {
	if ttl <= 0 {
		ttl = DefaultEDTTTL
	}
	if log == nil {
		log = slog.Default()
	}
	return &EDT{path: path, ttl: ttl, log: log.With("backend", "edt"), cur: map[edtKey]edtEntry{}, grace: DefaultIdleGrace, smallDef: plan.DefaultSmallSegment, rise: packetpath.DefaultRiseLimit, now: time.Now}
}

func (b *EDT) Name() string { return "edt" }

// want is each member's entry on each port of its groups: the longest
// delay of its groups there and the union of their directions. IPv4
// and IPv6 members alike (an IPv4-mapped one is its IPv4 address). A
// consumer a group arms gets the group's ArmedDelay on its ports too,
// used only where no delay of its own holds its writes.
func (b *EDT) want(s plan.State) map[edtKey]edtEntry {
	w := map[edtKey]edtEntry{}
	for _, g := range plan.SortedGroups(s) {
		if !g.Arms() {
			continue
		}
		for _, a := range g.Armed {
			for _, p := range g.TargetPorts() {
				k := edtKey{a.Unmap(), p}
				e := w[k]
				e.armed = max(e.armed, g.ArmedDelay)
				w[k] = e
			}
		}
	}
	for _, g := range plan.SortedGroups(s) {
		var dir direction.Direction
		delay := max(g.WriteDelay, g.ReadDelay)
		if g.WriteDelay > 0 {
			dir |= direction.Write
		}
		if g.ReadDelay > 0 {
			dir |= direction.Read
		}
		if delay <= 0 {
			continue
		}
		for _, m := range g.Members {
			for _, p := range g.TargetPorts() {
				k := edtKey{m.Unmap(), p}
				e := w[k]
				e.dir, e.delay = e.dir|dir, max(e.delay, delay)
				w[k] = e
			}
		}
	}
	for k, e := range w {
		e.split, e.rise = plan.SmallOf(b.small, b.smallDef, k.port), b.rise
		w[k] = e
	}
	return w
}

// Apply sets the entries of s (renewing them) and frees the rest. A
// lowered delay is not a reordering: the program never gives a packet a
// departure time before the one it gave its connection's last.
func (b *EDT) Apply(_ context.Context, s plan.State) error {
	if err := plan.ValidateShape(s); err != nil {
		return err
	}
	w := b.want(s)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return errors.New("edt: backend closed")
	}
	if len(w) > 0 {
		if err := b.attach(); err != nil {
			return err
		}
	}
	var errs []error
	if b.resync && b.attached {
		if _, err := b.path.Verify(true); err != nil {
			errs = append(errs, err)
		} else {
			b.resync = false
		}
	}
	for _, k := range sortedEDTKeys(w) {
		if err := b.path.Set(k, w[k], b.ttl); err != nil {
			errs = append(errs, err)
			continue
		}
		b.cur[k] = w[k]
	}
	for _, k := range sortedEDTKeys(b.cur) {
		if _, ok := w[k]; ok {
			continue
		}
		if err := b.retire(k); err != nil {
			errs = append(errs, err)
		}
	}
	if len(b.cur) == 0 {
		b.idle()
	}
	return errors.Join(errs...)
}

// retire takes k, no longer wanted, towards its end: an entry that held
// anything lingers at delay 0 for linger, one lingering past that is
// freed. b.mu held.
func (b *EDT) retire(k edtKey) error {
	e, now := b.cur[k], b.now()
	if e.until.IsZero() && b.linger > 0 {
		e = edtEntry{split: e.split, rise: e.rise, until: now.Add(b.linger)}
		if err := b.path.Set(k, e, b.ttl); err != nil {
			return err
		}
		b.cur[k] = e
		return nil
	}
	if !e.until.IsZero() && now.Before(e.until) {
		return nil // renewed by Renew
	}
	if err := b.path.Free(k); err != nil {
		return err
	}
	delete(b.cur, k)
	return nil
}

// attach puts fq and the filter on the device for a delay, and cancels
// a detach due. b.mu held.
func (b *EDT) attach() error {
	if b.detach != nil {
		b.detach.Stop()
		b.detach = nil
	}
	if b.attached {
		return nil
	}
	if err := b.path.Attach(); err != nil {
		return err
	}
	b.attached, b.resync = true, false
	return nil
}

// idle schedules removing fq and the filter grace from now, when nobody
// is delayed then: removing fq drops what it holds, so the packets given
// a departure time must have left. b.mu held.
func (b *EDT) idle() {
	if !b.attached || b.detach != nil {
		return
	}
	var tm *time.Timer
	tm = time.AfterFunc(b.grace, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.done || b.detach != tm || len(b.cur) > 0 {
			return
		}
		b.detach = nil
		if err := b.path.Detach(); err != nil {
			b.log.Error("removing the idle edt path; the next throttle puts it back", "err", err)
			return
		}
		b.attached = false
	})
	b.detach = tm
}

// Renew sets every entry in force again with a fresh TTL.
func (b *EDT) Renew(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	var errs []error
	now := b.now()
	for _, k := range sortedEDTKeys(b.cur) {
		e := b.cur[k]
		if !e.until.IsZero() && !now.Before(e.until) {
			if err := b.retire(k); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := b.path.Set(k, e, b.ttl); err != nil {
			errs = append(errs, err)
		}
	}
	if len(b.cur) == 0 {
		b.idle()
	}
	return errors.Join(errs...)
}

// Verify reads back fq, clsact and the filter running our program (see
// package edt) and puts back at once what someone removed or replaced: a
// `tc qdisc del` of either qdisc ends every delay, and nothing else would
// bring them back while the daemon runs. The entries need no repair:
// they live in our map, which the program holds, and the daemon renews
// them every tick.
func (b *EDT) Verify(context.Context) ([]owned.Drift, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || !b.attached {
		// While nobody is delayed nothing of ours is on the device.
		return nil, nil
	}
	out, err := b.path.Verify(false)
	b.warnLosses()
	if err != nil {
		return out, fmt.Errorf("verifying the edt data path: %w", err)
	}
	return out, nil
}

// warnLosses logs, since the last look, the packets fq dropped (sanqos
// sets fq's limits so that it never should, see edt.FqLimit) and those
// the classifier passed undelayed because it held its limit of packets
// (edt.HeldLimit): each is news to the administrator. b.mu held.
func (b *EDT) warnLosses() {
	t, err := b.path.Totals()
	if err != nil {
		return
	}
	if t.dropped > b.dropsSeen {
		b.log.Warn("fq dropped packets on the delay path: a backlog past its limits, or fq's limits changed by someone else (sanqos puts them back)",
			"dropped", t.dropped-b.dropsSeen, "since_start", t.dropped, "backlog", t.backlog)
		b.dropsSeen = t.dropped
	}
	if t.bypassed > b.bypassSeen {
		b.log.Warn("the delay path passed packets of throttled consumers undelayed: it held as many packets as it may (fail open rather than have fq drop them); fewer consumers or smaller delays hold fewer",
			"bypassed", t.bypassed-b.bypassSeen, "since_start", t.bypassed, "backlog", t.backlog)
		b.bypassSeen = t.bypassed
	}
}

// Resync has the next Apply attach the filter again whatever Verify
// finds (see Verifier); it sets every entry anyway.
func (b *EDT) Resync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resync = true
}

// Stats are the classifier's counters: the packets it gave a departure
// time (PacketsHeld) and those to a delayed initiator it passed at once
// (PacketsPassed: another direction, an armed consumer not writing, an
// entry expired, or Bypassed: edt.HeldLimit packets held, Bypassers
// naming whose); and fq's: the packets it holds (Backlog, every packet
// on the device, ours most), those it dropped (Dropped) and how late it
// releases held flows on average (DelayErrorAvg: fq keeps no hold times,
// so there is no p50 or max).
func (b *EDT) Stats() plan.Stats {
	t := b.totals()
	return plan.Stats{PacketsHeld: t.held, PacketsPassed: t.passed, Bypassed: t.bypassed, Bypassers: t.bypassers,
		Backlog: t.backlog, Dropped: t.dropped, DelayErrorAvg: t.late}
}

// RiseStats are the rise limit's counters: Limited sums, over
// initiators, the packets the classifier gave less than the requested
// delay. The ramps themselves are the kernel's (an LRU map), so Flows
// and the shortfalls are not counted.
func (b *EDT) RiseStats() packetpath.RiseStats {
	return packetpath.RiseStats{Limited: b.totals().limited}
}

func (b *EDT) totals() edtTotals {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return edtTotals{}
	}
	t, err := b.path.Totals()
	if err != nil {
		b.log.Debug("reading the edt counters", "err", err)
	}
	return t
}

// Close frees every entry and removes the program and fq.
func (b *EDT) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	if b.detach != nil {
		b.detach.Stop()
		b.detach = nil
	}
	err := b.path.Close()
	b.cur = nil
	if b.ilock != nil {
		b.ilock.Release()
	}
	return err
}

// sortedAddrs are m's addresses in order (the other backends use it).
func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return out
}

// sortedEDTKeys are m's keys in order: by address, then port.
func sortedEDTKeys[V any](m map[edtKey]V) []edtKey {
	out := make([]edtKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y edtKey) int {
		if c := x.addr.Compare(y.addr); c != 0 {
			return c
		}
		return int(x.port) - int(y.port)
	})
	return out
}

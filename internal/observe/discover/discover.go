// Package discover finds what sanqos controls on a storage target: which
// initiators (by IP address) use which LUNs, and which shared resource each
// LUN's block device lands on. Adapters read the target's configuration
// (tgt through tgtadm, LIO through configfs, the clients of a port from
// the kernel's socket table, or a static list); the
// topology resolver walks each backing store down to the devices it
// shares.
package discover

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// Attachment is one initiator address using one LUN, as a target
// reports it, before the backing store is resolved.
type Attachment struct {
	Target string     // target IQN
	IQN    string     // initiator IQN, where known
	Addr   netip.Addr // initiator address
	// Backing is the LUN's backing store as configured: a block device
	// path, a kernel device name, or an image file.
	Backing string
	// Resource names the resource outright (static adapter); empty means
	// derive it from the backing store.
	Resource string
}

// attachAll lists every address of every session of one target as using
// every backing store of that target: iSCSI gives a session all the
// target's LUNs. Both target adapters report their sessions this way.
func attachAll(target string, sessions []session, backings []string) []Attachment {
	var out []Attachment
	for _, s := range sessions {
		for _, a := range s.addrs {
			for _, b := range backings {
				out = append(out, Attachment{Target: target, IQN: s.iqn, Addr: a, Backing: b})
			}
		}
	}
	return out
}

// session is one initiator's session as attachAll needs it.
type session struct {
	iqn   string
	addrs []netip.Addr
}

// Adapter reads a target's configuration and live sessions.
type Adapter interface {
	// Name is the adapter's name for logs ("tgt", "lio", "static").
	Name() string
	// Attachments lists who uses what now.
	Attachments(ctx context.Context) ([]Attachment, error)
}

// Resolver maps a backing store to its device and leaves;
// *topology.Resolver is the real one.
type Resolver interface {
	Resolve(backing string) (topology.Resolution, error)
}

// Discoverer turns an adapter's attachments into a topology. It is meant
// for one discovery loop: Discover is not safe for concurrent use.
type Discoverer struct {
	adapter  Adapter
	resolver Resolver
	log      *slog.Logger
	// reported remembers backing stores already logged as unresolvable,
	// so a daemon rediscovering every few seconds says it once.
	reported map[string]string
	// unresolved are the backing stores the last Discover left out; the
	// log says so once, this keeps it visible in /status and /metrics.
	unresolved []string
}

// New returns a Discoverer reading adapter and resolving with resolver.
func New(adapter Adapter, resolver Resolver, logger *slog.Logger) *Discoverer {
	if logger == nil {
		logger = slog.Default()
	}
	return &Discoverer{
		adapter:  adapter,
		resolver: resolver,
		log:      logger.With("adapter", adapter.Name()),
		reported: map[string]string{},
	}
}

// Discover returns the current topology. An adapter failure is an error
// (the caller keeps its last good topology); a LUN whose backing store
// cannot be resolved is logged once and left out.
func (d *Discoverer) Discover(ctx context.Context) (topology.Topology, error) {
	atts, err := d.adapter.Attachments(ctx)
	if err != nil {
		return topology.Topology{}, fmt.Errorf("discovering with %s: %w", d.adapter.Name(), err)
	}
	cache := map[string]topology.Resolution{}
	failed := map[string]bool{}
	d.unresolved = d.unresolved[:0]
	seen := map[string]int{}
	var items []topology.Placed
	for _, a := range atts {
		res, ok := cache[a.Backing]
		if !ok && !failed[a.Backing] {
			r, err := d.resolver.Resolve(a.Backing)
			if err != nil {
				failed[a.Backing] = true
				d.unresolved = append(d.unresolved, a.Backing)
				if d.reported[a.Backing] != err.Error() {
					d.reported[a.Backing] = err.Error()
					d.log.Warn("skipping LUN whose device cannot be resolved", "target", a.Target, "backing", a.Backing, "err", err)
				}
			} else {
				delete(d.reported, a.Backing)
				cache[a.Backing], res, ok = r, r, true
			}
		}
		if !ok {
			continue
		}
		// One consumer per (address, device): several sessions of one
		// initiator to one LUN (one per thread, or per connection) are
		// one thing to measure and throttle.
		key := a.Addr.String() + "|" + res.Device
		if i, ok := seen[key]; ok {
			c := &items[i].Consumer
			if a.IQN != "" && !slices.Contains(c.IQNs, a.IQN) {
				c.IQNs = append(c.IQNs, a.IQN)
				slices.Sort(c.IQNs)
			}
			continue
		}
		seen[key] = len(items)
		var iqns []string
		if a.IQN != "" {
			iqns = []string{a.IQN}
		}
		items = append(items, topology.Placed{
			Consumer: topology.Consumer{
				Addr: a.Addr, IQNs: iqns, Target: a.Target,
				Device: res.Device, Backing: a.Backing,
			},
			Resolution: res,
			Resource:   a.Resource,
		})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].Consumer.Backing < items[j].Consumer.Backing })
	return topology.Group(items), nil
}

// Unresolved returns the backing stores the last Discover left out because
// their device could not be resolved, sorted; their initiators are not
// measured or throttled until that is fixed.
func (d *Discoverer) Unresolved() []string {
	out := slices.Clone(d.unresolved)
	slices.Sort(out)
	return out
}

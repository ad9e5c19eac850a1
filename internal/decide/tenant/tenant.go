// Package tenant is what one consumer is promised and allowed beyond the
// resource's one threshold: a name, its own read promise, a share among
// the writers, a reserved minimum write rate and a cap — what SIOC,
// mClock and SolidFire offer per client, held here at the target.
//
// A Book maps consumers to Terms. It is built once from the
// configuration (each [[tenants.consumer]] entry matches consumers by
// address, prefix or initiator name and may inherit a [tenants.class])
// and is replaced whole at reload; the engine asks it for a consumer's
// Terms each tick, so a changed book takes effect on the next tick
// without dropping what is in force.
package tenant

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// Terms are one consumer's promises and limits. The zero value is the
// default: no name, share 1, no reservation, no cap, the resource's
// threshold.
type Terms struct {
	// Name is how the operator calls the consumer (status, metrics);
	// "" means unnamed (shown by address or initiator name).
	Name string `json:"name,omitempty"`
	// Class is the class the terms came from, "" for none.
	Class string `json:"class,omitempty"`
	// Share weighs the consumer's write rate against the other writers
	// of a throttled resource: rates split in proportion to shares.
	// 0 means 1.
	Share float64 `json:"share,omitempty"`
	// ReserveBps is a write rate (bytes/s) the consumer is never
	// delayed below; 0 for none.
	ReserveBps float64 `json:"reserve_bps,omitempty"`
	// CapBps caps the consumer's write rate (bytes/s) whatever the
	// latency; 0 for none. BurstBytes lets it run above the cap until
	// that many bytes over it are spent (a token bucket refilled at
	// CapBps).
	CapBps     float64 `json:"cap_bps,omitempty"`
	BurstBytes float64 `json:"burst_bytes,omitempty"`
	// ReadCapBps caps the rate the target sends the consumer (reads),
	// with the rate backend; 0 for none.
	ReadCapBps float64 `json:"read_cap_bps,omitempty"`
	// ThresholdMs is the consumer's own read promise (ms); a resource
	// holds the strictest one among its readers active in the last
	// few seconds. 0: the resource's threshold.
	ThresholdMs float64 `json:"threshold_ms,omitempty"`
}

// EffectiveShare is Share, or 1 when unset.
func (t Terms) EffectiveShare() float64 {
	if t.Share <= 0 {
		return 1
	}
	return t.Share
}

// Limited reports whether the terms ask anything of the controller
// beyond the defaults (a name alone does not).
func (t Terms) Limited() bool {
	return t.Share > 0 && t.Share != 1 || t.ReserveBps > 0 || t.CapBps > 0 || t.ReadCapBps > 0 || t.ThresholdMs > 0
}

// Precedence decides which promise wins when a resource cannot keep its
// readers' threshold without delaying a reserved writer below its
// reservation.
type Precedence string

const (
	// PromiseWins delays a reserved writer below its reservation when
	// the read promise needs it (the default): the reservation holds
	// only while the resource is healthy enough to afford it.
	PromiseWins Precedence = "promise"
	// ReservationWins never delays a reserved writer below its
	// reservation; the read promise is broken instead.
	ReservationWins Precedence = "reservation"
)

// Entry matches consumers and gives them Terms.
type Entry struct {
	// Match lists what selects a consumer: an IP address ("10.0.0.5"),
	// a prefix ("10.0.1.0/24") or an initiator name (an IQN, or an NFS
	// client's name as discovery reports it). A consumer matches the
	// entry when any element matches it.
	Match []string
	Terms Terms
}

// Book maps consumers to their Terms. The zero Book (and nil) gives
// every consumer the default terms.
type Book struct {
	entries    []compiled
	precedence Precedence
	// over are runtime terms ('sanqos throttle'), laid over the
	// entries' (see Over).
	over []compiledOverride
}

type compiled struct {
	addrs    []netip.Prefix
	names    []string
	terms    Terms
	position int
}

// New compiles entries into a Book. The first entry that matches a
// consumer gives its terms; a consumer no entry matches gets the
// defaults. precedence "" is PromiseWins.
func New(entries []Entry, precedence Precedence) (*Book, error) {
	switch precedence {
	case "":
		precedence = PromiseWins
	case PromiseWins, ReservationWins:
	default:
		return nil, fielderr.New("tenant.Book.Precedence", "conflict", string(precedence), `must be "promise" or "reservation"`)
	}
	b := &Book{precedence: precedence}
	named := map[string]bool{}
	for i, e := range entries {
		c, err := compile(i, e)
		if err != nil {
			return nil, err
		}
		// A name is a consumer's label in status and metrics and the
		// handle 'sanqos throttle' takes: two entries may not share it.
		if n := e.Terms.Name; n != "" {
			if named[n] {
				return nil, fielderr.At("tenant.Terms.Name", "name", n, n, "names another entry too; give each consumer its own name")
			}
			named[n] = true
		}
		b.entries = append(b.entries, c)
	}
	return b, nil
}

func compile(i int, e Entry) (compiled, error) {
	key := fmt.Sprint(i)
	if e.Terms.Name != "" {
		key = e.Terms.Name
	}
	c := compiled{terms: e.Terms, position: i}
	if len(e.Match) == 0 {
		return c, fielderr.At("tenant.Entry.Match", "match", key, e.Match, "must name at least one address, prefix or initiator name")
	}
	for _, m := range e.Match {
		m = strings.TrimSpace(m)
		if p, err := netip.ParsePrefix(m); err == nil {
			c.addrs = append(c.addrs, p.Masked())
		} else if a, err := netip.ParseAddr(m); err == nil {
			c.addrs = append(c.addrs, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else if m != "" && !strings.ContainsAny(m, " \t") {
			c.names = append(c.names, m)
		} else {
			return c, fielderr.At("tenant.Entry.Match", "match", key, m, "must be an IP address, a prefix (10.0.1.0/24) or an initiator name")
		}
	}
	t := e.Terms
	for _, f := range []struct {
		field, name string
		v           float64
	}{
		{"Share", "share", t.Share}, {"ReserveBps", "reserve", t.ReserveBps},
		{"CapBps", "cap", t.CapBps}, {"BurstBytes", "burst", t.BurstBytes},
		{"ReadCapBps", "read_cap", t.ReadCapBps}, {"ThresholdMs", "threshold", t.ThresholdMs},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return c, fielderr.At("tenant.Terms."+f.field, f.name, key, f.v, "must be a finite number, not negative")
		}
	}
	if err := bounds(key, t); err != nil {
		return c, err
	}
	if t.CapBps > 0 && t.ReserveBps > t.CapBps {
		return c, fielderr.At("tenant.Terms.ReserveBps", "reserve", key, t.ReserveBps, "must not exceed the cap")
	}
	if t.BurstBytes > 0 && t.CapBps == 0 {
		return c, fielderr.At("tenant.Terms.BurstBytes", "burst", key, t.BurstBytes, "needs a cap")
	}
	return c, nil
}

// Precedence is the book's rule for a reservation that conflicts with a
// read promise.
func (b *Book) Precedence() Precedence {
	if b == nil || b.precedence == "" {
		return PromiseWins
	}
	return b.precedence
}

// Terms returns consumer c's terms: the first entry that matches its
// address or one of its initiator names, else the defaults.
func (b *Book) Terms(c topology.Consumer) Terms {
	if b == nil {
		return Terms{}
	}
	t := Terms{}
	for _, e := range b.entries {
		if e.matches(c) {
			t = e.terms
			break
		}
	}
	for _, o := range b.over {
		if o.matches(c) || o.name != "" && o.name == t.Name {
			return o.apply(t)
		}
	}
	return t
}

// matches reports whether c's address or one of its initiator names is
// one of e's.
func (e compiled) matches(c topology.Consumer) bool {
	a := c.Addr.Unmap()
	for _, p := range e.addrs {
		if a.IsValid() && p.Contains(a) {
			return true
		}
	}
	for _, n := range e.names {
		if slices.Contains(c.IQNs, n) {
			return true
		}
	}
	return false
}

// Len is the number of entries.
func (b *Book) Len() int {
	if b == nil {
		return 0
	}
	return len(b.entries)
}

// Label is how status and metrics name consumer c: its terms' name, else
// its first initiator name, else its address.
func Label(c topology.Consumer, t Terms) string {
	switch {
	case t.Name != "":
		return t.Name
	case len(c.IQNs) > 0:
		return c.IQNs[0]
	default:
		return c.Addr.String()
	}
}

// MaxThresholdMs and MinThresholdMs bound a consumer's own read promise,
// as the engine bounds a resource's threshold.
const (
	MinThresholdMs = 0.1
	MaxThresholdMs = 10000
)

// bounds checks what no term may exceed, wherever the terms come from.
func bounds(key string, t Terms) error {
	if t.Share > 1000 {
		return fielderr.At("tenant.Terms.Share", "share", key, t.Share, "must be at most 1000")
	}
	if t.ThresholdMs != 0 && (t.ThresholdMs < MinThresholdMs || t.ThresholdMs > MaxThresholdMs) {
		return fielderr.At("tenant.Terms.ThresholdMs", "threshold", key, t.ThresholdMs, "must be between 100µs and 10s")
	}
	return nil
}

// String is the terms compactly, as status and check show them: only
// what differs from the defaults ("share 4, reserve 20MB/s, cap
// 50MB/s, threshold 8ms"), "defaults" when nothing does.
func (t Terms) String() string {
	var parts []string
	if t.Share > 0 && t.Share != 1 {
		parts = append(parts, "share "+strconv.FormatFloat(t.Share, 'g', -1, 64))
	}
	for _, r := range []struct {
		name string
		v    float64
		unit string
	}{
		{"reserve", t.ReserveBps, "B/s"}, {"cap", t.CapBps, "B/s"}, {"burst", t.BurstBytes, "B"},
		{"read cap", t.ReadCapBps, "B/s"},
	} {
		if r.v > 0 {
			parts = append(parts, r.name+" "+si(r.v)+r.unit)
		}
	}
	if t.ThresholdMs > 0 {
		parts = append(parts, "threshold "+strconv.FormatFloat(t.ThresholdMs, 'g', -1, 64)+"ms")
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

// si writes v with an SI prefix (k, M, G: powers of 1000, as the
// configuration's kB and MB).
func si(v float64) string {
	for _, p := range []struct {
		prefix string
		mult   float64
	}{{"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if v >= p.mult {
			return strconv.FormatFloat(math.Round(v/p.mult*100)/100, 'g', -1, 64) + p.prefix
		}
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'g', -1, 64)
}

// Package ctl is the control socket of a running sanqos daemon: a
// root-only unix socket speaking JSON lines (one request, one response per
// line), served by 'sanqos run' and used by 'sanqos throttle' (and, as
// root, by 'sanqos status' and 'sanqos top'). Manual mode
// and the autonomic daemon serve the same protocol, so the same client
// lists and overrides throttles in either.
package ctl

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/decide/tenant"
)

// DefaultSocket is where the daemon listens unless told otherwise.
const DefaultSocket = "/run/sanqos/sanqos.sock"

// MaxDelay is the largest delay accepted. Beyond a second iSCSI commands
// start to time out, so a larger value is surely a typo (ms vs s).
const MaxDelay = time.Second

// Operations.
const (
	OpThrottle = "throttle" // set a manual delay for one initiator
	OpFree     = "free"     // remove an initiator's manual delay
	OpList     = "list"     // list throttles in force
	OpStatus   = "status"   // list plus backend counters
	// OpFullStatus asks the autonomic daemon for the document its HTTP
	// listener serves at /status (Response.Status), for 'sanqos status'
	// and 'sanqos top' run as root: the HTTP listener is open to every
	// local user, who can crowd it, while this socket is root's.
	OpFullStatus = "full-status"
)

// Request is one line from a client.
type Request struct {
	Op        string   `json:"op"`
	IP        string   `json:"ip,omitempty"`
	Delay     string   `json:"delay,omitempty"`     // Go duration, e.g. "4.6ms"
	Rate      string   `json:"rate,omitempty"`      // read rate cap, e.g. "10MB/s"
	Direction string   `json:"direction,omitempty"` // write, read or both
	Ports     []uint16 `json:"ports,omitempty"`     // target ports; default 3260
	// Terms are OpTerms's and OpClearTerms's (terms.go).
	TermsRequest
}

// Throttle is one throttle in force.
type Throttle struct {
	IP        string   `json:"ip"`
	Delay     string   `json:"delay"`
	Rate      string   `json:"rate,omitempty"` // a read rate cap instead of a delay
	Direction string   `json:"direction"`
	Ports     []uint16 `json:"ports"`
	// Source is "manual", "config" (a read rate of the configuration) or
	// the resource whose controller set it.
	Source string `json:"source"`
}

// Response is the daemon's answer to one request.
type Response struct {
	OK        bool            `json:"ok"`
	Error     string          `json:"error,omitempty"`
	Mode      string          `json:"mode,omitempty"` // manual or autonomic
	Backend   string          `json:"backend,omitempty"`
	Throttles []Throttle      `json:"throttles,omitempty"`
	Stats     *throttle.Stats `json:"stats,omitempty"`
	// Status is the /status document (status.Status) for OpFullStatus,
	// left encoded so that this package need not know its shape.
	Status json.RawMessage `json:"status,omitempty"`
	// Terms are the runtime tenant terms in force (terms.go).
	Terms []TermsOverride `json:"terms,omitempty"`
}

// Manual is a manual throttle after validation.
//
// A consumer has one manual throttle: a delay (Delay > 0) or a cap on
// the rate the target sends it, its reads (Rate > 0), never both. A
// delay and an HTB class on one flow would hold its packets twice, in
// two queues that know nothing of each other; one kind at a time keeps
// what the list says equal to what a packet meets.
type Manual struct {
	IP        netip.Addr
	Delay     time.Duration
	Rate      uint64 // bytes per second
	Direction throttle.Direction
	Ports     []uint16
	// Source is "manual" (the control socket) or "config".
	Source string
}

// Kind names the manual throttle's kind for messages.
func (m Manual) Kind() string {
	if m.Rate > 0 {
		return "read rate " + throttle.FormatRate(m.Rate)
	}
	return m.Direction.String() + " delay " + m.Delay.String()
}

// ParseManual validates a throttle request; its errors say what to fix.
func ParseManual(r Request) (Manual, error) {
	m := Manual{Source: "manual"}
	a, err := netip.ParseAddr(r.IP)
	if err != nil || a.Zone() != "" || a.IsUnspecified() {
		return m, fmt.Errorf("--ip %q is not an IP address (like 10.0.0.3 or fd00::3)", r.IP)
	}
	m.IP = a.Unmap()
	if err := parseAmount(&m, r); err != nil {
		return m, err
	}
	m.Ports = slices.Clone(r.Ports)
	if len(m.Ports) == 0 {
		m.Ports = slices.Clone(throttle.DefaultPorts)
	}
	for _, p := range m.Ports {
		if p == 0 {
			return m, fmt.Errorf("--port 0 is not a TCP port")
		}
	}
	// A list the kernel's rule cannot take would be accepted here and
	// then fail at every apply: refuse it where it is given.
	if err := throttle.ValidatePorts(m.Ports); err != nil {
		return m, fmt.Errorf("--port: %w", err)
	}
	slices.Sort(m.Ports)
	m.Ports = slices.Compact(m.Ports)
	return m, nil
}

// parseAmount reads the request's delay or rate and its direction: a
// delay slows writes unless told otherwise, a rate caps reads only.
func parseAmount(m *Manual, r Request) error {
	var err error
	switch {
	case r.Delay != "" && r.Rate != "":
		return fmt.Errorf("give --delay or --rate, not both: a consumer is throttled by one of them at a time")
	case r.Rate != "":
		if m.Rate, err = throttle.ParseRate(r.Rate); err != nil {
			return fmt.Errorf("--rate: %w", err)
		}
		if r.Direction != "" && r.Direction != "read" {
			return fmt.Errorf("--rate caps reads only (the data the target sends): use --direction read, or slow writes with --delay")
		}
		m.Direction = throttle.Read
		return nil
	}
	d, err := time.ParseDuration(r.Delay)
	if err != nil {
		return fmt.Errorf("--delay %q is not a duration (like 4.6ms)", r.Delay)
	}
	if d <= 0 || d > MaxDelay {
		return fmt.Errorf("--delay %v is out of range: give more than 0 and at most %v (use --free to remove a throttle)", d, MaxDelay)
	}
	m.Delay = d
	if r.Direction == "" {
		r.Direction = "write"
	}
	if m.Direction, err = throttle.ParseDirection(r.Direction); err != nil {
		return fmt.Errorf("--direction: %w", err)
	}
	return nil
}

// Check refuses m where the backend b would not apply it, or where it
// would change the kind of the consumer's throttle in force (prev, when
// had), and a rate above the link of the backend's rate interface (sysfs
// under sys; "/sys" outside tests).
func Check(m Manual, prev Manual, had bool, b throttle.Backend, sys string) error {
	if sys == "" {
		sys = "/sys"
	}
	k := throttle.KindsOf(b)
	switch {
	case m.Rate > 0 && !k.Rate:
		return fmt.Errorf("the %s backend does not cap rates: start the daemon with --rate-dev IFACE (the interface towards the initiators) to throttle reads by rate", b.Name())
	case m.Rate == 0 && !k.Delay:
		return fmt.Errorf("the %s backend caps read rates only: give --rate, or run a delay backend (nfqueue, netem) with --rate-dev for both", b.Name())
	case had && (prev.Rate > 0) != (m.Rate > 0):
		return fmt.Errorf("%s already has a manual %s; a consumer is throttled by a delay or a rate, not both: free it first ('sanqos throttle --ip %s --free')", m.IP, prev.Kind(), m.IP)
	}
	if dev := rateDev(b); m.Rate > 0 && dev != "" {
		if link, ok := throttle.LinkRate(sys, dev); ok && m.Rate > link {
			return fmt.Errorf("--rate %s is above %s's link speed (%s): it would cap nothing; give a lower rate", throttle.FormatRate(m.Rate), dev, throttle.FormatRate(link))
		}
	}
	return nil
}

// rateDev is the interface b caps rates on, "" when it has none.
func rateDev(b throttle.Backend) string {
	switch b := b.(type) {
	case *throttle.HTB:
		return b.Dev()
	case *throttle.Composite:
		return b.Rate.Dev()
	}
	return ""
}

// Overrides is the table of manual throttles, safe for concurrent use. The
// manual daemon applies Groups as its whole state; the autonomic daemon
// can merge them into the controller's state.
type Overrides struct {
	mu sync.Mutex
	m  map[netip.Addr]Manual
	// terms are the runtime tenant terms (terms.go), termsVersion
	// counts their changes.
	terms        []tenant.Override
	termsVersion uint64
}

// Set adds or replaces the manual throttle of m.IP.
func (o *Overrides) Set(m Manual) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[netip.Addr]Manual{}
	}
	o.m[m.IP] = m
}

// Free removes ip's manual throttle and reports whether there was one.
func (o *Overrides) Free(ip netip.Addr) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.m[ip]
	delete(o.m, ip)
	return ok
}

// Get returns ip's manual throttle.
func (o *Overrides) Get(ip netip.Addr) (Manual, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m, ok := o.m[ip]
	return m, ok
}

// SetReadRates adds the configuration's read rates (manual.read_rates:
// address → rate, validated by the config loader) on ports, as standing
// manual throttles whose source is "config".
func (o *Overrides) SetReadRates(rates map[string]string, ports []uint16) error {
	for ip, r := range rates {
		m, err := ParseManual(Request{IP: ip, Rate: r, Direction: "read", Ports: ports})
		if err != nil {
			return fmt.Errorf("manual.read_rates.%q: %w", ip, err)
		}
		m.Source = "config"
		o.Set(m)
	}
	return nil
}

// Restore puts back ip's previous throttle (or none) after a failed apply.
func (o *Overrides) Restore(ip netip.Addr, prev Manual, had bool) {
	if had {
		o.Set(prev)
	} else {
		o.Free(ip)
	}
}

func (o *Overrides) sorted() []Manual {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Manual, 0, len(o.m))
	for _, m := range o.m {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Manual) int { return a.IP.Compare(b.IP) })
	return out
}

// GroupName is the throttle group of a manual throttle: one per initiator,
// so that freeing one never disturbs another.
func GroupName(ip netip.Addr) string { return "manual-" + ip.String() }

// Groups renders the manual throttles as throttle groups.
func (o *Overrides) Groups() []throttle.Group {
	var gs []throttle.Group
	for _, m := range o.sorted() {
		g := throttle.Group{Name: GroupName(m.IP), Members: []netip.Addr{m.IP}, Ports: m.Ports}
		switch {
		case m.Rate > 0:
			g.ReadRate = m.Rate
		default:
			if m.Direction&throttle.Write != 0 {
				g.WriteDelay = m.Delay
			}
			if m.Direction&throttle.Read != 0 {
				g.ReadDelay = m.Delay
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// List renders the manual throttles for a response.
func (o *Overrides) List() []Throttle {
	var ts []Throttle
	for _, m := range o.sorted() {
		t := Throttle{IP: m.IP.String(), Direction: m.Direction.String(), Ports: m.Ports, Source: m.Source}
		if m.Rate > 0 {
			t.Rate = throttle.FormatRate(m.Rate)
		} else {
			t.Delay = m.Delay.String()
		}
		if t.Source == "" {
			t.Source = "manual"
		}
		ts = append(ts, t)
	}
	return ts
}

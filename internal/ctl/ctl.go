// Package ctl is the control socket of a running sanqos daemon: a
// root-only unix socket speaking JSON lines (one request, one response per
// line), served by 'sanqos run' and used by 'sanqos throttle'. Manual mode
// and the autonomic daemon serve the same protocol, so the same client
// lists and overrides throttles in either.
package ctl

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/throttle"
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
)

// Request is one line from a client.
type Request struct {
	Op        string   `json:"op"`
	IP        string   `json:"ip,omitempty"`
	Delay     string   `json:"delay,omitempty"`     // Go duration, e.g. "4.6ms"
	Direction string   `json:"direction,omitempty"` // write, read or both
	Ports     []uint16 `json:"ports,omitempty"`     // target ports; default 3260
}

// Throttle is one throttle in force.
type Throttle struct {
	IP        string   `json:"ip"`
	Delay     string   `json:"delay"`
	Direction string   `json:"direction"`
	Ports     []uint16 `json:"ports"`
	// Source is "manual" or the resource whose controller set it.
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
}

// Manual is a manual throttle after validation.
type Manual struct {
	IP        netip.Addr
	Delay     time.Duration
	Direction throttle.Direction
	Ports     []uint16
}

// ParseManual validates a throttle request; its errors say what to fix.
func ParseManual(r Request) (Manual, error) {
	var m Manual
	a, err := netip.ParseAddr(r.IP)
	if err != nil || a.Zone() != "" || a.IsUnspecified() {
		return m, fmt.Errorf("--ip %q is not an IP address (like 10.0.0.3 or fd00::3)", r.IP)
	}
	m.IP = a.Unmap()
	d, err := time.ParseDuration(r.Delay)
	if err != nil {
		return m, fmt.Errorf("--delay %q is not a duration (like 4.6ms)", r.Delay)
	}
	if d <= 0 || d > MaxDelay {
		return m, fmt.Errorf("--delay %v is out of range: give more than 0 and at most %v (use --free to remove a throttle)", d, MaxDelay)
	}
	m.Delay = d
	if r.Direction == "" {
		r.Direction = "write"
	}
	if m.Direction, err = throttle.ParseDirection(r.Direction); err != nil {
		return m, fmt.Errorf("--direction: %w", err)
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

// Overrides is the table of manual throttles, safe for concurrent use. The
// manual daemon applies Groups as its whole state; the autonomic daemon
// can merge them into the controller's state.
type Overrides struct {
	mu sync.Mutex
	m  map[netip.Addr]Manual
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
		if m.Direction&throttle.Write != 0 {
			g.WriteDelay = m.Delay
		}
		if m.Direction&throttle.Read != 0 {
			g.ReadDelay = m.Delay
		}
		gs = append(gs, g)
	}
	return gs
}

// List renders the manual throttles for a response.
func (o *Overrides) List() []Throttle {
	var ts []Throttle
	for _, m := range o.sorted() {
		ts = append(ts, Throttle{IP: m.IP.String(), Delay: m.Delay.String(), Direction: m.Direction.String(), Ports: m.Ports, Source: "manual"})
	}
	return ts
}

package config

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks the keys no other package owns: the daemon's own
// (probe, discovery, static consumers, attribution, listen, socket,
// record) and what ties keys together (a small_segment of a configured
// port, read rates by address); the first bad one is reported. The
// values that configure the engine, the controller, the policy and the
// data path are checked by those packages, once, with their bounds:
// the daemon maps this configuration onto theirs and names the key of
// any field they refuse (KeyError).
func (c *Config) Validate() error {
	for _, check := range c.checks() {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) checks() []func() error {
	bad, durIn, oneOf := c.bad, c.durIn, c.oneOf
	return []func() error{
		func() error { return oneOf("probe", c.Probe, "auto", "off") },
		func() error {
			if c.Headroom.Auto {
				// The measured headroom was removed (docs/ablation.md).
				return bad("headroom", "auto", "is no longer offered: give a fraction >= 0 and < 0.5 (0.25 for NFS)")
			}
			return nil
		},
		func() error {
			if len(c.Ports) == 0 {
				return bad("ports", "[]", "must list at least one TCP port, like [3260]")
			}
			return nil
		},
		func() error { return oneOf("discovery.adapter", c.Discovery.Adapter, "tgt", "lio", "static", "socket") },
		c.validateWire,
		func() error {
			return durIn("discovery.interval", c.Discovery.Interval, 100*time.Millisecond, time.Hour)
		},
		func() error {
			if p := c.Discovery.TgtControlPort; p < 0 || p > 65535 {
				return bad("discovery.tgt_control_port", p, "must be between 0 (tgtadm's default) and 65535")
			}
			return nil
		},
		func() error {
			if !filepath.IsAbs(c.Discovery.LIORoot) {
				return bad("discovery.lio_root", strconv.Quote(c.Discovery.LIORoot), "must be an absolute path, like /sys/kernel/config/target")
			}
			return nil
		},
		c.validateStatic,
		c.validateReadRates,
		c.validateListen,
		func() error {
			// "" is refused: binding a unix socket to an empty path makes
			// the kernel autobind an abstract socket nobody can find, and
			// the socket is also what keeps two daemons apart.
			if !filepath.IsAbs(c.Socket) {
				return bad("socket", strconv.Quote(c.Socket), `must be an absolute path, like /run/sanqos/sanqos.sock (the control socket cannot be turned off)`)
			}
			return nil
		},
		func() error {
			if c.RecordMaxSize < 1<<20 || c.RecordMaxSize > 64<<30 {
				return bad("record_max_size", c.RecordMaxSize, "must be between 1MiB and 64GiB (the record is rotated once at this size)")
			}
			return nil
		},
	}
}

func (c *Config) validateListen() error {
	if c.Listen == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return c.bad("listen", strconv.Quote(c.Listen), `must be HOST:PORT like "127.0.0.1:9469", or "" to disable`)
	}
	// What looks like an address must be one: "999.1.1.1" was taken for
	// a host name, which never resolved, and the listener was retried in
	// the background for ever.
	if looksLikeAddr(host) {
		if _, err := netip.ParseAddr(host); err != nil {
			return c.bad("listen", strconv.Quote(c.Listen), fmt.Sprintf(`has %q, which is not an IP address (an IPv4 address is four numbers from 0 to 255, like "127.0.0.1:9469")`, host))
		}
	}
	return nil
}

// KeyError is the error of key's value val, rule saying what is wanted,
// naming the flag that set the key if one did: for the daemon to report
// a value an owner refused in the key the user wrote.
func (c *Config) KeyError(key string, val any, rule string) error { return c.bad(key, val, rule) }

// bad is the error of key's value val, naming the flag that set it.
func (c *Config) bad(key string, val any, rule string) error {
	if f, ok := c.origin[key]; ok {
		key = f + " (" + key + ")"
	}
	return fmt.Errorf("%s = %v: %s", key, val, rule)
}

func (c *Config) durIn(key string, d Duration, lo, hi time.Duration) error {
	if d.Duration < lo || d.Duration > hi {
		return c.bad(key, d, fmt.Sprintf("must be between %v and %v", lo, hi))
	}
	return nil
}

func (c *Config) oneOf(key, val string, allowed ...string) error {
	for _, a := range allowed {
		if val == a {
			return nil
		}
	}
	return c.bad(key, strconv.Quote(val), "must be one of "+strings.Join(quoteAll(allowed), ", "))
}

func (c *Config) validateStatic() error {
	cs := c.Static.Consumers
	if c.Discovery.Adapter != "static" {
		if len(cs) > 0 {
			return fmt.Errorf("static.consumers = %d entries: used only with discovery.adapter = \"static\" (it is %q); set the adapter or remove them", len(cs), c.Discovery.Adapter)
		}
		return nil
	}
	if len(cs) == 0 {
		return fmt.Errorf("static.consumers = []: discovery.adapter = \"static\" needs at least one [[static.consumers]] with resource, addr and device")
	}
	type seen struct {
		i        int
		resource string
	}
	byEntry := map[[3]string]int{}
	byAddr := map[netip.Addr]seen{}
	for i, s := range cs {
		key := fmt.Sprintf("static.consumers[%d]", i)
		a, err := netip.ParseAddr(s.Addr)
		if err != nil {
			return fmt.Errorf("%s.addr = %q: must be an IP address like 192.0.2.10", key, s.Addr)
		}
		a = a.Unmap()
		if j, dup := byEntry[[3]string{s.Resource, a.String(), s.Device}]; dup {
			return fmt.Errorf("%s: duplicate of static.consumers[%d] (resource %q, addr %s, device %q); remove one", key, j, s.Resource, a, s.Device)
		}
		byEntry[[3]string{s.Resource, a.String(), s.Device}] = i
		// One initiator address is one throttle: it cannot be slowed for
		// one resource and not for another.
		if p, dup := byAddr[a]; dup && p.resource != s.Resource {
			return fmt.Errorf("%s.addr = %s: already a consumer of resource %q (static.consumers[%d]), now of %q; an address can belong to one resource only, since its packets are delayed as one", key, a, p.resource, p.i, s.Resource)
		}
		byAddr[a] = seen{i, s.Resource}
		if s.Device == "" {
			return fmt.Errorf("%s.device = \"\": must name the block device serving the consumer, like /dev/loop3", key)
		}
		if strings.TrimSpace(s.Resource) == "" {
			return fmt.Errorf("%s.resource = %q: must name the shared resource, like \"pool-a\"", key, s.Resource)
		}
	}
	return nil
}

// validateReadRates checks that manual.read_rates names consumers by
// address (the rates themselves are the data path's to judge).
func (c *Config) validateReadRates() error {
	for _, k := range slices.Sorted(maps.Keys(c.Manual.ReadRates)) {
		if _, err := netip.ParseAddr(k); err != nil {
			return fmt.Errorf("manual.read_rates: %q is not an IP address; read rates name consumers by address (like \"192.0.2.21\" = \"10MB/s\")", k)
		}
	}
	return nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// looksLikeAddr reports whether host is written as an IP address
// (digits and dots, or an IPv6 colon) rather than as a host name.
func looksLikeAddr(host string) bool {
	return host != "" && (strings.Trim(host, "0123456789.") == "" || strings.Contains(host, ":"))
}

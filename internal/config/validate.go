package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/control"
	"github.com/sanqos/sanqos/internal/direction"
	"github.com/sanqos/sanqos/internal/engine"
	"github.com/sanqos/sanqos/internal/policy"
	"github.com/sanqos/sanqos/internal/throttle"
	"github.com/sanqos/sanqos/internal/topology"
)

// Validate checks every value; the first bad one is reported.
func (c *Config) Validate() error {
	var checks []func() error
	for _, group := range [][]func() error{c.loopChecks(), c.controlChecks(), c.dataPathChecks(), c.serviceChecks()} {
		checks = append(checks, group...)
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// loopChecks check the measuring loop: tick, filter, threshold, headroom.
func (c *Config) loopChecks() []func() error {
	bad, durIn := c.bad, c.durIn
	return []func() error{
		func() error { return durIn("tick", c.Tick, 10*time.Millisecond, 10*time.Second) },
		func() error {
			// NaN and ±Inf pass no range check below, so each float key is
			// checked for them first, by name (TOML takes nan and inf).
			for _, f := range []struct {
				key string
				v   float64
			}{{"ewma_alpha", c.EWMAAlpha}, {"headroom", c.Headroom.Value}, {"pid.kp", c.PID.Kp}} {
				if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
					return bad(f.key, f.v, "must be a finite number")
				}
			}
			return nil
		},
		func() error {
			if !(c.EWMAAlpha > 0 && c.EWMAAlpha <= 1) {
				return bad("ewma_alpha", c.EWMAAlpha, "must be > 0 and <= 1")
			}
			return nil
		},
		func() error { return durIn("threshold", c.Threshold, 100*time.Microsecond, 10*time.Second) },
		func() error {
			if c.Headroom.Auto {
				// The measured headroom was removed (docs/ablation.md).
				return bad("headroom", "auto", "is no longer offered: give a fraction >= 0 and < 0.5 (0.25 for NFS)")
			}
			if !(c.Headroom.Value >= 0 && c.Headroom.Value < 0.5) {
				return bad("headroom", c.Headroom.Value, "must be a fraction >= 0 and < 0.5")
			}
			return nil
		},
		func() error {
			names := make([]string, 0, len(c.Resources))
			for n := range c.Resources {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if err := durIn(fmt.Sprintf("resources.%q.threshold", n), c.Resources[n].Threshold, 100*time.Microsecond, 10*time.Second); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// controlChecks check the controller, its signal and its gains.
func (c *Config) controlChecks() []func() error {
	bad, durIn, oneOf := c.bad, c.durIn, c.oneOf
	return []func() error{
		func() error { return oneOf("controller", c.Controller, control.Names()...) },
		func() error { return oneOf("signal", c.Signal, engine.Signals()...) },
		func() error { return oneOf("probe", c.Probe, "auto", "off") },
		func() error {
			names := make([]string, 0, len(c.Resources))
			for n, r := range c.Resources {
				if r.Signal != "" {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			for _, n := range names {
				if err := oneOf(fmt.Sprintf("resources.%q.signal", n), c.Resources[n].Signal, engine.Signals()...); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			if !(c.PID.Kp > 0) {
				return bad("pid.kp", c.PID.Kp, "must be > 0")
			}
			return nil
		},
		func() error { return durIn("pid.ti", c.PID.Ti, time.Millisecond, time.Hour) },
		func() error { return durIn("pid.td", c.PID.Td, 0, time.Minute) },
		func() error { return durIn("pid.u_max", c.PID.UMax, 100*time.Microsecond, time.Second) },
		func() error {
			// Up to 1 s: beyond it a delayed ACK outlives TCP's
			// retransmission timeout even after the RTT has adapted.
			if c.PID.UMaxLimit.Duration == 0 {
				return nil
			}
			if err := durIn("pid.u_max_limit", c.PID.UMaxLimit, 100*time.Microsecond, time.Second); err != nil {
				return err
			}
			if c.PID.UMaxLimit.Duration < c.PID.UMax.Duration {
				return bad("pid.u_max_limit", c.PID.UMaxLimit, fmt.Sprintf("must be at least pid.u_max (%v); equal keeps the ceiling fixed, 0 is the default", c.PID.UMax))
			}
			return nil
		},
	}
}

// dataPathChecks check who is throttled and how: rates, backend, ports,
// discovery, policy.
func (c *Config) dataPathChecks() []func() error {
	bad, durIn, oneOf := c.bad, c.durIn, c.oneOf
	return []func() error{
		func() error {
			if c.WriteThreshold <= 0 {
				return bad("write_threshold", c.WriteThreshold, "must be > 0")
			}
			if c.WriteLeave < 0 || c.WriteLeave > c.WriteThreshold {
				return bad("write_leave", c.WriteLeave, fmt.Sprintf("must be between 0 and write_threshold (%v)", c.WriteThreshold))
			}
			return nil
		},
		func() error { return oneOf("backend", c.Backend, throttle.Backends...) },
		func() error {
			if c.QueueNum < 1 || c.QueueNum > 65535 {
				return bad("queue_num", c.QueueNum, "must be a queue number from 1 to 65535")
			}
			return nil
		},
		func() error {
			for _, d := range []struct{ key, v string }{{"dev", c.Dev}, {"rate_dev", c.RateDev}} {
				if d.v != "" && !validIfName(d.v) {
					return bad(d.key, strconv.Quote(d.v), "must be a network interface name (1 to 15 characters, no '/', ':' or blanks), like \"eth0\"")
				}
			}
			switch c.Backend {
			case "netem", "htb", "edt":
				if c.Dev == "" {
					return bad("dev", `""`, fmt.Sprintf("backend %q installs its qdisc on the interface towards the initiators: set dev (--dev), like \"eth0\"", c.Backend))
				}
			}
			return nil
		},
		func() error {
			if _, err := direction.Parse(c.Direction); err != nil {
				return bad("direction", strconv.Quote(c.Direction), "must be one of \"write\", \"read\", \"both\"")
			}
			return nil
		},
		func() error {
			if len(c.Ports) == 0 {
				return bad("ports", "[]", "must list at least one TCP port, like [3260]")
			}
			for _, p := range c.Ports {
				if p < 1 || p > 65535 {
					return bad("ports", c.Ports, fmt.Sprintf("port %d must be between 1 and 65535", p))
				}
			}
			if err := throttle.ValidatePorts(c.Ports); err != nil {
				return bad("ports", c.Ports, err.Error())
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
		func() error { return oneOf("policy", c.Policy, policy.ReadOverWrite, policy.ManualName) },
		c.validateManual,
	}
}

// serviceChecks check what the daemon serves: metrics, socket, record.
func (c *Config) serviceChecks() []func() error {
	bad := c.bad
	return []func() error{
		func() error {
			if c.Listen == "" {
				return nil
			}
			host, port, err := net.SplitHostPort(c.Listen)
			if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
				return bad("listen", strconv.Quote(c.Listen), `must be HOST:PORT like "127.0.0.1:9469", or "" to disable`)
			}
			// What looks like an address must be one: "999.1.1.1" was
			// taken for a host name, which never resolved, and the
			// listener was retried in the background for ever.
			if looksLikeAddr(host) {
				if _, err := netip.ParseAddr(host); err != nil {
					return bad("listen", strconv.Quote(c.Listen), fmt.Sprintf(`has %q, which is not an IP address (an IPv4 address is four numbers from 0 to 255, like "127.0.0.1:9469")`, host))
				}
			}
			return nil
		},
		func() error {
			// "" is refused: binding a unix socket to an empty path makes
			// the kernel autobind an abstract socket nobody can find, and
			// the socket is also what keeps two daemons apart.
			if !filepath.IsAbs(c.Socket) {
				return bad("socket", strconv.Quote(c.Socket), `must be an absolute path, like /run/sanqos/sanqos.sock (the control socket cannot be turned off)`)
			}
			return nil
		},
		c.validateResources,
		func() error {
			if c.RecordMaxSize < 1<<20 || c.RecordMaxSize > 64<<30 {
				return bad("record_max_size", c.RecordMaxSize, "must be between 1MiB and 64GiB (the record is rotated once at this size)")
			}
			return nil
		},
	}
}

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

// validateResources checks that every [resources."name"] section names
// a resource, where the resources are known before discovery runs (the
// static adapter). With tgt or LIO they are only known once discovery
// ran; the daemon warns then (discover.UnmatchedResources).
func (c *Config) validateResources() error {
	if c.Discovery.Adapter != "static" || len(c.Resources) == 0 {
		return nil
	}
	known := map[string]bool{}
	var names []string
	for _, s := range c.Static.Consumers {
		if !known[s.Resource] {
			names = append(names, strconv.Quote(s.Resource))
		}
		known[s.Resource], known[topology.SanitizeName(s.Resource)] = true, true
	}
	keys := make([]string, 0, len(c.Resources))
	for k := range c.Resources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] && !known[topology.SanitizeName(k)] {
			return fmt.Errorf("resources.%q: names no resource of static.consumers (they are %s); fix the name or remove the section", k, strings.Join(names, ", "))
		}
	}
	return nil
}

func (c *Config) validateManual() error {
	for _, l := range []struct {
		key  string
		list []string
	}{{"manual.protected", c.Manual.Protected}, {"manual.throttle", c.Manual.Throttle}} {
		for _, v := range l.list {
			if _, err := netip.ParseAddr(v); err == nil {
				continue
			}
			if strings.HasPrefix(v, "iqn.") || strings.HasPrefix(v, "eui.") || strings.HasPrefix(v, "naa.") {
				continue
			}
			return fmt.Errorf("%s = %q: entries must be IP addresses or initiator names (iqn., eui., naa.)", l.key, v)
		}
	}
	if err := c.validateReadRates(); err != nil {
		return err
	}
	if c.Policy != policy.ManualName {
		return nil
	}
	if len(c.Manual.Throttle) == 0 {
		return fmt.Errorf("manual.throttle = []: policy = \"manual\" needs at least one consumer to throttle")
	}
	// The rest of the lists' rules are the policy's own (a protected
	// consumer named, none in both lists), with its words.
	_, err := policy.NewManual(c.EWMAAlpha, policy.ManualConfig{Protected: c.Manual.Protected, Throttle: c.Manual.Throttle})
	return err
}

// validateReadRates checks manual.read_rates and that the data path can
// cap rates.
func (c *Config) validateReadRates() error {
	for _, k := range slices.Sorted(maps.Keys(c.Manual.ReadRates)) {
		if _, err := netip.ParseAddr(k); err != nil {
			return fmt.Errorf("manual.read_rates: %q is not an IP address; read rates name consumers by address (like \"192.0.2.21\" = \"10MB/s\")", k)
		}
		if _, err := throttle.ParseRate(c.Manual.ReadRates[k]); err != nil {
			return fmt.Errorf("manual.read_rates.%q: %w", k, err)
		}
	}
	switch {
	case c.RateDev != "" && (c.Backend == "htb" || c.Backend == "dry-run"):
		return fmt.Errorf("rate_dev = %q adds read rates to a delay backend (nfqueue or netem); backend %q needs none: leave rate_dev out", c.RateDev, c.Backend)
	case len(c.Manual.ReadRates) > 0 && c.RateDev == "" && c.Backend != "htb" && c.Backend != "dry-run":
		return fmt.Errorf("manual.read_rates needs a data path that caps rates: set rate_dev (--rate-dev) to the interface towards the initiators")
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

// validIfName reports whether s can name a Linux network interface
// (dev_valid_name): at most IFNAMSIZ-1 bytes, not "." or "..", and no
// '/', ':' or white space.
func validIfName(s string) bool {
	if len(s) == 0 || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/: \t\n\r\v\f")
}

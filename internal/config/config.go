// Package config holds sanqos's settings: defaults, a TOML file that
// overrides them, and command-line flags that override the file. Every
// value is validated once, at load, with an error that names the key, the
// bad value and what is accepted, so a daemon never starts half-configured.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sanqos/sanqos/internal/control"
	"github.com/sanqos/sanqos/internal/engine"
	"github.com/sanqos/sanqos/internal/throttle"
	"github.com/sanqos/sanqos/internal/topology"
)

// Config is the complete configuration. Field names follow the TOML keys.
type Config struct {
	// Tick is the sampling period of /proc/diskstats and the controller.
	Tick Duration `toml:"tick"`
	// EWMAAlpha is the weight of the newest latency sample (thesis: 0.25).
	EWMAAlpha float64 `toml:"ewma_alpha"`
	// Threshold is the read latency (r_await) above which a resource is
	// protected, unless Resources overrides it.
	Threshold Duration `toml:"threshold"`
	// Headroom is the fraction of the threshold the controller aims below
	// it, so that single seconds stay under the threshold's promise.
	Headroom float64 `toml:"headroom"`
	// Signal is the statistic of a resource's reads held under the
	// threshold: "mean" (r_await, the thesis's), "p95" or "p99" (need
	// the eBPF probe), unless Resources overrides it.
	Signal string `toml:"signal"`
	// Probe is "auto" (measure reads with the eBPF block-layer probe where
	// the kernel allows, else /proc/diskstats) or "off".
	Probe string `toml:"probe"`
	// Resources holds per-resource settings, keyed by resource name as
	// discovery reports it (sanitized: lower case, [a-z0-9._-]).
	Resources map[string]Resource `toml:"resources"`
	// Controller is "pid", "thesis" (the thesis's listing, kept for
	// comparison) or "none" (observe only).
	Controller string `toml:"controller"`
	PID        PID    `toml:"pid"`
	// WriteThreshold: a consumer writing faster than this joins its
	// resource's throttleable set; it leaves below WriteLeave.
	WriteThreshold Rate `toml:"write_threshold"`
	WriteLeave     Rate `toml:"write_leave"`
	// Backend is the data path: "nfqueue", "netem", "htb" or "dry-run".
	Backend string `toml:"backend"`
	// Direction is what is delayed: "write" (ACKs and control segments),
	// "read" (data segments) or "both".
	Direction string `toml:"direction"`
	// AckDelay (nfqueue backend) holds pure ACKs in the write direction
	// too (the default), behind the per-flow rise limit, so the writer's
	// smoothed RTT follows the delay. Off, only the small data segments
	// that clock an iSCSI writer (R2T, SCSI Response) are held: in the lab
	// that left the writers' RTT estimate near zero and the held responses,
	// which carry ACKs, made them send about three times more spurious loss
	// probes than with ACKs held. Bulk TCP streams need it on.
	AckDelay bool `toml:"ack_delay"`
	// Ports are the target's TCP ports whose traffic is throttled.
	Ports     []int     `toml:"ports"`
	Discovery Discovery `toml:"discovery"`
	Static    Static    `toml:"static"`
	// Policy chooses who is throttled: "read-over-write" (writers over
	// the write threshold) or "manual" (the [manual] lists).
	Policy string `toml:"policy"`
	Manual Manual `toml:"manual"`
	// Listen is the metrics/HTTP address; "" disables it.
	Listen string `toml:"listen"`
	// Socket is the control socket for sanqos throttle (required: it also
	// keeps a second daemon from starting beside this one).
	Socket string `toml:"socket"`
	// Record is a file to record every tick to; "" disables recording.
	Record string `toml:"record"`
	// RecordMaxSize caps the record: when the file would grow past it, it
	// is renamed to Record+".1" (replacing the one before) and a new one
	// is started, so the record never takes more than twice this. About
	// 0.5 GB a day with three consumers: the default keeps some hours.
	RecordMaxSize Size `toml:"record_max_size"`
	// Attribution and SmallSegment: see wire.go.
	Attribution  string         `toml:"attribution"`
	SmallSegment map[string]int `toml:"small_segment"`

	// origin maps a key to the flag that set it, for error messages.
	origin map[string]string
}

// Resource is the per-resource section [resources."name"].
type Resource struct {
	Threshold Duration `toml:"threshold"`
	Signal    string   `toml:"signal"`
}

// PID is the [pid] section: the velocity-form PID controller's gains.
type PID struct {
	Kp float64  `toml:"kp"`
	Ti Duration `toml:"ti"`
	Td Duration `toml:"td"`
	// UMax is the delay ceiling the controller starts with.
	UMax Duration `toml:"u_max"`
	// UMaxLimit is how far the ceiling may rise when the writers need
	// more delay than UMax (engine: "Authority"); equal to UMax keeps it
	// fixed; 0 is the default, engine.DefaultUMaxLimitMs or UMax if that
	// is higher.
	UMaxLimit Duration `toml:"u_max_limit"`
}

// Discovery is the [discovery] section.
type Discovery struct {
	// Adapter is "tgt", "lio" or "static".
	Adapter string `toml:"adapter"`
	// Interval between discoveries (sessions come and go).
	Interval Duration `toml:"interval"`
	// TgtControlPort is tgtd's management port (tgtadm -C); 0 = default.
	TgtControlPort int `toml:"tgt_control_port"`
	// LIORoot is the LIO configfs root.
	LIORoot string `toml:"lio_root"`
	// Exports (socket adapter) are export list files naming what the
	// server on the ports serves (ganesha.conf, /etc/exports); empty:
	// found from the listening process. See wire.go.
	Exports []string `toml:"exports"`
}

// Static is the [static] section.
type Static struct {
	Consumers []StaticConsumer `toml:"consumers"`
}

// StaticConsumer is one [[static.consumers]] entry.
type StaticConsumer struct {
	Resource string `toml:"resource"`
	Addr     string `toml:"addr"`
	Device   string `toml:"device"`
}

// Manual is the [manual] section, used with policy = "manual": consumers
// (IP addresses or initiator IQNs) that are never throttled, and those
// that are throttled whenever their resource is over threshold.
type Manual struct {
	Protected []string `toml:"protected"`
	Throttle  []string `toml:"throttle"`
}

// Default returns the built-in configuration. The PID gains are
// control.DefaultParams: tuned against the simulated thesis array (see
// internal/control/doc.go), so a config file and the library agree.
func Default() Config {
	pid := control.DefaultParams()
	return Config{
		Tick:       Duration{100 * time.Millisecond},
		EWMAAlpha:  0.25,
		Headroom:   engine.DefaultHeadroom,
		Signal:     engine.SignalMean,
		Probe:      "auto",
		Threshold:  Duration{15 * time.Millisecond},
		Controller: "pid",
		PID: PID{
			Kp:   pid.Kp,
			Ti:   Duration{pid.Ti},
			Td:   Duration{pid.Td},
			UMax: Duration{time.Duration(pid.UMaxMs * float64(time.Millisecond))},
		},
		WriteThreshold: 500e3,
		WriteLeave:     250e3,
		AckDelay:       true,
		Backend:        "nfqueue",
		Direction:      "write",
		Ports:          []int{3260},
		Discovery: Discovery{
			Adapter:  "tgt",
			Interval: Duration{5 * time.Second},
			LIORoot:  "/sys/kernel/config/target",
		},
		Policy: "read-over-write",
		Listen: "127.0.0.1:9469",
		Socket: "/run/sanqos/sanqos.sock",

		RecordMaxSize: 64 << 20,
		Attribution:   "auto",
	}
}

// Load reads a TOML file over the defaults and validates the result.
// Keys the file does not set keep their defaults; unknown keys are errors
// (a typo must not silently leave a default in force).
func Load(path string) (Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, fmt.Errorf("reading config: %s does not exist; give the path of a TOML file (deploy/sanqos.example.toml is a start) or leave --config out to use the defaults", path)
	}
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	if err := c.decode(string(b)); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

func (c *Config) decode(text string) error {
	// Slices replace rather than extend the defaults.
	c.Ports = nil
	md, err := toml.Decode(text, c)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			// "toml: line 2 (last key "tick"): ...": keep line and key.
			return errors.New(strings.TrimPrefix(perr.Error(), "toml: "))
		}
		return err
	}
	if !md.IsDefined("ports") {
		c.Ports = Default().Ports
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("unknown key %s (known: %s)", strings.Join(keys, ", "), strings.Join(knownKeys, ", "))
	}
	return nil
}

var knownKeys = []string{
	"tick", "ewma_alpha", "threshold", "headroom", "signal", "probe", "resources.<name>.{threshold,signal}",
	"controller", "pid.kp", "pid.ti", "pid.td", "pid.u_max", "pid.u_max_limit",
	"write_threshold", "write_leave", "backend", "direction", "ports",
	"discovery.adapter", "discovery.interval", "discovery.tgt_control_port",
	"discovery.lio_root", "discovery.exports", "attribution", "small_segment.<port>", "static.consumers.{resource,addr,device}",
	"policy", "manual.protected", "manual.throttle", "listen", "socket", "record", "record_max_size",
}

// Validate checks every value; the first bad one is reported.
func (c *Config) Validate() error {
	bad := func(key string, val any, rule string) error {
		if f, ok := c.origin[key]; ok {
			key = f + " (" + key + ")"
		}
		return fmt.Errorf("%s = %v: %s", key, val, rule)
	}
	durIn := func(key string, d Duration, lo, hi time.Duration) error {
		if d.Duration < lo || d.Duration > hi {
			return bad(key, d, fmt.Sprintf("must be between %v and %v", lo, hi))
		}
		return nil
	}
	oneOf := func(key, val string, allowed ...string) error {
		for _, a := range allowed {
			if val == a {
				return nil
			}
		}
		return bad(key, strconv.Quote(val), "must be one of "+strings.Join(quoteAll(allowed), ", "))
	}
	checks := []func() error{
		func() error { return durIn("tick", c.Tick, 10*time.Millisecond, 10*time.Second) },
		func() error {
			// NaN and ±Inf pass no range check below, so each float key is
			// checked for them first, by name (TOML takes nan and inf).
			for _, f := range []struct {
				key string
				v   float64
			}{{"ewma_alpha", c.EWMAAlpha}, {"headroom", c.Headroom}, {"pid.kp", c.PID.Kp}} {
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
			if !(c.Headroom >= 0 && c.Headroom < 0.5) {
				return bad("headroom", c.Headroom, "must be >= 0 and < 0.5")
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
		func() error { return oneOf("controller", c.Controller, "pid", "thesis", "none") },
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
		func() error {
			if c.WriteThreshold <= 0 {
				return bad("write_threshold", c.WriteThreshold, "must be > 0")
			}
			if c.WriteLeave < 0 || c.WriteLeave > c.WriteThreshold {
				return bad("write_leave", c.WriteLeave, fmt.Sprintf("must be between 0 and write_threshold (%v)", c.WriteThreshold))
			}
			return nil
		},
		func() error { return oneOf("backend", c.Backend, "nfqueue", "netem", "htb", "dry-run") },
		func() error { return oneOf("direction", c.Direction, "write", "read", "both") },
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
		func() error { return oneOf("policy", c.Policy, "read-over-write", "manual") },
		c.validateManual,
		func() error {
			if c.Listen == "" {
				return nil
			}
			_, port, err := net.SplitHostPort(c.Listen)
			if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
				return bad("listen", strconv.Quote(c.Listen), `must be HOST:PORT like "127.0.0.1:9469", or "" to disable`)
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
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
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

// Warnings returns what is valid but probably not meant, one sentence
// each; the daemon logs them at start.
func (c *Config) Warnings() []string {
	var w []string
	if c.Listen != "" {
		host, _, err := net.SplitHostPort(c.Listen)
		if err == nil {
			a, aerr := netip.ParseAddr(host)
			switch {
			case host == "" || aerr == nil && a.IsUnspecified():
				w = append(w, fmt.Sprintf("listen = %q serves /metrics and /status on every interface, to anyone who can reach them; use 127.0.0.1:PORT unless a firewall guards the port", c.Listen))
			case aerr != nil:
				w = append(w, fmt.Sprintf("listen = %q is a host name: it is resolved once at start and may bind other addresses than meant; give an IP address", c.Listen))
			}
		}
	}
	if c.Record != "" {
		for _, ram := range []string{"/run/", "/dev/shm/", "/tmp/"} {
			if strings.HasPrefix(filepath.Clean(c.Record)+"/", ram) {
				w = append(w, fmt.Sprintf("record = %q is under %s, which is often in RAM: up to 2 × record_max_size (%v) of it; /var/log/sanqos is the place", c.Record, ram, c.RecordMaxSize))
				break
			}
		}
	}
	return w
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
	if c.Policy == "manual" && len(c.Manual.Throttle) == 0 {
		return fmt.Errorf("manual.throttle = []: policy = \"manual\" needs at least one consumer to throttle")
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

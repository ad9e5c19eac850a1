// Package config is sanqos's settings as data: defaults, a TOML file
// that overrides them, command-line flags that override the file, their
// types and units, and who may write the file. It checks the file's
// syntax (unknown keys, types, units) and the keys no other package
// owns; each value that configures another package (the engine, the
// controller, the policy, the data path) is checked by that package,
// once, with its own bounds, and the daemon names the key of a value
// refused there (KeyError). It imports none of them.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
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
	// it, so that single seconds stay under the threshold's promise, or
	// "auto": each resource's from its measured scatter.
	Headroom Headroom `toml:"headroom"`
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
	// Backend is the data path: "nfqueue", "netem", "htb", "edt", "auto"
	// (edt where the kernel and dev allow it, else nfqueue) or "dry-run".
	Backend string `toml:"backend"`
	// RateDev is the interface towards the initiators on which a delay
	// backend gets an htb backend beside it for read rate caps ('sanqos
	// throttle --rate', manual.read_rates); "" means no rates.
	RateDev string `toml:"rate_dev"`
	// Dev is the interface towards the initiators on which the tc
	// backends (netem, htb, edt) install their root qdisc; they need it.
	Dev string `toml:"dev"`
	// QueueNum is the NFQUEUE number of the nfqueue backend; it also
	// names the instance (q<queue>), so two daemons on one host need two.
	QueueNum int `toml:"queue_num"`
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
	// Tenants names consumers and gives them shares, reservations, caps
	// and their own read promises (tenants.go).
	Tenants Tenants `toml:"tenants"`

	// origin maps a key to the flag that set it, for error messages.
	origin map[string]string
}

// Resource is the per-resource section [resources."name"]; a key left
// out (zero) is the top-level one's.
type Resource struct {
	Threshold Duration `toml:"threshold"`
	Signal    string   `toml:"signal"`
}

// PID is the [pid] section: the TOML spelling of control.Gains (see
// Gains), with u_max as a duration like every other time in the file,
// and the ceiling's limit, which is the engine's.
type PID struct {
	Kp float64  `toml:"kp"`
	Ti Duration `toml:"ti"`
	Td Duration `toml:"td"`
	// UMax is the delay ceiling the controller starts with.
	UMax Duration `toml:"u_max"`
	// UMaxLimit is how far the ceiling may rise when the writers need
	// more delay than UMax (internal/decide/control, step 4 "The ceiling"); equal to UMax keeps it
	// fixed; 0 is the default, engine.DefaultUMaxLimitMs or UMax if that
	// is higher.
	UMaxLimit Duration `toml:"u_max_limit"`
	// RulesOff switches rules of the control law off by name, for
	// measuring what each is worth (docs/ablation.md); empty in
	// production. The engine knows the names.
	RulesOff []string `toml:"rules_off,omitempty"`
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
// (IP addresses, initiator IQNs or device names, as the policy matches
// them) that are never throttled, and those that are throttled whenever
// their resource is over threshold.
//
// ReadRates caps the rate the target sends a consumer, by IP address,
// whatever the policy: standing manual throttles (thesis §5.2's HTB
// classes) that 'sanqos throttle --list' shows with source "config".
type Manual struct {
	Protected []string          `toml:"protected"`
	Throttle  []string          `toml:"throttle"`
	ReadRates map[string]string `toml:"read_rates"`
}

// Default returns the built-in configuration: the defaults of the
// packages each value configures (the engine's loop, control's gains,
// the throttle's first backend and queue, the policy's rates), written
// out here so that this package reads no decision or data-path code.
// cmd/sanqos's TestConfigDefaultsAreTheOwners holds them equal.
func Default() Config {
	return Config{
		Tick:       Duration{100 * time.Millisecond},
		EWMAAlpha:  0.25,
		Headroom:   Headroom{Value: 0.15},
		Signal:     "mean",
		Probe:      "auto",
		Threshold:  Duration{15 * time.Millisecond},
		Controller: "pid",
		PID: PID{
			Kp:   0.6,
			Ti:   Duration{500 * time.Millisecond},
			Td:   Duration{50 * time.Millisecond},
			UMax: Duration{20 * time.Millisecond},
		},
		WriteThreshold: 500e3,
		WriteLeave:     250e3,
		AckDelay:       true,
		Backend:        "nfqueue",
		QueueNum:       3260,
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
// As root, it first refuses a file that another user can change (see
// checkTrusted).
// Keys the file does not set keep their defaults; unknown keys are errors
// (a typo must not silently leave a default in force).
func Load(path string) (Config, error) {
	c := Default()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, fmt.Errorf("reading config: %s does not exist; give the path of a TOML file (deploy/sanqos.example.toml is a start) or leave --config out to use the defaults", path)
	}
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	defer f.Close()
	if checkPermissions {
		if err := checkTrusted(path, f); err != nil {
			return Config{}, err
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return Config{}, fmt.Errorf("reading config %s: %w", path, err)
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
	"write_threshold", "write_leave", "backend", "dev", "queue_num", "rate_dev", "direction", "ack_delay", "ports",
	"discovery.adapter", "discovery.interval", "discovery.tgt_control_port",
	"discovery.lio_root", "discovery.exports", "attribution", "small_segment.<port>", "static.consumers.{resource,addr,device}",
	"policy", "manual.protected", "manual.throttle", "manual.read_rates", "listen", "socket", "record", "record_max_size",
	"tenants.conflict", "tenants.class.<name>.{share,reserve,cap,burst,read_cap,threshold}",
	"tenants.consumer.{name,match,class,share,reserve,cap,burst,read_cap,threshold}",
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
	if len(c.PID.RulesOff) > 0 {
		w = append(w, fmt.Sprintf("pid.rules_off = %q switches rules of the control law off: a measurement setting (docs/ablation.md), not one to run storage with", c.PID.RulesOff))
	}
	return w
}

// KnownKeys lists every key a configuration file may set, as the error
// for an unknown key names them (tables as "section.<name>.{keys}").
func KnownKeys() []string { return slices.Clone(knownKeys) }

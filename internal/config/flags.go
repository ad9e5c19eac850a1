package config

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// flagValue is a registered override: it checks its syntax when parsed
// and is applied to a Config only after the file is loaded, so a flag
// wins over the file whatever their order.
type flagValue struct {
	key    string
	value  string
	set    func(c *Config, s string) error
	isBool bool
}

func (f *flagValue) String() string { return f.value }

// IsBoolFlag lets a boolean setting be given as a bare --name.
func (f *flagValue) IsBoolFlag() bool { return f.isBool }

func (f *flagValue) Set(s string) error {
	scratch := Default()
	if err := f.set(&scratch, s); err != nil {
		return err
	}
	f.value = s
	return nil
}

type flagDef struct {
	name, key, usage string
	get              func(c *Config) string
	set              func(c *Config, s string) error
}

// boolFlags are the flags that may be given bare (--ack-delay) and take
// true or false.
var boolFlags = map[string]bool{"ack-delay": true}

// ParseBool parses a boolean flag value strictly: true or false in any
// case, or 1 or 0. Go's flag package also takes t, T, f and F; a stray
// "t" is more likely a typo than a decision, and a mode switch such as
// --manual must never be guessed.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q: must be true or false", s)
}

// BoolFlag is a flag.Value for a boolean flag parsed with ParseBool; it
// may be given bare (--name) for true.
type BoolFlag bool

func (b *BoolFlag) String() string {
	if b == nil {
		return "false"
	}
	return strconv.FormatBool(bool(*b))
}

// Set parses s with ParseBool.
func (b *BoolFlag) Set(s string) error {
	v, err := ParseBool(s)
	if err != nil {
		return err
	}
	*b = BoolFlag(v)
	return nil
}

// IsBoolFlag lets the flag be given bare.
func (b *BoolFlag) IsBoolFlag() bool { return true }

func setBool(p func(c *Config) *bool) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := ParseBool(s)
		if err != nil {
			return err
		}
		*p(c) = v
		return nil
	}
}

func setDuration(p func(c *Config) *Duration) func(*Config, string) error {
	return func(c *Config, s string) error { return p(c).UnmarshalText([]byte(s)) }
}

func setRate(p func(c *Config) *Rate) func(*Config, string) error {
	return func(c *Config, s string) error { return p(c).UnmarshalText([]byte(s)) }
}

func setString(p func(c *Config) *string) func(*Config, string) error {
	return func(c *Config, s string) error { *p(c) = s; return nil }
}

func setFloat(p func(c *Config) *float64) func(*Config, string) error {
	return func(c *Config, s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%q: must be a number", s)
		}
		*p(c) = v
		return nil
	}
}

// AckDelayUsage explains --ack-delay; sanqos run --manual, which takes no
// configuration file, registers the same flag with it.
const AckDelayUsage = "nfqueue: hold pure ACKs in the write direction (behind the per-flow rise limit); false holds only the small segments that clock iSCSI writers (R2T, SCSI response)"

var flagDefs = []flagDef{
	{"tick", "tick", "sampling and control period", func(c *Config) string { return c.Tick.String() }, setDuration(func(c *Config) *Duration { return &c.Tick })},
	{"ewma-alpha", "ewma_alpha", "weight of the newest latency sample (0-1]", func(c *Config) string { return fmt.Sprint(c.EWMAAlpha) }, setFloat(func(c *Config) *float64 { return &c.EWMAAlpha })},
	{"threshold", "threshold", "read latency above which a resource is protected", func(c *Config) string { return c.Threshold.String() }, setDuration(func(c *Config) *Duration { return &c.Threshold })},
	{"headroom", "headroom", "fraction of the threshold the controller aims below it [0-0.5)", func(c *Config) string { return c.Headroom.String() }, func(c *Config, s string) error { return c.Headroom.UnmarshalText([]byte(s)) }},
	{"signal", "signal", "statistic of the reads held under the threshold: mean (r_await), p95 or p99 (p95/p99 need the eBPF probe)", func(c *Config) string { return c.Signal }, setString(func(c *Config) *string { return &c.Signal })},
	{"probe", "probe", "auto (time reads with the eBPF block-layer probe where the kernel allows, else /proc/diskstats) or off", func(c *Config) string { return c.Probe }, setString(func(c *Config) *string { return &c.Probe })},
	{"controller", "controller", "pid, thesis (the thesis's own arithmetic, to compare) or none (measure only, never throttle)", func(c *Config) string { return c.Controller }, setString(func(c *Config) *string { return &c.Controller })},
	{"kp", "pid.kp", "PID proportional gain: a latency error of 1 × the target multiplies the delay by e^kp", func(c *Config) string { return fmt.Sprint(c.PID.Kp) }, setFloat(func(c *Config) *float64 { return &c.PID.Kp })},
	{"ti", "pid.ti", "PID integral time", func(c *Config) string { return c.PID.Ti.String() }, setDuration(func(c *Config) *Duration { return &c.PID.Ti })},
	{"td", "pid.td", "PID derivative time", func(c *Config) string { return c.PID.Td.String() }, setDuration(func(c *Config) *Duration { return &c.PID.Td })},
	{"u-max", "pid.u_max", "packet delay ceiling the controller starts with", func(c *Config) string { return c.PID.UMax.String() }, setDuration(func(c *Config) *Duration { return &c.PID.UMax })},
	{"u-max-limit", "pid.u_max_limit", "highest the delay ceiling may rise while the writers need more than u-max (= u-max: fixed)", func(c *Config) string { return c.PID.UMaxLimit.String() }, setDuration(func(c *Config) *Duration { return &c.PID.UMaxLimit })},
	{"write-threshold", "write_threshold", "write rate above which a consumer becomes throttleable, like 500kB/s (kB = 1000 B) or 512KiB/s (KiB = 1024 B); a bare number is kB/s", func(c *Config) string { return c.WriteThreshold.String() }, setRate(func(c *Config) *Rate { return &c.WriteThreshold })},
	{"write-leave", "write_leave", "write rate below which a throttleable consumer is released again (keep it under --write-threshold)", func(c *Config) string { return c.WriteLeave.String() }, setRate(func(c *Config) *Rate { return &c.WriteLeave })},
	{"backend", "backend", "data path: nfqueue, netem, htb, edt (tc/BPF departure times with fq; needs --dev), auto (edt where the kernel has fq, clsact, cls_bpf and BPF and --dev is given, else nfqueue; 'sanqos check' says which) or dry-run", func(c *Config) string { return c.Backend }, setString(func(c *Config) *string { return &c.Backend })},
	{"dev", "dev", "interface towards the initiators (netem, htb and edt backends)", func(c *Config) string { return c.Dev }, setString(func(c *Config) *string { return &c.Dev })},
	{"queue-num", "queue_num", "NFQUEUE number (nfqueue backend); it names the instance, so a second daemon needs another", func(c *Config) string { return strconv.Itoa(c.QueueNum) }, func(c *Config, s string) error {
		q, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q: must be a queue number from 1 to 65535", s)
		}
		c.QueueNum = q
		return nil
	}},
	{"rate-dev", "rate_dev", "interface towards the initiators on which read rates are capped (HTB) beside the delay backend: enables 'sanqos throttle --rate' and manual.read_rates", func(c *Config) string { return c.RateDev }, setString(func(c *Config) *string { return &c.RateDev })},
	{"direction", "direction", "what to delay: write, read or both", func(c *Config) string { return c.Direction }, setString(func(c *Config) *string { return &c.Direction })},
	{"ack-delay", "ack_delay", AckDelayUsage, func(c *Config) string { return strconv.FormatBool(c.AckDelay) }, setBool(func(c *Config) *bool { return &c.AckDelay })},
	{"ports", "ports", "comma-separated target TCP ports", func(c *Config) string { return joinInts(c.Ports) }, func(c *Config, s string) error {
		var ports []int
		for _, f := range strings.Split(s, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%q: must be comma-separated port numbers like 3260,3261", s)
			}
			ports = append(ports, p)
		}
		c.Ports = ports
		return nil
	}},
	{"adapter", "discovery.adapter", "discovery: tgt, lio, static or socket (the clients of --ports from the socket table)", func(c *Config) string { return c.Discovery.Adapter }, setString(func(c *Config) *string { return &c.Discovery.Adapter })},
	{"attribution", "attribution", "per-client write rates: auto (from the wire where clients share a device), wire or device", func(c *Config) string { return c.Attribution }, setString(func(c *Config) *string { return &c.Attribution })},
	{"discovery-interval", "discovery.interval", "time between discoveries", func(c *Config) string { return c.Discovery.Interval.String() }, setDuration(func(c *Config) *Duration { return &c.Discovery.Interval })},
	{"tgt-control-port", "discovery.tgt_control_port", "tgtd management port (tgtadm -C); 0 uses tgtadm's own default", func(c *Config) string { return strconv.Itoa(c.Discovery.TgtControlPort) }, func(c *Config, s string) error {
		p, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q: must be a port number", s)
		}
		c.Discovery.TgtControlPort = p
		return nil
	}},
	{"lio-root", "discovery.lio_root", "LIO configfs root", func(c *Config) string { return c.Discovery.LIORoot }, setString(func(c *Config) *string { return &c.Discovery.LIORoot })},
	{"policy", "policy", "who is throttled: read-over-write or manual", func(c *Config) string { return c.Policy }, setString(func(c *Config) *string { return &c.Policy })},
	{"listen", "listen", `HTTP address HOST:PORT of /metrics and /status ("" disables both)`, func(c *Config) string { return c.Listen }, setString(func(c *Config) *string { return &c.Listen })},
	{"socket", "socket", `control socket of 'sanqos throttle' (an absolute path; required)`, func(c *Config) string { return c.Socket }, setString(func(c *Config) *string { return &c.Socket })},
	{"record-max-size", "record_max_size", "size at which the record is rotated to FILE.1 (it takes at most twice this)", func(c *Config) string { return c.RecordMaxSize.String() }, func(c *Config, s string) error { return c.RecordMaxSize.UnmarshalText([]byte(s)) }},
	{"record", "record", `write one JSON line per tick to this file, replacing it ("" disables)`, func(c *Config) string { return c.Record }, setString(func(c *Config) *string { return &c.Record })},
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, p := range v {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// RegisterFlags adds one flag per scalar setting to fs, each showing
// c's value as its default (so --help shows the defaults). Call
// ApplyFlags after loading the file to let the flags that were given
// override it.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	for _, d := range flagDefs {
		fs.Var(&flagValue{key: d.key, value: d.get(c), set: d.set, isBool: boolFlags[d.name]}, d.name, d.usage+" (config key "+d.key+")")
	}
}

// Origin returns the flag that set key ("--kp"), or "" when the file or
// the defaults did.
func (c *Config) Origin(key string) string { return c.origin[key] }

// ApplyFlags copies the flags of fs that were set on the command line
// into c and validates the result; an error names the flag.
func (c *Config) ApplyFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		v, ok := f.Value.(*flagValue)
		if !ok || err != nil {
			return
		}
		if e := v.set(c, v.value); e != nil {
			err = fmt.Errorf("flag --%s: %w", f.Name, e)
			return
		}
		if c.origin == nil {
			c.origin = map[string]string{}
		}
		c.origin[v.key] = "--" + f.Name
	})
	if err != nil {
		return err
	}
	return c.Validate()
}

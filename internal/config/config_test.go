package config

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sanqos.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestExampleFile(t *testing.T) {
	c, err := Load("../../deploy/sanqos.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	// The example documents the defaults: apart from its marked example
	// sections it must equal Default().
	d := Default()
	c.Resources, c.Manual = nil, Manual{}
	if !reflect.DeepEqual(c, d) {
		t.Errorf("example file differs from the defaults:\n%+v\n%+v", c, d)
	}
	full, _ := Load("../../deploy/sanqos.example.toml")
	if got := full.Resources["vg-data"].Threshold.Duration; got != 20*time.Millisecond {
		t.Errorf("example resource vg-data threshold %v, want 20ms", got)
	}
}

func TestLoadGood(t *testing.T) {
	tests := []struct {
		name, text string
		check      func(c Config) bool
	}{
		{"empty keeps defaults", "", func(c Config) bool { return reflect.DeepEqual(c, Default()) }},
		{"tick", `tick = "50ms"`, func(c Config) bool { return c.Tick.Duration == 50*time.Millisecond }},
		{"rate units", "write_threshold = \"2MB/s\"\nwrite_leave = \"512KiB/s\"", func(c Config) bool {
			return c.WriteThreshold == 2e6 && c.WriteLeave == 512*1024
		}},
		{"rate number is kB/s", "write_threshold = 800\nwrite_leave = 100.5", func(c Config) bool {
			return c.WriteThreshold == 800e3 && c.WriteLeave == 100500
		}},
		{"rate bytes", "write_threshold = \"900000B/s\"\nwrite_leave = \"256 KiB/s\"", func(c Config) bool {
			return c.WriteThreshold == 900000 && c.WriteLeave == 256*1024
		}},
		{"read rates", "rate_dev = \"eth1\"\n[manual]\nread_rates = { \"192.0.2.5\" = \"10MB/s\", \"fd00::5\" = \"80Mbit/s\" }", func(c Config) bool {
			return c.RateDev == "eth1" && len(c.Manual.ReadRates) == 2
		}},
		{"read rates on htb", "backend = \"htb\"\ndev = \"eth1\"\n[manual]\nread_rates = { \"192.0.2.5\" = \"10MB/s\" }", func(c Config) bool { return c.Backend == "htb" }},
		{"bit rate threshold", `write_threshold = "8Mbit/s"`, func(c Config) bool { return c.WriteThreshold == 1e6 }},
		{"ports replace", "ports = [3260, 3261]", func(c Config) bool { return reflect.DeepEqual(c.Ports, []int{3260, 3261}) }},
		{"static", `[discovery]
adapter = "static"
[[static.consumers]]
resource = "pool"
addr = "192.0.2.1"
device = "/dev/loop0"
[[static.consumers]]
resource = "pool"
addr = "2001:db8::2"
device = "dm-1"`, func(c Config) bool { return len(c.Static.Consumers) == 2 && c.Static.Consumers[1].Device == "dm-1" }},
		{"manual", "policy = \"manual\"\n[manual]\nprotected = [\"192.0.2.9\"]\nthrottle = [\"192.0.2.5\", \"iqn.2026-11.x:y\"]", func(c Config) bool { return len(c.Manual.Throttle) == 2 }},
		{"listen disabled", `listen = ""`, func(c Config) bool { return c.Listen == "" }},
		{"headroom fixed", `headroom = 0.2`, func(c Config) bool { return c.Headroom == Headroom{Value: 0.2} }},
		{"headroom 0 as the thesis", `headroom = 0`, func(c Config) bool { return c.Headroom == Headroom{} }},
		// A value's bounds are its owner's (cmd/sanqos checks them); the
		// file takes any value of the right type.
		{"kp out of range is data here", "[pid]\nkp = -1", func(c Config) bool { return c.PID.Kp == -1 }},
		{"pid", "[pid]\nkp = 1.5\nti = \"2s\"\ntd = \"0s\"\nu_max = \"40ms\"", func(c Config) bool {
			return reflect.DeepEqual(c.PID, PID{Kp: 1.5, Ti: Duration{2 * time.Second}, UMax: Duration{40 * time.Millisecond}})
		}},
		{"rules off", "[pid]\nrules_off = [\"armed\", \"gain\"]", func(c Config) bool {
			return slices.Equal(c.PID.RulesOff, []string{"armed", "gain"})
		}},
	}
	for _, tt := range tests {
		c, err := Load(write(t, tt.text))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !tt.check(c) {
			t.Errorf("%s: wrong result %+v", tt.name, c)
		}
	}
}

func TestLoadBad(t *testing.T) {
	// The values other packages own are refused by them, in cmd/sanqos
	// (TestOwnersRefuseInKeys); here what the file itself gets wrong.
	tests := []struct {
		name, text string
		want       []string // all must appear in the error
	}{
		{"headroom word", `headroom = "some"`, []string{"headroom", `"some"`, "fraction"}},
		{"headroom auto", `headroom = "auto"`, []string{"headroom", "no longer"}},
		{"tick not a duration", `tick = "fast"`, []string{"tick", `"fast"`, "duration"}},
		{"tick bare number", `tick = 100`, []string{"tick", "unit"}},
		{"unknown key", `tikc = "100ms"`, []string{"unknown key tikc"}},
		{"unknown nested key", "[pid]\nkd = 1", []string{"unknown key pid.kd"}},
		{"unknown resource key", "[resources.\"a\"]\nthreshhold = \"1ms\"", []string{"resources.a.threshhold"}},
		{"queue_num string", `queue_num = "1"`, []string{"queue_num"}},
		{"ports empty", "ports = []", []string{"ports", "at least one"}},
		{"rate garbage", `write_threshold = "fast"`, []string{"write_threshold", "rate"}},
		{"adapter", "[discovery]\nadapter = \"iet\"", []string{"discovery.adapter"}},
		{"tgt port", "[discovery]\ntgt_control_port = -2", []string{"discovery.tgt_control_port = -2"}},
		{"lio root relative", "[discovery]\nlio_root = \"sys/kernel\"", []string{"discovery.lio_root", "absolute"}},
		{"static without adapter", "[[static.consumers]]\nresource = \"p\"\naddr = \"192.0.2.1\"\ndevice = \"sda\"", []string{"static.consumers", `adapter = "static"`}},
		{"static empty", "[discovery]\nadapter = \"static\"", []string{"static.consumers = []"}},
		{"static bad addr", "[discovery]\nadapter = \"static\"\n[[static.consumers]]\nresource = \"p\"\naddr = \"host1\"\ndevice = \"sda\"", []string{`static.consumers[0].addr = "host1"`}},
		{"static no device", "[discovery]\nadapter = \"static\"\n[[static.consumers]]\nresource = \"p\"\naddr = \"192.0.2.1\"", []string{"static.consumers[0].device"}},
		{"read rate by name", "rate_dev = \"eth1\"\n[manual]\nread_rates = { \"iqn.2026-11.org.example:db\" = \"10MB/s\" }", []string{"not an IP address", "by address"}},
		{"listen", `listen = "9469"`, []string{`listen = "9469"`, "HOST:PORT"}},
		{"socket", `socket = "sanqos.sock"`, []string{"socket", "absolute"}},
		{"syntax", "tick = \"100ms\"\nthreshold = 15 ms\n", []string{"line 2"}},
		{"wrong type", `ports = "3260"`, []string{"ports"}},
	}
	for _, tt := range tests {
		p := write(t, tt.text)
		_, err := Load(p)
		if err == nil {
			t.Errorf("%s: loaded without error", tt.name)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "config "+p+": ") {
			t.Errorf("%s: error %q does not start with the file name", tt.name, msg)
		}
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q does not contain %q", tt.name, msg, w)
			}
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "nosuch.toml")); err == nil || !strings.Contains(err.Error(), "nosuch.toml") || !strings.Contains(err.Error(), "leave --config out") {
		t.Errorf("missing file: err = %v, want one naming the file and saying what to do", err)
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	p := write(t, "tick = \"50ms\"\nthreshold = \"30ms\"\n[pid]\nkp = 2.0")
	def := Default()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def.RegisterFlags(fs)
	// Flags are parsed before the file is read (the file's path is a flag
	// itself), and must still win over it.
	if err := fs.Parse([]string{"--threshold", "25ms", "--ports", "3260,3261", "--write-threshold", "1MB/s", "--adapter", "lio", "--headroom", "0.1"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyFlags(fs); err != nil {
		t.Fatal(err)
	}
	if c.Tick.Duration != 50*time.Millisecond || c.PID.Kp != 2 {
		t.Errorf("file values lost: tick %v kp %v", c.Tick, c.PID.Kp)
	}
	if c.Threshold.Duration != 25*time.Millisecond || !reflect.DeepEqual(c.Ports, []int{3260, 3261}) || c.WriteThreshold != 1e6 || c.Discovery.Adapter != "lio" ||
		c.Headroom != (Headroom{Value: 0.1}) {
		t.Errorf("flags did not override: %+v", c)
	}
	// Help shows defaults.
	if f := fs.Lookup("tick"); f.DefValue != "100ms" {
		t.Errorf("--tick default shown as %q", f.DefValue)
	}
	if f := fs.Lookup("headroom"); f.DefValue != "0.15" {
		t.Errorf("--headroom default shown as %q", f.DefValue)
	}
}

func TestFlagErrors(t *testing.T) {
	def := Default()
	// Syntax errors are caught at parse time.
	for _, args := range [][]string{{"--tick", "soon"}, {"--kp", "x"}, {"--ports", "a,b"}, {"--write-leave", "lots"}, {"--headroom", "lots"}} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		def.RegisterFlags(fs)
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v parsed without error", args)
		}
	}
	// Errors of the keys config owns name the flag and the key.
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def.RegisterFlags(fs)
	if err := fs.Parse([]string{"--socket", "rel.sock"}); err != nil {
		t.Fatal(err)
	}
	c := Default()
	err := c.ApplyFlags(fs)
	if err == nil || !strings.Contains(err.Error(), `--socket (socket) = "rel.sock": must be an absolute path`) {
		t.Errorf("err = %v, want one naming --socket and socket", err)
	}
	if got := c.Origin("socket"); got != "--socket" {
		t.Errorf("Origin(socket) = %q, want --socket", got)
	}
}

// TestAckDelay: ack_delay is on by default, set by the file, and the
// bare --ack-delay flag (or --ack-delay=false) overrides the file.
func TestAckDelay(t *testing.T) {
	if !Default().AckDelay {
		t.Error("ack_delay is off by default, want on")
	}
	for _, c := range []struct {
		file string
		args []string
		want bool
	}{
		{"", nil, true},
		{"ack_delay = false", nil, false},
		{"ack_delay = false", []string{"--ack-delay"}, true},
		{"ack_delay = true", []string{"--ack-delay=false"}, false},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		def := Default()
		def.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		cfg, err := Load(write(t, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.ApplyFlags(fs); err != nil {
			t.Fatal(err)
		}
		if cfg.AckDelay != c.want {
			t.Errorf("file %q, flags %v: AckDelay %v, want %v", c.file, c.args, cfg.AckDelay, c.want)
		}
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := Default()
	def.RegisterFlags(fs)
	if err := fs.Parse([]string{"--ack-delay=maybe"}); err == nil {
		t.Error("--ack-delay=maybe parsed without error")
	}
	if _, err := Load(write(t, `ack_delay = "yes"`)); err == nil {
		t.Error(`ack_delay = "yes" loaded without error`)
	}
}

// TestEncodedConfigLoadsBack: the lab writes each run's configuration by
// encoding a Config; what it writes must load back as it was.
func TestEncodedConfigLoadsBack(t *testing.T) {
	for _, h := range []Headroom{{Value: 0.2}, {}} {
		c := Default()
		c.Headroom = h
		var b strings.Builder
		if err := toml.NewEncoder(&b).Encode(c); err != nil {
			t.Fatal(err)
		}
		got, err := Load(write(t, b.String()))
		if err != nil {
			t.Fatalf("headroom %v: %v\n%s", h, err, b.String())
		}
		if got.Headroom != h {
			t.Errorf("headroom %v encoded, %v loaded", h, got.Headroom)
		}
	}
}

package throttle

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"10MB/s", 10_000_000},
		{"10 MB/s", 10_000_000},
		{"512KiB/s", 512 << 10},
		{"1.2GB/s", 1_200_000_000},
		{"80Mbit/s", 10_000_000},
		{"80mbit", 10_000_000},
		{"8kbit", 1000},
		{"1B/s", 1},
		{"10Gbit/s", MaxRate},
	} {
		got, err := ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "want a number and a unit"},
		{"MB/s", "want a number and a unit"},
		{"10", "want a number and a unit"},
		{"10mb/s", "unknown unit"},
		{"10MBps", "unknown unit"},
		{"0MB/s", "not above 0"},
		{"-5MB/s", "not above 0"},
		{"0.5B/s", "not above 0"},
		{"1..2MB/s", "not a number"},
		{"11Gbit/s", "above 1250MB/s"},
		{"1e3MB/s", "unknown unit"},
	} {
		if _, err := ParseRate(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRate(%q): error %v, want one containing %q", c.in, err, c.want)
		}
	}
}

func TestFormatRate(t *testing.T) {
	for b, want := range map[uint64]string{10_000_000: "10MB/s", 524_288: "524.288kB/s", 999: "999B/s", MaxRate: "1250MB/s"} {
		if got := FormatRate(b); got != want {
			t.Errorf("FormatRate(%d) = %q, want %q", b, got, want)
		}
		if b >= 1000 {
			if back, err := ParseRate(FormatRate(b)); err != nil || back != b {
				t.Errorf("ParseRate(FormatRate(%d)) = %d, %v", b, back, err)
			}
		}
	}
}

func TestLinkRate(t *testing.T) {
	root := t.TempDir()
	for dev, speed := range map[string]string{"eth0": "1000\n", "veth0": "-1\n", "bad0": "fast\n"} {
		if err := os.MkdirAll(filepath.Join(root, "class/net", dev), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "class/net", dev, "speed"), []byte(speed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := LinkRate(root, "eth0"); !ok || r != 125_000_000 {
		t.Errorf("eth0 at 1000 Mbit/s: %d %v, want 125000000 bytes/s", r, ok)
	}
	for _, dev := range []string{"veth0", "bad0", "missing0"} {
		if r, ok := LinkRate(root, dev); ok {
			t.Errorf("%s: %d, want unknown", dev, r)
		}
	}
}

// recBackend records what it is given.
type recBackend struct{ states []State }

func (b *recBackend) Name() string { return "rec" }
func (b *recBackend) Apply(_ context.Context, s State) error {
	b.states = append(b.states, s)
	return nil
}
func (b *recBackend) Stats() Stats { return Stats{PacketsHeld: 3} }
func (b *recBackend) Close() error { return nil }

// TestCompositeSplits: delays go to the delay backend, read rates to the
// htb classes, and neither sees the other's.
func TestCompositeSplits(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-t", Run: rec, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	d := &recBackend{}
	c := &Composite{Delay: d, Rate: h}
	t.Cleanup(func() { _ = c.Close() })
	a, b := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	s := State{Groups: []Group{
		{Name: "vg", Members: []netip.Addr{a}, WriteDelay: 5 * time.Millisecond},
		{Name: "manual-10.0.0.4", Members: []netip.Addr{b}, ReadRate: 10_000_000},
	}}
	if err := c.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	got := d.states[0]
	if len(got.Groups) != 2 || got.Groups[0].WriteDelay != 5*time.Millisecond || got.Groups[1].Active() || len(got.Groups[1].Members) != 0 {
		t.Errorf("delay backend got %+v, want the delay group and the rate group inactive and empty", got)
	}
	log := rec.Log.String()
	if !strings.Contains(log, "rate 10000000bps") || !strings.Contains(log, "-d 10.0.0.4/32") || strings.Contains(log, "-d 10.0.0.3/32") {
		t.Errorf("htb commands do not cap 10.0.0.4 alone at 10 MB/s:\n%s", log)
	}
	if c.Name() != "rec+htb" || c.Stats().PacketsHeld != 3 || KindsOf(c) != (Kinds{Delay: true, Rate: true}) {
		t.Errorf("name %q, stats %+v, kinds %+v", c.Name(), c.Stats(), KindsOf(c))
	}
	if KindsOf(h) != (Kinds{Rate: true}) || KindsOf(d) != (Kinds{Delay: true}) {
		t.Errorf("kinds: htb %+v, delay backend %+v", KindsOf(h), KindsOf(d))
	}
}

func TestOpenRefusesRateDevBesideHTB(t *testing.T) {
	for _, b := range []string{"htb", "dry-run"} {
		if _, err := Open(context.Background(), Options{Backend: b, RateDev: "veth0"}); err == nil || !strings.Contains(err.Error(), "needs none") {
			t.Errorf("backend %s with a rate dev: %v", b, err)
		}
	}
}

package diskemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

func TestFixedModelQueuesFIFO(t *testing.T) {
	m := &FixedModel{Service: 5 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	cases := []struct {
		at   time.Duration
		want time.Duration
	}{
		{0, 5 * time.Millisecond},                     // idle: service only
		{1 * time.Millisecond, 10 * time.Millisecond}, // behind the first
		{2 * time.Millisecond, 15 * time.Millisecond},
		{20 * time.Millisecond, 25 * time.Millisecond}, // idle again
	}
	for _, c := range cases {
		if got := m.Submit(t0.Add(c.at), Read, 0, 8192, 1).Sub(t0); got != c.want {
			t.Errorf("submit at %v completes at %v, want %v", c.at, got, c.want)
		}
	}
}

func TestNewModel(t *testing.T) {
	for _, name := range []string{"thesis-2010", "ssd", "ram", "fixed:5ms", "fixed:0s"} {
		if _, err := NewModel(name, 1); err != nil {
			t.Errorf("NewModel(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "thesis", "fixed:", "fixed:-1ms", "fixed:5"} {
		_, err := NewModel(name, 1)
		if err == nil {
			t.Errorf("NewModel(%q) succeeded", name)
			continue
		}
		if !strings.Contains(err.Error(), "fixed:") {
			t.Errorf("NewModel(%q) error %q does not say what to use", name, err)
		}
	}
	m, _ := NewModel("ram", 1)
	now := time.Now()
	if got := m.Submit(now, Write, 1<<30, 1<<20, 1); !got.Equal(now) {
		t.Errorf("ram completes %v after submit, want 0", got.Sub(now))
	}
}

func TestRegionFor(t *testing.T) {
	p, _ := diskmodel.ProfileByName("thesis-2010")
	r := regionFor(diskmodel.New(p, 1))
	if r > p.Capacity()/8 || r <= 0 {
		t.Errorf("thesis region %d: want 0 < r <= capacity/8 = %d", r, p.Capacity()/8)
	}
	if r%(p.StripeBytes*int64(p.Spindles)) != 0 {
		t.Errorf("thesis region %d is not a whole number of stripes", r)
	}
	if got := regionFor(&FixedModel{}); got != 64<<30 {
		t.Errorf("region for a model without a profile: %d, want 64 GiB", got)
	}
}

func TestOptionsErrors(t *testing.T) {
	d := t.TempDir()
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"no mountpoint", Options{BackingDir: d, Profile: "ram"}, "mountpoint"},
		{"same dirs", Options{Mountpoint: d, BackingDir: d, Profile: "ram"}, "two directories"},
		{"no profile", Options{Mountpoint: filepath.Join(d, "m"), BackingDir: d}, "thesis-2010"},
		{"bad profile", Options{Mountpoint: filepath.Join(d, "m"), BackingDir: d, Profile: "floppy"}, "floppy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Mount(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Mount: %v, want an error mentioning %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(d, "m")); err == nil {
				t.Errorf("a rejected Mount created the mountpoint")
			}
		})
	}
}

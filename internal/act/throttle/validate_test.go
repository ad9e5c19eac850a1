package throttle

import (
	"slices"
	"testing"

	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/fielderr"
)

// TestOptionsValidate: every option Open would refuse is refused before
// anything is opened, as the field's error, once.
func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		o      Options
		fields []string // "Field" or "Field Key"
	}{
		{"defaults", Options{}, nil},
		{"dry run", Options{Backend: "dry-run"}, nil},
		{"nfqueue with rates", Options{Backend: "nfqueue", RateDev: "eth1"}, nil},
		{"unknown backend", Options{Backend: "tape"}, []string{"throttle.Options.Backend"}},
		{"edt without dev", Options{Backend: "edt"}, []string{"throttle.Options.Dev"}},
		{"dev with a slash", Options{Backend: "htb", Dev: "eth0/1"}, []string{"throttle.Options.Dev"}},
		{"dev of 16 bytes", Options{Backend: "netem", Dev: "abcdefghijklmnop"}, []string{"throttle.Options.Dev"}},
		{"rate dev beside htb", Options{Backend: "htb", Dev: "eth0", RateDev: "eth1"}, []string{"throttle.Options.RateDev"}},
		{"rate dev blank", Options{RateDev: "eth 1"}, []string{"throttle.Options.RateDev"}},
		{"split too large", Options{SmallSegment: plan.MaxSmallSegment + 1}, []string{"throttle.Options.SmallSegment"}},
		{"port split negative", Options{SmallSegments: map[uint16]int{2049: -1}}, []string{"throttle.Options.SmallSegments 2049"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fields, other := fielderr.Split(tt.o.Validate())
			if len(other) > 0 {
				t.Errorf("errors without a field: %v", other)
			}
			var got []string
			for _, f := range fields {
				id := f.Field
				if f.Key != "" {
					id += " " + f.Key
				}
				got = append(got, id)
			}
			if !slices.Equal(got, tt.fields) {
				t.Errorf("fields %v, want %v", got, tt.fields)
			}
		})
	}
}

func TestQueueNum(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want uint16
		ok   bool
	}{{1, 1, true}, {3260, 3260, true}, {65535, 65535, true}, {0, 0, false}, {65536, 0, false}, {-1, 0, false}} {
		q, err := QueueNum(tt.n)
		if (err == nil) != tt.ok || q != tt.want {
			t.Errorf("QueueNum(%d) = %d, %v; want %d, ok %v", tt.n, q, err, tt.want, tt.ok)
		}
	}
}

func TestCapsRates(t *testing.T) {
	for _, tt := range []struct {
		o    Options
		want bool
	}{
		{Options{Backend: "nfqueue"}, false},
		{Options{Backend: "nfqueue", RateDev: "eth1"}, true},
		{Options{Backend: "htb", Dev: "eth0"}, true},
		{Options{Backend: "dry-run"}, true},
		{Options{Backend: "edt", Dev: "eth0"}, false},
	} {
		if got := tt.o.CapsRates(); got != tt.want {
			t.Errorf("%+v: CapsRates %v, want %v", tt.o, got, tt.want)
		}
	}
}

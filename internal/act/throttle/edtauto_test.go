package throttle

import (
	"errors"
	"strings"
	"testing"
)

// TestChooseBackend: auto is edt only with a dev, rate_dev elsewhere,
// ack_delay on and every kernel feature; each missing piece makes it
// nfqueue and the reason names that piece (and the probe's words).
func TestChooseBackend(t *testing.T) {
	all := Options{Backend: Auto, Dev: "eth0", AckDelay: true}
	lacking := func(missing string) FeatureProbe {
		return func(f string) error {
			if f == missing {
				return errors.New(f + " says the fixture: not set")
			}
			return nil
		}
	}
	for _, c := range []struct {
		name    string
		o       Options
		probe   FeatureProbe
		backend string
		why     []string
	}{
		{"all there", all, lacking(""), "edt", []string{"auto: edt on eth0", "fq, clsact, cls_bpf, bpf"}},
		{"no fq", all, lacking("fq"), "nfqueue", []string{"lacks fq", "fq says the fixture"}},
		{"no clsact", all, lacking("clsact"), "nfqueue", []string{"lacks clsact"}},
		{"no cls_bpf", all, lacking("cls_bpf"), "nfqueue", []string{"lacks cls_bpf"}},
		{"no bpf", all, lacking("bpf"), "nfqueue", []string{"lacks bpf"}},
		{"no dev", Options{Backend: Auto, AckDelay: true}, lacking(""), "nfqueue", []string{"no dev"}},
		{"rate_dev on dev", Options{Backend: Auto, Dev: "eth0", RateDev: "eth0", AckDelay: true}, lacking(""), "nfqueue", []string{"rate_dev is dev eth0"}},
		{"rate_dev elsewhere", Options{Backend: Auto, Dev: "eth0", RateDev: "eth1", AckDelay: true}, lacking(""), "edt", []string{"auto: edt"}},
		{"ack_delay off", Options{Backend: Auto, Dev: "eth0"}, lacking(""), "nfqueue", []string{"ack_delay is off"}},
		{"asked for nfqueue", Options{Backend: "nfqueue", Dev: "eth0", AckDelay: true}, lacking(""), "nfqueue", []string{"as configured"}},
		{"asked for edt without fq", Options{Backend: "edt", Dev: "eth0"}, lacking("fq"), "edt", []string{"as configured"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ChooseBackend(c.o, c.probe)
			if got.Backend != c.backend {
				t.Errorf("backend %q, want %q (reason %q)", got.Backend, c.backend, got.Reason)
			}
			for _, w := range c.why {
				if !strings.Contains(got.Reason, w) {
					t.Errorf("reason %q does not say %q", got.Reason, w)
				}
			}
		})
	}
}

// TestChooseBackendAsksInOrder: the first missing feature is the reason,
// and a kernel without fq is not asked about BPF (the live probe of bpf
// loads a program).
func TestChooseBackendAsksInOrder(t *testing.T) {
	var asked []string
	got := ChooseBackend(Options{Backend: Auto, Dev: "eth0", AckDelay: true}, func(f string) error {
		asked = append(asked, f)
		if f == "fq" || f == "bpf" {
			return errors.New("absent")
		}
		return nil
	})
	if got.Backend != "nfqueue" || !strings.Contains(got.Reason, "lacks fq") {
		t.Errorf("got %+v, want nfqueue for the missing fq", got)
	}
	if strings.Join(asked, ",") != "fq" {
		t.Errorf("asked %v, want only fq", asked)
	}
}

// TestAutoIsResolvedBeforeOpen: Validate takes auto, Open refuses it
// unresolved rather than guess.
func TestAutoIsResolvedBeforeOpen(t *testing.T) {
	if err := (Options{Backend: Auto}).Validate(); err != nil {
		t.Errorf("Validate refuses auto without dev: %v", err)
	}
	if _, err := Open(t.Context(), Options{Backend: Auto}); err == nil || !strings.Contains(err.Error(), "ChooseBackend") {
		t.Errorf("Open(auto) = %v, want a refusal naming ChooseBackend", err)
	}
	err := (Options{Backend: "fast"}).Validate()
	if err == nil || !strings.Contains(err.Error(), `"auto"`) {
		t.Errorf("Validate(fast) = %v, want the list with auto", err)
	}
}

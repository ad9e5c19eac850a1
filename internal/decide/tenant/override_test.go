package tenant

import (
	"errors"
	"testing"

	"github.com/sanqos/sanqos/internal/fielderr"
)

func f(v float64) *float64 { return &v }

// TestOverLaysRuntimeTerms: an override changes the fields it sets and
// keeps the configuration's others, selects by address or by the
// configured name, and a runtime cap below the reservation lowers it.
func TestOverLaysRuntimeTerms(t *testing.T) {
	b, err := New([]Entry{
		{Match: []string{"10.0.0.5"}, Terms: Terms{Name: "db1", ThresholdMs: 10, ReserveBps: 20e6, CapBps: 50e6, BurstBytes: 1e6}},
		{Match: []string{"10.0.1.0/24"}, Terms: Terms{Name: "batch", Share: 2}},
	}, ReservationWins)
	if err != nil {
		t.Fatal(err)
	}
	o, err := b.Over([]Override{
		{Match: "db1", Share: f(4), CapBps: f(10e6)},
		{Match: "10.0.1.7", ThresholdMs: f(5)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := o.Terms(consumer("10.0.0.5"))
	want := Terms{Name: "db1", ThresholdMs: 10, Share: 4, ReserveBps: 10e6, CapBps: 10e6, BurstBytes: 1e6}
	if got != want {
		t.Errorf("db1: %+v, want %+v", got, want)
	}
	if got := o.Terms(consumer("10.0.1.7")); got.Share != 2 || got.ThresholdMs != 5 || got.Name != "batch" {
		t.Errorf("10.0.1.7: %+v", got)
	}
	if got := o.Terms(consumer("10.0.1.8")); got.ThresholdMs != 0 {
		t.Errorf("10.0.1.8 has the override of .7: %+v", got)
	}
	if o.Precedence() != ReservationWins || len(o.Overrides()) != 2 || b.Terms(consumer("10.0.0.5")).Share != 0 {
		t.Error("Over changed the book it came from, or lost its precedence or overrides")
	}
	if _, err := b.Over([]Override{{Match: "10.0.0.5", Share: f(-1)}}); err == nil {
		t.Error("a negative runtime share was taken")
	}
	var fe *fielderr.Error
	if _, err := b.Over([]Override{{Match: "10.0.0.5", ReserveBps: f(2e6), CapBps: f(1e6)}}); !errors.As(err, &fe) || fe.Key != "10.0.0.5" {
		t.Errorf("reserve over cap: %v, want a refusal keyed by the match", err)
	}
}

func TestNewRefusesDuplicateNamesAndThresholds(t *testing.T) {
	_, err := New([]Entry{{Match: []string{"10.0.0.1"}, Terms: Terms{Name: "a"}}, {Match: []string{"10.0.0.2"}, Terms: Terms{Name: "a"}}}, "")
	var fe *fielderr.Error
	if !errors.As(err, &fe) || fe.Field != "tenant.Terms.Name" {
		t.Errorf("duplicate names: %v", err)
	}
	for _, ms := range []float64{0.01, 20000} {
		_, err := New([]Entry{{Match: []string{"10.0.0.1"}, Terms: Terms{ThresholdMs: ms}}}, "")
		if !errors.As(err, &fe) || fe.Field != "tenant.Terms.ThresholdMs" {
			t.Errorf("threshold %vms: %v", ms, err)
		}
	}
}

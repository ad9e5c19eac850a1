package tenant

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

func consumer(addr string, iqns ...string) topology.Consumer {
	return topology.Consumer{Addr: netip.MustParseAddr(addr), IQNs: iqns}
}

func TestTermsMatchFirstEntry(t *testing.T) {
	b, err := New([]Entry{
		{Match: []string{"10.0.0.5"}, Terms: Terms{Name: "db1", ThresholdMs: 10}},
		{Match: []string{"iqn.2026-01.com.example:backup"}, Terms: Terms{Name: "backup", CapBps: 50e6}},
		{Match: []string{"10.0.1.0/24", "10.0.0.5"}, Terms: Terms{Name: "batch", Share: 4}},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    topology.Consumer
		want string
	}{
		{consumer("10.0.0.5"), "db1"},
		{consumer("::ffff:10.0.0.5"), "db1"},
		{consumer("10.0.0.9", "iqn.2026-01.com.example:backup"), "backup"},
		{consumer("10.0.1.77"), "batch"},
		{consumer("10.0.2.1"), ""},
	} {
		if got := b.Terms(tc.c).Name; got != tc.want {
			t.Errorf("Terms(%v %v).Name = %q, want %q", tc.c.Addr, tc.c.IQNs, got, tc.want)
		}
	}
	if b.Precedence() != PromiseWins {
		t.Errorf("default precedence %q, want %q", b.Precedence(), PromiseWins)
	}
	var nilBook *Book
	if got := nilBook.Terms(consumer("10.0.0.5")); got != (Terms{}) {
		t.Errorf("nil book gives %+v, want the defaults", got)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		e     Entry
		prec  Precedence
		field string
	}{
		{"no match", Entry{Terms: Terms{Name: "x"}}, "", "tenant.Entry.Match"},
		{"bad match", Entry{Match: []string{"a b"}}, "", "tenant.Entry.Match"},
		{"negative share", Entry{Match: []string{"10.0.0.1"}, Terms: Terms{Share: -1}}, "", "tenant.Terms.Share"},
		{"huge share", Entry{Match: []string{"10.0.0.1"}, Terms: Terms{Share: 5000}}, "", "tenant.Terms.Share"},
		{"reserve over cap", Entry{Match: []string{"10.0.0.1"}, Terms: Terms{ReserveBps: 2e6, CapBps: 1e6}}, "", "tenant.Terms.ReserveBps"},
		{"burst without cap", Entry{Match: []string{"10.0.0.1"}, Terms: Terms{BurstBytes: 1e6}}, "", "tenant.Terms.BurstBytes"},
		{"precedence", Entry{Match: []string{"10.0.0.1"}}, "both", "tenant.Book.Precedence"},
	} {
		_, err := New([]Entry{tc.e}, tc.prec)
		var fe *fielderr.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err %v, want a refusal of %s", tc.name, err, tc.field)
		}
	}
}

func TestLabel(t *testing.T) {
	c := consumer("10.0.0.5", "iqn.a", "iqn.b")
	if got := Label(c, Terms{Name: "db"}); got != "db" {
		t.Errorf("named: %q", got)
	}
	if got := Label(c, Terms{}); got != "iqn.a" {
		t.Errorf("by initiator: %q", got)
	}
	if got := Label(consumer("10.0.0.5"), Terms{}); got != "10.0.0.5" {
		t.Errorf("by address: %q", got)
	}
}

func TestLimitedAndShare(t *testing.T) {
	if (Terms{Name: "x", Share: 1}).Limited() {
		t.Error("a name and share 1 ask nothing")
	}
	if !(Terms{Share: 2}).Limited() || !(Terms{CapBps: 1}).Limited() {
		t.Error("a share of 2 or a cap asks something")
	}
	if (Terms{}).EffectiveShare() != 1 || (Terms{Share: 3}).EffectiveShare() != 3 {
		t.Error("effective share")
	}
}

func TestTermsString(t *testing.T) {
	for _, tc := range []struct {
		t    Terms
		want string
	}{
		{Terms{}, "defaults"},
		{Terms{Name: "x", Share: 1}, "defaults"},
		{Terms{Share: 4, ReserveBps: 20e6, CapBps: 50e6, BurstBytes: 100e6, ReadCapBps: 512e3, ThresholdMs: 8},
			"share 4, reserve 20MB/s, cap 50MB/s, burst 100MB, read cap 512kB/s, threshold 8ms"},
	} {
		if got := tc.t.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.t, got, tc.want)
		}
	}
}

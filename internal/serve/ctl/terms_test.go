package ctl

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// TestParseTerms: the terms a user types are read in their units, and
// what the tenant package would refuse is refused here, naming the flag.
func TestParseTerms(t *testing.T) {
	o, err := ParseTerms(TermsRequest{Match: " 10.0.0.5 ", Share: "4", Reserve: "20MB/s", Cap: "0", Threshold: "8ms"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Match != "10.0.0.5" || *o.Share != 4 || *o.ReserveBps != 20e6 || *o.CapBps != 0 || *o.ThresholdMs != 8 {
		t.Errorf("parsed %+v", o)
	}
	for _, tc := range []struct {
		r    TermsRequest
		want string
	}{
		{TermsRequest{Share: "2"}, "name the consumer"},
		{TermsRequest{Match: "db1"}, "at least one of --share"},
		{TermsRequest{Match: "db1", Share: "x"}, `--share "x" is not a number`},
		{TermsRequest{Match: "db1", Share: "-1"}, "not negative"},
		{TermsRequest{Match: "db1", Cap: "50"}, "with its unit"},
		{TermsRequest{Match: "db1", Cap: "50mb"}, "unknown unit"},
		{TermsRequest{Match: "db1", Reserve: "60MB/s", Cap: "50MB/s"}, "must not exceed the cap"},
		{TermsRequest{Match: "db1", Threshold: "20s"}, "between 100µs and 10s"},
		{TermsRequest{Match: "db1", Threshold: "fast"}, "not a duration"},
		{TermsRequest{Match: "a b", Share: "2"}, "initiator name"},
	} {
		if _, err := ParseTerms(tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}

// TestOverridesTerms: setting terms again changes only what is given;
// clearing removes them; each change moves the version.
func TestOverridesTerms(t *testing.T) {
	var o Overrides
	set := func(r TermsRequest) {
		t.Helper()
		ov, err := ParseTerms(r)
		if err != nil {
			t.Fatal(err)
		}
		o.SetTerms(ov)
	}
	set(TermsRequest{Match: "db1", Share: "4", Cap: "50MB/s"})
	_, v1 := o.TermOverrides()
	set(TermsRequest{Match: "db1", Cap: "0"})
	set(TermsRequest{Match: "10.0.0.9", Threshold: "5ms"})
	ts, v2 := o.TermOverrides()
	if v2 == v1 || len(ts) != 2 || *ts[0].Share != 4 || *ts[0].CapBps != 0 {
		t.Fatalf("after two sets: %+v version %d→%d", ts, v1, v2)
	}
	l := o.TermsList()
	if l[0].Terms != "share 4, cap none" || l[1].Terms != "threshold 5ms" {
		t.Errorf("list %+v", l)
	}
	if !o.ClearTerms("db1") || o.ClearTerms("db1") {
		t.Error("clearing db1 twice")
	}
	if ts, v3 := o.TermOverrides(); len(ts) != 1 || v3 == v2 {
		t.Errorf("after clearing: %+v", ts)
	}
}

func TestManualModeRefusesTerms(t *testing.T) {
	h := NewManualHandler(throttle.NewDryRun(slog.New(slog.NewTextHandler(io.Discard, nil))))
	r := h.Handle(context.Background(), Request{Op: OpTerms, TermsRequest: TermsRequest{Match: "10.0.0.5", Share: "2"}})
	if r.OK || !strings.Contains(r.Error, "manual mode") {
		t.Errorf("manual mode answered %+v", r)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/decide/engine"

	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

const tenantsText = `
rate_dev = "eth1"
[tenants]
conflict = "reservation"
[tenants.class.gold]
share = 4
threshold = "10ms"
cap = "90MB/s"
[[tenants.consumer]]
name = "db1"
match = ["10.0.0.5", "10.0.1.0/24", "iqn.2026-01.com.example:db1"]
class = "gold"
share = 2
reserve = "20MB/s"
cap = "50MB/s"
burst = "100MB"
read_cap = "80MB/s"
threshold = "8ms"
[[tenants.consumer]]
name = "web"
match = ["10.0.0.6"]
class = "gold"
`

// TestTenantsFromConfig: the [tenants] section reaches the engine as a
// book, in bytes and ms, a consumer's own keys over its class's.
func TestTenantsFromConfig(t *testing.T) {
	o, err := parseRunOptions([]string{"--config", writeConfig(t, tenantsText)}, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := o.engine.Tenants
	if b.Len() != 2 || b.Precedence() != tenant.ReservationWins {
		t.Fatalf("book of %d entries, precedence %q", b.Len(), b.Precedence())
	}
	db1 := tenant.Terms{Name: "db1", Class: "gold", Share: 2, ReserveBps: 20e6, CapBps: 50e6, BurstBytes: 100e6, ReadCapBps: 80e6, ThresholdMs: 8}
	web := tenant.Terms{Name: "web", Class: "gold", Share: 4, CapBps: 90e6, ThresholdMs: 10}
	for _, tc := range []struct {
		c    topology.Consumer
		want tenant.Terms
	}{
		{topology.Consumer{Addr: netip.MustParseAddr("10.0.1.9")}, db1},
		{topology.Consumer{Addr: netip.MustParseAddr("10.9.0.1"), IQNs: []string{"iqn.2026-01.com.example:db1"}}, db1},
		{topology.Consumer{Addr: netip.MustParseAddr("10.0.0.6")}, web},
		{topology.Consumer{Addr: netip.MustParseAddr("10.0.0.7")}, tenant.Terms{}},
	} {
		if got := b.Terms(tc.c); got != tc.want {
			t.Errorf("%v: %+v, want %+v", tc.c.Addr, got, tc.want)
		}
	}
}

// TestCheckReportsTenants: 'sanqos check' names each tenant it read with
// its terms, in its lines and its JSON.
func TestCheckReportsTenants(t *testing.T) {
	p := writeConfig(t, tenantsText)
	ck := checker{sys: fixtureSystem{root: "testdata/check/host"}, loadProbe: func([]string) error { return nil }}
	var out bytes.Buffer
	args := []string{"--config", p, "--consumer", "fs-a,10.0.0.5,loop0"}
	if err := runCheck(context.Background(), args, &out, io.Discard, ck); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"tenant     db1                ok       10.0.0.5, 10.0.1.0/24, iqn.2026-01.com.example:db1: share 2, reserve 20MB/s, cap 50MB/s, burst 100MB, read cap 80MB/s, threshold 8ms\n",
		"tenant     web                ok       10.0.0.6: share 4, cap 90MB/s, threshold 10ms\n",
		"tenant     conflict           ok       the reservation wins",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runCheck(context.Background(), append([]string{"--json"}, args...), &out, io.Discard, ck); err != nil {
		t.Fatal(err)
	}
	var r checkReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Config.Tenants) != 2 || r.Config.Tenants[0].Terms.ReserveBps != 20e6 || r.Config.Conflict != "reservation" {
		t.Errorf("JSON tenants %+v, conflict %q", r.Config.Tenants, r.Config.Conflict)
	}
}

// TestReloadTenants: a reload with a bad [tenants] section is refused in
// the user's key and the running book stays; a good one reaches the new
// engine.
func TestReloadTenants(t *testing.T) {
	dir := t.TempDir()
	args, o := portsConfig(t, dir, tenantsText)
	eng, err := engine.New(o.engine, o.topo)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.New(daemon.Options{Clock: clock.NewFake(time.Unix(0, 0)), Decider: daemon.FromEngine(eng, o.ports, nil),
		Stats: noStats{}, Backend: throttle.NewDryRun(log), Logger: log, Topology: o.topo})
	if err != nil {
		t.Fatal(err)
	}
	r := &reloader{args: args, cur: o, d: d, log: log}
	rewrite := func(text string) {
		if err := os.WriteFile(filepath.Join(dir, "c.toml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(strings.Replace(tenantsText, `class = "gold"`, `class = "platinum"`, 1))
	if err := r.reload(t.Context()); err == nil || !strings.Contains(err.Error(), `tenants.consumer "db1".class = "platinum"`) {
		t.Fatalf("reload of an unknown class: %v", err)
	}
	if r.cur.engine.Tenants != o.engine.Tenants {
		t.Error("a refused reload replaced the running book")
	}
	rewrite(strings.Replace(tenantsText, "share = 2", "share = 3", 1))
	if err := r.reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	db1 := topology.Consumer{Addr: netip.MustParseAddr("10.0.0.5")}
	if got := r.cur.engine.Tenants.Terms(db1).Share; got != 3 {
		t.Errorf("after the reload db1's share is %v, want 3", got)
	}
}

// TestExampleTenants: the example configuration's commented [tenants]
// section, uncommented, is a valid configuration with the terms it says.
func TestExampleTenants(t *testing.T) {
	b, err := os.ReadFile("../../deploy/sanqos.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "\n# [tenants]\n")
	if !ok {
		t.Fatal("the example has no commented [tenants] section")
	}
	var text strings.Builder
	text.WriteString("rate_dev = \"eth1\"\n[tenants]\n")
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		text.WriteString(strings.TrimPrefix(line, "# ") + "\n")
	}
	o, err := parseRunOptions([]string{"--config", writeConfig(t, text.String())}, false, io.Discard)
	if err != nil {
		t.Fatalf("%v\n%s", err, text.String())
	}
	got := o.engine.Tenants.Terms(topology.Consumer{Addr: netip.MustParseAddr("10.0.1.3")})
	want := tenant.Terms{Name: "db1", Class: "gold", Share: 2, ReserveBps: 20e6, CapBps: 50e6, BurstBytes: 100e6, ReadCapBps: 80e6, ThresholdMs: 8}
	if got != want {
		t.Errorf("the example's db1: %+v, want %+v", got, want)
	}
}

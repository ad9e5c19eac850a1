package qdisc

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

func TestEDTBackend(t *testing.T) {
	ctx := context.Background()
	k := &FakeEDT{}
	b := newEDT(k, 700*time.Millisecond, nil)
	a, c, v6 := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("fd00::5")
	s := plan.State{Groups: []plan.Group{
		{Name: "vg0", Members: []netip.Addr{a, v6}, WriteDelay: 5 * time.Millisecond},
		{Name: "vg1", Members: []netip.Addr{a, c}, ReadDelay: 8 * time.Millisecond},
	}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatalf("IPv4 and IPv6 members: %v", err)
	}
	want := []string{"set 10.0.0.3:3260 both 8ms split 128 ttl 700ms", "set 10.0.0.4:3260 read 8ms split 128 ttl 700ms", "set [fd00::5]:3260 write 5ms split 128 ttl 700ms"}
	if strings.Join(k.Calls, "; ") != "attach; "+strings.Join(want, "; ") {
		t.Errorf("calls %q, want %q", k.Calls, want)
	}
	k.Calls = nil
	if err := b.Renew(ctx); err != nil || strings.Join(k.Calls, "; ") != strings.Join(want, "; ") {
		t.Errorf("renew: %v, calls %q, want every entry set again", err, k.Calls)
	}
	k.Calls = nil
	if err := b.Apply(ctx, plan.State{Groups: []plan.Group{{Name: "vg1", Members: []netip.Addr{c}, ReadDelay: time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.Calls, "; "); got != "set 10.0.0.4:3260 read 1ms split 128 ttl 700ms; free 10.0.0.3:3260; free [fd00::5]:3260" {
		t.Errorf("lowered and freed: %q", got)
	}
	k.Held, k.Passed, k.Backlog, k.Dropped, k.Late = 7, 3, 12, 2, 40*time.Microsecond
	if st := b.Stats(); st.PacketsHeld != 7 || st.PacketsPassed != 3 || st.Backlog != 12 || st.Dropped != 2 || st.DelayErrorAvg != 40*time.Microsecond {
		t.Errorf("stats %+v, want the classifier's 7 held and 3 passed, fq's backlog of 12, 2 dropped, 40µs late", st)
	}
	k.Fail = true
	if err := b.Renew(ctx); err == nil {
		t.Error("a failed renewal was not reported")
	}
	k.Fail = false
	if err := b.Close(); err != nil || !k.Closed {
		t.Fatalf("close: %v, path closed %v", err, k.Closed)
	}
	if err := b.Apply(ctx, s); err == nil {
		t.Error("Apply after Close succeeded")
	}
	if b.Name() != "edt" {
		t.Errorf("name %q", b.Name())
	}
}

// TestEDTVerify: the backend reads its path back and reports what the
// path put back; Resync has the next Apply attach the filter again before
// it sets the entries, once, and after Close nothing is read back.
func TestEDTVerify(t *testing.T) {
	ctx := context.Background()
	k := &FakeEDT{}
	b := newEDT(k, time.Second, nil)
	v := b
	a := netip.MustParseAddr("10.0.0.3")
	s := plan.State{Groups: []plan.Group{{Name: "vg0", Members: []netip.Addr{a}, WriteDelay: 5 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	k.Calls = nil
	if d, err := v.Verify(ctx); err != nil || len(d) != 0 || strings.Join(k.Calls, "; ") != "verify force=false" {
		t.Errorf("intact path: drift %v, err %v, calls %q", d, err, k.Calls)
	}
	gone := owned.Drift{Object: "qdisc", Name: "veth0 clsact", Want: "clsact", Found: "absent"}
	k.Drift = []owned.Drift{gone, {Object: "filter", Name: "veth0 egress sanqos-edt", Want: "bpf", Found: "absent (with clsact)"}}
	d, err := v.Verify(ctx)
	if err != nil || len(d) != 2 || d[0] != gone {
		t.Errorf("clsact deleted: drift %v, err %v, want both reported", d, err)
	}
	k.VerifyErr = errors.New("someone else's root qdisc")
	if _, err := v.Verify(ctx); err == nil || !strings.Contains(err.Error(), "someone else's") {
		t.Errorf("a repair refused: %v", err)
	}
	k.VerifyErr = nil

	k.Calls = nil
	v.Resync()
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.Calls, "; "); got != "verify force=true; set 10.0.0.3:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("apply after Resync: %q, want the filter attached again, then the entries", got)
	}
	k.Calls = nil
	if err := b.Apply(ctx, s); err != nil || strings.Join(k.Calls, "; ") != "set 10.0.0.3:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("the apply after: %v %q, want no second re-attach", err, k.Calls)
	}
	// A re-attach that fails is tried again at the next Apply.
	v.Resync()
	k.VerifyErr = errors.New("no clsact")
	if err := b.Apply(ctx, s); err == nil {
		t.Error("a failed re-attach was not reported")
	}
	k.VerifyErr, k.Calls = nil, nil
	if err := b.Apply(ctx, s); err != nil || !strings.HasPrefix(strings.Join(k.Calls, "; "), "verify force=true") {
		t.Errorf("after a failed re-attach: %v %q", err, k.Calls)
	}
	b.Close()
	k.Calls = nil
	if d, err := v.Verify(ctx); d != nil || err != nil || len(k.Calls) != 0 {
		t.Errorf("after Close: %v %v %q", d, err, k.Calls)
	}
}

// TestEDTWarnsOfLosses: each read-back that finds fq dropped packets,
// or the classifier passed packets undelayed at its limit, since the
// last one logs a warning with the count, once for each.
func TestEDTWarnsOfLosses(t *testing.T) {
	ctx := context.Background()
	var log strings.Builder
	k := &FakeEDT{}
	b := newEDT(k, time.Second, slog.New(slog.NewTextHandler(&log, nil)))
	s := plan.State{Groups: []plan.Group{{Name: "vg0", Members: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, WriteDelay: 5 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dropped, bypassed uint64
		want              []string // the warnings' counts, none for none
	}{
		{0, 0, nil},
		{5, 0, []string{"dropped=5 since_start=5"}},
		{5, 0, nil},
		{9, 0, []string{"dropped=4 since_start=9"}},
		{9, 7, []string{"bypassed=7 since_start=7"}},
		{10, 8, []string{"dropped=1 since_start=10", "bypassed=1 since_start=8"}},
		{10, 8, nil},
	} {
		log.Reset()
		k.Dropped, k.Bypassed = c.dropped, c.bypassed
		if _, err := b.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		got := log.String()
		if n := strings.Count(got, "level=WARN"); n != len(c.want) {
			t.Errorf("fq dropped %d and the classifier bypassed %d in all: %d warnings, want %d: %q", c.dropped, c.bypassed, n, len(c.want), got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("fq dropped %d and the classifier bypassed %d in all: log %q, want %q", c.dropped, c.bypassed, got, w)
			}
		}
	}
}

// TestEDTPortsAndSplits: each member gets an entry on each port of its
// groups (3260 when none is set), with the port's small-segment split:
// the configured one, else the backend's default; a port that leaves
// its group is freed.
func TestEDTPortsAndSplits(t *testing.T) {
	ctx := context.Background()
	k := &FakeEDT{}
	b := newEDT(k, time.Second, nil)
	b.small, b.smallDef = map[uint16]int{2049: 256}, 100
	a := netip.MustParseAddr("10.0.0.3")
	s := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{a}, Ports: []uint16{2049, 3260}, WriteDelay: 5 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(k.Calls, "; "), "attach; set 10.0.0.3:2049 write 5ms split 256 ttl 1s; set 10.0.0.3:3260 write 5ms split 100 ttl 1s"; got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
	k.Calls = nil
	s.Groups[0].Ports = []uint16{2049}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(k.Calls, "; "), "set 10.0.0.3:2049 write 5ms split 256 ttl 1s; free 10.0.0.3:3260"; got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// TestEDTArms: a consumer a group arms gets an entry on each of the
// group's ports with the group's ArmedDelay and no delay of its own (the
// kernel activates it with its first write), a member the group also
// arms keeps its own delay beside it, every entry carries the rise
// limit (off when the backend's is zero), and an armed consumer no
// longer armed is freed. Withdrawing arming (as the backend did before)
// fails this test.
func TestEDTArms(t *testing.T) {
	ctx := context.Background()
	k := &FakeEDT{}
	b := newEDT(k, time.Second, nil)
	b.small = map[uint16]int{2049: 256}
	m, a := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	s := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{m}, Ports: []uint16{2049, 3260}, WriteDelay: 5 * time.Millisecond,
		Armed: []netip.Addr{a, m}, ArmedDelay: 4 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	want := "attach; set 10.0.0.3:2049 write 5ms split 256 ttl 1s armed 4ms; set 10.0.0.3:3260 write 5ms split 128 ttl 1s armed 4ms; " +
		"set 10.0.0.4:2049 " + direction.Direction(0).String() + " 0s split 256 ttl 1s armed 4ms; set 10.0.0.4:3260 " + direction.Direction(0).String() + " 0s split 128 ttl 1s armed 4ms"
	if got := strings.Join(k.Calls, "; "); got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}
	k.Calls = nil
	b.rise = packetpath.RiseLimit{}
	s.Groups[0].Armed = nil
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	want = "set 10.0.0.3:2049 write 5ms split 256 ttl 1s rise {Factor:0 Step:0s}; set 10.0.0.3:3260 write 5ms split 128 ttl 1s rise {Factor:0 Step:0s}; free 10.0.0.4:2049; free 10.0.0.4:3260"
	if got := strings.Join(k.Calls, "; "); got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}
	k.Limited = 9
	if rs := b.RiseStats(); rs.Limited != 9 {
		t.Errorf("rise stats %+v, want the classifier's 9 limited", rs)
	}
}

// TestEDTLinger: an entry no longer wanted stays at delay 0 (renewed)
// for linger before it is freed, so the program lowers the ramps of the
// flows that go on sending; a consumer wanted again meanwhile gets its
// delay back at once; with linger 0 it is freed at once.
func TestEDTLinger(t *testing.T) {
	ctx := context.Background()
	k := &FakeEDT{}
	b := newEDT(k, time.Second, nil)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	b.linger = 3 * time.Second
	a := netip.MustParseAddr("10.0.0.3")
	on := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{a}, WriteDelay: 5 * time.Millisecond}}}
	off := plan.State{Groups: []plan.Group{{Name: "vg"}}}
	step := func(what string, f func() error, want string) {
		t.Helper()
		k.Calls = nil
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(k.Calls, "; "); got != want {
			t.Errorf("%s: calls %q, want %q", what, got, want)
		}
	}
	apply := func(s plan.State) func() error { return func() error { return b.Apply(ctx, s) } }
	renew := func() error { return b.Renew(ctx) }
	step("throttled", apply(on), "attach; set 10.0.0.3:3260 write 5ms split 128 ttl 1s")
	step("released", apply(off), "set 10.0.0.3:3260 "+direction.Direction(0).String()+" 0s split 128 ttl 1s")
	now = now.Add(2 * time.Second)
	step("lingering", renew, "set 10.0.0.3:3260 "+direction.Direction(0).String()+" 0s split 128 ttl 1s")
	step("throttled again", apply(on), "set 10.0.0.3:3260 write 5ms split 128 ttl 1s")
	step("released again", apply(off), "set 10.0.0.3:3260 "+direction.Direction(0).String()+" 0s split 128 ttl 1s")
	now = now.Add(3 * time.Second)
	step("lingered long enough", renew, "free 10.0.0.3:3260")
	if len(b.cur) != 0 {
		t.Errorf("entries left: %v", b.cur)
	}
	b.linger = 0
	step("throttled within the idle grace", apply(on), "set 10.0.0.3:3260 write 5ms split 128 ttl 1s")
	step("released, no linger", apply(off), "free 10.0.0.3:3260")
}

// The edt backend attaches fq and its filter with the first delay and
// detaches them grace after the last, and verifies nothing while idle.
func TestEDTIdle(t *testing.T) {
	ctx := context.Background()
	idle, busy := idleStates()
	k := &FakeEDT{}
	b := newEDT(k, time.Second, nil)
	b.grace = 50 * time.Millisecond
	lock := func() func() { b.mu.Lock(); return b.mu.Unlock }
	calls := func() string { defer lock()(); s := strings.Join(k.Calls, "; "); k.Calls = nil; return s }
	if err := b.Apply(ctx, idle); err != nil || calls() != "" {
		t.Fatalf("idle: %v, want no call", err)
	}
	if d, err := b.Verify(ctx); d != nil || err != nil || calls() != "" {
		t.Errorf("Verify while idle: %v %v, want no look at the device", d, err)
	}
	if err := b.Apply(ctx, busy); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != "attach; set 10.0.0.2:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("first delay: %q, want attach then set", got)
	}
	if err := b.Apply(ctx, idle); err != nil || calls() != "free 10.0.0.2:3260" {
		t.Fatalf("idle again: %v", err)
	}
	if !waitLocked(t, lock, func() bool { return !b.attached && strings.Join(k.Calls, "; ") == "detach" }) {
		t.Errorf("not detached after the grace: %q", calls())
	}
	calls()
	// An armed consumer alone needs the path: the ingress program must
	// see its first write.
	armed := plan.State{Groups: []plan.Group{{Name: "vg", Armed: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, ArmedDelay: 4 * time.Millisecond}}}
	if err := b.Apply(ctx, armed); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != "attach; set 10.0.0.3:3260 "+direction.Direction(0).String()+" 0s split 128 ttl 1s armed 4ms" {
		t.Errorf("armed only: %q, want attach then the armed entry", got)
	}
	b.Close()
}

package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// fakeEDT records what the backend asks of the kernel path.
type fakeEDT struct {
	calls  []string
	closed bool
	fail   bool
	// drift is what the next Verify finds missing; verifyErr its error.
	drift     []Drift
	verifyErr error
	// held, passed and limited are what Totals reports.
	held, passed, limited uint64
}

func (f *fakeEDT) Verify(force bool) ([]Drift, error) {
	f.calls = append(f.calls, fmt.Sprintf("verify force=%v", force))
	d := f.drift
	f.drift = nil
	return d, f.verifyErr
}

func (f *fakeEDT) Set(a edtKey, e edtEntry, ttl time.Duration) error {
	if f.fail {
		return errors.New("map full")
	}
	c := fmt.Sprintf("set %s %s %v split %d ttl %v", a, e.dir, e.delay, e.split, ttl)
	if e.armed > 0 {
		c += fmt.Sprintf(" armed %v", e.armed)
	}
	if e.rise != DefaultRiseLimit {
		c += fmt.Sprintf(" rise %+v", e.rise)
	}
	f.calls = append(f.calls, c)
	return nil
}
func (f *fakeEDT) Free(a edtKey) error { f.calls = append(f.calls, "free "+a.String()); return nil }
func (f *fakeEDT) Close() error        { f.closed = true; return nil }
func (f *fakeEDT) Attach() error       { f.calls = append(f.calls, "attach"); return nil }
func (f *fakeEDT) Detach() error       { f.calls = append(f.calls, "detach"); return nil }
func (f *fakeEDT) Totals() (edtTotals, error) {
	return edtTotals{held: f.held, passed: f.passed, limited: f.limited}, nil
}

func TestEDTBackend(t *testing.T) {
	ctx := context.Background()
	k := &fakeEDT{}
	b := newEDT(k, 700*time.Millisecond, nil)
	a, c, v6 := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("fd00::5")
	s := State{Groups: []Group{
		{Name: "vg0", Members: []netip.Addr{a, v6}, WriteDelay: 5 * time.Millisecond},
		{Name: "vg1", Members: []netip.Addr{a, c}, ReadDelay: 8 * time.Millisecond},
	}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatalf("IPv4 and IPv6 members: %v", err)
	}
	want := []string{"set 10.0.0.3:3260 both 8ms split 128 ttl 700ms", "set 10.0.0.4:3260 read 8ms split 128 ttl 700ms", "set [fd00::5]:3260 write 5ms split 128 ttl 700ms"}
	if strings.Join(k.calls, "; ") != "attach; "+strings.Join(want, "; ") {
		t.Errorf("calls %q, want %q", k.calls, want)
	}
	k.calls = nil
	if err := b.Renew(ctx); err != nil || strings.Join(k.calls, "; ") != strings.Join(want, "; ") {
		t.Errorf("renew: %v, calls %q, want every entry set again", err, k.calls)
	}
	k.calls = nil
	if err := b.Apply(ctx, State{Groups: []Group{{Name: "vg1", Members: []netip.Addr{c}, ReadDelay: time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.calls, "; "); got != "set 10.0.0.4:3260 read 1ms split 128 ttl 700ms; free 10.0.0.3:3260; free [fd00::5]:3260" {
		t.Errorf("lowered and freed: %q", got)
	}
	k.held, k.passed = 7, 3
	if st := b.Stats(); st.PacketsHeld != 7 || st.PacketsPassed != 3 {
		t.Errorf("stats %+v, want the classifier's 7 held and 3 passed", st)
	}
	k.fail = true
	if err := b.Renew(ctx); err == nil {
		t.Error("a failed renewal was not reported")
	}
	k.fail = false
	if err := b.Close(); err != nil || !k.closed {
		t.Fatalf("close: %v, path closed %v", err, k.closed)
	}
	if err := b.Apply(ctx, s); err == nil {
		t.Error("Apply after Close succeeded")
	}
	if KindsOf(b) != (Kinds{Delay: true}) || b.Name() != "edt" {
		t.Errorf("kinds %+v name %q", KindsOf(b), b.Name())
	}
}

func TestEDTNeedsDev(t *testing.T) {
	if _, err := Open(context.Background(), Options{Backend: "edt"}); err == nil || !strings.Contains(err.Error(), "--dev") {
		t.Errorf("edt without a device: %v", err)
	}
}

// TestCompositeGoesOnPastARefusal: an IPv6 member the delay half (netem)
// refuses does not keep the rate half from being applied.
func TestCompositeGoesOnPastARefusal(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-t", Run: rec, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewNetem(ctx, TCConfig{Dev: "veth-d", Run: &recorder{}, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	c := &Composite{Delay: d, Rate: h}
	t.Cleanup(func() { _ = c.Close() })
	s := State{Groups: []Group{
		{Name: "vg", Members: []netip.Addr{netip.MustParseAddr("fd00::3")}, WriteDelay: 5 * time.Millisecond},
		{Name: "manual-10.0.0.4", Members: []netip.Addr{netip.MustParseAddr("10.0.0.4")}, ReadRate: 1e6},
	}}
	var ref *Refused
	if err := c.Apply(ctx, s); !errors.As(err, &ref) {
		t.Fatalf("%v, want a refusal of the IPv6 member", err)
	}
	if !strings.Contains(rec.b.String(), "-d 10.0.0.4/32") {
		t.Errorf("the rate was not applied:\n%s", rec.b.String())
	}
	if err := c.Renew(ctx); err != nil {
		t.Error(err)
	}
}

// TestTCBackendsApplyTheRest: an IPv6 member is refused by the htb and
// netem backends, and the IPv4 members beside it are programmed (they
// once refused the whole state, while the daemon logged the rest as in
// force).
func TestTCBackendsApplyTheRest(t *testing.T) {
	ctx := context.Background()
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{netip.MustParseAddr("fd00::3"), netip.MustParseAddr("10.0.0.4")},
		WriteDelay: 5 * time.Millisecond, ReadRate: 1e6}}}
	for _, open := range []func(TCConfig) (Backend, error){
		func(c TCConfig) (Backend, error) { return NewHTB(ctx, c) },
		func(c TCConfig) (Backend, error) { return NewNetem(ctx, c) },
	} {
		rec := &recorder{}
		k := owned.NewFakeKernel()
		b, err := open(TCConfig{Dev: "veth-t", Run: rec, Sets: k})
		if err != nil {
			t.Fatal(err)
		}
		var ref *Refused
		if err := b.Apply(ctx, s); !errors.As(err, &ref) || !strings.Contains(err.Error(), "fd00::3") {
			t.Errorf("%s: %v, want the IPv6 member refused", b.Name(), err)
		}
		if got := rec.b.String() + k.String(); !strings.Contains(got, "10.0.0.4") {
			t.Errorf("%s did not program the IPv4 member:\n%s", b.Name(), got)
		}
		b.Close()
	}
}

// TestEDTVerify: the backend reads its path back and reports what the
// path put back; Resync has the next Apply attach the filter again before
// it sets the entries, once, and after Close nothing is read back.
func TestEDTVerify(t *testing.T) {
	ctx := context.Background()
	k := &fakeEDT{}
	b := newEDT(k, time.Second, nil)
	var v Verifier = b
	a := netip.MustParseAddr("10.0.0.3")
	s := State{Groups: []Group{{Name: "vg0", Members: []netip.Addr{a}, WriteDelay: 5 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	k.calls = nil
	if d, err := v.Verify(ctx); err != nil || len(d) != 0 || strings.Join(k.calls, "; ") != "verify force=false" {
		t.Errorf("intact path: drift %v, err %v, calls %q", d, err, k.calls)
	}
	gone := Drift{Object: "qdisc", Name: "veth0 clsact", Want: "clsact", Found: "absent"}
	k.drift = []Drift{gone, {Object: "filter", Name: "veth0 egress sanqos-edt", Want: "bpf", Found: "absent (with clsact)"}}
	d, err := v.Verify(ctx)
	if err != nil || len(d) != 2 || d[0] != gone {
		t.Errorf("clsact deleted: drift %v, err %v, want both reported", d, err)
	}
	k.verifyErr = errors.New("someone else's root qdisc")
	if _, err := v.Verify(ctx); err == nil || !strings.Contains(err.Error(), "someone else's") {
		t.Errorf("a repair refused: %v", err)
	}
	k.verifyErr = nil

	k.calls = nil
	v.Resync()
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.calls, "; "); got != "verify force=true; set 10.0.0.3:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("apply after Resync: %q, want the filter attached again, then the entries", got)
	}
	k.calls = nil
	if err := b.Apply(ctx, s); err != nil || strings.Join(k.calls, "; ") != "set 10.0.0.3:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("the apply after: %v %q, want no second re-attach", err, k.calls)
	}
	// A re-attach that fails is tried again at the next Apply.
	v.Resync()
	k.verifyErr = errors.New("no clsact")
	if err := b.Apply(ctx, s); err == nil {
		t.Error("a failed re-attach was not reported")
	}
	k.verifyErr, k.calls = nil, nil
	if err := b.Apply(ctx, s); err != nil || !strings.HasPrefix(strings.Join(k.calls, "; "), "verify force=true") {
		t.Errorf("after a failed re-attach: %v %q", err, k.calls)
	}
	b.Close()
	k.calls = nil
	if d, err := v.Verify(ctx); d != nil || err != nil || len(k.calls) != 0 {
		t.Errorf("after Close: %v %v %q", d, err, k.calls)
	}
}

// TestEDTBesideHTBRates: with rate_dev, edt delays and an htb on another
// interface caps read rates, each from the same state (a Composite).
func TestEDTBesideHTBRates(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-r", Run: rec, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeEDT{}
	c := &Composite{Delay: newEDT(k, time.Second, nil), Rate: h}
	t.Cleanup(func() { _ = c.Close() })
	s := State{Groups: []Group{
		{Name: "vg", Members: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, WriteDelay: 5 * time.Millisecond},
		{Name: "manual-10.0.0.4", Members: []netip.Addr{netip.MustParseAddr("10.0.0.4")}, ReadRate: 1e6},
	}}
	if err := c.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.calls, "; "); got != "attach; set 10.0.0.3:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("edt calls %q, want the delay of 10.0.0.3 only", got)
	}
	if !strings.Contains(rec.b.String(), "-d 10.0.0.4/32") {
		t.Errorf("the read rate of 10.0.0.4 was not applied:\n%s", rec.b.String())
	}
}

// TestEDTPortsAndSplits: each member gets an entry on each port of its
// groups (3260 when none is set), with the port's small-segment split:
// the configured one, else the backend's default; a port that leaves
// its group is freed.
func TestEDTPortsAndSplits(t *testing.T) {
	ctx := context.Background()
	k := &fakeEDT{}
	b := newEDT(k, time.Second, nil)
	b.small, b.smallDef = map[uint16]int{2049: 256}, 100
	a := netip.MustParseAddr("10.0.0.3")
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{a}, Ports: []uint16{2049, 3260}, WriteDelay: 5 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(k.calls, "; "), "attach; set 10.0.0.3:2049 write 5ms split 256 ttl 1s; set 10.0.0.3:3260 write 5ms split 100 ttl 1s"; got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
	k.calls = nil
	s.Groups[0].Ports = []uint16{2049}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(k.calls, "; "), "set 10.0.0.3:2049 write 5ms split 256 ttl 1s; free 10.0.0.3:3260"; got != want {
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
	k := &fakeEDT{}
	b := newEDT(k, time.Second, nil)
	b.small = map[uint16]int{2049: 256}
	m, a := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{m}, Ports: []uint16{2049, 3260}, WriteDelay: 5 * time.Millisecond,
		Armed: []netip.Addr{a, m}, ArmedDelay: 4 * time.Millisecond}}}
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	want := "attach; set 10.0.0.3:2049 write 5ms split 256 ttl 1s armed 4ms; set 10.0.0.3:3260 write 5ms split 128 ttl 1s armed 4ms; " +
		"set 10.0.0.4:2049 " + Direction(0).String() + " 0s split 256 ttl 1s armed 4ms; set 10.0.0.4:3260 " + Direction(0).String() + " 0s split 128 ttl 1s armed 4ms"
	if got := strings.Join(k.calls, "; "); got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}
	k.calls = nil
	b.rise = RiseLimit{}
	s.Groups[0].Armed = nil
	if err := b.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	want = "set 10.0.0.3:2049 write 5ms split 256 ttl 1s rise {Factor:0 Step:0s}; set 10.0.0.3:3260 write 5ms split 128 ttl 1s rise {Factor:0 Step:0s}; free 10.0.0.4:2049; free 10.0.0.4:3260"
	if got := strings.Join(k.calls, "; "); got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}
	k.limited = 9
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
	k := &fakeEDT{}
	b := newEDT(k, time.Second, nil)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	b.linger = 3 * time.Second
	a := netip.MustParseAddr("10.0.0.3")
	on := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{a}, WriteDelay: 5 * time.Millisecond}}}
	off := State{Groups: []Group{{Name: "vg"}}}
	step := func(what string, f func() error, want string) {
		t.Helper()
		k.calls = nil
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(k.calls, "; "); got != want {
			t.Errorf("%s: calls %q, want %q", what, got, want)
		}
	}
	apply := func(s State) func() error { return func() error { return b.Apply(ctx, s) } }
	renew := func() error { return b.Renew(ctx) }
	step("throttled", apply(on), "attach; set 10.0.0.3:3260 write 5ms split 128 ttl 1s")
	step("released", apply(off), "set 10.0.0.3:3260 "+Direction(0).String()+" 0s split 128 ttl 1s")
	now = now.Add(2 * time.Second)
	step("lingering", renew, "set 10.0.0.3:3260 "+Direction(0).String()+" 0s split 128 ttl 1s")
	step("throttled again", apply(on), "set 10.0.0.3:3260 write 5ms split 128 ttl 1s")
	step("released again", apply(off), "set 10.0.0.3:3260 "+Direction(0).String()+" 0s split 128 ttl 1s")
	now = now.Add(3 * time.Second)
	step("lingered long enough", renew, "free 10.0.0.3:3260")
	if len(b.cur) != 0 {
		t.Errorf("entries left: %v", b.cur)
	}
	b.linger = 0
	step("throttled within the idle grace", apply(on), "set 10.0.0.3:3260 write 5ms split 128 ttl 1s")
	step("released, no linger", apply(off), "free 10.0.0.3:3260")
}

package throttle

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/qdisc"
)

func TestEDTNeedsDev(t *testing.T) {
	if _, err := Open(context.Background(), Options{Backend: "edt"}); err == nil || !strings.Contains(err.Error(), "--dev") {
		t.Errorf("edt without a device: %v", err)
	}
}

// TestCompositeGoesOnPastARefusal: an IPv6 member the delay half (netem)
// refuses does not keep the rate half from being applied.
func TestCompositeGoesOnPastARefusal(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-t", Run: rec, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewNetem(ctx, TCConfig{Dev: "veth-d", Run: &acttest.Recorder{}, Sets: owned.NewFakeKernel()})
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
	if !strings.Contains(rec.Log.String(), "-d 10.0.0.4/32") {
		t.Errorf("the rate was not applied:\n%s", rec.Log.String())
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
		rec := &acttest.Recorder{}
		k := owned.NewFakeKernel()
		b, err := open(TCConfig{Dev: "veth-t", Run: rec, Sets: k})
		if err != nil {
			t.Fatal(err)
		}
		var ref *Refused
		if err := b.Apply(ctx, s); !errors.As(err, &ref) || !strings.Contains(err.Error(), "fd00::3") {
			t.Errorf("%s: %v, want the IPv6 member refused", b.Name(), err)
		}
		if got := rec.Log.String() + k.String(); !strings.Contains(got, "10.0.0.4") {
			t.Errorf("%s did not program the IPv4 member:\n%s", b.Name(), got)
		}
		b.Close()
	}
}

// TestEDTBesideHTBRates: with rate_dev, edt delays and an htb on another
// interface caps read rates, each from the same state (a Composite).
func TestEDTBesideHTBRates(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-r", Run: rec, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	k := &qdisc.FakeEDT{}
	c := &Composite{Delay: qdisc.NewEDTOn(k, time.Second, nil), Rate: h}
	t.Cleanup(func() { _ = c.Close() })
	s := State{Groups: []Group{
		{Name: "vg", Members: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, WriteDelay: 5 * time.Millisecond},
		{Name: "manual-10.0.0.4", Members: []netip.Addr{netip.MustParseAddr("10.0.0.4")}, ReadRate: 1e6},
	}}
	if err := c.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.Calls, "; "); got != "attach; set 10.0.0.3:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("edt calls %q, want the delay of 10.0.0.3 only", got)
	}
	if !strings.Contains(rec.Log.String(), "-d 10.0.0.4/32") {
		t.Errorf("the read rate of 10.0.0.4 was not applied:\n%s", rec.Log.String())
	}
}

// TestEDTKinds: the edt backend delays and caps no rate.
func TestEDTKinds(t *testing.T) {
	b := qdisc.NewEDTOn(&qdisc.FakeEDT{}, time.Second, nil)
	if KindsOf(b) != (Kinds{Delay: true}) {
		t.Errorf("kinds %+v", KindsOf(b))
	}
}

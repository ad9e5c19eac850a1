package owned

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestFailedApplyKeepsStateInForce (issue 14, finding 3): when the kernel
// refuses a new chain, the throttle in force stays (chain and sets), the
// next ticks do not hammer the kernel, and once the kernel accepts again
// the new state goes in.
func TestFailedApplyKeepsStateInForce(t *testing.T) {
	ctx := context.Background()
	k := NewFakeKernel()
	rec := NewReconciler(k, k)
	now := time.Unix(1000, 0)
	rec.now = func() time.Time { return now }
	// The rules and sets of throttle.NfqueueRules for one group "vg" with
	// member 10.0.0.2, then with a second target port.
	sets := map[string][]netip.Addr{"sanqos-vg": {netip.MustParseAddr("10.0.0.2")}}
	rules1 := []string{"-A SANQOS -p tcp -m tcp --sport 3260 -m set --match-set sanqos-vg dst -j NFQUEUE --queue-num 1 --queue-bypass"}
	rules2 := []string{"-A SANQOS -p tcp -m multiport --sports 3260,3261 -m set --match-set sanqos-vg dst -j NFQUEUE --queue-num 1 --queue-bypass"}
	if err := rec.Apply(ctx, rules1, sets); err != nil {
		t.Fatal(err)
	}
	inForce := k.String()
	k.FailReplace = errors.New("iptables-restore: line 3 failed")
	tries := 0
	for i := range 50 { // 5 s of 100 ms ticks
		ops := k.Ops
		err := rec.Apply(ctx, rules2, sets)
		if err == nil {
			t.Fatal("apply reported success while the kernel refused the chain")
		}
		if i == 0 && !strings.Contains(err.Error(), "stay") {
			t.Fatalf("error %q does not say the throttles in force stay", err)
		}
		if got := k.String(); got != inForce {
			t.Fatalf("tick %d: after a failed apply the kernel holds\n%s\nwant what was in force:\n%s", i, got, inForce)
		}
		if k.Ops != ops || rec.lastErr == nil {
			t.Fatalf("tick %d: a failed apply changed the kernel", i)
		}
		if !now.Before(rec.retryAt) || i == 0 {
			tries++
		}
		now = now.Add(100 * time.Millisecond)
	}
	if tries > 8 {
		t.Fatalf("%d kernel tries in 5 s of failures, want a backoff (≤ 8)", tries)
	}
	k.FailReplace = nil
	now = now.Add(retryMax)
	if err := rec.Apply(ctx, rules2, sets); err != nil {
		t.Fatal(err)
	}
	want := NewFakeKernel()
	if err := NewReconciler(want, want).Apply(ctx, rules2, sets); err != nil {
		t.Fatal(err)
	}
	if got, want := k.String(), want.String(); got != want {
		t.Fatalf("after recovery the kernel holds\n%s\nwant\n%s", got, want)
	}
}

package nfqbackend

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// A jump someone else removed (iptables -t mangle -F POSTROUTING) comes
// back with the next replacement of the chain: the reconciler's memory of
// having added it once is not proof that it is still there (audit N1:
// a second throttle rewrote the chain and left it without its jump).
func TestReplaceRestoresAJumpRemovedByOthers(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	k := owned.NewFakeKernel()
	rc := owned.NewReconciler(&owned.Iptables{Run: rec}, k)
	one := plan.State{Groups: []plan.Group{{Name: "a", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: time.Millisecond}}}
	two := plan.State{Groups: append(one.Groups, plan.Group{Name: "b", Members: []netip.Addr{ip("10.0.0.3")}, WriteDelay: time.Millisecond})}
	if err := rc.Apply(ctx, NfqueueRules(one, 1), plan.WantSets(one)); err != nil {
		t.Fatal(err)
	}
	rec.Jump = false // flushed by another tool
	rec.Log.Reset()
	if err := rc.Apply(ctx, NfqueueRules(two, 1), plan.WantSets(two)); err != nil {
		t.Fatal(err)
	}
	if !rec.Jump {
		t.Errorf("the chain was replaced without its lost jump:\n%s", rec.Log.String())
	}
}

package nfqbackend

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// TestLiveArmedWriterHeldFromFirstWrite runs arming in the kernel: a
// consumer armed at 20 ms and in no set reads without being queued or
// delayed, is put in the group's set by its first write, has its writes
// held from then on (up to the delay once the rise limit has ramped), and
// leaves the set on its own once it stops writing; the INPUT jump goes
// with the arming rules.
func TestLiveArmedWriterHeldFromFirstWrite(t *testing.T) {
	l := newLab(t)
	b := l.backend(t)
	client := mustAddr(clientIP)
	const d = 20 * time.Millisecond
	armed := plan.State{Groups: []plan.Group{{Name: "tt", Armed: []netip.Addr{client}, ArmedDelay: d}}}
	if err := b.Apply(context.Background(), armed); err != nil {
		t.Fatal(err)
	}
	inSet := func() bool {
		sets, err := l.sets(t).List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for n, ms := range sets {
			if strings.HasSuffix(n, "-tt") && slices.Contains(ms, client) {
				return true
			}
		}
		return false
	}
	if save := l.ours(t); !strings.Contains(save, "-A INPUT -j SANQOS") || !strings.Contains(save, "--add-set") {
		t.Fatalf("no arming rule or INPUT jump installed:\n%s", save)
	}

	r := l.dial('r')
	defer r.Close()
	reads := l.ios(r, 'r', 30)
	if inSet() {
		t.Fatal("reads armed the reader: it is in the set")
	}
	if s := b.Stats(); s.PacketsHeld != 0 {
		t.Fatalf("reads of an armed consumer were held: %d packets", s.PacketsHeld)
	}

	w := l.dial('w')
	defer w.Close()
	first := l.ios(w, 'w', 1)
	if !inSet() {
		t.Fatal("the first write did not put the armed consumer in the set")
	}
	l.pastRampIOs(w, 'w')
	held := median(l.ios(w, 'w', 10))
	t.Logf("reads median %v; first write %v; writes past the ramp median %v (armed at %v)", median(reads), first[0], held, d)
	if held < d-time.Millisecond {
		t.Errorf("writes of the armed consumer took %v, want at least its armed delay %v less 1 ms", held, d)
	}
	if s := b.Stats(); s.PacketsHeld == 0 {
		t.Error("no packet of the armed writer was held")
	}

	// The daemon never made it a member: the kernel's entry lapses.
	deadline := time.Now().Add(time.Duration(owned.ArmTimeout)*time.Second + 2*time.Second)
	for inSet() {
		if time.Now().After(deadline) {
			t.Fatalf("the armed consumer stayed in the set %v after its last write", time.Duration(owned.ArmTimeout)*time.Second+2*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Back after the pause, on the same connection (whose SRTT still
	// holds the delay): held at the delay from its first write, no ramp.
	back := l.ios(w, 'w', 1)[0]
	t.Logf("first write after the pause %v", back)
	if !inSet() || back < d-time.Millisecond {
		t.Errorf("first write after the pause took %v (in the set again: %v), want the armed %v at once", back, inSet(), d)
	}

	if err := b.Apply(context.Background(), plan.State{Groups: []plan.Group{{Name: "tt"}}}); err != nil {
		t.Fatal(err)
	}
	if save := l.ours(t); strings.Contains(save, "INPUT") || strings.Contains(save, "--add-set") {
		t.Fatalf("disarming left the arming rules or the INPUT jump:\n%s", save)
	}
	for deadline := time.Now().Add(3 * time.Second); inSet(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the kernel's entry outlived its timeout after disarming")
		}
	}
	l.ios(w, 'w', 5)
	if inSet() {
		t.Fatal("a disarmed consumer was put in the set by its writes")
	}
}

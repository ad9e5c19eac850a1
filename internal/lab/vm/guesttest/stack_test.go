package guesttest

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
	"github.com/sanqos/sanqos/internal/observe/discover"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

const configfs = "/sys/kernel/config/target"

// TestLIODiscovery reads the live configfs with the lio adapter.
func TestLIODiscovery(t *testing.T) {
	s := stack(t)
	groups, err := discover.NewLIO(configfs).Groups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Target != kstack.TargetIQN {
		t.Fatalf("groups = %+v, want one of target %s", groups, kstack.TargetIQN)
	}
	g := groups[0]
	var want []string
	for _, l := range s.LUNs {
		want = append(want, l.Dev)
	}
	if !slices.Equal(g.Backings, want) {
		t.Errorf("backings = %v, want %v", g.Backings, want)
	}
	got := sessionMap(g.Sessions)
	for _, in := range s.Initiators {
		if got[in.IQN] != in.IP {
			t.Errorf("session of %s: address %q, want %s (all: %v)", in.IQN, got[in.IQN], in.IP, got)
		}
	}
	// Each session uses the LUNs its ACL maps, not the whole group's.
	for _, ss := range g.Sessions {
		for _, in := range s.Initiators {
			if in.IQN != ss.Initiator {
				continue
			}
			var want []string
			for _, l := range s.LUNsOf(in) {
				want = append(want, s.LUNs[l].Dev)
			}
			if !slices.Equal(ss.Backings, want) {
				t.Errorf("%s: mapped backings %v, want %v", in.Name, ss.Backings, want)
			}
		}
	}

	// An initiator that logs out is gone at the next read, and back at
	// the next read after it logs in again: one discovery interval.
	ctx := context.Background()
	in := s.Initiators[1]
	if err := s.Logout(ctx, in); err != nil {
		t.Fatal(err)
	}
	groups, err = discover.NewLIO(configfs).Groups()
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionMap(groups[0].Sessions); got[in.IQN] != "" || len(got) != len(s.Initiators)-1 {
		t.Errorf("after %s logged out: sessions %v", in.Name, got)
	}
	d, err := s.Login(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	disks[in.Name] = d
	groups, err = discover.NewLIO(configfs).Groups()
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionMap(groups[0].Sessions); got[in.IQN] != in.IP {
		t.Errorf("after %s logged in again: sessions %v", in.Name, got)
	}
}

func sessionMap(ss []discover.LIOSession) map[string]string {
	m := map[string]string{}
	for _, s := range ss {
		var a []string
		for _, x := range s.Addrs {
			a = append(a, x.String())
		}
		m[s.Initiator] = strings.Join(a, ",")
	}
	return m
}

// TestLVMResolution discovers through lio and resolves through dm and
// LVM: the two LVs of one VG (over dm-delay over a loop) are one resource
// named by the VG; the LV of the other VG is another.
func TestLVMResolution(t *testing.T) {
	s := stack(t)
	d := discover.New(discover.NewLIO(configfs), topology.DefaultResolver(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	top, err := d.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u := d.Unresolved(); len(u) > 0 {
		t.Errorf("unresolved backing stores: %v", u)
	}
	byName := map[string]topology.Resource{}
	for _, r := range top.Resources {
		byName[r.Name] = r
		t.Logf("resource %s leaves %v", r.Name, r.Leaves)
		for _, c := range r.Consumers {
			t.Logf("  consumer %s %v device %s backing %s", c.Addr, c.IQNs, c.Device, c.Backing)
		}
	}
	want := map[string][]string{"vg-" + kstack.VG0: {"lun1", "lun2"}, "vg-" + kstack.VG1: {"lun3"}}
	if len(byName) != len(want) {
		t.Fatalf("resources %v, want %v", keys(byName), keys(want))
	}
	for name, lvs := range want {
		r, ok := byName[name]
		if !ok {
			t.Errorf("no resource %s (have %v)", name, keys(byName))
			continue
		}
		devs := map[string]bool{}
		addrs := map[netip.Addr]bool{}
		for _, c := range r.Consumers {
			devs[c.Backing] = true
			addrs[c.Addr] = true
		}
		if len(devs) != len(lvs) {
			t.Errorf("%s: backings %v, want the LVs %v", name, devs, lvs)
		}
		for _, lv := range lvs {
			found := false
			for dev := range devs {
				found = found || strings.HasSuffix(dev, "-"+lv)
			}
			if !found {
				t.Errorf("%s: no consumer on %s (have %v)", name, lv, devs)
			}
		}
		if len(addrs) != len(s.Initiators) {
			t.Errorf("%s: consumer addresses %v, want every initiator's", name, addrs)
		}
		// One consumer per initiator and LV of this VG mapped to it.
		n := 0
		for _, in := range s.Initiators {
			for _, l := range s.LUNsOf(in) {
				if "vg-"+s.LUNs[l].VG == name {
					n++
				}
			}
		}
		if len(r.Consumers) != n {
			t.Errorf("%s: %d consumers, want %d (one per initiator and LV mapped to it)", name, len(r.Consumers), n)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

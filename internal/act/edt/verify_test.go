//go:build linux

package edt

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestReadBack: what Verify makes of the qdisc and filter dumps, as the
// kernel gives them after each way of breaking the path. The repair
// itself is tested live (kernel lab, suite edt: TestEDTDaemonRepair).
func TestReadBack(t *testing.T) {
	const dev, id, armID = "veth0", 42, 44
	fq := (&EDT{link: &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: 3}}}).fq()
	// fq's own defaults, as `tc qdisc change dev veth0 root handle 5e: fq limit 10000 flow_limit 100` leaves them.
	fqDefaults := &netlink.Fq{QdiscAttrs: fq.QdiscAttrs, PacketLimit: 10000, FlowPacketLimit: 100, HorizonDropPolicy: netlink.HORIZON_DROP_POLICY_DROP}
	clsact := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{Parent: netlink.HANDLE_CLSACT, Handle: netlink.MakeHandle(0xffff, 0)}, QdiscType: "clsact"}
	dflt := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{Parent: netlink.HANDLE_ROOT}, QdiscType: "noqueue"}
	theirs := &netlink.Htb{QdiscAttrs: netlink.QdiscAttrs{Parent: netlink.HANDLE_ROOT, Handle: netlink.MakeHandle(1, 0)}}
	bpf := func(prog int, da bool) netlink.Filter {
		return &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Handle: filterHandle, Priority: filterPrio}, Name: FilterName, Id: prog, DirectAction: da}
	}
	arm := []netlink.Filter{&netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Handle: filterHandle, Priority: filterPrio}, Name: ArmFilterName, Id: armID, DirectAction: true}}
	elsewhere := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Handle: 1, Priority: 7}, Name: "cilium", Id: 9, DirectAction: true}
	for _, c := range []struct {
		name      string
		qdiscs    []netlink.Qdisc
		filters   []netlink.Filter
		want      []string // Object Name: Found
		rootOwned bool
		ingress   []netlink.Filter // default: our arming filter
		noIngress bool
	}{
		{"intact", []netlink.Qdisc{fq, clsact}, []netlink.Filter{elsewhere, bpf(id, true)}, nil, true, nil, false},
		{"fq's limits changed", []netlink.Qdisc{fqDefaults, clsact}, []netlink.Filter{bpf(id, true)}, []string{"qdisc veth0 root: fq 5e: limit 10000 flow_limit 100 horizon_drop"}, true, nil, false},
		{"root deleted", []netlink.Qdisc{dflt, clsact}, []netlink.Filter{bpf(id, true)}, []string{"qdisc veth0 root: noqueue 0:"}, false, nil, false},
		{"root replaced", []netlink.Qdisc{theirs, clsact}, []netlink.Filter{bpf(id, true)}, []string{"qdisc veth0 root: htb 1:"}, true, nil, false},
		{"clsact deleted", []netlink.Qdisc{fq}, nil,
			[]string{"qdisc veth0 clsact: absent", "filter veth0 egress sanqos-edt: absent (with clsact)", "filter veth0 ingress sanqos-edt-arm: absent (with clsact)"}, true, nil, false},
		{"filter deleted", []netlink.Qdisc{fq, clsact}, []netlink.Filter{elsewhere}, []string{"filter veth0 egress sanqos-edt: none"}, true, nil, false},
		{"program replaced", []netlink.Qdisc{fq, clsact}, []netlink.Filter{bpf(43, true)}, []string{`filter veth0 egress sanqos-edt: bpf "sanqos-edt" prog id 43`}, true, nil, false},
		{"not direct-action", []netlink.Qdisc{fq, clsact}, []netlink.Filter{bpf(id, false)}, []string{`filter veth0 egress sanqos-edt: bpf "sanqos-edt" prog id 42`}, true, nil, false},
		{"everything gone", []netlink.Qdisc{dflt}, nil,
			[]string{"qdisc veth0 root: noqueue 0:", "qdisc veth0 clsact: absent", "filter veth0 egress sanqos-edt: absent (with clsact)", "filter veth0 ingress sanqos-edt-arm: absent (with clsact)"}, false, nil, false},
		{"arming filter deleted", []netlink.Qdisc{fq, clsact}, []netlink.Filter{bpf(id, true)}, []string{"filter veth0 ingress sanqos-edt-arm: none"}, true, nil, true},
		{"arming program replaced", []netlink.Qdisc{fq, clsact}, []netlink.Filter{bpf(id, true)}, []string{`filter veth0 ingress sanqos-edt-arm: bpf "sanqos-edt" prog id 42`}, true, []netlink.Filter{bpf(id, true)}, false},
	} {
		var r readBack
		r.inspectQdiscs(c.qdiscs)
		if r.clsact {
			r.inspectFilters(c.filters, id)
			in := c.ingress
			if in == nil && !c.noIngress {
				in = arm
			}
			r.inspectArm(in, armID)
		}
		var got []string
		for _, d := range r.drifts(dev, id, armID) {
			got = append(got, d.Object+" "+d.Name+": "+d.Found)
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: drift\n%s\nwant\n%s", c.name, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
		if r.rootOwned != c.rootOwned {
			t.Errorf("%s: root owned %v, want %v (ours is put back only over the kernel's default)", c.name, r.rootOwned, c.rootOwned)
		}
	}
}

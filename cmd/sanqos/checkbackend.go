package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/config"
)

// backendNeeds is what each backend needs of the kernel (kernel lines)
// and of the process (capabilities), and why it is chosen.
var backendNeeds = map[string]struct {
	kernel []string
	caps   []int
	what   string
}{
	"nfqueue": {[]string{"iptables", "ipset", "mangle", "nfqueue"}, []int{12, 13, 23},
		"user-space delays through NFQUEUE: runs on any kernel with netfilter queueing"},
	"netem": {[]string{"iptables", "ipset", "mangle", "htb", "netem", "tc command"}, []int{12, 13},
		"the thesis's HTB root with netem leaves"},
	"htb": {[]string{"iptables", "ipset", "mangle", "htb", "tc command"}, []int{12, 13},
		"HTB rate caps"},
	"edt": {[]string{"fq", "clsact", "cls_bpf", "bpf", "tc command"}, []int{12, 39},
		"tc/BPF departure times with fq, failing open in the kernel"},
	"dry-run": {nil, nil, "logs what it would do; changes nothing"},
}

// capUse says what each capability is for, in the report.
var capUse = map[int]string{
	12: "iptables, ipsets, qdiscs and the NFQUEUE socket",
	13: "iptables' raw socket",
	23: "the real-time packet thread (else delays stretch under CPU load)",
	39: "the eBPF programs",
	38: "the eBPF block probe's tracepoints",
	19: "the socket adapter reading other processes' sockets",
}

// backend says which backend run would open and whether this host has
// what it needs, and lists the capabilities the run needs with those
// missing.
func (ck checker) backend(o runOptions, args []string, manual bool, kernel []checkItem, caps uint64, capsErr error) (checkBackend, []checkItem, []string) {
	name := o.backend.Backend
	src := "the default"
	switch {
	case flagValueIn(args, "backend") != "":
		src = "--backend"
	case o.config.Backend != config.Default().Backend:
		src = "backend in " + flagValueIn(args, "config")
	}
	asked := ""
	if name == throttle.Auto {
		// The kernel lines run asks too (resolveBackend).
		c := throttle.ChooseBackend(o.backend, kernelHas(kernel))
		asked, name, src = throttle.Auto, c.Backend, src+"; "+c.Reason
	}
	need := backendNeeds[name]
	b := checkBackend{Name: name, Asked: asked, Status: stOK, Needs: []string{}}
	b.Why = fmt.Sprintf("%s (%s): %s", name, src, need.what)
	status := map[string]checkItem{}
	for _, it := range kernel {
		status[it.Name] = it
	}
	kneeds := slices.Clone(need.kernel)
	if o.backend.RateDev != "" {
		kneeds = append(kneeds, "htb", "tc command")
	}
	var lacking []string
	for _, n := range kneeds {
		if slices.Contains(b.Needs, n) {
			continue
		}
		b.Needs = append(b.Needs, n)
		if st := status[n].Status; st == stMissing || st == stError {
			lacking = append(lacking, n)
		}
	}
	var why []string
	if len(lacking) > 0 {
		b.Status = stMissing
		b.Why += "; this host lacks " + strings.Join(lacking, ", ")
		why = append(why, "the kernel or host lacks "+strings.Join(lacking, ", "))
	}

	items, capWhy := ck.capabilities(&b, o, manual, caps, capsErr)
	return b, items, append(why, capWhy...)
}

// capabilities lists root and the capabilities the run needs, adding
// them to b.Needs; a missing one the backend needs makes b missing and
// is returned as a reason. The probe's and the socket adapter's only
// cost a feature.
func (ck checker) capabilities(b *checkBackend, o runOptions, manual bool, caps uint64, capsErr error) ([]checkItem, []string) {
	var why []string
	name := b.Name
	need := backendNeeds[name]
	var items []checkItem
	root := checkItem{Name: "root", Status: stOK, Detail: fmt.Sprintf("euid %d", ck.euid)}
	if name != "dry-run" && ck.euid != 0 {
		root.Status, root.Detail = stMissing, fmt.Sprintf("euid %d: run refuses the %s backend unless root", ck.euid, name)
		b.Status = stMissing
		why = append(why, "not root")
	}
	items = append(items, root)
	type want struct {
		cap      int
		required bool
	}
	var wants []want
	for _, c := range need.caps {
		// CAP_SYS_NICE only makes the packet thread real-time: without
		// it the daemon runs, its delays stretch under CPU load.
		wants = append(wants, want{c, c != 23})
	}
	if !manual && o.config.Probe != "off" {
		wants = append(wants, want{39, false}, want{38, false})
	}
	if !manual && !o.fixed && o.config.Discovery.Adapter == "socket" {
		wants = append(wants, want{19, false})
	}
	seen := map[int]bool{}
	for _, w := range wants {
		if seen[w.cap] {
			continue
		}
		seen[w.cap] = true
		it := checkItem{Name: capNames[w.cap], Status: stOK, Detail: capUse[w.cap]}
		b.Needs = append(b.Needs, capNames[w.cap])
		switch {
		case capsErr != nil:
			it.Status, it.Detail = stUnknown, capsErr.Error()
		case caps&(1<<w.cap) == 0:
			it.Status = stMissing
			if w.required {
				b.Status = stMissing
				why = append(why, "no "+capNames[w.cap])
			}
		}
		items = append(items, it)
	}
	return items, why
}

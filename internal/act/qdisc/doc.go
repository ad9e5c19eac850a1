// Package qdisc holds the data paths that the kernel's qdiscs run, built
// and torn down with tc: Netem, the thesis's path (an HTB root with one
// netem leaf per fixed delay), and HTB, which caps consumers' read
// bandwidth. Both share tcRoot: a root qdisc of their own handle on the
// device, put there by the first throttle and removed DefaultIdleGrace
// after the last, with an iptables chain and ipsets (package owned) that
// CLASSIFY each group's packets into its class. Each reads back what it
// installed (Verify) and rebuilds a root someone deleted.
//
// Package throttle opens them (Open) and hands them its State; the edt
// backend, also on tc, is still in throttle.
package qdisc

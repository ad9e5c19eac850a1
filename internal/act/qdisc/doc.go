// Package qdisc holds the data paths that the kernel runs in qdiscs of
// ours on the device, set up with tc: Netem, the thesis's path (an HTB
// root with one netem leaf per fixed delay), HTB, which caps consumers'
// read bandwidth, and EDT, departure times set by a BPF classifier
// (package act/edt) for an fq root, with entries that lapse unless
// renewed. Netem and HTB share tcRoot: a root qdisc of their own handle,
// put on the device by the first throttle and removed DefaultIdleGrace
// after the last, with an iptables chain and ipsets (package owned) that
// CLASSIFY each group's packets into its class. Each reads back what it
// installed (Verify) and puts back what someone removed.
//
// Package throttle opens them (Open) and hands them its State.
package qdisc

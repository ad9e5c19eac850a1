// Package owned is the part of the data path that deals with the kernel
// objects a sanqos instance owns in its network namespace, apart from
// the qdiscs: its iptables chain in the mangle table and its ipsets
// (Firewall and Sets, on iptables and netlink or on FakeKernel in tests),
// the names that say which instance made each (Owner), the instance lock
// that proves an instance alive (LockInstance, TryLockDead), and the
// Reconciler that installs a desired set of rules and sets, reads them
// back (Verify, Drift), puts back what another tool removed, and removes
// what a dead instance left (SweepDead).
//
// It knows rules and set members, not throttles: package throttle turns
// the daemon's State into the rules and sets of each backend and hands
// them to a Reconciler.
package owned

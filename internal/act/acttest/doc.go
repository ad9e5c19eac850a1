// Package acttest holds fakes of the kernel boundary for the data path's
// tests: a command runner that answers as iptables and tc would, a
// squatter of the instance lock's old abstract names, and hand-built
// packets. It is a package of its own, not a _test.go file, so that the
// tests of owned, qdisc, packetpath and throttle share one copy; only
// tests import it (internal/lint checks), and it imports nothing of the
// data path, so that those packages' own tests can.
package acttest

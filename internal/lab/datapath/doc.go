// Package datapath measures what sanqos's data path costs, side by side
// with no sanqos (issue 35): a target and a client network namespace
// joined by one veth pair, a TCP ping-pong whose replies a backend holds
// (hold error), a bulk flow whose every segment it holds (packets/s per
// core and CPU per delayed packet, from /proc/stat and the daemon's
// /proc/PID/stat), and an idle daemon beside a bulk upload and 4 KiB
// round trips in ABBA pairs (the median ratio and its distribution-free
// 99 % interval). The kernel lab's guest test (TestDatapathCost) and
// 'sanqos lab run datapath' both drive it; it needs root, ip, nsenter
// and tc, and no lab, disk or iSCSI target.
//
// Everything it creates is named with the sanqos prefix, is removed on
// every path, and what a killed earlier run left is removed first.
package datapath

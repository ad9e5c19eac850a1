// Package lab builds, on one Linux machine, the five-server iSCSI testbed of
// the thesis sanqos rebuilds: a target namespace (sanqos-bm) running tgtd,
// four initiator namespaces (sanqos-b2 … sanqos-b5) joined by a bridge that
// lives in its own namespace (sanqos-sw, so the host's network is never
// touched), and one LUN per initiator whose image sits on shared storage and
// is attached to its own loop device with direct I/O, so /proc/diskstats
// shows each LUN's real latency as the thesis's dm devices did.
//
// Everything the lab creates carries a sanqos-lab / sanqos-b* prefix and is
// recorded in /run/sanqos-lab; Cleanup removes it whether or not the lab
// that created it is still running, so a crashed run never leaves the
// machine dirty.
package lab

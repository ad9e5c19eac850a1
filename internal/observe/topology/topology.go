// Package topology describes what sanqos controls: shared resources (what
// saturates: a volume group, a disk pool, the file system holding LUN
// images) and the consumers (initiators) whose block devices land on them.
package topology

import "net/netip"

// Consumer is one initiator address using one block device on the target.
// Several sessions from that address to that device (multi-connection
// initiators, one session per thread) are one consumer: they share the
// device's counters and the address the throttle acts on.
type Consumer struct {
	// Addr is the initiator's IP address, the unit the throttle acts on.
	Addr netip.Addr
	// IQNs are the initiator names of those sessions where the target
	// reports them, sorted.
	IQNs []string
	// Target is the target name (IQN) the consumer is logged in to.
	Target string
	// Device is the kernel name of the block device serving the consumer
	// (as in /proc/diskstats: "loop3", "dm-0", "sdb").
	Device string
	// Backing is what the target was configured with (a path), for display.
	Backing string
}

// Resource is a shared thing that saturates, with its consumers.
type Resource struct {
	// Name is stable across discoveries (e.g. "vg-data", "fs-sda1",
	// "disk-sdb") and is used in ipset names and metrics labels.
	Name string
	// Leaves are the physical devices (or file system) the resource lands
	// on, for display and for proving that consumers share it.
	Leaves    []string
	Consumers []Consumer
	// ThresholdMs overrides the configured default threshold when > 0.
	ThresholdMs float64
	// Signal overrides the configured statistic the controller follows
	// (mean, p95, p99) when not empty.
	Signal string
}

// Topology is the complete picture at one discovery.
type Topology struct {
	Resources []Resource
}

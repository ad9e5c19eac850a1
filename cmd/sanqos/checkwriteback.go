package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// writebackHint is what check says of a resource whose clients write
// into a file system a server keeps in the page cache (the socket
// adapter's exports and images): a device without a dirty cap holds
// those writes until a client flushes (an NFS COMMIT) and writes them
// out at once, however slowly sanqos let them in, and the reader waits
// behind each write-out (docs/protocols.md, "NFS clients that commit in
// batches"). It names the devices whose BDI has no strict limit, or
// returns "" when every one has it, when the kernel has no such file,
// or when the resource is served from block devices.
func writebackHint(sys checkSystem, adapter string, res topology.Resource) string {
	if adapter != "socket" {
		return ""
	}
	var devs []string
	for _, c := range res.Consumers {
		if c.Device == "" || c.Backing == "" || strings.HasPrefix(c.Backing, "/dev/") || slices.Contains(devs, c.Device) {
			continue
		}
		b, err := sys.ReadFile("/sys/block/" + c.Device + "/bdi/strict_limit")
		if err != nil || strings.TrimSpace(string(b)) != "0" {
			continue
		}
		devs = append(devs, c.Device)
	}
	if len(devs) == 0 {
		return ""
	}
	slices.Sort(devs)
	return fmt.Sprintf("clients write through the page cache of %s, which keeps their data until they flush "+
		"and then writes it out at once: cap it so the delay reaches the disk (echo 1 > /sys/block/%s/bdi/strict_limit "+
		"and max_bytes; docs/protocols.md, \"NFS clients that commit in batches\")",
		strings.Join(devs, ", "), devs[0])
}

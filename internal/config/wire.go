package config

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
)

// Protocols other than iSCSI (issue 17): discovery by port, per-client
// write rates measured on the wire, and the small-segment split per port.
//
//	ports = [2049]
//	attribution = "auto"                       # wire rates where clients share a device
//	[discovery]
//	adapter = "socket"                         # clients of `ports` from the socket table
//	exports = ["/etc/ganesha/ganesha.conf"]    # optional: what the server serves
//	[small_segment]
//	2049 = 256                                 # bytes; defaults per protocol port
//
// Attribution is "auto" (count each client's bytes on the wire to and
// from the ports, in the kernel, and use them where several clients share
// one device, as NFS and NBD clients of one export do; on with the socket
// and static adapters, whose clients may share devices), "wire" (on with
// every adapter) or "device" (off: every client's write rate is its
// device's, right where each client has a device of its own, as iSCSI
// LUNs do).

// WireOn reports whether the per-client wire counters are to run.
func (c *Config) WireOn() bool {
	switch c.Attribution {
	case "wire":
		return true
	case "auto":
		return c.Discovery.Adapter == "socket" || c.Discovery.Adapter == "static"
	}
	return false
}

// validateWire checks the keys above.
func (c *Config) validateWire() error {
	switch c.Attribution {
	case "auto", "wire", "device":
	default:
		return fmt.Errorf("attribution = %q: must be \"auto\" (wire rates where clients share a device), \"wire\" or \"device\"", c.Attribution)
	}
	if len(c.Discovery.Exports) > 0 && c.Discovery.Adapter != "socket" {
		return fmt.Errorf("discovery.exports = %q: used only with discovery.adapter = \"socket\" (it is %q)", c.Discovery.Exports, c.Discovery.Adapter)
	}
	for _, e := range c.Discovery.Exports {
		if !filepath.IsAbs(e) {
			return fmt.Errorf("discovery.exports: %q must be an absolute path, like /etc/exports or /etc/ganesha/ganesha.conf", e)
		}
	}
	keys := make([]string, 0, len(c.SmallSegment))
	for k := range c.SmallSegment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// The split's bound is the data path's (the daemon asks it).
		p, err := strconv.Atoi(k)
		if err != nil || !c.hasPort(p) {
			return fmt.Errorf("small_segment.%s: the key must be one of the ports %v (the split is per storage port)", strconv.Quote(k), c.Ports)
		}
	}
	return nil
}

func (c *Config) hasPort(p int) bool {
	for _, q := range c.Ports {
		if q == p {
			return true
		}
	}
	return false
}

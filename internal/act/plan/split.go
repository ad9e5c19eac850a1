package plan

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/sanqos/sanqos/internal/fielderr"
)

// The small-segment split per storage port. What clocks a writer is what
// the target sends back while the writer sends data: pure ACKs and the
// protocol's short replies. Everything longer is read data. Where the
// line falls is a property of the protocol, so of the port: each default
// below carries the reply sizes measured on real servers and clients
// (TCP payload bytes of the segments the server sent, tcpdump on the
// server's veth, network namespaces of our own; testdata/replies/ has
// the per-packet captures and the commands, replies_test.go checks every
// default against them).
//
//   - iSCSI, 3260 (tgt 1.0.85, the lab's libiscsi load generator, 64 KiB
//     and 8 KiB writes, 8 KiB reads): R2T and SCSI Response PDUs are
//     48 bytes (a basic header segment, no digests, no sense data); read
//     data segments 424–65160 bytes (an 8 KiB Data-In of 8240 went as
//     7240 + 1000, 64 KiB reads left 424-byte tails). Split 128: the
//     48-byte PDUs with room for sense data, under any read segment seen.
//   - NFSv3, 2049 (nfs-ganesha 4.3 VFS, libnfs 4.0 nfs-cp): WRITE replies
//     140 bytes, COMMIT 132 (RPC record mark 4 + reply; with pre-op
//     attributes a WRITE reply is at most 164, which the lab saw);
//     GETATTR 116, ACCESS 124, LOOKUP 236, CREATE 268; READ replies are
//     132 bytes of header plus the data. Split 256: every WRITE and
//     COMMIT reply, and a READ of 128 bytes or more is above. The 128 of
//     iSCSI classed NFS writers' replies as reads.
//   - NBD, 10809 (qemu-nbd 7.2, qemu-io client, structured replies):
//     write and flush replies are 16-byte simple replies; option replies
//     18–66 during the handshake; read replies carry at least one
//     512-byte sector plus a 28-byte chunk header (512 B: 540, 4 KiB:
//     4124). Split 128.
//   - NVMe/TCP, 4420: not measured here (this kernel is built without
//     an NVMe target, CONFIG_NVME_TARGET is not set, and loads no
//     modules). From the NVMe/TCP transport specification
//     1.0: CapsuleResp and R2T PDUs are 24 bytes (28 with a header
//     digest), C2HData is a 24-byte header plus data. Split 128.
var DefaultSmallSegments = map[uint16]int{
	3260:  128,
	2049:  256,
	10809: 128,
	4420:  128,
}

// MaxSmallSegment bounds a configured split: beyond a typical MSS every
// segment would count as a writer's reply and reads would never be
// slowed apart from writes.
const MaxSmallSegment = 1400

// ValidateSmallSegments checks per-port splits; an error is a
// *fielderr.Error naming the port.
func ValidateSmallSegments(byPort map[uint16]int) error {
	ports := make([]uint16, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, p := range ports {
		if err := CheckSmall(byPort[p]); err != nil {
			return fielderr.At("throttle.Options.SmallSegments", "small segment of port", strconv.Itoa(int(p)), byPort[p], err.Error())
		}
	}
	return nil
}

// SmallOf returns the split of a segment sent from port: the port's
// own, else def. A map lookup per packet costs tens of nanoseconds,
// next to microseconds of queue work.
func SmallOf(byPort map[uint16]int, def int, port uint16) int {
	if v, ok := byPort[port]; ok {
		return v
	}
	return def
}

// SmallSegmentsFor returns the split of each of ports: the configured
// one (set), else the protocol's default, else def.
func SmallSegmentsFor(ports []uint16, set map[uint16]int, def int) map[uint16]int {
	out := make(map[uint16]int, len(ports))
	for _, p := range ports {
		switch v, ok := set[p]; {
		case ok:
			out[p] = v
		default:
			if d, ok := DefaultSmallSegments[p]; ok {
				out[p] = d
			} else {
				out[p] = def
			}
		}
	}
	return out
}

// PortGroup is ports that share one split.
type PortGroup struct {
	Small int
	Ports []uint16
}

// SplitGroups groups ports by their split, in order of split, for the
// backends that classify in iptables: one rule per split. Ports of one
// split (the usual case) give one group, so one rule, as before splits
// were per port.
func SplitGroups(ports []uint16, byPort map[uint16]int, def int) []PortGroup {
	var out []PortGroup
	for _, p := range ports {
		v := SmallOf(byPort, def, p)
		i := slices.IndexFunc(out, func(g PortGroup) bool { return g.Small == v })
		if i < 0 {
			out = append(out, PortGroup{Small: v})
			i = len(out) - 1
		}
		out[i].Ports = append(out[i].Ports, p)
	}
	slices.SortFunc(out, func(a, b PortGroup) int { return a.Small - b.Small })
	return out
}

// CheckSmall bounds a small-segment split (MaxSmallSegment).
func CheckSmall(v int) error {
	if v < 0 || v > MaxSmallSegment {
		return fmt.Errorf("must be 0 to %d bytes (the largest reply that clocks a writer)", MaxSmallSegment)
	}
	return nil
}

// DefaultSmallSegment is the largest TCP payload (bytes) that counts as
// write-direction traffic. A synchronous iSCSI writer waits for an R2T
// and a SCSI Response PDU per command: 48-byte headers plus at most a
// little sense data. 128 bytes keeps those and pure ACKs, and leaves
// every read data segment (kilobytes) in the read direction.
const DefaultSmallSegment = 128

// LengthSplit is the IP total length that separates the two directions in
// iptables: payload SmallSegment plus up to 100 bytes of IP and TCP
// headers (20 + 20 + options; a timestamped segment has 52).
func LengthSplit(small int) int { return small + 100 }

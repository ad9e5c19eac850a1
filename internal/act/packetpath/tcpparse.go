package packetpath

import (
	"encoding/binary"
	"net/netip"
)

// FlowKey identifies a TCP flow from the target to a consumer. The source
// address is left out: the target sends from its own address, and on one
// host the ports already make flows distinct.
type FlowKey struct {
	Dst          netip.Addr
	Sport, Dport uint16
}

// Parsed is what the delayer needs to know about a packet.
type Parsed struct {
	Flow    FlowKey
	Payload int    // TCP payload bytes
	Ack     uint32 // acknowledgment number
	flags   uint8  // TCP flags (FIN, SYN, RST, ...)
}

// TCP flags that occupy sequence space or end a connection: segments
// carrying them stay in order with data even when they have no payload.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
)

// PureAck reports whether the segment is a pure ACK: no payload and no
// SYN, FIN or RST. Such a segment occupies no sequence space.
func (p Parsed) PureAck() bool {
	return p.Payload == 0 && p.flags&(tcpFIN|tcpSYN|tcpRST) == 0
}

// parseIPv4TCP reads the flow and TCP payload length of an IPv4 packet.
// pkt may be truncated to its headers; total is the packet's full length
// (the kernel's NFQA_CAP_LEN), or 0 to use the IP header's total length.
// With NFQA_CFG_F_GSO a packet may be an unsegmented GSO super-packet,
// which is why the length must come from the kernel rather than a count
// of segments.
func parseIPv4TCP(pkt []byte, total int) (Parsed, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != 6 {
		return Parsed{}, false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+20 {
		return Parsed{}, false
	}
	if total == 0 {
		total = int(binary.BigEndian.Uint16(pkt[2:4]))
	}
	return segment(netip.AddrFrom4([4]byte(pkt[16:20])), pkt[ihl:], total-ihl), true
}

// segment reads the TCP header at the start of tcp, of a segment of
// length bytes (header included) sent to dst.
func segment(dst netip.Addr, tcp []byte, length int) Parsed {
	doff := int(tcp[12]>>4) * 4
	p := Parsed{
		Flow: FlowKey{
			Dst:   dst,
			Sport: binary.BigEndian.Uint16(tcp[0:2]),
			Dport: binary.BigEndian.Uint16(tcp[2:4]),
		},
		Payload: length - doff,
		Ack:     binary.BigEndian.Uint32(tcp[8:12]),
		flags:   tcp[13],
	}
	if p.Payload < 0 {
		p.Payload = 0
	}
	return p
}

// ParseTCP reads an IPv4 or IPv6 packet (see parseIPv4TCP, parseIPv6TCP).
func ParseTCP(pkt []byte, total int) (Parsed, bool) {
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		return parseIPv6TCP(pkt, total)
	}
	return parseIPv4TCP(pkt, total)
}

// parseIPv6TCP is parseIPv4TCP for IPv6. Only a TCP header right after
// the fixed header is read: the target's own segments carry no extension
// headers; a packet that has them is not parsed (it passes at once).
func parseIPv6TCP(pkt []byte, total int) (Parsed, bool) {
	const hdr = 40
	if len(pkt) < hdr+20 || pkt[0]>>4 != 6 || pkt[6] != 6 {
		return Parsed{}, false
	}
	if total == 0 {
		total = hdr + int(binary.BigEndian.Uint16(pkt[4:6]))
	}
	// Not unmapped: an IPv4-mapped address never travels in an IPv6
	// header, and a crafted one must not take an IPv4 consumer's delay
	// (found by FuzzParseTCP).
	return segment(netip.AddrFrom16([16]byte(pkt[24:40])), pkt[hdr:], total-hdr), true
}

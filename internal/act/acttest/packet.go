package acttest

import "encoding/binary"

// TCPPacket is an IPv4 TCP segment from the target (10.0.0.2 is the
// consumer) with payload bytes after a 32-byte header, as the queue
// hands it over: headers only, the length field saying the whole.
func TCPPacket(payload int, sport, dport uint16) []byte {
	p := make([]byte, 20+32)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:4], uint16(20+32+payload))
	p[9] = 6
	copy(p[16:20], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:22], sport)
	binary.BigEndian.PutUint16(p[22:24], dport)
	p[32] = 8 << 4 // 32-byte TCP header (timestamps)
	return p
}

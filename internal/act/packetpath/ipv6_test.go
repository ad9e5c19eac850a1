package packetpath

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

func tcp6Packet(payload int, sport, dport uint16) []byte {
	p := make([]byte, 40+32)
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:6], uint16(32+payload))
	p[6] = 6
	copy(p[24:40], netip.MustParseAddr("fd53:5a::2").AsSlice())
	binary.BigEndian.PutUint16(p[40:42], sport)
	binary.BigEndian.PutUint16(p[42:44], dport)
	p[52] = 8 << 4
	return p
}

// TestParseIPv6TCP: an IPv6 segment is read like an IPv4 one; one with an
// extension header, or truncated, is not.
func TestParseIPv6TCP(t *testing.T) {
	p, ok := ParseTCP(tcp6Packet(48, 3260, 40000), 0)
	if !ok || p.Flow.Dst != ip("fd53:5a::2") || p.Flow.Sport != 3260 || p.Flow.Dport != 40000 || p.Payload != 48 {
		t.Fatalf("parsed %+v %v", p, ok)
	}
	if p, ok := ParseTCP(tcp6Packet(0, 3260, 1)[:72], 72+64000); !ok || p.Payload != 64000 {
		t.Fatalf("GSO length from the kernel: %+v %v", p, ok)
	}
	ext := tcp6Packet(0, 3260, 1)
	ext[6] = 0 // hop-by-hop options first
	if _, ok := ParseTCP(ext, 0); ok {
		t.Fatal("a packet with an extension header was parsed as TCP")
	}
	if _, ok := ParseTCP(tcp6Packet(0, 3260, 1)[:50], 0); ok {
		t.Fatal("a truncated packet was parsed")
	}
}

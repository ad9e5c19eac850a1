package packetpath

import (
	"encoding/binary"
	"testing"
)

// FuzzParseIPv4TCP: every queued packet's IP and TCP headers are read on
// the packet thread; any bytes must give a flow or a refusal, never a
// panic, and an accepted packet is IPv4 TCP with a payload length that
// is not negative.
func FuzzParseIPv4TCP(f *testing.F) {
	pkt := make([]byte, 40)
	pkt[0], pkt[9] = 0x45, 6
	binary.BigEndian.PutUint16(pkt[2:4], 40)
	copy(pkt[16:20], []byte{10, 0, 0, 3})
	binary.BigEndian.PutUint16(pkt[20:22], 3260)
	pkt[32], pkt[33] = 0x50, 0x10 // data offset 5 words, ACK
	f.Add(pkt, 0)
	f.Add(pkt, 65536)
	f.Add(pkt[:20], 0)
	f.Add([]byte{0x4f, 0, 0, 0, 0, 0, 0, 0, 0, 6}, -1)
	f.Fuzz(func(t *testing.T, b []byte, total int) {
		p, ok := parseIPv4TCP(b, total)
		if !ok {
			return
		}
		if len(b) < 40 || b[0]>>4 != 4 || b[9] != 6 {
			t.Fatalf("accepted a packet that is not IPv4 TCP with full headers: % x", b)
		}
		if p.Payload < 0 || !p.Flow.Dst.Is4() {
			t.Fatalf("parsed %+v", p)
		}
	})
}

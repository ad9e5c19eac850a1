package nfq

import (
	"os"
	"testing"
)

// FuzzParseDatagram: whatever the socket returns, parsing never panics,
// every packet it reports has its payload inside the datagram, and
// nothing is counted twice.
func FuzzParseDatagram(f *testing.F) {
	if b, err := os.ReadFile("testdata/packet-data-1000.bin"); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, nlmsgHdrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out parsed
		n := 0
		parseDatagram(b, func(p Packet) {
			n++
			if len(p.Payload) > len(b) {
				t.Fatalf("payload of %d bytes from a %d-byte datagram", len(p.Payload), len(b))
			}
		}, &out)
		if n != out.packets {
			t.Fatalf("%d packets handed over, %d counted", n, out.packets)
		}
		if len(out.ackSeq) != len(out.ackCode) {
			t.Fatalf("%d acknowledgment sequence numbers, %d codes", len(out.ackSeq), len(out.ackCode))
		}
	})
}

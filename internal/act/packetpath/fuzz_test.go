package packetpath

import (
	"testing"

	"github.com/sanqos/sanqos/internal/act/acttest"
)

// FuzzParseTCP: any bytes and length the kernel could hand over parse
// without a panic, and what parses is consistent: the destination's
// family matches the IP version, the payload is never negative.
func FuzzParseTCP(f *testing.F) {
	f.Add(acttest.TCPPacket(48, 3260, 40000), 0)
	f.Add(acttest.TCPPacket(0, 3260, 1), 64000)
	f.Add(tcp6Packet(48, 3260, 40000), 0)
	f.Add([]byte{0x45}, 0)
	f.Fuzz(func(t *testing.T, pkt []byte, total int) {
		p, ok := ParseTCP(pkt, total)
		if !ok {
			return
		}
		if p.Payload < 0 {
			t.Fatalf("negative payload %d", p.Payload)
		}
		if v := pkt[0] >> 4; (v == 4) != p.Flow.Dst.Is4() {
			t.Fatalf("IP version %d parsed to destination %s", v, p.Flow.Dst)
		}
	})
}

package nfq

import (
	"os"
	"testing"
	"unsafe"
)

// FuzzParseDatagram: what the kernel sends on the queue socket is parsed
// on the packet thread; a malformed datagram (another kernel's layout, a
// truncated read) must be counted as bad, never panic, and every packet
// handed on must point inside the datagram.
func FuzzParseDatagram(f *testing.F) {
	if b, err := os.ReadFile("testdata/packet-data-1000.bin"); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Add([]byte{20, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out parsed
		start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		n := 0
		parseDatagram(b, func(p Packet) {
			n++
			if len(p.Payload) == 0 {
				return
			}
			ps := uintptr(unsafe.Pointer(unsafe.SliceData(p.Payload)))
			if ps < start || ps+uintptr(len(p.Payload)) > start+uintptr(len(b)) {
				t.Fatalf("packet payload outside the datagram")
			}
		}, &out)
		if out.packets != n || out.bad < 0 || len(out.ackSeq) != len(out.ackCode) {
			t.Fatalf("counts: %d packets, %d calls, %d bad, %d/%d acks", out.packets, n, out.bad, len(out.ackSeq), len(out.ackCode))
		}
	})
}

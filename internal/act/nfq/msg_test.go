package nfq

import (
	"encoding/binary"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// captured is a real datagram of a queued 1000-byte TCP segment on
// loopback, copy range 120 (refresh: SANQOS_NFQ_CAPTURE=1 go test -run
// TestLiveQueue as root).
func captured(t *testing.T) []byte {
	b, err := os.ReadFile("testdata/packet-data-1000.bin")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseDatagram(t *testing.T) {
	real := captured(t)
	twice := append(append([]byte{}, real...), real...)
	shortLen := append([]byte{}, real...)
	binary.NativeEndian.PutUint32(shortLen[0:4], 8) // shorter than a header
	longLen := append([]byte{}, real...)
	binary.NativeEndian.PutUint32(longLen[0:4], uint32(len(real)+4))
	badAttr := append([]byte{}, real...)
	binary.NativeEndian.PutUint16(badAttr[20:22], 2) // first attribute shorter than its header
	noID := append([]byte{}, real...)
	binary.NativeEndian.PutUint16(noID[22:24], 99) // packet header renamed: no id
	ack := func(code int32, seq uint32) []byte {
		b := make([]byte, 36)
		binary.NativeEndian.PutUint32(b[0:4], 36)
		binary.NativeEndian.PutUint16(b[4:6], unix.NLMSG_ERROR)
		binary.NativeEndian.PutUint32(b[8:12], seq)
		binary.NativeEndian.PutUint32(b[16:20], uint32(code))
		return b
	}
	other := make([]byte, 20)
	binary.NativeEndian.PutUint32(other[0:4], 20)
	binary.NativeEndian.PutUint16(other[4:6], subsysQueue<<8|msgConfig)

	for _, c := range []struct {
		name            string
		in              []byte
		packets, bad    int
		acks, failedAck int
	}{
		{"captured", real, 1, 0, 0, 0},
		{"two in one datagram", twice, 2, 0, 0, 0},
		{"packet after an ack", append(ack(0, 7), real...), 1, 0, 1, 0},
		{"refused verdict", ack(-int32(unix.ENOENT), 0), 0, 0, 1, 1},
		{"other message type", other, 0, 0, 0, 0},
		{"length under a header", shortLen, 0, 1, 0, 0},
		{"length past the datagram", longLen, 0, 1, 0, 0},
		{"bad attribute", badAttr, 0, 1, 0, 0},
		{"no packet id", noID, 0, 1, 0, 0},
		{"truncated header", real[:10], 0, 0, 0, 0},
		{"empty", nil, 0, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var res parsed
			var got []Packet
			parseDatagram(c.in, func(p Packet) { got = append(got, p) }, &res)
			failed := 0
			for _, code := range res.ackCode {
				if code != 0 {
					failed++
				}
			}
			if len(got) != c.packets || res.packets != c.packets || res.bad != c.bad || len(res.ackSeq) != c.acks || failed != c.failedAck {
				t.Fatalf("got %d packets (counted %d), %d bad, %d acks (%d failed); want %d, %d, %d (%d)",
					len(got), res.packets, res.bad, len(res.ackSeq), failed, c.packets, c.bad, c.acks, c.failedAck)
			}
			for _, p := range got {
				// What the capture holds: packet id 3, an IPv4/TCP
				// header of 52 bytes and 68 of the 1000 data bytes.
				if p.ID != 3 || len(p.Payload) != 120 || p.CapLen != 1052 || p.Payload[0] != 0x45 || string(p.Payload[52:58]) != "sanqos" {
					t.Errorf("packet %+v", p)
				}
			}
		})
	}
}

func TestVerdictMessage(t *testing.T) {
	b := appendVerdict(nil, 3260, 0x01020304)
	b = appendVerdict(b, 3260, 5)
	if len(b) != 2*verdictMsgSz {
		t.Fatalf("two verdicts are %d bytes, want %d", len(b), 2*verdictMsgSz)
	}
	ne := binary.NativeEndian
	for i, id := range []uint32{0x01020304, 5} {
		m := b[i*verdictMsgSz:]
		if l := ne.Uint32(m[0:4]); l != verdictMsgSz {
			t.Errorf("length %d", l)
		}
		if typ := ne.Uint16(m[4:6]); typ != 0x0301 {
			t.Errorf("type %#x, want NFNL_SUBSYS_QUEUE<<8 | NFQNL_MSG_VERDICT", typ)
		}
		if q := binary.BigEndian.Uint16(m[18:20]); q != 3260 {
			t.Errorf("queue %d", q)
		}
		a := m[20:]
		if ne.Uint16(a[0:2]) != 12 || ne.Uint16(a[2:4]) != attrVerdictHdr || binary.BigEndian.Uint32(a[4:8]) != 1 || binary.BigEndian.Uint32(a[8:12]) != id {
			t.Errorf("verdict attribute % x, want NF_ACCEPT for %#x", a[:12], id)
		}
	}
}

func TestConfigMessagePadsAttributes(t *testing.T) {
	b := configMsg(7, 42, attr{cfgParams, []byte{0, 0, 0, 120, copyPacket}}, attr{cfgMaxLen, be32(64)})
	// header 16 + nfgenmsg 4 + params (4+5, padded to 12) + maxlen 8
	if len(b) != 40 || binary.NativeEndian.Uint32(b[0:4]) != 40 {
		t.Fatalf("length %d (header says %d), want 40", len(b), binary.NativeEndian.Uint32(b[0:4]))
	}
	if f := binary.NativeEndian.Uint16(b[6:8]); f != unix.NLM_F_REQUEST|unix.NLM_F_ACK {
		t.Errorf("flags %#x", f)
	}
	if binary.NativeEndian.Uint16(b[20:22]) != 9 || binary.NativeEndian.Uint16(b[32:34]) != 8 || binary.NativeEndian.Uint16(b[34:36]) != cfgMaxLen {
		t.Errorf("attributes % x", b[20:])
	}
}

package nfq

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// Message and attribute numbers of nfnetlink_queue (linux/netfilter/
// nfnetlink_queue.h). The kernel ABI does not change them.
const (
	subsysQueue = 3 // NFNL_SUBSYS_QUEUE

	msgPacket  = 0 // NFQNL_MSG_PACKET: kernel to us
	msgVerdict = 1 // NFQNL_MSG_VERDICT
	msgConfig  = 2 // NFQNL_MSG_CONFIG

	attrPacketHdr  = 1  // NFQA_PACKET_HDR: packet id, hw protocol, hook
	attrVerdictHdr = 2  // NFQA_VERDICT_HDR: verdict, packet id
	attrPayload    = 10 // NFQA_PAYLOAD
	attrCapLen     = 13 // NFQA_CAP_LEN: length before truncation

	cfgCmd    = 1 // NFQA_CFG_CMD
	cfgParams = 2 // NFQA_CFG_PARAMS
	cfgMaxLen = 3 // NFQA_CFG_QUEUE_MAXLEN
	cfgMask   = 4 // NFQA_CFG_MASK
	cfgFlags  = 5 // NFQA_CFG_FLAGS

	cmdBind   = 1 // NFQNL_CFG_CMD_BIND
	cmdUnbind = 2 // NFQNL_CFG_CMD_UNBIND

	copyPacket = 2 // NFQNL_COPY_PACKET

	verdictAccept = 1 // NF_ACCEPT

	nlmsgHdrLen  = 16 // struct nlmsghdr
	nfgenLen     = 4  // struct nfgenmsg
	nlaHdrLen    = 4  // struct nlattr
	nlaTypeMask  = 0x3fff
	verdictMsgSz = nlmsgHdrLen + nfgenLen + nlaHdrLen + 8
)

// Configuration flags (NFQA_CFG_F_*).
const (
	// FlagFailOpen makes the kernel accept packets itself when the queue
	// is full, instead of dropping them.
	FlagFailOpen = 0x01
	// FlagGSO hands GSO super-packets to us whole instead of segmenting
	// them first.
	FlagGSO = 0x04
)

// Packet is one queued packet.
type Packet struct {
	ID uint32
	// Payload is the packet from its network header, truncated to the
	// copy range. It points into the socket's buffer and is valid until
	// the next Read.
	Payload []byte
	// CapLen is the packet's length before truncation; 0 when the
	// kernel did not truncate it.
	CapLen uint32
}

func align4(n int) int { return (n + 3) &^ 3 }

// putHeader writes a netlink and nfgenmsg header for a message of total
// length n, type typ of the queue subsystem, into b.
func putHeader(b []byte, n int, typ uint16, flags uint16, seq uint32, queue uint16) {
	ne := binary.NativeEndian
	ne.PutUint32(b[0:4], uint32(n))
	ne.PutUint16(b[4:6], subsysQueue<<8|typ)
	ne.PutUint16(b[6:8], flags)
	ne.PutUint32(b[8:12], seq)
	ne.PutUint32(b[12:16], 0) // to the kernel
	b[16] = unix.AF_UNSPEC
	b[17] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(b[18:20], queue)
}

// appendVerdict appends an NF_ACCEPT verdict for packet id of queue to b.
func appendVerdict(b []byte, queue uint16, id uint32) []byte {
	n := len(b)
	b = append(b, make([]byte, verdictMsgSz)...)
	m := b[n:]
	putHeader(m, verdictMsgSz, msgVerdict, unix.NLM_F_REQUEST, 0, queue)
	a := m[nlmsgHdrLen+nfgenLen:]
	binary.NativeEndian.PutUint16(a[0:2], nlaHdrLen+8)
	binary.NativeEndian.PutUint16(a[2:4], attrVerdictHdr)
	binary.BigEndian.PutUint32(a[4:8], verdictAccept)
	binary.BigEndian.PutUint32(a[8:12], id)
	return b
}

// attr is one netlink attribute of a configuration message.
type attr struct {
	typ  uint16
	data []byte
}

// configMsg renders a configuration request for queue that asks the
// kernel for an acknowledgment.
func configMsg(queue uint16, seq uint32, attrs ...attr) []byte {
	n := nlmsgHdrLen + nfgenLen
	for _, a := range attrs {
		n += align4(nlaHdrLen + len(a.data))
	}
	b := make([]byte, n)
	putHeader(b, n, msgConfig, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, queue)
	off := nlmsgHdrLen + nfgenLen
	for _, a := range attrs {
		binary.NativeEndian.PutUint16(b[off:], uint16(nlaHdrLen+len(a.data)))
		binary.NativeEndian.PutUint16(b[off+2:], a.typ)
		copy(b[off+nlaHdrLen:], a.data)
		off += align4(nlaHdrLen + len(a.data))
	}
	return b
}

// be32 is v in network byte order.
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// parsed is what one datagram from the kernel held.
type parsed struct {
	packets int
	// acks are the acknowledgments (NLMSG_ERROR) it held: their
	// sequence numbers and error codes (0 for success, else -errno).
	ackSeq  []uint32
	ackCode []int32
	bad     int // messages that could not be read
}

// parseDatagram walks the netlink messages of one datagram and calls fn
// for each queued packet. It never allocates for packets: a busy queue
// delivers thousands a second and the packet path must not feed the
// garbage collector.
func parseDatagram(b []byte, fn func(Packet), out *parsed) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b[0:4]))
		if l < nlmsgHdrLen || l > len(b) {
			out.bad++
			return
		}
		typ := ne.Uint16(b[4:6])
		body := b[nlmsgHdrLen:l]
		switch {
		case typ == unix.NLMSG_ERROR:
			if len(body) < 4 {
				out.bad++
				break
			}
			out.ackSeq = append(out.ackSeq, ne.Uint32(b[8:12]))
			out.ackCode = append(out.ackCode, int32(ne.Uint32(body[0:4])))
		case typ == subsysQueue<<8|msgPacket:
			p, ok := parsePacket(body)
			if !ok {
				out.bad++
				break
			}
			out.packets++
			fn(p)
		}
		b = b[min(align4(l), len(b)):]
	}
}

// parsePacket reads a packet message's body (after the netlink header).
func parsePacket(body []byte) (Packet, bool) {
	if len(body) < nfgenLen {
		return Packet{}, false
	}
	a := body[nfgenLen:]
	var p Packet
	var hasID bool
	for len(a) >= nlaHdrLen {
		l := int(binary.NativeEndian.Uint16(a[0:2]))
		if l < nlaHdrLen || l > len(a) {
			return Packet{}, false
		}
		data := a[nlaHdrLen:l]
		switch binary.NativeEndian.Uint16(a[2:4]) & nlaTypeMask {
		case attrPacketHdr:
			if len(data) < 4 {
				return Packet{}, false
			}
			p.ID, hasID = binary.BigEndian.Uint32(data[0:4]), true
		case attrPayload:
			p.Payload = data
		case attrCapLen:
			if len(data) < 4 {
				return Packet{}, false
			}
			p.CapLen = binary.BigEndian.Uint32(data[0:4])
		}
		a = a[min(align4(l), len(a)):]
	}
	return p, hasID
}

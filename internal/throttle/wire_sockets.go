package throttle

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/attribution"
)

// The sock_diag multicast groups that carry destroyed TCP sockets
// (linux/sock_diag.h: SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY).
const (
	sknlgrpTCPDestroy  = 1
	sknlgrpTCP6Destroy = 3
)

// Offsets in a sock_diag message: struct inet_diag_msg is 72 bytes, its
// id's cookie at 44; INET_DIAG_INFO is struct tcp_info, whose
// tcpi_bytes_acked and tcpi_bytes_received are at 120 and 128.
const (
	inetDiagMsgLen    = 72
	inetDiagInfo      = 2
	tcpiBytesAcked    = 120
	tcpiBytesReceived = 128
)

// goneReads is how many reads a socket that left the dumps without its
// final counters is remembered, waiting for them (the kernel sends them
// from a work queue, soon after).
const goneReads = 50

// maxPending bounds the destroyed sockets kept between two reads.
const maxPending = 1 << 16

// socketSample is one socket's counters, from a dump or its destruction:
// sent is what the peer sent us (tcpi_bytes_received), recv what it
// received from us (tcpi_bytes_acked).
type socketSample struct {
	cookie uint64
	local  uint16
	peer   netip.Addr
	sent   uint64
	recv   uint64
}

// socketCounts turns socket samples into per-client counters that only
// grow (see Wire). Guarded by Wire.mu.
type socketCounts struct {
	live    map[uint64]socketSample // counted sockets of the last dump
	gone    map[uint64]goneSocket   // left the dumps, final counters not seen
	base    map[netip.Addr]attribution.Counters
	pending []socketSample // final counters of destroyed sockets, not yet taken
	dropped uint64         // broadcasts the kernel could not deliver
}

type goneSocket struct {
	last  socketSample
	reads int
}

func (c *socketCounts) add(s socketSample, sent, recv uint64) {
	if c.base == nil {
		c.base = map[netip.Addr]attribution.Counters{}
	}
	b := c.base[s.peer]
	b.Sent += sent
	b.Received += recv
	c.base[s.peer] = b
}

// grown is what a socket carried from last to now (never negative).
func grown(now, last uint64) uint64 {
	if now < last {
		return 0
	}
	return now - last
}

// update takes a dump (seen) and the destroyed sockets pending and
// returns every client's counters; counted says which sockets count.
func (c *socketCounts) update(seen []socketSample, counted func(socketSample) bool) map[netip.Addr]attribution.Counters {
	cur := map[uint64]socketSample{}
	for _, s := range seen {
		if counted(s) {
			cur[s.cookie] = s
		}
	}
	for _, f := range c.pending {
		switch g, wasGone := c.gone[f.cookie]; {
		case wasGone:
			// Its last sample is in base already.
			c.add(f, grown(f.sent, g.last.sent), grown(f.recv, g.last.recv))
			delete(c.gone, f.cookie)
		default:
			// In a dump (live, or this one: destroyed just after it)
			// or never seen (opened and closed between two reads):
			// only its final counters count.
			c.add(f, f.sent, f.recv)
		}
		delete(cur, f.cookie)
		delete(c.live, f.cookie)
	}
	c.pending = nil
	for k, s := range c.live {
		if _, ok := cur[k]; !ok {
			// Gone without its final counters (yet): count it as last
			// seen, and the rest if they come.
			c.add(s, s.sent, s.recv)
			if c.gone == nil {
				c.gone = map[uint64]goneSocket{}
			}
			c.gone[k] = goneSocket{last: s}
		}
	}
	for k, g := range c.gone {
		if g.reads++; g.reads > goneReads {
			delete(c.gone, k)
		} else {
			c.gone[k] = g
		}
	}
	c.live = cur
	out := make(map[netip.Addr]attribution.Counters, len(c.base))
	for a, b := range c.base {
		out[a] = b
	}
	for _, s := range cur {
		o := out[s.peer]
		o.Sent += s.sent
		o.Received += s.recv
		out[s.peer] = o
	}
	return out
}

// forgetExcept drops what it knows of clients not in keep.
func (c *socketCounts) forgetExcept(keep map[netip.Addr]bool) {
	for a := range c.base {
		if !keep[a] {
			delete(c.base, a)
		}
	}
	for k, s := range c.live {
		if !keep[s.peer] {
			delete(c.live, k)
		}
	}
	for k, g := range c.gone {
		if !keep[g.last.peer] {
			delete(c.gone, k)
		}
	}
}

// withClients adds a zero entry for every client without one, so that
// a client's first bytes are a rate, not a first sample.
func withClients(out map[netip.Addr]attribution.Counters, clients map[netip.Addr]bool) map[netip.Addr]attribution.Counters {
	for a := range clients {
		if _, ok := out[a]; !ok {
			out[a] = attribution.Counters{}
		}
	}
	return out
}

func cookieOf(c [2]uint32) uint64 { return uint64(c[0]) | uint64(c[1])<<32 }

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// parseDestroyed reads a destroyed socket's broadcast: its inet_diag_msg
// and the counters of its tcp_info.
func parseDestroyed(b []byte) (socketSample, bool) {
	if len(b) < inetDiagMsgLen {
		return socketSample{}, false
	}
	var s socketSample
	s.local = binary.BigEndian.Uint16(b[4:6])
	switch b[0] {
	case unix.AF_INET:
		s.peer = netip.AddrFrom4([4]byte(b[24:28]))
	case unix.AF_INET6:
		s.peer = netip.AddrFrom16([16]byte(b[24:40])).Unmap()
	default:
		return socketSample{}, false
	}
	s.cookie = cookieOf([2]uint32{binary.NativeEndian.Uint32(b[44:48]), binary.NativeEndian.Uint32(b[48:52])})
	attrs, err := nl.ParseRouteAttr(b[inetDiagMsgLen:])
	if err != nil {
		return socketSample{}, false
	}
	for _, a := range attrs {
		if a.Attr.Type == inetDiagInfo && len(a.Value) >= tcpiBytesReceived+8 {
			s.recv = binary.NativeEndian.Uint64(a.Value[tcpiBytesAcked:])
			s.sent = binary.NativeEndian.Uint64(a.Value[tcpiBytesReceived:])
			return s, true
		}
	}
	return socketSample{}, false
}

// listen subscribes to the destroyed TCP sockets of the namespace and
// keeps the final counters of the counted ones for the next Read.
func (w *Wire) listen() error {
	var s *nl.NetlinkSocket
	var err error
	if w.ns != 0 {
		s, err = nl.SubscribeAt(netns.NsHandle(w.ns), netns.None(), unix.NETLINK_SOCK_DIAG, sknlgrpTCPDestroy, sknlgrpTCP6Destroy)
	} else {
		s, err = nl.Subscribe(unix.NETLINK_SOCK_DIAG, sknlgrpTCPDestroy, sknlgrpTCP6Destroy)
	}
	if err != nil {
		return errors.Join(errors.New("wire counters: listening to closed sockets' counters"), err)
	}
	// Room for bursts of closing connections between two reads.
	_ = s.SetReceiveBufferSize(4<<20, true)
	w.events = s
	go w.receive(s)
	return nil
}

// receive runs until the socket is closed.
func (w *Wire) receive(s *nl.NetlinkSocket) {
	for {
		msgs, _, err := s.Receive()
		switch {
		case w.closed.Load():
			return
		case errors.Is(err, syscall.ENOBUFS):
			w.mu.Lock()
			w.socks.dropped++
			first := w.socks.dropped == 1
			w.mu.Unlock()
			if first {
				w.log.Warn("the kernel dropped closed sockets' counters: connections that closed meanwhile lose what they carried since the last read")
			}
			continue
		case err != nil:
			w.log.Warn("reading closed sockets' counters", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		for _, m := range msgs {
			if f, ok := parseDestroyed(m.Data); ok && w.counted(f) && len(w.socks.pending) < maxPending {
				w.socks.pending = append(w.socks.pending, f)
			}
		}
		w.mu.Unlock()
	}
}

package nfq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The live test binds a queue in a network namespace of its own
// (sanqos-nfq-<pid>), queues the namespace's loopback TCP to one port and
// checks what arrives. Leftovers of crashed runs are removed first.
const (
	nsPrefix = "sanqos-nfq-"
	port     = 3261
	queue    = 3261
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace, an iptables rule and an NFQUEUE")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// namespace creates the test's namespace with loopback up and returns its
// name and an open handle.
func namespace(t *testing.T) (string, int) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimPrefix(f[0], nsPrefix)); err == nil && syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
	name := fmt.Sprintf("%s%d", nsPrefix, os.Getpid())
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return name, fd
}

// goNS runs f in a goroutine on a thread in the namespace ns; sockets f
// creates stay there. The returned channel closes when f returns.
func goNS(t *testing.T, ns int, f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		f()
	}()
	return done
}

// next waits up to 2 s for a datagram and returns it whole.
func next(t *testing.T, s *Socket) []byte {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(s.Fd()), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(2 * time.Second))
	if n, err := unix.Ppoll(fds, &ts, nil); err != nil || n == 0 {
		t.Fatalf("no packet queued within 2s (%v)", err)
	}
	buf := make([]byte, recvBuffer)
	n, err := unix.Read(s.Fd(), buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestLiveQueue: a connection's SYN waits in the queue until accepted; a
// data segment arrives truncated to the copy range with its real length;
// a verdict for a packet that is not queued is counted as an error; and a
// second socket cannot take the queue.
func TestLiveQueue(t *testing.T) {
	needRoot(t)
	name, ns := namespace(t)
	sh(t, "ip", "netns", "exec", name, "iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", strconv.Itoa(port),
		"-j", "NFQUEUE", "--queue-num", strconv.Itoa(queue))
	s, err := Open(Config{Queue: queue, CopyRange: 120, MaxQueueLen: 64, Flags: FlagFailOpen | FlagGSO, RcvBuf: 1 << 20, NetNS: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if _, err := Open(Config{Queue: queue, CopyRange: 120, NetNS: ns}); err == nil || !errors.Is(err, unix.EPERM) {
		t.Errorf("second socket on the same queue: err %v, want EPERM", err)
	}

	var ln net.Listener
	<-goNS(t, ns, func() { ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			conns <- c
		}
		close(conns)
	}()
	dialed := make(chan net.Conn, 1)
	goNS(t, ns, func() {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 3*time.Second)
		if err != nil {
			t.Error(err)
			close(dialed)
			return
		}
		dialed <- c
	})

	// The SYN: held until we accept it.
	var got []Packet
	var res parsed
	parseDatagram(next(t, s), func(p Packet) { got = append(got, p) }, &res)
	if len(got) != 1 {
		t.Fatalf("first datagram: %d packets (%+v), want the SYN", len(got), res)
	}
	syn := got[0]
	if len(syn.Payload) < 40 || syn.Payload[9] != 6 || syn.Payload[33]&0x02 == 0 {
		t.Fatalf("first packet is not a TCP SYN: % x", syn.Payload)
	}
	if dport := binary.BigEndian.Uint16(syn.Payload[22:24]); dport != port {
		t.Fatalf("SYN to port %d, want %d", dport, port)
	}
	select {
	case <-dialed:
		t.Fatal("connection established before its SYN was accepted")
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.Accept(syn.ID); err != nil {
		t.Fatal(err)
	}
	// The rest of the handshake: the client's ACK goes through the queue
	// too, and the server has the connection only once it is accepted.
	var client, server net.Conn
	dialedC, connsC := (<-chan net.Conn)(dialed), (<-chan net.Conn)(conns) // nil once received
	for client == nil || server == nil {
		select {
		case c, ok := <-dialedC:
			if !ok {
				t.Fatal("dial failed")
			}
			client, dialedC = c, nil
		case c, ok := <-connsC:
			if !ok {
				t.Fatal("accept failed")
			}
			server, connsC = c, nil
		case <-time.After(10 * time.Millisecond):
			if _, err := s.Read(func(p Packet) { s.Accept(p.ID) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer client.Close()
	defer server.Close()
	drain(t, s)

	// A 1000-byte segment, truncated to the copy range.
	msg := bytes.Repeat([]byte("sanqos"), 1000/6+1)[:1000]
	go client.Write(msg)
	raw := next(t, s)
	if os.Getenv("SANQOS_NFQ_CAPTURE") != "" {
		if err := os.WriteFile("testdata/packet-data-1000.bin", raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got = got[:0]
	parseDatagram(raw, func(p Packet) { got = append(got, p) }, &res)
	if len(got) != 1 {
		t.Fatalf("data datagram: %d packets, want 1", len(got))
	}
	if p := got[0]; len(p.Payload) != 120 || p.CapLen != 20+32+1000 {
		t.Errorf("data packet: payload %d bytes, cap_len %d; want 120 and %d", len(p.Payload), p.CapLen, 20+32+1000)
	}
	if err := s.Accept(got[0].ID); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	server.SetReadDeadline(time.Now().Add(3 * time.Second))
	for n := 0; n < len(buf); {
		// Keep accepting: the server's ACK is not queued (sport), but
		// a retransmission would be.
		k, err := server.Read(buf[n:])
		if err != nil {
			t.Fatalf("after accept, the server read %d bytes: %v", n, err)
		}
		n += k
	}
	if !bytes.Equal(buf, msg) {
		t.Error("data arrived changed")
	}

	before := s.Errors
	if err := s.Accept(got[0].ID); err != nil { // no longer queued
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for s.Errors == before && time.Now().Before(deadline) {
		if _, err := s.Read(func(p Packet) { s.Accept(p.ID) }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if s.Errors != before+1 {
		t.Errorf("verdict for a packet not queued: errors %d → %d, want one more", before, s.Errors)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// drain accepts whatever is queued.
func drain(t *testing.T, s *Socket) {
	for {
		more, err := s.Read(func(p Packet) { s.Accept(p.ID) })
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			return
		}
	}
}

// Package nfq is a netfilter queue (NFQUEUE) socket for a packet path that
// must never wait for the Go scheduler.
//
// Why not go-nfqueue. Its reader is a goroutine parked in the Go netpoller:
// when a packet arrives, some other thread of the process has to notice
// the socket is readable, make the reader runnable and hand it a P. On a
// storage target whose CPUs are busy, that other thread is an ordinary
// one waiting in line behind tgtd, and the lab measured ACKs released
// 20–30 ms late a few times a minute — each time, every throttled
// initiator sent a spurious TCP loss probe. Here the file descriptor is
// ours: the caller's (real-time) thread blocks in ppoll(2) on it directly,
// so the kernel wakes that very thread. Reading and verdicts do not
// allocate: a busy queue moves thousands of packets a second, and garbage
// means collections, which stop the packet path too.
//
// A Socket is not safe for concurrent use: one thread reads and gives
// verdicts. Only NF_ACCEPT is offered; sanqos never drops a packet.
// Configuration (Open, Close) waits for the kernel's answers and belongs
// on an ordinary goroutine.
package nfq

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Config says which queue to bind and how.
type Config struct {
	Queue uint16
	// CopyRange is how many bytes of each packet the kernel copies to
	// us (from the network header).
	CopyRange uint32
	// MaxQueueLen is the kernel's limit of packets waiting for a
	// verdict; with FlagFailOpen it accepts packets beyond it itself.
	MaxQueueLen uint32
	Flags       uint32 // FlagFailOpen, FlagGSO
	// RcvBuf is the socket's receive buffer in bytes, set with
	// SO_RCVBUFFORCE (past rmem_max; needs CAP_NET_ADMIN). 0 keeps the
	// default.
	RcvBuf int
	// NetNS is an open file descriptor of the network namespace to bind
	// the queue in; 0 binds it in the caller's.
	NetNS int
}

// Socket is a bound queue.
type Socket struct {
	fd    int
	queue uint16
	seq   uint32
	rbuf  []byte
	wbuf  []byte
	res   parsed
	// Errors counts verdicts the kernel refused (unknown packet id) and
	// messages it sent that could not be read.
	Errors uint64
}

// recvBuffer holds one datagram: one queued packet with its attributes
// is a few hundred bytes at our copy ranges, an acknowledgment of a
// failed request carries the request back.
const recvBuffer = 64 << 10

// maxVerdictWrite bounds one write of verdicts: the kernel copies the
// whole write into one buffer.
const maxVerdictWrite = 32 << 10

// Open binds the queue and configures it. It fails when another program
// holds the queue, the kernel has no nfnetlink_queue, or we may not.
func Open(cfg Config) (*Socket, error) {
	fd, err := socketIn(cfg.NetNS)
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket: %w", err)
	}
	s := &Socket{fd: fd, queue: cfg.Queue, rbuf: make([]byte, recvBuffer), seq: uint32(time.Now().UnixNano())}
	if err := s.setup(cfg); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

func (s *Socket) setup(cfg Config) error {
	if err := unix.Bind(s.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("binding the netlink socket: %w", err)
	}
	if cfg.RcvBuf > 0 {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, cfg.RcvBuf); err != nil {
			return fmt.Errorf("sizing the queue socket's receive buffer: %w", err)
		}
	}
	// A full receive buffer costs us packets the kernel then accepts
	// (fail open); it must not also fail our reads.
	if err := unix.SetsockoptInt(s.fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1); err != nil {
		return fmt.Errorf("configuring the queue socket: %w", err)
	}
	bind := []byte{cmdBind, 0, 0, unix.AF_INET}
	if err := s.request(attr{cfgCmd, bind}); err != nil {
		if errors.Is(err, unix.EPERM) {
			// The kernel says EPERM both to a second program and to
			// one without CAP_NET_ADMIN.
			return fmt.Errorf("binding NFQUEUE %d: another program holds it (another sanqos?) or we are not root: %w", s.queue, err)
		}
		return fmt.Errorf("binding NFQUEUE %d: %w", s.queue, err)
	}
	params := append(be32(cfg.CopyRange), copyPacket)
	if err := s.request(attr{cfgParams, params}, attr{cfgMaxLen, be32(cfg.MaxQueueLen)},
		attr{cfgMask, be32(cfg.Flags)}, attr{cfgFlags, be32(cfg.Flags)}); err != nil {
		return fmt.Errorf("configuring NFQUEUE %d: %w", s.queue, err)
	}
	return nil
}

// socketIn opens a non-blocking netfilter netlink socket in the network
// namespace ns (0: the caller's). A socket stays in the namespace it was
// created in, so only its creation needs a thread there.
func socketIn(ns int) (int, error) {
	open := func() (int, error) {
		return unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	}
	if ns == 0 {
		return open()
	}
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// A thread that cannot return to its namespace must not run
		// anything else: exiting while locked makes the runtime end it.
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{-1, fmt.Errorf("reading this thread's network namespace: %w", err)}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			ch <- result{-1, fmt.Errorf("entering network namespace: %w", err)}
			runtime.UnlockOSThread()
			return
		}
		fd, err := open()
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			if err == nil {
				unix.Close(fd)
			}
			ch <- result{-1, fmt.Errorf("returning to the original network namespace: %w", rerr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

// Fd is the socket's file descriptor, to wait on with poll(2).
func (s *Socket) Fd() int { return s.fd }

// request sends one configuration message and waits up to a second for
// its acknowledgment.
func (s *Socket) request(attrs ...attr) error {
	s.seq++
	seq := s.seq
	if _, err := unix.Write(s.fd, configMsg(s.queue, seq, attrs...)); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Second)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return errors.New("the kernel did not answer within 1s")
		}
		fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
		ts := unix.NsecToTimespec(wait.Nanoseconds())
		if _, err := unix.Ppoll(fds, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		// Packets that arrive meanwhile (no rule should send any while
		// the queue is being set up or taken down) go on at once.
		var pass []uint32
		if _, err := s.Read(func(p Packet) { pass = append(pass, p.ID) }); err != nil {
			return err
		}
		if err := s.Accept(pass...); err != nil {
			return err
		}
		for i, q := range s.res.ackSeq {
			if q != seq {
				continue
			}
			if c := s.res.ackCode[i]; c != 0 {
				return unix.Errno(-c)
			}
			return nil
		}
	}
}

// Read reads one datagram without blocking and calls fn for each packet
// in it. It returns false when nothing was waiting. Errors the kernel
// reports for verdicts are counted in Errors, not returned: they concern
// one packet, not the socket.
func (s *Socket) Read(fn func(Packet)) (bool, error) {
	s.res.packets, s.res.bad = 0, 0
	s.res.ackSeq, s.res.ackCode = s.res.ackSeq[:0], s.res.ackCode[:0]
	n, err := rawRead(s.fd, s.rbuf)
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		return false, nil
	case errors.Is(err, unix.ENOBUFS):
		// The buffer overflowed and the kernel accepted what did not
		// fit (fail open); the socket is fine.
		s.Errors++
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading NFQUEUE %d: %w", s.queue, err)
	}
	parseDatagram(s.rbuf[:n], fn, &s.res)
	s.Errors += uint64(s.res.bad)
	for _, c := range s.res.ackCode {
		if c != 0 {
			s.Errors++
		}
	}
	return true, nil
}

// rawRead and rawWrite are read(2) and write(2) without telling the Go
// scheduler: the socket never blocks, and a thread that announces a
// system call may find its P (its right to run Go code) given away when
// the call returns — a verdict write carries the receiving TCP stack of a
// veth peer and can take long enough — and then waits for another,
// ordinary, thread to hand one back.
func rawRead(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd int, b []byte) error {
	_, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return e
	}
	return nil
}

// Accept lets the packets go on, in the order given: one write carries
// many verdicts, and the kernel handles them in order.
func (s *Socket) Accept(ids ...uint32) error {
	for len(ids) > 0 {
		s.wbuf = s.wbuf[:0]
		for len(ids) > 0 && len(s.wbuf)+verdictMsgSz <= maxVerdictWrite {
			s.wbuf = appendVerdict(s.wbuf, s.queue, ids[0])
			ids = ids[1:]
		}
		if err := rawWrite(s.fd, s.wbuf); err != nil {
			return fmt.Errorf("sending verdicts to NFQUEUE %d: %w", s.queue, err)
		}
	}
	return nil
}

// Close unbinds the queue and closes the socket. The kernel drops the
// packets still waiting for a verdict when the queue goes away: accept
// them all before.
func (s *Socket) Close() error {
	if s.fd < 0 {
		return nil
	}
	uerr := s.request(attr{cfgCmd, []byte{cmdUnbind, 0, 0, unix.AF_INET}})
	fd := s.fd
	s.fd = -1
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("closing NFQUEUE %d: %w", s.queue, err)
	}
	if uerr != nil {
		return fmt.Errorf("unbinding NFQUEUE %d: %w", s.queue, uerr)
	}
	return nil
}

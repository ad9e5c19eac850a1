package datapath

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The connection modes: the client's first byte.
const (
	modePing   = 'p' // echo Msg-byte messages
	modeEcho   = 'e' // echo EchoSize-byte messages
	modeBulk   = 'b' // send until the client half-closes
	modeUpload = 'u' // receive and count until the client closes
)

// EchoSize is the idle measurement's request and reply: a 4 KiB I/O.
const EchoSize = 4 << 10

// Server is the target. When a ping-pong or bulk connection ends it
// reports its socket's counters on done; uploads count on up.
type Server struct {
	ln   net.Listener
	done chan *unix.TCPInfo
	errs chan error
	up   atomic.Int64
}

// StartServer listens on the target's port in the target namespace
// until Close.
func StartServer() (*Server, error) {
	s := &Server{done: make(chan *unix.TCPInfo, 1), errs: make(chan error, 1)}
	err := InNS(TargetNS, func() (err error) {
		s.ln, err = net.Listen("tcp4", net.JoinHostPort(TargetIP, strconv.Itoa(Port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening in the target namespace: %w", err)
	}
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s, nil
}

// Close stops listening.
func (s *Server) Close() error { return s.ln.Close() }

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		s.fail(fmt.Errorf("reading the mode: %w", err))
		return
	}
	var err error
	switch mode[0] {
	case modePing:
		err = echo(c, Msg)
	case modeEcho:
		_ = echo(c, EchoSize) // the client ends it by closing, in mid-message or not
		return
	case modeUpload:
		pinOneCPU() // the uploader's: its ACKs clock the upload's segments
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			s.up.Add(int64(n))
			if err != nil {
				return
			}
		}
	default:
		err = s.bulk(c.(*net.TCPConn))
	}
	if err != nil {
		s.fail(err)
		return
	}
	info, err := TCPInfo(c)
	if err != nil {
		s.fail(err)
		return
	}
	s.done <- info
}

func echo(c net.Conn, size int) error {
	buf := make([]byte, size)
	var err error
	for err == nil {
		if _, err = io.ReadFull(c, buf); err == nil {
			_, err = c.Write(buf)
		}
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// bulk sends until the client half-closes. Nagle on: every segment but
// the last is a full MSS, so every one is read-direction data.
func (s *Server) bulk(c *net.TCPConn) error {
	c.SetNoDelay(false)
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, c)
		stop.Store(true)
	}()
	buf := make([]byte, 64<<10)
	for !stop.Load() {
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("sending the bulk flow: %w", err)
		}
	}
	// A write returns once its data is queued: the counters are final
	// only when the client has acknowledged our FIN, after all the data.
	if err := c.CloseWrite(); err != nil {
		return fmt.Errorf("ending the bulk flow: %w", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		info, err := TCPInfo(c)
		if err != nil {
			return err
		}
		if info.State == tcpClose {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the bulk flow did not end within 20 s (state %d, %d unacknowledged)", info.State, info.Unacked)
		}
	}
}

// tcpClose is TCP_CLOSE of the kernel's TCP states (tcp_states.h).
const tcpClose = 7

func (s *Server) fail(err error) {
	select {
	case s.errs <- err:
	default:
	}
}

// result waits for the target's end of the last connection.
func (s *Server) result() (*unix.TCPInfo, error) {
	select {
	case info := <-s.done:
		return info, nil
	case err := <-s.errs:
		return nil, fmt.Errorf("target: %w", err)
	case <-time.After(30 * time.Second):
		return nil, errors.New("target: the connection did not end within 30 s")
	}
}

// dial connects from the client namespace and asks for mode; rcvbuf > 0
// bounds the client's receive buffer.
func dial(mode byte, rcvbuf int) (net.Conn, error) {
	var c net.Conn
	err := InNS(ClientNS, func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		if rcvbuf > 0 {
			d.Control = func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf) })
				return errors.Join(err, serr)
			}
		}
		c, err = d.Dial("tcp4", net.JoinHostPort(TargetIP, strconv.Itoa(Port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the target: %w", err)
	}
	if _, err := c.Write([]byte{mode}); err != nil {
		c.Close()
		return nil, fmt.Errorf("asking the target for mode %c: %w", mode, err)
	}
	return c, nil
}

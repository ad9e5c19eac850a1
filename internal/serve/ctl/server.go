package ctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Handler answers requests. It is called from one goroutine per
// connection, so it must be safe for concurrent use.
type Handler interface {
	Handle(ctx context.Context, r Request) Response
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, r Request) Response

func (f HandlerFunc) Handle(ctx context.Context, r Request) Response { return f(ctx, r) }

// maxLine bounds a request line; real requests are under 200 bytes.
const maxLine = 64 << 10

// maxDrain bounds how much of an over-long line is read and thrown away
// so that the client, still writing it, gets the error reply instead of
// a broken pipe.
const maxDrain = 16 << 20

// Limits bound what clients can hold of the daemon: a root-only socket
// still must not let a stuck script (or a loop of them) take the
// daemon's descriptors, which its control loop needs.
type Limits struct {
	// MaxConns is how many connections are served at once; more are
	// answered with an error and closed.
	MaxConns int
	// IdleTimeout closes a connection that sends no request for that
	// long; WriteTimeout bounds writing one answer.
	IdleTimeout, WriteTimeout time.Duration
}

// DefaultLimits: sanqos throttle and top need one connection each, for
// well under a second.
var DefaultLimits = Limits{MaxConns: 32, IdleTimeout: 30 * time.Second, WriteTimeout: 5 * time.Second}

// acceptor is the listener, behind an interface so that a test can make
// Accept fail as an exhausted process does.
type acceptor interface {
	AcceptUnix() (*net.UnixConn, error)
	Close() error
}

// Server is a listening control socket.
type Server struct {
	// Limits apply to connections accepted after Serve starts; Listen
	// sets DefaultLimits.
	Limits Limits

	path    string
	ln      acceptor
	log     *slog.Logger
	allowed func(uid uint32) bool
	wg      sync.WaitGroup
	once    sync.Once
}

// Listen creates the socket at path, mode 0600, in a directory it creates
// with mode 0755 if missing. A socket file nobody answers on (left by a
// killed daemon) is replaced; a live one is an error. Only peers with
// uid 0 are served, checked with SO_PEERCRED as well as by the mode.
func Listen(path string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another sanqos daemon is already listening on %s; stop it first or pass another --socket", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or pass another --socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	// The umask makes the socket 0600 from its creation, so there is no
	// moment in which others could connect.
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return &Server{Limits: DefaultLimits, path: path, ln: ln, log: log.With("socket", path), allowed: func(uid uint32) bool { return uid == 0 }}, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve answers connections until ctx ends or the server is closed.
func (s *Server) Serve(ctx context.Context, h Handler) error {
	// Closing the listener is what ends AcceptUnix.
	defer context.AfterFunc(ctx, func() { s.Close() })()
	lim := s.Limits
	if lim.MaxConns <= 0 {
		lim.MaxConns = DefaultLimits.MaxConns
	}
	slots := make(chan struct{}, lim.MaxConns)
	var backoff time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.wg.Wait()
				return nil
			}
			// Out of descriptors (EMFILE, ENFILE) or a connection that
			// died in the backlog: wait a little and accept again, as
			// net/http does. Stopping here took the socket away for good.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
				s.log.Warn("accepting a control connection failed; retrying", "err", err)
			} else {
				backoff = min(2*backoff, time.Second)
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		select {
		case slots <- struct{}{}:
		default:
			// Answered at once and closed: the slot holders are not
			// disturbed, and the client learns why.
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_ = json.NewEncoder(c).Encode(Response{Error: fmt.Sprintf("too many control connections (%d open); try again", lim.MaxConns)})
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-slots }()
			s.serveConn(ctx, c, h, lim)
		}()
	}
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn, h Handler, lim Limits) {
	defer c.Close()
	// Serve waits for every connection before it returns, so an idle
	// client must not hold the daemon's shutdown: closing the connection
	// ends the blocked read.
	defer context.AfterFunc(ctx, func() { c.Close() })()
	enc := json.NewEncoder(c)
	write := func(r Response) error {
		if lim.WriteTimeout > 0 {
			c.SetWriteDeadline(time.Now().Add(lim.WriteTimeout))
		}
		return enc.Encode(r)
	}
	uid, err := peerUID(c)
	if err != nil {
		// Without the peer's credentials nobody can be trusted.
		s.log.Warn("refusing a control connection: cannot read its credentials", "err", err)
	}
	if err != nil || !s.allowed(uid) {
		// The peer may already be gone; there is no one to tell.
		_ = write(Response{Error: "the sanqos control socket is root-only; run as root"})
		return
	}
	br := bufio.NewReaderSize(c, 4096)
	for {
		if lim.IdleTimeout > 0 {
			c.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		}
		line, err := readLine(br)
		if errors.Is(err, errLineTooLong) {
			_ = write(Response{Error: fmt.Sprintf("request line longer than %d KiB; a request is one JSON object on one line", maxLine>>10)})
			return
		}
		if len(line) == 0 && err != nil {
			return // EOF, idle timeout, or the daemon stopping
		}
		if err := write(parseAndHandle(ctx, h, line)); err != nil {
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline (the last line may
// lack one). A line over maxLine is read on up to maxDrain and dropped,
// so that the client can finish sending it and read the error reply.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxLine+1 {
			drained := len(line) + len(frag)
			for errors.Is(err, bufio.ErrBufferFull) && drained < maxDrain {
				frag, err = br.ReadSlice('\n')
				drained += len(frag)
			}
			return nil, errLineTooLong
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, err
	}
}

// parseAndHandle decodes one request strictly, so that a misspelled
// field ("delya") is an error rather than a default, and answers it.
func parseAndHandle(ctx context.Context, h Handler, line []byte) Response {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return Response{Error: fmt.Sprintf("bad request: %v", err)}
	}
	if dec.More() {
		return Response{Error: "bad request: more than one JSON value on the line; send one request per line"}
	}
	return h.Handle(ctx, r)
}

// Close stops listening and removes the socket file.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() { err = s.ln.Close() })
	return err
}

// Call sends one request to the daemon at path and returns its answer. A
// response with OK false comes back as an error carrying its message.
func Call(ctx context.Context, path string, r Request) (Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrPermission):
			return Response{}, fmt.Errorf("permission denied on %s: the control socket is root-only; run as root", path)
		case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
			return Response{}, fmt.Errorf("no sanqos daemon is listening on %s: start one with 'sanqos run --manual' (or pass its --socket)", path)
		}
		return Response{}, fmt.Errorf("connecting to the daemon at %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	// A daemon that refuses the connection (too many open) answers and
	// closes before reading: the write then fails, but the answer says why.
	werr := json.NewEncoder(c).Encode(r)
	var resp Response
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&resp); err != nil {
		if werr != nil {
			return Response{}, fmt.Errorf("sending to the daemon at %s: %w", path, werr)
		}
		return Response{}, fmt.Errorf("reading the daemon's answer from %s: %w", path, err)
	}
	if !resp.OK {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

package ctl

import (
	"bufio"
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

// Server is a listening control socket.
type Server struct {
	path    string
	ln      *net.UnixListener
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
	return &Server{path: path, ln: ln, log: log.With("socket", path), allowed: func(uid uint32) bool { return uid == 0 }}, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve answers connections until ctx ends or the server is closed.
func (s *Server) Serve(ctx context.Context, h Handler) error {
	// Closing the listener is what ends AcceptUnix.
	defer context.AfterFunc(ctx, func() { s.Close() })()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.wg.Wait()
				return nil
			}
			return fmt.Errorf("accepting on %s: %w", s.path, err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, c, h)
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

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn, h Handler) {
	defer c.Close()
	// Serve waits for every connection before it returns, so an idle
	// client must not hold the daemon's shutdown: closing the connection
	// ends the blocked read.
	defer context.AfterFunc(ctx, func() { c.Close() })()
	enc := json.NewEncoder(c)
	uid, err := peerUID(c)
	if err != nil {
		// Without the peer's credentials nobody can be trusted.
		s.log.Warn("refusing a control connection: cannot read its credentials", "err", err)
	}
	if err != nil || !s.allowed(uid) {
		// The peer may already be gone; there is no one to tell.
		_ = enc.Encode(Response{Error: "the sanqos control socket is root-only; run as root"})
		return
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 4096), maxLine)
	for sc.Scan() {
		var r Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			resp = Response{Error: fmt.Sprintf("bad request: %v", err)}
		} else {
			resp = h.Handle(ctx, r)
		}
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
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
	if err := json.NewEncoder(c).Encode(r); err != nil {
		return Response{}, fmt.Errorf("sending to the daemon at %s: %w", path, err)
	}
	var resp Response
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("reading the daemon's answer from %s: %w", path, err)
	}
	if !resp.OK {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

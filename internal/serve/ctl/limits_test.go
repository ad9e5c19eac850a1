package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func startServer(t *testing.T, lim Limits) (string, *Server) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the control socket serves root only; run as root")
	}
	path := socketPath(t)
	srv, err := Listen(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Limits = lim
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, HandlerFunc(func(context.Context, Request) Response { return Response{OK: true} }))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path, srv
}

func rawCall(t *testing.T, path, line string) (Response, error) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, werr := io.WriteString(c, line) // a refusing server answers without reading
	var r Response
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&r); err != nil {
		return r, errors.Join(werr, err)
	}
	return r, nil
}

// Finding 11 of issue 14: a misspelled field was ignored, and a line over
// 64 KiB reset the connection without a word.
func TestServerRejectsUnknownFieldAndLongLine(t *testing.T) {
	path, _ := startServer(t, DefaultLimits)
	r, err := rawCall(t, path, `{"op":"list","delya":"5ms"}`+"\n")
	if err != nil || r.OK || !strings.Contains(r.Error, `"delya"`) {
		t.Errorf("misspelled field: %+v, %v; want an error naming it", r, err)
	}
	long := `{"op":"list","ip":"` + strings.Repeat("1", 70<<10) + `"}` + "\n"
	r, err = rawCall(t, path, long)
	if err != nil || r.OK || !strings.Contains(r.Error, "64 KiB") {
		t.Errorf("70 KiB line: %+v, %v; want an error reply saying the limit", r, err)
	}
	// The server still answers.
	if r, err := rawCall(t, path, `{"op":"list"}`+"\n"); err != nil || !r.OK {
		t.Errorf("after the bad lines: %+v, %v", r, err)
	}
}

// Finding 2: connections are bounded and idle ones are closed.
func TestServerBoundsConnections(t *testing.T) {
	path, _ := startServer(t, Limits{MaxConns: 2, IdleTimeout: 300 * time.Millisecond, WriteTimeout: time.Second})
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	time.Sleep(50 * time.Millisecond) // let the server take both
	r, err := rawCall(t, path, `{"op":"list"}`+"\n")
	if err != nil || r.OK || !strings.Contains(r.Error, "too many") {
		t.Errorf("third connection: %+v, %v; want 'too many'", r, err)
	}
	// The idle ones are closed after IdleTimeout, and the slot is free.
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("idle connection: read %v, want EOF (closed by the server)", err)
		}
	}
	if r, err := rawCall(t, path, `{"op":"list"}`+"\n"); err != nil || !r.OK {
		t.Errorf("after the idle ones left: %+v, %v", r, err)
	}
}

// flakyListener fails Accept with EMFILE a few times, as a daemon out of
// descriptors sees it.
type flakyListener struct {
	acceptor
	fails atomic.Int32
}

func (l *flakyListener) AcceptUnix() (*net.UnixConn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.acceptor.AcceptUnix()
}

// Finding 2: the accept loop stopped for good at the first EMFILE.
func TestServerSurvivesEMFILE(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the control socket serves root only; run as root")
	}
	path := socketPath(t)
	srv, err := Listen(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{acceptor: srv.ln}
	fl.fails.Store(5)
	srv.ln = fl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, HandlerFunc(func(context.Context, Request) Response { return Response{OK: true} }))
	}()
	r, err := rawCall(t, path, `{"op":"list"}`+"\n")
	if err != nil || !r.OK {
		t.Errorf("after 5 EMFILE: %+v, %v", r, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v, want nil after EMFILE and a clean stop", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop")
	}
}

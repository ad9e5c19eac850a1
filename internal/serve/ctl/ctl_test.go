package ctl

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// recBackend records the states applied and can be told to fail.
type recBackend struct {
	states []throttle.State
	fail   bool
}

func (b *recBackend) Name() string { return "rec" }
func (b *recBackend) Apply(_ context.Context, s throttle.State) error {
	if b.fail {
		return io.ErrUnexpectedEOF
	}
	b.states = append(b.states, s)
	return nil
}
func (b *recBackend) Stats() throttle.Stats { return throttle.Stats{PacketsHeld: 7} }
func (b *recBackend) Close() error          { return nil }

func TestParseManualRejects(t *testing.T) {
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{IP: "10.0.0.300", Delay: "1ms"}, "not an IP"},
		{Request{IP: "fe80::1%eth0", Delay: "1ms"}, "not an IP"},
		{Request{IP: "10.0.0.3", Delay: "-1ms"}, "out of range"},
		{Request{IP: "10.0.0.3", Delay: "0s"}, "out of range"},
		{Request{IP: "10.0.0.3", Delay: "2s"}, "out of range"},
		{Request{IP: "10.0.0.3", Delay: "4.6"}, "not a duration"},
		{Request{IP: "10.0.0.3", Delay: "1ms", Direction: "up"}, "direction"},
		{Request{IP: "10.0.0.3", Delay: "1ms", Ports: []uint16{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}, "at most 15"},
	} {
		if _, err := ParseManual(c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.r, err, c.want)
		}
	}
	m, err := ParseManual(Request{IP: "10.0.0.3", Delay: "4.6ms", Direction: "both", Ports: []uint16{3261, 3260, 3261}})
	if err != nil || m.Delay != 4600*time.Microsecond || m.Direction != throttle.Both || len(m.Ports) != 2 {
		t.Fatalf("valid request parsed as %+v, %v", m, err)
	}
}

func socketPath(t *testing.T) string {
	// unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	d, err := os.MkdirTemp("", "sanqos-ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "sub", "s.sock")
}

// TestServeManual drives the manual handler through the socket: set,
// list, a rejected request that changes nothing, a failing backend that
// changes nothing, free.
func TestServeManual(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the control socket serves root only; run as root")
	}
	path := socketPath(t)
	srv, err := Listen(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := Listen(path, nil); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Fatalf("second Listen on a live socket: %v, want 'already listening'", err)
	}
	b := &recBackend{}
	h := NewManualHandler(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, h) }()

	if _, err := Call(ctx, path, Request{Op: OpThrottle, IP: "10.0.0.3", Delay: "4.6ms", Direction: "write"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Call(ctx, path, Request{Op: OpThrottle, IP: "10.0.0.3", Delay: "5s"}); err == nil {
		t.Fatal("absurd delay accepted")
	}
	b.fail = true
	// The backend fails the apply and the rollback: the answer must say
	// that the data path may not match the list.
	if _, err := Call(ctx, path, Request{Op: OpThrottle, IP: "10.0.0.4", Delay: "1ms"}); err == nil {
		t.Fatal("failed apply reported success")
	} else if !strings.Contains(err.Error(), "restoring the previous throttles failed too") {
		t.Errorf("failed apply and rollback: error %q does not say the rollback failed", err)
	}
	b.fail = false
	resp, err := Call(ctx, path, Request{Op: OpStatus})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Throttles) != 1 || resp.Throttles[0].IP != "10.0.0.3" || resp.Throttles[0].Delay != "4.6ms" || resp.Stats.PacketsHeld != 7 {
		t.Fatalf("status %+v: want only 10.0.0.3 at 4.6ms and the backend's stats", resp)
	}
	last := b.states[len(b.states)-1]
	if len(last.Groups) != 1 || last.Groups[0].WriteDelay != 4600*time.Microsecond || last.Groups[0].ReadDelay != 0 {
		t.Fatalf("backend state %+v after the failed request, want only the write throttle of 10.0.0.3", last)
	}
	if _, err := Call(ctx, path, Request{Op: OpFree, IP: "10.0.0.9"}); err == nil {
		t.Fatal("freeing an unthrottled IP succeeded")
	}
	if _, err := Call(ctx, path, Request{Op: OpFree, IP: "10.0.0.3"}); err != nil {
		t.Fatal(err)
	}
	if last := b.states[len(b.states)-1]; len(last.Groups) != 0 {
		t.Fatalf("after free the backend state is %+v, want empty", last)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left after the server stopped: %v", err)
	}
	if _, err := Call(context.Background(), path, Request{Op: OpList}); err == nil || !strings.Contains(err.Error(), "no sanqos daemon") {
		t.Fatalf("call with no daemon: %v, want 'no sanqos daemon'", err)
	}
}

// TestListenReplacesStaleSocket: a killed daemon leaves its socket file;
// the next daemon takes over.
func TestListenReplacesStaleSocket(t *testing.T) {
	path := socketPath(t)
	srv, err := Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.ln.(*net.UnixListener).SetUnlinkOnClose(false) // as if killed: the file stays
	srv.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left for the test: %v", err)
	}
	srv2, err := Listen(path, nil)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	srv2.Close()
}

// TestServeStopsWithIdleClient: a client that connects and says nothing
// must not keep Serve (and so the daemon's shutdown) waiting.
func TestServeStopsWithIdleClient(t *testing.T) {
	path := socketPath(t)
	srv, err := Listen(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, NewManualHandler(&recBackend{})) }()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A byte without a newline: the server has accepted and is reading.
	if _, err := c.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still waiting for an idle client 10 s after its context ended")
	}
}

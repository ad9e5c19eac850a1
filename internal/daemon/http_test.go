package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func serveTest(t *testing.T, l net.Listener, lim HTTPLimits) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeLimited(ctx, l, okHandler, lim) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeLimited: %v", err)
		}
	})
}

func get(addr string) error {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Finding 2 of issue 14: the HTTP server had no connection limit and no
// idle timeout; idle connections took every descriptor of the daemon.
func TestHTTPBoundsConnectionsAndClosesIdle(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveTest(t, l, HTTPLimits{MaxConns: 3, ReadHeader: 300 * time.Millisecond, Read: time.Second, Write: time.Second, Idle: time.Second})
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(50 * time.Millisecond)
	// Over the limit: closed at once, not left waiting.
	extra, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if b, err := io.ReadAll(extra); err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 503") {
		t.Errorf("connection over the limit: %q, %v; want a 503 and the end", b, err)
	}
	// The idle ones are closed after the header timeout, freeing slots.
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("idle connection: read %v, want EOF from the server", err)
		}
	}
	if err := get(l.Addr().String()); err != nil {
		t.Errorf("GET after the idle ones were closed: %v", err)
	}
}

type emfileListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func TestHTTPSurvivesEMFILE(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &emfileListener{Listener: l}
	fl.fails.Store(5)
	serveTest(t, fl, DefaultHTTPLimits)
	if err := get(l.Addr().String()); err != nil {
		t.Errorf("GET after 5 EMFILE: %v", err)
	}
}

// Finding 2: a metrics port held by another process stopped the daemon
// from starting. ListenAndServe retries in the background instead.
func TestHTTPPortHeldThenFreed(t *testing.T) {
	holder, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := holder.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ListenAndServe(ctx, addr, okHandler, DefaultHTTPLimits, slog.New(slog.NewTextHandler(io.Discard, nil)), 50*time.Millisecond)
	}()
	time.Sleep(150 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("ListenAndServe gave up on a held port: %v", err)
	default:
	}
	holder.Close()
	deadline := time.Now().Add(3 * time.Second)
	for get(addr) != nil {
		if time.Now().After(deadline) {
			t.Fatal("not serving 3 s after the port was freed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ListenAndServe: %v", err)
	}
}

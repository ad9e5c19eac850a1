package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/serve/ctl"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// hog keeps n idle connections to addr open from the source addresses
// srcs (round robin; 127.0.0.0/8 is all on lo), and reopens any the
// server closes, until the test ends: hog.py of audit round 2, N7.
func hog(t *testing.T, addr string, n int, srcs ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcs[i%len(srcs)])}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					stop := context.AfterFunc(ctx, func() { c.Close() })
					io.Copy(io.Discard, c) // until the server closes it
					stop()
					c.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // all connected, the slots taken
}

// getFrom GETs path from addr with source address src.
func getFrom(src, addr, path string) (string, error) {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
	defer tr.CloseIdleConnections()
	c := http.Client{Timeout: 2 * time.Second, Transport: tr}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

// TestHTTPHogCannotLockOutOthers (audit round 2, N7): one peer holding
// 80 idle connections, reopening each one closed, took all 64 slots;
// then every GET, /metrics and 'sanqos status', got 503. Now the peer
// holds at most its share, and with all slots taken (by idle
// connections of several addresses) a newcomer evicts one of the
// biggest holder.
func TestHTTPHogCannotLockOutOthers(t *testing.T) {
	for _, srcs := range [][]string{{"127.0.0.2"}, {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}} {
		t.Run(fmt.Sprintf("%d addresses", len(srcs)), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			serveTest(t, l, DefaultHTTPLimits)
			hog(t, l.Addr().String(), 80, srcs...)
			for i := range 5 {
				if _, err := getFrom("127.0.0.1", l.Addr().String(), "/"); err != nil {
					t.Fatalf("GET %d from another peer while a hog holds 80 connections: %v", i, err)
				}
			}
		})
	}
}

// TestHTTPPeerKeyTellsLocalUsersApart (audit round 2, N7): every local
// user connects from 127.0.0.1, so a per-address limit alone would put
// root's 'sanqos status' and a hog of nobody's in one share; the peer of
// a local connection includes the uid of its socket.
func TestHTTPPeerKeyTellsLocalUsersApart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: connects as uid 65534")
	}
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skipf("needs /usr/bin/python3: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", py, "-c",
		fmt.Sprintf("import socket,time; s=socket.create_connection(('127.0.0.1',%d)); time.sleep(5)", port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	theirs, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	mine, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	mineAccepted, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer mineAccepted.Close()
	if got, want := peerKey(theirs), "127.0.0.1 uid 65534"; got != want {
		t.Errorf("nobody's connection: peer %q, want %q", got, want)
	}
	if got, want := peerKey(mineAccepted), "127.0.0.1 uid 0"; got != want {
		t.Errorf("root's connection: peer %q, want %q", got, want)
	}
}

// TestStatusOverSocketWhileHTTPHogged (audit round 2, N7): with the
// HTTP listener crowded by a hog of root's own address and uid (so that
// HTTP is refused to root's client as well), the control socket still
// answers the whole /status document.
func TestStatusOverSocketWhileHTTPHogged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the control socket serves uid 0 only")
	}
	ov := &ctl.Overrides{}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{decisions: []Decision{dec(20, 2, "10.99.0.3")}},
		Stats: &fakeStats{}, Backend: &fakeBackend{}, Logger: newLogger(&logBuf{}), Overrides: ov})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.tick(ctx, t0)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveTestHandler(t, l, d.Handler(), DefaultHTTPLimits)
	sock := filepath.Join(t.TempDir(), "s.sock")
	srv, err := ctl.Listen(sock, newLogger(&logBuf{}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, d.CtlHandler(ov)) }()
	defer func() { cancel(); <-done }()

	hog(t, l.Addr().String(), 80, "127.0.0.1")
	if _, err := getFrom("127.0.0.1", l.Addr().String(), "/status"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Logf("HTTP from the hog's own peer: %v (the hog holds its whole share)", err)
	}
	for i := range 5 {
		resp, err := ctl.Call(ctx, sock, ctl.Request{Op: ctl.OpFullStatus})
		if err != nil {
			t.Fatalf("status %d over the control socket while HTTP is hogged: %v", i, err)
		}
		var st status.Status
		if err := json.Unmarshal(resp.Status, &st); err != nil || len(st.Resources) != 1 || st.Resources[0].Name != "fs-lab" {
			t.Fatalf("status over the socket: %v %s, want fs-lab's", err, resp.Status)
		}
	}
	if body, err := getFrom("127.0.0.9", l.Addr().String(), "/status"); err != nil || !strings.Contains(body, "fs-lab") {
		t.Errorf("/status from another peer while hogged: %v %q", err, body)
	}
}

func serveTestHandler(t *testing.T, l net.Listener, h http.Handler, lim HTTPLimits) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeLimited(ctx, l, h, lim) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeLimited: %v", err)
		}
	})
}

// TestHTTPNobodyHogOnLoopback (audit round 2, N7, as reproduced there):
// uid 65534 holds 80 connections from 127.0.0.1 and reopens each one
// closed; root's GETs from the same address still get through.
func TestHTTPNobodyHogOnLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the hog as uid 65534")
	}
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skipf("needs /usr/bin/python3: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveTest(t, l, DefaultHTTPLimits)
	script := `import socket, sys, threading, time
def hold():
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            while s.recv(4096):
                pass
            s.close()
        except OSError:
            pass
        time.sleep(0.01)
for _ in range(80):
    threading.Thread(target=hold, daemon=True).start()
print("holding", flush=True)
time.sleep(60)
`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", py, "-c", script,
		fmt.Sprint(l.Addr().(*net.TCPAddr).Port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	io.ReadFull(out, make([]byte, len("holding\n")))
	time.Sleep(500 * time.Millisecond)
	for i := range 5 {
		if _, err := getFrom("127.0.0.1", l.Addr().String(), "/"); err != nil {
			t.Fatalf("root's GET %d while nobody holds 80 connections from the same address: %v", i, err)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sanqos/sanqos/internal/serve/status"
)

// fakeDaemon serves /status like a daemon whose delay grows by 1 ms per
// request.
func fakeDaemon(t *testing.T) string {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := float64(n.Add(1))
		json.NewEncoder(w).Encode(status.Status{Version: "test", Backend: "dry-run", Ticks: uint64(k),
			Resources: []status.Resource{{Name: "fs-lab", SignalMs: 20, ThresholdMs: 15, DelayMs: k, Members: []string{"10.99.0.3"}}},
			Consumers: []status.Consumer{{Resource: "fs-lab", Addr: "10.99.0.3", Device: "loop2", WriteKBs: 9000}},
			Discovery: status.Discovery{OK: true}})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestStatusTable(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"status", "--addr", fakeDaemon(t)}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"fs-lab", "1.00", "10.99.0.3", "backend dry-run"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestStatusJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"status", "--json", "--addr", fakeDaemon(t)}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var s status.Status
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Resources[0].Name != "fs-lab" {
		t.Fatalf("not the status JSON (%v):\n%s", err, out.String())
	}
}

func TestStatusNoDaemon(t *testing.T) {
	addr := freeAddr(t)
	var out, errb bytes.Buffer
	if code := dispatch([]string{"status", "--addr", addr}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	msg := errb.String()
	if !strings.Contains(msg, "no sanqos daemon at "+addr) || !strings.Contains(msg, "start it with 'sanqos run'") {
		t.Errorf("error message = %q", msg)
	}
	if strings.Count(msg, "\n") != 1 {
		t.Errorf("want one line of error, got %q", msg)
	}
}

func TestTopIterations(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"top", "--addr", fakeDaemon(t), "--iterations", "3", "--interval", "10ms"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	frames := strings.Count(out.String(), "TOP WRITERS")
	if frames != 3 {
		t.Fatalf("%d frames, want 3:\n%s", frames, out.String())
	}
	// Each frame fetched anew: the delay the fake reports grows per request.
	for _, want := range []string{"delay  1.00 ms", "delay  2.00 ms", "delay  3.00 ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no frame with %q", want)
		}
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("escape sequences written to a non-terminal")
	}
}

func TestTopBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"top", "--interval", "1ms"}, &out, &errb); code != 2 {
		t.Errorf("exit %d, want 2 for a too short interval", code)
	}
}

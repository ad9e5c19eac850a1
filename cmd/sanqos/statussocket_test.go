package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/serve/ctl"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// fakeCtlDaemon serves the control socket like an autonomic daemon
// answering full-status.
func fakeCtlDaemon(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the control socket serves uid 0 only")
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	srv, err := ctl.Listen(sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, ctl.HandlerFunc(func(_ context.Context, r ctl.Request) ctl.Response {
			if r.Op != ctl.OpFullStatus {
				return ctl.Response{Error: "unknown operation"}
			}
			doc, _ := json.Marshal(status.Status{Version: "test", Backend: "dry-run",
				Resources: []status.Resource{{Name: "fs-sock", SignalMs: 20, ThresholdMs: 15, DelayMs: 3, Members: []string{"10.99.0.7"}}},
				Discovery: status.Discovery{OK: true}})
			return ctl.Response{OK: true, Mode: "autonomic", Status: doc}
		}))
	}()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}

// TestStatusAndTopOverSocket (audit round 2, N7): 'sanqos status' and
// 'sanqos top' read the daemon over its control socket, which no other
// user can crowd; with the socket gone they fall back to HTTP.
func TestStatusAndTopOverSocket(t *testing.T) {
	sock := fakeCtlDaemon(t)
	for _, args := range [][]string{
		{"status", "--socket", sock},
		{"status", "--socket", sock, "--addr", freeAddr(t)},
		{"top", "--socket", sock, "--iterations", "1"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), "fs-sock") {
			t.Errorf("%v: output lacks the socket's resource:\n%s", args, out.String())
		}
	}
	var out, errb bytes.Buffer
	gone := filepath.Join(t.TempDir(), "none.sock")
	if code := dispatch([]string{"status", "--socket", gone, "--addr", fakeDaemon(t)}, &out, &errb); code != 0 || !strings.Contains(out.String(), "fs-lab") {
		t.Errorf("no daemon on the socket: exit %d, %s%s; want the HTTP daemon's status", code, out.String(), errb.String())
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/serve/ctl"
	"github.com/sanqos/sanqos/internal/serve/status"
)

func TestRunBadConfigOneError(t *testing.T) {
	addr := freeAddr(t)
	var out, errb bytes.Buffer
	code := dispatch([]string{"run", "--backend", "dry-run", "--listen", addr, "--controller", "bang-bang",
		"--small-segment", "-1"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	msg := errb.String()
	for _, want := range []string{"nothing was started", "--small-segment = -1", "bang-bang"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if _, err := (status.Client{Addr: addr}).Get(context.Background()); err == nil {
		t.Error("something is listening after a refused start")
	}
}

func TestRunBadConfigFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sanqos.toml")
	os.WriteFile(p, []byte("tick = \"100ms\"\ntreshold = \"15ms\"\n"), 0o644)
	var out, errb bytes.Buffer
	if code := dispatch([]string{"run", "--config", p}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if msg := errb.String(); !strings.Contains(msg, p) || !strings.Contains(msg, "treshold") || !strings.Contains(msg, "nothing was started") {
		t.Errorf("error should name the file and the unknown key:\n%s", msg)
	}
}

func TestRunBadConsumer(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"run", "--backend", "dry-run", "--consumer", "fs,not-an-ip,loop1"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2 (usage)", code)
	}
	if !strings.Contains(errb.String(), "not-an-ip") {
		t.Errorf("error does not name the bad address:\n%s", errb.String())
	}
}

// The whole daemon in-process with the dry-run backend, on a fixture
// /proc: it serves /status, the control socket and the record, and stops
// cleanly on cancel.
func TestRunDryRunEndToEnd(t *testing.T) {
	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	os.Mkdir(proc, 0o755)
	diskstats := "   7       1 loop1 100 0 800 50 10 0 80 5 0 60 55 0 0 0 0 0 0\n   7       2 loop2 5 0 40 1 900 0 7200 400 0 300 401 0 0 0 0 0 0\n"
	if err := os.WriteFile(filepath.Join(proc, "diskstats"), []byte(diskstats), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	sock := filepath.Join(dir, "sanqos.sock")
	rec := filepath.Join(dir, "rec.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb bytes.Buffer
	done := make(chan error, 1)
	// The file sets most things; the flags override the default threshold
	// and the per-resource one from the file stays.
	cfg := filepath.Join(dir, "sanqos.toml")
	toml := fmt.Sprintf("backend = \"dry-run\"\ntick = \"20ms\"\nthreshold = \"15ms\"\nlisten = %q\nsocket = %q\nrecord = %q\n"+
		"[resources.\"fs-lab\"]\nthreshold = \"30ms\"\n", addr, sock, rec)
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- cmdRun(ctx, []string{"--config", cfg, "--threshold", "25ms", "--proc", proc,
			"--consumer", "fs-lab,10.99.0.2,loop1", "--consumer", "fs-b,10.99.0.3,loop2"},
			&bytes.Buffer{}, &syncWriter{w: &errb})
	}()
	var s status.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		s, err = status.Client{Addr: addr}.Get(ctx)
		if err == nil && s.Ticks >= 3 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no status with 3 ticks in 10 s (last error %v); daemon said:\n%v", err, <-done)
		}
		select {
		case err := <-done:
			t.Fatalf("daemon stopped early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if s.Backend != "dry-run" || len(s.Resources) != 2 || len(s.Consumers) != 2 || s.TickMs != 20 {
		t.Errorf("status = %+v", s)
	}
	for _, r := range s.Resources {
		if want := map[string]float64{"fs-lab": 30, "fs-b": 25}[r.Name]; r.ThresholdMs != want {
			t.Errorf("%s threshold %v ms, want %v (file per resource, else the flag)", r.Name, r.ThresholdMs, want)
		}
	}
	if os.Geteuid() == 0 { // the control socket serves root only
		resp, err := ctl.Call(ctx, sock, ctl.Request{Op: ctl.OpList})
		if err != nil || !resp.OK || resp.Mode != "autonomic" {
			t.Errorf("control socket list: %+v, %v", resp, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop within 10 s of cancel")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
	f, err := os.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		var r status.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || len(r.Resources) != 2 {
			t.Fatalf("record line %d: %v %q", lines+1, err, sc.Text())
		}
	}
	if lines < 3 {
		t.Errorf("%d record lines, want ≥ 3", lines)
	}
}

// syncWriter lets the daemon's goroutines log into one buffer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestRunAckDelayOption: the autonomic daemon takes ack_delay from the
// config file, a bare --ack-delay overrides it, and the backend options
// carry it; it is off by default.
func TestRunAckDelayOption(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sanqos.toml")
	if err := os.WriteFile(cfg, []byte("ack_delay = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--ack-delay=false"}, false},
		{[]string{"--config", cfg}, false},
		{[]string{"--config", cfg, "--ack-delay"}, true},
	} {
		args := append([]string{"--backend", "dry-run", "--consumer", "fs,10.0.0.3,loop1"}, c.args...)
		o, err := parseRunOptions(args, false, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if o.backend.AckDelay != c.want || o.config.AckDelay != c.want {
			t.Errorf("%v: backend AckDelay %v, config %v, want %v", c.args, o.backend.AckDelay, o.config.AckDelay, c.want)
		}
	}
}

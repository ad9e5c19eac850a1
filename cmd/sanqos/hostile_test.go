package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/serve/status"
)

// holderEnv makes the test binary, re-run as nobody, the hostile client
// of TestIdleConnectionsFromNobody (TestHelperHolder).
const holderEnv = "SANQOS_TEST_HOLDER"

// TestHelperHolder is not a test: run by TestIdleConnectionsFromNobody as
// user nobody, it opens idle connections to every listener given in
// SANQOS_TEST_HOLDER (tcp:ADDR:N, unix:PATH:N), reports how many it holds,
// and keeps them until its stdin closes.
func TestHelperHolder(t *testing.T) {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		t.Skip("only run as the hostile client of TestIdleConnectionsFromNobody")
	}
	var held []net.Conn
	for _, l := range strings.Fields(spec) {
		i, j := strings.Index(l, ":"), strings.LastIndex(l, ":")
		netw, addr := l[:i], l[i+1:j]
		n, _ := strconv.Atoi(l[j+1:])
		ok, refused := 0, 0
		for range n {
			c, err := net.DialTimeout(netw, addr, time.Second)
			if err != nil {
				refused++
				continue
			}
			held = append(held, c)
			ok++
		}
		fmt.Printf("%s connected=%d refused=%d\n", netw, ok, refused)
	}
	fmt.Println("holding")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
}

// Finding 2 of issue 14, live: an unprivileged user holding 1,000 idle
// connections to every listener exhausted the daemon's descriptors (shown
// with a lowered limit): /proc/diskstats became unreadable and all
// throttling was released after 10 ticks. Here the daemon runs with 256
// descriptors, a fixture diskstats that keeps a resource over its
// threshold, and nobody holds 1,000 connections to /metrics and tries
// 1,000 on the control socket; ticking and throttling must not change.
func TestIdleConnectionsFromNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the hostile client as nobody")
	}
	if testing.Short() {
		t.Skip("a live test of 10 s")
	}
	dir, err := os.MkdirTemp("", "sanqos-hostile")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	proc := filepath.Join(dir, "proc")
	os.Mkdir(proc, 0o755)

	// The disk: loop1 (the reader's) reads at 40 ms; loop2 writes at
	// about 100 MB/s. Fixed-width numbers, so that each rewrite is one
	// same-sized write the daemon's kept descriptor re-reads.
	dsPath := filepath.Join(proc, "diskstats")
	var mu sync.Mutex
	var reads, rticks, wsect uint64
	render := func() []byte {
		return []byte(fmt.Sprintf("   7       1 loop1 %020d 0 %020d %020d 0 0 0 0 0 0 0 0 0 0 0 0 0\n"+
			"   7       2 loop2 0 0 0 0 %020d 0 %020d 0 0 0 0 0 0 0 0 0 0\n", reads, reads*16, rticks, wsect/8, wsect))
	}
	if err := os.WriteFile(dsPath, render(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dsPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	diskCtx, stopDisk := context.WithCancel(context.Background())
	defer stopDisk()
	go func() {
		for {
			select {
			case <-diskCtx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			mu.Lock()
			reads += 5
			rticks += 200
			wsect += 4000
			f.WriteAt(render(), 0)
			mu.Unlock()
		}
	}()

	addr := freeAddr(t)
	sock := filepath.Join(dir, "sanqos.sock")
	rec := filepath.Join(dir, "rec.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb bytes.Buffer
	logs := &syncWriter{w: &errb}
	done := make(chan error, 1)
	go func() {
		done <- cmdRun(ctx, []string{"--backend", "dry-run", "--tick", "50ms", "--threshold", "15ms", "--listen", addr,
			"--socket", sock, "--record", rec, "--proc", proc, "--write-threshold", "1MB/s", "--write-leave", "500kB/s",
			"--consumer", "fs-lab,10.99.0.2,loop1", "--consumer", "fs-lab,10.99.0.3,loop2"}, &bytes.Buffer{}, logs)
	}()
	// window reads the record lines of the last d: ticks, and the ticks
	// with the writer throttled.
	window := func(d time.Duration) (ticks, throttled int, lastDelay float64) {
		b, _ := os.ReadFile(rec)
		cut := time.Now().Add(-d)
		for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
			var r status.Record
			if json.Unmarshal(sc.Bytes(), &r) != nil || r.T.Before(cut) || len(r.Resources) != 1 {
				continue
			}
			ticks++
			if r.Resources[0].DelayMs > 0 && r.Resources[0].Members == 1 {
				throttled++
			}
			lastDelay = r.Resources[0].DelayMs
		}
		return
	}
	time.Sleep(3 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("daemon stopped: %v\n%s", err, errb.String())
	default:
	}
	beforeTicks, beforeThrottled, beforeDelay := window(2 * time.Second)
	if beforeThrottled < beforeTicks*9/10 {
		t.Fatalf("before the flood the writer was throttled in %d of %d ticks; the fixture does not engage the controller", beforeThrottled, beforeTicks)
	}

	// The daemon gets 256 descriptors, as a lowered limit showed it.
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	low := lim
	low.Cur = 256
	// The hostile client is the test binary, as nobody, from a copy it
	// can execute; it inherits the normal limit.
	self, _ := os.Executable()
	bin := filepath.Join(dir, "holder.test")
	if b, err := os.ReadFile(self); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	cmd := exec.Command(bin, "-test.run", "^TestHelperHolder$")
	cmd.Env = append(os.Environ(), holderEnv+"="+fmt.Sprintf("tcp:%s:1000 unix:%s:1000", addr, sock))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	var report []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if sc.Text() == "holding" {
			break
		}
		report = append(report, sc.Text())
	}
	t.Logf("nobody: %s", strings.Join(report, "; "))
	if len(report) != 2 || !strings.Contains(report[1], "connected=0") {
		t.Errorf("nobody connected to the control socket: %q", report)
	}
	start := time.Now()
	time.Sleep(3 * time.Second)
	fds, _ := os.ReadDir("/proc/self/fd")
	duringTicks, duringThrottled, duringDelay := window(time.Since(start) - 200*time.Millisecond)
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	stdin.Close()
	cmd.Wait()

	t.Logf("before: %d ticks in 2 s, %d throttled, delay %.2f ms; under 1,000 idle connections: %d ticks in 2.8 s, %d throttled, delay %.2f ms; %d descriptors open",
		beforeTicks, beforeThrottled, beforeDelay, duringTicks, duringThrottled, duringDelay, len(fds))
	if rate0, rate1 := float64(beforeTicks)/2, float64(duringTicks)/2.8; rate1 < 0.8*rate0 {
		t.Errorf("tick rate fell from %.1f/s to %.1f/s under the connections", rate0, rate1)
	}
	if duringThrottled < duringTicks*9/10 {
		t.Errorf("the writer was throttled in only %d of %d ticks under the connections", duringThrottled, duringTicks)
	}
	if l := errb.String(); strings.Contains(l, "reading diskstats failed") || strings.Contains(l, "releasing all throttling") {
		t.Errorf("the daemon lost its diskstats:\n%s", l)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("daemon: %v", err)
	}
}

package guesttest

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dpDaemon is 'sanqos run --manual' with one backend in the target
// namespace, driven by 'sanqos throttle'.
type dpDaemon struct {
	bin, sock string
	cmd       *exec.Cmd
	log       *dpLog
}

func startDaemon(t *testing.T, bin, backend string) *dpDaemon {
	t.Helper()
	d := &dpDaemon{bin: bin, sock: "/run/sanqos-dp-" + backend + ".sock", log: &dpLog{}}
	args := []string{"--net=/run/netns/" + dpTargetNS, bin, "run", "--manual", "--backend", backend, "--socket", d.sock, "--listen", ""}
	if backend != "nfqueue" {
		args = append(args, "--dev", dpTargetDev)
	}
	d.cmd = exec.Command("nsenter", args...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting sanqos run --backend %s: %v", backend, err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
		exec.Command("nsenter", "--net=/run/netns/"+dpTargetNS, bin, "run", "--backend", backend, "--dev", dpTargetDev, "--cleanup-only").Run()
	})
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command(bin, "throttle", "--socket", d.sock, "--list").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the %s daemon did not answer on %s:\n%s", backend, d.sock, d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d
}

func (d *dpDaemon) throttle(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(d.bin, append([]string{"throttle", "--socket", d.sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("sanqos throttle %s: %v\n%s\ndaemon:\n%s", strings.Join(args, " "), err, out, d.log)
	}
	return string(out)
}

// dpStats are a daemon's data path counters as 'sanqos throttle --list'
// shows them.
type dpStats struct {
	held, passed, bypassed uint64
	errP50, errMax         string // the backend's own delay error (nfqueue)
}

var statsLine = regexp.MustCompile(`packets held (\d+), passed (\d+), backlog \d+, bypassed (\d+), errors \d+, delay error p50 (\S+) max (\S+)`)

// stats reads the counters; a nil daemon (no backend) has none.
func (d *dpDaemon) stats(t *testing.T) dpStats {
	t.Helper()
	if d == nil {
		return dpStats{}
	}
	out := d.throttle(t, "--list")
	m := statsLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sanqos throttle --list shows no counters:\n%s", out)
	}
	n := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	return dpStats{held: n(m[1]), passed: n(m[2]), bypassed: n(m[3]), errP50: m[4], errMax: m[5]}
}

// drops reads what the backend's kernel queue dropped so far in the
// target namespace: fq's drops (edt) or the NFQUEUE's queue and
// user-space drops (nfqueue), summed over its queues.
func (d *dpDaemon) drops(t *testing.T, backend string) uint64 {
	t.Helper()
	if d == nil {
		return 0
	}
	var out []byte
	var err error
	in := []string{"--net=/run/netns/" + dpTargetNS}
	if backend == "nfqueue" {
		out, err = exec.Command("nsenter", append(in, "cat", "/proc/net/netfilter/nfnetlink_queue")...).CombinedOutput()
	} else {
		out, err = exec.Command("nsenter", append(in, "tc", "-s", "qdisc", "show", "dev", dpTargetDev)...).CombinedOutput()
	}
	if err != nil {
		t.Fatalf("reading the %s drops: %v\n%s", backend, err, out)
	}
	return parseDrops(backend, string(out))
}

var tcDropped = regexp.MustCompile(`(?m)^qdisc fq 5e:[\s\S]*?dropped (\d+)`)

func parseDrops(backend, out string) uint64 {
	var n uint64
	if backend == "nfqueue" {
		for _, ln := range strings.Split(out, "\n") {
			if f := strings.Fields(ln); len(f) >= 7 {
				q, _ := strconv.ParseUint(f[5], 10, 64)
				u, _ := strconv.ParseUint(f[6], 10, 64)
				n += q + u
			}
		}
		return n
	}
	if m := tcDropped.FindStringSubmatch(out); m != nil {
		n, _ = strconv.ParseUint(m[1], 10, 64)
	}
	return n
}

// stop ends the daemon with SIGTERM, as a service manager would.
func (d *dpDaemon) stop(t *testing.T) {
	t.Helper()
	if d == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("sanqos run after SIGTERM: %v\n%s", err, d.log)
	}
}

// dpLog collects a daemon's output while the test reads it.
type dpLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *dpLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *dpLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

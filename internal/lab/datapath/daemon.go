package datapath

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Daemon is 'sanqos run' in the target namespace, driven by 'sanqos
// throttle' on its socket.
type Daemon struct {
	Backend   string
	bin, sock string
	cmd       *exec.Cmd
	log       *daemonLog
	done      chan error
	exited    bool
}

// StartManual starts 'sanqos run --manual' with one backend: it throttles
// whom 'sanqos throttle' names, and nobody else.
func StartManual(bin, backend string) (*Daemon, error) {
	return start(bin, backend, "--manual")
}

// StartIdle starts an autonomic daemon that knows the client as a
// consumer, with controller none and wire attribution: it reads the
// counters every tick and throttles nobody.
func StartIdle(bin, backend string) (*Daemon, error) {
	return start(bin, backend, "--consumer", "sanqos-dp,"+ClientIP+",loop0", "--controller", "none",
		"--attribution", "wire", "--ports", strconv.Itoa(Port))
}

func start(bin, backend string, args ...string) (*Daemon, error) {
	d := &Daemon{Backend: backend, bin: bin, sock: "/run/sanqos-dp-" + backend + ".sock", log: &daemonLog{}, done: make(chan error, 1)}
	argv := append([]string{"--net=/run/netns/" + TargetNS, bin, "run", "--backend", backend, "--socket", d.sock, "--listen", ""}, args...)
	if backend != "nfqueue" {
		argv = append(argv, "--dev", TargetDev)
	}
	// nsenter execs sanqos in the namespace: the process is the daemon
	// itself, whose CPU time and signals are its own.
	d.cmd = exec.Command("nsenter", argv...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting sanqos run --backend %s: %w", backend, err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if exec.Command(bin, "throttle", "--socket", d.sock, "--list").Run() == nil {
			return d, nil
		}
		select {
		case err := <-d.done:
			d.exited = true
			d.Close()
			return nil, fmt.Errorf("sanqos run --backend %s exited at start: %v\n%s", backend, err, d.log)
		default:
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("the %s daemon did not answer on %s within 30 s:\n%s", backend, d.sock, d.log)
		}
	}
}

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Log is what the daemon printed so far.
func (d *Daemon) Log() string { return d.log.String() }

// Throttle runs 'sanqos throttle' with args on the daemon's socket.
func (d *Daemon) Throttle(args ...string) (string, error) {
	out, err := exec.Command(d.bin, append([]string{"throttle", "--socket", d.sock}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sanqos throttle %s: %w\n%s\ndaemon:\n%s", strings.Join(args, " "), err, out, d.log)
	}
	return string(out), nil
}

// Pause stops the daemon (SIGSTOP) and Resume lets it go on.
func (d *Daemon) Pause() error  { return d.cmd.Process.Signal(syscall.SIGSTOP) }
func (d *Daemon) Resume() error { return d.cmd.Process.Signal(syscall.SIGCONT) }

// Stop ends the daemon with SIGTERM, as a service manager would, and
// says if it did not exit cleanly.
func (d *Daemon) Stop() error {
	if d == nil || d.exited {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGCONT)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.exited = true
		if err != nil {
			return fmt.Errorf("sanqos run --backend %s after SIGTERM: %w\n%s", d.Backend, err, d.log)
		}
		return nil
	case <-time.After(20 * time.Second):
		d.Close()
		return fmt.Errorf("sanqos run --backend %s did not exit within 20 s of SIGTERM", d.Backend)
	}
}

// Close kills the daemon if it still runs and removes whatever kernel
// objects it left: for every exit path, Stop's included.
func (d *Daemon) Close() {
	if d == nil {
		return
	}
	if !d.exited {
		// SIGTERM first: the daemon removes its kernel objects and its
		// socket itself; SIGKILL only if it does not exit.
		_ = d.cmd.Process.Signal(syscall.SIGCONT)
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		d.exited = true
	}
	_ = os.Remove(d.sock)
	_ = exec.Command("nsenter", "--net=/run/netns/"+TargetNS, d.bin, "run", "--backend", d.Backend, "--dev", TargetDev, "--cleanup-only").Run()
}

// Stats are a daemon's data path counters as 'sanqos throttle --list'
// shows them.
type Stats struct {
	Held, Passed, Bypassed uint64
	ErrP50, ErrMax         string // the backend's own delay error (nfqueue)
	// ErrAvg is edt's: fq's moving average of how late its timer
	// released a held flow ("" from a backend that has none).
	ErrAvg string
}

var statsLine = regexp.MustCompile(`packets held (\d+), passed (\d+), backlog \d+, bypassed (\d+), errors \d+, delay error p50 (\S+) max ([^\s,]+)(?: avg ([^\s,]+))?`)

// ParseStats reads the counters from 'sanqos throttle --list'.
func ParseStats(out string) (Stats, error) {
	m := statsLine.FindStringSubmatch(out)
	if m == nil {
		return Stats{}, fmt.Errorf("sanqos throttle --list shows no counters:\n%s", out)
	}
	n := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	return Stats{Held: n(m[1]), Passed: n(m[2]), Bypassed: n(m[3]), ErrP50: m[4], ErrMax: m[5], ErrAvg: m[6]}, nil
}

// Stats reads the counters; a nil daemon (no backend) has none.
func (d *Daemon) Stats() (Stats, error) {
	if d == nil {
		return Stats{}, nil
	}
	out, err := d.Throttle("--list")
	if err != nil {
		return Stats{}, err
	}
	return ParseStats(out)
}

// Drops reads what the backend's kernel queue dropped so far in the
// target namespace: its qdisc's drops (edt: fq, htb, netem) or the
// NFQUEUE's queue and user-space drops (nfqueue), summed over its queues.
func (d *Daemon) Drops() (uint64, error) {
	if d == nil {
		return 0, nil
	}
	in := []string{"--net=/run/netns/" + TargetNS}
	var out []byte
	var err error
	if d.Backend == "nfqueue" {
		out, err = exec.Command("nsenter", append(in, "cat", "/proc/net/netfilter/nfnetlink_queue")...).CombinedOutput()
	} else {
		out, err = exec.Command("nsenter", append(in, "tc", "-s", "qdisc", "show", "dev", TargetDev)...).CombinedOutput()
	}
	if err != nil {
		return 0, fmt.Errorf("reading the %s drops: %w\n%s", d.Backend, err, out)
	}
	return ParseDrops(d.Backend, string(out)), nil
}

// qdiscOf is the qdisc whose drops are a tc backend's.
var qdiscOf = map[string]string{"edt": "fq", "htb": "htb", "netem": "netem"}

// qdiscDrops matches a qdisc's first line and the counters under it.
var qdiscDrops = regexp.MustCompile(`(?m)^qdisc (\S+) [^\n]*\n Sent \d+ bytes \d+ pkt \(dropped (\d+)`)

// ParseDrops reads a backend's drops from its kernel file's text:
// /proc/net/netfilter/nfnetlink_queue for nfqueue, 'tc -s qdisc show'
// for the others (every qdisc of the backend's kind summed).
func ParseDrops(backend, out string) uint64 {
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
	for _, m := range qdiscDrops.FindAllStringSubmatch(out, -1) {
		if m[1] == qdiscOf[backend] {
			v, _ := strconv.ParseUint(m[2], 10, 64)
			n += v
		}
	}
	return n
}

// daemonLog collects a daemon's output while others read it.
type daemonLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *daemonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil // enough to tell what went wrong
	}
	return l.b.Write(p)
}

func (l *daemonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

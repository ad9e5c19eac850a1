package vm

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ResultMarker starts the line the guest prints when its suite is over:
// "SANQOS-VM-RESULT rc=N".
const ResultMarker = "SANQOS-VM-RESULT"

// GuestBin is the sanqos daemon binary in the guest: a link to
// GuestSbin, where the shipped unit runs it from.
const GuestBin = "/usr/local/bin/sanqos"

// GuestSbin is where the sanqos daemon binary lives in the guest: the
// path of the unit's ExecStart.
const GuestSbin = "/usr/local/sbin/sanqos"

// GuestLabBin is where sanqos-lab lives in the guest; it is PID 1
// ('sanqos-lab vm guest-init').
const GuestLabBin = "/usr/local/bin/sanqos-lab"

// GuestTestBin is where the guest test binary lives in the guest.
const GuestTestBin = "/usr/local/bin/sanqos-guest.test"

// Options say what to boot and run.
type Options struct {
	Kernel   string // cloud, rt, generic
	Suite    string // a key of Suites
	Accel    string // auto, kvm, tcg
	CacheDir string
	Mirror   string
	Sanqos   string // static sanqos binary for the guest
	Lab      string // static sanqos-lab binary, the guest's init
	TestBin  string // static guest test binary
	Unit     string // the systemd unit to install, unchanged (suites with a systemd boot)
	// Deb is a package make deb built, for the systemd boot's package
	// test (the lab makes its successor, see addDebs); DebCycle is
	// deploy/debian/test-cycle.sh. Without Deb that test skips.
	Deb      string
	DebCycle string
	MemoryMB int
	CPUs     int           // guest CPUs (default 1; under TCG each takes a host core)
	Timeout  time.Duration // boot plus suite
	Verbose  bool          // pass -test.v
}

// Result is what a run measured.
type Result struct {
	Accel     string
	Kernel    Kernel
	BuildTime time.Duration // rootfs + kernel (mostly cache hits when warm)
	BootTime  time.Duration // qemu start to the guest's init
	SuiteTime time.Duration // guest init to the result line
	RC        int
}

// Run builds what is missing, boots the guest, streams its console to out
// and returns the suite's result. qemu is killed on every exit path: the
// context (Ctrl-C, timeout), a crash of this process (parent-death
// signal), or an error.
func Run(ctx context.Context, o Options, out io.Writer) (Result, error) {
	var res Result
	boots := plan(o.Suite)
	if len(boots) == 0 {
		return res, fmt.Errorf("unknown suite %q: choose one of %s", o.Suite, strings.Join(SuiteNames(), ", "))
	}
	withSystemd := boots[len(boots)-1].systemd
	if withSystemd && o.Unit == "" {
		return res, fmt.Errorf("suite %s boots systemd and installs the shipped unit: name it (--unit deploy/sanqos.service)", o.Suite)
	}
	qemu, err := checkInputs(o)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return res, fmt.Errorf("creating the cache %s: %w", o.CacheDir, err)
	}
	unlock, err := lockCache(ctx, o.CacheDir, out)
	if err != nil {
		return res, err
	}
	defer unlock()
	progress := func(format string, args ...any) {
		fmt.Fprintf(out, "kernel-lab: "+format+"\n", args...)
	}
	start := time.Now()
	b := &Builder{CacheDir: o.CacheDir, Mirror: o.Mirror, Progress: progress}
	k, err := b.Kernel(ctx, o.Kernel)
	if err != nil {
		return res, err
	}
	res.Kernel = k
	rootfs, err := b.Rootfs(ctx)
	if err != nil {
		return res, err
	}
	initrd, err := assembleInitrd(o, rootfs, k, withSystemd)
	if err != nil {
		return res, err
	}
	defer os.Remove(initrd)
	res.BuildTime = time.Since(start)

	accel, why := chooseAccel(ctx, o, qemu, k, initrd)
	res.Accel = accel
	for _, b := range boots {
		bo, init, cmdline := o, "sanqos-lab", kernelCmdline(o)
		if b.systemd {
			init, cmdline = "systemd", systemdCmdline()
			// The daemon runs its packet thread real-time, and a standby,
			// only with two CPUs or more: the unit's sandbox must let it.
			bo.CPUs = max(o.CPUs, systemdCPUs)
		}
		progress("booting %s (%s) under qemu with %s, %s as PID 1: %s", k.Release, k.Package, accel, init, why)
		rc, bootT, suiteT, err := boot(ctx, bo, qemu, accel, k, initrd, cmdline, out, progress)
		res.BootTime += bootT
		res.SuiteTime += suiteT
		if err != nil {
			res.RC = -1
			return res, err
		}
		if rc != 0 {
			res.RC = rc
			return res, nil // the next boot would only take time
		}
	}
	return res, nil
}

// appendFile appends the file at src to w.
func appendFile(w io.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// checkStatic refuses a dynamically linked binary: the guest's libc may
// differ, and the lab promises the host's freshly built sanqos.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("not a readable ELF binary (build it with make kernel-lab): %w", err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("is dynamically linked: build it with CGO_ENABLED=0")
		}
	}
	return nil
}

// lockCache serialises runs on one cache (and so one qemu at a time: TCG
// takes a whole core).
func lockCache(ctx context.Context, dir string, out io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !said {
			fmt.Fprintf(out, "kernel-lab: waiting for another run holding %s\n", f.Name())
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// kernelCmdline boots the initramfs with sanqos-lab as PID 1; everything after
// "--" is passed to init as arguments.
func kernelCmdline(o Options) string {
	v := ""
	if o.Verbose {
		v = " -v"
	}
	return fmt.Sprintf("console=ttyS0 rdinit=%s panic=-1 loglevel=4 -- vm guest-init --suite %s%s", GuestLabBin, o.Suite, v)
}

func qemuArgs(o Options, accel string, k Kernel, initrd string, cmdline string) []string {
	cpu := "max"
	if accel == "kvm" {
		cpu = "host"
	}
	cpus := o.CPUs
	if cpus == 0 {
		cpus = 1
	}
	mem := o.MemoryMB
	if mem == 0 {
		mem = 3072
	}
	return []string{
		"-accel", accel, "-cpu", cpu, "-smp", strconv.Itoa(cpus), "-m", strconv.Itoa(mem),
		"-display", "none", "-monitor", "none", "-serial", "stdio", "-nic", "none",
		"-no-reboot", "-kernel", k.Vmlinuz, "-initrd", initrd, "-append", cmdline,
	}
}

// startQemu starts qemu in its own process group, killed if we die.
func startQemu(qemu string, args []string) (*exec.Cmd, io.ReadCloser, error) {
	cmd := exec.Command(qemu, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdin = nil
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting qemu: %w", err)
	}
	go func() { pw.CloseWithError(cmd.Wait()) }()
	return cmd, pr, nil
}

func killQemu(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

var resultRE = regexp.MustCompile(ResultMarker + ` rc=(-?\d+)`)

// initMarker is the guest's first line (guest-init prints it at once).
const initMarker = "sanqos guest-init:"

// checkInputs finds qemu and checks that the binaries for the guest are
// static.
func checkInputs(o Options) (qemu string, err error) {
	qemu, err = exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", errors.New("the kernel lab needs qemu: apt-get install qemu-system-x86")
	}
	for _, p := range []struct{ path, what string }{{o.Sanqos, "sanqos"}, {o.Lab, "sanqos-lab"}, {o.TestBin, "guest test binary"}} {
		if err := checkStatic(p.path); err != nil {
			return "", fmt.Errorf("%s %s: %w", p.what, p.path, err)
		}
	}
	return qemu, nil
}

// assembleInitrd writes the guest's initrd to a temporary file: the
// cached rootfs and kernel modules, then this build's binaries. The
// caller removes it.
func assembleInitrd(o Options, rootfs string, k Kernel, withSystemd bool) (string, error) {
	payload, err := os.CreateTemp("", "sanqos-kernel-lab-payload-*.cpio")
	if err != nil {
		return "", err
	}
	payload.Close()
	defer os.Remove(payload.Name())
	if err := writeArchive(payload.Name(), func(w *CPIOWriter) error {
		for _, d := range []string{"usr", "usr/local", "usr/local/bin", "usr/local/sbin", "etc"} {
			if err := w.Dir(d, 0o755); err != nil {
				return err
			}
		}
		for _, f := range []struct{ at, from string }{{GuestSbin, o.Sanqos}, {GuestLabBin, o.Lab}, {GuestTestBin, o.TestBin}} {
			if err := w.CopyFile(strings.TrimPrefix(f.at, "/"), f.from, 0o755); err != nil {
				return err
			}
		}
		if err := w.Symlink(strings.TrimPrefix(GuestBin, "/"), GuestSbin); err != nil {
			return err
		}
		if withSystemd {
			if err := addSystemdUnits(w, o); err != nil {
				return err
			}
			if err := addDebs(w, o); err != nil {
				return err
			}
		}
		return w.File("etc/sanqos-modules", 0o644, []byte(strings.Join(Modules, "\n")+"\n"))
	}); err != nil {
		return "", fmt.Errorf("packing the guest's binaries: %w", err)
	}
	initrd, err := os.CreateTemp("", "sanqos-kernel-lab-initrd-*.cpio")
	if err != nil {
		return "", err
	}
	for _, part := range []string{rootfs, k.Modules, payload.Name()} {
		if err := appendFile(initrd, part); err != nil {
			initrd.Close()
			os.Remove(initrd.Name())
			return "", fmt.Errorf("assembling the initrd: %w", err)
		}
	}
	if err := initrd.Close(); err != nil {
		os.Remove(initrd.Name())
		return "", err
	}
	return initrd.Name(), nil
}

// console follows the guest's console: the last lines (for errors),
// when init started, and the suite's result line.
type console struct {
	start    time.Time
	suite    string
	progress Progress

	mu     sync.Mutex
	last   []string
	initAt time.Time
	result int           // -1 until the result line
	done   chan struct{} // closed at the result line
}

// resultGrace is how long a guest may take to power off after its result.
const resultGrace = 60 * time.Second

// read streams the console to out, line by line, until it ends.
func (c *console) read(r io.Reader, out io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		fmt.Fprintf(out, "guest| %s\n", l)
		c.mu.Lock()
		c.last = append(c.last, l)
		if len(c.last) > 30 {
			c.last = c.last[1:]
		}
		if c.initAt.IsZero() && strings.Contains(l, initMarker) {
			c.initAt = time.Now()
			c.progress("guest up after %s, running suite %s", c.initAt.Sub(c.start).Round(100*time.Millisecond), c.suite)
		}
		if m := resultRE.FindStringSubmatch(l); m != nil && c.result < 0 {
			c.result, _ = strconv.Atoi(m[1])
			close(c.done)
		}
		c.mu.Unlock()
	}
}

// boot runs the guest to its result line, streaming the console.
func boot(outer context.Context, o Options, qemu, accel string, k Kernel, initrd, cmdline string, out io.Writer, progress Progress) (rc int, bootT, suiteT time.Duration, err error) {
	ctx, cancel := context.WithTimeout(outer, o.Timeout)
	defer cancel()
	cmd, consoleR, err := startQemu(qemu, qemuArgs(o, accel, k, initrd, cmdline))
	if err != nil {
		return -1, 0, 0, err
	}
	defer killQemu(cmd)
	start := time.Now()
	c := &console{start: start, suite: o.Suite, progress: progress, result: -1, done: make(chan struct{})}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		c.read(consoleR, out)
	}()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	// After the result line, a systemd guest shuts down: its services
	// stop first. A shutdown that hangs must not hold the run up.
	var grace <-chan time.Time
	result := c.done
	for {
		select {
		case <-result:
			result = nil
			grace = time.After(resultGrace)
		case <-grace:
			progress("the guest did not power off within %s of its result line: qemu killed", resultGrace)
			killQemu(cmd)
		case <-lines:
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.initAt.IsZero() {
				bootT = c.initAt.Sub(start)
				suiteT = time.Since(c.initAt)
			}
			if c.result >= 0 {
				progress("suite %s finished with rc=%d after %s (boot %s)", o.Suite, c.result, suiteT.Round(100*time.Millisecond), bootT.Round(100*time.Millisecond))
				return c.result, bootT, suiteT, nil
			}
			return -1, bootT, suiteT, fmt.Errorf("the guest stopped without a result line (qemu: %v); last console lines:\n%s", cmd.ProcessState, strings.Join(c.last, "\n"))
		case <-tick.C:
			c.mu.Lock()
			phase := "booting"
			if !c.initAt.IsZero() {
				phase = "suite " + o.Suite + " running"
			}
			progress("%s, %s elapsed", phase, time.Since(start).Round(time.Second))
			c.mu.Unlock()
		case <-ctx.Done():
			killQemu(cmd)
			<-lines
			c.mu.Lock()
			defer c.mu.Unlock()
			what := "boot"
			if !c.initAt.IsZero() {
				what = "suite " + o.Suite
			}
			tail := strings.Join(c.last, "\n")
			if tail == "" {
				tail = "(none: the kernel prints only warnings before init; a longer --timeout may do)"
			}
			if outer.Err() != nil {
				return -1, 0, 0, fmt.Errorf("%s interrupted (%v); qemu killed; last console lines:\n%s", what, context.Cause(outer), tail)
			}
			return -1, 0, 0, fmt.Errorf("%s did not finish within --timeout %s; qemu killed; last console lines:\n%s", what, o.Timeout, tail)
		}
	}
}

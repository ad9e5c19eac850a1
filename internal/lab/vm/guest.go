package vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Suites map a suite name to the -test.run pattern of the guest test
// binary (internal/lab/vm/guesttest).
var Suites = map[string]string{
	"smoke":   "^TestKernel",
	"stack":   "^(TestKernel|TestStack|TestLIO|TestLVM)",
	"netem":   "^(TestKernel|TestNetem)",
	"nfqueue": "^(TestKernel|TestNfqueue)",
	"loop":    "^(TestKernel|TestAutonomic)",
	"edt":     "^(TestKernel|TestEDT)",
	// datapath is a measurement of a few minutes (TestDatapathCost), not
	// in all: it prints the data path's cost per backend.
	"datapath": "^(TestKernel|TestDatapath)",
	"all":      "^(TestKernel|TestStack|TestLIO|TestLVM|TestNetem|TestNfqueue|TestAutonomic|TestEDT)",
}

// SuiteNames lists the suites, sorted.
func SuiteNames() []string {
	var n []string
	for k := range Suites {
		n = append(n, k)
	}
	for k := range SystemdSuites {
		if _, ok := Suites[k]; !ok {
			n = append(n, k)
		}
	}
	sort.Strings(n)
	return n
}

// GuestEnv is set for the guest test binary: its tests skip without it, so
// 'go test ./...' on the host does not run them.
const GuestEnv = "SANQOS_KERNEL_LAB"

// GuestSuiteEnv names the suite the guest test binary runs in.
const GuestSuiteEnv = "SANQOS_KERNEL_LAB_SUITE"

// GuestInit is PID 1 in the guest: it mounts the pseudo file systems,
// loads the lab's modules, runs the suite and powers off. It never
// returns normally: PID 1 exiting would panic the kernel.
func GuestInit(suite string, verbose, probe bool, console io.Writer) {
	fmt.Fprintf(console, "%s suite %s\n", initMarker, suite)
	rc := 1
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(console, "guest-init panic: %v\n", r)
			rc = 1
		}
		fmt.Fprintf(console, "%s rc=%d\n", ResultMarker, rc)
		syscall.Sync()
		syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
		select {}
	}()
	if probe {
		rc = 0
		return
	}
	if err := guestSetup(console, true); err != nil {
		fmt.Fprintf(console, "guest-init: %v\n", err)
		return
	}
	pat, ok := Suites[suite]
	if !ok {
		fmt.Fprintf(console, "guest-init: unknown suite %q\n", suite)
		return
	}
	rc = runSuite(suite, pat, verbose, console)
}

// runSuite runs the guest test binary with the pattern and returns its
// exit code.
func runSuite(suite, pat string, verbose bool, console io.Writer) int {
	args := []string{"-test.run", pat, "-test.timeout", "30m", "-test.count", "1"}
	if verbose {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(GuestTestBin, args...)
	cmd.Dir = "/tmp"
	cmd.Env = append(os.Environ(), GuestEnv+"=1", GuestSuiteEnv+"="+suite, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "DM_DISABLE_UDEV=1", "TMPDIR=/tmp")
	cmd.Stdout, cmd.Stderr = console, console
	start := time.Now()
	err := cmd.Run()
	fmt.Fprintf(console, "guest-init: suite %s took %s (guest clock)\n", suite, time.Since(start).Round(time.Millisecond))
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	fmt.Fprintf(console, "guest-init: running the suite: %v\n", err)
	return 1
}

// guestSetup prepares the guest for the suite. As PID 1 (pseudo) it
// mounts the pseudo file systems first; under systemd they are mounted.
func guestSetup(console io.Writer, pseudo bool) error {
	mounts := []struct{ src, dst, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"devpts", "/dev/pts", "devpts", ""},
	}
	for _, m := range mounts {
		if !pseudo {
			break
		}
		os.MkdirAll(m.dst, 0o755)
		if err := syscall.Mount(m.src, m.dst, m.fstype, 0, m.data); err != nil && err != syscall.EBUSY {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	os.MkdirAll("/run/lock", 0o755)
	os.MkdirAll("/run/netns", 0o755)
	os.MkdirAll("/etc/target", 0o755) // LIO's db_root, where it keeps PR and ALUA state
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if pseudo {
		syscall.Sethostname([]byte("sanqos-guest"))
	}
	var uts syscall.Utsname
	syscall.Uname(&uts)
	fmt.Fprintf(console, "guest-init: kernel %s\n", utsString(uts.Release[:]))
	f, err := os.Open("/etc/sanqos-modules")
	if err != nil {
		return fmt.Errorf("reading the module list: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var failed []string
	for sc.Scan() {
		m := strings.TrimSpace(sc.Text())
		if m == "" {
			continue
		}
		if out, err := exec.Command("modprobe", m).CombinedOutput(); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%s)", m, strings.TrimSpace(string(out))))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("loading modules: %s", strings.Join(failed, "; "))
	}
	// configfs is a module in Debian's kernels: mount it once loaded
	// (systemd mounts it at boot only if it was loaded by then).
	if mounted("/sys/kernel/config") {
		// mounted by systemd
	} else if err := syscall.Mount("configfs", "/sys/kernel/config", "configfs", 0, ""); err != nil {
		return fmt.Errorf("mounting configfs: %w", err)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/vm"
)

// cmdLabVM is 'sanqos lab vm': the kernel lab (internal/lab/vm). Its hidden
// 'guest-init' form is PID 1 inside the guest, 'guest-systemd' the suite
// runner of a guest booted with systemd.
func cmdLabVM(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "guest-init" || args[0] == "guest-systemd") {
		return cmdLabVMGuest(args, stderr)
	}
	fs := newFlagSet("lab vm", "sanqos lab vm [--kernel cloud|rt|generic] [--suite NAME] [--accel auto|kvm|tcg]",
		`Boot one of Debian bookworm's own kernels under qemu with a Debian rootfs as
its initramfs and run a suite of live tests inside, on LIO, open-iscsi,
device-mapper, LVM, netem and fq. The first run downloads the kernel and
builds the rootfs with debootstrap (a few minutes) into --cache; later runs
reuse them. The guest gets this sanqos binary and the guest test binary
(make kernel-lab builds both). Exits with the suite's result; qemu never
outlives the command.

Suites: `+strings.Join(vm.SuiteNames(), ", "), stderr)
	kernel := fs.String("kernel", "cloud", "kernel flavour: cloud, rt (PREEMPT_RT) or generic")
	suite := fs.String("suite", "all", "suite to run in the guest")
	accel := fs.String("accel", "auto", "auto (probe KVM once, else TCG), kvm or tcg")
	cache := fs.String("cache", vm.DefaultCacheDir, "cache of rootfs and kernels")
	mirror := fs.String("mirror", "http://deb.debian.org/debian", "Debian mirror for debootstrap")
	unit := fs.String("unit", "deploy/sanqos.service", "the systemd unit the systemd suites install in the guest, unchanged")
	deb := fs.String("deb", "", "a package built by make deb, for the systemd boot's package test: installed, upgraded to a successor the lab makes, removed and purged with dpkg (make kernel-lab passes one; without it that test skips)")
	debCycle := fs.String("deb-cycle", "deploy/debian/test-cycle.sh", "the package cycle script run in the guest with --deb")
	testBin := fs.String("test-bin", "", "static guest test binary (default: sanqos-guest.test beside this binary)")
	timeout := fs.Duration("timeout", 15*time.Minute, "limit on boot plus suite")
	verbose := fs.Bool("v", true, "verbose guest test output")
	cpus := fs.Int("smp", 1, "guest CPUs; under TCG each takes a host core, and on a busy host more than one made the guest's timing erratic")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sanqos lab vm: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	switch *accel {
	case "auto", "kvm", "tcg":
	default:
		fmt.Fprintf(stderr, "sanqos lab vm: --accel must be auto, kvm or tcg, not %q\n", *accel)
		return errUsage
	}
	if os.Geteuid() != 0 {
		return errors.New("sanqos lab vm: run as root (debootstrap and the cache in /var/cache need it)")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sanqos lab vm: finding this binary for the guest: %w", err)
	}
	daemon, err := lab.FindDaemon()
	if err != nil {
		return fmt.Errorf("sanqos lab vm: the daemon for the guest: %w", err)
	}
	if *testBin == "" {
		*testBin = filepath.Join(filepath.Dir(daemon), "sanqos-guest.test")
		if _, err := os.Stat(*testBin); err != nil {
			return fmt.Errorf("sanqos lab vm: no guest test binary at %s: build it with 'make kernel-lab' or CGO_ENABLED=0 go test -c -o %s ./internal/lab/vm/guesttest, or pass --test-bin", *testBin, *testBin)
		}
	}
	if *deb == "" {
		*debCycle = ""
	}
	res, err := vm.Run(ctx, vm.Options{
		Deb: *deb, DebCycle: *debCycle,
		Kernel: *kernel, Suite: *suite, Accel: *accel, CacheDir: *cache, Mirror: *mirror,
		Sanqos: daemon, Lab: self, TestBin: *testBin, Unit: *unit, Timeout: *timeout, Verbose: *verbose, CPUs: *cpus,
	}, stdout)
	if err != nil {
		return fmt.Errorf("sanqos lab vm: %w", err)
	}
	fmt.Fprintf(stdout, "kernel-lab: kernel %s (%s %s), accel %s: prepare %s, boot %s, suite %s: rc=%d\n",
		res.Kernel.Release, res.Kernel.Package, res.Kernel.Version, res.Accel,
		res.BuildTime.Round(100*time.Millisecond), res.BootTime.Round(100*time.Millisecond), res.SuiteTime.Round(100*time.Millisecond), res.RC)
	if res.RC != 0 {
		return fmt.Errorf("sanqos lab vm: suite %s failed in the guest (rc=%d)", *suite, res.RC)
	}
	return nil
}

// cmdLabVMGuest is the guest side of 'sanqos lab vm': 'guest-init' is PID
// 1 of the guest, 'guest-systemd' the suite runner of a systemd boot.
func cmdLabVMGuest(args []string, stderr io.Writer) error {
	if args[0] == "guest-init" {
		fs := newFlagSet("lab vm guest-init", "sanqos lab vm guest-init --suite NAME", "PID 1 of the kernel lab's guest.", stderr)
		suite := fs.String("suite", "all", "suite to run")
		verbose := fs.Bool("v", false, "verbose test output")
		probe := fs.Bool("probe", false, "print the init line and power off")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		vm.GuestInit(*suite, *verbose, *probe, os.Stdout)
		return nil
	}
	fs := newFlagSet("lab vm guest-systemd", "sanqos lab vm guest-systemd --suite NAME", "The kernel lab's suite runner in a guest booted with systemd.", stderr)
	suite := fs.String("suite", "systemd", "suite to run")
	verbose := fs.Bool("v", false, "verbose test output")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	vm.GuestSystemd(*suite, *verbose)
	return nil
}

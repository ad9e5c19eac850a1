package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// chooseAccel picks kvm or tcg and says why. With --accel auto it boots
// the guest once under KVM to a probe line: on this kind of host /dev/kvm
// exists but is a paravirtual KVM on which stock kernels die on emulation
// failures, so opening /dev/kvm proves nothing. The verdict is cached per
// host kernel and guest kernel.
func chooseAccel(ctx context.Context, o Options, qemu string, k Kernel, initrd string) (string, string) {
	switch o.Accel {
	case "kvm", "tcg":
		return o.Accel, "chosen with --accel"
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg", fmt.Sprintf("software emulation: /dev/kvm unusable (%v)", err)
	}
	f.Close()
	var uts syscall.Utsname
	syscall.Uname(&uts)
	host := utsString(uts.Release[:])
	cache := filepath.Join(o.CacheDir, "kvm-probe-"+sanitize(host)+"-"+k.Release)
	if b, err := os.ReadFile(cache); err == nil {
		v := strings.SplitN(strings.TrimSpace(string(b)), " ", 2)
		if len(v) == 2 {
			return v[0], v[1] + " (cached probe)"
		}
	}
	accel, why := "tcg", ""
	if ok, detail := probeKVM(ctx, o, qemu, k, initrd); ok {
		accel, why = "kvm", "KVM runs this kernel"
	} else {
		why = "software emulation (TCG): KVM here cannot run a stock kernel: " + detail
	}
	os.WriteFile(cache, []byte(accel+" "+why+"\n"), 0o644)
	return accel, why
}

func utsString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// probeKVM boots the guest under KVM to guest-init's first line.
func probeKVM(ctx context.Context, o Options, qemu string, k Kernel, initrd string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	cmdline := fmt.Sprintf("console=ttyS0 rdinit=%s panic=-1 -- vm guest-init --probe", GuestLabBin)
	cmd, console, err := startQemu(qemu, qemuArgs(o, "kvm", k, initrd, cmdline))
	if err != nil {
		return false, err.Error()
	}
	defer killQemu(cmd)
	go func() { <-ctx.Done(); killQemu(cmd) }()
	b, _ := io.ReadAll(console)
	s := string(b)
	if strings.Contains(s, initMarker) {
		return true, ""
	}
	if ctx.Err() != nil {
		return false, "no init line within 40 s"
	}
	return false, strings.ReplaceAll(lastLines(s, 1), "\r", "")
}

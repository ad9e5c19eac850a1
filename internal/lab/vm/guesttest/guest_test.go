// Package guesttest holds the kernel lab's live tests. They run only inside
// the guest that 'sanqos lab vm' boots (SANQOS_KERNEL_LAB=1), on Debian's
// own kernel with LIO, open-iscsi, device-mapper, LVM and netem; on the
// host they skip.
package guesttest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/lab/vm"
)

func inGuest(t *testing.T) {
	t.Helper()
	if os.Getenv(vm.GuestEnv) != "1" {
		t.Skip("runs only inside the kernel lab's guest: make kernel-lab (sanqos lab vm)")
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestKernelSmoke checks the guest has what the other tests need.
func TestKernelSmoke(t *testing.T) {
	inGuest(t)
	t.Log(strings.TrimSpace(sh(t, "uname", "-a")))
	for _, p := range []string{"/sys/kernel/config/target", "/proc/net/netfilter/nfnetlink_queue"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	sh(t, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	sh(t, "tc", "qdisc", "del", "dev", "lo", "root")
}

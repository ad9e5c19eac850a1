// Package vm is the kernel lab: it boots one of Debian bookworm's own
// kernels (cloud, rt or generic flavour) under qemu with a Debian rootfs as
// its initramfs, and runs a named suite of sanqos's live tests inside, on
// the kernel stack its users run (LIO, open-iscsi, device-mapper, LVM,
// netem, fq) that the host's kernel lacks.
//
// The first run builds, and caches outside the repository (keyed by the
// package versions), a debootstrap minbase rootfs packed as a newc cpio
// archive and the chosen kernel with the modules the lab needs. Every run
// appends a small archive with the freshly built sanqos binary and the
// guest test binary: concatenated newc archives are one initrd to the
// kernel. The guest's PID 1 is sanqos itself ('sanqos lab vm guest-init'),
// which mounts the pseudo file systems, loads the modules, runs the suite,
// prints a result line on the console and powers the machine off.
//
// KVM is used where it can run a stock kernel; on a paravirtual KVM host
// (stock kernels die on emulation failures) the lab falls back to qemu's
// software emulation (TCG), which is slow but functionally faithful. The
// guest's clock runs under emulation: its tests assert what is
// functionally true (direction, clean-up), not timing quality.
package vm

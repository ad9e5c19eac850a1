package vm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// DefaultCacheDir is where built rootfs archives and kernels are kept
// between runs: outside the repository, so a fresh clone on the same
// machine reuses them.
const DefaultCacheDir = "/var/cache/sanqos-kernel-lab"

// Suite is the Debian release the rootfs and kernels come from.
const Suite = "bookworm"

// Flavours maps --kernel to the Debian metapackage that names the current
// kernel of that flavour.
var Flavours = map[string]string{
	"cloud":   "linux-image-cloud-amd64",
	"rt":      "linux-image-rt-amd64",
	"generic": "linux-image-amd64",
}

// RootfsPackages are installed into the minbase rootfs: the target and
// initiator stacks, the tools the backends drive, and what the tests use.
// systemd and systemd-sysv are for the suites that boot with systemd as
// PID 1 (the shipped unit, tested as it ships); nfs-ganesha with its VFS
// backend (and, as its dependencies, nfs-common's mount.nfs and rpcbind)
// is the user-space NFS server the socket adapter is tested against.
var RootfsPackages = []string{
	"iproute2", "iptables", "ipset", "kmod", "procps", "iputils-ping",
	"python3", "python3-rtslib-fb", "targetcli-fb", "dbus",
	"open-iscsi", "lvm2", "dmsetup", "util-linux", "coreutils",
	"systemd", "systemd-sysv", "nfs-ganesha", "nfs-ganesha-vfs",
}

// Modules are loaded at boot in the guest, with their dependencies: what
// LIO, open-iscsi, device-mapper/LVM, the netem/nfqueue/htb backends, fq
// and the lab's namespaces need, and the kernel NFS client (nfs, nfsv4)
// the systemd suite mounts ganesha's export with. Built-in ones are fine.
var Modules = []string{
	"configfs", "nfs", "nfsv4", "loop", "dm_mod", "dm_delay", "veth", "bridge",
	"sch_netem", "sch_fq", "sch_htb", "sch_prio", "sch_ingress", "cls_u32", "cls_fw", "cls_bpf", "act_bpf",
	"ip_tables", "iptable_filter", "iptable_mangle", "nf_tables", "nft_compat",
	"xt_NFQUEUE", "nfnetlink_queue", "xt_set", "ip_set", "ip_set_hash_ip", "ip_set_hash_net",
	"xt_CLASSIFY", "xt_mark", "xt_tcpudp", "xt_length", "xt_comment", "xt_conntrack", "xt_multiport", "xt_u32",
	"target_core_mod", "target_core_iblock", "target_core_file", "iscsi_target_mod",
	"iscsi_tcp", "sd_mod",
}

// Progress receives one line per step of a long build.
type Progress func(format string, args ...any)

// Builder builds and caches the guest's pieces.
type Builder struct {
	CacheDir string
	Mirror   string // Debian mirror for debootstrap
	Progress Progress
}

func (b *Builder) progress(format string, args ...any) {
	if b.Progress != nil {
		b.Progress(format, args...)
	}
}

// Kernel is one downloaded, unpacked kernel with the lab's modules packed.
type Kernel struct {
	Package string // e.g. linux-image-6.1.0-41-cloud-amd64
	Version string // package version
	Release string // uname -r
	Vmlinuz string
	Modules string // newc archive of the module subset
}

// Kernel returns the cached kernel of a flavour, downloading and packing it
// on first use.
func (b *Builder) Kernel(ctx context.Context, flavour string) (Kernel, error) {
	meta, ok := Flavours[flavour]
	if !ok {
		return Kernel{}, fmt.Errorf("unknown kernel flavour %q: use cloud, rt or generic", flavour)
	}
	pkg, err := dependsOn(ctx, meta, "linux-image-")
	if err != nil {
		return Kernel{}, err
	}
	ver, err := candidate(ctx, pkg)
	if err != nil {
		return Kernel{}, err
	}
	k := Kernel{Package: pkg, Version: ver}
	// The packed modules depend on the list as well as on the kernel: a
	// module added to Modules must not be missing from a cached kernel.
	h := sha256.Sum256([]byte(strings.Join(Modules, ",")))
	dir := filepath.Join(b.CacheDir, "kernel-"+pkg+"_"+sanitize(ver)+"-"+hex.EncodeToString(h[:])[:8])
	k.Modules = filepath.Join(dir, "modules.cpio")
	if rel, err := os.ReadFile(filepath.Join(dir, "release")); err == nil {
		k.Release = strings.TrimSpace(string(rel))
		k.Vmlinuz = filepath.Join(dir, "vmlinuz")
		if fileExists(k.Vmlinuz) && fileExists(k.Modules) {
			b.progress("kernel %s %s: cached in %s", pkg, ver, dir)
			return k, nil
		}
	}
	start := time.Now()
	b.progress("kernel %s %s: downloading (apt-get download)", pkg, ver)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return Kernel{}, fmt.Errorf("creating the kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if out, err := runIn(ctx, tmp, "apt-get", "download", pkg+"="+ver); err != nil {
		return Kernel{}, fmt.Errorf("downloading %s=%s with apt-get download (is the Debian mirror reachable? run apt-get update): %w\n%s", pkg, ver, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return Kernel{}, fmt.Errorf("downloading %s: expected one .deb in %s, found %d", pkg, tmp, len(debs))
	}
	tree := filepath.Join(tmp, "tree")
	if out, err := runIn(ctx, tmp, "dpkg-deb", "-x", debs[0], tree); err != nil {
		return Kernel{}, fmt.Errorf("unpacking %s: %w\n%s", debs[0], err, out)
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		return Kernel{}, fmt.Errorf("unpacking %s: expected one boot/vmlinuz-*, found %d", pkg, len(vmlinuz))
	}
	k.Release = strings.TrimPrefix(filepath.Base(vmlinuz[0]), "vmlinuz-")
	b.progress("kernel %s: resolving %d modules and their dependencies", k.Release, len(Modules))
	if err := packModules(ctx, tree, k.Release, filepath.Join(tmp, "modules.cpio")); err != nil {
		return Kernel{}, err
	}
	if err := os.Rename(vmlinuz[0], filepath.Join(tmp, "vmlinuz")); err != nil {
		return Kernel{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "release"), []byte(k.Release+"\n"), 0o644); err != nil {
		return Kernel{}, err
	}
	os.RemoveAll(tree)
	for _, d := range debs {
		os.Remove(d)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return Kernel{}, fmt.Errorf("moving the kernel into the cache: %w", err)
	}
	k.Vmlinuz = filepath.Join(dir, "vmlinuz")
	b.progress("kernel %s: ready in %s", k.Release, time.Since(start).Round(time.Second))
	return k, nil
}

// packModules writes the Modules (with dependencies, resolved by modprobe
// against the unpacked tree) and a modules.dep for them as a newc archive
// under usr/lib/modules (bookworm's /lib is a symlink to usr/lib, and an
// archive entry "lib/" would replace that link with a directory).
func packModules(ctx context.Context, tree, release, out string) error {
	if o, err := exec.CommandContext(ctx, "depmod", "-b", tree, release).CombinedOutput(); err != nil {
		return fmt.Errorf("depmod on the downloaded kernel (install kmod): %w\n%s", err, o)
	}
	base := filepath.Join(tree, "lib", "modules", release)
	if !fileExists(base) {
		base = filepath.Join(tree, "usr", "lib", "modules", release)
	}
	need := map[string]bool{}
	var order []string
	for _, m := range Modules {
		o, err := exec.CommandContext(ctx, "modprobe", "-d", tree, "-S", release, "--show-depends", m).CombinedOutput()
		if err != nil {
			return fmt.Errorf("resolving kernel module %s with modprobe --show-depends: %w\n%s", m, err, o)
		}
		sc := bufio.NewScanner(bytes.NewReader(o))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[0] != "insmod" {
				continue // "builtin X"
			}
			i := strings.Index(f[1], "/modules/"+release+"/")
			if i < 0 {
				return fmt.Errorf("resolving kernel module %s: unexpected path %s", m, f[1])
			}
			rel := f[1][i+len("/modules/"+release+"/"):]
			if !need[rel] {
				need[rel] = true
				order = append(order, rel)
			}
		}
	}
	stage := filepath.Join(filepath.Dir(out), "stage")
	sbase := filepath.Join(stage, "lib", "modules", release)
	for _, rel := range order {
		if err := copyFile(filepath.Join(base, rel), filepath.Join(sbase, rel)); err != nil {
			return err
		}
	}
	for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		if fileExists(filepath.Join(base, f)) {
			if err := copyFile(filepath.Join(base, f), filepath.Join(sbase, f)); err != nil {
				return err
			}
		}
	}
	if o, err := exec.CommandContext(ctx, "depmod", "-b", stage, release).CombinedOutput(); err != nil {
		return fmt.Errorf("depmod on the module subset: %w\n%s", err, o)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := NewCPIOWriter(f)
	for _, d := range []string{"usr", "usr/lib", "usr/lib/modules"} {
		if err := w.Dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := w.Dir("usr/lib/modules/"+release, 0o755); err != nil {
		return err
	}
	if err := w.AddTree(sbase, "usr/lib/modules/"+release, nil); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.RemoveAll(stage)
}

// Rootfs returns the cached rootfs archive, building it with debootstrap
// on first use. It is keyed by the suite, mirror and package list; the
// versions installed are recorded beside it (rootfs.manifest).
func (b *Builder) Rootfs(ctx context.Context) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", Suite, b.Mirror, strings.Join(RootfsPackages, ","))
	key := hex.EncodeToString(h.Sum(nil))[:12]
	out := filepath.Join(b.CacheDir, "rootfs-"+Suite+"-"+key+".cpio")
	if fileExists(out) {
		b.progress("rootfs: cached %s", out)
		return out, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", errors.New("building the guest rootfs needs debootstrap: apt-get install debootstrap")
	}
	start := time.Now()
	dir := filepath.Join(b.CacheDir, "rootfs-build")
	if err := removeTree(dir); err != nil {
		return "", err
	}
	defer removeTree(dir)
	b.progress("rootfs: debootstrap --variant=minbase %s from %s (first run only, about a minute or two)", Suite, b.Mirror)
	args := []string{"--variant=minbase", "--include=" + strings.Join(RootfsPackages, ","), Suite, dir, b.Mirror}
	cmd := exec.CommandContext(ctx, "debootstrap", args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.WaitDelay = 5 * time.Second
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				b.progress("rootfs: debootstrap running for %s", time.Since(start).Round(time.Second))
			}
		}
	}()
	err := cmd.Run()
	close(done)
	if err != nil {
		return "", fmt.Errorf("debootstrap %s (is %s reachable?): %w\nlast lines:\n%s", Suite, b.Mirror, err, lastLines(log.String(), 15))
	}
	man, err := exec.CommandContext(ctx, "chroot", dir, "dpkg-query", "-W", "-f", "${Package} ${Version}\n").Output()
	if err != nil {
		return "", fmt.Errorf("listing the rootfs packages: %w", err)
	}
	if err := os.WriteFile(strings.TrimSuffix(out, ".cpio")+".manifest", man, 0o644); err != nil {
		return "", err
	}
	b.progress("rootfs: packing into %s", out)
	skip := func(rel string) bool {
		for _, p := range []string{"usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "var/cache/apt", "var/lib/apt/lists", "proc", "sys", "dev"} {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return rel != p // keep the mount points themselves
			}
		}
		return false
	}
	if err := writeArchive(out, func(w *CPIOWriter) error { return w.AddTree(dir, "", skip) }); err != nil {
		return "", fmt.Errorf("packing the rootfs: %w", err)
	}
	b.progress("rootfs: ready in %s", time.Since(start).Round(time.Second))
	return out, nil
}

// writeArchive writes an archive to path atomically.
func writeArchive(path string, fill func(*CPIOWriter) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := NewCPIOWriter(f)
	err = fill(w)
	if err == nil {
		err = w.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// removeTree unmounts anything a crashed debootstrap left mounted under dir
// (it mounts proc and sys in the chroot), then removes it.
func removeTree(dir string) error {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	var mounts []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			mounts = append(mounts, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s left by an earlier build: %w", m, err)
		}
	}
	return os.RemoveAll(dir)
}

// dependsOn returns the package that meta depends on whose name starts with prefix.
func dependsOn(ctx context.Context, meta, prefix string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "--important", meta).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("looking up %s with apt-cache (run apt-get update first): %w\n%s", meta, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], prefix) {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s names no %s* package (run apt-get update?)", meta, prefix)
}

// candidate returns the version apt would install of pkg.
func candidate(ctx context.Context, pkg string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "policy", pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-cache policy %s: %w\n%s", pkg, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "Candidate:" && f[1] != "(none)" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt knows no installable version of %s (run apt-get update?)", pkg)
}

func runIn(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return lastLines(string(out), 15), err
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ':' || r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// Package kstack builds, inside the kernel lab's guest, the storage stack
// sanqos's users run: loop files on tmpfs, dm-delay over one of them (a
// disk with latency), LVM volume groups with logical volumes, LIO block
// backstores exported by one iSCSI target with a node ACL per initiator,
// and open-iscsi initiators in network namespaces logged in to it.
//
// It runs the same tools an administrator would (losetup, dmsetup, LVM,
// rtslib, iscsiadm) in the guest, which has no udev: device-mapper gets
// DM_DISABLE_UDEV=1 and LVM a --config that turns udev off. Everything it
// creates carries the sanqos prefix and Close removes it; Build removes a
// crashed run's leftovers first.
package kstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Names and addresses of the stack. 10.77.0.0/24 is private to the guest.
const (
	TargetIQN = "iqn.2026-11.org.example:sanqos-t1"
	Bridge    = "sanqos-br0"
	TargetIP  = "10.77.0.1"
	Port      = 3260
	VG0       = "sanqos-vg0" // on dm-delay over loop 0: two LVs
	VG1       = "sanqos-vg1" // on loop 1: one LV
	DelayDev  = "sanqos-slow0"
	imgDir    = "/tmp/sanqos-kstack"
)

// lvmConfig turns LVM's udev cooperation off: the guest has no udev.
const lvmConfig = "activation{udev_sync=0 udev_rules=0} devices{obtain_device_list_from_udev=0}"

// Initiator is one open-iscsi initiator in its own network namespace.
type Initiator struct {
	Name string // namespace, e.g. sanqos-i1
	IQN  string
	IP   string
}

// LUN is one exported logical volume.
type LUN struct {
	VG, LV string
	Dev    string // /dev/mapper path, the backstore's udev_path
}

// Stack is a built stack.
type Stack struct {
	Initiators []Initiator
	LUNs       []LUN
	DelayMs    int
	loops      []string
	iscsid     []*exec.Cmd
	Log        func(format string, args ...any)
}

// Options size the stack.
type Options struct {
	Initiators int // 1 to 9
	DelayMs    int // dm-delay on VG0's disk, reads and writes
	Log        func(format string, args ...any)
}

// InitiatorFor returns the i-th initiator (from 1).
func InitiatorFor(i int) Initiator {
	return Initiator{
		Name: fmt.Sprintf("sanqos-i%d", i),
		IQN:  fmt.Sprintf("iqn.2026-11.org.example:sanqos-i%d", i),
		IP:   fmt.Sprintf("10.77.0.%d", 10+i),
	}
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DM_DISABLE_UDEV=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func lvm(ctx context.Context, args ...string) (string, error) {
	return run(ctx, args[0], append([]string{"--config", lvmConfig}, args[1:]...)...)
}

// Build creates the stack, after removing an earlier run's leftovers. On
// error it removes what it made.
func Build(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Initiators < 1 || o.Initiators > 9 {
		return nil, fmt.Errorf("kstack: %d initiators: want 1 to 9", o.Initiators)
	}
	s := &Stack{DelayMs: o.DelayMs, Log: o.Log}
	if s.Log == nil {
		s.Log = func(string, ...any) {}
	}
	Cleanup(ctx)
	defer func() {
		if err != nil {
			s.Close(ctx)
		}
	}()
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return nil, err
	}
	// Disks: two sparse files on the guest's tmpfs, each on a loop device.
	for i, size := range []string{"384M", "192M"} {
		img := filepath.Join(imgDir, fmt.Sprintf("disk%d.img", i))
		if _, err := run(ctx, "truncate", "-s", size, img); err != nil {
			return nil, err
		}
		out, err := run(ctx, "losetup", "--find", "--show", img)
		if err != nil {
			return nil, err
		}
		s.loops = append(s.loops, strings.TrimSpace(out))
	}
	// dm-delay over disk 0: every read and write waits DelayMs.
	sectors, err := run(ctx, "blockdev", "--getsz", s.loops[0])
	if err != nil {
		return nil, err
	}
	table := fmt.Sprintf("0 %s delay %s 0 %d", strings.TrimSpace(sectors), s.loops[0], o.DelayMs)
	if _, err := run(ctx, "dmsetup", "create", DelayDev, "--table", table); err != nil {
		return nil, err
	}
	s.Log("kstack: %s: dm-delay %d ms over %s", DelayDev, o.DelayMs, s.loops[0])
	for _, vg := range []struct {
		name, pv string
		lvs      []string
	}{
		{VG0, "/dev/mapper/" + DelayDev, []string{"lun1", "lun2"}},
		{VG1, s.loops[1], []string{"lun3"}},
	} {
		if _, err := lvm(ctx, "pvcreate", "-qq", "-y", vg.pv); err != nil {
			return nil, err
		}
		if _, err := lvm(ctx, "vgcreate", "-qq", vg.name, vg.pv); err != nil {
			return nil, err
		}
		for _, lv := range vg.lvs {
			if _, err := lvm(ctx, "lvcreate", "-qq", "-y", "-Wn", "-Zn", "-L", "96M", "-n", lv, vg.name); err != nil {
				return nil, err
			}
			s.LUNs = append(s.LUNs, LUN{VG: vg.name, LV: lv, Dev: "/dev/mapper/" + strings.ReplaceAll(vg.name, "-", "--") + "-" + lv})
		}
	}
	for i := 1; i <= o.Initiators; i++ {
		s.Initiators = append(s.Initiators, InitiatorFor(i))
	}
	if err := s.network(ctx); err != nil {
		return nil, err
	}
	if err := s.target(ctx); err != nil {
		return nil, err
	}
	for _, in := range s.Initiators {
		if err := s.startIscsid(ctx, in); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// network makes the bridge with the target's address and one namespace
// per initiator, joined to the bridge by a veth pair.
func (s *Stack) network(ctx context.Context) error {
	cmds := [][]string{
		{"ip", "link", "add", Bridge, "type", "bridge"},
		{"ip", "addr", "add", TargetIP + "/24", "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
	}
	for _, in := range s.Initiators {
		host := in.Name + "h"
		cmds = append(cmds,
			[]string{"ip", "netns", "add", in.Name},
			[]string{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", in.Name},
			[]string{"ip", "link", "set", host, "master", Bridge, "up"},
			[]string{"ip", "-n", in.Name, "addr", "add", in.IP + "/24", "dev", "eth0"},
			[]string{"ip", "-n", in.Name, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", in.Name, "link", "set", "lo", "up"},
		)
	}
	for _, c := range cmds {
		if _, err := run(ctx, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// target exports every LV through LIO with rtslib, as targetcli would.
func (s *Stack) target(ctx context.Context) error {
	var b strings.Builder
	b.WriteString("import rtslib_fb as r\n")
	fmt.Fprintf(&b, "t = r.Target(r.FabricModule('iscsi'), %q)\n", TargetIQN)
	b.WriteString("tpg = r.TPG(t, 1)\n")
	fmt.Fprintf(&b, "r.NetworkPortal(tpg, %q, %d)\n", TargetIP, Port)
	b.WriteString("luns = []\n")
	for i, l := range s.LUNs {
		fmt.Fprintf(&b, "so = r.BlockStorageObject('sanqos-%s-%s', %q)\n", l.VG, l.LV, l.Dev)
		fmt.Fprintf(&b, "luns.append(r.LUN(tpg, %d, so))\n", i)
	}
	for _, in := range s.Initiators {
		fmt.Fprintf(&b, "acl = r.NodeACL(tpg, %q)\n", in.IQN)
		b.WriteString("for l in luns: r.MappedLUN(acl, l.lun, l)\n")
	}
	b.WriteString("tpg.set_attribute('authentication', '0')\n")
	b.WriteString("tpg.enable = True\n")
	if _, err := run(ctx, "python3", "-c", b.String()); err != nil {
		return fmt.Errorf("configuring LIO with rtslib: %w", err)
	}
	s.Log("kstack: LIO target %s on %s:%d with %d LUNs", TargetIQN, TargetIP, Port, len(s.LUNs))
	return nil
}

// etcDir is the per-namespace /etc/iscsi: 'ip netns exec' bind-mounts
// /etc/netns/NS/iscsi over /etc/iscsi, so each initiator has its own name
// and node database.
func etcDir(in Initiator) string { return filepath.Join("/etc/netns", in.Name, "iscsi") }

// startIscsid runs one iscsid per namespace: it opens the iSCSI TCP
// connections in user space, so they leave from the namespace it runs in.
func (s *Stack) startIscsid(ctx context.Context, in Initiator) error {
	dir := etcDir(in)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "initiatorname.iscsi"), []byte("InitiatorName="+in.IQN+"\n"), 0o600); err != nil {
		return err
	}
	conf, err := os.ReadFile("/etc/iscsi/iscsid.conf")
	if err != nil {
		return fmt.Errorf("reading open-iscsi's iscsid.conf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "iscsid.conf"), conf, 0o600); err != nil {
		return err
	}
	cmd := exec.Command("ip", "netns", "exec", in.Name, "iscsid", "-f", "-p", "/run/"+in.Name+"-iscsid.pid")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting iscsid in %s: %w", in.Name, err)
	}
	s.iscsid = append(s.iscsid, cmd)
	// iscsid listens on an abstract socket of its namespace; wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := s.iscsiadm(ctx, in, "-m", "session"); err == nil || strings.Contains(err.Error(), "No active sessions") {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("iscsid in %s did not answer: %w", in.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Stack) iscsiadm(ctx context.Context, in Initiator, args ...string) (string, error) {
	return run(ctx, "ip", append([]string{"netns", "exec", in.Name, "iscsiadm"}, args...)...)
}

// Login discovers the target from the initiator's namespace and logs in;
// it returns the initiator's SCSI disks (sdX), one per LUN, in LUN order.
func (s *Stack) Login(ctx context.Context, in Initiator) ([]string, error) {
	portal := fmt.Sprintf("%s:%d", TargetIP, Port)
	if _, err := s.iscsiadm(ctx, in, "-m", "discovery", "-t", "sendtargets", "-p", portal); err != nil {
		return nil, err
	}
	if _, err := s.iscsiadm(ctx, in, "-m", "node", "-T", TargetIQN, "-p", portal, "--login"); err != nil {
		return nil, err
	}
	// No udev: sd_mod is loaded at boot, and the disks appear in
	// devtmpfs once the scan is done.
	deadline := time.Now().Add(30 * time.Second)
	for {
		disks, err := s.Disks(in)
		if err == nil && len(disks) == len(s.LUNs) {
			return disks, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s logged in but has %d of %d disks (%v)", in.Name, len(disks), len(s.LUNs), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Logout logs the initiator out of the target.
func (s *Stack) Logout(ctx context.Context, in Initiator) error {
	_, err := s.iscsiadm(ctx, in, "-m", "node", "-T", TargetIQN, "--logout")
	return err
}

// Disks lists the initiator's disks, by LUN, from sysfs: the session whose
// initiatorname is the initiator's IQN.
func (s *Stack) Disks(in Initiator) ([]string, error) {
	sessions, err := filepath.Glob("/sys/class/iscsi_session/session*")
	if err != nil {
		return nil, err
	}
	for _, sess := range sessions {
		name, err := os.ReadFile(filepath.Join(sess, "initiatorname"))
		if err != nil || strings.TrimSpace(string(name)) != in.IQN {
			continue
		}
		// session dir -> device/target*/H:C:T:L/block/sdX
		blocks, err := filepath.Glob(filepath.Join(sess, "device", "target*", "*", "block", "*"))
		if err != nil {
			return nil, err
		}
		byLUN := map[int]string{}
		for _, b := range blocks {
			hctl := filepath.Base(filepath.Dir(filepath.Dir(b)))
			var h, c, t, l int
			if _, err := fmt.Sscanf(hctl, "%d:%d:%d:%d", &h, &c, &t, &l); err != nil {
				continue
			}
			byLUN[l] = filepath.Base(b)
		}
		var out []string
		for l := 0; l < len(byLUN); l++ {
			d, ok := byLUN[l]
			if !ok {
				return nil, fmt.Errorf("session %s has no LUN %d", sess, l)
			}
			out = append(out, d)
		}
		return out, nil
	}
	return nil, fmt.Errorf("no iSCSI session of %s", in.IQN)
}

// Close removes the stack.
func (s *Stack) Close(ctx context.Context) error {
	for _, in := range s.Initiators {
		s.Logout(ctx, in)
	}
	for _, c := range s.iscsid {
		c.Process.Kill()
		c.Wait()
	}
	s.iscsid = nil
	return Cleanup(ctx)
}

// Cleanup removes whatever a stack (this one or a crashed one) left, in
// dependency order, and reports what it could not remove.
func Cleanup(ctx context.Context) error {
	var errs []error
	try := func(name string, args ...string) {
		if _, err := run(ctx, name, args...); err != nil {
			errs = append(errs, err)
		}
	}
	// Initiators: log out everything, stop the iscsids.
	nss, _ := filepath.Glob("/run/netns/sanqos-*")
	for _, ns := range nss {
		run(ctx, "ip", "netns", "exec", filepath.Base(ns), "iscsiadm", "-m", "node", "--logoutall=all")
		if b, err := os.ReadFile("/run/" + filepath.Base(ns) + "-iscsid.pid"); err == nil {
			run(ctx, "kill", "-9", strings.TrimSpace(string(b)))
		}
	}
	// Target: rtslib's clear_existing removes every LIO object; the guest
	// runs nothing else on LIO.
	if _, err := os.Stat("/sys/kernel/config/target/iscsi"); err == nil {
		try("python3", "-c", "import rtslib_fb as r; r.RTSRoot().clear_existing(confirm=True)")
	}
	for _, ns := range nss {
		try("ip", "netns", "del", filepath.Base(ns))
		os.RemoveAll(filepath.Join("/etc/netns", filepath.Base(ns)))
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		try("ip", "link", "del", Bridge)
	}
	for _, vg := range []string{VG0, VG1} {
		if _, err := lvm(ctx, "vgs", vg); err == nil {
			if _, err := lvm(ctx, "vgremove", "-f", "-y", vg); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := os.Stat("/dev/mapper/" + DelayDev); err == nil {
		try("dmsetup", "remove", DelayDev)
	}
	if out, err := run(ctx, "losetup", "-j", filepath.Join(imgDir, "disk0.img")); err == nil {
		detachLoops(ctx, out, &errs)
	}
	if out, err := run(ctx, "losetup", "-j", filepath.Join(imgDir, "disk1.img")); err == nil {
		detachLoops(ctx, out, &errs)
	}
	os.RemoveAll(imgDir)
	return errors.Join(errs...)
}

func detachLoops(ctx context.Context, out string, errs *[]error) {
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if dev, _, ok := strings.Cut(l, ":"); ok {
			if _, err := run(ctx, "losetup", "-d", dev); err != nil {
				*errs = append(*errs, err)
			}
		}
	}
}

// Package kstack builds, inside the kernel lab's guest, the storage stack
// sanqos's users run: loop files on tmpfs, dm-delay over one of them (a
// disk with latency), LVM volume groups with logical volumes, LIO block
// backstores exported by one iSCSI target with a node ACL per initiator,
// and open-iscsi initiators logged in to it, each from its own interface
// and address.
//
// The target, not the initiators, sits in a network namespace (TargetNS):
// this kernel's iSCSI initiator netlink (scsi_transport_iscsi) only
// answers iscsid in the initial namespace ("iscsid: sendmsg: bug?" from a
// namespaced iscsid at login), while LIO opens its portal socket in the
// namespace of whoever configures it. Each initiator is an open-iscsi
// iface bound (SO_BINDTODEVICE) to its own veth, so its sessions come from
// its own address across the target namespace's bridge, whose egress is
// where sanqos's backends act.
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
	TargetNS  = "sanqos-tgt"
	Bridge    = "sanqos-br0" // in TargetNS
	TargetIP  = "10.77.0.1"
	Port      = 3260
	VG0       = "sanqos-vg0"    // on dm-delay over loop 0: two LVs
	VG1       = "sanqos-vg1"    // on loop 1: one LV
	DelayDev  = "sanqos-slow0"  // dm-delay over loop 0, VG0's PV
	PlainDev  = "sanqos-plain1" // dm-linear over loop 1, VG1's PV
	imgDir    = "/tmp/sanqos-kstack"
)

// lvmConfig turns LVM's udev cooperation off (the guest has no udev) and
// hides the loop devices, so that LVM sees each PV once, through the dm
// device over it, and not again as a duplicate on the loop below.
const lvmConfig = `activation{udev_sync=0 udev_rules=0} devices{obtain_device_list_from_udev=0 filter=["r|^/dev/loop|"]}`

// Initiator is one open-iscsi initiator: an iface of its own, bound to a
// veth of that name in the initial namespace.
type Initiator struct {
	Name string // iface and veth, e.g. sanqos-i1
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
	if err := s.disks(ctx); err != nil {
		return nil, err
	}
	if err := s.volumes(ctx); err != nil {
		return nil, err
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
	if err := s.startIscsid(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// disks makes two sparse files, each on a file system of its own (a
// tmpfs: the guest has no disk) and a loop device, and device-mapper
// devices over them: dm-delay over disk 0 (every read and write waits
// DelayMs), dm-linear over disk 1. One file system for both would make
// the two VGs one resource, rightly: the resolver follows loop devices
// to the file system holding their images, and both would share it.
func (s *Stack) disks(ctx context.Context) error {
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	for i, size := range []string{"384M", "192M"} {
		fsDir := filepath.Join(imgDir, fmt.Sprintf("fs%d", i))
		if err := os.MkdirAll(fsDir, 0o755); err != nil {
			return err
		}
		if _, err := run(ctx, "mount", "-t", "tmpfs", "-o", "size="+size, "sanqos-kstack", fsDir); err != nil {
			return err
		}
		img := filepath.Join(fsDir, "disk.img")
		if _, err := run(ctx, "truncate", "-s", size, img); err != nil {
			return err
		}
		out, err := run(ctx, "losetup", "--find", "--show", img)
		if err != nil {
			return err
		}
		s.loops = append(s.loops, strings.TrimSpace(out))
	}
	for i, dm := range []struct{ name, target string }{
		{DelayDev, fmt.Sprintf("delay %s 0 %d", s.loops[0], s.DelayMs)},
		{PlainDev, fmt.Sprintf("linear %s 0", s.loops[1])},
	} {
		sectors, err := run(ctx, "blockdev", "--getsz", s.loops[i])
		if err != nil {
			return err
		}
		if _, err := run(ctx, "dmsetup", "create", dm.name, "--table", "0 "+strings.TrimSpace(sectors)+" "+dm.target); err != nil {
			return err
		}
	}
	s.Log("kstack: %s: dm-delay %d ms over %s", DelayDev, s.DelayMs, s.loops[0])
	return nil
}

// volumes makes two volume groups: VG0 with two LVs on the delayed
// disk, VG1 with one on the plain one.
func (s *Stack) volumes(ctx context.Context) error {
	for _, vg := range []struct {
		name, pv string
		lvs      []string
	}{
		{VG0, "/dev/mapper/" + DelayDev, []string{"lun1", "lun2"}},
		{VG1, "/dev/mapper/" + PlainDev, []string{"lun3"}},
	} {
		if _, err := lvm(ctx, "pvcreate", "-qq", "-y", vg.pv); err != nil {
			return err
		}
		if _, err := lvm(ctx, "vgcreate", "-qq", vg.name, vg.pv); err != nil {
			return err
		}
		for _, lv := range vg.lvs {
			if _, err := lvm(ctx, "lvcreate", "-qq", "-y", "-Wn", "-Zn", "-L", "96M", "-n", lv, vg.name); err != nil {
				return err
			}
			s.LUNs = append(s.LUNs, LUN{VG: vg.name, LV: lv, Dev: "/dev/mapper/" + strings.ReplaceAll(vg.name, "-", "--") + "-" + lv})
		}
	}
	return nil
}

// network makes the target namespace with a bridge holding the target's
// address, and one veth pair per initiator from the initial namespace to
// that bridge.
func (s *Stack) network(ctx context.Context) error {
	cmds := [][]string{
		// The initiators' addresses share a subnet in one namespace:
		// answer ARP only on the interface that holds the address, so
		// the target sends each initiator's packets down its own veth.
		{"sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2"},
		{"ip", "netns", "add", TargetNS},
		{"ip", "-n", TargetNS, "link", "set", "lo", "up"},
		{"ip", "-n", TargetNS, "link", "add", Bridge, "type", "bridge"},
		{"ip", "-n", TargetNS, "addr", "add", TargetIP + "/24", "dev", Bridge},
		{"ip", "-n", TargetNS, "link", "set", Bridge, "up"},
	}
	for i, in := range s.Initiators {
		peer := fmt.Sprintf("p%d", i+1)
		cmds = append(cmds,
			[]string{"ip", "link", "add", in.Name, "type", "veth", "peer", "name", peer, "netns", TargetNS},
			[]string{"ip", "-n", TargetNS, "link", "set", peer, "master", Bridge, "up"},
			[]string{"ip", "addr", "add", in.IP + "/24", "dev", in.Name},
			[]string{"ip", "link", "set", in.Name, "up"},
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
		for m, l := range s.LUNsOf(in) {
			fmt.Fprintf(&b, "r.MappedLUN(acl, %d, luns[%d])\n", m, l)
		}
	}
	b.WriteString("tpg.set_attribute('authentication', '0')\n")
	b.WriteString("tpg.enable = True\n")
	// In the target namespace: LIO opens the portal's socket there.
	if _, err := run(ctx, "nsenter", append(InTarget(), "python3", "-c", b.String())...); err != nil {
		return fmt.Errorf("configuring LIO with rtslib: %w", err)
	}
	s.Log("kstack: LIO target %s on %s:%d with %d LUNs", TargetIQN, TargetIP, Port, len(s.LUNs))
	return nil
}

// InTarget are nsenter's arguments to run a command in the target's
// network namespace. Unlike 'ip netns exec' it keeps the mounts, so
// configfs stays visible under /sys/kernel/config.
func InTarget() []string { return []string{"--net=/run/netns/" + TargetNS, "--"} }

// startIscsid runs iscsid in the initial namespace and makes one
// open-iscsi iface per initiator, with its IQN and bound to its veth.
func (s *Stack) startIscsid(ctx context.Context) error {
	if err := os.WriteFile("/etc/iscsi/initiatorname.iscsi", []byte("InitiatorName=iqn.2026-11.org.example:sanqos-default\n"), 0o600); err != nil {
		return err
	}
	cmd := exec.Command("iscsid", "-f")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting iscsid: %w", err)
	}
	s.iscsid = append(s.iscsid, cmd)
	exited := make(chan struct{})
	go func() { cmd.Process.Wait(); close(exited) }()
	// iscsid listens on an abstract socket; wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := run(ctx, "iscsiadm", "-m", "session")
		if !strings.Contains(out, "can not connect") && (err == nil || strings.Contains(out, "No active sessions")) {
			break
		}
		select {
		case <-exited:
			return errors.New("iscsid exited at start")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("iscsid did not answer: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, in := range s.Initiators {
		for _, c := range [][]string{
			{"-m", "iface", "-I", in.Name, "-o", "new"},
			{"-m", "iface", "-I", in.Name, "-o", "update", "-n", "iface.net_ifacename", "-v", in.Name},
			{"-m", "iface", "-I", in.Name, "-o", "update", "-n", "iface.initiatorname", "-v", in.IQN},
		} {
			if _, err := run(ctx, "iscsiadm", c...); err != nil {
				return err
			}
		}
	}
	return nil
}

// LUNsOf returns the portal group's LUN numbers (indexes of s.LUNs) that
// the initiator's ACL maps, in mapped-LUN order, as an administrator
// gives each host its own volume and a shared one: odd initiators VG0's
// lun2, even ones VG0's lun1, and every initiator VG1's lun3.
func (s *Stack) LUNsOf(in Initiator) []int {
	var n int
	fmt.Sscanf(in.Name, "sanqos-i%d", &n)
	return []int{n % 2, 2}
}

// Login discovers the target from the initiator's namespace and logs in;
// it returns the initiator's SCSI disks (sdX), one per mapped LUN, in
// mapped-LUN order (see LUNsOf).
func (s *Stack) Login(ctx context.Context, in Initiator) ([]string, error) {
	portal := fmt.Sprintf("%s:%d", TargetIP, Port)
	if _, err := run(ctx, "iscsiadm", "-m", "discovery", "-t", "sendtargets", "-p", portal, "-I", in.Name); err != nil {
		return nil, err
	}
	if _, err := run(ctx, "iscsiadm", "-m", "node", "-T", TargetIQN, "-p", portal, "-I", in.Name, "--login"); err != nil {
		return nil, err
	}
	// No udev: sd_mod is loaded at boot, and the disks appear in
	// devtmpfs once the scan is done.
	deadline := time.Now().Add(30 * time.Second)
	for {
		disks, err := s.Disks(in)
		if err == nil && len(disks) == len(s.LUNsOf(in)) {
			return disks, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s logged in but has %d of %d disks (%v)", in.Name, len(disks), len(s.LUNsOf(in)), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Logout logs the initiator out of the target.
func (s *Stack) Logout(ctx context.Context, in Initiator) error {
	_, err := run(ctx, "iscsiadm", "-m", "node", "-T", TargetIQN, "-I", in.Name, "--logout")
	return err
}

// Disks lists the initiator's disks, by LUN, from sysfs: the session of
// the initiator's iface.
func (s *Stack) Disks(in Initiator) ([]string, error) {
	sessions, err := filepath.Glob("/sys/class/iscsi_session/session*")
	if err != nil {
		return nil, err
	}
	for _, sess := range sessions {
		name, err := os.ReadFile(filepath.Join(sess, "ifacename"))
		if err != nil || strings.TrimSpace(string(name)) != in.Name {
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
		c.Process.Kill() // reaped by startIscsid's waiter
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
	// Initiators: log out everything. Each guest boots fresh, so no
	// iscsid of an earlier run is left; Close stops this run's.
	run(ctx, "iscsiadm", "-m", "node", "--logoutall=all")
	ifaces, _ := filepath.Glob("/etc/iscsi/ifaces/sanqos-*")
	for _, f := range ifaces {
		os.Remove(f)
	}
	nodes, _ := filepath.Glob("/etc/iscsi/nodes/*sanqos*")
	for _, f := range nodes {
		os.RemoveAll(f)
	}
	os.RemoveAll("/etc/iscsi/send_targets")
	// Target: rtslib's clear_existing removes every LIO object; the guest
	// runs nothing else on LIO.
	if _, err := os.Stat("/sys/kernel/config/target/iscsi"); err == nil {
		try("python3", "-c", "import rtslib_fb as r; r.RTSRoot().clear_existing(confirm=True)")
	}
	links, _ := filepath.Glob("/sys/class/net/sanqos-*")
	for _, l := range links {
		try("ip", "link", "del", filepath.Base(l)) // and its peer
	}
	if _, err := os.Stat("/run/netns/" + TargetNS); err == nil {
		try("ip", "netns", "del", TargetNS) // and the bridge
	}
	for _, vg := range []string{VG0, VG1} {
		if _, err := lvm(ctx, "vgs", vg); err == nil {
			if _, err := lvm(ctx, "vgremove", "-f", "-y", vg); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range []string{DelayDev, PlainDev} {
		if _, err := os.Stat("/dev/mapper/" + d); err == nil {
			try("dmsetup", "remove", d)
		}
	}
	for i := 0; i < 2; i++ {
		fsDir := filepath.Join(imgDir, fmt.Sprintf("fs%d", i))
		if out, err := run(ctx, "losetup", "-j", filepath.Join(fsDir, "disk.img")); err == nil {
			detachLoops(ctx, out, &errs)
		}
		if _, err := run(ctx, "mountpoint", "-q", fsDir); err == nil {
			try("umount", fsDir)
		}
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

// LVM runs an LVM command with the stack's configuration (no udev, the
// loop devices hidden), as the stack's own volumes were made.
func LVM(ctx context.Context, args ...string) (string, error) { return lvm(ctx, args...) }

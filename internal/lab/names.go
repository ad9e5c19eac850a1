package lab

import (
	"fmt"
	"net/netip"
	"path/filepath"
)

// Names and addresses of the lab's kernel objects. They mirror the thesis
// (target "bm", initiators "b2"–"b5", addresses .253 and .242–.245) and all
// carry the sanqos-lab prefixes reserved for this package, so Cleanup can
// recognise leftovers without touching anything else on the machine.
const (
	// TargetNS is the network namespace of the iSCSI target (tgtd).
	TargetNS = "sanqos-bm"
	// SwitchNS holds the bridge that joins every namespace.
	SwitchNS = "sanqos-sw"
	// bridgeName is the bridge inside SwitchNS.
	bridgeName = "sqbr0"
	// ifName is the lab interface inside the target and initiator namespaces.
	ifName = "eth0"
	// TargetDev is the target namespace's interface towards the
	// initiators (where read rates are capped).
	TargetDev = ifName
	// ControlPort is tgtd's management port (tgtd -C, tgtadm -C). It is not
	// the default 0 so that a tgtd the machine may run for itself is never
	// addressed by the lab.
	ControlPort = 2601
	// ISCSIPort is where tgtd listens inside TargetNS.
	ISCSIPort = 3260
	// StateDir records what the lab created (state.json, pid files, logs)
	// and holds the emulated disk's mount point.
	StateDir = "/run/sanqos-lab"
	// DataDir holds LUN images (and the emulated disk's backing files)
	// when the storage is emulated; it is on disk, not tmpfs, because
	// images written through the lab would otherwise fill RAM.
	DataDir = "/var/tmp/sanqos-lab"
	// imagePrefix starts the name of every LUN image the lab creates, so
	// loop devices over them are recognisable after a crash.
	imagePrefix = "sanqos-lab-"
	// MTU is set explicitly on every lab interface (Ethernet default, as on
	// the thesis's gigabit network).
	MTU = 1500
	// IQNPrefix starts every target name: the thesis's year, our domain.
	IQNPrefix = "iqn.2010-05.sanqos.lab:"
)

// subnet is private and only ever configured inside the lab's namespaces.
var subnet = netip.MustParsePrefix("10.213.0.0/24")

// TargetAddr is the target's portal address.
var TargetAddr = netip.AddrFrom4([4]byte{10, 213, 0, 253})

// initiatorNames are the thesis's initiator hosts.
var initiatorNames = []string{"b2", "b3", "b4", "b5"}

// Namespaces lists every namespace the lab may create, target first.
func Namespaces() []string {
	ns := []string{TargetNS}
	for _, n := range initiatorNames {
		ns = append(ns, "sanqos-"+n)
	}
	return append(ns, SwitchNS)
}

// initiatorAddr is b2 → .242 … b5 → .245, as in the thesis.
func initiatorAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 213, 0, byte(242 + i)})
}

func tgtdPidFile() string   { return filepath.Join(StateDir, "tgtd.pid") }
func emuPidFile() string    { return filepath.Join(StateDir, "diskemu.pid") }
func stateFile() string     { return filepath.Join(StateDir, "state.json") }
func emuMountpoint() string { return filepath.Join(StateDir, "emu") }
func emuBackingDir() string { return filepath.Join(DataDir, "backing") }

// tgtdSockets are the management socket and lock file tgtd creates for
// ControlPort; a killed tgtd leaves them behind.
func tgtdSockets() []string {
	s := fmt.Sprintf("/var/run/tgtd/socket.%d", ControlPort)
	return []string{s, s + ".lock"}
}

package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// Offloads are the segmentation and receive offloads of the lab's
// interfaces. The lab turns them on explicitly, as on the thesis's gigabit
// NICs: with GRO the target sees few large segments and sends few ACKs, so
// delaying ACKs (how sanqos slows writers) costs little per byte.
type Offloads struct {
	TSO bool `json:"tso"`
	GSO bool `json:"gso"`
	GRO bool `json:"gro"`
}

// wantOffloads is what setupNetwork sets on every lab interface.
var wantOffloads = Offloads{TSO: true, GSO: true, GRO: true}

// CongestionControl is the TCP congestion control of every lab host. It is
// set explicitly because the machine's default may be BBR, whose PROBE_RTT
// phase cuts the window to 4 packets for 200 ms every 10 s: an 8 KiB read
// response (6 segments) then waits for the initiator's delayed ACK, and
// about 4 % of smalljob's reads took 100 ms longer (measured: mean 10.1 ms
// with bbr, 5.9 ms with reno, on a fixed 5 ms disk). The thesis's hosts ran
// loss-based CUBIC, clocked by ACKs, which is what delaying ACKs relies on;
// reno is the loss-based algorithm every kernel allows in a namespace
// (cubic may be missing from net.ipv4.tcp_allowed_congestion_control, a
// host-wide setting the lab does not touch), and on a loss-free LAN the two
// behave the same.
const CongestionControl = "reno"

const ccSysctl = "net.ipv4.tcp_congestion_control"

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// nsExists reports whether a named network namespace exists (ip netns
// add keeps a bind mount of it under /run/netns).
func nsExists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

// vethName is the switch-side end of a namespace's veth pair.
func vethName(ns string) string {
	return "sq-" + strings.TrimPrefix(ns, "sanqos-")
}

// setupNetwork creates the namespaces, the bridge and one veth pair per
// host namespace, addresses them and sets MTU and offloads explicitly.
func setupNetwork(ctx context.Context, r runner, hosts []host) error {
	for _, ns := range Namespaces() {
		if _, err := r.run(ctx, "ip", "netns", "add", ns); err != nil {
			return fmt.Errorf("creating network namespace: %w", err)
		}
		if _, err := r.run(ctx, "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return fmt.Errorf("bringing up loopback in %s: %w", ns, err)
		}
	}
	mtu := fmt.Sprint(MTU)
	steps := [][]string{
		{"ip", "-n", SwitchNS, "link", "add", bridgeName, "mtu", mtu, "type", "bridge"},
		{"ip", "-n", SwitchNS, "link", "set", bridgeName, "up"},
	}
	for _, h := range hosts {
		sw := vethName(h.ns)
		steps = append(steps,
			[]string{"ip", "netns", "exec", h.ns, "sysctl", "-q", "-w", ccSysctl + "=" + CongestionControl},
			[]string{"ip", "-n", SwitchNS, "link", "add", sw, "mtu", mtu, "type", "veth",
				"peer", "name", ifName, "mtu", mtu, "netns", h.ns},
			[]string{"ip", "-n", SwitchNS, "link", "set", sw, "master", bridgeName, "up"},
			[]string{"ip", "-n", h.ns, "addr", "add", h.addr.String() + "/" + fmt.Sprint(subnet.Bits()), "dev", ifName},
			[]string{"ip", "-n", h.ns, "link", "set", ifName, "up"},
			ethtoolK(SwitchNS, sw),
			ethtoolK(h.ns, ifName),
			rps(SwitchNS, sw),
			rps(h.ns, ifName),
		)
	}
	for _, s := range steps {
		if _, err := r.run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("setting up the lab network: %w", err)
		}
	}
	return nil
}

// rps steers each flow that dev receives to one CPU by its hash (receive
// packet steering over all CPUs). A veth hands a packet to the backlog of
// the CPU that sent it, so without it a sending thread that moves between
// CPUs reorders its own flow at the next hop: the target then queues an
// initiator's data out of order and the initiator retransmits in a SACK
// recovery that DSACKs undo, with no sanqos on the path. A NIC keeps a
// flow on one queue; RPS makes the veths do the same.
func rps(ns, dev string) []string {
	return []string{"ip", "netns", "exec", ns, "sh", "-c",
		fmt.Sprintf("for q in /sys/class/net/%s/queues/rx-*/rps_cpus; do echo %s > $q; done", dev, cpuMask(runtime.NumCPU()))}
}

// cpuMask is the sysfs CPU mask of CPUs 0 to n-1: hexadecimal, in groups
// of 32 CPUs separated by commas.
func cpuMask(n int) string {
	var groups []string
	for ; n > 0; n -= 32 {
		bits := uint64(1)<<min(n, 32) - 1
		groups = append([]string{fmt.Sprintf("%08x", bits)}, groups...)
	}
	return strings.Join(groups, ",")
}

func ethtoolK(ns, dev string) []string {
	return []string{"ip", "netns", "exec", ns, "ethtool", "-K", dev,
		"tso", onOff(wantOffloads.TSO), "gso", onOff(wantOffloads.GSO), "gro", onOff(wantOffloads.GRO)}
}

// readOffloads asks ethtool what an interface really has, so status shows
// the truth rather than what was asked for.
func readOffloads(ctx context.Context, r runner, ns, dev string) (Offloads, error) {
	out, err := inNS(ctx, r, ns, "ethtool", "-k", dev)
	if err != nil {
		return Offloads{}, fmt.Errorf("reading offloads of %s in %s: %w", dev, ns, err)
	}
	return parseEthtoolK(out)
}

// parseEthtoolK reads `ethtool -k` output ("tcp-segmentation-offload: on").
func parseEthtoolK(out []byte) (Offloads, error) {
	var o Offloads
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		on := strings.HasPrefix(strings.TrimSpace(v), "on")
		switch k {
		case "tcp-segmentation-offload":
			o.TSO, found = on, found+1
		case "generic-segmentation-offload":
			o.GSO, found = on, found+1
		case "generic-receive-offload":
			o.GRO, found = on, found+1
		}
	}
	if found != 3 {
		return o, fmt.Errorf("ethtool -k output has %d of the 3 offload lines (tso, gso, gro)", found)
	}
	return o, nil
}

// readCongestionControl reads a namespace's TCP congestion control.
func readCongestionControl(ctx context.Context, r runner, ns string) (string, error) {
	out, err := inNS(ctx, r, ns, "sysctl", "-n", ccSysctl)
	if err != nil {
		return "", fmt.Errorf("reading TCP congestion control in %s: %w", ns, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// InNetNS runs f on an OS thread switched into the named network
// namespace; sockets f opens belong to it. The thread is released only
// once it is back in its own namespace; otherwise it stays locked and the
// runtime ends it with its goroutine.
func InNetNS(name string, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("reading this thread's network namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening network namespace %s: %w", name, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", name, err)
	}
	defer func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return f()
}

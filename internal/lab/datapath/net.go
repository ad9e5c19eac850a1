package datapath

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// The measurement's network: a target and a client namespace joined by
// one veth pair, apart from the rest of the machine (it needs no iSCSI,
// only TCP to the target's iSCSI port, which the backends throttle by
// default).
const (
	TargetNS  = "sanqos-dp-tgt"
	ClientNS  = "sanqos-dp-cli"
	TargetDev = "sanqos-dp-t" // in TargetNS: the tc backends' --dev
	ClientDev = "sanqos-dp-c"
	TargetIP  = "172.31.235.1"
	ClientIP  = "172.31.235.2"
	Port      = 3260
	// Msg is the ping-pong's request and reply size: a small segment in
	// every backend's split.
	Msg = 32
	// rcvBuf bounds the client's window for the bulk flow, as a real
	// initiator's is bounded: an unbounded window over veth, one MSS per
	// packet, fills the receiving CPU's backlog (netdev_max_backlog) and
	// the baseline flow loses packets there, which no backend causes.
	rcvBuf = 256 << 10
)

// Setup creates the namespaces and the veth pair, after removing what a
// killed earlier run left; on failure it removes what it made. The
// caller runs Teardown when done.
func Setup() error {
	Teardown()
	for _, c := range [][]string{
		{"ip", "netns", "add", TargetNS},
		{"ip", "netns", "add", ClientNS},
		{"ip", "link", "add", TargetDev, "netns", TargetNS, "type", "veth", "peer", "name", ClientDev, "netns", ClientNS},
		{"ip", "-n", TargetNS, "addr", "add", TargetIP + "/24", "dev", TargetDev},
		{"ip", "-n", ClientNS, "addr", "add", ClientIP + "/24", "dev", ClientDev},
		// One MSS per packet: with segmentation offload TCP hands the
		// qdisc 64 KiB super-packets, which edt's classifier sees as one
		// packet and nfqueue splits into MSS segments before queueing
		// them, so "a packet" would mean different things per backend.
		{"ip", "-n", TargetNS, "link", "set", TargetDev, "gso_max_segs", "1", "up"},
		{"ip", "-n", ClientNS, "link", "set", ClientDev, "gso_max_segs", "1", "up"},
		{"ip", "-n", TargetNS, "link", "set", "lo", "up"},
		{"ip", "-n", ClientNS, "link", "set", "lo", "up"},
		// Read delays are exact only without autocorking (see sanqos run --help).
		{"nsenter", "--net=/run/netns/" + TargetNS, "sysctl", "-qw", "net.ipv4.tcp_autocorking=0"},
	} {
		if err := run(c...); err != nil {
			Teardown()
			return fmt.Errorf("setting up the namespaces: %w", err)
		}
	}
	return nil
}

// SetOnePacketPerMSS switches segmentation offload on the veth pair: on
// (Setup's state, the cost measurement's) TCP hands the qdisc one MSS per
// packet; off, the kernel's default super-packets, as a real host's bulk
// transfer has them (the idle measurement's: one MSS per packet over veth
// loses packets at the receiving CPU's backlog with or without sanqos).
func SetOnePacketPerMSS(on bool) error {
	segs := "65535"
	if on {
		segs = "1"
	}
	for _, c := range [][]string{
		{"ip", "-n", TargetNS, "link", "set", TargetDev, "gso_max_segs", segs},
		{"ip", "-n", ClientNS, "link", "set", ClientDev, "gso_max_segs", segs},
	} {
		if err := run(c...); err != nil {
			return fmt.Errorf("setting the veth pair's segmentation: %w", err)
		}
	}
	return nil
}

// Teardown removes the namespaces (and with them the veth pair, and any
// rule or qdisc a backend left in them).
func Teardown() {
	for _, ns := range []string{TargetNS, ClientNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	}
}

func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// HasQdisc says whether the kernel can make a qdisc of kind (fq, netem)
// by adding one to the target namespace's loopback and removing it.
func HasQdisc(kind string) bool {
	in := []string{"ip", "netns", "exec", TargetNS, "tc", "qdisc"}
	if run(append(in, "add", "dev", "lo", "root", kind)...) != nil {
		return false
	}
	_ = run(append(in, "del", "dev", "lo", "root")...)
	return true
}

// InNS runs f on a thread in network namespace ns: sockets f creates
// belong to ns for good. The thread is never unlocked, so it exits with
// the goroutine and no other goroutine ever runs in ns.
func InNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("opening network namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering network namespace %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// TCPInfo reads a connection's kernel TCP counters.
func TCPInfo(c net.Conn) (*unix.TCPInfo, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, errors.New("not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return nil, err
	}
	if ierr != nil {
		return nil, fmt.Errorf("reading TCP_INFO: %w", ierr)
	}
	return info, nil
}

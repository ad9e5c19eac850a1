package nfqbackend

import (
	"context"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// TestByFamily: a group with IPv4 and IPv6 members has its IPv4 set and
// rule in iptables, its IPv6 set and the same rule in ip6tables; a group
// with IPv4 members only has nothing in ip6tables.
func TestByFamily(t *testing.T) {
	s := plan.State{Groups: []plan.Group{
		{Name: "vg", Members: []netip.Addr{ip("10.0.0.2"), ip("fd00::2")}, WriteDelay: time.Millisecond},
		{Name: "pool", Members: []netip.Addr{ip("10.0.0.3")}, WriteDelay: time.Millisecond},
	}}
	r4, s4, r6, s6 := byFamily(NfqueueRules(s, 1), plan.WantSets(s))
	if len(r4) != 2 || len(s4) != 2 || !slices.Equal(s4["sanqos-vg"], []netip.Addr{ip("10.0.0.2")}) {
		t.Fatalf("IPv4 half: %v %v", r4, s4)
	}
	if len(r6) != 1 || !strings.Contains(r6[0], "sanqos-vg ") || len(s6) != 1 || !slices.Equal(s6["sanqos-vg"], []netip.Addr{ip("fd00::2")}) {
		t.Fatalf("IPv6 half: %v %v", r6, s6)
	}
	if o := (owned.Owner{Name: "q1", V6: true}); !owned.IsV6Set(o.Set("sanqos-vg")) || owned.IsV6Set((owned.Owner{Name: "q1"}).Set("sanqos-vg")) {
		t.Fatal("IPv6 set names are not told from IPv4 ones")
	}
	if inst, ok := owned.SetOwner((owned.Owner{Name: "q1", V6: true}).Set("sanqos-vg")); !ok || inst != "q1" {
		t.Fatalf("owner of an IPv6 set: %q %v", inst, ok)
	}
}

const (
	targetIP6 = "fd53:5a::1"
	clientIP6 = "fd53:5a::2"
)

// echo6 gives the lab IPv6 addresses, an echo server on the target's and
// a connection to it from the client.
func (l *lab) echo6(t *testing.T) net.Conn {
	run(t, "ip", "-n", l.tns, "addr", "add", targetIP6+"/64", "dev", "sqtt0", "nodad")
	run(t, "ip", "-n", l.cns, "addr", "add", clientIP6+"/64", "dev", "sqtt1", "nodad")
	var ln net.Listener
	l.in(l.tnsH, func() {
		var err error
		if ln, err = net.Listen("tcp6", net.JoinHostPort(targetIP6, strconv.Itoa(iscsi))); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	var c6 net.Conn
	l.in(l.cnsH, func() {
		var err error
		if c6, err = net.DialTimeout("tcp6", net.JoinHostPort(targetIP6, strconv.Itoa(iscsi)), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { c6.Close() })
	return c6
}

// TestLiveIPv6Manual: `sanqos throttle --ip` with an IPv6 address,
// through a running daemon, throttles that consumer.
func TestLiveIPv6Manual(t *testing.T) {
	l := newLab(t)
	bin := buildSanqos(t)
	sock := filepath.Join(t.TempDir(), "s.sock")
	l.startDaemon(t, bin, sock)
	c6 := l.echo6(t)
	if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--ip", clientIP6, "--delay", "20ms"); err != nil {
		t.Fatalf("throttle an IPv6 consumer: %v: %s", err, out)
	}
	l.pastRamp(c6)
	if rtt := median(l.rtts(c6, 5)); rtt < 19*time.Millisecond {
		t.Fatalf("IPv6 RTT %v under a manual 20ms throttle", rtt)
	}
}

// TestLiveIPv6Consumer (issue 14, finding 4): an IPv6 consumer and an
// IPv4 consumer of one group are both throttled; Close leaves nothing in
// iptables, ip6tables or ipset.
func TestLiveIPv6Consumer(t *testing.T) {
	l := newLab(t)
	b := l.backendWith(t, NfqueueConfig{})
	c6 := l.echo6(t)
	c4 := l.dial('e')
	defer c4.Close()
	base6 := median(l.rtts(c6, 5))
	s := plan.State{Groups: []plan.Group{{Name: "tt", Members: []netip.Addr{mustAddr(clientIP), mustAddr(clientIP6)}, WriteDelay: 20 * time.Millisecond}}}
	if err := b.Apply(context.Background(), s); err != nil {
		t.Fatalf("a state with an IPv6 consumer: %v", err)
	}
	l.pastRamp(c6)
	l.pastRamp(c4)
	rtt6, rtt4 := median(l.rtts(c6, 5)), median(l.rtts(c4, 5))
	t.Logf("echo RTT under a 20ms throttle: IPv6 %v (unthrottled %v), IPv4 %v", rtt6, base6, rtt4)
	if rtt6 < 19*time.Millisecond || rtt4 < 19*time.Millisecond {
		t.Fatalf("RTT IPv6 %v, IPv4 %v: want both consumers throttled at 20ms", rtt6, rtt4)
	}
	six, err := l.targetRunner.Run(context.Background(), "", "ip6tables-save", "-t", "mangle")
	if err != nil || !strings.Contains(six, "SANQOS-q3260") || !strings.Contains(six, "sanqos-q3260.6-tt") {
		t.Fatalf("ip6tables holds (%v):\n%s", err, six)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if rtt := median(l.rtts(c6, 5)); rtt > 5*time.Millisecond {
		t.Fatalf("IPv6 RTT %v after Close, want unthrottled", rtt)
	}
	six, _ = l.targetRunner.Run(context.Background(), "", "ip6tables-save", "-t", "mangle")
	if left := l.ours(t); left != "" || strings.Contains(six, owned.Chain) {
		t.Fatalf("Close left:\n%s\n%s", left, six)
	}
}

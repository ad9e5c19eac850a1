package guesttest

import (
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm"
)

// The IPv6 addresses of the data path measurement's veth pair.
const (
	dp6TargetIP = "fd00:5a9:235::1"
	dp6ClientIP = "fd00:5a9:235::2"
)

// TestEDTIPv6EndToEnd holds an IPv6 initiator over fq: 'sanqos run
// --backend edt' on the target's veth, a ping-pong of small segments to
// the iSCSI port over IPv6, its replies delayed by 'sanqos throttle --ip
// IPV6 --delay'. Every exchange waits at least the delay while it is set
// (the departure times the classifier gives IPv6 packets are kept by fq),
// the daemon counts the replies it held, and once freed the exchanges are
// back under the delay. Direction and counts, not the emulated clock's
// precision.
func TestEDTIPv6EndToEnd(t *testing.T) {
	inGuest(t)
	dpSetup(t)
	for _, c := range [][]string{
		{"ip", "-n", dpTargetNS, "addr", "add", dp6TargetIP + "/64", "dev", dpTargetDev, "nodad"},
		{"ip", "-n", dpClientNS, "addr", "add", dp6ClientIP + "/64", "dev", dpClientDev, "nodad"},
	} {
		sh(t, c[0], c[1:]...)
	}
	var ln net.Listener
	if err := inNS(dpTargetNS, func() (err error) {
		ln, err = net.Listen("tcp6", net.JoinHostPort(dp6TargetIP, strconv.Itoa(dpPort)))
		return err
	}); err != nil {
		t.Fatalf("listening on IPv6 in the target namespace: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, dpMsg)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	var c net.Conn
	if err := inNS(dpClientNS, func() (err error) {
		c, err = net.DialTimeout("tcp6", net.JoinHostPort(dp6TargetIP, strconv.Itoa(dpPort)), 10*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connecting over IPv6: %v", err)
	}
	defer c.Close()
	exchange := func(n int) []time.Duration {
		buf := make([]byte, dpMsg)
		var out []time.Duration
		for i := range n {
			t0 := time.Now()
			if _, err := c.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatalf("exchange %d over IPv6: %v", i, err)
			}
			out = append(out, time.Since(t0))
		}
		slices.Sort(out)
		return out
	}
	base := exchange(20)

	d := startDaemon(t, vm.GuestBin, "edt")
	const hold = 20 * time.Millisecond
	d.throttle(t, "--ip", dp6ClientIP, "--delay", hold.String(), "--direction", "write")
	// The flow ramps up to the delay (the rise limit), by a step per
	// acknowledgment of new data: warm it up, then judge.
	exchange(60)
	s0 := d.stats(t)
	held := exchange(20)
	s1 := d.stats(t)
	d.throttle(t, "--ip", dp6ClientIP, "--free")
	time.Sleep(500 * time.Millisecond)
	freed := exchange(20)
	d.stop(t)
	t.Logf("IPv6 over edt: round trips min/median without sanqos %v/%v, held at %v %v/%v, freed %v/%v; %d replies held",
		base[0], base[len(base)/2], hold, held[0], held[len(held)/2], freed[0], freed[len(freed)/2], s1.Held-s0.Held)

	var errs []error
	if held[0] < hold {
		errs = append(errs, errors.New("an exchange came back sooner than the delay: the IPv6 reply was not held"))
	}
	if s1.Held-s0.Held < uint64(len(held)) {
		errs = append(errs, errors.New("the daemon counted fewer held packets than there were held exchanges"))
	}
	if freed[len(freed)/2] >= hold {
		errs = append(errs, errors.New("freed, the median exchange still waited the delay"))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

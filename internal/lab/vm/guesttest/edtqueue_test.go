package guesttest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/lab/datapath"
)

// TestEDTHoldsACKsWithoutDropping: fq holds a bulk writer's pure ACKs
// for the whole write delay, and no socket buffer bounds how many: at
// 100 ms a writer with a few hundred segments in flight has hundreds
// of ACKs held in its one flow. With sanqos's limits (edt.FqLimit) fq
// drops none of them; the control, the same upload under fq's own
// limits (100 packets a flow), shows the test can fail. The read-back
// then finds the changed limits and puts ours back.
func TestEDTHoldsACKsWithoutDropping(t *testing.T) {
	inGuest(t)
	dpSetup(t)
	ns := "/run/netns/" + datapath.TargetNS
	t.Cleanup(func() { edt.Cleanup(ns, dpTargetDev) })
	e, err := edt.New(ns, dpTargetDev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Attach(); err != nil {
		t.Fatal(err)
	}
	const hold = 100 * time.Millisecond
	client := netip.MustParseAddr(datapath.ClientIP)
	// No ramp: the delay holds from the first ACK.
	if err := e.SetEntry(client, dpPort, edt.Entry{Split: iscsiSplit, Dir: edt.Write, Delay: hold}, time.Hour); err != nil {
		t.Fatal(err)
	}
	startSink(t)
	ours := upload(t, e, 3*time.Second, hold)
	fmt.Fprintf(os.Stderr, "edt queue: ours (limit %d, flow_limit %d): %s\n", edt.FqLimit, edt.FqFlowLimit, ours)
	if ours.dropped != 0 {
		t.Errorf("fq with sanqos's limits dropped %d packets of a writer held %v (%s)", ours.dropped, hold, ours)
	}
	// fq's own statistics, decoded from its dump: it held flows for
	// their departure times and its timer released them late by a
	// fraction of the hold (the emulator's timers are coarse, so no more
	// is asserted than under the hold).
	q, err := e.Queue()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "edt queue: fq throttled flows %d times, released them %v late on average, %d dropped over the flow limit, %d capped at the horizon\n", q.Throttled, q.Late, q.FlowLimitDrops, q.HorizonCaps)
	if q.Throttled == 0 || q.Late <= 0 || q.Late >= hold || q.FlowLimitDrops != 0 {
		t.Errorf("fq's statistics %+v: want flows throttled, a lateness between 0 and %v, nothing over the flow limit", q, hold)
	}

	tc := []string{"ip", "netns", "exec", datapath.TargetNS, "tc", "qdisc", "change", "dev", dpTargetDev, "root", "handle", "5e:", "fq", "limit", "10000", "flow_limit", "100"}
	if out, err := exec.Command(tc[0], tc[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(tc, " "), err, out)
	}
	ctl := upload(t, e, 3*time.Second, hold)
	fmt.Fprintf(os.Stderr, "edt queue: fq's defaults (limit 10000, flow_limit 100): %s\n", ctl)
	if q, err := e.Queue(); err != nil || q.FlowLimitDrops < ctl.dropped {
		t.Errorf("fq's statistics under its own limits: %+v %v, want the %d drops counted over the flow limit", q, err, ctl.dropped)
	}
	drifts, err := e.Verify(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(drifts) != 1 || !strings.Contains(drifts[0].Found, "flow_limit 100 ") || !strings.Contains(drifts[0].Want, fmt.Sprintf("flow_limit %d ", edt.FqFlowLimit)) {
		t.Errorf("read-back after fq's limits changed: %+v, want the one drift of the limits", drifts)
	}
	if d, err := e.Verify(false); err != nil || len(d) != 0 {
		t.Errorf("read-back after the repair: %+v %v, want our limits back", d, err)
	}
	if ctl.dropped == 0 {
		t.Skipf("fq's own limits dropped nothing either (%s): the upload did not hold over 100 ACKs in its flow, so this run cannot tell our limits from fq's", ctl)
	}
}

// sink accepts connections on the target's port and reads them to the end.
type sink struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startSink(t *testing.T) {
	t.Helper()
	s := &sink{}
	err := datapath.InNS(datapath.TargetNS, func() (err error) {
		s.ln, err = net.Listen("tcp4", net.JoinHostPort(datapath.TargetIP, strconv.Itoa(dpPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { s.ln.Close(); s.wg.Wait() })
}

// uploadResult is one upload: what it sent, what fq dropped meanwhile,
// the most packets fq held at once, and the writer's retransmissions.
type uploadResult struct {
	bytes      int64
	dropped    uint64
	maxBacklog int
	retrans    uint32
}

func (r uploadResult) String() string {
	return fmt.Sprintf("%.1f MB sent, fq held up to %d packets, dropped %d, the writer retransmitted %d segments",
		float64(r.bytes)/1e6, r.maxBacklog, r.dropped, r.retrans)
}

// upload writes to the sink from the client namespace for d, its ACKs
// held hold, sampling fq's backlog every 20 ms.
func upload(t *testing.T, e *edt.EDT, d, hold time.Duration) uploadResult {
	t.Helper()
	q0, err := e.Queue()
	if err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	err = datapath.InNS(datapath.ClientNS, func() (err error) {
		c, err = net.Dial("tcp4", net.JoinHostPort(datapath.TargetIP, strconv.Itoa(dpPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var r uploadResult
	done := make(chan struct{})
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if q, err := e.Queue(); err == nil {
					r.maxBacklog = max(r.maxBacklog, q.Packets)
				}
			}
		}
	}()
	buf := make([]byte, 64<<10)
	c.SetWriteDeadline(time.Now().Add(d))
	for {
		n, err := c.Write(buf)
		r.bytes += int64(n)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("upload: %v", err)
			}
			break
		}
	}
	close(done)
	pw.Wait()
	if info, err := datapath.TCPInfo(c); err == nil {
		r.retrans = info.Total_retrans
	}
	// The last ACKs leave one delay later; their drops count too.
	time.Sleep(2 * hold)
	q1, err := e.Queue()
	if err != nil {
		t.Fatal(err)
	}
	r.dropped = q1.Dropped - q0.Dropped
	return r
}

package guesttest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm"
)

// The measurement's shape, kept to a few minutes of emulated guest time.
const (
	dpWarm   = 40  // exchanges before the timed ones: nfqueue's rise limit ramps a flow's delay up over about 25 RTT samples
	dpPings  = 200 // timed exchanges per delay per arm
	dpBulk   = 3 * time.Second
	dpRounds = 4
)

// dpHolds are the write delays the ping-pong is held at; dpReadDelay is
// the bulk flow's read delay.
var (
	dpHolds     = []time.Duration{time.Millisecond, 5 * time.Millisecond}
	dpReadDelay = time.Millisecond
)

// dpArms collects every arm's raw measurements per backend ("none" is
// no sanqos at all).
type dpArms struct {
	rtt  map[string]map[time.Duration][]time.Duration // backend, hold: round trips
	bulk map[string][]dpBulkArm
	own  map[string]dpStats // the backend's counters at the end of its last arm
}

// dpBulkArm is one bulk flow with what the backend counted meanwhile.
type dpBulkArm struct {
	bulkResult
	held, bypassed, drops uint64
}

// TestDatapathCost (issue 35) measures each delay backend's data path
// side by side with no sanqos, in one guest, over veth between two
// network namespaces, in interleaved rounds (each round runs every
// backend once, the order rotated):
//
//   - hold error: a TCP ping-pong of small requests and replies whose
//     replies the backend holds D (write direction): per exchange, its
//     round trip minus the median round trip without sanqos minus D.
//   - cost per delayed packet: a bulk flow from the target to the client
//     whose every data segment the backend holds 1 ms (read direction),
//     against the guest's busy CPU time (and the daemon's own).
//
// It prints a table of every number and the two criteria as
// measured, and asserts only what emulation cannot blur: every packet of
// the bulk flow was delayed, no exchange came back sooner than its delay
// and the median hold error is not negative (nothing left early), and
// the ping-pong retransmitted nothing. The guest runs under qemu's TCG:
// its absolute figures are an emulator's, its ratios are what to read.
//
// SANQOS_DATAPATH_BACKENDS (default none,nfqueue,edt) and
// SANQOS_DATAPATH_BIN (default the guest's sanqos) let it run elsewhere,
// e.g. nfqueue on a host whose kernel has no fq.
func TestDatapathCost(t *testing.T) {
	inGuest(t)
	backends := []string{"none", "nfqueue", "edt"}
	if s := os.Getenv("SANQOS_DATAPATH_BACKENDS"); s != "" {
		backends = strings.Split(s, ",")
		if !slices.Contains(backends, "none") {
			t.Fatalf("SANQOS_DATAPATH_BACKENDS=%q: the list needs none, the baseline", s)
		}
	}
	bin := vm.GuestBin
	if s := os.Getenv("SANQOS_DATAPATH_BIN"); s != "" {
		bin = s
	}
	dpSetup(t)
	srv := startServer(t)
	a := &dpArms{rtt: map[string]map[time.Duration][]time.Duration{}, bulk: map[string][]dpBulkArm{},
		own: map[string]dpStats{}}
	start := time.Now()
	for r := range dpRounds {
		for i := range backends {
			b := backends[(i+r)%len(backends)]
			a.arm(t, srv, bin, b)
		}
	}
	fmt.Fprintf(os.Stderr, "datapath: %d rounds of %s took %v (guest clock)\n", dpRounds, strings.Join(backends, ", "),
		time.Since(start).Round(time.Second))
	a.report(t, backends)
}

// arm runs one backend's ping-pongs and bulk flow with a daemon of its
// own, or none.
func (a *dpArms) arm(t *testing.T, srv *dpServer, bin, backend string) {
	t.Helper()
	var d *dpDaemon
	if backend != "none" {
		d = startDaemon(t, bin, backend)
	}
	if a.rtt[backend] == nil {
		a.rtt[backend] = map[time.Duration][]time.Duration{}
	}
	for _, hold := range dpHolds {
		if d != nil {
			d.throttle(t, "--ip", dpClientIP, "--delay", hold.String(), "--direction", "write")
		}
		s0 := d.stats(t)
		rtt, retrans := pingPong(t, srv, dpWarm, dpPings)
		s1 := d.stats(t)
		if retrans != 0 {
			t.Errorf("%s at %v: the ping-pong retransmitted %d segments", backend, hold, retrans)
		}
		if d != nil && s1.held-s0.held < dpPings {
			t.Errorf("%s at %v: %d packets delayed during %d held exchanges: not every reply was held", backend, hold, s1.held-s0.held, dpPings+dpWarm)
		}
		a.rtt[backend][hold] = append(a.rtt[backend][hold], rtt...)
	}
	pid := 0
	if d != nil {
		d.throttle(t, "--ip", dpClientIP, "--delay", dpReadDelay.String(), "--direction", "read")
		pid = d.cmd.Process.Pid
	}
	s0, q0 := d.stats(t), d.drops(t, backend)
	res := bulkFlow(t, srv, dpBulk, pid)
	s1, q1 := d.stats(t), d.drops(t, backend)
	arm := dpBulkArm{bulkResult: res, held: s1.held - s0.held, bypassed: s1.bypassed - s0.bypassed, drops: q1 - q0}
	a.bulk[backend] = append(a.bulk[backend], arm)
	a.own[backend] = s1
	// Every data segment is held, give or take a few in a thousand: edt
	// has counted a handful fewer than the sender's data segments in an
	// arm (which ones is not known yet), nfqueue none.
	if slack := max(4, uint64(res.segs)/1000); d != nil && (arm.held+slack < uint64(res.segs) || arm.held > uint64(res.segs)+slack) {
		t.Errorf("%s: %d packets delayed of the bulk flow's %d data segments (%d bypassed): not every packet of the flow was delayed",
			backend, arm.held, res.segs, arm.bypassed)
	}
	d.stop(t)
}

// dpQuantile is the q-quantile of sorted xs (nearest rank).
func dpQuantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// holdErrors are each exchange's round trip minus base minus hold, sorted.
func holdErrors(rtt []time.Duration, base, hold time.Duration) []time.Duration {
	e := make([]time.Duration, len(rtt))
	for i, r := range rtt {
		e[i] = r - base - hold
	}
	slices.Sort(e)
	return e
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) }

// report prints the tables and the criteria, and asserts the hold floor.
func (a *dpArms) report(t *testing.T, backends []string) {
	t.Helper()
	var none []time.Duration
	for _, r := range a.rtt["none"] {
		none = append(none, r...)
	}
	slices.Sort(none)
	base := dpQuantile(none, 0.5)
	var out strings.Builder
	fmt.Fprintf(&out, "datapath: hold error per exchange = RTT - median RTT without sanqos (%s us) - D; %d exchanges per cell over %d rounds\n",
		us(base), dpPings*dpRounds, dpRounds)
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tD\tmin RTT us\tp50 us\tp99 us\tmax us\t")
	p99 := map[string]map[time.Duration]time.Duration{}
	for _, b := range backends {
		p99[b] = map[time.Duration]time.Duration{}
		if b == "none" {
			e := holdErrors(none, base, 0)
			fmt.Fprintf(tw, "none\t0\t%s\t%s\t%s\t%s\t\n", us(e[0]+base), us(dpQuantile(e, 0.5)), us(dpQuantile(e, 0.99)), us(e[len(e)-1]))
			continue
		}
		for _, hold := range dpHolds {
			d := hold
			e := holdErrors(a.rtt[b][hold], base, d)
			p50 := dpQuantile(e, 0.5)
			p99[b][hold] = dpQuantile(e, 0.99)
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t\n", b, d, us(e[0]+base+d), us(p50), us(p99[b][hold]), us(e[len(e)-1]))
			if e[0]+base < 0 {
				t.Errorf("%s at %v: an exchange came back in %v, sooner than the delay", b, hold, e[0]+base+d)
			}
			if p50 < 0 {
				t.Errorf("%s at %v: median hold error %v: replies left early", b, hold, p50)
			}
		}
	}
	tw.Flush()
	pps := a.reportBulk(&out, backends)
	a.reportCriteria(&out, backends, pps, p99)
	fmt.Fprint(os.Stderr, out.String())
}

// dpCost is one backend's bulk flows summed over its arms.
type dpCost struct {
	pkts                    uint64        // packets delayed (none: data segments sent)
	cpu, own, wall          time.Duration // guest busy CPU, the daemon's own, elapsed
	nsLo, nsHi              float64       // the lowest and highest arm's CPU ns per packet
	bytes                   int64
	segs, retrans, bypassed uint64
	drops                   uint64 // the backend's kernel queue's
}

func (c dpCost) ns() float64      { return float64(c.cpu) / float64(c.pkts) }
func (c dpCost) perCore() float64 { return float64(c.pkts) / c.cpu.Seconds() }

func (a *dpArms) costs(b string) dpCost {
	c := dpCost{nsLo: 1e18}
	for _, arm := range a.bulk[b] {
		pkts := arm.held
		if b == "none" {
			pkts = uint64(arm.segs)
		}
		c.pkts += pkts
		c.cpu += arm.cpu
		c.own += arm.procCPU
		c.wall += arm.wall
		c.bytes += arm.bytes
		c.segs += uint64(arm.segs)
		c.retrans += uint64(arm.retrans)
		c.bypassed += arm.bypassed
		c.drops += arm.drops
		ns := float64(arm.cpu) / float64(max(pkts, 1))
		c.nsLo, c.nsHi = min(c.nsLo, ns), max(c.nsHi, ns)
	}
	return c
}

// reportBulk prints the bulk flows' costs per backend.
func (a *dpArms) reportBulk(out *strings.Builder, backends []string) map[string]dpCost {
	fmt.Fprintf(out, "datapath: bulk flow target -> client, every data segment delayed %v (read direction), %v per arm, one MSS per packet; CPU = all CPUs' user+nice+system+irq+softirq from /proc/stat\n",
		dpReadDelay, dpBulk)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tarms\tpackets\tsegments sent\tMB/s\tpkt/s\tCPU busy\tpkt/s per core\tns CPU/pkt\t(arms)\tns over none\tdaemon ns/pkt\tretrans\tbypassed\tdropped\t")
	c := map[string]dpCost{}
	for _, b := range backends {
		c[b] = a.costs(b)
	}
	for _, b := range backends {
		x := c[b]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.0f\t%.0f%%\t%.0f\t%.0f\t%.0f-%.0f\t%+.0f\t%.0f\t%d\t%d\t%d\t\n", b, len(a.bulk[b]), x.pkts, x.segs,
			float64(x.bytes)/x.wall.Seconds()/1e6, float64(x.pkts)/x.wall.Seconds(), 100*x.cpu.Seconds()/x.wall.Seconds(),
			x.perCore(), x.ns(), x.nsLo, x.nsHi, x.ns()-c["none"].ns(), float64(x.own)/float64(x.pkts), x.retrans, x.bypassed, x.drops)
	}
	tw.Flush()
	for _, b := range backends {
		if o, ok := a.own[b]; ok && b == "nfqueue" {
			fmt.Fprintf(out, "datapath: nfqueue's own delay error over its last arm (how late it let packets leave): p50 %s max %s\n", o.errP50, o.errMax)
		}
	}
	return c
}

// reportCriteria prints issue 35's two criteria as measured.
func (a *dpArms) reportCriteria(out *strings.Builder, backends []string, c map[string]dpCost, p99 map[string]map[time.Duration]time.Duration) {
	if !slices.Contains(backends, "edt") || !slices.Contains(backends, "nfqueue") {
		return
	}
	verdict := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "not met"
	}
	e, n, z := c["edt"], c["nfqueue"], c["none"]
	ratio := e.perCore() / n.perCore()
	fmt.Fprintf(out, "datapath: edt/nfqueue packets/s per core %.2f (edt %.0f, nfqueue %.0f; none %.0f)", ratio, e.perCore(), n.perCore(), z.perCore())
	if oe, on := e.ns()-z.ns(), n.ns()-z.ns(); oe > 0 && on > 0 {
		fmt.Fprintf(out, "; on the CPU over none per delayed packet (edt %.0f ns, nfqueue %.0f ns) %.2f", oe, on, on/oe)
	} else {
		fmt.Fprintf(out, "; CPU over none per delayed packet edt %+.0f ns, nfqueue %+.0f ns (none's arms span %.0f-%.0f ns)", oe, on, z.nsLo, z.nsHi)
	}
	fmt.Fprintf(out, "\ndatapath: criterion edt >= 10x nfqueue packets/s per core: %s (emulated guest, TCG: a ratio; the guest's one CPU bounds every arm's flow, the baseline's too, so it cannot exceed by much none/nfqueue = %.2f)\n",
		verdict(ratio >= 10), z.perCore()/n.perCore())
	worst := time.Duration(0)
	var at []string
	for _, hold := range dpHolds {
		worst = max(worst, p99["edt"][hold])
		at = append(at, fmt.Sprintf("%s us at %v", us(p99["edt"][hold]), hold))
	}
	fmt.Fprintf(out, "datapath: criterion edt hold error p99 <= 100 us: %s (%s; the guest clock under TCG emulation)\n",
		verdict(worst <= 100*time.Microsecond), strings.Join(at, ", "))
}

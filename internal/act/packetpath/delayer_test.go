package packetpath

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

type releaseLog struct {
	mu  sync.Mutex
	ids []uint32
}

func (l *releaseLog) add(ids []uint32) {
	l.mu.Lock()
	l.ids = append(l.ids, ids...)
	l.mu.Unlock()
}

var t0 = time.Unix(1000, 0)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func flow(port uint16) FlowKey { return FlowKey{Dst: ip("10.0.0.2"), Sport: 3260, Dport: port} }

// TestDelayerLoweringDelayKeepsFlowOrder: after the delay drops from 20 ms
// to 0, new packets of the flow wait behind the held ones instead of
// overtaking them; another flow is not held up.
func TestDelayerLoweringDelayKeepsFlowOrder(t *testing.T) {
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 100, log.add)
	d.Rise = RiseLimit{} // release mechanics only: full delays at once
	now := t0
	for id := uint32(1); id <= 3; id++ {
		if d.Submit(id, flow(1), direction.Write, id, 20*time.Millisecond, now) {
			t.Fatalf("packet %d accepted at once under 20ms delay", id)
		}
		now = now.Add(time.Millisecond)
	}
	if d.Submit(4, flow(1), direction.Write, 4, 0, now) {
		t.Fatal("packet 4 (delay now 0) was accepted at once and would overtake 1-3")
	}
	if !d.Submit(5, flow(2), direction.Write, 5, 0, now) {
		t.Fatal("an undelayed packet of another flow was held")
	}
	if n := d.ReleaseDue(t0.Add(19 * time.Millisecond)); n != 0 {
		t.Fatalf("released %d packets before their time", n)
	}
	d.ReleaseDue(t0.Add(22 * time.Millisecond))
	if want := []uint32{1, 2, 3, 4}; !slices.Equal(log.ids, want) {
		t.Fatalf("released %v, want %v in order", log.ids, want)
	}
	if !d.Submit(6, flow(1), direction.Write, 6, 0, now) {
		t.Fatal("flow drained but its undelayed packet was still held")
	}
}

// TestDelayerReleaseTimes: each packet leaves at arrival + its delay.
func TestDelayerReleaseTimes(t *testing.T) {
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 100, log.add)
	d.Rise = RiseLimit{} // release mechanics only: full delays at once
	d.Submit(1, flow(1), direction.Write, 1, 5*time.Millisecond, t0)
	d.Submit(2, flow(2), direction.Write, 2, 1*time.Millisecond, t0)
	d.Submit(3, flow(3), direction.Write, 3, 3*time.Millisecond, t0)
	for _, c := range []struct {
		at   time.Duration
		want []uint32
	}{{999 * time.Microsecond, nil}, {time.Millisecond, []uint32{2}}, {3 * time.Millisecond, []uint32{2, 3}}, {5 * time.Millisecond, []uint32{2, 3, 1}}} {
		d.ReleaseDue(t0.Add(c.at))
		if !slices.Equal(log.ids, c.want) {
			t.Fatalf("at %v released %v, want %v", c.at, log.ids, c.want)
		}
	}
}

// TestDelayerBacklogFailsOpen: beyond the backlog limit packets pass.
func TestDelayerBacklogFailsOpen(t *testing.T) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 2, func([]uint32) {})
	d.Submit(1, flow(1), direction.Write, 1, time.Millisecond, t0)
	d.Submit(2, flow(2), direction.Write, 2, time.Millisecond, t0)
	if !d.Submit(3, flow(3), direction.Write, 3, time.Millisecond, t0) {
		t.Fatal("packet over the backlog limit was held")
	}
	if s := d.Stats(); s.Bypassed != 1 || s.Backlog != 2 || s.PacketsHeld != 2 {
		t.Fatalf("stats %+v, want 1 bypassed, backlog 2, 2 held", s)
	}
}

// TestDelayerNextAndReleaseAll: next names the earliest release time
// (what the packet thread waits for), nothing is released before it, and
// releaseAll lets everything go at once, in release order (fail open on
// exit).
func TestDelayerNextAndReleaseAll(t *testing.T) {
	var log releaseLog
	d := NewDelayer(clock.NewFake(t0), 100, log.add)
	d.Rise = RiseLimit{} // release mechanics only: full delays at once
	if _, ok := d.Next(); ok {
		t.Fatal("empty delayer has a next release")
	}
	d.Submit(1, flow(1), direction.Write, 1, 50*time.Millisecond, t0)
	d.Submit(2, flow(2), direction.Write, 2, 2*time.Millisecond, t0)
	if at, ok := d.Next(); !ok || !at.Equal(t0.Add(2*time.Millisecond)) {
		t.Fatalf("next %v %v, want t0+2ms", at, ok)
	}
	if n := d.ReleaseDue(t0.Add(time.Millisecond)); n != 0 {
		t.Fatalf("released %d before the first release time", n)
	}
	if n := d.ReleaseDue(t0.Add(2 * time.Millisecond)); n != 1 || !slices.Equal(log.ids, []uint32{2}) {
		t.Fatalf("at 2ms released %d: %v, want packet 2", n, log.ids)
	}
	d.Submit(3, flow(1), direction.Write, 3, time.Millisecond, t0.Add(3*time.Millisecond)) // behind packet 1
	if n := d.ReleaseAll(); n != 2 || !slices.Equal(log.ids, []uint32{2, 1, 3}) {
		t.Fatalf("releaseAll released %d, log %v; want [2 1 3]", n, log.ids)
	}
	if _, ok := d.Next(); ok {
		t.Fatal("after releaseAll the delayer still holds packets")
	}
}

func TestParseIPv4TCP(t *testing.T) {
	for _, c := range []struct {
		name    string
		pkt     []byte
		total   int
		payload int
		ok      bool
	}{
		{"pure ack", acttest.TCPPacket(0, 3260, 40000), 0, 0, true},
		{"r2t", acttest.TCPPacket(48, 3260, 40000), 0, 48, true},
		{"gso super-packet, truncated copy", acttest.TCPPacket(0, 3260, 40000), 20 + 32 + 65000, 65000, true},
		{"udp", func() []byte { p := acttest.TCPPacket(0, 1, 2); p[9] = 17; return p }(), 0, 0, false},
		{"ipv6", func() []byte { p := acttest.TCPPacket(0, 1, 2); p[0] = 0x60; return p }(), 0, 0, false},
		{"short", acttest.TCPPacket(0, 1, 2)[:30], 0, 0, false},
	} {
		p, ok := parseIPv4TCP(c.pkt, c.total)
		if ok != c.ok || (ok && (p.Payload != c.payload || p.Flow != flow(40000))) {
			t.Errorf("%s: got %+v %v, want payload %d ok %v", c.name, p, ok, c.payload, c.ok)
		}
	}
}

// BenchmarkDelayer measures the delayer's capacity on one core: each
// iteration holds one packet and releases it.
func BenchmarkDelayer(b *testing.B) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 1<<20, func([]uint32) {})
	now := t0
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Microsecond)
		d.Submit(uint32(i), FlowKey{Dst: ip("10.0.0.2"), Sport: 3260, Dport: uint16(i % 64)}, direction.Write, uint32(i), time.Millisecond, now)
		if i%64 == 0 {
			d.ReleaseDue(now)
		}
	}
	d.ReleaseDue(now.Add(time.Second))
}

// pto is Linux's tail loss probe timeout for a flow with more than one
// segment in flight: 2·SRTT + 2 ms (tcp_schedule_loss_probe).
func pto(srtt time.Duration) time.Duration { return 2*srtt + 2*time.Millisecond }

// simulateRise feeds a flow whose requested delay follows steps (each
// held for perStep packets) through r, every packet being one RTT sample
// of the sender's SRTT (srtt ← 7/8·srtt + 1/8·sample, the first sample
// taken whole), with a base RTT of 0: the pessimistic case. It returns
// the largest excess of an applied delay over the PTO the sender had
// armed when that packet left (> 0: a loss probe), and the packets
// delayed less than requested.
func simulateRise(r RiseLimit, steps []time.Duration, perStep int) (worst time.Duration, limited int) {
	var srtt, prev time.Duration
	worst = -time.Hour
	for i, want := range steps {
		n := perStep
		if i == 0 {
			// Start in steady state at the first delay.
			srtt, prev, n = want, want, 0
		}
		for range n {
			d := r.Next(prev, want)
			if d < want {
				limited++
			}
			if srtt > 0 || d > 0 {
				worst = max(worst, d-pto(srtt))
			}
			if srtt == 0 {
				srtt = d
			} else {
				srtt = srtt*7/8 + d/8
			}
			prev = d
		}
	}
	return worst, limited
}

// riseScenarios are step changes of the write delay like the
// controller's, plus long ones that expose the asymptotic behaviour.
var riseScenarios = func() [][]time.Duration {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	return [][]time.Duration{
		ms(0, 5), ms(0, 20), ms(2, 15), ms(5, 20), ms(0, 1), ms(0, 2.5),
		ms(0, 100), ms(0, 1000), ms(1, 500),
		ms(0, 5, 2, 12, 6, 15, 3, 20, 8, 0, 4, 10, 1, 18, 7, 14, 0, 9, 16, 5),
	}
}()

// riseSafe reports whether r keeps every packet of every scenario under
// the PTO, at 1 to 400 packets per controller step.
func riseSafe(r RiseLimit) (bool, time.Duration) {
	worst := -time.Hour
	for _, sc := range riseScenarios {
		for _, per := range []int{1, 3, 25, 400} {
			w, _ := simulateRise(r, sc, per)
			worst = max(worst, w)
		}
	}
	return worst < 0, worst
}

// TestRiseLimitKeepsPTOAboveDelay runs the sender's SRTT recurrence over
// step changes of the delay and checks that with the default rise limit
// no packet arrives after the loss probe timeout, that without it they
// do, and where the limit of each parameter lies (logged, and checked
// against the derivation in RiseLimit's comment).
func TestRiseLimitKeepsPTOAboveDelay(t *testing.T) {
	ok, worst := riseSafe(DefaultRiseLimit)
	if !ok {
		t.Fatalf("default rise limit %+v: a packet is %v past the PTO", DefaultRiseLimit, worst)
	}
	t.Logf("default %+v: closest packet %v before the PTO", DefaultRiseLimit, -worst)
	if ok, worst := riseSafe(RiseLimit{}); ok {
		t.Fatalf("without a rise limit every packet stays under the PTO (worst %v): the scenarios prove nothing", worst)
	}
	for _, sc := range riseScenarios[:4] {
		w, lim := simulateRise(DefaultRiseLimit, sc, 400)
		w0, _ := simulateRise(RiseLimit{}, sc, 400)
		t.Logf("step %v → %v: with limit %d packets ramped, worst %v vs PTO; without, worst %v past it", sc[0], sc[1], lim, w, w0)
	}

	// Largest safe factor with the default step, and largest safe step
	// with the default factor.
	gmax := 0.0
	for g := 0.005; g < 1; g += 0.005 {
		if ok, _ := riseSafe(RiseLimit{Factor: g, Step: DefaultRiseLimit.Step}); !ok {
			break
		}
		gmax = g
	}
	var cmax time.Duration
	for c := 10 * time.Microsecond; c < 10*time.Millisecond; c += 10 * time.Microsecond {
		if ok, _ := riseSafe(RiseLimit{Factor: DefaultRiseLimit.Factor, Step: c}); !ok {
			break
		}
		cmax = c
	}
	t.Logf("largest safe factor with step %v: %.3f; largest safe step with factor %.2f: %v",
		DefaultRiseLimit.Step, gmax, DefaultRiseLimit.Factor, cmax)
	// The derivation: on a long geometric ramp srtt (after a sample) tends
	// to r·sample with r = (1/8)/(1 − (7/8)/(1+g)); the PTO a packet meets
	// was armed with the srtt before its own sample, r·sample/(1+g), so
	// the ramp is safe while 2r/(1+g) = 1/(4g + 1/2) > 1, i.e. g < 1/8.
	gtiny := 0.0
	for g := 0.005; g < 1; g += 0.005 {
		if ok, _ := riseSafe(RiseLimit{Factor: g, Step: time.Microsecond}); !ok {
			break
		}
		gtiny = g
	}
	t.Logf("largest safe factor with a 1µs step: %.3f (asymptotic bound 1/8)", gtiny)
	if gtiny > 0.13 || gtiny < 0.115 || gmax > gtiny {
		t.Errorf("largest safe factors %.3f (step 1µs), %.3f (default step): the derivation says just under 1/8, and no more with a larger step", gtiny, gmax)
	}
	if gmax < 1.2*DefaultRiseLimit.Factor || cmax < 2*DefaultRiseLimit.Step {
		t.Errorf("default %+v has too little margin: largest safe factor %.3f, step %v", DefaultRiseLimit, gmax, cmax)
	}
}

// TestRiseLimitRamp: a flow's delay rises by the limit per packet and
// falls at once; flows, and directions of a flow, ramp on their own; an
// idle flow keeps its delay, one idle past RiseForget starts over.
func TestRiseLimitRamp(t *testing.T) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 1000, func([]uint32) {})
	const want = 10 * time.Millisecond
	now := t0
	var applied []time.Duration
	at := func(id uint32, f FlowKey, dir direction.Direction, delay time.Duration) time.Duration {
		d.Submit(id, f, dir, id, delay, now)
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.rise[riseKey{f, dir}].prev
	}
	id := uint32(0)
	for len(applied) == 0 || applied[len(applied)-1] < want {
		id++
		applied = append(applied, at(id, flow(1), direction.Write, want))
		now = now.Add(100 * time.Microsecond)
		if len(applied) > 100 {
			t.Fatalf("delay still %v after 100 packets", applied[len(applied)-1])
		}
	}
	if applied[0] != DefaultRiseLimit.Step {
		t.Errorf("first packet of a new flow got %v, want %v", applied[0], DefaultRiseLimit.Step)
	}
	for i := 1; i < len(applied); i++ {
		p, g := applied[i-1], applied[i]
		if lim := max(p+time.Duration(float64(p)*DefaultRiseLimit.Factor), p+DefaultRiseLimit.Step); g > lim || g <= p {
			t.Fatalf("packet %d: %v after %v, want a rise of at most %v", i, g, p, lim-p)
		}
	}
	t.Logf("0 → %v in %d packets", want, len(applied))
	if n := len(applied); n < 20 || n > 30 {
		t.Errorf("0 → %v took %d packets, want about 25", want, n)
	}
	// A packet that acknowledges nothing new (a SCSI Response after the
	// ACK of its data, a window update) gives the sender no RTT sample:
	// the delay does not rise with it.
	d.Rise = RiseLimit{Factor: 0.1, Step: time.Millisecond}
	id++
	lastAck := id
	ramped := at(id, flow(4), direction.Write, want)
	for range 3 {
		d.Submit(id+1000, flow(4), direction.Write, lastAck, want, now)
		d.mu.Lock()
		got := d.rise[riseKey{flow(4), direction.Write}].prev
		d.mu.Unlock()
		if got != ramped {
			t.Fatalf("a packet repeating ack %d moved the delay from %v to %v", lastAck, ramped, got)
		}
	}
	// Read direction: a step every second data packet, as the initiator
	// acknowledges at least every second segment.
	var reads []time.Duration
	for range 4 {
		id++
		reads = append(reads, at(id, flow(5), direction.Read, want))
	}
	if ms := time.Millisecond; !slices.Equal(reads, []time.Duration{ms, ms, 2 * ms, 2 * ms}) {
		t.Errorf("read direction ramped %v, want a 1ms step every second packet", reads)
	}
	d.Rise = DefaultRiseLimit
	// The other direction and another flow start from 0.
	id++
	if got := at(id, flow(1), direction.Read, want); got != DefaultRiseLimit.Step {
		t.Errorf("read direction of the ramped flow got %v, want %v", got, DefaultRiseLimit.Step)
	}
	id++
	if got := at(id, flow(2), direction.Write, want); got != DefaultRiseLimit.Step {
		t.Errorf("new flow got %v, want %v", got, DefaultRiseLimit.Step)
	}
	// Falls at once.
	id++
	if got := at(id, flow(1), direction.Write, 2*time.Millisecond); got != 2*time.Millisecond {
		t.Errorf("lowered to 2ms, applied %v", got)
	}
	// Idle 5 s: carries on from 2 ms.
	now = now.Add(5 * time.Second)
	id++
	if got, next := at(id, flow(1), direction.Write, want), DefaultRiseLimit.Next(2*time.Millisecond, want); got != next {
		t.Errorf("after 5 s idle: %v, want the ramp to carry on from 2ms to %v", got, next)
	}
	// Idle past RiseForget: forgotten, starts from 0.
	now = now.Add(RiseForget + time.Second)
	id++
	if got := at(id, flow(1), direction.Write, want); got != DefaultRiseLimit.Step {
		t.Errorf("after %v idle: %v, want a new ramp from 0", RiseForget, got)
	}
	if s := d.RiseStats(); s.Limited == 0 || s.ShortfallMax < want-DefaultRiseLimit.Step || s.Flows == 0 {
		t.Errorf("rise stats %+v: want limited packets and a shortfall up to %v", s, want-DefaultRiseLimit.Step)
	}
	// Forget drops the flows of destinations that left.
	d.Forget(func(netip.Addr) bool { return false })
	if s := d.RiseStats(); s.Flows != 0 {
		t.Errorf("after Forget %d flows remembered", s.Flows)
	}
	// Delay 0 leaves nothing behind.
	id++
	at(id, flow(3), direction.Write, 0)
	if s := d.RiseStats(); s.Flows != 0 {
		t.Errorf("an undelayed flow is remembered: %+v", s)
	}
}

// TestRiseLimitReleaseTime: the ramped delay is what the packet is held,
// and a lowered delay does not let a packet overtake its flow.
func TestRiseLimitReleaseTime(t *testing.T) {
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 100, log.add)
	d.Submit(1, flow(1), direction.Write, 1, 20*time.Millisecond, t0) // gets Step
	d.Submit(2, flow(1), direction.Write, 2, 0, t0)                   // lowered: waits behind 1
	if n := d.ReleaseDue(t0.Add(DefaultRiseLimit.Step - time.Microsecond)); n != 0 {
		t.Fatalf("released %d before the ramped delay", n)
	}
	d.ReleaseDue(t0.Add(DefaultRiseLimit.Step))
	if !slices.Equal(log.ids, []uint32{1, 2}) {
		t.Fatalf("released %v at the ramped delay, want [1 2]", log.ids)
	}
}

// TestPureAckClassification: only zero-payload segments without SYN, FIN
// or RST are pure ACKs; those flags occupy sequence space or end the
// connection, so such segments stay in order with data.
func TestPureAckClassification(t *testing.T) {
	withFlags := func(payload int, flags byte) []byte {
		p := acttest.TCPPacket(payload, 3260, 40000)
		p[20+13] = flags
		return p
	}
	const ack, psh = 0x10, 0x08
	for _, c := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"ack", withFlags(0, ack), true},
		{"ack+psh, no payload", withFlags(0, ack|psh), true},
		{"small segment (scsi response)", withFlags(48, ack|psh), false},
		{"one byte", withFlags(1, ack), false},
		{"syn-ack", withFlags(0, ack|tcpSYN), false},
		{"fin", withFlags(0, ack|tcpFIN), false},
		{"rst", withFlags(0, tcpRST), false},
		{"rst-ack", withFlags(0, ack|tcpRST), false},
	} {
		p, ok := parseIPv4TCP(c.pkt, 0)
		if !ok {
			t.Fatalf("%s: not parsed", c.name)
		}
		if got := p.PureAck(); got != c.want {
			t.Errorf("%s (payload %d, flags %#x): pure ACK %v, want %v", c.name, p.Payload, p.flags, got, c.want)
		}
	}
}

// TestDelayerPureAcksPassUnlessAckDelay: with AckDelay off a pure ACK
// submitted after a held small segment of its flow leaves at once (it
// overtakes it), while data never overtakes data: a second small segment
// still waits behind the first even when its own delay is 0. With
// AckDelay on the pure ACK keeps its place in the flow's FIFO.
func TestDelayerPureAcksPassUnlessAckDelay(t *testing.T) {
	for _, ackDelay := range []bool{false, true} {
		var log releaseLog
		clk := clock.NewFake(t0)
		d := NewDelayer(clk, 100, log.add)
		d.Rise = RiseLimit{} // order only: full delays at once
		d.AckDelay = ackDelay
		const delay = 10 * time.Millisecond
		if d.Submit(1, flow(1), direction.Write, 100, delay, t0) {
			t.Fatalf("AckDelay %v: a small segment under %v was accepted at once", ackDelay, delay)
		}
		now := t0.Add(time.Millisecond)
		acceptedAck := d.SubmitPureAck(2, flow(1), direction.Write, 200, delay, now)
		if acceptedAck == ackDelay {
			t.Errorf("AckDelay %v: pure ACK behind a held small segment accepted at once: %v, want %v", ackDelay, acceptedAck, !ackDelay)
		}
		// Data of the same flow with its delay dropped to 0: it must wait
		// behind packet 1 in either mode.
		if d.Submit(3, flow(1), direction.Write, 300, 0, now.Add(time.Millisecond)) {
			t.Errorf("AckDelay %v: a data segment overtook held data of its flow", ackDelay)
		}
		// A SYN/FIN/RST without payload is not a pure ACK: the caller
		// submits it with Submit, and it keeps its place too.
		if d.Submit(4, flow(1), direction.Write, 300, delay, now.Add(2*time.Millisecond)) {
			t.Errorf("AckDelay %v: a FIN behind held data was accepted at once", ackDelay)
		}
		d.ReleaseDue(t0.Add(time.Second))
		want := []uint32{1, 3, 4}
		if ackDelay {
			want = []uint32{1, 2, 3, 4}
		}
		if !slices.Equal(log.ids, want) {
			t.Errorf("AckDelay %v: released %v, want %v", ackDelay, log.ids, want)
		}
		s := d.Stats()
		wantPassed, wantMode := uint64(1), "passed"
		if ackDelay {
			wantPassed, wantMode = 0, "held"
		}
		if s.AcksPassed != wantPassed || s.PureAcks != wantMode {
			t.Errorf("AckDelay %v: stats %+v, want AcksPassed %d, PureAcks %q", ackDelay, s, wantPassed, wantMode)
		}
	}
}

// TestDelayerPassedAcksLeaveTheRampAlone: with AckDelay off, a pure ACK
// that acknowledges new data passes without being an RTT sample of the
// ramp, so the next held small segment (which then carries the news)
// still is one and raises the flow's delay; were the ACK counted, the
// delay of a synchronous writer's R2T and response would never rise.
func TestDelayerPassedAcksLeaveTheRampAlone(t *testing.T) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 1000, func([]uint32) {})
	const want = 5 * time.Millisecond
	now := t0
	ack := uint32(1)
	var ios int
	for ios = 1; ios <= 200; ios++ {
		ack += 65536
		now = now.Add(time.Millisecond)
		if !d.SubmitPureAck(uint32(3*ios), flow(1), direction.Write, ack, want, now) {
			t.Fatal("a pure ACK was held with AckDelay off")
		}
		// The response acknowledges nothing newer than the ACK before it.
		d.Submit(uint32(3*ios+1), flow(1), direction.Write, ack, want, now)
		d.ReleaseDue(now.Add(time.Second))
		if st := d.rise[riseKey{flow(1), direction.Write}]; st.prev >= want {
			break
		}
	}
	// From 0 to 5 ms: 10 steps of 0.25 ms, then 10 % a step, about 17.
	if ios > 40 {
		t.Fatalf("the response's delay did not reach %v in 200 I/Os (at %v)", want, d.rise[riseKey{flow(1), direction.Write}].prev)
	}
	t.Logf("delay reached %v after %d I/Os", want, ios)
}

// TestDelayerSmallSegmentCarryingNewsPasses: with AckDelay off, a small
// segment that acknowledges more than one segment of data the flow's
// earlier packets had not (the target's delayed ACK riding on a SCSI
// Response) is not delayed; one acknowledging a 48-byte command (an R2T)
// is. With AckDelay on, both are held.
func TestDelayerSmallSegmentCarryingNewsPasses(t *testing.T) {
	for _, ackDelay := range []bool{false, true} {
		clk := clock.NewFake(t0)
		d := NewDelayer(clk, 100, func([]uint32) {})
		d.Rise = RiseLimit{}
		d.AckDelay = ackDelay
		const delay = 5 * time.Millisecond
		now := t0
		d.SubmitPureAck(1, flow(1), direction.Write, 1000, delay, now)
		d.ReleaseDue(now.Add(time.Second))
		// R2T: acknowledges a 48-byte command.
		if d.Submit(2, flow(1), direction.Write, 1048, delay, now) {
			t.Errorf("AckDelay %v: an R2T acknowledging 48 bytes was not held", ackDelay)
		}
		d.ReleaseDue(now.Add(time.Second))
		// Response carrying the ACK of 64 KiB of data.
		accepted := d.Submit(3, flow(1), direction.Write, 1048+65536, delay, now.Add(time.Second))
		if accepted != !ackDelay {
			t.Errorf("AckDelay %v: response acknowledging 64 KiB accepted at once: %v, want %v", ackDelay, accepted, !ackDelay)
		}
		wantNews := uint64(1)
		if ackDelay {
			wantNews = 0
		}
		if s := d.RiseStats(); s.NewsPassed != wantNews {
			t.Errorf("AckDelay %v: rise stats %+v, want NewsPassed %d", ackDelay, s, wantNews)
		}
	}
}

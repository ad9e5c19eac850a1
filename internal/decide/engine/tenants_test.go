package engine

import (
	"math"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// tenantRig is a resource with two readers (loop0, loop4) and three
// closed-loop writers (loop1-3) whose rate the delay each is given sets;
// the readers. reads take 2 ms plus 2 ms per MB/s the writers write,
// so the loop must delay them to hold a threshold.
type tenantRig struct {
	t       *testing.T
	e       *Engine
	d       *disk
	now     time.Time
	w       [3]*closedLoopWriter
	held    [3]float64
	reading [2]bool
	// healthy: the readers' reads take 2 ms whatever the writers do.
	healthy bool
	dec     Decision
	written [3]uint64 // write IOs since the last reset
}

var tenantIPs = [5]netip.Addr{
	netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3"),
	netip.MustParseAddr("10.1.0.4"), netip.MustParseAddr("10.1.0.5"),
}

func newTenantRig(t *testing.T, book *tenant.Book) *tenantRig {
	cfg := DefaultConfig()
	cfg.Tenants = book
	res := topology.Resource{Name: "vg-t", ThresholdMs: 15}
	for i, ip := range tenantIPs {
		res.Consumers = append(res.Consumers, topology.Consumer{Addr: ip, Device: "loop" + string(rune('0'+i))})
	}
	r := &tenantRig{t: t, e: mustEngine(t, cfg, topology.Topology{Resources: []topology.Resource{res}}),
		d: newDisk("loop0", "loop1", "loop2", "loop3", "loop4"), now: time.Unix(1000, 0), reading: [2]bool{true, false}}
	for i := range r.w {
		r.w[i] = &closedLoopWriter{threads: 4, awaitMs: 4}
	}
	r.step()
	return r
}

// step advances one tick.
func (r *tenantRig) step() Decision {
	r.now = r.now.Add(100 * time.Millisecond)
	var mbs float64
	for i, w := range r.w {
		before := r.d.stats["loop"+string(rune('1'+i))].WriteIOs
		w.tick(r.d, "loop"+string(rune('1'+i)), r.held[i])
		n := r.d.stats["loop"+string(rune('1'+i))].WriteIOs - before
		r.written[i] += n
		mbs += float64(n) * 4096 * 10 / 1e6
	}
	readMs := uint64(2 + 2*mbs)
	if r.healthy {
		readMs = 2
	}
	for k, dev := range []string{"loop0", "loop4"} {
		if r.reading[k] {
			r.d.io(dev, 5, readMs, 0)
		}
	}
	r.dec = r.e.Step(r.now, r.d.snap())
	for i := range r.held {
		r.held[i] = r.dec.Consumers[1+i].HeldMs
	}
	return r.dec
}

func (r *tenantRig) run(d time.Duration) {
	for end := r.now.Add(d); r.now.Before(end); {
		r.step()
	}
}

func mustBook(t *testing.T, p tenant.Precedence, es ...tenant.Entry) *tenant.Book {
	t.Helper()
	b, err := tenant.New(es, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func entry(i int, terms tenant.Terms) tenant.Entry {
	return tenant.Entry{Match: []string{tenantIPs[i].String()}, Terms: terms}
}

// The strictest active reader's own threshold is the resource's; a
// reader without one carries the resource's; a reader that has been
// quiet for readerActive no longer counts.
func TestTenantReadPromise(t *testing.T) {
	book := mustBook(t, "",
		entry(0, tenant.Terms{Name: "strict", ThresholdMs: 8}),
		entry(4, tenant.Terms{Name: "loose", ThresholdMs: 30}))
	tests := []struct {
		name    string
		reading [2]bool
		quiet   time.Duration // how long the readers have read as above
		want    float64
		by      string
	}{
		{"strict alone", [2]bool{true, false}, 5 * time.Second, 8, "strict"},
		{"both", [2]bool{true, true}, 5 * time.Second, 8, "strict"},
		{"loose alone, strict just quiet", [2]bool{false, true}, readerActive - time.Second, 8, "strict"},
		{"loose alone", [2]bool{false, true}, readerActive + time.Second, 30, "loose"},
		{"nobody reads", [2]bool{false, false}, readerActive + time.Second, 15, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTenantRig(t, book)
			r.healthy = true
			r.reading = [2]bool{true, true}
			r.run(5 * time.Second)
			r.reading = tt.reading
			r.run(tt.quiet)
			rd := r.dec.Resources[0]
			if rd.ThresholdMs != tt.want || rd.ThresholdBy != tt.by {
				t.Errorf("threshold %g by %q, want %g by %q", rd.ThresholdMs, rd.ThresholdBy, tt.want, tt.by)
			}
			if want := tt.want * (1 - DefaultHeadroom); math.Abs(rd.TargetMs-want) > 1e-9 {
				t.Errorf("target %g, want %g", rd.TargetMs, want)
			}
		})
	}
	// Without a book, the resource's own threshold whoever reads.
	r := newTenantRig(t, nil)
	r.reading = [2]bool{true, true}
	r.run(2 * time.Second)
	if rd := r.dec.Resources[0]; rd.ThresholdMs != 15 || rd.ThresholdBy != "" {
		t.Errorf("no book: threshold %g by %q, want 15 by nobody", rd.ThresholdMs, rd.ThresholdBy)
	}
}

// While throttled, the writers' rates split as their shares, and each
// is given its own delay, in HeldMs and in the data path's Throttle.
func TestTenantShares(t *testing.T) {
	r := newTenantRig(t, mustBook(t, "",
		entry(1, tenant.Terms{Share: 1}), entry(2, tenant.Terms{Share: 2}), entry(3, tenant.Terms{Share: 4})))
	r.run(30 * time.Second)
	r.written = [3]uint64{}
	r.run(20 * time.Second)
	rd := r.dec.Resources[0]
	if rd.DelayMs <= 0 || len(rd.Members) != 3 {
		t.Fatalf("not throttled: delay %g, members %v", rd.DelayMs, rd.Members)
	}
	total := float64(r.written[0] + r.written[1] + r.written[2])
	for i, share := range []float64{1, 2, 4} {
		if part := float64(r.written[i]) / total; math.Abs(part/(share/7)-1) > 0.10 {
			t.Errorf("writer %d (share %g): %.3f of the writes, want %.3f ± 10 %%", i, share, part, share/7)
		}
	}
	th := r.dec.Throttles()[0]
	if len(th.Members) != 0 || len(th.Own) != 3 {
		t.Fatalf("throttle %+v: want the three writers at their own delays", th)
	}
	for i, o := range th.Own {
		held := r.dec.Consumers[1+i].HeldMs
		if o.Addr != tenantIPs[1+i] || math.Abs(float64(o.Delay)/1e6-held) > 1e-3 {
			t.Errorf("own %d: %v at %v, consumer held at %g ms", i, o.Addr, o.Delay, held)
		}
	}
	if !(r.held[0] > r.held[1] && r.held[1] > r.held[2]) {
		t.Errorf("delays %v: the smaller share must be delayed more", r.held)
	}
}

// A book that asks nothing of the controller (names, equal shares)
// decides exactly what no book does.
func TestTenantEqualSharesChangeNothing(t *testing.T) {
	plain := newTenantRig(t, nil)
	named := newTenantRig(t, mustBook(t, "",
		entry(1, tenant.Terms{Name: "a", Share: 3}), entry(2, tenant.Terms{Name: "b", Share: 3}),
		entry(3, tenant.Terms{Name: "c", Share: 3})))
	for i := 0; i < 400; i++ {
		a, b := plain.step(), named.step()
		for j := range b.Consumers {
			b.Consumers[j].Name, b.Consumers[j].Terms = a.Consumers[j].Name, a.Consumers[j].Terms
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("tick %d: decisions differ:\n%+v\n%+v", i, a.Resources[0], b.Resources[0])
		}
	}
}

// A capped writer is held to its cap while the resource is healthy,
// alone, outside the set's delay.
func TestTenantCap(t *testing.T) {
	const capBps = 2e6
	r := newTenantRig(t, mustBook(t, "", entry(1, tenant.Terms{CapBps: capBps, BurstBytes: 1e6})))
	r.healthy = true
	r.run(30 * time.Second)
	r.written = [3]uint64{}
	r.run(10 * time.Second)
	if got := float64(r.written[0]) * 4096 / 10; math.Abs(got/capBps-1) > 0.05 {
		t.Errorf("capped writer wrote %.0f B/s over 10 s, want %.0f ± 5 %%", got, capBps)
	}
	if r.written[1] <= r.written[0]*2 {
		t.Errorf("uncapped writer wrote %d writes, capped %d: the cap must hold only its writer", r.written[1], r.written[0])
	}
	rd := r.dec.Resources[0]
	c := r.dec.Consumers[1]
	if rd.DelayMs != 0 || !c.Capped || c.CapMs <= 0 || c.HeldMs != c.CapMs {
		t.Errorf("resource delay %g, capped %v at %g ms, held %g: want only the cap's delay", rd.DelayMs, c.Capped, c.CapMs, c.HeldMs)
	}
	th := r.dec.Throttles()[0]
	if len(th.Own) != 1 || th.Own[0].Addr != tenantIPs[1] || th.Own[0].Delay <= 0 {
		t.Errorf("throttle %+v: want the capped writer at its own delay", th)
	}
}

// A reserved writer alone in the set while the promise is missed is a
// conflict: reported either way, and the precedence decides whether it
// is delayed like the set or kept at a delay of its own.
func TestTenantReservationConflict(t *testing.T) {
	for _, p := range []tenant.Precedence{tenant.PromiseWins, tenant.ReservationWins} {
		t.Run(string(p), func(t *testing.T) {
			r := newTenantRig(t, mustBook(t, p, entry(1, tenant.Terms{Name: "res", ReserveBps: 20e6})))
			r.w[1].stopped, r.w[2].stopped = true, true
			r.w[0].threads = 16
			r.run(20 * time.Second)
			rd, c := r.dec.Resources[0], r.dec.Consumers[1]
			if rd.Conflict == "" {
				t.Fatalf("no conflict reported (delay %g, signal %g, threshold %g, held %g)", rd.DelayMs, rd.SignalMs, rd.ThresholdMs, c.HeldMs)
			}
			t.Log(rd.Conflict)
			switch p {
			case tenant.PromiseWins:
				if c.HeldMs != rd.DelayMs {
					t.Errorf("promise wins: reserved writer held at %g ms, the set at %g", c.HeldMs, rd.DelayMs)
				}
			case tenant.ReservationWins:
				if !(c.HeldMs < rd.DelayMs) {
					t.Errorf("reservation wins: reserved writer held at %g ms, the set at %g", c.HeldMs, rd.DelayMs)
				}
			}
		})
	}
	// Without a conflict (healthy resource) nothing is reported.
	r := newTenantRig(t, mustBook(t, "", entry(1, tenant.Terms{ReserveBps: 20e6})))
	r.healthy = true
	r.run(10 * time.Second)
	if c := r.dec.Resources[0].Conflict; c != "" {
		t.Errorf("healthy resource reports a conflict: %s", c)
	}
}

// A reload (the same topology and book again) keeps what each consumer
// is given: the share multipliers and cap loops carry over.
func TestTenantStateSurvivesReload(t *testing.T) {
	book := mustBook(t, "",
		entry(1, tenant.Terms{Share: 1, CapBps: 3e6}), entry(2, tenant.Terms{Share: 2}), entry(3, tenant.Terms{Share: 4}))
	r := newTenantRig(t, book)
	r.run(30 * time.Second)
	before := r.held
	topo := topology.Topology{Resources: []topology.Resource{{Name: "vg-t", ThresholdMs: 15}}}
	for i, ip := range tenantIPs {
		topo.Resources[0].Consumers = append(topo.Resources[0].Consumers, topology.Consumer{Addr: ip, Device: "loop" + string(rune('0'+i))})
	}
	r.e.SetTopology(topo)
	r.e.SetTenants(book)
	r.step()
	for i := range before {
		if math.Abs(r.held[i]/before[i]-1) > 0.2 {
			t.Errorf("writer %d held at %g ms before the reload, %g after", i, before[i], r.held[i])
		}
	}
}

// No tenant rule holds a consumer beyond the loop's ceiling limit, under
// TCP's minimum RTO: not a cap far under what its writer wants, repaying
// the debt of a long burst, nor a share far under the others'.
func TestTenantDelaysStayUnderTheLimit(t *testing.T) {
	r := newTenantRig(t, mustBook(t, "",
		entry(1, tenant.Terms{CapBps: 50e3}),
		entry(2, tenant.Terms{Share: 1}), entry(3, tenant.Terms{Share: 1000})))
	lim := r.e.Config().UMaxLimitMs
	worst := 0.0
	for range 600 {
		for _, c := range r.step().Consumers {
			worst = max(worst, c.HeldMs)
		}
	}
	if worst > lim || worst < lim/2 {
		t.Errorf("the most a consumer was held: %.1f ms; want close to, and never over, the limit %g ms", worst, lim)
	}
}

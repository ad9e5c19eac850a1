package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/clock"
)

// Defaults of the nfqueue backend.
const (
	// DefaultQueueNum is the NFQUEUE number our rules send packets to.
	// Any 16-bit number works; the iSCSI port is easy to recognise in
	// iptables-save and unlikely to be used by anything else on a target.
	DefaultQueueNum = 3260
	// DefaultSmallSegment is the largest TCP payload (bytes) that counts as
	// write-direction traffic. A synchronous iSCSI writer waits for an R2T
	// and a SCSI Response PDU per command: 48-byte headers plus at most a
	// little sense data. 128 bytes keeps those and pure ACKs, and leaves
	// every read data segment (kilobytes) in the read direction.
	DefaultSmallSegment = 128
	// DefaultMaxBacklog bounds the packets held in user space; beyond it
	// packets pass at once. At 40 MB/s of 64 KiB writes and 20 ms delay the
	// backlog is a few hundred packets, so this is far from normal use.
	DefaultMaxBacklog = 8192
	// copyRange is how much of each packet the kernel copies to us: the
	// largest IPv4 header (60) plus the largest TCP header (60).
	copyRange = 120
	// kernelQueueLen is the kernel's queue limit; it must exceed our
	// backlog, since held packets stay in the kernel until their verdict.
	// Beyond it the kernel accepts packets itself (fail-open flag).
	kernelQueueLen = 4 * DefaultMaxBacklog
)

// NfqueueConfig configures the nfqueue backend. Zero values take defaults.
type NfqueueConfig struct {
	QueueNum     uint16
	SmallSegment int
	MaxBacklog   int
	Firewall     Firewall // default: iptables on this machine
	Sets         Sets     // default: ipsets over netlink
	NetNS        int      // fd of the network namespace for the queue; 0: current
	Clock        clock.Clock
	Logger       *slog.Logger
}

// delays is the per-consumer delay table the packet path reads.
type delays map[netip.Addr]struct{ write, read time.Duration }

// Nfqueue is the default backend: iptables sends the packets a throttled
// consumer receives from the target ports to an NFQUEUE, and the Delayer
// holds each for the delay of its class. Only members of active groups are
// in the sets, so an idle sanqos costs no user-space work per packet.
//
// While a consumer has any delay, all its packets from the target ports go
// to the queue and are classified here by payload length: pure ACKs and
// small segments (≤ SmallSegment bytes: R2T, SCSI Response) are the write
// direction, larger data segments the read direction. Queuing only one
// class would let the other overtake it and reorder the flow.
type Nfqueue struct {
	cfg   NfqueueConfig
	rec   *reconciler
	table atomic.Pointer[delays]
	del   *Delayer
	nf    *nfqueue.Nfqueue
	log   *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	done   sync.WaitGroup
	closed bool
	errs   atomic.Uint64 // verdict and parse failures
}

// NewNfqueue removes what a crashed run left, binds the queue and starts
// the release loop. The rules come with the first Apply.
func NewNfqueue(ctx context.Context, cfg NfqueueConfig) (*Nfqueue, error) {
	if cfg.QueueNum == 0 {
		cfg.QueueNum = DefaultQueueNum
	}
	if cfg.SmallSegment == 0 {
		cfg.SmallSegment = DefaultSmallSegment
	}
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.Firewall == nil {
		cfg.Firewall = &Iptables{Run: ExecRunner{}}
	}
	if cfg.Sets == nil {
		cfg.Sets = Ipsets{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Nfqueue{cfg: cfg, rec: newReconciler(cfg.Firewall, cfg.Sets), log: cfg.Logger.With("backend", "nfqueue")}
	b.table.Store(&delays{})
	if err := b.rec.reset(ctx); err != nil {
		return nil, fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	nf, err := nfqueue.Open(&nfqueue.Config{
		NetNS:        cfg.NetNS,
		NfQueue:      cfg.QueueNum,
		MaxPacketLen: copyRange,
		MaxQueueLen:  kernelQueueLen,
		Copymode:     nfqueue.NfQnlCopyPacket,
		AfFamily:     unix.AF_INET,
		// Fail open: when our queue is full the kernel accepts instead of
		// dropping; GSO: take super-packets whole instead of having the
		// kernel segment them for us.
		Flags:        nfqueue.NfQaCfgFlagFailOpen | nfqueue.NfQaCfgFlagGSO,
		WriteTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("opening NFQUEUE %d: %w", cfg.QueueNum, err)
	}
	if err := nf.SetOption(netlink.NoENOBUFS, true); err != nil {
		nf.Close()
		return nil, fmt.Errorf("configuring NFQUEUE socket: %w", err)
	}
	b.nf = nf
	b.del = NewDelayer(cfg.Clock, cfg.MaxBacklog, b.accept)
	rctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	if err := nf.RegisterWithErrorFunc(rctx, b.hook, b.onError); err != nil {
		cancel()
		nf.Close()
		return nil, fmt.Errorf("binding NFQUEUE %d (is another sanqos running?): %w", cfg.QueueNum, err)
	}
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		b.del.Run(rctx)
	}()
	return b, nil
}

func (b *Nfqueue) Name() string { return "nfqueue" }

func (b *Nfqueue) accept(ids []uint32) {
	for _, id := range ids {
		if err := b.nf.SetVerdict(id, nfqueue.NfAccept); err != nil {
			b.errs.Add(1)
		}
	}
}

func (b *Nfqueue) onError(err error) int {
	var op *netlink.OpError
	if errors.As(err, &op) && (op.Timeout() || op.Temporary()) {
		return 0
	}
	if errors.Is(err, unix.ENOBUFS) {
		return 0
	}
	b.log.Error("reading NFQUEUE", "err", err)
	return 0
}

func (b *Nfqueue) hook(a nfqueue.Attribute) int {
	if a.PacketID == nil {
		return 0
	}
	id := *a.PacketID
	if a.Payload == nil {
		b.accept([]uint32{id})
		return 0
	}
	total := 0
	if a.CapLen != nil {
		total = int(*a.CapLen)
	} else if len(*a.Payload) < copyRange {
		total = len(*a.Payload)
	}
	p, ok := parseIPv4TCP(*a.Payload, total)
	if !ok {
		b.errs.Add(1)
		b.accept([]uint32{id})
		return 0
	}
	d := (*b.table.Load())[p.flow.dst]
	delay := d.read
	if p.payload <= b.cfg.SmallSegment {
		delay = d.write
	}
	if b.del.Submit(id, p.flow, delay, b.cfg.Clock.Now()) {
		b.accept([]uint32{id})
	}
	return 0
}

// rules renders one NFQUEUE rule per group. --queue-bypass makes the
// kernel accept packets when no program is bound to the queue, so a dead
// daemon never blocks storage traffic.
func (b *Nfqueue) rules(s State) []string { return NfqueueRules(s, b.cfg.QueueNum) }

// NfqueueRules are the chain rules of the nfqueue backend for s.
func NfqueueRules(s State, queue uint16) []string {
	var out []string
	for _, g := range sortedGroups(s) {
		out = append(out, fmt.Sprintf("-A %s %s -m set --match-set %s dst -j NFQUEUE --queue-num %d --queue-bypass",
			Chain, portMatch(g.ports()), SetName(g.Name), queue))
	}
	return out
}

func (b *Nfqueue) Apply(ctx context.Context, s State) error {
	if err := Validate(s); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("backend is closed")
	}
	t := delays{}
	for _, g := range s.Groups {
		if !g.Active() {
			continue
		}
		for _, m := range g.Members {
			d := t[m.Unmap()]
			d.write, d.read = max(d.write, g.WriteDelay), max(d.read, g.ReadDelay)
			t[m.Unmap()] = d
		}
	}
	// Delays first: a consumer leaving the set must not find a stale delay
	// on packets still in flight, and one joining should find its delay.
	b.table.Store(&t)
	if err := b.rec.apply(ctx, b.rules(s), wantSets(s)); err != nil {
		return fmt.Errorf("programming the nfqueue data path: %w", err)
	}
	return nil
}

func (b *Nfqueue) Stats() Stats {
	return b.del.Stats()
}

// Close removes the rules and sets, then unbinds the queue (releasing
// every held packet at once).
func (b *Nfqueue) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.rec.reset(context.Background())
	b.cancel()
	b.done.Wait()
	if cerr := b.nf.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing NFQUEUE: %w", cerr)
	}
	return err
}

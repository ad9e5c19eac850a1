package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/observe/attribution"
)

// Wire counts, per client address, the bytes each client sends to the
// storage ports and receives from them, from the kernel's own per-socket
// counters, with nothing on the packet path (issues 17 and 35): it reads
// the TCP sockets over sock_diag (INET_DIAG, as `ss -ti` does; see Read
// for how often) and sums, over the sockets whose local port is a
// storage port and whose peer is a known client, tcpi_bytes_received
// (what the client sent: its writes) and tcpi_bytes_acked (what it
// received: its reads).
// These are payload bytes (headers and retransmissions are not counted),
// and a socket's bytes of one interval count only when its data segments
// averaged more than the port's small-segment split: pure ACKs carry
// nothing, and a reader's requests and a writer's R2Ts and responses are
// small, so a reader does not look like a writer (see judge).
//
// Connections that close between two reads are counted whole: the
// kernel broadcasts each TCP socket's final counters when it is
// destroyed (the sock_diag destroy groups, `ss -E`), which Wire
// listens to. A socket gone from a dump whose final counters have not
// come (yet) counts as last seen; when they come later, only what it
// carried since is added. Only if the kernel drops broadcasts (a full
// receive buffer, logged) does a closing connection lose at most what
// it carried since the last read. The counters of a client are thus
// monotonic while it stays a client.
//
// Older versions counted with ipsets and iptables rules, on every
// packet's path all the time; OpenWire still removes what one of them
// left (the instance "w" and the backend's instance, with its own lock,
// see package owned).
type Wire struct {
	halves  []wireHalf // chains and sets of older versions, to remove
	lock    *owned.Lock
	h       *netlink.Handle
	ns      int
	log     *slog.Logger
	events  *nl.NetlinkSocket // destroyed sockets' final counters
	lookups *nl.NetlinkSocket // one socket at a time (see lookup); used by Read alone
	reads   int               // Read calls, for dumpEvery; under mu
	readMu  sync.Mutex        // serialises Read
	closed  atomic.Bool       // Close ran: the listener stops

	mu      sync.Mutex
	ports   map[uint16]bool
	small   map[uint16]int // the ports' splits (SmallSegments), def else
	def     int
	clients map[netip.Addr]bool
	socks   socketCounts
}

// wireHalf is the chain and sets of one address family: the IPv6 half's
// owner has v6 set (sets of family inet6, the chain in ip6tables).
type wireHalf struct {
	own owned.Owner
	fw  owned.Firewall
}

// WireConfig configures OpenWire. Zero values take defaults.
type WireConfig struct {
	// Instance is the backend's instance (throttle.DefaultInstance, which
	// throttle.OpenWire fills in when it is empty); the wire
	// counters' is WireInstance of it.
	Instance string
	Ports    []uint16
	// SmallSegment and SmallSegments are the backend's splits: a
	// socket's bytes of an interval count only when its data segments
	// averaged more (see judge); 0 is DefaultSmallSegment.
	SmallSegment  int
	SmallSegments map[uint16]int
	// Firewall and Firewall6 remove what older versions' counters left;
	// default: iptables here, and ip6tables where it works.
	Firewall  owned.Firewall
	Firewall6 owned.Firewall
	Handle    *netlink.Handle // removing older versions' sets; default: here
	NetNS     int             // the namespace's handle (lock, broadcasts); 0: here
	Logger    *slog.Logger
}

// wireMark starts the instance name of wire counters.
const wireMark = "w"

// WireInstance is the instance name of the wire counters of a backend
// instance: "w" and its name, cut to the 8 characters names may have.
func WireInstance(backend string) string {
	n := wireMark + backend
	if len(n) > owned.MaxInstance {
		n = n[:owned.MaxInstance]
	}
	return n
}

// OpenWire removes what a dead earlier run left and starts listening to
// the kernel's broadcasts of destroyed sockets; SetClients says whom to
// count.
func OpenWire(ctx context.Context, cfg WireConfig) (*Wire, error) {
	if len(cfg.Ports) == 0 {
		return nil, errors.New("wire counters: no ports")
	}
	if cfg.Instance == "" {
		return nil, errors.New("wire counters: no instance name")
	}
	inst := WireInstance(cfg.Instance)
	if err := owned.CheckInstance(inst); err != nil {
		return nil, err
	}
	if cfg.Firewall == nil {
		cfg.Firewall = &owned.Iptables{Run: owned.ExecRunner{}}
	}
	if ipt, ok := cfg.Firewall.(*owned.Iptables); ok && cfg.Firewall6 == nil && !ipt.V6 {
		cfg.Firewall6 = &owned.Iptables{Run: ipt.Run, V6: true}
	}
	if cfg.Handle == nil {
		cfg.Handle = &netlink.Handle{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SmallSegment == 0 {
		cfg.SmallSegment = plan.DefaultSmallSegment
	}
	if err := plan.ValidateSmallSegments(cfg.SmallSegments); err != nil {
		return nil, err
	}
	lock, err := owned.LockInstance(cfg.NetNS, inst)
	if err != nil {
		return nil, err
	}
	w := &Wire{halves: []wireHalf{{owned.Owner{Name: inst}, cfg.Firewall}}, lock: lock, h: cfg.Handle, ns: cfg.NetNS,
		log: cfg.Logger.With("part", "wire", "instance", inst), clients: map[netip.Addr]bool{}}
	w.ports, w.small, w.def = portSet(cfg.Ports), cfg.SmallSegments, cfg.SmallSegment
	if cfg.Firewall6 != nil {
		if _, err := cfg.Firewall6.Chains(ctx); err == nil {
			w.halves = append(w.halves, wireHalf{owned.Owner{Name: inst, V6: true}, cfg.Firewall6})
		}
	}
	if err := w.reset(ctx); err != nil {
		lock.Release()
		return nil, fmt.Errorf("wire counters: removing leftovers of an earlier run: %w", err)
	}
	if err := w.listen(); err != nil {
		return nil, errors.Join(err, w.Close())
	}
	at := netns.None() // here
	if w.ns != 0 {
		at = netns.NsHandle(w.ns)
	}
	ls, err := nl.GetNetlinkSocketAt(at, netns.None(), unix.NETLINK_INET_DIAG)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("wire counters: a sock_diag socket: %w", err), w.Close())
	}
	w.lookups = ls
	return w, nil
}

func portSet(ports []uint16) map[uint16]bool {
	m := make(map[uint16]bool, len(ports))
	for _, p := range ports {
		m[p] = true
	}
	return m
}

// reset removes every half's chain, jumps and sets (older versions').
func (w *Wire) reset(ctx context.Context) error {
	var errs []error
	for _, hf := range w.halves {
		newRec := owned.NewOwnedReconciler
		if hf.own.V6 {
			newRec = owned.NewV6Reconciler
		}
		rec := newRec(hf.fw, owned.Ipsets{Handle: w.h}, hf.own.Name, w.ns)
		errs = append(errs, rec.Reset(ctx))
	}
	return errors.Join(errs...)
}

// SetPorts makes the counters count the target ports ports, with the
// splits small, from now on: a reload of the ports. Clients keep their
// counters.
func (w *Wire) SetPorts(_ context.Context, ports []uint16, small map[uint16]int) error {
	if len(ports) == 0 {
		return errors.New("wire counters: no ports")
	}
	if err := plan.ValidateSmallSegments(small); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ports, w.small = portSet(ports), small
	return nil
}

// SetClients makes the counters count exactly addrs. A client that
// stays keeps its counters; one that goes loses them.
func (w *Wire) SetClients(addrs []netip.Addr) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a.Unmap()] = true
	}
	w.clients = want
	w.socks.forgetExcept(want)
	return nil
}

// dumpEvery: a full dump finds new connections every dumpEvery reads
// (a second at the daemon's tick); the reads between look up the known
// sockets alone. A connection's bytes before its first dump are counted
// then, all at once; those of one that closed before it come with its
// destruction.
const dumpEvery = 10

// Read returns every client's counters: what their known sockets carried
// (a sock_diag lookup each, a dump per family every dumpEvery reads),
// plus what the sockets destroyed since the last read carried.
func (w *Wire) Read() (map[netip.Addr]attribution.Counters, error) {
	w.readMu.Lock() // one request on the lookup socket at a time
	defer w.readMu.Unlock()
	w.mu.Lock()
	w.reads++
	dump := w.reads%dumpEvery == 1 || w.lookups == nil
	var ids []diagID
	for _, l := range w.socks.live {
		ids = append(ids, l.last.id)
	}
	none := len(w.clients) == 0
	w.mu.Unlock()
	var seen []socketSample
	var err error
	switch {
	case none:
	case dump:
		seen, err = w.dump()
	default:
		seen, err = w.lookup(ids)
	}
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return withClients(w.socks.update(seen, w.counted, w.split), w.clients), nil
}

// dump lists the TCP sockets of both families of the counters'
// namespace, on the lookup socket (a netlink.Handle opens its sock_diag
// socket where the caller's thread is, not in the handle's namespace).
func (w *Wire) dump() ([]socketSample, error) {
	var seen []socketSample
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP)
		req.AddRawData(lookupRequest(diagID{family: fam}))
		if err := w.lookups.Send(req); err != nil {
			return nil, fmt.Errorf("wire counters: dumping the TCP sockets: %w", err)
		}
	parts:
		for {
			msgs, _, err := w.lookups.Receive()
			if err != nil {
				return nil, fmt.Errorf("wire counters: dumping the TCP sockets: %w", err)
			}
			for _, m := range msgs {
				switch {
				case m.Header.Seq != req.Seq:
				case m.Header.Type == unix.NLMSG_DONE:
					break parts
				case m.Header.Type == unix.NLMSG_ERROR:
					return nil, fmt.Errorf("wire counters: dumping the TCP sockets: %w", nlError(m.Data))
				default:
					// A time-wait socket has no tcp_info: its bytes came
					// with its destruction.
					if f, ok := parseDestroyed(m.Data); ok {
						seen = append(seen, f)
					}
				}
			}
		}
	}
	return seen, nil
}

// nlError is the errno of a netlink error message.
func nlError(b []byte) error {
	if len(b) < 4 {
		return errors.New("short netlink error")
	}
	if e := -int32(binary.NativeEndian.Uint32(b)); e != 0 {
		return syscall.Errno(e)
	}
	return nil
}

// split is the small-segment split of a target port. w.mu held.
func (w *Wire) split(port uint16) int {
	if n, ok := w.small[port]; ok {
		return n
	}
	return w.def
}

// counted reports whether a socket is one of a client's to a storage
// port. w.mu held.
func (w *Wire) counted(s socketSample) bool { return w.ports[s.local] && w.clients[s.peer] }

// Close stops listening, removes what older versions left and releases
// the lock.
func (w *Wire) Close() error {
	if w.lock == nil {
		return nil
	}
	if w.events != nil {
		w.closed.Store(true)
		w.events.Close()
	}
	if w.lookups != nil {
		w.lookups.Close()
	}
	err := w.reset(context.Background())
	w.lock.Release()
	w.lock = nil
	if err != nil {
		return fmt.Errorf("wire counters: removing: %w", err)
	}
	return nil
}

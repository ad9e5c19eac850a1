package daemon

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Handler serves /metrics (Prometheus), /status (JSON, status.Status) and
// a short index at /.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics.Handler())
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(d.Status()); err != nil {
			d.log.Debug("writing /status", "err", err)
		}
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "sanqos %s\n/metrics  Prometheus metrics\n/status   JSON status (sanqos status, sanqos top)\n", d.o.Version)
	})
	return mux
}

// HTTPLimits bound what HTTP clients can hold of the daemon. The
// listener is open to every local user (and to the network with a
// wildcard listen): without bounds, idle connections took all of the
// daemon's descriptors and with them /proc/diskstats (issue 14).
type HTTPLimits struct {
	// MaxConns is how many connections are open at once; a connection
	// over it is closed as soon as it is accepted, unless it can evict
	// an idle one of a peer that holds more (see limitListener).
	MaxConns int
	// MaxPerPeer is how many of them one peer holds at most (0: no
	// limit): a peer is a remote address, or a local user.
	MaxPerPeer int
	// ReadHeader, Read and Write bound one request; Idle closes a
	// keep-alive connection between requests.
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultHTTPLimits suit a Prometheus scraper and a few 'sanqos top'.
var DefaultHTTPLimits = HTTPLimits{MaxConns: 64, MaxPerPeer: 16, ReadHeader: 5 * time.Second, Read: 10 * time.Second,
	Write: 10 * time.Second, Idle: 30 * time.Second}

// Listen opens the HTTP listener, with an error that says what to do when
// the address is taken.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for /metrics and /status (is another sanqos running? pick another address with --listen): %w", addr, err)
	}
	return l, nil
}

// Serve serves h on l until ctx is cancelled, then shuts the server down
// gracefully (1 s for in-flight scrapes), with DefaultHTTPLimits.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	return ServeLimited(ctx, l, h, DefaultHTTPLimits)
}

// ServeLimited is Serve with the given limits. net/http's accept loop
// already survives EMFILE (it backs off and accepts again).
func ServeLimited(ctx context.Context, l net.Listener, h http.Handler, lim HTTPLimits) error {
	return serve(ctx, l, h, lim, nil)
}

// serve is ServeLimited; net/http's own messages (accept errors and their
// retries) go to log at debug level when it is set.
func serve(ctx context.Context, l net.Listener, h http.Handler, lim HTTPLimits, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeader, ReadTimeout: lim.Read,
		WriteTimeout: lim.Write, IdleTimeout: lim.Idle, MaxHeaderBytes: 8 << 10}
	if lim.MaxConns > 0 {
		ll := newLimitListener(l, lim)
		l, srv.ConnState = ll, ll.connState
	}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Clients still in a request after the grace period: cut them.
		err = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// ListenAndServe serves h on addr until ctx ends. When the address cannot
// be bound (another process holds the port), it says so once and keeps
// trying in the background: /metrics is for people, the control loop
// must run without it.
func ListenAndServe(ctx context.Context, addr string, h http.Handler, lim HTTPLimits, log *slog.Logger, retry time.Duration) error {
	if retry <= 0 {
		retry = 5 * time.Second
	}
	warned := false
	for {
		l, err := Listen(addr)
		if err == nil {
			if warned {
				log.Info("HTTP address free again; serving /metrics and /status", "addr", l.Addr().String())
			} else {
				log.Info("serving HTTP", "metrics", "http://"+l.Addr().String()+"/metrics", "status", "http://"+l.Addr().String()+"/status")
			}
			return serve(ctx, l, h, lim, log)
		}
		if !warned {
			log.Warn("cannot serve /metrics and /status yet; control runs without them, retrying in the background",
				"err", err, "retry_every", retry)
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// limitListener bounds the connections it hands out: the daemon never
// holds more than MaxConns (+1 while refusing one) HTTP descriptors
// whatever arrives. One peer (see peerKey) holds at most MaxPerPeer of
// them, and when all are taken a newcomer evicts a connection that has
// not sent a byte of its request yet (or sits idle between requests) of
// the peer that holds the most, if that is more than the newcomer's
// peer holds. So a local user who opens connections and sends nothing
// (they used to hold all 64 and lock out /metrics, 'sanqos status' and
// 'sanqos top', audit round 2 N7) only shares the slots with everyone
// else. A newcomer that cannot get a slot is told so and closed at
// once.
const tooManyBody = "too many connections to sanqos; try again (as root, 'sanqos status' and 'sanqos top' use the control socket instead)\n"

var tooMany = fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(tooManyBody), tooManyBody)

type limitListener struct {
	net.Listener
	max, perPeer int
	// peerOf names the peer of a connection (peerKey outside tests).
	peerOf func(net.Conn) string

	mu     sync.Mutex
	open   map[*slotConn]struct{}
	byPeer map[string]int
	seq    uint64
}

func newLimitListener(l net.Listener, lim HTTPLimits) *limitListener {
	return &limitListener{Listener: l, max: lim.MaxConns, perPeer: lim.MaxPerPeer, peerOf: peerKey,
		open: map[*slotConn]struct{}{}, byPeer: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if sc := l.admit(c); sc != nil {
			return sc, nil
		}
		// Say why, in one write that lands in the socket buffer at
		// once (a deadline keeps a stuck peer from holding the loop).
		c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		io.WriteString(c, tooMany)
		c.Close()
	}
}

// admit gives c a slot, evicting another connection if that is fair, or
// returns nil.
func (l *limitListener) admit(c net.Conn) *slotConn {
	peer := l.peerOf(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perPeer > 0 && l.byPeer[peer] >= l.perPeer {
		return nil
	}
	if len(l.open) >= l.max {
		v := l.victim()
		if v == nil || l.byPeer[v.peer] <= l.byPeer[peer] {
			return nil
		}
		// The victim's own Close, from its serving goroutine, then
		// finds its slot already given back.
		l.releaseLocked(v)
		v.Conn.Close()
	}
	l.seq++
	sc := &slotConn{Conn: c, l: l, peer: peer, seq: l.seq}
	l.open[sc] = struct{}{}
	l.byPeer[peer]++
	return sc
}

// victim is the connection to evict for a newcomer: of those that have
// not started a request, the oldest of the peer that holds the most.
func (l *limitListener) victim() *slotConn {
	var v *slotConn
	for c := range l.open {
		if c.busy {
			continue
		}
		if v == nil || l.byPeer[c.peer] > l.byPeer[v.peer] || l.byPeer[c.peer] == l.byPeer[v.peer] && c.seq < v.seq {
			v = c
		}
	}
	return v
}

func (l *limitListener) releaseLocked(c *slotConn) {
	if _, ok := l.open[c]; !ok {
		return
	}
	delete(l.open, c)
	if l.byPeer[c.peer]--; l.byPeer[c.peer] <= 0 {
		delete(l.byPeer, c.peer)
	}
}

func (l *limitListener) release(c *slotConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(c)
}

// connState follows net/http's view of each connection: one that has
// read a byte of a request is busy until the request is answered, and is
// never evicted (ReadHeaderTimeout bounds how long it can stall).
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	sc, ok := c.(*slotConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	sc.busy = st == http.StateActive || st == http.StateHijacked
}

type slotConn struct {
	net.Conn
	l    *limitListener
	peer string
	seq  uint64
	busy bool // guarded by l.mu
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}

// peerKey names the peer of c for the per-peer limit: its address and,
// when it is a process of this host (whose users all share 127.0.0.1),
// the uid that owns its socket, so that one local user cannot take the
// share of root's 'sanqos status' or of a Prometheus running as its own
// user.
func peerKey(c net.Conn) string {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return c.RemoteAddr().String()
	}
	rip, _ := netip.AddrFromSlice(ra.IP)
	lip, _ := netip.AddrFromSlice(la.IP)
	rip, lip = rip.Unmap(), lip.Unmap()
	if !rip.IsLoopback() && rip != lip {
		return rip.String()
	}
	uid, err := socketUID(netip.AddrPortFrom(rip, uint16(ra.Port)), netip.AddrPortFrom(lip, uint16(la.Port)))
	if err != nil {
		return rip.String()
	}
	return fmt.Sprintf("%s uid %d", rip, uid)
}

// socketUID returns the owner of the TCP socket of this host (network
// namespace) bound to src and connected to dst, asked of the kernel with
// a sock_diag lookup.
func socketUID(src, dst netip.AddrPort) (uint32, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("opening sock_diag: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	// struct nlmsghdr, then struct inet_diag_req_v2 (family, protocol,
	// ext, pad, states, inet_diag_sockid: sport, dport (big-endian),
	// src[16], dst[16], if, cookie[2]).
	const hdr, reqLen = 16, 56
	b := make([]byte, hdr+reqLen)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST)
	r := b[hdr:]
	r[0] = unix.AF_INET6
	if src.Addr().Is4() {
		r[0] = unix.AF_INET
	}
	r[1] = unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], 0xffffffff)
	binary.BigEndian.PutUint16(r[8:], src.Port())
	binary.BigEndian.PutUint16(r[10:], dst.Port())
	s, d := src.Addr().AsSlice(), dst.Addr().AsSlice()
	copy(r[12:28], s)
	copy(r[28:44], d)
	binary.NativeEndian.PutUint32(r[48:], 0xffffffff) // no cookie
	binary.NativeEndian.PutUint32(r[52:], 0xffffffff)
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("asking sock_diag: %w", err)
	}
	resp := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, resp, 0)
	if err != nil {
		return 0, fmt.Errorf("reading sock_diag: %w", err)
	}
	// struct inet_diag_msg: family, state, timer, retrans, sockid (48),
	// expires, rqueue, wqueue, uid.
	if n < hdr+68 || binary.NativeEndian.Uint16(resp[4:]) != unix.SOCK_DIAG_BY_FAMILY {
		return 0, fmt.Errorf("sock_diag found no socket %s → %s", src, dst)
	}
	return binary.NativeEndian.Uint32(resp[hdr+64:]), nil
}

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
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
	// over it is closed as soon as it is accepted.
	MaxConns int
	// ReadHeader, Read and Write bound one request; Idle closes a
	// keep-alive connection between requests.
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultHTTPLimits suit a Prometheus scraper and a few 'sanqos top'.
var DefaultHTTPLimits = HTTPLimits{MaxConns: 64, ReadHeader: 5 * time.Second, Read: 10 * time.Second,
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
	if lim.MaxConns > 0 {
		l = &limitListener{Listener: l, slots: make(chan struct{}, lim.MaxConns)}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeader, ReadTimeout: lim.Read,
		WriteTimeout: lim.Write, IdleTimeout: lim.Idle, MaxHeaderBytes: 8 << 10}
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

// limitListener closes connections over its limit as soon as they are
// accepted: a client learns at once, and the daemon never holds more
// than MaxConns+1 HTTP descriptors whatever arrives.
const tooManyBody = "too many connections to sanqos; try again\n"

var tooMany = fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(tooManyBody), tooManyBody)

type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			// Say why, in one write that lands in the socket buffer at
			// once (a deadline keeps a stuck peer from holding the loop).
			c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
			io.WriteString(c, tooMany)
			c.Close()
		}
	}
}

type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

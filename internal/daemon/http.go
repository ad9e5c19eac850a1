package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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
// gracefully (1 s for in-flight scrapes).
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

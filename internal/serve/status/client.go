package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// DefaultAddr is where the daemon serves /status and /metrics unless told
// otherwise: loopback only, port 9469 (free in the Prometheus exporter port
// list's range, near node_exporter's 9100 family).
const DefaultAddr = "127.0.0.1:9469"

// ErrNoDaemon is returned by Client.Get when nothing listens at the address.
var ErrNoDaemon = errors.New("no sanqos daemon")

// Client fetches /status from a running daemon.
type Client struct {
	// Addr is host:port of the daemon's HTTP listener.
	Addr string
	// HTTP is the client to use; nil means one with a 5 s timeout.
	HTTP *http.Client
}

// Get returns the daemon's current status. When nothing listens at Addr the
// error wraps ErrNoDaemon and tells how to start one.
func (c Client) Get(ctx context.Context) (Status, error) {
	hc := c.HTTP
	if hc == nil {
		// The daemon answers /status from memory in microseconds; 5 s
		// means it is hung, which the administrator should hear.
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	url := "http://" + c.Addr + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Status{}, fmt.Errorf("address %q: %w", c.Addr, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if isNotListening(err) {
			return Status{}, fmt.Errorf("%w at %s — start it with 'sanqos run' (or pass --addr)", ErrNoDaemon, c.Addr)
		}
		return Status{}, fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512)) // only for the message
		return Status{}, fmt.Errorf("fetching %s: %s: %s", url, resp.Status, body)
	}
	var s Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return Status{}, fmt.Errorf("decoding %s (is a sanqos daemon listening there?): %w", url, err)
	}
	return s, nil
}

// isNotListening reports a refused connection or an unreachable address:
// the cases where the right advice is to start the daemon.
func isNotListening(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

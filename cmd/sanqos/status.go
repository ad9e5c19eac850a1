package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sanqos/sanqos/internal/serve/ctl"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// cmdStatus prints the running daemon's resources, signals and throttles.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "sanqos status [--socket PATH] [--addr 127.0.0.1:9469] [--json]",
		`Print what the running sanqos daemon sees and does: per shared resource the
read-latency signal, its threshold, the packet delay and the throttled
consumers; per consumer the read and write rates; the data-path counters.
As root it asks the daemon's control socket, which no other user can crowd,
and falls back to http://ADDR/status (JSON); other users ask over HTTP.`, stderr)
	src := statusFlags(fs)
	asJSON := fs.Bool("json", false, "print the raw JSON document instead of tables")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := src.get(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return status.WriteTable(stdout, s)
}

// statusSource fetches the daemon's /status document: over the control
// socket when it may (root), since the HTTP listener is open to every
// local user and one of them can hold its connections; over HTTP
// otherwise, or when the socket has no daemon that answers it (an older
// daemon, or one run with another --socket).
type statusSource struct {
	fs     *flag.FlagSet
	socket *string
	addr   *string
}

// statusFlags declares --socket and --addr on fs.
func statusFlags(fs *flag.FlagSet) *statusSource {
	return &statusSource{fs: fs,
		socket: fs.String("socket", ctl.DefaultSocket, "`path` of the daemon's control socket (its --socket); used when run as root"),
		addr:   fs.String("addr", status.DefaultAddr, "`host:port` of the daemon's HTTP listener (its --listen)"),
	}
}

// get asks the socket, the HTTP listener or both, as the flags and the
// caller's uid say: --addr alone means HTTP only, --socket alone the
// socket only.
func (s *statusSource) get(ctx context.Context) (status.Status, error) {
	set := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	viaSocket := set["socket"] || (!set["addr"] && os.Geteuid() == 0)
	viaHTTP := !set["socket"] || set["addr"]
	hc := status.Client{Addr: *s.addr}
	if _, err := os.Stat(*s.socket); viaHTTP && errors.Is(err, fs.ErrNotExist) {
		viaSocket = false // no daemon there: HTTP's error says what to do
	}
	if !viaSocket {
		return hc.Get(ctx)
	}
	st, err := statusOverSocket(ctx, *s.socket)
	if err == nil || !viaHTTP {
		return st, err
	}
	st, herr := hc.Get(ctx)
	if herr != nil {
		return st, fmt.Errorf("%w (the control socket %s: %v)", herr, *s.socket, err)
	}
	return st, nil
}

// statusOverSocket asks the daemon at the control socket path for its
// /status document.
func statusOverSocket(ctx context.Context, path string) (status.Status, error) {
	resp, err := ctl.Call(ctx, path, ctl.Request{Op: ctl.OpFullStatus})
	if err != nil {
		return status.Status{}, err
	}
	if len(resp.Status) == 0 {
		return status.Status{}, fmt.Errorf("the %s daemon on %s sends no status document: 'sanqos status' shows the autonomic daemon ('sanqos throttle --list' the manual one)", resp.Mode, path)
	}
	var st status.Status
	if err := json.Unmarshal(resp.Status, &st); err != nil {
		return status.Status{}, fmt.Errorf("decoding the status from %s: %w", path, err)
	}
	return st, nil
}

package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/sanqos/sanqos/internal/status"
)

// cmdStatus prints the running daemon's resources, signals and throttles.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "sanqos status [--addr 127.0.0.1:9469] [--json]",
		`Print what the running sanqos daemon sees and does: per shared resource the
read-latency signal, its threshold, the packet delay and the throttled
consumers; per consumer the read and write rates; the data-path counters.
The daemon serves this at http://ADDR/status (JSON).`, stderr)
	addr := fs.String("addr", status.DefaultAddr, "`host:port` of the daemon's HTTP listener (its --listen)")
	asJSON := fs.Bool("json", false, "print the raw JSON document instead of tables")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := status.Client{Addr: *addr}.Get(ctx)
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

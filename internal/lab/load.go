package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/sanqos/sanqos/internal/iolog"
)

// Load is one finished run of the load generator.
type Load struct {
	Initiator string
	Args      []string
	// Records are its per-second lines and summaries (see internal/iolog).
	Records []iolog.Record
	// Summary is the last line: all threads over the whole run.
	Summary iolog.Record
}

// RunLoad runs the load generator in the initiator's namespace against its
// own target until it ends (or ctx is done: the generator then stops
// cleanly and still prints its summary) and returns what it logged.
func (l *Lab) RunLoad(ctx context.Context, initiator string, args ...string) (*Load, error) {
	cmd, err := l.LoadCommand(context.WithoutCancel(ctx), initiator, args...)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting load on %s: %w", initiator, err)
	}
	// On cancellation ask for a clean stop (sessions log out, summary is
	// printed) rather than killing: a killed initiator leaves tgtd
	// holding a stale session.
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(os.Interrupt)
		case <-stopped:
		}
	}()
	err = cmd.Wait()
	close(stopped)
	desc := initiator + " (" + strings.Join(args, " ") + ")"
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("load on %s: %w: %s", desc, err, strings.TrimSpace(stderr.String()))
	}
	recs, perr := iolog.ReadRecords(&stdout)
	if perr != nil {
		return nil, fmt.Errorf("reading the log of load on %s: %w", desc, perr)
	}
	ld := &Load{Initiator: initiator, Args: args, Records: recs}
	n := len(recs)
	if n == 0 || recs[n-1].Kind != iolog.KindSummary || recs[n-1].Thread != 0 {
		return nil, fmt.Errorf("load on %s ended without a summary: %s", desc, strings.TrimSpace(stderr.String()))
	}
	ld.Summary = recs[n-1]
	return ld, nil
}

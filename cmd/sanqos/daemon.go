package main

import (
	"context"
	"errors"
	"io"
)

// cmdRunAutonomic is 'sanqos run' without --manual: discovery, the control
// loop and the data path. run.go delegates here.
func cmdRunAutonomic(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("autonomic mode is not available in this build yet; use --manual")
}

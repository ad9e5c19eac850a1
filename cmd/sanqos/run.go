package main

import (
	"context"
	"errors"
	"io"
)

// cmdRun is being built; see the issue that owns 'sanqos run'.
func cmdRun(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("'sanqos run' is not available in this build yet")
}

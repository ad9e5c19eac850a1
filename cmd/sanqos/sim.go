package main

import (
	"context"
	"errors"
	"io"
)

// cmdSim is being built; see the issue that owns 'sanqos sim'.
func cmdSim(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("'sanqos sim' is not available in this build yet")
}

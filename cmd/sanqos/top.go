package main

import (
	"context"
	"errors"
	"io"
)

// cmdTop is being built; see the issue that owns 'sanqos top'.
func cmdTop(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("'sanqos top' is not available in this build yet")
}

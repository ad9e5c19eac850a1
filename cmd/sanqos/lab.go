package main

import (
	"context"
	"errors"
	"io"
)

// cmdLab is being built; see the issue that owns 'sanqos lab'.
func cmdLab(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("'sanqos lab' is not available in this build yet")
}

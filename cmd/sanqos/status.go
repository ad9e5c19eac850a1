package main

import (
	"context"
	"errors"
	"io"
)

// cmdStatus is being built; see the issue that owns 'sanqos status'.
func cmdStatus(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("'sanqos status' is not available in this build yet")
}

package main

import (
	"context"
	"errors"
	"io"
)

// cmdThrottle is being built; see the issue that owns 'sanqos throttle'.
func cmdThrottle(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("'sanqos throttle' is not available in this build yet")
}

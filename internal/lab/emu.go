package lab

import (
	"context"
	"errors"
)

// serveEmu serves the emulated disk at mount over the files in backing
// until ctx is done; nil while internal/diskemu is not in this build.
var serveEmu func(ctx context.Context, mount, backing, profile string, seed int64) error

// ServeEmu serves the emulated disk until ctx is done (the hidden
// `sanqos lab diskemu` command).
func ServeEmu(ctx context.Context, mount, backing, profile string, seed int64) error {
	if serveEmu == nil {
		return errors.New("this build has no emulated disk (internal/diskemu)")
	}
	return serveEmu(ctx, mount, backing, profile, seed)
}

package lab

import (
	"context"

	"github.com/sanqos/sanqos/internal/lab/diskemu"
)

// serveEmu serves the emulated disk at mount over the image files in
// backing until ctx is done, then unmounts it.
func serveEmu(ctx context.Context, mount, backing, profile string, seed int64) error {
	return diskemu.Serve(ctx, diskemu.Options{Mountpoint: mount, BackingDir: backing, Profile: profile, Seed: seed})
}

// ServeEmu serves the emulated disk until ctx is done (the hidden
// `sanqos lab diskemu` command that `sanqos lab up` runs).
func ServeEmu(ctx context.Context, mount, backing, profile string, seed int64) error {
	return serveEmu(ctx, mount, backing, profile, seed)
}

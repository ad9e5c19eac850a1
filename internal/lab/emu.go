package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// startEmu serves the emulated disk, as a process of its own or in this
// one, and waits until it is mounted.
func (l *Lab) startEmu(ctx context.Context, opts Options) error {
	mp := emuMountpoint()
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("creating emulated disk mount point: %w", err)
	}
	var dead func() error
	if len(opts.EmuCommand) > 0 {
		argv := append(append([]string{}, opts.EmuCommand...),
			"--mount", mp, "--backing", emuBackingDir(),
			"--profile", opts.Storage.Profile, "--seed", strconv.FormatInt(opts.Seed, 10))
		p, err := startDetached(argv, filepath.Join(StateDir, "diskemu.log"), emuPidFile())
		if err != nil {
			return err
		}
		dead = func() error {
			if alive(p.Pid) && !isZombie(p.Pid) {
				return nil
			}
			log, _ := os.ReadFile(filepath.Join(StateDir, "diskemu.log"))
			return fmt.Errorf("the emulated disk exited: %s", strings.TrimSpace(string(log)))
		}
	} else {
		ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- serveEmu(ectx, mp, emuBackingDir(), opts.Storage.Profile, opts.Seed) }()
		var serveErr error
		l.stopEmu = func() {
			cancel()
			select {
			case serveErr = <-done:
			case <-time.After(10 * time.Second):
			}
		}
		dead = func() error {
			select {
			case err := <-done:
				return fmt.Errorf("the emulated disk stopped: %v", err)
			default:
				return nil
			}
		}
		_ = serveErr
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		mounts, err := labMounts()
		if err != nil {
			return err
		}
		for _, m := range mounts {
			if m == mp {
				return nil
			}
		}
		if err := dead(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the emulated disk did not mount %s within 15s", mp)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package diskemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// FSType is the file system type the mount shows in /proc/self/mountinfo
// ("fuse." + FSType); a stale mount is recognised by it.
const FSType = "sanqos-diskemu"

// Options configure a mount.
type Options struct {
	Mountpoint string // created if missing
	BackingDir string // holds the image files; created if missing
	// Profile names the model: "thesis-2010", "ssd", "ram" (internal/sim/diskmodel)
	// or "fixed:5ms" (one FIFO server with a constant service time).
	Profile string
	Seed    int64
	Logger  *slog.Logger // default slog.Default()

	// Model, when set, is used instead of Profile.
	Model Model
	// RegionBytes is the size of each file's region of the model's address
	// space, like LVs laid out one after another on one VG. Default: 64 GiB
	// or an eighth of the array, whichever is smaller (see regionFor). A
	// file larger than its region runs into the next region's addresses,
	// which only changes seek distances in the model.
	RegionBytes int64
	// StatsPath receives the Stats JSON every StatsInterval. Default
	// BackingDir/.sanqos-diskemu-stats.json; "-" disables the file.
	StatsPath     string
	StatsInterval time.Duration // default 1s
	Clock         clock.Clock   // default clock.Real
	// MaxBackground is the kernel's limit of asynchronous requests in flight
	// (async direct I/O from loop devices counts here). Default 128: deeper
	// than any array queue the lab drives, so the model sees the queue.
	MaxBackground int
	// MaxWrite is the largest READ/WRITE the kernel sends. Default 1 MiB,
	// the kernel's maximum, so a large request reaches the model whole.
	MaxWrite int
	// Nice, when non-zero, is set on every thread of the process (root
	// only for negative values), so the emulated latency does not grow with
	// the CPU load of the experiment. Serve, which owns its process, uses
	// ServeNice when Nice is 0; Mount leaves the process alone.
	Nice int
	// SyncDIO disables FUSE_ASYNC_DIO (see asyncdio_linux.go): the kernel
	// then sends each loop device's direct I/O one request at a time.
	SyncDIO bool
}

// ServeNice is Serve's default nice value: at load 8-11 on the lab's 2
// cores a 5 ms service was answered 12 ms late at nice 0 and 0.7 ms late at
// -10.
const ServeNice = -10

const (
	defaultMaxBackground = 128
	defaultMaxWrite      = 1 << 20
)

func (o *Options) fill() error {
	if o.Mountpoint == "" || o.BackingDir == "" {
		return errors.New("diskemu: both a mountpoint and a backing directory are needed (--mount DIR --backing DIR)")
	}
	var err error
	if o.Mountpoint, err = filepath.Abs(o.Mountpoint); err != nil {
		return fmt.Errorf("resolving mountpoint: %w", err)
	}
	if o.BackingDir, err = filepath.Abs(o.BackingDir); err != nil {
		return fmt.Errorf("resolving backing directory: %w", err)
	}
	if o.Mountpoint == o.BackingDir {
		return fmt.Errorf("diskemu: mountpoint and backing directory are both %s; use two directories", o.Mountpoint)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.StatsPath == "" {
		o.StatsPath = filepath.Join(o.BackingDir, ".sanqos-diskemu-stats.json")
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = time.Second
	}
	if o.MaxBackground <= 0 {
		o.MaxBackground = defaultMaxBackground
	}
	if o.MaxWrite <= 0 {
		o.MaxWrite = defaultMaxWrite
	}
	if o.Model == nil {
		if o.Profile == "" {
			return fmt.Errorf("diskemu: no disk profile given; use one of %s", ProfileNames())
		}
		m, err := NewModel(o.Profile, o.Seed)
		if err != nil {
			return err
		}
		o.Model = m
	} else if o.Profile == "" {
		o.Profile = fmt.Sprintf("%T", o.Model)
	}
	if o.RegionBytes <= 0 {
		o.RegionBytes = regionFor(o.Model)
	}
	return nil
}

// Server is a mounted emulated disk.
type Server struct {
	opts  Options
	vol   *volume
	fuse  *fuse.Server
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{} // closed when the stats loop has exited
	once  sync.Once
	err   error
	mount mountHandle
}

// Mount mounts the emulated disk and serves it in the background until
// Close. A stale mount of ours at the same path (a crashed earlier server) is
// lazily unmounted first.
func Mount(opts Options) (*Server, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	log := opts.Logger.With("component", "diskemu", "mount", opts.Mountpoint)
	// Before mkdir: a stale FUSE mount answers ENOTCONN to everything.
	if err := detachStale(opts.Mountpoint, log); err != nil {
		return nil, err
	}
	for _, d := range []string{opts.BackingDir, opts.Mountpoint} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	vol, err := newVolume(opts.BackingDir, opts.Model, opts.Clock, opts.RegionBytes, log)
	if err != nil {
		return nil, fmt.Errorf("reading backing directory %s: %w", opts.BackingDir, err)
	}
	if opts.Nice != 0 {
		if err := renice(opts.Nice); err != nil {
			return nil, err
		}
	}
	if _, real := opts.Clock.(clock.Real); real {
		if vol.waker, err = newWaker(); err != nil {
			return nil, err
		}
	}
	nfiles := len(vol.files) // before the mount: then only the FUSE side touches it
	s := &Server{opts: opts, vol: vol, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.mountFS(&rootNode{vol: vol}); err != nil {
		if vol.waker != nil {
			vol.waker.close()
		}
		return nil, err
	}
	go s.statsLoop()
	log.Info("emulated disk mounted", "backing", opts.BackingDir, "profile", opts.Profile,
		"async_dio", !opts.SyncDIO, "files", nfiles)
	return s, nil
}

// Serve mounts the emulated disk, serves it until ctx is done (or the mount
// goes away), then unmounts.
func Serve(ctx context.Context, opts Options) error {
	if opts.Nice == 0 {
		opts.Nice = ServeNice
	}
	s, err := Mount(opts)
	if err != nil {
		return err
	}
	gone := make(chan struct{})
	go func() { s.fuse.Wait(); close(gone) }()
	select {
	case <-ctx.Done():
	case <-gone:
		s.log.Warn("mount went away (unmounted from outside?)")
	}
	return s.Close()
}

// Mountpoint returns the absolute mount path.
func (s *Server) Mountpoint() string { return s.opts.Mountpoint }

// Stats returns the counters since mount.
func (s *Server) Stats() Stats {
	st := Stats{Time: s.opts.Clock.Now(), Profile: s.opts.Profile, IOStats: s.vol.total.snapshot(),
		MaxInFlight: s.vol.maxInFlight.Load()}
	s.vol.mu.Lock()
	for _, f := range s.vol.files {
		st.Files = append(st.Files, FileStats{Name: f.name, RegionOffset: f.slot * s.vol.region, IOStats: f.c.snapshot()})
	}
	s.vol.mu.Unlock()
	if m, ok := s.vol.model.(interface{ Stats() diskmodel.Stats }); ok {
		ms := m.Stats()
		st.Model = &ms
	}
	return st
}

func (s *Server) statsLoop() {
	defer close(s.done)
	if s.opts.StatsPath == "-" {
		<-s.stop
		return
	}
	t := s.opts.Clock.NewTicker(s.opts.StatsInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-s.stop:
			if err := writeStatsFile(s.opts.StatsPath, s.Stats()); err != nil {
				s.log.Warn("final stats not written", "err", err)
			}
			return
		case <-t.C():
			err := writeStatsFile(s.opts.StatsPath, s.Stats())
			if err != nil && !failing {
				s.log.Warn("stats file not written", "err", err)
			}
			failing = err != nil
		}
	}
}

// Close unmounts and stops serving. If the mount is busy (a loop device
// still holds an image) it is detached lazily and an error says so; the
// server then keeps answering the remaining users until they let go or the
// process exits (after which their I/O fails).
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.err = s.unmount()
		if s.vol.waker != nil && s.err == nil {
			// Not after a lazy detach: the kernel may still send I/O.
			s.vol.waker.close()
		}
	})
	return s.err
}

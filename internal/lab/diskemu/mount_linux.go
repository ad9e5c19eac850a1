package diskemu

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/sanqos/sanqos/internal/observe/mountinfo"
	"golang.org/x/sys/unix"
)

// mountHandle is what Close needs to undo a mount.
type mountHandle struct {
	dev string // "major:minor" of the mount, to recognise it in mountinfo
	id  uint64 // statx unique mount id (never reused, unlike dev); 0 if unknown
}

// uniqueMountID returns the never-reused id of the mount at mp (Linux 6.8+).
func uniqueMountID(mp string) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, mp, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, errors.New("kernel has no unique mount ids")
	}
	return stx.Mnt_id, nil
}

// mountFS mounts the file system itself (open /dev/fuse, mount(2)) instead
// of letting go-fuse do it, so that the INIT handshake can grant
// FUSE_ASYNC_DIO (see asyncdio_linux.go); go-fuse serves the descriptor
// through its "/dev/fd/N" convention.
func (s *Server) mountFS(root fs.InodeEmbedder) error {
	o := &s.opts
	kfd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/fuse (is the fuse module available, are we root?): %w", err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other,max_read=%d",
		kfd, os.Geteuid(), os.Getegid(), o.MaxWrite)
	if err := unix.Mount(FSType, o.Mountpoint, "fuse."+FSType, unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		unix.Close(kfd)
		return fmt.Errorf("mounting fuse on %s: %w", o.Mountpoint, err)
	}
	serverFd := kfd
	var shim *initShim
	if !o.SyncDIO {
		if shim, err = startInitShim(kfd); err != nil {
			unix.Unmount(o.Mountpoint, unix.MNT_DETACH)
			unix.Close(kfd)
			return err
		}
		serverFd = shim.theirs
	}
	// fail undoes the mount; goFuseOwns says go-fuse already closed its
	// descriptor (NewServer does when INIT fails).
	fail := func(err error, goFuseOwns bool) error {
		unix.Unmount(o.Mountpoint, unix.MNT_DETACH)
		if shim != nil {
			shim.abort(!goFuseOwns)
			closeFd(&shim.kfd)
		} else if !goFuseOwns {
			unix.Close(kfd)
		}
		return err
	}
	fo := s.fuseOptions()
	// NewServer does the INIT handshake before it returns.
	srv, err := fuse.NewServer(fs.NewNodeFS(root, fo), fmt.Sprintf("/dev/fd/%d", serverFd), &fo.MountOptions)
	if err != nil {
		return fail(fmt.Errorf("starting fuse server: %w", err), true)
	}
	if shim != nil {
		granted, err := shim.finish()
		if err != nil {
			// go-fuse is not serving yet: its descriptor is ours to close.
			return fail(err, false)
		}
		if !granted {
			s.log.Warn("kernel did not offer FUSE_ASYNC_DIO; loop devices will see queue depth 1")
		}
	}
	s.fuse = srv
	go srv.Serve()
	return s.settle()
}

// fuseOptions are go-fuse's options for the mount.
func (s *Server) fuseOptions() *fs.Options {
	one := time.Second
	return &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:        FSType,
			Name:          FSType,
			MaxBackground: s.opts.MaxBackground,
			MaxWrite:      s.opts.MaxWrite,
			DisableXAttrs: true,
			Logger:        log.New(slogWriter{s.log}, "", 0),
		},
		EntryTimeout: &one,
		AttrTimeout:  &one,
	}
}

// settle waits for the served mount and records its identity; on a
// failure it detaches it.
func (s *Server) settle() error {
	o := &s.opts
	if err := s.fuse.WaitMount(); err != nil {
		unix.Unmount(o.Mountpoint, unix.MNT_DETACH)
		return fmt.Errorf("waiting for the fuse mount: %w", err)
	}
	// go-fuse cannot run its poll hack on a /dev/fd/N mount: tell the kernel
	// now that POLL is not implemented, before any Go code in this process
	// registers a file of the mount with the netpoller and waits on us.
	if f, err := unix.Open(filepath.Join(o.Mountpoint, ".go-fuse-epoll-hack"), unix.O_RDONLY, 0); err == nil {
		unix.Poll([]unix.PollFd{{Fd: int32(f), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
		unix.Close(f)
	}
	var st unix.Stat_t
	if err := unix.Stat(o.Mountpoint, &st); err != nil {
		unix.Unmount(o.Mountpoint, unix.MNT_DETACH)
		return fmt.Errorf("checking the new mount %s: %w", o.Mountpoint, err)
	}
	s.mount.dev = fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	s.mount.id, _ = uniqueMountID(o.Mountpoint) // 0: fall back to dev
	return nil
}

// unmount tries a clean unmount for a few seconds (a process may be just
// closing an image), then detaches lazily.
func (s *Server) unmount() error {
	mp := s.opts.Mountpoint
	if !s.mounted() {
		// Detached or aborted from outside; what is at mp now (if
		// anything) is not ours to unmount.
		s.log.Warn("mount already gone")
		return nil
	}
	var err error
	for i := 0; i < 20; i++ {
		if err = unix.Unmount(mp, 0); err == nil || !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: no longer mounted
		if derr := unix.Unmount(mp, unix.MNT_DETACH); derr != nil && !errors.Is(derr, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w (lazy unmount: %v)", mp, err, derr)
		}
		return fmt.Errorf("unmounting %s: %w; detached lazily, images still open (loop devices? losetup -j) fail once this process exits", mp, err)
	}
	s.log.Info("emulated disk unmounted")
	waitDone := make(chan struct{})
	go func() { s.fuse.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(5 * time.Second):
		s.log.Warn("fuse server loops did not stop within 5s after unmount")
	}
	return nil
}

// mounted reports whether our mount (same device) is still at the mountpoint.
func (s *Server) mounted() bool {
	if s.mount.id != 0 {
		// A dead FUSE mount answers ENOTCONN; then only the device tells.
		if id, err := uniqueMountID(s.opts.Mountpoint); err == nil {
			return id == s.mount.id
		}
	}
	// Device numbers are reused once a mount is gone, so this can mistake
	// a newer mount for ours; the unique id above avoids that.
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return true // cannot tell: try to unmount
	}
	for _, m := range ms {
		if m.Point == s.opts.Mountpoint && m.Dev() == s.mount.dev {
			return true
		}
	}
	return false
}

// detachStale lazily unmounts a mount of ours left at mp by a crashed server
// and refuses to mount over anything else.
func detachStale(mp string, log *slog.Logger) error {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if m.Point != mp {
			continue
		}
		if m.FSType != "fuse."+FSType {
			return fmt.Errorf("%s already has a %s mount; unmount it or choose another mountpoint", mp, m.FSType)
		}
		log.Warn("lazily unmounting a stale emulated disk", "mount", mp)
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting stale mount %s: %w", mp, err)
		}
	}
	return nil
}

// slogWriter sends go-fuse's log.Logger output to slog at debug level.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug("go-fuse", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

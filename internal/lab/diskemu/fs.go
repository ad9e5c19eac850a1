package diskemu

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sanqos/sanqos/internal/clock"
)

// volume is the state shared by every node of one mount.
type volume struct {
	backing string
	model   Model
	clk     clock.Clock
	region  int64
	log     *slog.Logger
	waker   *waker // precise real-time waits; nil with a non-real clock

	total       counters
	maxInFlight atomic.Int64

	mu       sync.Mutex
	files    map[string]*fileState // by name; kept after unlink so a re-created name keeps its region
	nextSlot int64
}

// fileState is what the volume knows about one image name.
type fileState struct {
	name   string
	slot   int64
	stream uint64
	c      counters
}

func newVolume(backing string, m Model, clk clock.Clock, region int64, log *slog.Logger) (*volume, error) {
	v := &volume{backing: backing, model: m, clk: clk, region: region, log: log, files: map[string]*fileState{}}
	// Regions follow the sorted names present at mount, so a restart over the
	// same backing directory places the same images at the same offsets.
	names, err := v.list()
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		v.file(n)
	}
	return v, nil
}

// list returns the visible regular files of the backing directory, sorted.
func (v *volume) list() ([]string, error) {
	ents, err := os.ReadDir(v.backing)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if visible(e.Name()) && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// visible reports whether a backing file is part of the mount. Dot files are
// the server's own (the stats file and its temporaries).
func visible(name string) bool { return !strings.HasPrefix(name, ".") }

func (v *volume) file(name string) *fileState {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.files[name]
	if !ok {
		f = &fileState{name: name, slot: v.nextSlot, stream: uint64(v.nextSlot) + 1}
		v.nextSlot++
		v.files[name] = f
	}
	return f
}

func (v *volume) path(name string) string { return filepath.Join(v.backing, name) }

// rootNode is the single, flat directory of the mount.
type rootNode struct {
	fs.Inode
	vol *volume
}

var (
	_ fs.NodeLookuper  = (*rootNode)(nil)
	_ fs.NodeReaddirer = (*rootNode)(nil)
	_ fs.NodeCreater   = (*rootNode)(nil)
	_ fs.NodeUnlinker  = (*rootNode)(nil)
	_ fs.NodeGetattrer = (*rootNode)(nil)
	_ fs.NodeStatfser  = (*rootNode)(nil)
)

func (r *rootNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Stat(r.vol.backing, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.vol.backing, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !visible(name) {
		return nil, syscall.ENOENT
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(r.vol.path(name), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, syscall.ENOENT
	}
	out.Attr.FromStat(&st)
	return r.child(ctx, name, &st), 0
}

func (r *rootNode) child(ctx context.Context, name string, st *syscall.Stat_t) *fs.Inode {
	n := &fileNode{vol: r.vol, file: r.vol.file(name)}
	return r.NewInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG, Ino: st.Ino})
}

func (r *rootNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	names, err := r.vol.list()
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	ents := make([]fuse.DirEntry, 0, len(names))
	for _, n := range names {
		ents = append(ents, fuse.DirEntry{Name: n, Mode: syscall.S_IFREG})
	}
	return fs.NewListDirStream(ents), 0
}

func (r *rootNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !visible(name) {
		// Dot names are reserved for the server's own files.
		return nil, nil, 0, syscall.EPERM
	}
	f, err := os.OpenFile(r.vol.path(name), backingFlags(flags)|int(flags)&syscall.O_EXCL|os.O_CREATE, os.FileMode(mode&0o7777))
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, nil, 0, fs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	ch := r.child(ctx, name, &st)
	fn := ch.Operations().(*fileNode)
	return ch, &handle{vol: r.vol, file: fn.file, f: f}, fuse.FOPEN_DIRECT_IO, 0
}

func (r *rootNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if !visible(name) {
		return syscall.ENOENT
	}
	return fs.ToErrno(os.Remove(r.vol.path(name)))
}

// backingFlags keeps the access mode and O_TRUNC of an open. O_APPEND is
// dropped because the kernel already sends the offset of an append, and
// pwrite on an O_APPEND descriptor would ignore it; O_DIRECT is dropped because
// the latency comes from the model, not from the backing disk.
func backingFlags(flags uint32) int {
	return int(flags)&(syscall.O_ACCMODE|syscall.O_TRUNC) | syscall.O_CLOEXEC
}

// fileNode is one LUN image.
type fileNode struct {
	fs.Inode
	vol  *volume
	file *fileState
}

var (
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
)

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f, err := os.OpenFile(n.vol.path(n.file.name), backingFlags(flags), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	return &handle{vol: n.vol, file: n.file, f: f}, fuse.FOPEN_DIRECT_IO, 0
}

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Getattr(ctx, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(n.vol.path(n.file.name), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	p := n.vol.path(n.file.name)
	if sz, ok := in.GetSize(); ok {
		var err error
		if h, ok := fh.(*handle); ok {
			err = h.f.Truncate(int64(sz))
		} else {
			err = os.Truncate(p, int64(sz))
		}
		if err != nil {
			return fs.ToErrno(err)
		}
	}
	if m, ok := in.GetMode(); ok {
		if err := os.Chmod(p, os.FileMode(m&0o7777)); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := os.Chown(p, u, g); err != nil {
			return fs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return fs.ToErrno(err)
		}
		ts := []syscall.Timespec{st.Atim, st.Mtim}
		if aok {
			ts[0] = syscall.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = syscall.NsecToTimespec(mtime.UnixNano())
		}
		if err := syscall.UtimesNano(p, ts); err != nil {
			return fs.ToErrno(err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

// handle is one open of an image; every READ and WRITE goes through the model.
type handle struct {
	vol  *volume
	file *fileState
	f    *os.File
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.io(ctx, Read, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.io(ctx, Write, data, off)
	if err != nil {
		return uint32(n), fs.ToErrno(err)
	}
	return uint32(n), 0
}

// io submits the request to the model, does the real pread/pwrite, and
// returns no earlier than the model's completion time.
func (h *handle) io(ctx context.Context, op Op, buf []byte, off int64) (int, error) {
	v := h.vol
	v.total.begin()
	h.file.c.begin()
	for q := v.total.inFlight.Load(); ; q = v.total.inFlight.Load() {
		m := v.maxInFlight.Load()
		if q <= m || v.maxInFlight.CompareAndSwap(m, q) {
			break
		}
	}
	arrive := v.clk.Now()
	done := v.model.Submit(arrive, op, h.file.slot*v.region+off, int64(len(buf)), h.file.stream)

	var n int
	var err error
	t0 := v.clk.Now()
	if op == Read {
		n, err = h.f.ReadAt(buf, off)
		if errors.Is(err, io.EOF) {
			err = nil // a short read at the end of the image
		}
	} else {
		n, err = h.f.WriteAt(buf, off)
	}
	backing := v.clk.Now().Sub(t0)
	// Interrupted (ctx done): answer now rather than hold the caller.
	if v.waker != nil {
		v.waker.wait(ctx, done)
	} else if d := done.Sub(v.clk.Now()); d > 0 {
		select {
		case <-v.clk.After(d):
		case <-ctx.Done():
		}
	}
	lat := v.clk.Now().Sub(arrive)
	svc := done.Sub(arrive)
	v.total.end(op, n, svc, lat, backing)
	h.file.c.end(op, n, svc, lat, backing)
	return n, err
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.vol.total.fsyncs.Add(1)
	h.file.c.fsyncs.Add(1)
	return fs.ToErrno(h.f.Sync())
}

func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno { return fs.ToErrno(h.f.Close()) }

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return fs.ToErrno(syscall.Fallocate(int(h.f.Fd()), mode, int64(off), int64(size)))
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(h.f.Fd()), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

package main

/*
#cgo pkg-config: libnfs
#include <stdlib.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <nfsc/libnfs.h>

#include <poll.h>
#include <errno.h>

#include "sigmask.h" // sq_block, sq_restore: libnfs polls as libiscsi does
#include "ring.h"    // the completion ring of --iodepth > 1

// sqn_cb is every asynchronous READ's and WRITE's callback, run inside
// nfs_service on the connection's thread: err is the bytes moved or a
// negative errno; a READ's data is only valid here, so it is copied into
// the tag's buffer.
static void sqn_cb(int err, struct nfs_context *n, void *data, void *priv) {
	sq_ring_push((struct sq_slot *)priv, err, NULL);
}
static void sqn_read_cb(int err, struct nfs_context *n, void *data, void *priv) {
	struct sq_slot *s = priv;
	if (err > 0 && data != NULL)
		memcpy(sq_ring_buf(s->r, s->tag), data, err <= s->r->bs ? err : s->r->bs);
	sq_ring_push(s, err, NULL);
}
static int sqn_start(struct nfs_context *n, struct nfsfh *fh, struct sq_ring *r, int tag, int write, uint64_t off, uint64_t count) {
	if (write)
		return nfs_pwrite_async(n, fh, off, count, sq_ring_buf(r, tag), sqn_cb, &r->slots[tag]);
	return nfs_pread_async(n, fh, off, count, sqn_read_cb, &r->slots[tag]);
}
// sqn_wait is sq_wait of iscsi.go for libnfs.
static int sqn_wait(struct nfs_context *n, struct sq_ring *r, int timeout_ms) {
	if (r->ndone > 0) return r->ndone;
	sigset_t old; sq_block(&old);
	struct pollfd pfd = { .fd = nfs_get_fd(n), .events = nfs_which_events(n) };
	int k = poll(&pfd, 1, pfd.events ? timeout_ms : (timeout_ms < 10 ? timeout_ms : 10));
	int rc = 0;
	if (k < 0 && errno != EINTR) rc = -1;
	else if (nfs_service(n, k > 0 ? pfd.revents : 0) < 0) rc = -1;
	sq_restore(&old);
	return rc < 0 ? rc : r->ndone;
}

static int sqn_mount(struct nfs_context *n, const char *server, const char *export) {
	sigset_t old; sq_block(&old);
	int r = nfs_mount(n, server, export);
	sq_restore(&old);
	return r;
}
static int sqn_open(struct nfs_context *n, const char *path, int flags, struct nfsfh **fh) {
	sigset_t old; sq_block(&old);
	int r = nfs_open(n, path, flags, fh);
	sq_restore(&old);
	return r;
}
static int sqn_create(struct nfs_context *n, const char *path, int flags, struct nfsfh **fh) {
	sigset_t old; sq_block(&old);
	int r = nfs_create(n, path, flags, 0644, fh);
	sq_restore(&old);
	return r;
}
static int sqn_size(struct nfs_context *n, struct nfsfh *fh, uint64_t *size) {
	sigset_t old; sq_block(&old);
	struct nfs_stat_64 st;
	int r = nfs_fstat64(n, fh, &st);
	sq_restore(&old);
	if (r == 0) *size = st.nfs_size;
	return r;
}
static int sqn_ftruncate(struct nfs_context *n, struct nfsfh *fh, uint64_t len) {
	sigset_t old; sq_block(&old);
	int r = nfs_ftruncate(n, fh, len);
	sq_restore(&old);
	return r;
}
static int sqn_pread(struct nfs_context *n, struct nfsfh *fh, uint64_t off, uint64_t count, void *buf) {
	sigset_t old; sq_block(&old);
	int r = nfs_pread(n, fh, off, count, buf);
	sq_restore(&old);
	return r;
}
static int sqn_pwrite(struct nfs_context *n, struct nfsfh *fh, uint64_t off, uint64_t count, const void *buf) {
	sigset_t old; sq_block(&old);
	int r = nfs_pwrite(n, fh, off, count, buf);
	sq_restore(&old);
	return r;
}
static int sqn_fsync(struct nfs_context *n, struct nfsfh *fh) {
	sigset_t old; sq_block(&old);
	int r = nfs_fsync(n, fh);
	sq_restore(&old);
	return r;
}
static int sqn_close(struct nfs_context *n, struct nfsfh *fh) {
	sigset_t old; sq_block(&old);
	int r = nfs_close(n, fh);
	sq_restore(&old);
	return r;
}
static int sqn_umount(struct nfs_context *n) {
	sigset_t old; sq_block(&old);
	int r = nfs_umount(n);
	sq_restore(&old);
	return r;
}
*/
import "C"

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// nfsTarget is an export and a file name pattern, from --nfs and
// --nfs-file.
type nfsTarget struct {
	Server, Export string
	// File is the thread's file on the export, "%d" replaced by the
	// thread number (1..N).
	File string
}

// parseNFSURL reads nfs://HOST/EXPORT. Only the default port (2049,
// found through the server's portmapper as an NFS client does) is
// supported: libnfs 4.0 takes no port for NFSv3.
func parseNFSURL(s string) (server, export string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "nfs" || u.Host == "" || u.Path == "" || u.RawQuery != "" {
		return "", "", fmt.Errorf("--nfs %q: want nfs://HOST/EXPORT, e.g. nfs://10.213.0.253/srv/export", s)
	}
	if u.Port() != "" {
		return "", "", fmt.Errorf("--nfs %q: leave the port out: the client asks the server's portmapper (port 111) for NFS and MOUNT", s)
	}
	return u.Hostname(), u.Path, nil
}

// fileName is thread n's file on the export, an absolute path.
func (t nfsTarget) fileName(thread int) string {
	name := t.File
	if strings.Contains(name, "%d") {
		name = strings.Replace(name, "%d", fmt.Sprint(thread), 1)
	} else {
		name = fmt.Sprintf("%s.%d", name, thread)
	}
	return "/" + strings.TrimPrefix(name, "/")
}

// nfsConfig is what one thread's NFS file is opened with.
type nfsConfig struct {
	nfsTarget
	Thread int
	// Size is what a file the thread creates is sized to (offset +
	// size of the job); Fill writes its data (a reader's file, so
	// that reads reach the disk rather than a hole).
	Size    int64
	Fill    bool
	Timeout int // seconds per RPC; 0: none
	// Unstable opens the file without O_SYNC: WRITEs are UNSTABLE (the
	// server may cache them) and Sync sends the COMMIT that makes them
	// stable, as a kernel client's buffered writes and fsync do.
	Unstable bool
}

// nfsFile is one thread's own file on an NFSv3 export, through its own
// libnfs context and TCP connection. Writes are FILE_SYNC (the file is
// opened O_SYNC): each is on the server's disk when it completes, as a
// write with fio's direct=1 is on the LUN; with Unstable (--fsync) they
// are UNSTABLE until Sync commits them. Its methods must be called
// from the OS thread that opened it.
type nfsFile struct {
	ctx  *C.struct_nfs_context
	fh   *C.struct_nfsfh
	size int64
	path string
	// broken is set when the connection failed under an I/O.
	broken bool
	// ring, with --iodepth > 1, holds the outstanding RPCs' buffers and
	// completions; reads is each tag's destination, lens its length.
	ring  *ring
	reads [][]byte
	lens  []int
	done  []ringDone
}

// openNFS mounts the export, opens the thread's file (creating and
// sizing it when it is missing) and reads its size.
func openNFS(c nfsConfig) (*nfsFile, error) {
	ctx := C.nfs_init_context()
	if ctx == nil {
		return nil, fmt.Errorf("creating an NFS context failed (out of memory?)")
	}
	f := &nfsFile{ctx: ctx, path: c.fileName(c.Thread)}
	ok := false
	defer func() {
		if !ok {
			C.nfs_destroy_context(ctx)
		}
	}()
	// NFSv3: libnfs cannot write NFSv4 to ganesha. A dropped
	// connection is a failure to report, not to hide by reconnecting
	// (as in iscsi.go).
	C.nfs_set_version(ctx, 3) // NFS_V3, from libnfs-raw-nfs.h
	C.nfs_set_autoreconnect(ctx, 0)
	if c.Timeout > 0 {
		C.nfs_set_timeout(ctx, C.int(c.Timeout*1000))
	}
	cServer, cExport := C.CString(c.Server), C.CString(c.Export)
	defer C.free(unsafe.Pointer(cServer))
	defer C.free(unsafe.Pointer(cExport))
	if r := C.sqn_mount(ctx, cServer, cExport); r != 0 {
		return nil, fmt.Errorf("mounting %s:%s: %s — is the export right and nfs-ganesha running in the target namespace?", c.Server, c.Export, f.errText(r))
	}
	if err := f.open(c); err != nil {
		C.sqn_umount(ctx)
		return nil, err
	}
	ok = true
	return f, nil
}

// open opens the file, or creates it at c.Size when it is missing.
func (f *nfsFile) open(c nfsConfig) error {
	cPath := C.CString(f.path)
	defer C.free(unsafe.Pointer(cPath))
	flags := C.int(C.O_RDWR | C.O_SYNC)
	if c.Unstable {
		flags = C.int(C.O_RDWR)
	}
	r := C.sqn_open(f.ctx, cPath, flags, &f.fh)
	created := false
	if r == -C.int(syscall.ENOENT) {
		if c.Size <= 0 {
			return fmt.Errorf("%s does not exist on %s:%s; give --size to create it", f.path, c.Server, c.Export)
		}
		r, created = C.sqn_create(f.ctx, cPath, flags, &f.fh), true
	}
	if r != 0 {
		return fmt.Errorf("opening %s on %s:%s: %s", f.path, c.Server, c.Export, f.errText(r))
	}
	var size C.uint64_t
	if r := C.sqn_size(f.ctx, f.fh, &size); r != 0 {
		f.closeFile()
		return fmt.Errorf("reading the size of %s: %s", f.path, f.errText(r))
	}
	f.size = int64(size)
	if created || f.size < c.Size {
		if err := f.grow(c.Size, c.Fill); err != nil {
			f.closeFile()
			return err
		}
	}
	return nil
}

// grow sizes the file to size: with fill by writing data (a hole reads
// as zeros without touching the disk), else by truncating.
func (f *nfsFile) grow(size int64, fill bool) error {
	if !fill {
		if r := C.sqn_ftruncate(f.ctx, f.fh, C.uint64_t(size)); r != 0 {
			return fmt.Errorf("sizing %s to %d bytes: %s", f.path, size, f.errText(r))
		}
		f.size = size
		return nil
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	for off := f.size; off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		if err := f.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("filling %s: %w", f.path, err)
		}
	}
	f.size = size
	return nil
}

// errText is libnfs's message for a failed call that returned r.
func (f *nfsFile) errText(r C.int) string {
	msg := strings.TrimSpace(C.GoString(C.nfs_get_error(f.ctx)))
	if msg == "" {
		msg = syscall.Errno(-r).Error()
	}
	return msg
}

func (f *nfsFile) Capacity() int64 { return f.size }

// BlockSize is the unit offsets and --bs must be multiples of: NFS has
// none, and 512 keeps the jobs' checks those of a LUN.
func (f *nfsFile) BlockSize() int64 { return 512 }

// ReadAt reads len(p) bytes at off with READ.
func (f *nfsFile) ReadAt(p []byte, off int64) error {
	r := C.sqn_pread(f.ctx, f.fh, C.uint64_t(off), C.uint64_t(len(p)), unsafe.Pointer(&p[0]))
	if r < 0 {
		f.broken = true
		return fmt.Errorf("READ: %s", f.errText(r))
	}
	if int(r) != len(p) {
		return fmt.Errorf("READ: %d of %d bytes (the file ends at %d)", int(r), len(p), f.size)
	}
	return nil
}

// WriteAt writes p at off with FILE_SYNC WRITEs.
func (f *nfsFile) WriteAt(p []byte, off int64) error {
	r := C.sqn_pwrite(f.ctx, f.fh, C.uint64_t(off), C.uint64_t(len(p)), unsafe.Pointer(&p[0]))
	if r < 0 {
		f.broken = true
		return fmt.Errorf("WRITE: %s", f.errText(r))
	}
	if int(r) != len(p) {
		return fmt.Errorf("WRITE: %d of %d bytes", int(r), len(p))
	}
	return nil
}

// Sync commits the file's UNSTABLE writes to the server's disk (COMMIT).
func (f *nfsFile) Sync() error {
	if r := C.sqn_fsync(f.ctx, f.fh); r < 0 {
		f.broken = true
		return fmt.Errorf("COMMIT: %s", f.errText(r))
	}
	return nil
}

func (f *nfsFile) closeFile() {
	if f.fh != nil {
		C.sqn_close(f.ctx, f.fh)
		f.fh = nil
	}
}

// Close closes the file, unmounts (MOUNT's UMNT) and frees the context;
// after a failed I/O it only frees, as waiting on a dead connection
// would add nothing.
func (f *nfsFile) Close() error {
	var err error
	if !f.broken {
		if f.fh != nil {
			if r := C.sqn_close(f.ctx, f.fh); r != 0 {
				err = fmt.Errorf("closing %s: %s", f.path, f.errText(r))
			}
			f.fh = nil
		}
		C.sqn_umount(f.ctx)
	}
	C.nfs_destroy_context(f.ctx)
	f.ctx = nil
	if f.ring != nil {
		f.ring.free()
		f.ring = nil
	}
	return err
}

// StartAsync prepares depth tags of up to bs bytes (AsyncDevice).
func (f *nfsFile) StartAsync(depth int, bs int64) error {
	r, err := newRing(depth, int(bs))
	if err != nil {
		return err
	}
	f.ring, f.reads, f.lens = r, make([][]byte, depth), make([]int, depth)
	return nil
}

// Issue queues a READ into p or a FILE_SYNC WRITE of p (copied) under
// tag; the RPC goes out in the next Reap.
func (f *nfsFile) Issue(tag int, write bool, p []byte, off int64) error {
	w := C.int(0)
	f.reads[tag], f.lens[tag] = nil, len(p)
	if write {
		f.ring.put(tag, p)
		w = 1
	} else {
		f.reads[tag] = p
	}
	if r := C.sqn_start(f.ctx, f.fh, f.ring.r, C.int(tag), w, C.uint64_t(off), C.uint64_t(len(p))); r != 0 {
		f.broken = true
		return fmt.Errorf("queueing an RPC: %s", f.errText(r))
	}
	return nil
}

// Reap sends what is queued and takes the completions that arrived,
// waiting up to timeout for the connection (AsyncDevice).
func (f *nfsFile) Reap(into []Completion, timeout time.Duration) ([]Completion, error) {
	if r := C.sqn_wait(f.ctx, f.ring.r, C.int(timeout.Milliseconds())); r < 0 {
		f.broken = true
		return into, fmt.Errorf("the connection failed: %s", f.errText(r))
	}
	f.done = f.ring.take(f.done[:0])
	for _, d := range f.done {
		c := Completion{Tag: d.tag}
		op := "WRITE"
		if f.reads[d.tag] != nil {
			op = "READ"
		}
		switch {
		case d.status < 0:
			c.Err = fmt.Errorf("%s: %s", op, f.errText(C.int(d.status)))
		case d.status != f.lens[d.tag]:
			c.Err = fmt.Errorf("%s: %d of %d bytes", op, d.status, f.lens[d.tag])
		case f.reads[d.tag] != nil:
			f.ring.get(d.tag, f.reads[d.tag])
		}
		f.reads[d.tag] = nil
		into = append(into, c)
	}
	return into, nil
}

// nfsProbeAddr is the address whose TCP port the NFS transport checks
// before mounting: the server's NFS port.
func nfsProbeAddr(server string) string { return net.JoinHostPort(server, "2049") }

package main

/*
#cgo pkg-config: libiscsi
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <pthread.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include <poll.h>
#include <errno.h>

#include "sigmask.h" // sq_block, sq_restore: why, there
#include "ring.h"    // the completion ring of --iodepth > 1

// sq_task_cb is every asynchronous command's callback: it runs inside
// iscsi_service, on the connection's thread, and only records.
static void sq_task_cb(struct iscsi_context *c, int status, void *command_data, void *priv) {
	sq_ring_push((struct sq_slot *)priv, status, command_data);
}
// sq_start queues READ(16) or WRITE(16) for tag; iscsi_service sends it.
static int sq_start(struct iscsi_context *c, struct sq_ring *r, int tag, int write, int lun, uint64_t lba, uint32_t len, int bs) {
	struct scsi_task *t;
	if (write)
		t = iscsi_write16_task(c, lun, lba, sq_ring_buf(r, tag), len, bs, 0, 0, 0, 0, 0, sq_task_cb, &r->slots[tag]);
	else
		t = iscsi_read16_task(c, lun, lba, len, bs, 0, 0, 0, 0, 0, sq_task_cb, &r->slots[tag]);
	return t == NULL ? -1 : 0;
}
// sq_wait waits up to timeout_ms (0: not at all) for the connection to be
// ready, services it once — sending what is queued, reading responses,
// which run the callbacks; with no events, timing commands out — and
// returns the number of completions in the ring, or -1 when the
// connection failed.
static int sq_wait(struct iscsi_context *c, struct sq_ring *r, int timeout_ms) {
	if (r->ndone > 0) return r->ndone;
	sigset_t old; sq_block(&old);
	struct pollfd pfd = { .fd = iscsi_get_fd(c), .events = iscsi_which_events(c) };
	int n = poll(&pfd, 1, pfd.events ? timeout_ms : (timeout_ms < 10 ? timeout_ms : 10));
	int rc = 0;
	if (n < 0 && errno != EINTR) rc = -1;
	else if (iscsi_service(c, n > 0 ? pfd.revents : 0) < 0) rc = -1;
	sq_restore(&old);
	return rc < 0 ? rc : r->ndone;
}

static int sq_full_connect(struct iscsi_context *c, const char *portal, int lun) {
	sigset_t old; sq_block(&old);
	int r = iscsi_full_connect_sync(c, portal, lun);
	sq_restore(&old);
	return r;
}
static struct scsi_task *sq_readcapacity16(struct iscsi_context *c, int lun) {
	sigset_t old; sq_block(&old);
	struct scsi_task *t = iscsi_readcapacity16_sync(c, lun);
	sq_restore(&old);
	return t;
}
static struct scsi_task *sq_read16(struct iscsi_context *c, int lun, uint64_t lba, uint32_t len, int bs) {
	sigset_t old; sq_block(&old);
	struct scsi_task *t = iscsi_read16_sync(c, lun, lba, len, bs, 0, 0, 0, 0, 0);
	sq_restore(&old);
	return t;
}
static struct scsi_task *sq_write16(struct iscsi_context *c, int lun, uint64_t lba, unsigned char *data, uint32_t len, int bs) {
	sigset_t old; sq_block(&old);
	struct scsi_task *t = iscsi_write16_sync(c, lun, lba, data, len, bs, 0, 0, 0, 0, 0);
	sq_restore(&old);
	return t;
}
// sq_sync is SYNCHRONIZE CACHE(10) of the whole LUN (lba 0, 0 blocks:
// to its end), waiting for the target to report it done.
static struct scsi_task *sq_sync(struct iscsi_context *c, int lun) {
	sigset_t old; sq_block(&old);
	struct scsi_task *t = iscsi_synchronizecache10_sync(c, lun, 0, 0, 0, 0);
	sq_restore(&old);
	return t;
}
static int sq_logout(struct iscsi_context *c) {
	sigset_t old; sq_block(&old);
	int r = iscsi_logout_sync(c);
	sq_restore(&old);
	return r;
}

// Accessors, because cgo cannot reach into these structs portably.
static int task_status(struct scsi_task *t) { return t->status; }
static int task_sense_key(struct scsi_task *t) { return t->sense.key; }
static int task_sense_ascq(struct scsi_task *t) { return t->sense.ascq; }
static int task_copy_in(struct scsi_task *t, void *dst, int n) {
	if (t->datain.size < n) return -1;
	memcpy(dst, t->datain.data, n);
	return 0;
}
static int task_copy_to(struct scsi_task *t, unsigned char *dst, int n) {
	if (t->datain.size < n) return -1;
	memcpy(dst, t->datain.data, n);
	return 0;
}
static int rc16(struct scsi_task *t, unsigned long long *lba, unsigned int *bl) {
	struct scsi_readcapacity16 *rc = scsi_datain_unmarshall(t);
	if (rc == NULL) return -1;
	*lba = rc->returned_lba;
	*bl = rc->block_length;
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// session is one libiscsi context logged in to one LUN. Its methods must
// be called from the OS thread that created it.
type session struct {
	ctx      *C.struct_iscsi_context
	lun      C.int
	blockLen int64
	blocks   int64
	timeout  int // seconds, for messages
	// broken is set when the session failed under an I/O; logging out
	// of it would only wait (or, in libiscsi 1.19, crash).
	broken bool
	// ring, with --iodepth > 1, holds the outstanding commands' buffers
	// and completions; reads is each tag's destination.
	ring  *ring
	reads [][]byte
	done  []ringDone
}

// sessionConfig names what a session logs in to.
type sessionConfig struct {
	Portal, Target, Initiator string
	LUN                       int
	HeaderDigest              bool
	Timeout                   int // seconds per PDU; 0: none
}

// openSession creates the context, logs in and reads the LUN's capacity.
func openSession(c sessionConfig) (*session, error) {
	cInit := C.CString(c.Initiator)
	defer C.free(unsafe.Pointer(cInit))
	ctx := C.iscsi_create_context(cInit)
	if ctx == nil {
		return nil, fmt.Errorf("creating an iSCSI context for initiator %q failed (out of memory?)", c.Initiator)
	}
	s := &session{ctx: ctx, lun: C.int(c.LUN), timeout: c.Timeout}
	ok := false
	defer func() {
		if !ok {
			C.iscsi_destroy_context(ctx)
		}
	}()
	cTarget := C.CString(c.Target)
	defer C.free(unsafe.Pointer(cTarget))
	if C.iscsi_set_targetname(ctx, cTarget) != 0 {
		return nil, fmt.Errorf("target name %q: %s", c.Target, s.errText())
	}
	C.iscsi_set_session_type(ctx, C.ISCSI_SESSION_NORMAL)
	digest := C.enum_iscsi_header_digest(C.ISCSI_HEADER_DIGEST_NONE)
	if c.HeaderDigest {
		digest = C.ISCSI_HEADER_DIGEST_CRC32C
	}
	C.iscsi_set_header_digest(ctx, digest)
	// A dropped session is a failure to report, not to hide by
	// reconnecting: the lab must know when throttling broke a connection.
	C.iscsi_set_noautoreconnect(ctx, 1)
	C.iscsi_set_timeout(ctx, C.int(c.Timeout))
	cPortal := C.CString(c.Portal)
	defer C.free(unsafe.Pointer(cPortal))
	if C.sq_full_connect(ctx, cPortal, s.lun) != 0 {
		return nil, loginError(c, s.errText())
	}
	task := C.sq_readcapacity16(ctx, s.lun)
	if task == nil {
		s.logout()
		return nil, fmt.Errorf("reading the capacity of LUN %d: %s", c.LUN, s.errText())
	}
	defer C.scsi_free_scsi_task(task)
	var lba C.ulonglong
	var bl C.uint
	if C.task_status(task) != C.SCSI_STATUS_GOOD || C.rc16(task, &lba, &bl) != 0 {
		s.logout()
		return nil, fmt.Errorf("reading the capacity of LUN %d: %s", c.LUN, taskError(task, s))
	}
	s.blockLen = int64(bl)
	s.blocks = int64(lba) + 1
	ok = true
	return s, nil
}

func (s *session) errText() string { return strings.TrimSpace(C.GoString(C.iscsi_get_error(s.ctx))) }

func (s *session) Capacity() int64  { return s.blocks * s.blockLen }
func (s *session) BlockSize() int64 { return s.blockLen }

// ReadAt reads len(p) bytes at byte offset off with READ(16).
func (s *session) ReadAt(p []byte, off int64) error {
	task := C.sq_read16(s.ctx, s.lun, C.uint64_t(off/s.blockLen), C.uint32_t(len(p)), C.int(s.blockLen))
	if task == nil {
		s.broken = true
		return fmt.Errorf("READ(16): %s", s.errText())
	}
	defer C.scsi_free_scsi_task(task)
	if C.task_status(task) != C.SCSI_STATUS_GOOD {
		return fmt.Errorf("READ(16): %s", taskError(task, s))
	}
	if C.task_copy_in(task, unsafe.Pointer(&p[0]), C.int(len(p))) != 0 {
		return fmt.Errorf("READ(16): short data from the target")
	}
	return nil
}

// WriteAt writes p at byte offset off with WRITE(16). The buffer is only
// used for the duration of the synchronous call.
func (s *session) WriteAt(p []byte, off int64) error {
	task := C.sq_write16(s.ctx, s.lun, C.uint64_t(off/s.blockLen), (*C.uchar)(unsafe.Pointer(&p[0])), C.uint32_t(len(p)), C.int(s.blockLen))
	if task == nil {
		s.broken = true
		return fmt.Errorf("WRITE(16): %s", s.errText())
	}
	defer C.scsi_free_scsi_task(task)
	if C.task_status(task) != C.SCSI_STATUS_GOOD {
		return fmt.Errorf("WRITE(16): %s", taskError(task, s))
	}
	return nil
}

// Sync flushes the LUN's write cache with SYNCHRONIZE CACHE(10): what
// --fsync asks of a block device.
func (s *session) Sync() error {
	task := C.sq_sync(s.ctx, s.lun)
	if task == nil {
		s.broken = true
		return fmt.Errorf("SYNCHRONIZE CACHE(10): %s", s.errText())
	}
	defer C.scsi_free_scsi_task(task)
	if C.task_status(task) != C.SCSI_STATUS_GOOD {
		return fmt.Errorf("SYNCHRONIZE CACHE(10): %s", taskError(task, s))
	}
	return nil
}

// Close logs out and frees the context.
func (s *session) Close() error {
	var err error
	if !s.broken {
		err = s.logout()
	}
	C.iscsi_destroy_context(s.ctx)
	s.ctx = nil
	// After the context: destroying it may still complete (cancel)
	// outstanding commands into the ring.
	if s.ring != nil {
		s.ring.free()
		s.ring = nil
	}
	return err
}

// StartAsync prepares depth tags of up to bs bytes (AsyncDevice).
func (s *session) StartAsync(depth int, bs int64) error {
	r, err := newRing(depth, int(bs))
	if err != nil {
		return err
	}
	s.ring, s.reads = r, make([][]byte, depth)
	return nil
}

// Issue queues READ(16) into p or WRITE(16) of p (copied) under tag; the
// command goes out in the next Reap.
func (s *session) Issue(tag int, write bool, p []byte, off int64) error {
	w := C.int(0)
	if write {
		s.ring.put(tag, p)
		w = 1
	} else {
		s.reads[tag] = p
	}
	if C.sq_start(s.ctx, s.ring.r, C.int(tag), w, s.lun, C.uint64_t(off/s.blockLen), C.uint32_t(len(p)), C.int(s.blockLen)) != 0 {
		s.broken = true
		return fmt.Errorf("queueing a command: %s", s.errText())
	}
	return nil
}

// Reap sends what is queued and takes the completions that arrived,
// waiting up to timeout for the connection to have something. A
// transport failure is returned as the error, a failed command as its
// completion's.
func (s *session) Reap(into []Completion, timeout time.Duration) ([]Completion, error) {
	if C.sq_wait(s.ctx, s.ring.r, C.int(timeout.Milliseconds())) < 0 {
		s.broken = true
		return into, fmt.Errorf("the session failed: %s", s.errText())
	}
	s.done = s.ring.take(s.done[:0])
	for _, d := range s.done {
		task := (*C.struct_scsi_task)(d.task)
		c := Completion{Tag: d.tag}
		switch {
		case task == nil:
			c.Err = fmt.Errorf("the session failed: %s", s.errText())
			s.broken = true
		case C.task_status(task) != C.SCSI_STATUS_GOOD:
			c.Err = errors.New(taskError(task, s))
		case s.reads[d.tag] != nil:
			p := s.reads[d.tag]
			if C.task_copy_to(task, (*C.uchar)(s.ring.buf(d.tag)), C.int(len(p))) != 0 {
				c.Err = errors.New("short data from the target")
			} else {
				s.ring.get(d.tag, p)
			}
		}
		s.reads[d.tag] = nil
		if task != nil {
			C.scsi_free_scsi_task(task)
		}
		into = append(into, c)
	}
	return into, nil
}

func (s *session) logout() error {
	if C.sq_logout(s.ctx) != 0 {
		return fmt.Errorf("logout: %s", s.errText())
	}
	return nil
}

// taskError describes a failed task; a transport failure marks the
// session broken.
func taskError(task *C.struct_scsi_task, s *session) string {
	st := C.task_status(task)
	if st == C.SCSI_STATUS_TIMEOUT || st == C.SCSI_STATUS_ERROR || st == C.SCSI_STATUS_CANCELLED {
		s.broken = true
	}
	switch st {
	case C.SCSI_STATUS_CHECK_CONDITION:
		return fmt.Sprintf("check condition, sense key 0x%x ascq 0x%04x (%s)", int(C.task_sense_key(task)), int(C.task_sense_ascq(task)), s.errText())
	case C.SCSI_STATUS_TIMEOUT:
		return fmt.Sprintf("no answer within --io-timeout %ds — the target stopped answering", s.timeout)
	case C.SCSI_STATUS_ERROR, C.SCSI_STATUS_CANCELLED:
		return fmt.Sprintf("the session failed: %s", s.errText())
	default:
		return fmt.Sprintf("SCSI status 0x%x (%s)", int(st), s.errText())
	}
}

// loginError turns libiscsi's login failure text into one line that says
// what is wrong and what to check.
func loginError(c sessionConfig, text string) error {
	switch {
	case strings.Contains(text, "LOGICAL_UNIT_NOT_SUPPORTED"):
		return fmt.Errorf("LUN %d does not exist on target %s at %s — list its LUNs with: iscsi-ls -s iscsi://%s", c.LUN, c.Target, c.Portal, c.Portal)
	case strings.Contains(text, "Target not found"), strings.Contains(text, "Authorization failure"),
		strings.Contains(text, "Authentication failure"), strings.Contains(text, "Not allowed"):
		return fmt.Errorf("login to %s at %s refused (%s) — check the target name and that the target's ACL admits this initiator's address and name (%s)",
			c.Target, c.Portal, loginStatus(text), c.Initiator)
	case strings.Contains(text, "reconnect"), strings.Contains(text, "onnect"):
		return fmt.Errorf("cannot connect to %s: %s — is tgtd running in the target namespace?", c.Portal, text)
	}
	return fmt.Errorf("login to %s at %s failed: %s", c.Target, c.Portal, text)
}

// loginStatus extracts "Target not found(515)" from libiscsi's text.
func loginStatus(text string) string {
	if i := strings.Index(text, "Status: "); i >= 0 {
		return text[i+len("Status: "):]
	}
	return text
}

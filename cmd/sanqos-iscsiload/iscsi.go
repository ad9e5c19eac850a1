package main

/*
#cgo pkg-config: libiscsi
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <pthread.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include "sigmask.h" // sq_block, sq_restore: why, there

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
	"fmt"
	"strings"
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

// Close logs out and frees the context.
func (s *session) Close() error {
	var err error
	if !s.broken {
		err = s.logout()
	}
	C.iscsi_destroy_context(s.ctx)
	s.ctx = nil
	return err
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

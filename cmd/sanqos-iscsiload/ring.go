package main

/*
#include "ring.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// ring is the C side of one asynchronous connection: a data buffer per
// tag and the completions its library's callbacks reported (ring.h).
type ring struct {
	r  *C.struct_sq_ring
	bs int
}

// ringDone is one completion taken from the ring.
type ringDone struct {
	tag, status int
	task        unsafe.Pointer // libiscsi's scsi_task, nil for libnfs
}

func newRing(depth, bs int) (*ring, error) {
	r := C.sq_ring_new(C.int(depth), C.int(bs))
	if r == nil {
		return nil, errors.New("allocating the I/O buffers failed (out of memory?)")
	}
	return &ring{r: r, bs: bs}, nil
}

// buf is tag's C buffer.
func (r *ring) buf(tag int) unsafe.Pointer { return unsafe.Pointer(C.sq_ring_buf(r.r, C.int(tag))) }

// put copies p into tag's buffer (a write's data).
func (r *ring) put(tag int, p []byte) {
	copy(unsafe.Slice((*byte)(r.buf(tag)), r.bs), p)
}

// get copies tag's buffer into p (a read's data).
func (r *ring) get(tag int, p []byte) {
	copy(p, unsafe.Slice((*byte)(r.buf(tag)), r.bs))
}

// pending is how many completions wait to be taken.
func (r *ring) pending() int { return int(r.r.ndone) }

// take appends the completions to into and empties the ring.
func (r *ring) take(into []ringDone) []ringDone {
	n := int(r.r.ndone)
	for i := range n {
		into = append(into, ringDone{tag: int(C.sq_done_tag(r.r, C.int(i))), status: int(C.sq_done_status(r.r, C.int(i))),
			task: C.sq_done_task(r.r, C.int(i))})
	}
	r.r.ndone = 0
	return into
}

func (r *ring) free() {
	C.sq_ring_free(r.r)
	r.r = nil
}

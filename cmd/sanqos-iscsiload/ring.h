// The completion ring of an asynchronous connection (--iodepth > 1):
// libiscsi's and libnfs's callbacks run inside their service calls, on the
// thread that owns the connection, and append to it; Go takes the entries
// after each service call. No Go callbacks: the ring and the data buffers
// are C memory, so that libiscsi and libnfs may hold them while an I/O is
// outstanding, which Go memory may not be.
#ifndef SANQOS_RING_H
#define SANQOS_RING_H
#include <stdlib.h>
#include <string.h>

struct sq_ring;

// sq_slot is one tag's identity, handed to the library as private_data.
struct sq_slot {
	struct sq_ring *r;
	int tag;
};

// sq_done is one completion: the tag, the library's status (libiscsi: a
// SCSI status; libnfs: bytes moved or a negative errno) and libiscsi's task
// (to be freed), NULL for libnfs.
struct sq_done {
	int tag;
	int status;
	void *task;
};

struct sq_ring {
	int depth, bs, ndone;
	struct sq_done *done;
	struct sq_slot *slots;
	unsigned char *data; // depth buffers of bs bytes, one per tag
};

static inline struct sq_ring *sq_ring_new(int depth, int bs) {
	struct sq_ring *r = calloc(1, sizeof *r);
	if (r == NULL) return NULL;
	r->depth = depth;
	r->bs = bs;
	r->done = calloc(depth, sizeof *r->done);
	r->slots = calloc(depth, sizeof *r->slots);
	r->data = malloc((size_t)depth * (size_t)bs);
	if (r->done == NULL || r->slots == NULL || r->data == NULL) {
		free(r->done); free(r->slots); free(r->data); free(r);
		return NULL;
	}
	for (int i = 0; i < depth; i++) {
		r->slots[i].r = r;
		r->slots[i].tag = i;
	}
	return r;
}

static inline void sq_ring_free(struct sq_ring *r) {
	if (r == NULL) return;
	free(r->done); free(r->slots); free(r->data); free(r);
}

static inline unsigned char *sq_ring_buf(struct sq_ring *r, int tag) { return r->data + (size_t)tag * (size_t)r->bs; }

// sq_ring_push records a completion. Each tag is outstanding at most once
// and the ring holds depth entries, so it cannot overflow.
static inline void sq_ring_push(struct sq_slot *s, int status, void *task) {
	struct sq_ring *r = s->r;
	if (r->ndone >= r->depth) return;
	r->done[r->ndone].tag = s->tag;
	r->done[r->ndone].status = status;
	r->done[r->ndone].task = task;
	r->ndone++;
}

static inline int sq_done_tag(struct sq_ring *r, int i) { return r->done[i].tag; }
static inline int sq_done_status(struct sq_ring *r, int i) { return r->done[i].status; }
static inline void *sq_done_task(struct sq_ring *r, int i) { return r->done[i].task; }
#endif

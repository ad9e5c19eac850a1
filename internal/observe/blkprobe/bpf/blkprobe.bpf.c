// SPDX-License-Identifier: GPL-2.0
//
// blkprobe: per-device block I/O latency, aggregated in the kernel.
//
// block_rq_complete adds each read's and write's latency to a per-CPU
// histogram of its device and direction. The latency is now minus the
// request's own start_time_ns, the stamp the block layer puts on a request
// when it is set up and from which it accounts /proc/diskstats' time
// reading/writing (blk_account_io_done): so the probe sees the same span
// as diskstats' r_await, at nanosecond instead of millisecond resolution,
// and needs no map of issue times. The stamp is set when the queue keeps
// I/O statistics (queue/iostats, on by default) or has a scheduler; a
// request without it is counted in `untimed`. Nothing is sent to user space
// per I/O: the daemon reads the per-CPU counters once per tick.
//
// The oldest outstanding read is kept without scanning anything large:
// block_rq_issue puts each read of a watched device into a small per-device
// table of slots (SLOTS), at one of PROBES places picked by a hash of the
// request pointer; completion clears it. User space reads the device's table
// (one 1 KiB lookup) and takes the smallest start time. A read that finds
// its PROBES places taken is not tracked there (counted in `untracked`), so
// the reported age is never more than the truth, and exact while fewer
// reads are outstanding than it takes to fill a read's PROBES places.
//
// Regenerate with `make bpf` (needs clang; no headers beyond this file: the
// kernel types below are CO-RE relocated against /sys/kernel/btf/vmlinux at
// load time).

typedef unsigned char __u8;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef __u32 dev_t;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

// Map types and flags from include/uapi/linux/bpf.h (stable ABI).
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6

// Helper numbers from include/uapi/linux/bpf.h (stable ABI).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;

// The kernel types we read, with only the fields used. preserve_access_index
// makes every access a CO-RE relocation, resolved against the running
// kernel's BTF, so offsets need not match any particular kernel.
struct gendisk {
	int major;
	int first_minor;
} __attribute__((preserve_access_index));

struct request_queue {
	struct gendisk *disk;
} __attribute__((preserve_access_index));

struct block_device {
	dev_t bd_dev;
} __attribute__((preserve_access_index));

struct request {
	struct request_queue *q;
	unsigned int cmd_flags;
	struct block_device *part;
	__u64 start_time_ns;
} __attribute__((preserve_access_index));

// REQ_OP_MASK and the op numbers of include/linux/blk_types.h.
#define REQ_OP_MASK 0xff
#define REQ_OP_READ 0
#define REQ_OP_WRITE 1

#define MINORBITS 20
#define MKDEV(ma, mi) (((ma) << MINORBITS) | (mi))

// Must match blkprobe.go.
#define MAX_DEVICES 64
#define NBUCKETS 336   // 16 exact µs buckets + 20 octaves × 16 sub-buckets, to 2^24 µs ≈ 16.8 s
#define SUBBITS 4      // 16 sub-buckets per power of two: bucket width ≤ 6.25 %
#define SLOTS 64       // read slots per device for the oldest-outstanding age
#define PROBES 4       // places a read may take in its device's slot table
#define DEVTAB 1024    // places in the watched-device table (a power of two)
#define DEVPROBES 8    // places a device may take in it

struct opstats {
	__u64 count;
	__u64 sum_ns;
	__u64 hist[NBUCKETS];
};

struct slot {
	__u64 rq; // request address; 0: free
	__u64 ts; // its start_time_ns (CLOCK_MONOTONIC); 0 while being claimed
};

// A place of the watched-device table: idx1 is the device's index + 1
// (0: the place is free).
struct devplace {
	__u32 dev;
	__u32 idx1;
};

struct readslots {
	struct slot s[SLOTS];
	__u64 untracked; // reads that found no free slot
	__u64 untimed;   // completions without a start stamp (iostats off)
};

// watched: kernel dev_t (major<<20 | minor) → device index, an open
// addressing table that user space fills (dev_hash, DEVPROBES places, a
// free place ends a search). An array, not a hash map: the verifier
// inlines an array lookup, and every block request of the machine does one
// or two, watched or not.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEVTAB);
	__type(key, __u32);
	__type(value, struct devplace);
} watched SEC(".maps");

// stats: index 2*device + op (0 read, 1 write), per CPU so that the hot path
// takes no lock and no atomic; user space sums the CPUs.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * MAX_DEVICES);
	__type(key, __u32);
	__type(value, struct opstats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_DEVICES);
	__type(key, __u32);
	__type(value, struct readslots);
} readslots SEC(".maps");

char LICENSE[] SEC("license") = "GPL";

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

// bucket maps a latency in µs to its log-linear bucket: values below 16
// have a bucket each; above, each power of two is split in 16 equal parts.
static __always_inline __u32 bucket(__u64 us)
{
	if (us < (1 << SUBBITS))
		return us;
	__u32 e = log2_u64(us);
	__u32 b = (e - SUBBITS + 1) * (1 << SUBBITS) + ((us >> (e - SUBBITS)) & ((1 << SUBBITS) - 1));
	if (b >= NBUCKETS)
		b = NBUCKETS - 1;
	return b;
}

// dev_hash places a dev_t in the watched-device table; blkprobe.go's
// devHash must compute the same.
static __always_inline __u32 dev_hash(__u32 dev)
{
	return (dev * 0x9E3779B1U) >> 22; // Fibonacci hashing to 10 bits (DEVTAB)
}

// lookup_dev finds dev in the watched-device table.
static __always_inline int lookup_dev(__u32 dev, __u32 *idx)
{
	__u32 h = dev_hash(dev);
#pragma unroll
	for (int i = 0; i < DEVPROBES; i++) {
		__u32 k = (h + i) & (DEVTAB - 1);
		struct devplace *p = bpf_map_lookup_elem(&watched, &k);
		if (!p || !p->idx1)
			return 0;
		if (p->dev == dev) {
			*idx = p->idx1 - 1;
			return 1;
		}
	}
	return 0;
}

// watched_index finds the request's device in `watched`: its partition
// (sda1) if it has one and that is watched, else its whole disk (sda,
// loop0). I/O to a whole disk costs one lookup.
static __always_inline int watched_index(struct request *rq, __u32 *idx)
{
	__u32 disk_dev;
	struct gendisk *disk = rq->q->disk;
	struct block_device *part = rq->part;

	if (!disk)
		return 0;
	disk_dev = MKDEV(disk->major, disk->first_minor);
	if (part) {
		__u32 dev = part->bd_dev;
		if (dev != disk_dev && lookup_dev(dev, idx))
			return 1;
	}
	return lookup_dev(disk_dev, idx);
}

// request_key names a request within its queue: its address less its
// queue's. The verifier forbids storing the typed request pointer itself or
// doing arithmetic on it, but a privileged program may subtract two pointers
// into a plain number; unlike a copy through bpf_probe_read_kernel this is
// one instruction. Two requests of one queue never share it, and it is
// never 0.
static __always_inline __u64 request_key(struct request *rq)
{
	return (__u64)rq - (__u64)rq->q;
}

static __always_inline __u32 slot_hash(__u64 rq)
{
	// Fibonacci hashing; requests sit in arrays a few hundred bytes apart.
	return (__u32)(((rq >> 6) * 0x9E3779B97F4A7C15ULL) >> 58);
}

// blk_issue puts a read of a watched device into the device's slot table.
SEC("tp_btf/block_rq_issue")
int blk_issue(__u64 *ctx)
{
	struct request *rq = (struct request *)ctx[0];
	__u32 idx;

	if ((rq->cmd_flags & REQ_OP_MASK) != REQ_OP_READ)
		return 0;
	if (!watched_index(rq, &idx) || idx >= MAX_DEVICES)
		return 0;
	struct readslots *rs = bpf_map_lookup_elem(&readslots, &idx);
	if (!rs)
		return 0;
	__u64 ts = rq->start_time_ns;
	if (!ts)
		ts = bpf_ktime_get_ns();
	__u64 key = request_key(rq);
	__u32 h = slot_hash(key);
#pragma unroll
	for (int i = 0; i < PROBES; i++) {
		__u32 j = (h + i) & (SLOTS - 1);
		__u64 owner = __sync_val_compare_and_swap(&rs->s[j].rq, 0, key);
		if (owner == 0) {
			rs->s[j].ts = ts;
			return 0;
		}
		if (owner == key)
			return 0; // issued again after a requeue: keep its place
	}
	__sync_fetch_and_add(&rs->untracked, 1);
	return 0;
}

// blk_complete adds the request's latency to its device's histogram and
// frees its read slot.
SEC("tp_btf/block_rq_complete")
int blk_complete(__u64 *ctx)
{
	struct request *rq = (struct request *)ctx[0];
	__u32 op = rq->cmd_flags & REQ_OP_MASK;
	__u32 idx;

	if (op != REQ_OP_READ && op != REQ_OP_WRITE)
		return 0;
	if (!watched_index(rq, &idx) || idx >= MAX_DEVICES)
		return 0;
	__u64 start = rq->start_time_ns;
	if (op == REQ_OP_READ || !start) {
		struct readslots *rs = bpf_map_lookup_elem(&readslots, &idx);
		if (!rs)
			return 0;
		if (!start)
			__sync_fetch_and_add(&rs->untimed, 1);
		if (op == REQ_OP_READ) {
			__u64 key = request_key(rq);
			__u32 h = slot_hash(key);
#pragma unroll
			for (int i = 0; i < PROBES; i++) {
				__u32 j = (h + i) & (SLOTS - 1);
				if (rs->s[j].rq == key) {
					// ts first: a reader never sees a new owner's slot with our time.
					rs->s[j].ts = 0;
					__sync_lock_test_and_set(&rs->s[j].rq, 0);
					break;
				}
			}
		}
		if (!start)
			return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u64 ns = now > start ? now - start : 0;
	__u32 k = 2 * idx + op;
	struct opstats *st = bpf_map_lookup_elem(&stats, &k);
	if (!st)
		return 0;
	st->count++;
	st->sum_ns += ns;
	__u32 b = bucket(ns / 1000);
	// The barrier keeps clang from dropping this check as redundant with
	// bucket()'s clamp: the verifier needs to see it next to the access.
	asm volatile("" : "+r"(b));
	if (b < NBUCKETS)
		st->hist[b]++;
	return 0;
}

// SPDX-License-Identifier: GPL-2.0
//
// edt: the departure-time classifier of sanqos's edt backend (package edt).
//
// On the target's egress (tc clsact, direct action) it looks each TCP
// segment over IPv4 or IPv6 up in the delay map by its destination, the
// initiator (a 16-byte address, IPv4 as ::ffff:a.b.c.d), and its source
// port, the target's storage port. A segment of a throttled initiator
// and port in one of its entry's directions leaves no earlier than
// now + delay (see Rise limit): the program writes that into skb->tstamp (Earliest
// Departure Time) and the fq root qdisc holds the packet until then.
// The direction is the port's small-segment split, as nfqueue's: a TCP
// payload up to the entry's split bytes (pure ACKs, iSCSI R2T and SCSI
// Response, NFS replies to writes) clocks the initiator's writes, a
// longer one carries its reads. Every packet is passed (TC_ACT_OK):
// nothing is dropped or redirected, and nothing but TCP is looked at.
//
// Fail open: the daemon renews each entry every tick with an expiry on
// CLOCK_MONOTONIC (bpf_ktime_get_ns); an entry past it is ignored, so a
// dead daemon's delays end one TTL after its last renewal.
//
// Order: fq keeps a flow (a socket: one TCP connection) in departure-time
// order, so a packet given an earlier time than an earlier packet would
// overtake it when the delay falls, and a packet given none goes ahead of
// the held ones. No departure time is before the last one given on the
// same connection (sanqos_edt_conn, keyed by the initiator's address and
// port and the target's port: both directions, since a data segment's
// ACK number would otherwise reach the writer before the held ACKs), and
// a packet of a live entry that is not delayed leaves no earlier than
// that last. Other connections of the same initiator and port (NFS's,
// multipath's) are not held behind it. A connection's segments leave the
// stack under its socket's lock, so one connection's last has one writer
// at a time; once its last has passed it is deleted, so a connection
// costs memory only while it has packets held.
//
// Rise limit: per flow and direction (initiator address and port, target
// port, direction) the program remembers the delay it applied to the
// previous packet (the LRU map sanqos_edt_flow, bounded; the daemon drops
// an initiator's ramps with its entry) and lets a rise take one step only
// on a packet giving the sender an RTT sample, by nfqueue's RiseLimit (package
// throttle, rise.go): applied = min(requested, max(prev + prev*permille
// /1000, prev + step)); lowering applies at once; a flow idle for 10 s
// starts again from 0. Write direction: a sample is an ACK number past
// the flow's highest; read direction: every second data packet. A
// packet in a direction its entry does not hold lowers the flow's delay
// to 0 (as a member's in nfqueue); one of an armed initiator that is
// not writing, or of an expired entry, leaves the ramp as it is (as
// nfqueue, which does not see them), so a returning writer's flows
// carry on from where they were.
//
// Arming: an entry may name an armed write delay (arm). The ingress
// program on the same device activates it for a second when the
// initiator sends the port a segment longer than the split (a write),
// as nfqueue's ipset rule with --timeout 1 does; the egress program
// holds the write direction of an armed entry at arm only while it is
// activated.
//
// What the programs write lives apart from what the daemon writes: the
// daemon rewrites the whole entry every tick, so the arming's deadline is
// in sanqos_edt_st (made by the daemon beside the entry, its field
// written only here), the order in sanqos_edt_conn and the ramps in
// sanqos_edt_flow.
//
// Never drop: fq drops what arrives past its limit (32768 packets, queue.go
// FqLimit). The program counts the packets it has given a departure time
// still ahead (sanqos_edt_held, by slots of 2^HELD_SHIFT ns of departure
// time, HELD_SLOTS ahead, each taken off once its time has passed: the
// count errs high by at most the packets of one slot, about a
// millisecond's) and past HELD_LIMIT, nfqueue's hard limit and half of
// fq's, it gives none: the packet passes at once, as nfqueue lets packets
// pass past its backlog, and the flow's ramp starts again from 0. A
// departure time past the slots ahead is counted in the last. Each
// packet counted takes a few passed slots off the total; a total at the
// limit after a pause is counted again from the slots ahead, once a slot
// at most, so a pause never leaves the count high.
//
// Counters: per initiator, port and CPU, the segments delayed, those
// passed without a delay of their own (the other direction, not
// activated, or the entry expired; at most held behind the last delayed
// one, for order), those the rise limit gave less than the requested
// delay, and those passed at once past HELD_LIMIT (bypassed, counted
// passed too).
// The daemon creates the counter entry when it sets the delay; the
// program never inserts one.
//
// Regenerate with `make bpf` (needs clang). It reads no kernel type: the
// context (struct __sk_buff) is UAPI and rewritten by the verifier, so the
// object loads on any kernel with cls_bpf and bpf_skb_load_bytes.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

// From include/uapi/linux/bpf.h (stable ABI).
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_HASH 5
#define BPF_MAP_TYPE_LRU_HASH 9
#define TC_ACT_OK 0

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) = (void *)26;
static long (*bpf_spin_lock)(void *lock) = (void *)93;
static long (*bpf_spin_unlock)(void *lock) = (void *)94;

// The fields of struct __sk_buff read or written, at their UAPI offsets
// (include/uapi/linux/bpf.h): the verifier rewrites each access to the
// kernel's sk_buff, so they need no relocation.
struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
	__u32 ingress_ifindex;
	__u32 ifindex;
	__u32 tc_index;
	__u32 cb[5];
	__u32 hash;
	__u32 tc_classid;
	__u32 data;
	__u32 data_end;
	__u32 napi_id;
	__u32 family;
	__u32 remote_ip4;
	__u32 local_ip4;
	__u32 remote_ip6[4];
	__u32 local_ip6[4];
	__u32 remote_port;
	__u32 local_port;
	__u32 data_meta;
	__u64 flow_keys;
	__u64 tstamp;
};

// Must match objects.go: the key is the initiator's 16-byte address and
// the target's port (host order); the daemon's entry seven u64s.
struct key {
	__u8 addr[16];
	__u16 port;
	__u16 pad[3];
};

#define DIR_WRITE 1 // payload <= split: what clocks the writes
#define DIR_READ 2  // payload > split: read data

struct entry {
	__u64 delay;        // ns added to now
	__u64 expires;      // CLOCK_MONOTONIC ns after which the entry is ignored
	__u64 split;        // the port's small-segment split, TCP payload bytes
	__u64 dir;          // DIR_WRITE, DIR_READ or both
	__u64 arm;          // armed write delay, ns; 0: not armed
	__u64 rise_permille; // the rise limit's factor, per mille
	__u64 rise_step;    // its step, ns; 0 and 0: no limit
};

// state is written by the programs only (the daemon makes it zero).
struct state {
	__u64 armed_until; // arming activated until then (CLOCK_MONOTONIC ns)
};

struct counters {
	__u64 delayed;
	__u64 passed;
	__u64 limited;  // given less than the requested delay by the rise limit
	__u64 bypassed; // passed at once past HELD_LIMIT
};

// One direction of one flow.
struct fkey {
	__u8 addr[16];
	__u16 iport; // the initiator's port
	__u16 port;  // the target's
	__u16 dir;
	__u16 pad;
};

struct flow {
	__u64 prev; // the delay applied to the previous packet, ns
	__u64 seen; // that packet's time
	__u32 ack;  // write direction: the highest acknowledgment number
	__u32 n;    // read direction: data packets seen
};

// One TCP connection, for order.
struct ckey {
	__u8 addr[16];
	__u16 iport; // the initiator's port
	__u16 port;  // the target's
	__u32 pad;
};

#define MAX_ENTRIES 16384 // initiators x ports
#define MAX_FLOWS 65536   // flow directions remembered
#define MAX_CONNS 65536   // connections with packets held
#define HELD_LIMIT 16384  // packets held, at most: nfqueue's hard limit, half of fq's
#define HELD_SHIFT 20     // a slot of the held count: 1.05 ms of departure times
#define HELD_SLOTS 1024   // slots ahead: 1.07 s, past the largest delay (1 s, control.DelayBoundsMs)
#define HELD_SWEEP 4      // slots swept a packet, at most: a sweep behind catches up
#define RISE_FORGET 10000000000ULL // 10 s: an idle flow ramps from 0 again
#define ARM_TIMEOUT 1000000000ULL  // 1 s, as nfqueue's ipset --timeout 1

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, struct key);
	__type(value, struct entry);
} sanqos_edt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, struct key);
	__type(value, struct state);
} sanqos_edt_st SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, struct key);
	__type(value, struct counters);
} sanqos_edt_cnt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct fkey);
	__type(value, struct flow);
} sanqos_edt_flow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct ckey);
	__type(value, __u64); // the last departure time given
} sanqos_edt_conn SEC(".maps");

struct bpf_spin_lock {
	__u32 val;
};

// The packets given a departure time still ahead: total, and by the
// slot of that time, so that they are taken off the total once it has
// passed (swept). One lock: a few loads and stores a held packet.
struct held {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 total;             // packets counted in slots not yet swept
	__u64 swept;             // the first slot (time >> HELD_SHIFT) not yet swept
	__u64 recounted;         // the slot of the last recount
	__u64 slot[HELD_SLOTS];  // which slot each count is of
	__u64 count[HELD_SLOTS]; // packets given a time in it
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct held);
} sanqos_edt_held SEC(".maps");

// add sweeps up to HELD_SWEEP passed slots off the total and counts a
// packet leaving at t, unless the total is HELD_LIMIT; it returns
// whether it did.
static __attribute__((always_inline)) int add(struct held *h, __u64 t, __u64 now)
{
	int ok = 0;
	bpf_spin_lock(&h->lock);
	__u64 cur = now >> HELD_SHIFT;
	if (cur < h->swept)
		cur = h->swept; // another CPU read the clock later
	if (cur - h->swept >= HELD_SLOTS) {
		// Every packet counted has left (or none was).
		h->total = 0;
		h->swept = cur;
	}
#pragma unroll
	for (int k = 0; k < HELD_SWEEP; k++) {
		if (h->swept < cur) {
			__u32 j = h->swept & (HELD_SLOTS - 1);
			if (h->slot[j] == h->swept) {
				h->total -= h->count[j];
				h->count[j] = 0;
			}
			h->swept++;
		}
	}
	if (h->total < HELD_LIMIT) {
		__u64 at = t >> HELD_SHIFT;
		if (at < cur)
			at = cur;
		if (at > cur + HELD_SLOTS - 1)
			at = cur + HELD_SLOTS - 1;
		__u32 i = at & (HELD_SLOTS - 1);
		if (h->slot[i] != at) {
			// Its packets have left; a sweep behind has not yet
			// taken them off.
			if (h->slot[i] >= h->swept)
				h->total -= h->count[i];
			h->slot[i] = at;
			h->count[i] = 0;
		}
		h->count[i]++;
		h->total++;
		ok = 1;
	}
	bpf_spin_unlock(&h->lock);
	return ok;
}

// held_recount counts the packets in the slots from cur on, reading
// without the lock (a packet counted meanwhile may be missed). It is a
// global function, which the verifier checks once, apart from its
// callers: inlined, its loop was walked once for each path reaching it.
__attribute__((noinline)) __u64 held_recount(__u64 cur)
{
	__u32 zero = 0;
	struct held *h = bpf_map_lookup_elem(&sanqos_edt_held, &zero);
	if (!h)
		return 0;
	// All ones where the slot is cur or later (the difference's sign
	// bit clear), else 0: no branch, so one path through the loop.
	__u64 n = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < HELD_SLOTS; i++)
		n += h->count[i] & (((h->slot[i] - cur) >> 63) - 1);
	return n;
}

// hold counts a packet leaving at t, unless HELD_LIMIT packets are held
// already; it returns whether it did. A total at the limit may hold
// slots a sweep behind has not reached (after a pause of more than a
// few slots): then, once a slot at most, the slots ahead are counted
// again and the sweep catches up at once.
static __attribute__((always_inline)) int hold(__u64 t, __u64 now)
{
	__u32 zero = 0;
	struct held *h = bpf_map_lookup_elem(&sanqos_edt_held, &zero);
	if (!h)
		return 1;
	if (add(h, t, now))
		return 1;
	__u64 cur = now >> HELD_SHIFT;
	if (h->recounted == cur)
		return 0;
	__u64 n = held_recount(cur);
	bpf_spin_lock(&h->lock);
	h->recounted = cur;
	if (h->swept < cur) {
		h->total = n;
		h->swept = cur;
	}
	bpf_spin_unlock(&h->lock);
	return add(h, t, now);
}

// Ethernet: the programs run on an Ethernet device (a NIC, bridge or
// veth), where tc sees the frame from its MAC header on both hooks, so
// the IP header starts at 14.
#define ETH_HLEN 14
#define ETH_P_IP_BE 0x0008   // htons(0x0800) as skb->protocol reads it
#define ETH_P_IPV6_BE 0xdd86 // htons(0x86dd)

static inline __u16 be16(__u16 v) { return (v >> 8) | (v << 8); }
static inline __u32 be32(__u32 v)
{
	return (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
}

#define IPPROTO_TCP 6

// seg is what both programs read of a TCP segment: the peer's address
// (destination on egress, source on ingress) and the segment's header.
struct seg {
	__u8 addr[16];
	__u8 tcp[14]; // source port .. data offset
	__u64 payload;
};

// parse fills s from skb, with the destination address on egress and the
// source on ingress (the initiator's, either way). It returns -1 for
// anything but TCP over IPv4 or IPv6.
static __attribute__((always_inline)) int parse(struct __sk_buff *skb, struct seg *s, int ingress)
{
	__u32 l4; // offset of the TCP header

	if (skb->protocol == ETH_P_IP_BE) {
		__u8 h[20];
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, sizeof(h)))
			return -1;
		if (h[9] != IPPROTO_TCP)
			return -1;
		s->addr[10] = 0xff;
		s->addr[11] = 0xff;
		if (ingress)
			__builtin_memcpy(&s->addr[12], &h[12], 4);
		else
			__builtin_memcpy(&s->addr[12], &h[16], 4);
		l4 = (h[0] & 0x0f) * 4;
	} else if (skb->protocol == ETH_P_IPV6_BE) {
		__u8 h[40];
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, sizeof(h)))
			return -1;
		// TCP right after the fixed header: the target's TCP does not
		// add extension headers (and initiators' seldom do; a segment
		// with one is not looked at).
		if (h[6] != IPPROTO_TCP)
			return -1;
		if (ingress)
			__builtin_memcpy(s->addr, &h[8], 16);
		else
			__builtin_memcpy(s->addr, &h[24], 16);
		l4 = 40;
	} else {
		return -1;
	}
	if (bpf_skb_load_bytes(skb, ETH_HLEN + l4, s->tcp, sizeof(s->tcp)))
		return -1;
	// The payload from the skb's length, not the IP header's: a GSO
	// packet's header may not hold its full length (BIG TCP).
	__u64 hdrs = ETH_HLEN + l4 + (s->tcp[12] >> 4) * 4;
	s->payload = skb->len > hdrs ? skb->len - hdrs : 0;
	return 0;
}

// limit applies the rise limit to a packet of flow fk asked to get
// requested: the law of RiseLimit.next and Delayer.limitRise.
static __attribute__((always_inline)) __u64 limit(struct entry *e, struct fkey *fk, __u32 ack, __u64 requested, __u64 now)
{
	struct flow f = {};
	struct flow *p = bpf_map_lookup_elem(&sanqos_edt_flow, fk);
	int known = 0;
	if (p) {
		f = *p;
		// Another CPU may have stamped it after this one read now.
		known = f.seen > now || now - f.seen < RISE_FORGET;
		if (!known)
			f = (struct flow){};
	}
	int sample = !known;
	if (fk->dir == DIR_READ) {
		f.n++;
		sample = f.n % 2 == 1;
	} else if (known && (int)(ack - f.ack) > 0) {
		sample = 1;
	}
	if (!known || (int)(ack - f.ack) > 0)
		f.ack = ack;
	__u64 applied = requested < f.prev ? requested : f.prev;
	int off = e->rise_permille == 0 && e->rise_step == 0;
	if (sample || off) {
		applied = requested;
		if (!off && requested > f.prev) {
			__u64 up = f.prev + f.prev * e->rise_permille / 1000;
			if (up < f.prev + e->rise_step)
				up = f.prev + e->rise_step;
			if (up < applied)
				applied = up;
		}
	}
	if (applied == 0) {
		// Absent means 0: a flow that is not delayed costs no memory.
		if (p)
			bpf_map_delete_elem(&sanqos_edt_flow, fk);
		return 0;
	}
	f.prev = applied;
	f.seen = now;
	if (p && known)
		*p = f;
	else
		bpf_map_update_elem(&sanqos_edt_flow, fk, &f, 0);
	return applied;
}

SEC("tc")
int sanqos_edt_classify(struct __sk_buff *skb)
{
	struct seg s = {};
	if (parse(skb, &s, 0))
		return TC_ACT_OK;
	struct key k = {};
	__builtin_memcpy(k.addr, s.addr, 16);
	k.port = be16(*(__u16 *)&s.tcp[0]);

	struct entry *e = bpf_map_lookup_elem(&sanqos_edt, &k);
	if (!e)
		return TC_ACT_OK;
	struct counters *c = bpf_map_lookup_elem(&sanqos_edt_cnt, &k);
	struct ckey ck = {};
	__builtin_memcpy(ck.addr, s.addr, 16);
	ck.iport = be16(*(__u16 *)&s.tcp[2]);
	ck.port = k.port;
	__u64 dir = s.payload <= e->split ? DIR_WRITE : DIR_READ;
	__u64 now = bpf_ktime_get_ns();
	__u64 requested = 0;
	__u64 *last, t;
	int own = 0; // a delay of its own, not only its connection's order
	if (e->dir & dir) {
		requested = e->delay;
	} else if (dir == DIR_WRITE && e->arm) {
		struct state *st = bpf_map_lookup_elem(&sanqos_edt_st, &k);
		if (!st || st->armed_until <= now)
			goto in_order; // not writing: its ramps stay, as nfqueue's
		requested = e->arm;
	}
	if (e->expires < now)
		goto pass; // the daemon is gone: touch nothing
	struct fkey fk = {};
	__builtin_memcpy(fk.addr, s.addr, 16);
	fk.iport = ck.iport;
	fk.port = k.port;
	fk.dir = dir;
	__u64 applied = limit(e, &fk, be32(*(__u32 *)&s.tcp[8]), requested, now);
	if (c && applied < requested)
		c->limited++;
	if (applied == 0)
		goto in_order;
	t = now + applied;
	own = 1;
	last = bpf_map_lookup_elem(&sanqos_edt_conn, &ck);
	if (last && t < *last)
		t = *last;
	goto held;
in_order:
	// Not delayed, yet not before a packet of its connection that was:
	// fq puts a packet without a time ahead of its flow's held ones
	// (nfqueue too holds an undelayed packet behind its flow's).
	last = bpf_map_lookup_elem(&sanqos_edt_conn, &ck);
	if (!last)
		goto pass;
	if (*last <= now) {
		bpf_map_delete_elem(&sanqos_edt_conn, &ck); // nothing held
		goto pass;
	}
	t = *last;
held:
	// One place that counts what is held, for both kinds of packet:
	// hold is inlined, and each copy is verified path by path.
	if (!hold(t, now)) {
		if (own)
			bpf_map_delete_elem(&sanqos_edt_flow, &fk);
		goto bypass;
	}
	skb->tstamp = t;
	if (!own)
		goto pass;
	if (last)
		*last = t;
	else
		bpf_map_update_elem(&sanqos_edt_conn, &ck, &t, 0);
	if (c)
		c->delayed++;
	return TC_ACT_OK;
pass:
	if (c)
		c->passed++;
	return TC_ACT_OK;
bypass:
	// Past HELD_LIMIT: at once, before its connection's held packets
	// rather than dropped by fq.
	if (c) {
		c->passed++;
		c->bypassed++;
	}
	return TC_ACT_OK;
}

// sanqos_edt_arm runs on the same device's ingress: a segment longer
// than the split from an initiator armed on that port is a write, and
// activates the entry's armed delay for ARM_TIMEOUT, unless it is active
// already (as the ipset rule without --exist: a running writer's
// activation ends and begins again with its next write).
SEC("tc")
int sanqos_edt_arm(struct __sk_buff *skb)
{
	struct seg s = {};
	if (parse(skb, &s, 1))
		return TC_ACT_OK;
	struct key k = {};
	__builtin_memcpy(k.addr, s.addr, 16);
	k.port = be16(*(__u16 *)&s.tcp[2]);
	struct entry *e = bpf_map_lookup_elem(&sanqos_edt, &k);
	if (!e || !e->arm || s.payload <= e->split)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	if (e->expires < now)
		return TC_ACT_OK;
	struct state *st = bpf_map_lookup_elem(&sanqos_edt_st, &k);
	if (st && st->armed_until <= now)
		st->armed_until = now + ARM_TIMEOUT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";

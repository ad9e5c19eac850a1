// SPDX-License-Identifier: GPL-2.0
//
// edt: the departure-time classifier of sanqos's edt backend (package edt).
//
// On the target's egress (tc clsact, direct action) it looks each TCP
// segment over IPv4 or IPv6 up in the delay map by its destination, the
// initiator (a 16-byte address, IPv4 as ::ffff:a.b.c.d), and its source
// port, the target's storage port. A segment of a throttled initiator
// and port in one of its entry's directions leaves no earlier than
// now + delay: the program writes that into skb->tstamp (Earliest
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
// Order: fq keeps a flow in departure-time order, so a packet given an
// earlier time than an earlier packet would overtake it when the delay
// falls. No departure time is before the last one given on the same
// initiator and port (the entry's last field; a flow has one of each).
//
// Counters: per initiator, port and CPU, the segments delayed and those
// passed at once (the other direction, or the entry expired). The daemon
// creates the counter entry when it sets the delay; the program never
// inserts one.
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
#define BPF_MAP_TYPE_PERCPU_HASH 5
#define TC_ACT_OK 0

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) = (void *)26;

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
// the target's port (host order), the value five u64s.
struct key {
	__u8 addr[16];
	__u16 port;
	__u16 pad[3];
};

#define DIR_WRITE 1 // payload <= split: what clocks the writes
#define DIR_READ 2  // payload > split: read data

struct entry {
	__u64 delay;   // ns added to now
	__u64 expires; // CLOCK_MONOTONIC ns after which the entry is ignored
	__u64 last;    // the last departure time given, for order
	__u64 split;   // the port's small-segment split, TCP payload bytes
	__u64 dir;     // DIR_WRITE, DIR_READ or both
};

struct counters {
	__u64 delayed;
	__u64 passed;
};

#define MAX_ENTRIES 16384 // initiators x ports

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, struct key);
	__type(value, struct entry);
} sanqos_edt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MAX_ENTRIES);
	__type(key, struct key);
	__type(value, struct counters);
} sanqos_edt_cnt SEC(".maps");

// Ethernet: the classifier runs on the egress of an Ethernet device
// (a NIC, bridge or veth), so the IP header starts at 14.
#define ETH_HLEN 14
#define ETH_P_IP_BE 0x0008   // htons(0x0800) as skb->protocol reads it
#define ETH_P_IPV6_BE 0xdd86 // htons(0x86dd)

static inline __u16 be16(__u16 v) { return (v >> 8) | (v << 8); }

#define IPPROTO_TCP 6

SEC("tc")
int sanqos_edt_classify(struct __sk_buff *skb)
{
	struct key k = {};
	__u32 l4; // offset of the TCP header

	if (skb->protocol == ETH_P_IP_BE) {
		__u8 h[20];
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, sizeof(h)))
			return TC_ACT_OK;
		if (h[9] != IPPROTO_TCP)
			return TC_ACT_OK;
		k.addr[10] = 0xff;
		k.addr[11] = 0xff;
		__builtin_memcpy(&k.addr[12], &h[16], 4);
		l4 = (h[0] & 0x0f) * 4;
	} else if (skb->protocol == ETH_P_IPV6_BE) {
		__u8 h[40];
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, sizeof(h)))
			return TC_ACT_OK;
		// TCP right after the fixed header: the target's TCP does not
		// add extension headers.
		if (h[6] != IPPROTO_TCP)
			return TC_ACT_OK;
		__builtin_memcpy(k.addr, &h[24], 16);
		l4 = 40;
	} else {
		return TC_ACT_OK;
	}
	__u8 tcp[14]; // source port .. data offset
	if (bpf_skb_load_bytes(skb, ETH_HLEN + l4, tcp, sizeof(tcp)))
		return TC_ACT_OK;
	k.port = be16(*(__u16 *)&tcp[0]);

	struct entry *e = bpf_map_lookup_elem(&sanqos_edt, &k);
	if (!e)
		return TC_ACT_OK;
	struct counters *c = bpf_map_lookup_elem(&sanqos_edt_cnt, &k);
	// The payload from the skb's length, not the IP header's: a GSO
	// packet's header may not hold its full length (BIG TCP).
	__u64 hdrs = ETH_HLEN + l4 + (tcp[12] >> 4) * 4;
	__u64 payload = skb->len > hdrs ? skb->len - hdrs : 0;
	__u64 dir = payload <= e->split ? DIR_WRITE : DIR_READ;
	__u64 now = bpf_ktime_get_ns();
	if (!(e->dir & dir) || e->expires < now) {
		if (c)
			c->passed++;
		return TC_ACT_OK;
	}
	__u64 t = now + e->delay;
	if (t < e->last)
		t = e->last;
	e->last = t;
	skb->tstamp = t;
	if (c)
		c->delayed++;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";

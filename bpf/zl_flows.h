/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Per-flow token cadence: frames, bytes, first/last seen and a histogram of
 * the gaps between TOKEN frames, for every (source address, source port,
 * destination port, IP version) that sends token datagrams.
 *
 * What is counted. Only token datagrams (every frame valid) update a flow;
 * malformed ones are counted per interface only. A datagram is seen at one
 * instant, read once with bpf_ktime_get_ns().
 *
 * The gap. Each TOKEN frame adds one sample: the time since the flow's
 * previous TOKEN frame. The first TOKEN of a datagram is measured against
 * the previous datagram's tokens; the others arrived with it, so their gap is
 * 0 (bucket "< 1 us"). The walker does not record frame order (it would cost
 * a store per frame on its critical chain), so a datagram is taken to be in
 * stream order, REQUEST then TOKENs then DONE: a REQUEST in it resets the
 * gap clock before its tokens (the first token of a stream has no gap, and
 * no sample), a DONE resets it after them. PING and PONG leave it alone.
 *
 * Eviction. The table is an LRU hash of ZL_FLOWS_MAX flows: a new flow in a
 * full table evicts the least recently used one (the kernel's approximation:
 * a reference bit, and per-CPU free lists that may evict a little before the
 * table is strictly full). An evicted flow's frames stay counted in
 * zl_counters and its gaps in zl_gaps; a flow seen again starts afresh.
 *
 * Shared, not per-CPU. The values are shared by all CPUs so a flow has one
 * gap clock wherever its packets land; a per-CPU value would measure gaps
 * per CPU, wrong as soon as a flow moves queue. Updates are plain, not
 * atomic: RSS keeps a flow on one rx queue, so one CPU at a time, and a race
 * (a flow split over queues) can lose an increment, never corrupt the
 * table. The LRU list itself is the common one (not BPF_F_NO_COMMON_LRU):
 * per-CPU lists would split the capacity by CPU, and a host whose token
 * traffic lands on one queue would keep only ZL_FLOWS_MAX / ncpus flows. Its
 * lock is taken only when a CPU refills its free list while adding flows,
 * never on the per-datagram path.
 */
#ifndef ZL_FLOWS_H
#define ZL_FLOWS_H

#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_structs.h"
#include "zl_parse.h"
#include "zl_frames.h"

/* The bucket of a gap (see ZL_GAP_BUCKETS): the bit length of whole us. */
static __always_inline __u32 zl_gap_bucket(__u64 gap_ns)
{
	__u64 us;
	__u32 b = 0;

	/* 2^32 ns is 4.3 s, far into the last bucket; below it a multiply and
	 * a shift divide by 1000 exactly, where BPF would emit a division. */
	if (gap_ns >= (1ULL << 32))
		return ZL_GAP_BUCKETS - 1;
	us = (gap_ns * 274877907ULL) >> 38;
	if (us >= (1 << 16)) { b += 16; us >>= 16; }
	if (us >= (1 << 8)) { b += 8; us >>= 8; }
	if (us >= (1 << 4)) { b += 4; us >>= 4; }
	if (us >= (1 << 2)) { b += 2; us >>= 2; }
	if (us >= (1 << 1)) { b += 1; us >>= 1; }
	b += us; /* 0 or 1 now */
	return b < ZL_GAP_BUCKETS ? b : ZL_GAP_BUCKETS - 1;
}

/* Fills KEY from the source address and the ports zl_parse_udp() found. */
static __always_inline int zl_flow_key(void *data, void *data_end,
				       const struct zl_udp *udp,
				       struct zl_flow_key *key)
{
	/* At most 14 + 8: the mask only tells the verifier so. */
	__u32 l3_off = udp->l3_off & 0x3f;

	if (udp->ip_version == 4) {
		struct iphdr *ip = data + l3_off;

		if ((void *)(ip + 1) > data_end)
			return -1;
		key->saddr[0] = ip->saddr;
	} else {
		struct ipv6hdr *ip6 = data + l3_off;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		__builtin_memcpy(key->saddr, &ip6->saddr, sizeof(key->saddr));
	}
	key->ip_version = udp->ip_version;
	key->sport = udp->sport;
	key->dport = udp->dport;
	return 0;
}

/* Accounts a token datagram, walked into W and seen at NOW, to its flow F
 * and to the interface's gap histogram H (NULL: flow only). The map
 * lookups are the program's. */
static __always_inline void zl_flow_update(struct zl_flow *f, struct zl_gap_hist *h,
					   const struct zl_walk *w, __u64 now)
{
	__u64 tokens = zl_type_count(w->type_counts, ZL_FRAME_TOKEN);
	__u64 last = f->last_token_ns;

	f->datagrams++;
	f->payload_bytes += w->payload_bytes;
	f->last_ns = now;
	zl_add_frames(f->frames, w->type_counts);

	if (zl_type_count(w->type_counts, ZL_FRAME_REQUEST))
		last = 0;
	if (tokens) {
		/* now < last only if another CPU raced ahead on this flow */
		if (last && now >= last) {
			__u64 gap = now - last;
			__u32 b = zl_gap_bucket(gap);

			if (b < ZL_GAP_BUCKETS) { /* always: says so to the verifier */
				f->gaps[b]++;
				f->gap_sum_ns += gap;
				if (h) {
					h->buckets[b]++;
					h->sum_ns += gap;
				}
			}
		}
		if (tokens > 1) { /* arrived with the first: gap 0 */
			f->gaps[0] += tokens - 1;
			if (h)
				h->buckets[0] += tokens - 1;
		}
		last = now;
	}
	if (zl_type_count(w->type_counts, ZL_FRAME_DONE))
		last = 0;
	f->last_token_ns = last;
}

#endif

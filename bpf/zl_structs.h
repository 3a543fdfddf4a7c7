/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Layouts shared with userspace. Python has each field by field (the Layouts
 * of pyxdp/proto/counters.py and pyxdp/xdp/maps.py): change both together;
 * tests/test_layouts.py compares them with these as the object's BTF
 * records them.
 * Every padding byte is a named field.
 *
 * From the loader (pyxdp.xdp.compiler.shared_defines), as zl_consts.h says:
 *   ZL_CONFIG_FLOWS  the zl_config.flags bit that turns per-flow tracking on
 *   ZL_CONFIG_FORWARD  the bit that turns XDP forwarding on (zl_forward.h)
 *   ZL_GAP_BUCKETS   token gaps are counted in log2 microsecond buckets:
 *                    bucket 0 holds gaps under 1 us, bucket k (1..20) holds
 *                    [2^(k-1), 2^k) us, the last holds 2^20 us (1.05 s)
 *                    and longer. pyxdp/xdp/flows.py gap_bucket() is the
 *                    reference.
 */
#ifndef ZL_STRUCTS_H
#define ZL_STRUCTS_H

#include "zl_consts.h"

#if !defined(ZL_CONFIG_FLOWS) || !defined(ZL_CONFIG_FORWARD) || !defined(ZL_GAP_BUCKETS) || \
	!defined(ZL_FWD_REASONS)
#error "ZL_CONFIG_FLOWS, ZL_CONFIG_FORWARD, ZL_GAP_BUCKETS and ZL_FWD_REASONS are defined by the loader (docs/spec.md section 7.2)"
#endif

/* One per CPU; userspace sums them. Every field only ever grows. */
struct zl_counters {
	__u64 packets;          /* every packet the program saw */
	__u64 other;            /* not token traffic: passed untouched */
	__u64 fragments;        /* IPv4/IPv6 fragments: passed, never parsed */
	__u64 beyond_window;    /* token-port datagrams the direct parser passed unjudged */
	__u64 token_datagrams;  /* datagrams whose every frame is valid */
	__u64 frames[ZL_FRAME_TYPES]; /* by type, request..pong, token datagrams only */
	__u64 payload_bytes;    /* frame payload bytes in token datagrams */
	__u64 redirected;       /* token datagrams sent to an AF_XDP socket */
	__u64 fallback_passed;  /* token datagrams passed: no socket on the queue */
	__u64 malformed[ZL_REASONS]; /* by reason - 1 (zl_consts.h) */
	__u64 malformed_dropped;
	__u64 malformed_passed;
	__u64 forwarded;        /* token datagrams routed out of an egress interface */
	__u64 forward[ZL_FWD_REASONS]; /* not forwarded, by reason - 1 (zl_forward.h) */
	__u64 multi_buffer_passed; /* token datagrams in several buffers passed: the
				    * queue's socket takes one buffer a packet */
};

/* zl_config.flags (ZL_CONFIG_FLOWS, ZL_CONFIG_FORWARD). Every bit's zero is
 * the default, so a fresh map and one pinned before the flags existed (the
 * field was reserved, zero) agree. Per-flow tracking is opt-in: it reads the
 * clock and updates a hash per token datagram, several times what parsing
 * the datagram costs. Forwarding is opt-in: it turns a host into a router
 * for token datagrams. */
struct zl_config {
	__u32 on_malformed; /* ZL_MALFORMED_DROP or ZL_MALFORMED_PASS */
	/* ZL_CONFIG_* bits; from bit ZL_CONFIG_GENERATION_SHIFT up, the
	 * generation of the program that acts (xdp_token.bpf.c) */
	__u32 flags;
};

/* A flow: one sender's token frames to one port. */
struct zl_flow_key {
	__u32 saddr[4];   /* network order; IPv4 uses saddr[0], the rest zero */
	__u16 sport;      /* host order */
	__u16 dport;      /* host order */
	__u8 ip_version;  /* 4 or 6 */
	__u8 pad[3];      /* zero: the key is hashed whole */
};

/* One per flow, shared by all CPUs (see zl_flows.h for why). Times are
 * bpf_ktime_get_ns(), i.e. CLOCK_MONOTONIC. */
struct zl_flow {
	__u64 frames[ZL_FRAME_TYPES]; /* by type, request..pong */
	__u64 payload_bytes;
	__u64 datagrams;
	__u64 first_ns;               /* first token datagram */
	__u64 last_ns;                /* latest token datagram */
	__u64 last_token_ns;          /* the gap clock; 0: reset by REQUEST or DONE */
	__u64 gap_sum_ns;
	__u64 gaps[ZL_GAP_BUCKETS];   /* one sample per TOKEN frame with a clock */
};

/* The gaps of every flow of the interface together, per CPU. Unlike a flow
 * it is never evicted: its counts only grow, as Prometheus expects. */
struct zl_gap_hist {
	__u64 sum_ns;
	__u64 buckets[ZL_GAP_BUCKETS];
};

#endif

// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* zerolayer's XDP program: judge token datagrams at the driver, count them,
 * and hand valid ones to the AF_XDP socket of their rx queue, or, with
 * forwarding on, route those for another host out of another interface.
 * Verdicts and counters are those of docs/spec.md sections 2 and 3. */
/* Built by clang into a BPF object (pyxdp/xdp/objects.py), as every
 * program is: libxdp's dispatcher needs the object's BTF. */
#include "zl_object.h"
#include "zl_consts.h"
#include "zl_structs.h"
#include "zl_maps.h"
#include "zl_parse.h"
#include "zl_frames.h"
#include "zl_csum.h"
#include "zl_flows.h"
#include "zl_forward.h"
#if ZL_HAVE_XDP_LOAD_BYTES
#include "zl_buffers.h"
#endif

#if !defined(ZL_XDP_PROGRAM) || !defined(ZL_XDP_PRIORITY)
#error "ZL_XDP_PROGRAM and ZL_XDP_PRIORITY are defined by the loader (docs/spec.md section 7.2)"
#endif

char _license[] SEC("license") = "Dual BSD/GPL";

#ifndef ZL_CONFIG_GENERATION_SHIFT
#error "ZL_CONFIG_GENERATION_SHIFT is defined by the loader (docs/spec.md section 7.2)"
#endif

/* This program's generation, set by the loader before it loads (a frozen
 * constant to the verifier). An upgrade inside libxdp's dispatcher runs the
 * new program beside the old one for a moment: only the one whose
 * generation the config names acts, the other passes every packet on,
 * uncounted, so each is judged and counted once (docs/spec.md section 6.4). */
const volatile __u32 zl_generation = 0;

/* In libxdp's dispatcher: its default place, and the next program runs
 * after every datagram this one passes (not a token datagram, or passed
 * by policy). The loader may set another priority (--priority). */
ZL_XDP_RUN_CONFIG(ZL_XDP_PROGRAM, ZL_XDP_PRIORITY);

static __always_inline int zl_malformed(struct xdp_md *ctx, struct zl_counters *c,
					__u32 reason)
{
	__u32 zero = 0;
	struct zl_config *cfg;

	/* The mask is for 6.1's verifier, which cannot bound a reason that a
	 * global function wrote (zl_buffers.h) from these tests alone. */
	if (reason >= ZL_SHORT_HEADER && reason <= ZL_REASONS)
		c->malformed[zl_bound(reason - 1, 7)]++;
	cfg = bpf_map_lookup_elem(&zl_config, &zero);
	if (cfg && cfg->on_malformed == ZL_MALFORMED_PASS &&
	    !((cfg->flags & ZL_CONFIG_FORWARD) && zl_routed_on(ctx))) {
		c->malformed_passed++;
		return XDP_PASS;
	}
	c->malformed_dropped++;
	return XDP_DROP;
}

/* Per-flow cadence (zl_flows.h): one clock read and, for a known flow, one
 * hash lookup per token datagram. It parses the packet again rather than
 * have the common path, flows off, keep the headers it needs alive across
 * the walk: a parse is a few ns, the clock read alone tens. */
static __always_inline void zl_track_flow(struct xdp_md *ctx, const struct zl_walk *walk)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct zl_flow_key key = {};
	struct zl_walk w = *walk;
	struct zl_udp udp;
	struct zl_flow *f;
	__u32 zero = 0;
	__u64 now;

	/* Recounted here, not shared with the counters' update: sharing kept
	 * five values alive (on the stack) on every token datagram. */
	zl_opaque(w.type_counts);
	if (zl_parse_udp(data, data_end, &udp) < ZL_L4_UDP ||
	    zl_flow_key(data, data_end, &udp, &key))
		return;
	now = bpf_ktime_get_ns();
	f = bpf_map_lookup_elem(&zl_flows, &key);
	if (!f) {
		struct zl_flow fresh = {};

		fresh.first_ns = now;
		/* NOEXIST: if another CPU added it meanwhile, keep theirs. */
		bpf_map_update_elem(&zl_flows, &key, &fresh, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&zl_flows, &key);
		if (!f)
			return;
	}
	zl_flow_update(f, bpf_map_lookup_elem(&zl_gaps, &zero), &w, now);
}

/* Whether datagrams to PORT carry frames, in the half of zl_ports the
 * config names (zl_maps.h). */
static __always_inline int zl_is_token_port(__u32 port)
{
	__u32 zero = 0, slot = port;
	struct zl_config *cfg;
	__u8 *in_set;

	cfg = bpf_map_lookup_elem(&zl_config, &zero);
	if (!cfg)
		return 0;
	if (cfg->flags & ZL_CONFIG_PORTS_HALF)
		slot += ZL_PORT_SLOTS;
	in_set = bpf_map_lookup_elem(&zl_ports, &slot);
	return in_set && *in_set;
}

/* Whether the socket registered for QUEUE takes packets in several
 * buffers (zl_maps.h). */
static __always_inline int zl_takes_buffers(__u32 queue)
{
	__u8 *sg = bpf_map_lookup_elem(&zl_xsks_sg, &queue);

	return sg && *sg;
}

/* What the packet is: ZL_L4_OTHER, ZL_L4_FRAGMENT, or ZL_L4_UDP for a
 * datagram to a token port, walked into *W (ZL_L4_UDP_LONG when it goes on
 * past the first buffer). A datagram whose frames are valid has its UDP
 * checksum checked too: wrong, it is malformed (ZL_BAD_CHECKSUM); right,
 * *CHECK is what zl_csum_check() says to write before it leaves. */
static __always_inline int zl_classify(struct xdp_md *ctx, struct zl_walk *w, __u32 *check)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct zl_udp udp;
	int kind;

	kind = zl_parse_udp(data, data_end, &udp);
	if (kind < ZL_L4_UDP)
		return kind;
	if (!zl_is_token_port(udp.dport))
		return ZL_L4_OTHER;
#if ZL_HAVE_XDP_LOAD_BYTES
	if (kind == ZL_L4_UDP_LONG)
		return zl_judge_buffers(ctx, &udp, w, check);
#endif
	zl_walk_frames(ctx, data, data_end, udp.payload_off, udp.payload_end, w, 1);
	if (w->reason == ZL_VALID) {
		int rc = zl_csum_check(ctx, &udp);

		if (rc == ZL_CSUM_BAD)
			w->reason = ZL_BAD_CHECKSUM;
		else
			*check = rc;
	}
	return ZL_L4_UDP;
}

/* Named by the loader: zerolayer_xdp for the full parser, another name for
 * the direct one, so the kernel's name of the program says which runs
 * (pyxdp.xdp.parsers). */
/* The full parser judges packets in several buffers, so it may be loaded
 * where they arrive (xdp.frags: jumbo frames on veth, virtio_net...). */
#if ZL_HAVE_XDP_LOAD_BYTES
SEC("xdp.frags")
#else
SEC("xdp")
#endif
int ZL_XDP_PROGRAM(struct xdp_md *ctx)
{
	struct zl_counters *c;
	struct zl_config *cfg;
	struct zl_walk walk;
	__u32 zero = 0, check = 0;
	int kind, queue, action, reason;

	cfg = bpf_map_lookup_elem(&zl_config, &zero);
	if (!cfg || cfg->flags >> ZL_CONFIG_GENERATION_SHIFT != zl_generation)
		return XDP_PASS;
	kind = zl_classify(ctx, &walk, &check);
	/* Looked up only now: held across the walk, the pointer took a
	 * register the walk needs, and the walk's state went to the stack. */
	c = bpf_map_lookup_elem(&zl_counters, &zero);
	if (!c)
		return XDP_PASS;
	c->packets++;
	if (kind == ZL_L4_FRAGMENT) {
		c->fragments++;
		return XDP_PASS;
	}
	if (kind < ZL_L4_UDP)
		goto other;
	if (walk.reason != ZL_VALID) {
#if !ZL_HAVE_XDP_LOAD_BYTES
		if (walk.reason == ZL_BEYOND_WINDOW) {
			c->beyond_window++;
			return XDP_PASS;
		}
#endif
		return zl_malformed(ctx, c, walk.reason);
	}

	c->token_datagrams++;
	zl_add_frames(c->frames, walk.type_counts);
	c->payload_bytes += walk.payload_bytes;

	cfg = bpf_map_lookup_elem(&zl_config, &zero);
	if (cfg && (cfg->flags & ZL_CONFIG_FLOWS))
		zl_track_flow(ctx, &walk);
	if (cfg && (cfg->flags & ZL_CONFIG_FORWARD)) {
		reason = zl_forward(ctx, check);
		if (reason == ZL_VALID) {
			c->forwarded++;
			return XDP_REDIRECT;
		}
		/* Not forwarded: the normal verdict below, and why. */
		if (reason >= ZL_FWD_NO_NEIGHBOUR && reason <= ZL_FWD_REASONS)
			c->forward[reason - 1]++;
	}

	/* Most queues have no socket: look first (an inlined lookup) before
	 * calling the redirect helper, whose flags argument is the action
	 * when the queue has no socket. */
	queue = ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&zl_xsks, &queue)) {
		c->fallback_passed++;
		return XDP_PASS;
	}
	/* Another socket would drop a packet in several buffers. */
	if (kind == ZL_L4_UDP_LONG && !zl_takes_buffers(queue)) {
		c->multi_buffer_passed++;
		return XDP_PASS;
	}
	action = bpf_redirect_map(&zl_xsks, queue, XDP_PASS);
	if (action == XDP_REDIRECT)
		c->redirected++;
	else
		c->fallback_passed++;
	return action;

other:
	c->other++;
	return XDP_PASS;
}

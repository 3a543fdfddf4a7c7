/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The frame walker: judges a UDP payload as a whole (docs/spec.md section 1.4).
 * pyxdp/proto/judge.py is its Python reference and must agree on every input. */
#ifndef ZL_FRAMES_H
#define ZL_FRAMES_H

#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_counts.h"
#include "zl_verifier.h"

/* Per load, from the loader (pyxdp.xdp.compiler.token_flags): 1 builds the
 * full parser, which reads headers past the direct-read window with
 * bpf_xdp_load_bytes (Linux 5.18); 0 the direct parser, for kernels without
 * it (docs/spec.md section 1.7). */
#ifndef ZL_HAVE_XDP_LOAD_BYTES
#error "ZL_HAVE_XDP_LOAD_BYTES is defined by the loader (docs/spec.md section 7.2)"
#endif

struct zl_walk {
	__u64 type_counts;   /* packed as zl_counts.h says */
	__u64 payload_bytes;
	__u32 reason;        /* ZL_VALID, a reason or ZL_BEYOND_WINDOW (zl_consts.h) */
};

/* Walks the frames in [off, end), packet offsets; END is within the packet.
 * Sets W's type_counts and payload_bytes only for a valid datagram. DIRECT
 * (a constant) is 1 where END is within the first buffer; 0 reads every
 * header through bpf_xdp_load_bytes (zl_buffers.h).
 *
 * The walk is a dependency chain: every header's position comes from the
 * previous length, so the loop does only what that chain and the verifier
 * need, and works the rest out on the way out:
 * - every check a valid frame passes is one branch that it never takes;
 * - a header that runs past END fails one of them too (its type, or its
 *   length, which then ends past END), and only then is told apart as a
 *   short header, keeping the spec's order: short, type, length;
 * - a valid datagram ends exactly at END, so its payload bytes are its
 *   length less the headers: no sum in the loop.
 * Its state stays in registers: nothing else is held across it (see
 * zerolayer_xdp), as a spilled count added a store and a reload to every
 * frame.
 *
 * Headers within ZL_DIRECT_MAX of the packet start (every header, unless a
 * big skb-mode packet) are read in the first loop, one unaligned 32-bit
 * load each (allowed on x86-64 and arm64), with no helper call that would
 * push the loop's state onto the stack. The verifier must bound a packet
 * pointer built from a run-time length, hence the window. Headers further
 * in are read by the second loop through bpf_xdp_load_bytes(). Both share
 * one frame budget. The direct parser has no second loop: it judges what
 * the next header's offset alone tells (the budget, a short header) and
 * leaves the rest unjudged (ZL_BEYOND_WINDOW). */
static __always_inline void zl_walk_frames(struct xdp_md *ctx, void *data,
					   void *data_end, __u64 off, __u64 end,
					   struct zl_walk *w, const int direct)
{
	__u64 start = off, counts = 0, next, type;
	__u32 reason;
	__u64 i = 0;

	/* The verifier must know the first header is near the start; clang
	 * knows it too, and would drop a plain mask. */
	off = zl_bound16(off);
	if (!direct) /* a constant: one loop or the other is compiled */
		goto loaded;
	/* The loop's tests against constants are at its end, as exits: at its
	 * top, clang rotates them into "stay if CONST > x", which BPF's first
	 * instruction set (no JLT) takes only with CONST in a register, one the
	 * loop then lacks. */
	for (;;) {
		__u8 *h = data + off;

		/* Past the packet is past END too: a short header. */
		if ((void *)(h + ZL_FRAME_HDR_LEN) > data_end)
			goto short_header;
		type = h[4] - 1;
		zl_opaque(type); /* keeps the check one compare */
		if (type >= ZL_FRAME_TYPES)
			goto bad_type;
		counts += zl_type_bit(type + 1);
		next = off + ZL_FRAME_HDR_LEN;
		zl_opaque(next); /* the length is added last: one add on the chain */
		next += zl_ntohl(*(__u32 *)h);
		if (next >= end)
			goto last;
		off = next;
		if (off > ZL_DIRECT_MAX)
			break;
		i++;
		zl_opaque(i); /* a counter 6.1 can follow to the end */
		if (i == ZL_MAX_FRAMES)
			goto too_many;
	}
	i++;
	if (i == ZL_MAX_FRAMES)
		goto too_many;

loaded:
#if ZL_HAVE_XDP_LOAD_BYTES
	for (;;) {
		__u8 hdr[ZL_FRAME_HDR_LEN];

		if (off + ZL_FRAME_HDR_LEN > end ||
		    bpf_xdp_load_bytes(ctx, off, hdr, sizeof(hdr)))
			goto short_header;
		type = hdr[4] - 1;
		zl_opaque(type);
		if (type >= ZL_FRAME_TYPES)
			goto bad_type;
		counts += zl_type_bit(type + 1);
		next = off + ZL_FRAME_HDR_LEN;
		zl_opaque(next);
		next += zl_ntohl(*(__u32 *)hdr);
		if (next >= end)
			goto last;
		off = next;
		i++;
		zl_opaque(i);
		if (i == ZL_MAX_FRAMES)
			goto too_many;
	}
#else
	if (off + ZL_FRAME_HDR_LEN > end)
		goto short_header;
	w->reason = ZL_BEYOND_WINDOW;
	return;
#endif

last: /* frame I, at OFF, reaches END or runs past it */
	if (next == end) {
		w->type_counts = counts;
		w->payload_bytes = end - start - ZL_FRAME_HDR_LEN * (i + 1);
		w->reason = ZL_VALID;
		return;
	}
	reason = off + ZL_FRAME_HDR_LEN > end ? ZL_SHORT_HEADER : ZL_TRUNCATED;
	goto out;
bad_type:
	reason = off + ZL_FRAME_HDR_LEN > end ? ZL_SHORT_HEADER : ZL_UNKNOWN_TYPE;
	goto out;
too_many: /* MAX_FRAMES valid frames, and bytes left over */
	reason = ZL_TOO_MANY_FRAMES;
	goto out;
short_header:
	reason = ZL_SHORT_HEADER;
out:
	w->reason = reason;
}

#endif

/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Framing a TCP byte stream (docs/spec.md section 4) for the kernel's stream
 * parser.
 *
 * The stream parser hands an SK_SKB program an skb whose data starts where
 * the TCP segment starts, not where the message starts: after a message that
 * ended mid-segment, the next one begins part-way in, at an offset
 * (strp_msg->offset) the program is not told. We work it out from TCP
 * sequence numbers. An SK_SKB program's __sk_buff->cb[] is a scratch area at
 * the start of the skb's control block, and there TCP's control block keeps
 * the sequence number of the segment's first byte (the stream parser's clone
 * copies it): cb[0] is that number. Each message starts where the previous
 * one ended, so the difference is the offset.
 *
 * That is the kernel's internal layout (6.18 here), not an interface: the
 * relay checks it at start-up on a loopback pair (RelayDataPath.self_check)
 * and refuses to run where it does not hold. Kept per socket instead, the
 * offset would go wrong silently after a retransmitted segment that
 * overlaps data already received. */
#ifndef ZL_STREAM_H
#define ZL_STREAM_H

#include <uapi/linux/bpf.h>

#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_sk_structs.h"
#include "zl_verifier.h"

/* What a parser's negative return becomes: the stream parser stops and sets
 * it as the socket's error, where the relay reads it (SO_ERROR) as the
 * reason. Each reason's errno, ZL_SK_ERRNO_<reason>, comes from the loader
 * (pyxdp.relay.schema.ERRNO_REASONS; the table is in docs/spec.md section
 * 4.2). Oversize's, EMSGSIZE, is also what the stream parser itself reports
 * for a frame longer than the socket's receive buffer. */
#if !defined(ZL_SK_ERRNO_UNKNOWN_TYPE) || !defined(ZL_SK_ERRNO_OVERSIZE) || \
	!defined(ZL_SK_ERRNO_DESYNC)
#error "the relay's errnos are defined by the loader (docs/spec.md section 7.2)"
#endif

static __always_inline int zl_sk_errno(__u32 reason)
{
	switch (reason) {
	case ZL_SK_UNKNOWN_TYPE:
		return -ZL_SK_ERRNO_UNKNOWN_TYPE;
	case ZL_SK_OVERSIZE:
		return -ZL_SK_ERRNO_OVERSIZE;
	default:
		return -ZL_SK_ERRNO_DESYNC;
	}
}

/* Judges a frame header: 0 when valid, or a ZL_SK_* reason. The loader
 * keeps max_length below 2^31 - 5, so a frame's length fits the parser's
 * int return. */
static __always_inline __u32 zl_stream_judge(__u32 len, __u8 type, __u32 max_length)
{
	if ((__u32)(type - 1) >= ZL_FRAME_TYPES)
		return ZL_SK_UNKNOWN_TYPE;
	if (len > max_length)
		return ZL_SK_OVERSIZE;
	return 0;
}

/* Places the current message in SKB on the first call for it: sets
 * c->msg_off, or returns ZL_SK_DESYNC. Later calls for the same message (its
 * first header was incomplete) get the same skb, grown, and the same offset. */
static __always_inline __u32 zl_stream_place(struct __sk_buff *skb, struct zl_sk_conn *c)
{
	__u32 seg_seq = skb->cb[0];
	__u32 off;

	if (c->in_msg)
		return 0;
	if (!c->started) {
		/* The relay never reads: the first segment starts the stream. */
		c->started = 1;
		c->first_seq = seg_seq;
		c->next_seq = seg_seq;
	}
	off = c->next_seq - seg_seq;
	if (off >= skb->len)
		return ZL_SK_DESYNC;
	c->msg_off = off;
	c->in_msg = 1;
	c->msg_len = 0;
	return 0;
}

/* A message's frame counts by type, ZL_SK_COUNT_BITS bits a type (REQUEST
 * lowest): wider than zl_counts.h's bytes, so a message can hold more than
 * 255 frames. */
static __always_inline __u64 zl_sk_type_bit(__u64 type)
{
	return 1ULL << ((type - 1) * ZL_SK_COUNT_BITS);
}

/* Adds COUNTS to FRAMES[ZL_FRAME_TYPES]; returns how many frames that was. */
static __always_inline __u64 zl_sk_add_frames(__u64 *frames, __u64 counts)
{
	__u64 mask = (1ULL << ZL_SK_COUNT_BITS) - 1, total = 0;

#pragma unroll
	for (int t = 0; t < ZL_FRAME_TYPES; t++) {
		__u64 n = (counts >> (t * ZL_SK_COUNT_BITS)) & mask;

		if (n) {
			frames[t] += n;
			total += n;
		}
	}
	return total;
}

/* The stream parser may only read its skb: Linux refuses, at attach, a
 * parser that can change packet data (bpf_skb_pull_data among them), since
 * a pull could free fragments the stream parser still holds. TCP leaves
 * most data in page fragments, where a program cannot read in place, and
 * bpf_skb_load_bytes walks the fragments on every call. So a message's
 * first ZL_SK_WINDOW bytes are copied once into a per-CPU window, where
 * its headers are read in place; headers past it cost a helper call each.
 * ZL_SK_WINDOW 0 reads every header with its own helper call: for kernels
 * whose BPF has no atomic exchange (before Linux 5.12), which the window's
 * claim needs. */
#ifndef ZL_SK_WINDOW
#error "ZL_SK_WINDOW is chosen by the loader (pyxdp/relay/datapath.py)"
#endif
#if ZL_SK_WINDOW & (ZL_SK_WINDOW - 1)
#error "ZL_SK_WINDOW must be 0 or a power of two"
#endif

static __always_inline void zl_stream_header_decode(const __u8 *h, __u32 *len, __u8 *type)
{
	*len = ((__u32)h[0] << 24) | ((__u32)h[1] << 16) | ((__u32)h[2] << 8) | h[3];
	*type = h[4];
}

#if ZL_SK_WINDOW
struct zl_stream_window {
	/* Claimed by one parser run at a time. A parser run in process
	 * context can be preempted on its CPU by another one (for another
	 * socket): the loser reads with the helper instead. */
	__u64 busy;
	__u32 len; /* bytes copied, from the message's start */
	__u32 pad;
	/* One header's worth of slack: a read at a masked offset stays
	 * inside the value, as far as the verifier can tell. */
	__u8 bytes[ZL_SK_WINDOW + ZL_FRAME_HDR_LEN];
};

/* W (this CPU's window, zl_sk_maps.h), claimed and filled with SKB's
 * bytes from OFF; NULL when another run holds it, or it could not be
 * filled. */
static __always_inline struct zl_stream_window *zl_stream_window_take(struct zl_stream_window *w,
								      struct __sk_buff *skb,
								      __u32 off)
{
	/* 64-bit: clang would check a 32-bit n and hand the helper the
	 * unchecked 64-bit register. */
	__u64 n = (__u64)skb->len - off;

	if (!w || __sync_lock_test_and_set(&w->busy, 1))
		return NULL;
	if (n > ZL_SK_WINDOW)
		n = ZL_SK_WINDOW;
	zl_opaque(n);
	if (n < ZL_FRAME_HDR_LEN || n > ZL_SK_WINDOW ||
	    bpf_skb_load_bytes(skb, off, w->bytes, n)) {
		w->busy = 0;
		return NULL;
	}
	w->len = n;
	return w;
}

static __always_inline void zl_stream_window_release(struct zl_stream_window *w)
{
	if (w)
		w->busy = 0;
}
#else
struct zl_stream_window;

static __always_inline struct zl_stream_window *zl_stream_window_take(struct zl_stream_window *w,
								      struct __sk_buff *skb,
								      __u32 off)
{
	return NULL;
}

static __always_inline void zl_stream_window_release(struct zl_stream_window *w)
{
}
#endif

/* Reads the frame header REL bytes into the message at OFF of SKB, from
 * the window W where it is all there: 0, or -1 when SKB ends first. */
static __always_inline int zl_stream_header_read(struct __sk_buff *skb,
						 struct zl_stream_window *w, __u32 off,
						 __u32 rel, __u32 *len, __u8 *type)
{
	__u8 hdr[ZL_FRAME_HDR_LEN];

#if ZL_SK_WINDOW
	if (w && rel < ZL_SK_WINDOW && rel + ZL_FRAME_HDR_LEN <= w->len) {
		zl_stream_header_decode(&w->bytes[zl_bound(rel, ZL_SK_WINDOW - 1)], len, type);
		return 0;
	}
#endif
	if (bpf_skb_load_bytes(skb, off + rel, hdr, sizeof(hdr)))
		return -1;
	zl_stream_header_decode(hdr, len, type);
	return 0;
}

#endif

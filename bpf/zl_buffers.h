/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* A token datagram in several buffers (multi-buffer XDP, Linux 5.18: the
 * program is loaded as xdp.frags, and a jumbo frame arrives as a first
 * buffer and fragments). Direct access reaches only the first buffer, so
 * the frames past it and the checksum's bytes are read through
 * bpf_xdp_load_bytes. Judged whole, as docs/spec.md section 1.9 says: the
 * same walk, the same checksum, the same verdicts.
 *
 * It is a global function, checked by the verifier once on its own: inlined,
 * its loops doubled the time the verifier took over the whole program
 * (0.34 to 0.71 s on the 6.18 host), which every attach pays. */
#ifndef ZL_BUFFERS_H
#define ZL_BUFFERS_H

#include "zl_csum.h"
#include "zl_frames.h"
#include "zl_object.h"
#include "zl_parse.h"

/* The most pieces a datagram of 64 KiB is summed in. */
#define ZL_PIECES_MAX (ZL_PACKET_REACH / ZL_CSUM_CHUNK + 1)

/* Room, per CPU, for the piece being summed: 512 bytes do not fit on the
 * BPF stack beside the caller's. Private to each loaded program. */
struct zl_piece {
	__u8 bytes[ZL_CSUM_CHUNK + 4];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zl_piece);
} zl_pieces SEC(".maps");

/* The sum of the LEN bytes at packet offset OFF, wherever they lie, into
 * *SUM, 512 bytes a piece; ZL_CSUM_BAD when they cannot be read. Pieces
 * start at even offsets from OFF, so the words are those of one pass. */
static __always_inline int zl_csum_loaded(struct xdp_md *ctx, __u64 off, __u64 len,
					  __u64 *sum)
{
	struct zl_piece *piece;
	__u32 zero = 0;
	__u64 s = 0, i, at, rest, n;

	piece = bpf_map_lookup_elem(&zl_pieces, &zero);
	if (!piece)
		return ZL_CSUM_BAD;
	for (i = 0; i < ZL_PIECES_MAX; i++) {
		zl_opaque(i);
		at = i * ZL_CSUM_CHUNK;
		if (at >= len)
			break;
		/* 1 to 512 bytes, written so that 6.1's verifier sees n >= 1
		 * (it learns nothing from a test of n against 0). */
		rest = len - at - 1;
		if (rest > ZL_CSUM_CHUNK - 1)
			rest = ZL_CSUM_CHUNK - 1;
		n = zl_bound(rest, ZL_CSUM_CHUNK - 1) + 1;
		/* The helper sums whole words: a last odd piece is padded with
		 * zeros, which add nothing. */
		*(__u32 *)&piece->bytes[n & (ZL_CSUM_CHUNK - 4)] = 0;
		if (bpf_xdp_load_bytes(ctx, off + at, piece->bytes, n))
			return ZL_CSUM_BAD;
		s += (__u32)bpf_csum_diff(0, 0, (__be32 *)piece->bytes,
					  zl_at_most((n + 3) & ~3ULL, ZL_CSUM_CHUNK), 0);
	}
	*sum = s;
	return 0;
}

/* Judges the datagram UDP found (ZL_L4_UDP_LONG) into *W, and its checksum
 * into *CHECK as zl_csum_check() would. Returns ZL_L4_OTHER when its UDP
 * length runs past the whole packet (the kernel's UDP layer drops it),
 * else ZL_L4_UDP_LONG. The pointers are the caller's stack; a global
 * function must still check them. */
__attribute__((noinline)) int zl_judge_buffers(struct xdp_md *ctx, const struct zl_udp *udp,
					       struct zl_walk *w, __u32 *check)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 l4_off, ulen, pseudo, bytes;
	struct udphdr *uh;
	struct zl_udp u;
	int rc;

	if (!udp || !w || !check)
		return ZL_L4_OTHER;
	u = *udp;
	if (u.payload_end > bpf_xdp_get_buff_len(ctx))
		return ZL_L4_OTHER;
	zl_walk_frames(ctx, data, data_end, u.payload_off, u.payload_end, w, 0);
	if (w->reason != ZL_VALID)
		return ZL_L4_UDP_LONG;
	l4_off = (u.payload_off - sizeof(struct udphdr)) & 0xff;
	ulen = u.payload_end - u.payload_off + sizeof(struct udphdr);
	uh = data + l4_off;
	if ((void *)(uh + 1) > data_end) {
		w->reason = ZL_BAD_CHECKSUM;
		return ZL_L4_UDP_LONG;
	}
	/* Zero: no checksum over IPv4; never valid over IPv6 (RFC 8200). */
	rc = u.ip_version == 4 ? 0 : ZL_CSUM_BAD;
	if (uh->check)
		rc = zl_csum_pseudo(data, data_end, &u, uh->len, &pseudo) ||
			     zl_csum_loaded(ctx, l4_off, ulen, &bytes) ?
			     ZL_CSUM_BAD : zl_csum_verdict(uh->check, pseudo, bytes);
	if (rc == ZL_CSUM_BAD)
		w->reason = ZL_BAD_CHECKSUM;
	else
		*check = rc;
	return ZL_L4_UDP_LONG;
}

#endif

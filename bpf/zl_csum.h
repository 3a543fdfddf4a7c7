/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The UDP checksum of a token datagram (docs/spec.md section 1.8): whether
 * the bytes are the ones that were sent, before XDP hands them to a socket
 * or to another host. Nobody else checks first: the program runs before the
 * kernel's UDP layer, and a NIC marks a bad checksum rather than drop it.
 *
 * Sums are one's-complement sums of 16-bit words (RFC 1071) taken in memory
 * order: every word is loaded as the host loads it, so no byte is swapped,
 * and the folded result compares with the checksum field as loaded.
 *
 * A datagram sent by this host's kernel over a veth (or by any sender whose
 * device finishes checksums) reaches XDP with CHECKSUM_PARTIAL: its field
 * holds only the folded pseudo-header sum, not complemented, and no device
 * will finish it. XDP cannot see skb->ip_summed, so such a datagram is told
 * by its field: equal to that sum, the datagram is taken as a partial one.
 * A corrupted datagram passes that way only if its field happens to equal
 * the sum (one chance in 65,535).
 *
 * The bytes are summed by bpf_csum_diff() over direct packet access, in
 * constant sizes the verifier can check (multiples of 4, at most 512 bytes
 * a call, as net/core/filter.c requires): whole 512-byte chunks, then one
 * call for each bit of the remainder from 256 down to 128; the bits from 64
 * down to 4 are read as 32-bit words directly (a call costs more than
 * sixteen loads: 2 ns of a 4-frame datagram's 31 on the 2.0 GHz Xeon), and
 * the last up to three bytes one by one. Each offset is worked out from the datagram's start and
 * length, not carried from the step before, so the verifier sees one state
 * after the chunk loop however many chunks it ran. (The helper returns
 * a 32-bit sum in a wider type: cast back to one.) Direct
 * access reaches the first 64 KiB of a packet: a datagram that ends more
 * than ZL_CSUM_REACH bytes in (skb mode, an MTU above 65,000) cannot be
 * checked and counts as bad. */
#ifndef ZL_CSUM_H
#define ZL_CSUM_H

#include <uapi/linux/bpf.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>

#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_parse.h"
#include "zl_verifier.h"

#ifndef ZL_BAD_CHECKSUM
#error "ZL_BAD_CHECKSUM, the malformed reason, is defined by the loader (docs/spec.md section 7.2)"
#endif

#define ZL_CSUM_CHUNK 512
/* 512-byte chunks the verifier can place: with the datagram starting up to
 * 255 bytes in, the last must end within ZL_PACKET_REACH. */
#define ZL_CSUM_MAX_CHUNKS 127
#define ZL_PACKET_REACH 0xffff /* the verifier's MAX_PACKET_OFF */
/* Where a datagram must end for every read below to be within reach. */
#define ZL_CSUM_REACH (ZL_PACKET_REACH - 3)

#define ZL_CSUM_BAD (-1)

static __always_inline __u32 zl_csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (s & 0xffff) + (s >> 16);
}

/* One step of the remainder: the SIZE bytes at packet offset AT, if LEN
 * has the bit SIZE, added to S by the helper, or to W by SIZE / 4 direct
 * loads (for a few words, cheaper than a call). SIZE is a constant. */
#define ZL_CSUM_STEP(size, direct)                                                \
	do {                                                                      \
		__u64 at = off + (len & ~(__u64)(2 * (size) - 1));                \
		void *p;                                                          \
		if (!(len & (size)))                                              \
			break;                                                    \
		if (at > ZL_PACKET_REACH - (size))                                \
			return ZL_CSUM_BAD;                                       \
		p = data + at;                                                    \
		if (p + (size) > data_end)                                        \
			return ZL_CSUM_BAD;                                       \
		if (direct) {                                                     \
			_Pragma("unroll") for (int k = 0; k < (size) / 4; k++)    \
				w += ((__u32 *)p)[k];                             \
		} else {                                                          \
			s = (__u32)bpf_csum_diff(0, 0, p, (size), s);             \
		}                                                                 \
	} while (0)

/* The sum of the LEN bytes at packet offset OFF (at most 255), into *SUM;
 * ZL_CSUM_BAD when they cannot be read. */
static __always_inline int zl_csum_bytes(void *data, void *data_end, __u64 off,
					 __u64 len, __u64 *sum)
{
	__u64 chunks, i, at, s = 0, w = 0, tail = 0;
	__u8 *b;

	off = off & 0xff;
	len = zl_bound16(len);
	/* Past this, some read below would be; checked once here, the checks
	 * at each read are for the verifier. */
	if (off + len > ZL_CSUM_REACH)
		return ZL_CSUM_BAD;
	chunks = len / ZL_CSUM_CHUNK;
	for (i = 0; i < ZL_CSUM_MAX_CHUNKS; i++) {
		void *p;

		/* A plain counter: clang 19 rewrote it into a negated
		 * count-down whose end 6.12's verifier could not see. */
		zl_opaque(i);
		if (i >= chunks)
			break;
		p = data + off + i * ZL_CSUM_CHUNK;
		if (p + ZL_CSUM_CHUNK > data_end)
			return ZL_CSUM_BAD;
		s = (__u32)bpf_csum_diff(0, 0, p, ZL_CSUM_CHUNK, s);
	}
	ZL_CSUM_STEP(256, 0);
	ZL_CSUM_STEP(128, 0);
	ZL_CSUM_STEP(64, 1);
	ZL_CSUM_STEP(32, 1);
	ZL_CSUM_STEP(16, 1);
	ZL_CSUM_STEP(8, 1);
	ZL_CSUM_STEP(4, 1);
	/* The last 1-3 bytes: a word [b0 b1] and a word [b2 0], in memory order. */
	if (len & 3) {
		at = off + (len & ~(__u64)3);
		if (at > ZL_PACKET_REACH - 3)
			return ZL_CSUM_BAD;
		b = data + at;
		if ((void *)(b + 1) > data_end)
			return ZL_CSUM_BAD;
		tail = zl_htons((__u16)b[0] << 8);
		if ((len & 3) >= 2) {
			if ((void *)(b + 2) > data_end)
				return ZL_CSUM_BAD;
			tail += zl_htons(b[1]);
		}
		if ((len & 3) == 3) {
			if ((void *)(b + 3) > data_end)
				return ZL_CSUM_BAD;
			tail += zl_htons((__u16)b[2] << 8);
		}
	}
	*sum = s + w + tail;
	return 0;
}

/* The pseudo-header's sum (RFC 768, RFC 8200 section 8.1) of the datagram
 * UDP found, unfolded; ZL_CSUM_BAD if its IP header cannot be read. */
static __always_inline int zl_csum_pseudo(void *data, void *data_end,
					  const struct zl_udp *udp, __u64 ulen_be,
					  __u64 *sum)
{
	__u32 l3_off = udp->l3_off & 0x3f; /* at most 14 + 8 */
	__u64 s = zl_htons(ZL_IPPROTO_UDP) + ulen_be;

	if (udp->ip_version == 4) {
		struct iphdr *ip = data + l3_off;

		if ((void *)(ip + 1) > data_end)
			return ZL_CSUM_BAD;
		s += (__u64)ip->saddr + ip->daddr;
	} else {
		struct ipv6hdr *ip6 = data + l3_off;
		__u32 *a = (__u32 *)&ip6->saddr;

		if ((void *)(ip6 + 1) > data_end)
			return ZL_CSUM_BAD;
		/* saddr and daddr: eight words back to back */
#pragma unroll
		for (int i = 0; i < 8; i++)
			s += a[i];
	}
	*sum = s;
	return 0;
}

/* What zl_csum_check() says of a datagram whose checksum FIELD is not
 * zero, from the sums of its pseudo-header and of its bytes. */
static __always_inline int zl_csum_verdict(__u32 field, __u64 pseudo, __u64 bytes)
{
	__u32 whole = zl_csum_fold(pseudo + bytes);

	if (whole == 0xffff)
		return 0;
	if (field != zl_csum_fold(pseudo))
		return ZL_CSUM_BAD;
	/* A partial sum: the device would have summed from the UDP header on,
	 * the field (the pseudo-header's part) included, and written the
	 * complement. */
	whole = ~zl_csum_fold(bytes) & 0xffff;
	return whole ? whole : 0xffff;
}

/* Checks the UDP checksum of the datagram UDP found in CTX's packet:
 * ZL_CSUM_BAD when it is wrong; otherwise the checksum to write before the
 * datagram leaves this host (network order, never 0) when it holds only the
 * pseudo-header sum, or 0 when it needs nothing (correct, or over IPv4 the
 * zero that means "no checksum"). */
static __always_inline int zl_csum_check(struct xdp_md *ctx, const struct zl_udp *udp)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 l4_off = (udp->payload_off - sizeof(struct udphdr)) & 0xff;
	__u64 ulen = udp->payload_end - udp->payload_off + sizeof(struct udphdr);
	struct udphdr *uh = data + l4_off;
	__u64 pseudo, bytes;
	__u32 field;

	if ((void *)(uh + 1) > data_end)
		return ZL_CSUM_BAD;
	field = uh->check;
	/* Zero: no checksum over IPv4; never valid over IPv6 (RFC 8200). */
	if (!field)
		return udp->ip_version == 4 ? 0 : ZL_CSUM_BAD;
	if (zl_csum_pseudo(data, data_end, udp, uh->len, &pseudo) ||
	    zl_csum_bytes(data, data_end, l4_off, ulen, &bytes))
		return ZL_CSUM_BAD;
	return zl_csum_verdict(field, pseudo, bytes);
}

/* Writes CHECK (from zl_csum_check, non-zero) into the datagram's UDP
 * header, at L4_OFF. */
static __always_inline void zl_csum_complete(struct xdp_md *ctx, __u64 l4_off, __u16 check)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct udphdr *uh = data + (l4_off & 0xff);

	if ((void *)(uh + 1) <= data_end)
		uh->check = check;
}

#endif

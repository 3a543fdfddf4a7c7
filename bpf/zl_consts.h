/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Protocol constants: the token frame (docs/spec.md section 1), verdict policy,
 * and the Ethernet/IP numbers the parser needs. No code lives here.
 *
 * The values Python shares are not written here: the loader defines them
 * (-D) from the Python constants, for every compile
 * (pyxdp.xdp.compiler.shared_defines, docs/spec.md section 7.2), so the two
 * sides cannot drift. This file names them and refuses to compile without:
 *
 *   ZL_FRAME_HDR_LEN    a frame header: 4-byte big-endian payload length, type byte
 *   ZL_FRAME_REQUEST, ZL_FRAME_TOKEN, ZL_FRAME_DONE, ZL_FRAME_PING, ZL_FRAME_PONG
 *                       the frame types, 1..ZL_FRAME_TYPES in that order
 *   ZL_MAX_FRAMES       the walk bound, shared with the reference judge
 *   ZL_VALID, ZL_SHORT_HEADER, ZL_TRUNCATED, ZL_UNKNOWN_TYPE, ZL_TOO_MANY_FRAMES
 *                       why a datagram is malformed: the first reason met
 *                       walking it from the start; ZL_VALID (0) when none,
 *                       the others 1..ZL_REASONS (zl_counters.malformed[reason - 1])
 *   ZL_BEYOND_WINDOW    no reason: the direct parser's walk stopped at a header
 *                       it cannot read (docs/spec.md section 1.7); ZL_REASONS + 1
 *   ZL_DIRECT_MAX       the furthest packet offset of a header read with direct
 *                       packet access (the direct-read window)
 *   ZL_MALFORMED_DROP, ZL_MALFORMED_PASS
 *                       what to do with a malformed datagram (zl_config.on_malformed)
 *   ZL_MAX_VLAN_TAGS, ZL_ETH_P_IP, ZL_ETH_P_IPV6, ZL_ETH_P_8021Q, ZL_ETH_P_8021AD,
 *   ZL_IPPROTO_UDP, ZL_IPPROTO_FRAGMENT (IPv6 fragment extension header),
 *   ZL_IP_MF, ZL_IP_OFFSET (IPv4 frag_off)
 *                       what the parser reads (docs/spec.md section 1.3)
 */
#ifndef ZL_CONSTS_H
#define ZL_CONSTS_H

#if !defined(ZL_FRAME_HDR_LEN) || !defined(ZL_FRAME_TYPES) || !defined(ZL_MAX_FRAMES) || \
	!defined(ZL_FRAME_REQUEST) || !defined(ZL_FRAME_TOKEN) || !defined(ZL_FRAME_DONE) || \
	!defined(ZL_FRAME_PING) || !defined(ZL_FRAME_PONG)
#error "the frame constants are defined by the loader (docs/spec.md section 7.2)"
#endif
#if !defined(ZL_VALID) || !defined(ZL_SHORT_HEADER) || !defined(ZL_TRUNCATED) || \
	!defined(ZL_UNKNOWN_TYPE) || !defined(ZL_TOO_MANY_FRAMES) || !defined(ZL_REASONS) || \
	!defined(ZL_BEYOND_WINDOW) || !defined(ZL_DIRECT_MAX) || \
	!defined(ZL_MALFORMED_DROP) || !defined(ZL_MALFORMED_PASS)
#error "the reasons, the direct-read window and the policies are defined by the loader (docs/spec.md section 7.2)"
#endif
#if !defined(ZL_MAX_VLAN_TAGS) || !defined(ZL_ETH_P_IP) || !defined(ZL_ETH_P_IPV6) || \
	!defined(ZL_ETH_P_8021Q) || !defined(ZL_ETH_P_8021AD) || !defined(ZL_IPPROTO_UDP) || \
	!defined(ZL_IPPROTO_FRAGMENT) || !defined(ZL_IP_MF) || !defined(ZL_IP_OFFSET)
#error "the Ethernet/IP numbers are defined by the loader (docs/spec.md section 7.2)"
#endif

/* Frame counts are packed 8 bits a type into one u64 during a walk, REQUEST
 * in the lowest byte (zl_counts.h), so a walk stays below 256 frames. */
_Static_assert(ZL_FRAME_REQUEST == 1 && ZL_FRAME_TYPES <= 8, "frame types out of range");
_Static_assert(ZL_MAX_FRAMES >= 16 && ZL_MAX_FRAMES < 256, "ZL_MAX_FRAMES out of range");

#endif

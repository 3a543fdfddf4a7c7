/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Layouts the TCP frame relay shares with userspace. Python has each field
 * by field (the Layouts of pyxdp/relay/schema.py and pyxdp/relay/datapath.py):
 * change both together; tests/test_layouts.py compares them with these as
 * the object's BTF records them. Every padding byte is a named field.
 *
 * From the loader (pyxdp.xdp.compiler.shared_defines, from
 * pyxdp.relay.schema.REASONS), as zl_consts.h says: why the parser broke a
 * stream, 1..ZL_SK_REASONS (zl_sk_counters.malformed[reason - 1]):
 *   ZL_SK_UNKNOWN_TYPE  a frame header with an unknown type
 *   ZL_SK_OVERSIZE      a frame longer than zl_sk_config.max_length
 *   ZL_SK_DESYNC        the parser could not place a frame in the buffer it
 *                       was given: a kernel whose stream parser behaves
 *                       unlike the one this was written for. Never expected;
 *                       counted so that it cannot go unseen. Also a socket
 *                       with no zl_sk_conns entry.
 */
#ifndef ZL_SK_STRUCTS_H
#define ZL_SK_STRUCTS_H

#include "zl_consts.h"

#if !defined(ZL_SK_UNKNOWN_TYPE) || !defined(ZL_SK_OVERSIZE) || !defined(ZL_SK_DESYNC) || \
	!defined(ZL_SK_REASONS)
#error "the relay's reasons are defined by the loader (docs/spec.md section 7.2)"
#endif

/* Frames per stream-parser message, at most: a bound for the parser's walk.
 * Each type's count in a message is kept in ZL_SK_COUNT_BITS bits. */
#ifndef ZL_SK_BATCH
#define ZL_SK_BATCH 1024
#endif
#define ZL_SK_COUNT_BITS 12
_Static_assert(ZL_SK_BATCH < (1 << ZL_SK_COUNT_BITS), "ZL_SK_BATCH must fit ZL_SK_COUNT_BITS");
_Static_assert(ZL_FRAME_TYPES * ZL_SK_COUNT_BITS <= 64, "a message's counts must fit 64 bits");

/* One per CPU; userspace sums them. Every field only ever grows. */
struct zl_sk_counters {
	__u64 frames[ZL_FRAME_TYPES]; /* whole frames parsed, by type */
	__u64 payload_bytes;          /* their payload bytes */
	__u64 redirected;             /* frames handed to the paired socket */
	__u64 no_peer;                /* frames dropped: the pair was being torn down */
	__u64 malformed[ZL_SK_REASONS];
};

struct zl_sk_config {
	__u32 max_length; /* a longer frame payload breaks the stream */
	__u32 reserved;
};

/* Per relayed socket, keyed by its socket cookie. Userspace writes `peer`
 * when it pairs the sockets; the programs own the rest. One socket's parser
 * and verdict never run concurrently (the stream parser holds the socket's
 * lock), so plain increments are safe.
 *
 * A message of the stream parser is a run of whole frames: as many as were
 * in hand when it started (up to ZL_SK_BATCH), or one that is still
 * arriving. Sequence numbers are TCP's, modulo 2^32. */
struct zl_sk_conn {
	__u64 peer;         /* cookie of the socket this one's frames go to */
	__u64 frame_bytes;  /* bytes of whole frames redirected to the peer */
	__u64 msg_types;    /* the current message's frames by type, ZL_SK_COUNT_BITS each */
	__u32 first_seq;    /* the stream's first byte */
	__u32 next_seq;     /* where the current (or next) message starts */
	__u32 seen_end;     /* just past the last byte the parser was shown */
	__u32 msg_off;      /* the current message's offset in the parser's skb */
	__u32 msg_len;      /* its length; 0 while its first header is incomplete */
	__u32 broken;       /* the ZL_SK_* reason the parser broke the stream for */
	__u8 started;       /* first_seq is set */
	__u8 in_msg;        /* a message has started and not been redirected */
	__u8 pad[6];
};

#endif

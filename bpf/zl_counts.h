/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Frame counts by type, packed 8 bits a type into one u64 (REQUEST in the
 * lowest byte), so a walk over many frames carries a single register. A
 * walk is bounded well below 256 frames (ZL_MAX_FRAMES, ZL_SK_BATCH), so a
 * byte never overflows. Shared by the XDP walker and the stream parser. */
#ifndef ZL_COUNTS_H
#define ZL_COUNTS_H

#include "zl_consts.h"

static __always_inline __u64 zl_type_bit(__u64 type)
{
	return 1ULL << ((type - 1) << 3);
}

static __always_inline __u64 zl_type_count(__u64 counts, int type)
{
	return (counts >> ((type - 1) * 8)) & 0xff;
}

/* Adds COUNTS to FRAMES[ZL_FRAME_TYPES]; returns how many frames that was.
 * Most walks see one or two types: the absent ones are skipped. */
static __always_inline __u64 zl_add_frames(__u64 *frames, __u64 counts)
{
	__u64 total = 0;

#pragma unroll
	for (int t = 0; t < ZL_FRAME_TYPES; t++) {
		__u64 n = (counts >> (t * 8)) & 0xff;

		if (n) {
			frames[t] += n;
			total += n;
		}
	}
	return total;
}

#endif

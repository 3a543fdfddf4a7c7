/* Layouts shared with userspace. pyxdp/maps.py mirrors these field by field:
 * change both together. */
#ifndef ZL_STRUCTS_H
#define ZL_STRUCTS_H

#include "zl_consts.h"

/* One per CPU; userspace sums them. Every field only ever grows. */
struct zl_counters {
	__u64 packets;          /* every packet the program saw */
	__u64 other;            /* not token traffic: passed untouched */
	__u64 fragments;        /* IPv4/IPv6 fragments: passed, never parsed */
	__u64 token_datagrams;  /* datagrams whose every frame is valid */
	__u64 frames[ZL_FRAME_TYPES]; /* by type, request..pong, token datagrams only */
	__u64 payload_bytes;    /* frame payload bytes in token datagrams */
	__u64 redirected;       /* token datagrams sent to an AF_XDP socket */
	__u64 fallback_passed;  /* token datagrams passed: no socket on the queue */
	__u64 malformed[ZL_REASONS]; /* by enum zl_reason - 1 */
	__u64 malformed_dropped;
	__u64 malformed_passed;
};

struct zl_config {
	__u32 on_malformed; /* enum zl_policy */
	__u32 reserved;
};

#endif

/* Protocol constants: the token frame (docs/spec.md section 1), verdict policy,
 * and the Ethernet/IP numbers the parser needs. No code lives here. */
#ifndef ZL_CONSTS_H
#define ZL_CONSTS_H

/* A frame is a 4-byte big-endian payload length, a type byte, the payload. */
#define ZL_FRAME_HDR_LEN 5

enum zl_frame_type {
	ZL_FRAME_REQUEST = 1,
	ZL_FRAME_TOKEN = 2,
	ZL_FRAME_DONE = 3,
	ZL_FRAME_PING = 4,
	ZL_FRAME_PONG = 5,
};
#define ZL_FRAME_TYPES 5

/* The walk bound is shared with the Python reference judge, so the loader
 * passes it in from pyxdp.proto.frames.MAX_FRAMES rather than both sides defining it. */
#ifndef ZL_MAX_FRAMES
#error "ZL_MAX_FRAMES is defined by the loader (pyxdp.proto.frames.MAX_FRAMES)"
#endif
/* Per-type counts are packed 8 bits each into one u64 during the walk. */
_Static_assert(ZL_MAX_FRAMES >= 16 && ZL_MAX_FRAMES < 256, "ZL_MAX_FRAMES out of range");

/* Why a datagram is malformed: the first reason met walking it from the start. */
enum zl_reason {
	ZL_VALID = 0,
	ZL_SHORT_HEADER = 1,
	ZL_TRUNCATED = 2,
	ZL_UNKNOWN_TYPE = 3,
	ZL_TOO_MANY_FRAMES = 4,
};
#define ZL_REASONS 4

/* What to do with a malformed datagram (zl_config.on_malformed). */
enum zl_policy {
	ZL_MALFORMED_DROP = 0,
	ZL_MALFORMED_PASS = 1,
};

/* Frame headers that start at most this far into the packet are read with
 * direct packet access: the verifier must bound a pointer built from a
 * run-time length, and cannot past 64 KiB. Later headers (only in big
 * skb-mode packets) go through bpf_xdp_load_bytes(). */
#define ZL_DIRECT_MAX 0x3ff0

#define ZL_MAX_VLAN_TAGS 2
#define ZL_XSKS_MAX 256

#define ZL_ETH_P_IP 0x0800
#define ZL_ETH_P_IPV6 0x86DD
#define ZL_ETH_P_8021Q 0x8100
#define ZL_ETH_P_8021AD 0x88A8

#define ZL_IPPROTO_UDP 17
#define ZL_IPPROTO_FRAGMENT 44 /* IPv6 fragment extension header */
#define ZL_IP_MF 0x2000
#define ZL_IP_OFFSET 0x1FFF

#endif

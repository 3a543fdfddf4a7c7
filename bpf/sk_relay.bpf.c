// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* zerolayer's TCP frame relay: SK_SKB programs on a sockhash. The stream
 * parser cuts each relayed socket's byte stream into messages of whole
 * frames; the verdict redirects each message to the paired socket, so frames
 * go from upstream to client (and requests the other way) without entering
 * userspace, and never a partial one. */
#include "zl_object.h"
#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_sk_structs.h"
#include "zl_sk_maps.h"
#include "zl_stream.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* Breaks the stream: the stream parser stops and gives the socket the
 * error. It may call the parser once more on data already in hand before it
 * stops, so the reason is counted once per stream. */
static __always_inline int zl_sk_break(struct zl_sk_counters *c, struct zl_sk_conn *conn,
				       __u32 reason)
{
	if (conn) {
		if (conn->broken)
			return zl_sk_errno(conn->broken);
		conn->broken = reason;
	}
	/* clang proves the range on every path it sees and drops the check;
	 * 7.3's verifier walks a path where it cannot tell (reason 0). */
	zl_opaque(reason);
	if (c && reason >= 1 && reason <= ZL_SK_REASONS)
		c->malformed[reason - 1]++;
	return zl_sk_errno(reason);
}

/* Returns the length of the next message: the whole frames in hand from
 * where it starts (at least one), or the first frame's length when it is
 * still arriving; 0 while its header is incomplete; or a negative errno that
 * breaks the stream. A bad header after good frames ends the message before
 * it; the next call breaks the stream there. */
SEC("sk_skb/stream_parser")
int zl_sk_parser(struct __sk_buff *skb)
{
	struct zl_sk_counters *c;
	struct zl_sk_config *cfg;
	struct zl_sk_conn *conn;
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct zl_stream_window *w;
	__u32 zero = 0, reason, max_length, avail, total, len;
	__u64 types;
	__u8 type;

	c = bpf_map_lookup_elem(&zl_sk_counters, &zero);
	conn = bpf_map_lookup_elem(&zl_sk_conns, &cookie);
	if (!conn)
		return zl_sk_break(c, conn, ZL_SK_DESYNC); /* not a socket we paired */
	if (conn->broken)
		return zl_sk_errno(conn->broken);
	reason = zl_stream_place(skb, conn);
	if (reason)
		return zl_sk_break(c, conn, reason);
	conn->seen_end = conn->next_seq - conn->msg_off + skb->len;
	avail = skb->len - conn->msg_off;
	if (avail < ZL_FRAME_HDR_LEN)
		return 0;
	cfg = bpf_map_lookup_elem(&zl_sk_config, &zero);
	max_length = cfg ? cfg->max_length : 0;
#if ZL_SK_WINDOW
	w = zl_stream_window_take(bpf_map_lookup_elem(&zl_sk_window, &zero), skb, conn->msg_off);
#else
	w = NULL;
#endif
	if (zl_stream_header_read(skb, w, conn->msg_off, 0, &len, &type)) {
		zl_stream_window_release(w);
		return zl_sk_break(c, conn, ZL_SK_DESYNC);
	}
	reason = zl_stream_judge(len, type, max_length);
	total = ZL_FRAME_HDR_LEN + len;
	types = zl_sk_type_bit(type);
	if (!reason && total <= avail) {
		/* More whole frames in hand join the message. */
		for (int i = 1; i < ZL_SK_BATCH; i++) {
			if (avail - total < ZL_FRAME_HDR_LEN ||
			    zl_stream_header_read(skb, w, conn->msg_off, total, &len, &type) ||
			    zl_stream_judge(len, type, max_length) ||
			    ZL_FRAME_HDR_LEN + len > avail - total)
				break;
			total += ZL_FRAME_HDR_LEN + len;
			types += zl_sk_type_bit(type);
		}
	}
	zl_stream_window_release(w);
	if (reason)
		return zl_sk_break(c, conn, reason);
	conn->msg_len = total;
	conn->msg_types = types;
	return total;
}

/* Called once per message, after the parser found its length. */
SEC("sk_skb/stream_verdict")
int zl_sk_verdict(struct __sk_buff *skb)
{
	struct zl_sk_counters *c;
	struct zl_sk_conn *conn;
	__u64 cookie = bpf_get_socket_cookie(skb);
	__u32 zero = 0, msg_len;
	__u64 frames;
	int verdict;

	c = bpf_map_lookup_elem(&zl_sk_counters, &zero);
	conn = bpf_map_lookup_elem(&zl_sk_conns, &cookie);
	if (!c || !conn)
		return SK_DROP;
	msg_len = conn->msg_len;
	frames = zl_sk_add_frames(c->frames, conn->msg_types);
	c->payload_bytes += msg_len - ZL_FRAME_HDR_LEN * frames;
	/* The next message starts here: the parser's next call places it and
	 * sets its msg_len, seen_end and msg_types afresh. */
	conn->next_seq += msg_len;
	conn->in_msg = 0;

	verdict = bpf_sk_redirect_hash(skb, &zl_sk_socks, &conn->peer, 0);
	if (verdict == SK_PASS) {
		conn->frame_bytes += msg_len;
		c->redirected += frames;
	} else {
		c->no_peer += frames;
	}
	return verdict;
}

/* Not a relay mode: the bench's ceiling for any program on this path
 * (docs/spec.md section 8). Attached alone, without the stream parser, it
 * redirects each segment as it came and frames nothing. It keeps only the
 * byte counts the relay's control plane reads to see a stream drained and
 * ended (offsets from 0: without strparser there is no segment sequence). */
SEC("sk_skb/stream_verdict")
int zl_sk_verdict_unframed(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct zl_sk_conn *conn = bpf_map_lookup_elem(&zl_sk_conns, &cookie);
	int verdict;

	if (!conn)
		return SK_DROP;
	conn->started = 1;
	conn->next_seq += skb->len;
	verdict = bpf_sk_redirect_hash(skb, &zl_sk_socks, &conn->peer, 0);
	if (verdict == SK_PASS)
		conn->frame_bytes += skb->len;
	return verdict;
}

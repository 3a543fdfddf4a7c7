/* zerolayer's XDP program: judge token datagrams at the driver, count them,
 * and hand valid ones to the AF_XDP socket of their rx queue. Verdicts are
 * those of DESIGN.md section 1. */
#include <uapi/linux/bpf.h>

#include "zl_consts.h"
#include "zl_structs.h"
#include "zl_maps.h"
#include "zl_parse.h"
#include "zl_frames.h"

static __always_inline int zl_malformed(struct zl_counters *c, __u32 reason)
{
	__u32 zero = 0;
	struct zl_config *cfg;

	if (reason >= ZL_SHORT_HEADER && reason <= ZL_REASONS)
		c->malformed[reason - 1]++;
	cfg = zl_config.lookup(&zero);
	if (cfg && cfg->on_malformed == ZL_MALFORMED_PASS) {
		c->malformed_passed++;
		return XDP_PASS;
	}
	c->malformed_dropped++;
	return XDP_DROP;
}

int zerolayer_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct zl_counters *c;
	struct zl_udp udp;
	struct zl_walk walk;
	__u32 zero = 0, port;
	int queue;
	__u8 *is_token_port;
	int kind, action;

	c = zl_counters.lookup(&zero);
	if (!c)
		return XDP_PASS;
	c->packets++;

	kind = zl_parse_udp(data, data_end, &udp);
	if (kind == ZL_L4_FRAGMENT) {
		c->fragments++;
		return XDP_PASS;
	}
	if (kind != ZL_L4_UDP)
		goto other;
	port = udp.dport;
	is_token_port = zl_ports.lookup(&port);
	if (!is_token_port || !*is_token_port)
		goto other;

	zl_walk_frames(ctx, data, data_end, udp.payload_off, udp.payload_end, &walk);
	if (walk.reason != ZL_VALID)
		return zl_malformed(c, walk.reason);

	c->token_datagrams++;
	/* Most datagrams carry one or two types: skip the absent ones. */
#pragma unroll
	for (int t = 0; t < ZL_FRAME_TYPES; t++) {
		__u64 n = (walk.type_counts >> (t * 8)) & 0xff;

		if (n)
			c->frames[t] += n;
	}
	c->payload_bytes += walk.payload_bytes;

	/* Most queues have no socket: look first (an inlined lookup) before
	 * calling the redirect helper, whose flags argument is the action
	 * when the queue has no socket. */
	queue = ctx->rx_queue_index;
	if (!zl_xsks.lookup(&queue)) {
		c->fallback_passed++;
		return XDP_PASS;
	}
	action = zl_xsks.redirect_map(queue, XDP_PASS);
	if (action == XDP_REDIRECT)
		c->redirected++;
	else
		c->fallback_passed++;
	return action;

other:
	c->other++;
	return XDP_PASS;
}

// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The traffic generator's program. Under BPF_PROG_TEST_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES, every frame it returns XDP_TX for is really
 * transmitted on the interface named in the run's context.
 *
 * One template: the frame is sent as userspace supplied it. Several: each
 * repetition takes the next slot of a schedule (which template goes out
 * where, so a mix is interleaved and its counts are known exactly) and
 * writes that whole template over the frame. The whole template, because
 * live-frames mode recycles pages without restoring their bytes (only
 * data, data_end and data_meta are reset): a frame may still hold whatever
 * an earlier repetition wrote into it. */
#include "zl_object.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* From the loader (pyxdp/lab/generator.py and pyxdp/proto/ethernet.py,
 * through pyxdp.xdp.compiler.shared_defines): the longest template
 * (ZL_GEN_MAX_LEN), how many templates (ZL_GEN_TEMPLATES) and schedule slots
 * (ZL_GEN_SLOTS), and the shortest frame, an Ethernet header (ZL_ETH_HLEN). */
#if !defined(ZL_GEN_MAX_LEN) || !defined(ZL_GEN_TEMPLATES) || !defined(ZL_GEN_SLOTS) || \
	!defined(ZL_ETH_HLEN)
#error "the generator's sizes are defined by the loader (docs/spec.md section 7.2)"
#endif

/* Map values: pyxdp/lab/generator.py has them field by field (change
 * both together; tests/test_layouts.py compares them). */
struct zl_gen_template {
	__u32 len;
	__u8 data[ZL_GEN_MAX_LEN];
};

struct zl_gen_state {
	__u32 slots;  /* schedule length; 0: one template, send the frame as is */
	__u32 next;   /* the next schedule slot */
	__u64 errors; /* repetitions not sent: a bug, reported by userspace */
	__u64 runs;   /* repetitions run: a run a signal cuts short (EINTR)
		       * tells userspace nothing of how far it got */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZL_GEN_TEMPLATES);
	__type(key, __u32);
	__type(value, struct zl_gen_template);
} zl_gen_templates SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ZL_GEN_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} zl_gen_schedule SEC(".maps");
/* Only one test run uses a loaded generator at a time (the caller's
 * thread), so the state needs no atomics. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zl_gen_state);
} zl_gen_state SEC(".maps");

static __always_inline int zl_gen_fail(struct zl_gen_state *st)
{
	st->errors++;
	return XDP_ABORTED;
}

SEC("xdp")
int xdp_tx_gen(struct xdp_md *ctx)
{
	struct zl_gen_template *tpl;
	struct zl_gen_state *st;
	__u32 zero = 0, slot, *index;
	__u64 len;
	int delta;

	st = bpf_map_lookup_elem(&zl_gen_state, &zero);
	if (!st)
		return XDP_ABORTED;
	st->runs++;
	if (!st->slots)
		return XDP_TX;

	slot = st->next;
	st->next = slot + 1 < st->slots ? slot + 1 : 0;
	index = bpf_map_lookup_elem(&zl_gen_schedule, &slot);
	if (!index)
		return zl_gen_fail(st);
	tpl = bpf_map_lookup_elem(&zl_gen_templates, index);
	if (!tpl)
		return zl_gen_fail(st);
	/* The verifier must see the register passed to the helper below
	 * bounded: 64-bit, so no zero-extended copy is tested instead, and
	 * two tests clang cannot fold into one range check on a copy. */
	len = tpl->len;
	if (len > ZL_GEN_MAX_LEN)
		return zl_gen_fail(st);
	asm volatile("" : "+r"(len));
	if (len < ZL_ETH_HLEN)
		return zl_gen_fail(st);

	/* The frame starts as long as the longest template: shrink it. */
	delta = (int)len - (int)(ctx->data_end - ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return zl_gen_fail(st);
	if (bpf_xdp_store_bytes(ctx, 0, tpl->data, len))
		return zl_gen_fail(st);
	return XDP_TX;
}

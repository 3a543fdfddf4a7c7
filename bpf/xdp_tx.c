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
// clang-format off: bcc makes these tokens the license string the kernel gets
#define BPF_LICENSE Dual BSD/GPL
// clang-format on
#include <uapi/linux/bpf.h>

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

BPF_ARRAY(zl_gen_templates, struct zl_gen_template, ZL_GEN_TEMPLATES);
BPF_ARRAY(zl_gen_schedule, __u32, ZL_GEN_SLOTS);
/* Only one test run uses a loaded generator at a time (the caller's
 * thread), so the state needs no atomics. */
BPF_ARRAY(zl_gen_state, struct zl_gen_state, 1);

static __always_inline int zl_gen_fail(struct zl_gen_state *st)
{
	st->errors++;
	return XDP_ABORTED;
}

int xdp_tx_gen(struct xdp_md *ctx)
{
	struct zl_gen_template *tpl;
	struct zl_gen_state *st;
	__u32 zero = 0, slot, *index;
	__u64 len;
	int delta;

	st = zl_gen_state.lookup(&zero);
	if (!st)
		return XDP_ABORTED;
	st->runs++;
	if (!st->slots)
		return XDP_TX;

	slot = st->next;
	st->next = slot + 1 < st->slots ? slot + 1 : 0;
	index = zl_gen_schedule.lookup(&slot);
	if (!index)
		return zl_gen_fail(st);
	tpl = zl_gen_templates.lookup(index);
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

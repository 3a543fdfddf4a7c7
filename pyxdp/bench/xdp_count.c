// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The throughput floor for `zerolayer bench` (pyxdp/bench/floors.py): count
 * every packet, pass it.
 * What zerolayer's program is compared against on a live interface: the
 * least a program can do and still say how many packets it saw. And the
 * forwarding bench's sink: count every packet, drop it, so that the
 * receiver's own stack is no part of what a router is measured by. */
// clang-format off: bcc makes these tokens the license string the kernel gets
#define BPF_LICENSE Dual BSD/GPL
// clang-format on
#include <uapi/linux/bpf.h>

/* One slot per CPU, like zerolayer's counters: no atomics, no sharing. */
BPF_PERCPU_ARRAY(zl_count, __u64, 1);

static __always_inline void zl_count_one(void)
{
	__u32 zero = 0;
	__u64 *n = zl_count.lookup(&zero);

	if (n)
		*n += 1;
}

int xdp_count_pass(struct xdp_md *ctx)
{
	zl_count_one();
	return XDP_PASS;
}

int xdp_count_drop(struct xdp_md *ctx)
{
	zl_count_one();
	return XDP_DROP;
}

// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The throughput floor for `zerolayer bench` (pyxdp/bench/floors.py): count
 * every packet, pass it.
 * What zerolayer's program is compared against on a live interface: the
 * least a program can do and still say how many packets it saw. And the
 * forwarding bench's sink: count every packet, drop it, so that the
 * receiver's own stack is no part of what a router is measured by. */
#include "zl_object.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* One slot per CPU, like zerolayer's counters: no atomics, no sharing. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} zl_count SEC(".maps");

static __always_inline void zl_count_one(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&zl_count, &zero);

	if (n)
		*n += 1;
}

SEC("xdp")
int xdp_count_pass(struct xdp_md *ctx)
{
	zl_count_one();
	return XDP_PASS;
}

SEC("xdp")
int xdp_count_drop(struct xdp_md *ctx)
{
	zl_count_one();
	return XDP_DROP;
}

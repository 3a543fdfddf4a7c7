// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The bare cost of a uprobe on this machine, for the streams section of
 * `zerolayer bench` (pyxdp/bench/streams/loops.py): a program that only
 * counts its runs, placed on entry and return of the OpenSSL functions the
 * observer probes, in one process. What the observer's own programs add
 * beyond this is theirs. */
#include "zl_object.h"

char _license[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} zl_hits SEC(".maps");

SEC("uprobe")
int zl_bench_hit(void *ctx)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&zl_hits, &zero);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

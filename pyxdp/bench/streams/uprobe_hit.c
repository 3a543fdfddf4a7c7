// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The bare cost of a uprobe on this machine, for the streams section of
 * `zerolayer bench` (pyxdp/bench/streams/loops.py): a program that only
 * counts its runs, placed on entry and return of the OpenSSL functions the
 * observer probes, in one process. What the observer's own programs add
 * beyond this is theirs. */
// clang-format off: bcc makes these tokens the license string the kernel gets
#define BPF_LICENSE Dual BSD/GPL
// clang-format on
#include <uapi/linux/bpf.h>
#include <uapi/linux/ptrace.h>

BPF_ARRAY(zl_hits, __u64, 1);

int zl_bench_hit(struct pt_regs *ctx)
{
	__u32 zero = 0;
	__u64 *n = zl_hits.lookup(&zero);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

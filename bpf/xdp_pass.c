// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The floor for benchmarks: an XDP program that only returns XDP_PASS. */
#include <uapi/linux/bpf.h>

int xdp_pass_floor(struct xdp_md *ctx)
{
	return XDP_PASS;
}

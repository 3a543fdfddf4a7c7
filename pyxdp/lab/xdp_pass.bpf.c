// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The floor for benchmarks: an XDP program that only returns XDP_PASS.
 * Also what the routed lab puts on a veth so that it takes redirected
 * frames (pyxdp/lab/routed_lab.py, beside this file). */
#include "zl_object.h"

char _license[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int xdp_pass_floor(struct xdp_md *ctx)
{
	return XDP_PASS;
}

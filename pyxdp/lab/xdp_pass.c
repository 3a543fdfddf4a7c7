// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The floor for benchmarks: an XDP program that only returns XDP_PASS.
 * Also what the routed lab puts on a veth so that it takes redirected
 * frames (pyxdp/lab/routed_lab.py, beside this file). */
// clang-format off: bcc makes these tokens the license string the kernel gets
#define BPF_LICENSE Dual BSD/GPL
// clang-format on
#include <uapi/linux/bpf.h>

int xdp_pass_floor(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* What a program built by plain clang into a BPF object (pyxdp/xdp/objects.py)
 * needs besides the kernel's uapi headers: section placement, BTF-defined
 * map fields, the helpers it calls, and libxdp's run configuration. Written here rather
 * than taken from libbpf-dev and libxdp-dev, which a machine whose libbpf
 * comes from backports may not be able to install; the helpers' numbers are
 * the kernel's ABI (enum bpf_func_id in uapi/linux/bpf.h). */
#ifndef ZL_OBJECT_H
#define ZL_OBJECT_H

#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#ifndef NULL
#define NULL ((void *)0)
#endif
/* linux/stddef.h defines it as a plain inline, which clang may ignore. */
#undef __always_inline
#define __always_inline inline __attribute__((always_inline))

/* A map's numbers and types, as BTF records them and libbpf reads them. */
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*const bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*const bpf_map_update_elem)(void *map, const void *key, const void *value,
					 __u64 flags) = (void *)2;
static __u64 (*const bpf_ktime_get_ns)(void) = (void *)5;
static __s64 (*const bpf_csum_diff)(__be32 *from, __u32 from_size, __be32 *to,
				    __u32 to_size, __wsum seed) = (void *)28;
static long (*const bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;
static long (*const bpf_fib_lookup)(void *ctx, struct bpf_fib_lookup *params, int plen,
				    __u32 flags) = (void *)69;
/* the generator's (bpf/xdp_tx.bpf.c) */
static long (*const bpf_xdp_adjust_tail)(struct xdp_md *xdp_md, int delta) = (void *)65;
static long (*const bpf_xdp_store_bytes)(struct xdp_md *xdp_md, __u32 offset, void *buf,
					 __u32 len) = (void *)190;
/* the relay's (bpf/sk_relay.bpf.c) */
static long (*const bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to,
					__u32 len) = (void *)26;
static __u64 (*const bpf_get_socket_cookie)(void *ctx) = (void *)46;
static long (*const bpf_sk_redirect_hash)(struct __sk_buff *skb, void *map, void *key,
					  __u64 flags) = (void *)72;
/* the tracing programs' (bpf/streams.bpf.c, the bench's floors) */
static long (*const bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*const bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*const bpf_get_current_uid_gid)(void) = (void *)15;
static __u64 (*const bpf_get_current_task)(void) = (void *)35;
static __u64 (*const bpf_get_current_cgroup_id)(void) = (void *)80;
static long (*const bpf_probe_read_user)(void *dst, __u32 size, const void *src) = (void *)112;
static long (*const bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static long (*const bpf_probe_read_kernel_str)(void *dst, __u32 size,
					       const void *src) = (void *)115;
static long (*const bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size,
					__u64 flags) = (void *)130;
static __u64 (*const bpf_xdp_get_buff_len)(struct xdp_md *xdp_md) = (void *)188;
static long (*const bpf_xdp_load_bytes)(struct xdp_md *xdp_md, __u32 offset, void *buf,
					__u32 len) = (void *)189;

/* libxdp reads a program's place in its dispatcher from a struct named
 * _PROG in the ".xdp_run_config" section: the priority (lower runs first)
 * and, per action, whether the next program then runs. */
#define ZL_XDP_RUN_CONFIG(prog, prio) ZL_XDP_RUN_CONFIG_(prog, prio)
#define ZL_XDP_RUN_CONFIG_(prog, prio)                                 \
	struct {                                                       \
		__uint(priority, prio);                                \
		__uint(XDP_PASS, 1);                                   \
	} _##prog SEC(".xdp_run_config")

#endif

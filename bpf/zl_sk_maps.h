/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The TCP frame relay's maps. Private to one relay process: nothing pinned. */
#ifndef ZL_SK_MAPS_H
#define ZL_SK_MAPS_H

#include "zl_sk_structs.h"
#include "zl_stream.h"

#ifndef ZL_SK_SOCKS_FD
#error "ZL_SK_SOCKS_FD is defined by the loader (pyxdp/relay/datapath.py)"
#endif
#ifndef ZL_SK_MAX_SOCKS
#error "ZL_SK_MAX_SOCKS is defined by the loader (pyxdp/relay/datapath.py)"
#endif

/* The relayed sockets: a sockhash keyed by socket cookie, made by the
 * loader (bcc 0.26 cannot declare one) and referenced by its fd. */
#define zl_sk_socks ((void *)bpf_pseudo_fd(1, ZL_SK_SOCKS_FD))

BPF_PERCPU_ARRAY(zl_sk_counters, struct zl_sk_counters, 1);
BPF_ARRAY(zl_sk_config, struct zl_sk_config, 1);
/* Per-socket framing state and the pairing, keyed by socket cookie. */
BPF_HASH(zl_sk_conns, __u64, struct zl_sk_conn, ZL_SK_MAX_SOCKS);
#if ZL_SK_WINDOW
/* The parser's copy of a message's first bytes (zl_stream.h). */
BPF_PERCPU_ARRAY(zl_sk_window, struct zl_stream_window, 1);
#endif

#endif

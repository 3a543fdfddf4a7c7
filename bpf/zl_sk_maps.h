/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The TCP frame relay's maps. Private to one relay process: nothing pinned. */
#ifndef ZL_SK_MAPS_H
#define ZL_SK_MAPS_H

#include "zl_object.h"
#include "zl_sk_structs.h"
#include "zl_stream.h"

/* The sockets a relay holds: its loader sizes the maps for each load
 * (--max-socks); this is their default. */
#define ZL_SK_MAX_SOCKS 4096

/* The relayed sockets: a sockhash keyed by socket cookie, made by the
 * loader and given to libbpf to use (bpf_map__reuse_fd), so that the
 * loader holds it before any program exists. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, ZL_SK_MAX_SOCKS);
	__type(key, __u64);
	__type(value, __u64);
} zl_sk_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zl_sk_counters);
} zl_sk_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zl_sk_config);
} zl_sk_config SEC(".maps");

/* Per-socket framing state and the pairing, keyed by socket cookie. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ZL_SK_MAX_SOCKS);
	__type(key, __u64);
	__type(value, struct zl_sk_conn);
} zl_sk_conns SEC(".maps");

#if ZL_SK_WINDOW
/* The parser's copy of a message's first bytes (zl_stream.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zl_stream_window);
} zl_sk_window SEC(".maps");
#endif

#endif

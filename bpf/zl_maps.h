/* The maps. With ZL_PIN_DIR defined (by the loader, per interface) each map
 * is pinned there, or reused if already pinned: that is how an in-place
 * upgrade keeps its counters, its configuration and registered AF_XDP
 * sockets. Without it (BPF_PROG_TEST_RUN fixtures) the maps are private. */
#ifndef ZL_MAPS_H
#define ZL_MAPS_H

#include "zl_structs.h"

#ifdef ZL_PIN_DIR
#define ZL_MAP(type, key, value, name, entries, pin) \
	BPF_TABLE_PINNED(type, key, value, name, entries, ZL_PIN_DIR "/" pin)
#define ZL_XSKMAP(name, entries, pin) BPF_XSKMAP(name, entries, ZL_PIN_DIR "/" pin)
#else
#define ZL_MAP(type, key, value, name, entries, pin) \
	BPF_TABLE(type, key, value, name, entries)
#define ZL_XSKMAP(name, entries, pin) BPF_XSKMAP(name, entries)
#endif

/* One element: all counters in a struct, so a packet costs one lookup. */
ZL_MAP("percpu_array", __u32, struct zl_counters, zl_counters, 1, "counters");

/* Run-time configuration, one element. */
ZL_MAP("array", __u32, struct zl_config, zl_config, 1, "config");

/* Token ports: non-zero at index P when UDP destination port P carries
 * frames. An array, not a hash: its lookup is inlined by the verifier. */
ZL_MAP("array", __u32, __u8, zl_ports, 65536, "ports");

/* AF_XDP sockets keyed by rx queue index. */
ZL_XSKMAP(zl_xsks, ZL_XSKS_MAX, "xsks");

/* Per-flow token cadence (zl_flows.h). An LRU hash: adding a flow to a
 * full table evicts the least recently used one. Allocated up front:
 * bpftool shows memlock 5,768,064 bytes (352 per flow, 5.5 MiB) per
 * interface on 6.18. */
#define ZL_FLOWS_MAX 16384
ZL_MAP("lru_hash", struct zl_flow_key, struct zl_flow, zl_flows, ZL_FLOWS_MAX, "flows");

/* The interface's gap histogram, one element per CPU. */
ZL_MAP("percpu_array", __u32, struct zl_gap_hist, zl_gaps, 1, "gaps");

#endif

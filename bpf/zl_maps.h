/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The token program's maps. The loader pins each in the interface's pin
 * dir, or reuses it if already pinned: that is how an in-place upgrade
 * keeps its counters, its configuration and registered AF_XDP sockets.
 * Loaded without a pin dir (BPF_PROG_TEST_RUN fixtures) the maps are private.
 *
 * Their sizes come from the loader (pyxdp/xdp/maps.py, through
 * pyxdp.xdp.compiler.shared_defines): ZL_PORT_SLOTS, ZL_XSKS_MAX,
 * ZL_FLOWS_MAX, ZL_EGRESS_MAX; so does the config bit that picks the port
 * set's half. */
#ifndef ZL_MAPS_H
#define ZL_MAPS_H

#include "zl_object.h"
#include "zl_structs.h"

#if !defined(ZL_PORT_SLOTS) || !defined(ZL_XSKS_MAX) || !defined(ZL_FLOWS_MAX) || \
	!defined(ZL_EGRESS_MAX) || !defined(ZL_CONFIG_PORTS_HALF)
#error "the map sizes and ZL_CONFIG_PORTS_HALF are defined by the loader (docs/spec.md section 7.2)"
#endif

/* A map in the object's ".maps" section. PIN is the name the loader pins
 * it by in the interface's pin dir (pyxdp.xdp.compiler.TOKEN_MAPS), where
 * it sets the map's pin path before loading: libbpf then reuses the map
 * pinned there, or makes it and pins it. */
#define ZL_MAP(map_type, key_type, value_type, name, entries, pin) \
	struct {                                                   \
		__uint(type, map_type);                            \
		__uint(max_entries, entries);                      \
		__type(key, key_type);                             \
		__type(value, value_type);                         \
	} name SEC(".maps")

/* One element: all counters in a struct, so a packet costs one lookup. */
ZL_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct zl_counters, zl_counters, 1, "counters");

/* Run-time configuration, one element. */
ZL_MAP(BPF_MAP_TYPE_ARRAY, __u32, struct zl_config, zl_config, 1, "config");

/* Token ports, in two halves of ZL_PORT_SLOTS slots: non-zero at index
 * H * ZL_PORT_SLOTS + P when UDP destination port P carries frames in half
 * H. The bit ZL_CONFIG_PORTS_HALF of zl_config.flags names the half in
 * effect. Userspace rewrites only the other half, then flips the bit with
 * one map write, so a datagram sees one whole set, never an empty or a
 * mixed one (docs/spec.md section 1.6). The slot's address depends on the
 * bit read, so even a weakly ordered CPU cannot read the slot first. An
 * array, not a hash: its lookup is inlined by the verifier. */
ZL_MAP(BPF_MAP_TYPE_ARRAY, __u32, __u8, zl_ports, 2 * ZL_PORT_SLOTS, "ports");

/* AF_XDP sockets keyed by rx queue index, for queues below ZL_XSKS_MAX. */
ZL_MAP(BPF_MAP_TYPE_XSKMAP, __u32, __u32, zl_xsks, ZL_XSKS_MAX, "xsks");

/* Non-zero at key Q when the socket registered in zl_xsks for queue Q takes
 * a packet in several buffers (bound with XDP_USE_SG, Linux 6.6): the
 * kernel drops such a packet redirected to any other socket. Written by
 * the socket (pyxdp/xsk/socket.py), before it registers. */
ZL_MAP(BPF_MAP_TYPE_ARRAY, __u32, __u8, zl_xsks_sg, ZL_XSKS_MAX, "xsks_sg");

/* Per-flow token cadence (zl_flows.h). An LRU hash: adding a flow to a
 * full table evicts the least recently used one. Allocated up front: with
 * 16384 flows, bpftool shows memlock 5,768,064 bytes (352 per flow,
 * 5.5 MiB) per interface on 6.18. */
ZL_MAP(BPF_MAP_TYPE_LRU_HASH, struct zl_flow_key, struct zl_flow, zl_flows, ZL_FLOWS_MAX, "flows");

/* The interface's gap histogram, one element per CPU. */
ZL_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, __u32, struct zl_gap_hist, zl_gaps, 1, "gaps");

/* The interfaces forwarded datagrams may leave by (zl_forward.h): ifindex
 * to ifindex, made, pinned and filled by pyxdp/xdp/egress.py, and handed to
 * this declaration by the loader. */
ZL_MAP(BPF_MAP_TYPE_DEVMAP_HASH, __u32, __u32, zl_egress, ZL_EGRESS_MAX, "egress");

#endif

/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* XDP forwarding (docs/spec.md section 2.1): a token datagram for another
 * host is routed by the kernel's own FIB (bpf_fib_lookup: its routes, its
 * neighbour table, the egress MTU and the forwarding sysctls), its TTL or
 * hop limit is decremented, its MACs become the next hop's, and it leaves
 * through the egress devmap. What the FIB cannot resolve is left to the
 * normal verdict and counted by reason.
 *
 * The interfaces datagrams may leave by are zl_egress (zl_maps.h), which
 * pyxdp/xdp/egress.py fills. From the loader (docs/spec.md section 7.2):
 *   ZL_FWD_NO_NEIGHBOUR, ZL_FWD_LOCAL, ZL_FWD_TTL, ZL_FWD_TOO_BIG,
 *   ZL_FWD_NOT_FORWARDABLE, ZL_FWD_REASONS
 *                    why a token datagram was not forwarded, numbered from 1
 *                    (zl_counters.forward[reason - 1])
 */
#ifndef ZL_FORWARD_H
#define ZL_FORWARD_H

#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>

#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_parse.h"
#include "zl_csum.h"
#include "zl_maps.h"

#if !defined(ZL_FWD_NO_NEIGHBOUR) || !defined(ZL_FWD_LOCAL) || !defined(ZL_FWD_TTL) || \
	!defined(ZL_FWD_TOO_BIG) || !defined(ZL_FWD_NOT_FORWARDABLE) || !defined(ZL_FWD_REASONS)
#error "the forwarding reasons are defined by the loader (docs/spec.md section 7.2)"
#endif


/* The address families bpf_fib_lookup takes: the kernel's AF_INET and
 * AF_INET6, which no uapi header defines. */
#define ZL_AF_INET 2
#define ZL_AF_INET6 10
#define ZL_IPV6_FLOWINFO_MASK 0x0fffffff /* traffic class and flow label */

/* The FIB's answer for the datagram at the start of the packet, or
 * ZL_FWD_NOT_FORWARDABLE when it is not one the FIB can be asked about:
 * a tagged frame (the FIB routes the ingress device, not its VLAN), or
 * anything but IPv4/IPv6 over Ethernet. On ZL_VALID (0), *FIB holds the
 * egress ifindex and the MACs to write. */
static __always_inline int zl_route(struct xdp_md *ctx, struct bpf_fib_lookup *fib,
				    struct zl_udp *udp)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int rc;

	if (zl_parse_udp(data, data_end, udp) != ZL_L4_UDP || udp->l3_off != ZL_ETH_HLEN)
		return ZL_FWD_NOT_FORWARDABLE;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = ctx->ingress_ifindex;
	fib->l4_protocol = ZL_IPPROTO_UDP;
	fib->sport = zl_htons(udp->sport);
	fib->dport = zl_htons(udp->dport);
	if (udp->ip_version == 4) {
		struct iphdr *ip = data + ZL_ETH_HLEN;

		if ((void *)(ip + 1) > data_end)
			return ZL_FWD_NOT_FORWARDABLE;
		fib->family = ZL_AF_INET;
		fib->tos = ip->tos;
		fib->tot_len = zl_ntohs(ip->tot_len);
		fib->ipv4_src = ip->saddr;
		fib->ipv4_dst = ip->daddr;
	} else {
		struct ipv6hdr *ip6 = data + ZL_ETH_HLEN;

		if ((void *)(ip6 + 1) > data_end)
			return ZL_FWD_NOT_FORWARDABLE;
		fib->family = ZL_AF_INET6;
		fib->flowinfo = *(__be32 *)ip6 & zl_htonl(ZL_IPV6_FLOWINFO_MASK);
		fib->tot_len = zl_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(fib->ipv6_src, &ip6->saddr, sizeof(fib->ipv6_src));
		__builtin_memcpy(fib->ipv6_dst, &ip6->daddr, sizeof(fib->ipv6_dst));
	}

	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return ZL_VALID;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return ZL_FWD_NO_NEIGHBOUR;
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return ZL_FWD_LOCAL;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return ZL_FWD_TOO_BIG;
	default: /* blackhole, unreachable, prohibit, forwarding off, an error */
		return ZL_FWD_NOT_FORWARDABLE;
	}
}

/* One hop less; for IPv4 the header checksum follows the change of the
 * 16-bit word (TTL, protocol), as RFC 1624 allows. ZL_FWD_TTL when the
 * datagram has no hop left to spend. */
static __always_inline int zl_spend_hop(void *data, void *data_end, __u8 family)
{
	if (family == ZL_AF_INET) {
		struct iphdr *ip = data + ZL_ETH_HLEN;
		__u32 check;

		if ((void *)(ip + 1) > data_end)
			return ZL_FWD_NOT_FORWARDABLE;
		if (ip->ttl <= 1)
			return ZL_FWD_TTL;
		ip->ttl--;
		check = ip->check;
		check += zl_htons(0x0100);
		ip->check = (__u16)(check + (check >= 0xffff));
		return ZL_VALID;
	}
	struct ipv6hdr *ip6 = data + ZL_ETH_HLEN;

	if ((void *)(ip6 + 1) > data_end)
		return ZL_FWD_NOT_FORWARDABLE;
	if (ip6->hop_limit <= 1)
		return ZL_FWD_TTL;
	ip6->hop_limit--;
	return ZL_VALID;
}

/* Forwards the token datagram in CTX: ZL_VALID when it was redirected, or
 * the reason it was not (the packet is then untouched). CHECK, from
 * zl_csum_check(), is the UDP checksum to write (0: none): no device will
 * finish a partial one once the datagram leaves by redirect. The packet is
 * parsed again here rather than kept from the walk, as zl_track_flow does,
 * so that nothing is held across the walk when forwarding is off. */
static __always_inline int zl_forward(struct xdp_md *ctx, __u32 check)
{
	struct bpf_fib_lookup fib;
	struct zl_udp udp;
	struct ethhdr *eth;
	void *data, *data_end;
	__u32 egress;
	int rc;

	rc = zl_route(ctx, &fib, &udp);
	if (rc != ZL_VALID)
		return rc;
	egress = fib.ifindex;
	/* Only the interfaces the loader put in the devmap are ways out; the
	 * entry found here is still there at the redirect, in the same run. */
	if (!bpf_map_lookup_elem(&zl_egress, &egress))
		return ZL_FWD_NOT_FORWARDABLE;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return ZL_FWD_NOT_FORWARDABLE;
	rc = zl_spend_hop(data, data_end, fib.family);
	if (rc != ZL_VALID)
		return rc;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	if (check)
		zl_csum_complete(ctx, udp.payload_off - sizeof(struct udphdr), check);
	return bpf_redirect_map(&zl_egress, egress, 0) == XDP_REDIRECT ? ZL_VALID
								       : ZL_FWD_NOT_FORWARDABLE;
}

/* Whether the kernel would route the datagram in CTX on to another host:
 * a malformed datagram is never forwarded, so under policy pass it goes to
 * the kernel only when the kernel would not forward it. */
static __always_inline int zl_routed_on(struct xdp_md *ctx)
{
	struct bpf_fib_lookup fib;
	struct zl_udp udp;
	int rc = zl_route(ctx, &fib, &udp);

	return rc == ZL_VALID || rc == ZL_FWD_NO_NEIGHBOUR || rc == ZL_FWD_TOO_BIG;
}

#endif

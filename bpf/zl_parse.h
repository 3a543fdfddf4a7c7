/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* L2-L4 parsing: Ethernet with up to two VLAN tags, IPv4 (options, fragments),
 * IPv6 (UDP as the next header) and UDP. Every access is bounds-checked
 * against data_end; offsets are kept as small masked scalars the verifier
 * can bound. */
#ifndef ZL_PARSE_H
#define ZL_PARSE_H

/* The uapi headers only: the kernel's internal ones pull in most of the
 * kernel (linux/bpf.h among them), which is slow to compile and differs
 * from kernel to kernel. */
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>

#include "zl_consts.h"
#include "zl_endian.h"
#include "zl_verifier.h"

enum zl_l4_kind {
	ZL_L4_OTHER = 0,    /* anything we do not parse */
	ZL_L4_FRAGMENT = 1, /* an IP fragment, never parsed further */
	ZL_L4_UDP = 2,      /* a whole UDP datagram; see struct zl_udp */
	/* A UDP datagram that goes on past the packet's first buffer
	 * (multi-buffer XDP): struct zl_udp filled, its payload only readable
	 * through bpf_xdp_load_bytes. The full parser's only. */
	ZL_L4_UDP_LONG = 3,
};

/* Offsets are from the start of the packet. */
struct zl_udp {
	__u32 payload_off;
	__u32 payload_end; /* from the UDP length field, checked against the packet */
	__u32 l3_off;      /* the IP header, for whoever needs the source address */
	__u16 sport;
	__u16 dport;
	__u8 ip_version;   /* 4 or 6 */
};

struct zl_vlan_hdr {
	__be16 tci;
	__be16 encapsulated_proto;
};

/* Sets *l3_off and *proto past the Ethernet header and any VLAN tags. A third
 * tag leaves *proto a VLAN ethertype, which the caller treats as other. */
static __always_inline int zl_parse_eth(void *data, void *data_end,
					__u32 *l3_off, __u16 *proto)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__u16 p;

	if ((void *)(eth + 1) > data_end)
		return -1;
	/* One 16-bit load: through struct ethhdr, which is packed, clang
	 * reads the field byte by byte. */
	p = *(__u16 *)(data + __builtin_offsetof(struct ethhdr, h_proto));

#pragma unroll
	for (int i = 0; i < ZL_MAX_VLAN_TAGS; i++) {
		struct zl_vlan_hdr *vlan;

		if (p != zl_htons(ZL_ETH_P_8021Q) && p != zl_htons(ZL_ETH_P_8021AD))
			break;
		vlan = data + off;
		if ((void *)(vlan + 1) > data_end)
			return -1;
		p = *(__u16 *)&vlan->encapsulated_proto;
		off += sizeof(*vlan);
	}
	*l3_off = off;
	*proto = p;
	return 0;
}

static __always_inline int zl_parse_ipv4(void *data, void *data_end,
					 __u32 off, __u32 *l4_off)
{
	struct iphdr *ip = data + off;

	if ((void *)(ip + 1) > data_end)
		return ZL_L4_OTHER;
	if (ip->version != 4 || ip->ihl < 5)
		return ZL_L4_OTHER;
	if (ip->frag_off & zl_htons(ZL_IP_MF | ZL_IP_OFFSET))
		return ZL_L4_FRAGMENT;
	if (ip->protocol != ZL_IPPROTO_UDP)
		return ZL_L4_OTHER;
	/* Written as a branch so the common no-options case does not make
	 * everything after it wait for the ihl load. */
	*l4_off = off + sizeof(*ip);
	if (ip->ihl != 5)
		*l4_off = off + ip->ihl * 4;
	return ZL_L4_UDP;
}

static __always_inline int zl_parse_ipv6(void *data, void *data_end,
					 __u32 off, __u32 *l4_off)
{
	struct ipv6hdr *ip6 = data + off;

	if ((void *)(ip6 + 1) > data_end)
		return ZL_L4_OTHER;
	if (ip6->version != 6)
		return ZL_L4_OTHER;
	if (ip6->nexthdr == ZL_IPPROTO_FRAGMENT)
		return ZL_L4_FRAGMENT;
	if (ip6->nexthdr != ZL_IPPROTO_UDP)
		return ZL_L4_OTHER;
	*l4_off = off + sizeof(*ip6);
	return ZL_L4_UDP;
}

/* Classifies the packet; for ZL_L4_UDP fills *udp. */
static __always_inline int zl_parse_udp(void *data, void *data_end,
					struct zl_udp *udp)
{
	struct udphdr *uh;
	__u32 l3_off, l4_off;
	__u64 ulen;
	__u16 proto;
	int kind;

	if (zl_parse_eth(data, data_end, &l3_off, &proto))
		return ZL_L4_OTHER;
	if (proto == zl_htons(ZL_ETH_P_IP)) {
		kind = zl_parse_ipv4(data, data_end, l3_off, &l4_off);
		udp->ip_version = 4;
	} else if (proto == zl_htons(ZL_ETH_P_IPV6)) {
		kind = zl_parse_ipv6(data, data_end, l3_off, &l4_off);
		udp->ip_version = 6;
	} else {
		return ZL_L4_OTHER;
	}
	if (kind != ZL_L4_UDP)
		return kind;

	/* At most 14 + 8 + 60: the mask only tells the verifier so. */
	l4_off &= 0xff;
	uh = data + l4_off;
	if ((void *)(uh + 1) > data_end)
		return ZL_L4_OTHER;
	ulen = zl_bound16(zl_ntohs(uh->len));
	/* A UDP length that disagrees with the packet is not a datagram we
	 * judge: the kernel's UDP layer drops it. Past the first buffer, the
	 * full parser checks it against the whole packet (zl_buffers.h). */
	if (ulen < sizeof(*uh))
		return ZL_L4_OTHER;
	kind = ZL_L4_UDP;
	if ((void *)uh + ulen > data_end) {
#if ZL_HAVE_XDP_LOAD_BYTES
		kind = ZL_L4_UDP_LONG;
#else
		return ZL_L4_OTHER;
#endif
	}

	udp->payload_off = l4_off + sizeof(*uh);
	udp->payload_end = l4_off + ulen;
	udp->l3_off = l3_off;
	udp->sport = zl_ntohs(uh->source);
	udp->dport = zl_ntohs(uh->dest);
	return kind;
}

#endif

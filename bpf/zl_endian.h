/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Network byte order without libc: the object is built for the host's
 * endianness (-target bpf is the host's). */
#ifndef ZL_ENDIAN_H
#define ZL_ENDIAN_H

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define zl_htons(x) ((__u16)__builtin_bswap16(x))
#define zl_ntohs(x) ((__u16)__builtin_bswap16(x))
#define zl_ntohl(x) ((__u32)__builtin_bswap32(x))
#define zl_htonl(x) ((__u32)__builtin_bswap32(x))
#else
#define zl_htons(x) ((__u16)(x))
#define zl_ntohs(x) ((__u16)(x))
#define zl_ntohl(x) ((__u32)(x))
#define zl_htonl(x) ((__u32)(x))
#endif

#endif

/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* What streams.c sends to userspace through its ring buffer: one struct per
 * event. pyxdp/streams/probes.py has it field by field as EVENT (change both
 * together; tests/test_streams_probes.py compares them).
 *
 * From the loader (pyxdp.streams.probes.c_defines):
 *   ZL_ST_PIECE        bytes of payload one event carries at most
 *   ZL_ST_DATA, ZL_ST_CONN, ZL_ST_CLOSE, ZL_ST_EXIT, ZL_ST_LINK
 *                      the event kinds
 *   ZL_ST_EXIT_KEY     the tls field of a process exit's key in
 *                      zl_st_ends_missed (streams.c)
 */
#ifndef ZL_ST_STREAMS_H
#define ZL_ST_STREAMS_H

#if !defined(ZL_ST_PIECE) || !defined(ZL_ST_DATA) || !defined(ZL_ST_CONN) || \
	!defined(ZL_ST_CLOSE) || !defined(ZL_ST_EXIT) || !defined(ZL_ST_LINK) || \
	!defined(ZL_ST_EXIT_KEY)
#error "the streams event is defined by the loader (docs/spec.md section 7.2)"
#endif

struct zl_st_event {
	__u64 ts; /* CLOCK_MONOTONIC ns */
	__u64 id; /* the connection: its fd, or its SSL pointer when tls */
	__u64 off; /* DATA: offset of data[0] in this direction's byte stream */
	__u32 tgid;
	__u32 len; /* DATA: bytes in data */
	__s32 fd; /* CONN: the socket's fd (-1: not known yet) */
	__u8 kind; /* ZL_ST_DATA ... ZL_ST_LINK */
	__u8 out; /* DATA: the process wrote these bytes (1) or read them (0) */
	__u8 tls; /* id is an SSL pointer */
	__u8 pad;
	/* CONN and LINK (a TLS connection's socket found later) only: the
	 * process's name and the socket's addresses */
	__u16 family; /* AF_INET, AF_INET6, 0 when not known */
	__u16 lport; /* host order */
	__u16 rport; /* host order */
	__u16 pad2;
	__u8 laddr[16]; /* AF_INET: the first 4 bytes */
	__u8 raddr[16];
	char comm[16];
	__u8 data[ZL_ST_PIECE];
};

#endif

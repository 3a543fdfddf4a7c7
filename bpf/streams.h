/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* What streams.bpf.c sends to userspace through its ring buffer: one struct per
 * event. pyxdp/streams/probes.py has it field by field as EVENT (change both
 * together; tests/test_streams_probes.py compares them).
 *
 * From the loader (pyxdp.streams.probes.c_defines):
 *   ZL_ST_PIECE        bytes of payload one event carries at most
 *   ZL_ST_DATA, ZL_ST_CONN, ZL_ST_CLOSE, ZL_ST_EXIT, ZL_ST_LINK, ZL_ST_FORK
 *                      the event kinds
 *   ZL_ST_SHARED       the flag of a CLOSE whose file other descriptors
 *                      still hold (a forked process, a dup, a passed fd)
 *   ZL_ST_EXIT_KEY, ZL_ST_FORK_KEY
 *                      the tls field of a process exit's and a fork's key
 *                      in zl_st_ends_missed (streams.bpf.c)
 */
#ifndef ZL_ST_STREAMS_H
#define ZL_ST_STREAMS_H

#if !defined(ZL_ST_PIECE) || !defined(ZL_ST_DATA) || !defined(ZL_ST_CONN) || \
	!defined(ZL_ST_CLOSE) || !defined(ZL_ST_EXIT) || !defined(ZL_ST_LINK) || \
	!defined(ZL_ST_FORK) || !defined(ZL_ST_SHARED) || !defined(ZL_ST_EXIT_KEY) || \
	!defined(ZL_ST_FORK_KEY)
#error "the streams event is defined by the loader (docs/spec.md section 7.2)"
#endif

struct zl_st_event {
	__u64 ts; /* CLOCK_MONOTONIC ns */
	__u64 id; /* the connection: its fd, or its SSL pointer when tls */
	__u64 off; /* DATA: offset of data[0] in this direction's byte stream;
		    * CLOSE: the bytes read on the connection in all */
	__u64 aux; /* CONN, LINK: the socket's inode number (0: not known yet);
		    * CLOSE: the bytes written in all; FORK: the child's tgid */
	__u32 tgid;
	__u32 len; /* DATA: bytes in data */
	__s32 fd; /* CONN: the socket's fd (-1: not known yet) */
	__u32 uid; /* CONN, LINK: the process's uid */
	__u8 kind; /* ZL_ST_DATA ... ZL_ST_FORK */
	__u8 out; /* DATA: the process wrote these bytes (1) or read them (0) */
	__u8 tls; /* id is an SSL pointer */
	__u8 flags; /* CLOSE: ZL_ST_SHARED */
	/* CONN and LINK (a TLS connection's socket found later) only: the
	 * process's name and the socket's addresses */
	__u16 family; /* AF_INET, AF_INET6, 0 when not known */
	__u16 lport; /* host order */
	__u16 rport; /* host order */
	__u16 pad;
	__u32 pad2; /* the header stays a multiple of 8 bytes */
	__u8 laddr[16]; /* AF_INET: the first 4 bytes */
	__u8 raddr[16];
	char comm[16];
	__u8 data[ZL_ST_PIECE];
};

#endif

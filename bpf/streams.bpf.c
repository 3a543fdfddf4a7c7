// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* zerolayer streams: the bytes of HTTP/1.1 connections that carry token
 * streams, with kernel timestamps, for userspace to parse (docs/spec.md
 * section 11).
 *
 * Plaintext comes from the syscall tracepoints (read, write, recvfrom,
 * sendto, readv, writev, recvmsg, sendmsg); TLS from uprobes on OpenSSL's
 * SSL_read, SSL_write and their _ex forms, which see the bytes before
 * encryption and after decryption. A syscall made inside an SSL call is the
 * ciphertext of that SSL connection: it is not copied, it only tells which
 * socket the SSL connection uses (for its addresses, and its close).
 *
 * Every read and write on the host passes here, so the common case is cheap:
 * a connection is tracked only once its first bytes look like HTTP/1.x (a
 * request or a response) or like an event stream, and only a tracked
 * connection's bytes are copied, in at most ZL_ST_PIECES pieces of
 * ZL_ST_PIECE bytes per call. Each piece carries its offset in the byte
 * stream, so userspace knows what it missed (a longer call, a full ring). */
#include "zl_object.h"
#include "zl_core.h"
#include "streams.h"
#include "zl_verifier.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* Fixed when the object is built (pyxdp.streams.probes): the pieces per
 * call, iovecs read per vectored call, after how many calls in a row that
 * are not HTTP a socket is ignored, and the mark (in zl_st_ignored) of a
 * connection userspace evicted. */
#if !defined(ZL_ST_PIECES) || !defined(ZL_ST_IOVS) || !defined(ZL_ST_IGNORE_AFTER) || \
	!defined(ZL_ST_EVICTED)
#error "the streams program's sizes are defined by the loader (docs/spec.md section 7.2)"
#endif
_Static_assert((ZL_ST_PIECE & (ZL_ST_PIECE - 1)) == 0, "ZL_ST_PIECE is a power of two (zl_at_most)");

/* Set for each load, before it (pyxdp.streams.probes): the observer's own
 * pid (never watched), and whether only the pids in zl_st_pids are
 * watched. Frozen once loaded, so the verifier drops what they turn off. */
const volatile struct {
	__u32 self;
	__u32 filter_pids;
	__u32 filter_cgroups; /* zl_st_cgroups holds some: look the caller's up */
	__u32 pad;
} zl_st_config = {};

/* Map sizes the loader sets for each load (bpf_map__set_max_entries): the
 * connections (--max-streams) and the ring; these are their defaults. */
#define ZL_ST_MAX_CONNS 20000
#define ZL_ST_RING_BYTES (4096 * 4096)

#define ZL_ST_LRU(name, key_t, value_t, entries)    \
	struct {                                     \
		__uint(type, BPF_MAP_TYPE_LRU_HASH); \
		__uint(max_entries, entries);        \
		__type(key, key_t);                  \
		__type(value, value_t);              \
	} name SEC(".maps")

/* The kernel's values (stable ABI) */
#define ZL_ST_AF_INET 2
#define ZL_ST_AF_INET6 10
#define ZL_ST_SOCK_STREAM 1
#define ZL_ST_S_IFMT 0170000
#define ZL_ST_S_IFSOCK 0140000

/* struct iovec */
struct zl_st_iovec {
	void *iov_base;
	__u64 iov_len;
};

/* struct user_msghdr, as sendmsg(2) and recvmsg(2) take it */
struct zl_st_msghdr {
	void *name;
	int namelen;
	struct zl_st_iovec *iov;
	__u64 iovlen;
};

/* What the first bytes of a connection must look like to be tracked. */
#define ZL_ST_PEEK 16
#define ZL_ST_NO 0
#define ZL_ST_YES 1

struct zl_st_key {
	__u32 tgid;
	__u32 tls;
	__u64 id; /* fd, or SSL pointer */
};

struct zl_st_conn {
	__u64 seq[2]; /* bytes seen so far, read (0) and written (1) */
	__u8 unused;
	__u8 told;    /* userspace has its description (CONN or LINK) */
	__u8 pad[6];
};

/* A syscall between its entry and its exit. */
struct zl_st_call {
	__u64 buf; /* the buffer, or the iovec array when vec */
	__u32 fd;
	__u16 vlen;
	__u8 vec;
	__u8 out;
};

/* An SSL call between its entry and its return. */
struct zl_st_ssl_call {
	__u64 ssl;
	__u64 buf;
	__u64 lenp; /* _ex: where the length goes */
	__u8 out;
	__u8 ex;
	__u8 pad[6];
};

struct zl_st_link {
	__u32 tgid;
	__u32 pad;
	__u64 id;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ZL_ST_RING_BYTES);
} zl_st_events SEC(".maps");
ZL_ST_LRU(zl_st_conns, struct zl_st_key, struct zl_st_conn, ZL_ST_MAX_CONNS);
ZL_ST_LRU(zl_st_calls, __u64, struct zl_st_call, 16384);
ZL_ST_LRU(zl_st_ssl_calls, __u64, struct zl_st_ssl_call, 16384);
/* (tgid, SSL pointer) -> fd, and (tgid, fd) -> SSL pointer */
ZL_ST_LRU(zl_st_ssl_fds, struct zl_st_link, __u64, ZL_ST_MAX_CONNS);
ZL_ST_LRU(zl_st_fd_ssls, struct zl_st_link, __u64, ZL_ST_MAX_CONNS);
/* Threads whose SSL connections do their I/O through memory BIOs (Python's
 * asyncio: uvicorn serving TLS, async SDK clients), so no system call is
 * made inside an SSL call: the socket read last, whose ciphertext the next
 * SSL_read decrypts, and the SSL connection written last, whose ciphertext
 * the next socket write sends. */
struct zl_st_bio_thread {
	__u64 pending_ssl; /* SSL pointer written to, its socket not known yet */
	__s64 last_fd;    /* the TCP socket read last, -1 none */
};

ZL_ST_LRU(zl_st_bio_threads, __u64, struct zl_st_bio_thread, 16384);
/* processes with a tracked, linked or ignored connection: their exit is
 * reported, for userspace to clear what they leave in the maps */
ZL_ST_LRU(zl_st_procs, __u32, __u8, ZL_ST_MAX_CONNS);
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} zl_st_pids SEC(".maps");
/* the cgroups selected (--cgroup) and those below them, by id (the cgroup
 * v2 directory's inode number), kept by userspace */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} zl_st_cgroups SEC(".maps");
/* Plaintext sockets whose calls did not look like HTTP or an event stream,
 * ZL_ST_IGNORE_AFTER of them while untracked: a database's, a cache's, a TLS
 * connection's ciphertext. From then on their calls cost one lookup, not
 * a walk to the socket and a call record, until the fd is closed. */
ZL_ST_LRU(zl_st_ignored, struct zl_st_key, __u32, ZL_ST_MAX_CONNS);
/* An event is built here, then only its used part goes into the ring: a
 * chunk of a few hundred bytes takes a few hundred bytes of ring, not
 * ZL_ST_PIECE (bpf_ringbuf_reserve takes only a constant size). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zl_st_event);
} zl_st_scratch SEC(".maps");
/* A TLS event is built in a buffer of its thread's instead. Uprobe programs
 * (the SSL functions') run with only migration off, and a kernel that
 * preempts in-kernel code (Linux 7.x's lazy and full preemption) may run
 * another program on the CPU while one is half built, which would send a
 * mix of the two. A thread cannot preempt itself; the system calls'
 * tracepoint programs run with preemption off, so the per-CPU buffer stays
 * theirs. Every event a uprobe program builds is a TLS one. */
ZL_ST_LRU(zl_st_tls_scratch, __u64, struct zl_st_event, 1024);

#define ZL_ST_HEADER (sizeof(struct zl_st_event) - ZL_ST_PIECE)

static __always_inline struct zl_st_event *zl_st_new(__u8 kind, __u32 tgid, __u64 id, __u8 tls,
						     __u64 ts)
{
	__u32 zero = 0;
	struct zl_st_event *ev = bpf_map_lookup_elem(&zl_st_scratch, &zero);

	if (!ev)
		return NULL;
	if (tls) {
		__u64 thread = bpf_get_current_pid_tgid();
		struct zl_st_event *own = bpf_map_lookup_elem(&zl_st_tls_scratch, &thread);

		if (!own) {
			/* a first event: the entry is made (its bytes are overwritten) */
			bpf_map_update_elem(&zl_st_tls_scratch, &thread, ev, BPF_ANY);
			own = bpf_map_lookup_elem(&zl_st_tls_scratch, &thread);
		}
		if (!own)
			return NULL;
		ev = own;
	}
	ev->ts = ts;
	ev->id = id;
	ev->off = 0;
	ev->tgid = tgid;
	ev->len = 0;
	ev->fd = -1;
	ev->kind = kind;
	ev->out = 0;
	ev->tls = tls;
	ev->aux = 0;
	ev->uid = 0;
	ev->flags = 0;
	ev->family = 0;
	ev->lport = 0;
	ev->rport = 0;
	return ev;
}

/* EV's header and its first LEN bytes of data into the ring, without waking
 * the reader: it reads on its own clock (the times are the kernel's), so a
 * busy stream costs no wake-up per event. A full ring drops the event;
 * the offsets tell userspace. */
/* Events the full ring refused, by kind, for userspace to say what it
 * missed (an end is kept aside as well: zl_st_ends_missed). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} zl_st_refused SEC(".maps");

static __always_inline int zl_st_send(struct zl_st_event *ev, __u64 len)
{
	__u32 kind = ev->kind & 7;
	__u64 *n;
	int err;

	len = zl_at_most(len, ZL_ST_PIECE);
	err = bpf_ringbuf_output(&zl_st_events, ev, ZL_ST_HEADER + len, BPF_RB_NO_WAKEUP);
	if (err) {
		n = bpf_map_lookup_elem(&zl_st_refused, &kind);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return err;
}

/* An end (a close, a process's exit, a fork) the full ring refused: kept
 * here with what its event said, for userspace to take out, so that no
 * stream stays open for ever after a burst. An exit's key has tls
 * ZL_ST_EXIT_KEY and id 0; a fork's tls ZL_ST_FORK_KEY and id the child. */
struct zl_st_missed {
	__u64 ts;
	__u64 off; /* as the event's */
	__u64 aux;
	__u64 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct zl_st_key);
	__type(value, struct zl_st_missed);
} zl_st_ends_missed SEC(".maps");

static __always_inline void zl_st_send_end(struct zl_st_event *ev, struct zl_st_key *key)
{
	struct zl_st_missed kept = {.ts = ev->ts, .off = ev->off, .aux = ev->aux,
				    .flags = ev->flags};

	if (zl_st_send(ev, 0))
		bpf_map_update_elem(&zl_st_ends_missed, key, &kept, BPF_ANY);
}

static __always_inline int zl_st_watched(__u32 tgid)
{
	if (tgid == zl_st_config.self)
		return 0;
	if (zl_st_config.filter_pids && !bpf_map_lookup_elem(&zl_st_pids, &tgid)) {
		__u64 cgroup;

		if (!zl_st_config.filter_cgroups)
			return 0;
		/* a selected cgroup's process is watched from its first call:
		 * one started there is never waited for */
		cgroup = bpf_get_current_cgroup_id();
		return bpf_map_lookup_elem(&zl_st_cgroups, &cgroup) != NULL;
	}
	return 1;
}

/* The calling process's open file at FD, or NULL. */
static __always_inline struct file *zl_st_file(__u32 fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct files_struct *files = NULL;
	struct fdtable *fdt = NULL;
	struct file **fds = NULL;
	struct file *file = NULL;
	unsigned int max_fds = 0;

	if (ZL_CORE_READ(files, task, files) || !files || ZL_CORE_READ(fdt, files, fdt) || !fdt)
		return NULL;
	if (ZL_CORE_READ(max_fds, fdt, max_fds) || fd >= max_fds)
		return NULL;
	if (ZL_CORE_READ(fds, fdt, fd) || !fds)
		return NULL;
	bpf_probe_read_kernel(&file, sizeof(file), fds + fd);
	return file;
}

/* Whether descriptors other than the one being closed hold FILE: a forked
 * process's, a dup's, one passed over a UNIX socket. Then its close(2) is
 * not the socket's end. */
static __always_inline int zl_st_file_shared(struct file *file)
{
	struct file___ref *counted = (struct file___ref *)file;
	long refs = 0;

	if (!file)
		return 0;
	if (ZL_CORE_HAS(counted, f_ref)) /* one less than the references */
		return !ZL_CORE_READ(refs, counted, f_ref.refcnt.counter) && refs > 0;
	return !ZL_CORE_READ(refs, file, f_count.counter) && refs > 1;
}

/* The process's socket at FD (its struct sock) when it is a TCP one
 * (stream, IPv4 or IPv6); its inode number, which names the socket in
 * every process holding it, in *INO when INO is given. */
static __always_inline struct sock *zl_st_tcp_sock_ino(__u32 fd, __u64 *ino)
{
	struct file *file = zl_st_file(fd);
	struct inode *inode = NULL;
	struct socket *sock = NULL;
	struct sock *sk = NULL;
	unsigned short mode = 0, family = 0;
	unsigned long number = 0;
	short type = 0;

	if (!file || ZL_CORE_READ(inode, file, f_inode) || !inode)
		return NULL;
	if (ZL_CORE_READ(mode, inode, i_mode) || (mode & ZL_ST_S_IFMT) != ZL_ST_S_IFSOCK)
		return NULL;
	if (ino && !ZL_CORE_READ(number, inode, i_ino))
		*ino = number;
	if (ZL_CORE_READ(sock, file, private_data) || !sock)
		return NULL;
	if (ZL_CORE_READ(type, sock, type) || type != ZL_ST_SOCK_STREAM)
		return NULL;
	if (ZL_CORE_READ(sk, sock, sk) || !sk)
		return NULL;
	ZL_CORE_READ(family, sk, __sk_common.skc_family);
	if (family != ZL_ST_AF_INET && family != ZL_ST_AF_INET6)
		return NULL;
	return sk;
}

static __always_inline struct sock *zl_st_tcp_sock(__u32 fd)
{
	return zl_st_tcp_sock_ino(fd, NULL);
}

static __always_inline int zl_st_is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* An event stream's window: "data:", "event:", "id:" or a ":" comment. */
static __always_inline int zl_st_sse_at(const char *p)
{
	return (p[0] == 'd' && p[1] == 'a' && p[2] == 't' && p[3] == 'a' && p[4] == ':') ||
	       (p[0] == 'e' && p[1] == 'v' && p[2] == 'e' && p[3] == 'n' && p[4] == 't') ||
	       (p[0] == 'i' && p[1] == 'd' && p[2] == ':') || (p[0] == ':' && p[1] == ' ');
}

/* Whether P (9 bytes) is a plausible HTTP/2 frame header: a length within
 * the default maximum (16 KiB), a type of RFC 9113, the reserved bit clear,
 * and a stream id that fits the type. */
static __always_inline int zl_st_h2_frame(const char *p)
{
	__u8 type = p[3];
	int sid0 = !(p[5] | p[6] | p[7] | p[8]);

	if (p[0] != 0 || (__u8)p[1] > 0x40 || type > 9 || (p[5] & 0x80))
		return 0;
	if (type == 4 || type == 6 || type == 7) /* SETTINGS, PING, GOAWAY */
		return sid0;
	return type == 8 || !sid0; /* WINDOW_UPDATE: either */
}

/* Whether the first bytes of a connection's data at BUF (LEN bytes) are worth
 * tracking: an HTTP/1.x request or response, an event stream (mid-stream,
 * for connections older than the observer), possibly inside a chunk of
 * chunked transfer encoding; HTTP/2's preface; or whole HTTP/2 frames (a
 * server's SETTINGS, written before it reads the client's preface, or a
 * connection older than the observer, which userspace counts and evicts:
 * its HPACK context is gone). */
static __always_inline int zl_st_recognise(const void *buf, __u64 len)
{
	char p[ZL_ST_PEEK + 8] = {};
	__u64 n = len < ZL_ST_PEEK ? len : ZL_ST_PEEK;

	zl_opaque(n); /* the bound below stays, for verifiers that lose clang's */
	if (n > ZL_ST_PEEK)
		n = ZL_ST_PEEK;
	if (len < 4 || bpf_probe_read_user(p, n, buf))
		return ZL_ST_NO;
	if (p[0] == 'H' && p[1] == 'T' && p[2] == 'T' && p[3] == 'P' && p[4] == '/' && p[5] == '1')
		return ZL_ST_YES;
	if ((p[0] == 'G' && p[1] == 'E' && p[2] == 'T' && p[3] == ' ') ||
	    (p[0] == 'P' && p[1] == 'O' && p[2] == 'S' && p[3] == 'T' && p[4] == ' ') ||
	    (p[0] == 'P' && p[1] == 'U' && p[2] == 'T' && p[3] == ' ') ||
	    (p[0] == 'P' && p[1] == 'A' && p[2] == 'T' && p[3] == 'C' && p[4] == 'H') ||
	    (p[0] == 'D' && p[1] == 'E' && p[2] == 'L' && p[3] == 'E' && p[4] == 'T') ||
	    (p[0] == 'H' && p[1] == 'E' && p[2] == 'A' && p[3] == 'D' && p[4] == ' ') ||
	    (p[0] == 'O' && p[1] == 'P' && p[2] == 'T' && p[3] == 'I' && p[4] == 'O'))
		return ZL_ST_YES;
	if (p[0] == 'P' && p[1] == 'R' && p[2] == 'I' && p[3] == ' ' && p[4] == '*')
		return ZL_ST_YES; /* followed both ways (pyxdp.streams.http2) */
	if (zl_st_h2_frame(p) && len >= 9) {
		/* a frame header; the call must hold whole frames: this one
		 * exactly, or another frame header right after it */
		__u64 end = 9 + (((__u64)(__u8)p[1] << 8) | (__u8)p[2]);

		if (end == len)
			return ZL_ST_YES;
		if (end + 9 <= len && !bpf_probe_read_user(p, 9, buf + end) && zl_st_h2_frame(p))
			return ZL_ST_YES;
		return ZL_ST_NO;
	}
	if (zl_st_sse_at(p))
		return ZL_ST_YES;
	/* a chunk-size line: up to 6 hex digits, CRLF, then the event (read
	 * again from there: a variable offset into the stack is refused) */
#pragma unroll
	for (__u64 i = 1; i <= 6; i++) {
		if (!zl_st_is_hex(p[i - 1]))
			return ZL_ST_NO;
		if (p[i] == '\r' && p[i + 1] == '\n') {
			if (len < i + 2 + 6 || bpf_probe_read_user(p, 6, buf + i + 2))
				return ZL_ST_NO;
			return zl_st_sse_at(p) ? ZL_ST_YES : ZL_ST_NO;
		}
	}
	return ZL_ST_NO;
}

/* One piece: N bytes (at most ZL_ST_PIECE) at BUF, at offset OFF of the
 * direction's stream. */
static __always_inline void zl_st_piece(struct zl_st_key *key, __u8 out, __u64 ts, const char *buf,
					__u64 n, __u64 off)
{
	struct zl_st_event *ev = zl_st_new(ZL_ST_DATA, key->tgid, key->id, key->tls, ts);

	if (!ev)
		return;
	ev->off = off;
	ev->out = out;
	n = zl_at_most(n, ZL_ST_PIECE);
	if (bpf_probe_read_user(ev->data, n, buf))
		n = 0; /* userspace sees the gap */
	ev->len = n;
	zl_st_send(ev, n);
}

/* Copies LEN bytes at BUF, from offset OFF of the direction's stream, in at
 * most ZL_ST_PIECES events; what does not fit is missed (userspace sees the
 * gap in the offsets). */
static __always_inline void zl_st_copy(struct zl_st_key *key, __u8 out, __u64 ts, const char *buf,
				       __u64 len, __u64 off)
{
#pragma unroll
	for (int i = 0; i < ZL_ST_PIECES; i++) {
		__u64 pos = (__u64)i * ZL_ST_PIECE;
		__u64 n;

		if (pos >= len)
			return;
		n = len - pos;
		if (n > ZL_ST_PIECE)
			n = ZL_ST_PIECE;
		zl_st_piece(key, out, ts, buf + pos, n, off + pos);
	}
}

/* Tells userspace of a newly tracked connection: the process and, when the
 * socket (at FD) is known, its addresses. Returns whether the ring took it. */
static __always_inline int zl_st_announce(struct zl_st_key *key, __s32 fd, __u64 ts, __u8 kind)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = NULL;
	struct zl_st_event *ev;
	struct sock *sk = NULL;
	__u64 ino = 0;
	__u8 yes = 1;

	bpf_map_update_elem(&zl_st_procs, &key->tgid, &yes, BPF_ANY);
	ev = zl_st_new(kind, key->tgid, key->id, key->tls, ts);
	if (!ev)
		return 0;
	ev->fd = fd;
	ev->uid = (__u32)bpf_get_current_uid_gid();
	if (ZL_CORE_READ(leader, task, group_leader) || !leader ||
	    bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), ZL_CORE_AT(leader, comm)) < 0)
		ev->comm[0] = 0;
	if (fd >= 0)
		sk = zl_st_tcp_sock_ino(fd, &ino);
	if (sk) {
		__u16 dport = 0;

		ev->aux = ino;
		ZL_CORE_READ(ev->family, sk, __sk_common.skc_family);
		ZL_CORE_READ(ev->lport, sk, __sk_common.skc_num);
		ZL_CORE_READ(dport, sk, __sk_common.skc_dport);
		ev->rport = (dport >> 8) | (dport << 8);
		if (ev->family == ZL_ST_AF_INET) {
			bpf_probe_read_kernel(ev->laddr, 4, ZL_CORE_AT(sk, __sk_common.skc_rcv_saddr));
			bpf_probe_read_kernel(ev->raddr, 4, ZL_CORE_AT(sk, __sk_common.skc_daddr));
		} else {
			bpf_probe_read_kernel(ev->laddr, 16,
					      ZL_CORE_AT(sk, __sk_common.skc_v6_rcv_saddr));
			bpf_probe_read_kernel(ev->raddr, 16, ZL_CORE_AT(sk, __sk_common.skc_v6_daddr));
		}
	}
	return !zl_st_send(ev, 0);
}

/* One more call on the untracked connection KEY that did not look like HTTP. */
static __always_inline void zl_st_not_http(struct zl_st_key *key)
{
	__u32 one = 1, *n;
	__u8 yes = 1;

	if (key->tls)
		return;
	n = bpf_map_lookup_elem(&zl_st_ignored, key);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	bpf_map_update_elem(&zl_st_ignored, key, &one, BPF_ANY);
	bpf_map_update_elem(&zl_st_procs, &key->tgid, &yes, BPF_ANY);
}

static __always_inline int zl_st_is_ignored(struct zl_st_key *key)
{
	__u32 *n = bpf_map_lookup_elem(&zl_st_ignored, key);

	return n && *n >= ZL_ST_IGNORE_AFTER;
}

/* A call's bytes on connection KEY, the first FIRST of them at BUF: tracks
 * the connection when they look worth it, and returns its state to copy
 * them into, or NULL. */
static __always_inline struct zl_st_conn *zl_st_track(struct zl_st_key *key, __s32 fd,
						      const void *buf, __u64 first, __u64 ts)
{
	struct zl_st_conn *conn = bpf_map_lookup_elem(&zl_st_conns, key);
	struct zl_st_conn fresh = {};
	int verdict;

	if (conn) {
		/* its CONN found the ring full: told now, as a LINK (its
		 * offsets go on), before the bytes */
		if (!conn->told)
			conn->told = zl_st_announce(key, fd, ts, ZL_ST_LINK);
		return conn;
	}
	/* plaintext was checked at the call's entry; a TLS connection is
	 * ignored only when userspace evicted it */
	if (key->tls && zl_st_is_ignored(key))
		return NULL;
	verdict = zl_st_recognise(buf, first);
	if (verdict == ZL_ST_NO) {
		zl_st_not_http(key);
		return NULL;
	}
	fresh.told = zl_st_announce(key, fd, ts, ZL_ST_CONN);
	bpf_map_update_elem(&zl_st_conns, key, &fresh, BPF_ANY);
	return bpf_map_lookup_elem(&zl_st_conns, key);
}

/* LEN bytes moved in one buffer at BUF on connection KEY. */
static __always_inline void zl_st_data(struct zl_st_key *key, __s32 fd, __u8 out, const void *buf,
				       __u64 len)
{
	__u64 ts = bpf_ktime_get_ns();
	struct zl_st_conn *conn = zl_st_track(key, fd, buf, len, ts);
	__u64 off;

	if (!conn)
		return;
	off = conn->seq[out & 1];
	conn->seq[out & 1] = off + len;
	zl_st_copy(key, out, ts, buf, len, off);
}

/* LEN bytes moved through the iovec array VEC (VLEN entries): the first
 * iovec as a buffer (ZL_ST_PIECES pieces), each later one in one piece, up
 * to ZL_ST_IOVS of them. Many small buffers are the usual call: asyncio on
 * Python 3.12+ sends in one sendmsg every write a slow reader left behind,
 * a chunk each, and a chunk past the iovecs read is missed (unseen, when
 * nothing follows it). */
static __always_inline void zl_st_vec_data(struct zl_st_key *key, __s32 fd, __u8 out,
					   const struct zl_st_iovec *vec, __u64 vlen, __u64 len)
{
	__u64 ts = bpf_ktime_get_ns();
	struct zl_st_conn *conn;
	struct zl_st_iovec iov = {};
	__u64 off, done = 0;

	if (!vlen || bpf_probe_read_user(&iov, sizeof(iov), vec))
		return;
	conn = zl_st_track(key, fd, iov.iov_base, iov.iov_len < len ? iov.iov_len : len, ts);
	if (!conn)
		return;
	off = conn->seq[out & 1];
	conn->seq[out & 1] = off + len;
#pragma unroll
	for (int i = 0; i < ZL_ST_IOVS; i++) {
		__u64 n;

		if (i >= vlen || done >= len)
			return;
		if (i > 0 && bpf_probe_read_user(&iov, sizeof(iov), vec + i))
			return;
		n = len - done;
		if (n > iov.iov_len)
			n = iov.iov_len;
		if (i == 0)
			zl_st_copy(key, out, ts, iov.iov_base, n, off);
		else if (n)
			zl_st_piece(key, out, ts, iov.iov_base, n, off + done);
		/* the whole iovec, copied or not: the same on every path above, so
		 * the verifier's paths meet again (adding what each copied did not) */
		done += iov.iov_len;
	}
}

/* SSL connection SSL of process TGID uses socket FD: remembered for its
 * close, and told to userspace (the addresses) when it is tracked already. */
static __always_inline void zl_st_link(__u32 tgid, __u64 ssl, __u32 fd)
{
	struct zl_st_link by_ssl = {.tgid = tgid, .id = ssl};
	struct zl_st_link by_fd = {.tgid = tgid, .id = fd};
	struct zl_st_key key = {.tgid = tgid, .tls = 1, .id = ssl};
	__u64 *known = bpf_map_lookup_elem(&zl_st_ssl_fds, &by_ssl);
	__u64 fd64 = fd;
	__u8 yes = 1;

	if (known && *known == fd64)
		return;
	bpf_map_update_elem(&zl_st_ssl_fds, &by_ssl, &fd64, BPF_ANY);
	bpf_map_update_elem(&zl_st_fd_ssls, &by_fd, &ssl, BPF_ANY);
	bpf_map_update_elem(&zl_st_procs, &tgid, &yes, BPF_ANY);
	if (bpf_map_lookup_elem(&zl_st_conns, &key))
		zl_st_announce(&key, fd, bpf_ktime_get_ns(), ZL_ST_LINK);
}

/* --- plaintext: syscalls ------------------------------------------------------ */

/* A syscall moving data on FD starts: COUNT bytes at BUF, or VLEN iovecs
 * there when VEC. Inside an SSL call it is that SSL connection's
 * ciphertext: it links the two and is not followed. */
static __always_inline void zl_st_enter(__u32 fd, const void *buf, __u64 count, __u64 vlen,
					__u8 vec, __u8 out)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct zl_st_ssl_call *ssl;
	struct zl_st_bio_thread *bio;
	struct zl_st_key key = {.tgid = tgid, .tls = 0, .id = fd};
	struct zl_st_call call = {};

	if (!zl_st_watched(tgid))
		return;
	ssl = bpf_map_lookup_elem(&zl_st_ssl_calls, &id);
	if (ssl) {
		zl_st_link(tgid, ssl->ssl, fd);
		return;
	}
	bio = bpf_map_lookup_elem(&zl_st_bio_threads, &id);
	if (bio && (out ? bio->pending_ssl != 0 : 1) && zl_st_tcp_sock(fd)) {
		if (out) {
			zl_st_link(tgid, bio->pending_ssl, fd);
			bio->pending_ssl = 0;
		} else {
			bio->last_fd = fd;
		}
	}
	/* Not tracked: an ignored socket, or a write whose first bytes do not
	 * qualify, costs no more (the cheapest tests first); otherwise it must
	 * be a TCP socket. */
	if (!bpf_map_lookup_elem(&zl_st_conns, &key)) {
		if (zl_st_is_ignored(&key))
			return;
		if (out && !vec && zl_st_recognise(buf, count) == ZL_ST_NO) {
			zl_st_not_http(&key);
			return;
		}
		if (!zl_st_tcp_sock(fd))
			return;
	}
	call.buf = (__u64)buf;
	call.fd = fd;
	call.vlen = vlen > 0xffff ? 0xffff : vlen;
	call.vec = vec;
	call.out = out;
	bpf_map_update_elem(&zl_st_calls, &id, &call, BPF_ANY);
}

static __always_inline void zl_st_exit(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct zl_st_call *found = bpf_map_lookup_elem(&zl_st_calls, &id);
	struct zl_st_call call;
	struct zl_st_key key = {};

	if (!found)
		return;
	call = *found;
	bpf_map_delete_elem(&zl_st_calls, &id);
	if (ret <= 0)
		return;
	key.tgid = id >> 32;
	key.id = call.fd;
	if (call.vec)
		zl_st_vec_data(&key, call.fd, call.out, (const struct zl_st_iovec *)call.buf, call.vlen,
			       ret);
	else
		zl_st_data(&key, call.fd, call.out, (const void *)call.buf, ret);
}

/* The iovec array of a msghdr in user memory. */
static __always_inline void zl_st_enter_msg(__u32 fd, const void *msg, __u8 out)
{
	struct zl_st_msghdr m = {};

	if (bpf_probe_read_user(&m, sizeof(m), msg))
		return;
	zl_st_enter(fd, m.iov, 0, m.iovlen, 1, out);
}

/* Each syscall's entry and exit programs, on its tracepoints. ENTER is the
 * call zl_st_enter gets, from the tracepoint's arguments (ctx->args). */
#define ZL_ST_SYSCALL(name, enter)                                           \
	SEC("tracepoint/syscalls/sys_enter_" #name)                          \
	int zl_st_enter_##name(struct zl_sys_enter *ctx)                     \
	{                                                                    \
		enter;                                                       \
		return 0;                                                    \
	}                                                                    \
	SEC("tracepoint/syscalls/sys_exit_" #name)                           \
	int zl_st_exit_##name(struct zl_sys_exit *ctx)                       \
	{                                                                    \
		zl_st_exit(ctx->ret);                                        \
		return 0;                                                    \
	}

/* (fd, buf, count) */
ZL_ST_SYSCALL(read, zl_st_enter(ctx->args[0], (const void *)ctx->args[1], ctx->args[2], 0, 0, 0))
ZL_ST_SYSCALL(write, zl_st_enter(ctx->args[0], (const void *)ctx->args[1], ctx->args[2], 0, 0, 1))
/* (fd, buf, size, flags, addr, addrlen) */
ZL_ST_SYSCALL(recvfrom, zl_st_enter(ctx->args[0], (const void *)ctx->args[1], ctx->args[2], 0, 0, 0))
ZL_ST_SYSCALL(sendto, zl_st_enter(ctx->args[0], (const void *)ctx->args[1], ctx->args[2], 0, 0, 1))
/* (fd, vec, vlen) */
ZL_ST_SYSCALL(readv, zl_st_enter(ctx->args[0], (const void *)ctx->args[1], 0, ctx->args[2], 1, 0))
ZL_ST_SYSCALL(writev, zl_st_enter(ctx->args[0], (const void *)ctx->args[1], 0, ctx->args[2], 1, 1))
/* (fd, msg, flags) */
ZL_ST_SYSCALL(recvmsg, zl_st_enter_msg(ctx->args[0], (const void *)ctx->args[1], 0))
ZL_ST_SYSCALL(sendmsg, zl_st_enter_msg(ctx->args[0], (const void *)ctx->args[1], 1))

/* KEY's descriptor is closed: it is not ignored any more. One that
 * userspace evicted (marked ZL_ST_EVICTED) is told, with a close of its
 * own, so that userspace forgets it too. */
static __always_inline void zl_st_forget_ignored(struct zl_st_key *key)
{
	__u32 *n = bpf_map_lookup_elem(&zl_st_ignored, key);
	struct zl_st_event *ev;

	if (!n)
		return;
	if (*n == ZL_ST_EVICTED) {
		ev = zl_st_new(ZL_ST_CLOSE, key->tgid, key->id, key->tls, bpf_ktime_get_ns());
		if (ev)
			zl_st_send_end(ev, key);
	}
	bpf_map_delete_elem(&zl_st_ignored, key);
}

/* The close of a connection's descriptor: a plaintext one, or the SSL one
 * over the socket, with the bytes it carried in all (for userspace to know
 * what the ring lost at its end) and whether other descriptors still hold
 * the socket (SHARED: then it is not the connection's end). */
static __always_inline void zl_st_end(struct zl_st_key *key, struct zl_st_conn *conn, int shared)
{
	struct zl_st_event *ev;
	__u64 seen_in = conn->seq[0], seen_out = conn->seq[1];

	bpf_map_delete_elem(&zl_st_conns, key);
	ev = zl_st_new(ZL_ST_CLOSE, key->tgid, key->id, key->tls, bpf_ktime_get_ns());
	if (!ev)
		return;
	ev->off = seen_in;
	ev->aux = seen_out;
	ev->flags = shared ? ZL_ST_SHARED : 0;
	zl_st_send_end(ev, key);
}

SEC("tracepoint/syscalls/sys_enter_close")
int zl_st_enter_close(struct zl_sys_enter *ctx)
{
	__u32 fd = ctx->args[0];
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct zl_st_key key = {.tgid = tgid, .tls = 0, .id = fd};
	struct zl_st_link by_fd = {.tgid = tgid, .id = fd};
	struct zl_st_conn *conn;
	int shared = -1; /* not read yet: most closes are of nothing tracked */
	__u64 *ssl;

	if (!zl_st_watched(tgid))
		return 0;
	zl_st_forget_ignored(&key);
	ssl = bpf_map_lookup_elem(&zl_st_fd_ssls, &by_fd);
	if (ssl) {
		struct zl_st_link by_ssl = {.tgid = tgid, .id = *ssl};
		struct zl_st_key tls_key = {.tgid = tgid, .tls = 1, .id = *ssl};

		bpf_map_delete_elem(&zl_st_fd_ssls, &by_fd);
		bpf_map_delete_elem(&zl_st_ssl_fds, &by_ssl);
		zl_st_forget_ignored(&tls_key);
		conn = bpf_map_lookup_elem(&zl_st_conns, &tls_key);
		if (conn) {
			shared = zl_st_file_shared(zl_st_file(fd));
			zl_st_end(&tls_key, conn, shared);
		}
	}
	conn = bpf_map_lookup_elem(&zl_st_conns, &key);
	if (conn) {
		if (shared < 0)
			shared = zl_st_file_shared(zl_st_file(fd));
		zl_st_end(&key, conn, shared);
	}
	return 0;
}

/* The process's last thread ends: its connections with it. */
SEC("tracepoint/sched/sched_process_exit")
int zl_st_process_exit(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct signal_struct *signal = NULL;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct zl_st_key key = {.tgid = tgid, .tls = ZL_ST_EXIT_KEY, .id = 0};
	struct zl_st_event *ev;
	int live = 1;

	if (!bpf_map_lookup_elem(&zl_st_procs, &tgid))
		return 0;
	if (!ZL_CORE_READ(signal, task, signal) && signal)
		ZL_CORE_READ(live, signal, live.counter);
	if (live > 0)
		return 0;
	bpf_map_delete_elem(&zl_st_procs, &tgid);
	ev = zl_st_new(ZL_ST_EXIT, tgid, 0, 0, bpf_ktime_get_ns());
	if (ev)
		zl_st_send_end(ev, &key);
	return 0;
}

/* A new process (not a thread) forked by one holding connections: its
 * connections are the parent's too (one socket, now in both), so userspace
 * is told, and its exit will be reported. Under --pid the child is
 * watched as its parent is. */
SEC("raw_tracepoint/sched_process_fork")
int zl_st_process_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx->args[0];
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	struct zl_st_key key = {.tls = ZL_ST_FORK_KEY};
	struct zl_st_event *ev;
	__u32 ptgid = 0, ctgid = 0;
	__u8 yes = 1;

	ZL_CORE_READ(ptgid, parent, tgid);
	ZL_CORE_READ(ctgid, child, tgid);
	if (ptgid == ctgid)
		return 0;
	if (zl_st_config.filter_pids && bpf_map_lookup_elem(&zl_st_pids, &ptgid))
		bpf_map_update_elem(&zl_st_pids, &ctgid, &yes, BPF_ANY);
	if (!bpf_map_lookup_elem(&zl_st_procs, &ptgid) || !zl_st_watched(ptgid))
		return 0;
	bpf_map_update_elem(&zl_st_procs, &ctgid, &yes, BPF_ANY);
	ev = zl_st_new(ZL_ST_FORK, ptgid, 0, 0, bpf_ktime_get_ns());
	if (!ev)
		return 0;
	ev->aux = ctgid;
	key.tgid = ptgid;
	key.id = ctgid;
	zl_st_send_end(ev, &key);
	return 0;
}

/* --- TLS: uprobes on OpenSSL ---------------------------------------------------- */

static __always_inline int zl_st_ssl_enter(struct zl_regs *ctx, __u8 out, __u8 ex)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct zl_st_ssl_call call = {};

	if (!zl_st_watched(id >> 32))
		return 0;
	call.ssl = ZL_ARG1(ctx);
	call.buf = ZL_ARG2(ctx);
	call.lenp = ex ? ZL_ARG4(ctx) : 0;
	call.out = out;
	call.ex = ex;
	bpf_map_update_elem(&zl_st_ssl_calls, &id, &call, BPF_ANY);
	return 0;
}

SEC("uprobe")
int zl_st_ssl_read(struct zl_regs *ctx)
{
	return zl_st_ssl_enter(ctx, 0, 0);
}

SEC("uprobe")
int zl_st_ssl_write(struct zl_regs *ctx)
{
	return zl_st_ssl_enter(ctx, 1, 0);
}

SEC("uprobe")
int zl_st_ssl_read_ex(struct zl_regs *ctx)
{
	return zl_st_ssl_enter(ctx, 0, 1);
}

SEC("uprobe")
int zl_st_ssl_write_ex(struct zl_regs *ctx)
{
	return zl_st_ssl_enter(ctx, 1, 1);
}

/* Any of the four returns: SSL_read and SSL_write return the length, the _ex
 * forms 1 and the length through their fourth argument. */
SEC("uretprobe")
int zl_st_ssl_return(struct zl_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct zl_st_ssl_call *found = bpf_map_lookup_elem(&zl_st_ssl_calls, &id);
	struct zl_st_ssl_call call;
	struct zl_st_key key = {};
	struct zl_st_link by_ssl = {};
	long ret = ZL_RET(ctx);
	__u64 len = 0, *fd;

	if (!found)
		return 0;
	call = *found;
	bpf_map_delete_elem(&zl_st_ssl_calls, &id);
	if (call.ex) {
		if ((int)ret != 1 || bpf_probe_read_user(&len, sizeof(len), (void *)call.lenp))
			return 0;
	} else {
		if ((int)ret <= 0)
			return 0;
		len = (int)ret;
	}
	key.tgid = id >> 32;
	key.tls = 1;
	key.id = call.ssl;
	by_ssl.tgid = key.tgid;
	by_ssl.id = call.ssl;
	fd = bpf_map_lookup_elem(&zl_st_ssl_fds, &by_ssl);
	if (!fd) {
		/* no system call inside: a memory BIO (see zl_st_bio_threads) */
		struct zl_st_bio_thread *bio = bpf_map_lookup_elem(&zl_st_bio_threads, &id);
		struct zl_st_bio_thread fresh = {.pending_ssl = 0, .last_fd = -1};

		if (!bio) {
			bpf_map_update_elem(&zl_st_bio_threads, &id, &fresh, BPF_ANY);
			bio = bpf_map_lookup_elem(&zl_st_bio_threads, &id);
		}
		if (bio && call.out) {
			bio->pending_ssl = call.ssl;
		} else if (bio && bio->last_fd >= 0) {
			zl_st_link(key.tgid, call.ssl, bio->last_fd);
			fd = bpf_map_lookup_elem(&zl_st_ssl_fds, &by_ssl);
		}
	}
	zl_st_data(&key, fd ? (__s32)*fd : -1, call.out, (const void *)call.buf, len);
	return 0;
}

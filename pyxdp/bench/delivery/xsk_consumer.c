// SPDX-License-Identifier: Apache-2.0
/* The C ceiling of `zerolayer bench --section delivery`: an AF_XDP consumer
 * on libxdp that does in C what the bench's "touch" tier does in Python.
 *
 * It binds one AF_XDP socket (copy mode) to IFNAME's rx queue QUEUE in the
 * network namespace it was started in, registers it in zerolayer's pinned
 * XSKMAP (docs/spec.md section 6.1) at key QUEUE, and walks every token
 * frame of every datagram it receives: reads each frame's type and payload
 * length and the payload's first byte, folded into a checksum it prints, so
 * the compiler cannot drop the reads. It stops after COUNT datagrams, or
 * once its stdin is closed (the sender is done) and nothing has come for
 * IDLE_MS.
 *
 * stdout: one line {"ready": ...} once registered, then one JSON object with
 * what it received. The rate is measured as pyxdp.bench.delivery.xsk_vs_udp
 * measures the Python consumers: datagrams after the first batch over the
 * time from the first batch to the last.
 *
 * Built at bench time by pyxdp.bench.delivery.c_consumer:
 *   cc -O2 -o xsk_consumer xsk_consumer.c -lxdp -lbpf
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/if_ether.h>
#include <linux/if_xdp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <xdp/xsk.h>

#define BATCH 256 /* as the Python consumers' largest batch */
#define FRAME_HDR_LEN 5
#define FRAME_TYPES 5 /* 1 REQUEST .. 5 PONG (docs/spec.md section 1.2) */
#define ETH_P_8021AD_ 0x88A8
#define MAX_VLAN_TAGS 2
#define IPV6_HLEN 40
#define UDP_HLEN 8
#define BUSY_RETRIES 100 /* of 10 ms */

static const char *type_names[FRAME_TYPES + 1] = {
	"other", "request", "token", "done", "ping", "pong",
};

struct walk {
	uint64_t frames;
	uint64_t by_type[FRAME_TYPES + 1]; /* [0]: a type outside 1..5 */
	uint64_t malformed; /* datagrams whose walk did not end at the payload's end */
	uint64_t checksum;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "xsk_consumer: %s: %s\n", what, strerror(err));
	exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned int be16(const uint8_t *p)
{
	return (unsigned int)p[0] << 8 | p[1];
}

/* The UDP payload of a frame zerolayer redirected: Ethernet, up to two VLAN
 * tags, IPv4 (options allowed) or IPv6 with UDP next (docs/spec.md 1.3). */
static const uint8_t *udp_payload(const uint8_t *pkt, uint32_t len, uint32_t *plen)
{
	uint32_t l3 = ETH_HLEN, l4, udp_len;
	unsigned int proto;
	int i;

	if (len < ETH_HLEN)
		return NULL;
	proto = be16(pkt + 12);
	for (i = 0; i < MAX_VLAN_TAGS && (proto == ETH_P_8021Q || proto == ETH_P_8021AD_); i++) {
		if (len < l3 + 4)
			return NULL;
		proto = be16(pkt + l3 + 2);
		l3 += 4;
	}
	if (proto == ETH_P_IP) {
		if (len < l3 + 20)
			return NULL;
		l4 = l3 + (pkt[l3] & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		l4 = l3 + IPV6_HLEN;
	} else {
		return NULL;
	}
	if (len < l4 + UDP_HLEN)
		return NULL;
	udp_len = be16(pkt + l4 + 4);
	if (udp_len < UDP_HLEN || l4 + udp_len > len)
		return NULL;
	*plen = udp_len - UDP_HLEN;
	return pkt + l4 + UDP_HLEN;
}

/* Every frame of one datagram: its type, its length, its payload's first byte. */
static void walk_datagram(struct walk *w, const uint8_t *pkt, uint32_t len)
{
	uint32_t plen, off = 0;
	const uint8_t *p = udp_payload(pkt, len, &plen);

	if (!p) {
		w->malformed++;
		return;
	}
	while (plen - off >= FRAME_HDR_LEN) {
		uint32_t flen = (uint32_t)p[off] << 24 | (uint32_t)p[off + 1] << 16 |
				(uint32_t)p[off + 2] << 8 | p[off + 3];
		unsigned int type = p[off + 4];

		off += FRAME_HDR_LEN;
		if (flen > plen - off) {
			w->malformed++;
			return;
		}
		w->frames++;
		w->by_type[type <= FRAME_TYPES ? type : 0]++;
		w->checksum += type + flen + (flen ? p[off] : 0);
		off += flen;
	}
	if (off != plen)
		w->malformed++;
}

struct options {
	const char *ifname;
	const char *xsks_map;
	unsigned int queue;
	int cpu;
	uint64_t count;
	unsigned int frames;
	unsigned int chunk;
	unsigned int rx_size;
	int idle_ms;
};

static void usage(void)
{
	fprintf(stderr, "usage: xsk_consumer --ifname IFNAME --xsks-map PIN --count N "
			"[--queue Q] [--cpu C] [--frames F] [--chunk-size S] [--rx-size R] "
			"[--idle-ms MS]\n");
	exit(2);
}

static unsigned long number(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !*s || *end)
		usage();
	return v;
}

static struct options parse(int argc, char **argv)
{
	static const struct option longs[] = {
		{"ifname", required_argument, NULL, 'i'},
		{"xsks-map", required_argument, NULL, 'm'},
		{"queue", required_argument, NULL, 'q'},
		{"cpu", required_argument, NULL, 'c'},
		{"count", required_argument, NULL, 'n'},
		{"frames", required_argument, NULL, 'f'},
		{"chunk-size", required_argument, NULL, 's'},
		{"rx-size", required_argument, NULL, 'r'},
		{"idle-ms", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0},
	};
	struct options o = {.cpu = -1, .frames = 8192, .chunk = 2048, .rx_size = 4096,
			    .idle_ms = 250};
	int opt;

	while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (opt) {
		case 'i': o.ifname = optarg; break;
		case 'm': o.xsks_map = optarg; break;
		case 'q': o.queue = number(optarg); break;
		case 'c': o.cpu = number(optarg); break;
		case 'n': o.count = number(optarg); break;
		case 'f': o.frames = number(optarg); break;
		case 's': o.chunk = number(optarg); break;
		case 'r': o.rx_size = number(optarg); break;
		case 't': o.idle_ms = number(optarg); break;
		default: usage();
		}
	}
	if (!o.ifname || !o.xsks_map || !o.count || optind != argc)
		usage();
	return o;
}

int main(int argc, char **argv)
{
	struct options o = parse(argc, argv);
	struct xsk_ring_prod fill;
	struct xsk_ring_cons comp, rx;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xdp_statistics st = {0};
	struct xdp_options xo = {0};
	socklen_t optlen;
	struct walk w = {0};
	uint64_t got = 0, got_at_dry = 0, first = 0, chunk_mask = ~(uint64_t)(o.chunk - 1);
	double t_first = 0, t_last = 0;
	int map_fd, fd, err, done = 0;
	uint32_t idx, i;
	void *area;
	size_t size = (size_t)o.frames * o.chunk;

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (o.cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(o.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			die("sched_setaffinity", errno);
	}
	map_fd = bpf_obj_get(o.xsks_map);
	if (map_fd < 0)
		die(o.xsks_map, errno);

	/* The same memory as the Python consumer's: FRAMES chunks, a fill ring
	 * of two slots per chunk, a one-entry completion ring (nothing is sent). */
	area = mmap(NULL, size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (area == MAP_FAILED)
		die("mmap", errno);
	struct xsk_umem_config ucfg = {
		.fill_size = 2 * o.frames, .comp_size = 1, .frame_size = o.chunk,
		.frame_headroom = 0, .flags = 0,
	};
	err = xsk_umem__create(&umem, area, size, &fill, &comp, &ucfg);
	if (err)
		die("xsk_umem__create", -err);
	struct xsk_socket_config scfg = {
		.rx_size = o.rx_size, .tx_size = 0,
		/* zerolayer's program is attached already: load nothing */
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
		.bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP,
	};
	/* The kernel lets go of a closed socket's queue in deferred work, so the
	 * bench's previous consumer may hold it for a moment yet: retry EBUSY for
	 * a second (libxdp leaves the UMEM reusable after a failed bind). */
	for (i = 0; (err = xsk_socket__create(&xsk, o.ifname, o.queue, umem, &rx, NULL, &scfg)) ==
		    -EBUSY && i < BUSY_RETRIES; i++)
		usleep(10000);
	if (err)
		die("xsk_socket__create", -err);
	fd = xsk_socket__fd(xsk);
	optlen = sizeof(xo);
	if (getsockopt(fd, SOL_XDP, XDP_OPTIONS, &xo, &optlen))
		die("getsockopt(XDP_OPTIONS)", errno);

	if (xsk_ring_prod__reserve(&fill, o.frames, &idx) != o.frames)
		die("filling the fill ring", ENOSPC);
	for (i = 0; i < o.frames; i++)
		*xsk_ring_prod__fill_addr(&fill, idx + i) = (uint64_t)i * o.chunk;
	xsk_ring_prod__submit(&fill, o.frames);

	err = xsk_socket__update_xskmap(xsk, map_fd);
	if (err)
		die("registering in the XSKMAP", -err);
	printf("{\"ready\": true, \"mode\": \"%s\"}\n",
	       xo.flags & XDP_OPTIONS_ZEROCOPY ? "zerocopy" : "copy");
	fflush(stdout);

	struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
	while (got < o.count && !stop) {
		uint64_t left = o.count - got;
		uint32_t n = xsk_ring_cons__peek(&rx, left < BATCH ? left : BATCH, &idx), fidx;

		if (n) {
			if (!got) {
				t_first = now();
				first = n;
			}
			if (xsk_ring_prod__reserve(&fill, n, &fidx) != n)
				die("refilling the fill ring", ENOSPC); /* two slots per chunk: cannot */
			for (i = 0; i < n; i++) {
				const struct xdp_desc *d = xsk_ring_cons__rx_desc(&rx, idx + i);

				walk_datagram(&w, xsk_umem__get_data(area, d->addr), d->len);
				*xsk_ring_prod__fill_addr(&fill, fidx + i) = d->addr & chunk_mask;
			}
			xsk_ring_cons__release(&rx, n);
			xsk_ring_prod__submit(&fill, n);
			got += n;
			continue;
		}
		if (got != got_at_dry) {
			t_last = now();
			got_at_dry = got;
		}
		int ready = poll(pfd, done ? 1 : 2, o.idle_ms);

		if (ready < 0 && errno != EINTR)
			die("poll", errno);
		if (!done && ready > 0 && pfd[1].revents) {
			char buf[64];

			if (read(0, buf, sizeof(buf)) <= 0)
				done = 1; /* the sender is done */
		}
		if (ready == 0 && done)
			break;
	}
	if (got >= o.count)
		t_last = now();

	optlen = sizeof(st);
	if (getsockopt(fd, SOL_XDP, XDP_STATISTICS, &st, &optlen))
		die("getsockopt(XDP_STATISTICS)", errno);
	/* Out of the map first, so the program never redirects to a closed socket. */
	bpf_map_delete_elem(map_fd, &o.queue);

	double window = t_last - t_first;
	printf("{\"received\": %llu, \"counted\": %llu, \"window_s\": %.6f, \"fps\": %.1f, "
	       "\"frames_walked\": %llu, \"malformed\": %llu, \"checksum\": %llu, \"types\": {",
	       (unsigned long long)got, (unsigned long long)(got ? got - first : 0), window,
	       window > 0 ? (got - first) / window : 0.0, (unsigned long long)w.frames,
	       (unsigned long long)w.malformed, (unsigned long long)w.checksum);
	for (i = 0; i <= FRAME_TYPES; i++)
		printf("%s\"%s\": %llu", i ? ", " : "", type_names[i],
		       (unsigned long long)w.by_type[i]);
	printf("}, \"statistics\": {\"rx_dropped\": %llu, \"rx_invalid_descs\": %llu, "
	       "\"tx_invalid_descs\": %llu, \"rx_ring_full\": %llu, "
	       "\"rx_fill_ring_empty_descs\": %llu, \"tx_ring_empty_descs\": %llu}}\n",
	       (unsigned long long)st.rx_dropped, (unsigned long long)st.rx_invalid_descs,
	       (unsigned long long)st.tx_invalid_descs, (unsigned long long)st.rx_ring_full,
	       (unsigned long long)st.rx_fill_ring_empty_descs,
	       (unsigned long long)st.tx_ring_empty_descs);
	xsk_socket__delete(xsk);
	xsk_umem__delete(umem);
	munmap(area, size);
	close(map_fd);
	return 0;
}

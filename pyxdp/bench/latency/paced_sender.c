// SPDX-License-Identifier: Apache-2.0
/* The load of `zerolayer bench --section latency`: STREAMS UDP streams, each
 * sending RATE one-frame token datagrams a second for SECONDS, their phases
 * spread evenly (frame k of the run, of stream k % STREAMS, is due at
 * k / (STREAMS * RATE) seconds), each stamped with CLOCK_MONOTONIC just
 * before its own send.
 *
 * Why C: at 1,000 streams of 50 frames/s a frame is due every 20 us, and a
 * Python loop of sendto() cannot both keep that pace and stamp each frame
 * at its own send; a batched send would stamp a batch once and turn the
 * even load into bursts.
 *
 * Each stream is a UDP socket of its own (its own source port, a flow of
 * its own), bound to SRC and connected to DST:PORT. The sender sleeps until
 * a frame is due (timer slack 1 ns); one due while it slept late is sent at
 * once, stamped when it is sent, so the stamp is always the send's own time
 * and the lateness says how well the pace was kept.
 *
 * A datagram is one TOKEN frame (docs/spec.md section 1.1): the 5-byte
 * header, then 16 payload bytes, big-endian: the stamp (u64 ns), the
 * stream (u32), the stream's frame number (u32).
 *
 * stdout, at the end: one JSON object, what was sent and how late.
 * Built at bench time by pyxdp.bench.latency.sender:
 *   cc -O2 -Wall -o paced_sender paced_sender.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME_HDR_LEN 5
#define TOKEN 2
#define PAYLOAD_LEN 16
#define DATAGRAM_LEN (FRAME_HDR_LEN + PAYLOAD_LEN)

static void die(const char *what, int err)
{
	fprintf(stderr, "paced_sender: %s: %s\n", what, strerror(err));
	exit(1);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, v >> 32);
	put_be32(p + 4, (uint32_t)v);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest rank, as pyxdp.bench.latency.stats.percentiles. */
static double rank_us(const int64_t *sorted, long n, double q)
{
	double rank = q * n - 1e-9; /* 0.99 * 100 is 99.00000000000001 */
	long i = (long)rank;

	if (i < rank)
		i++; /* the ceiling, without libm */
	if (i < 1)
		i = 1;
	return sorted[(i > n ? n : i) - 1] / 1000.0;
}

static int stream_socket(const struct sockaddr_in *src, const struct sockaddr_in *dst)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	if (fd < 0)
		die("socket", errno);
	if (bind(fd, (const struct sockaddr *)src, sizeof(*src)))
		die("bind", errno);
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)))
		die("connect", errno);
	return fd;
}

int main(int argc, char **argv)
{
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	long streams = 1, rate = 50, cpu = -1;
	double seconds = 1.0;
	static const struct option opts[] = {
		{ "src", required_argument, 0, 's' },	  { "dst", required_argument, 0, 'd' },
		{ "port", required_argument, 0, 'p' },	  { "streams", required_argument, 0, 'n' },
		{ "rate", required_argument, 0, 'r' },	  { "seconds", required_argument, 0, 't' },
		{ "cpu", required_argument, 0, 'c' },	  { 0, 0, 0, 0 },
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			if (inet_pton(AF_INET, optarg, &src.sin_addr) != 1)
				die("--src", EINVAL);
			break;
		case 'd':
			if (inet_pton(AF_INET, optarg, &dst.sin_addr) != 1)
				die("--dst", EINVAL);
			break;
		case 'p':
			dst.sin_port = htons(atoi(optarg));
			break;
		case 'n':
			streams = atol(optarg);
			break;
		case 'r':
			rate = atol(optarg);
			break;
		case 't':
			seconds = atof(optarg);
			break;
		case 'c':
			cpu = atol(optarg);
			break;
		default:
			die("usage", EINVAL);
		}
	}
	if (streams < 1 || rate < 1 || seconds <= 0 || !dst.sin_port)
		die("usage", EINVAL);

	if (cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			die("sched_setaffinity", errno);
	}
	/* 1,000 streams need more than the usual 1,024 descriptors' headroom */
	struct rlimit lim;

	rlim_t need = streams + 64;

	if (!getrlimit(RLIMIT_NOFILE, &lim) && lim.rlim_cur < need) {
		lim.rlim_cur = need;
		if (lim.rlim_max < need)
			lim.rlim_max = need;
		if (setrlimit(RLIMIT_NOFILE, &lim))
			die("setrlimit", errno);
	}
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake when due, not up to 50 us after */

	int *fds = calloc(streams, sizeof(*fds));
	uint32_t *seq = calloc(streams, sizeof(*seq));
	long total = (long)(seconds * rate) * streams;
	int64_t *late = calloc(total, sizeof(*late));

	if (!fds || !seq || !late)
		die("calloc", ENOMEM);
	for (long i = 0; i < streams; i++)
		fds[i] = stream_socket(&src, &dst);

	uint8_t dgram[DATAGRAM_LEN];
	long sent = 0, errors = 0;
	int64_t period = 1000000000LL / (streams * rate), start = now_ns() + 1000000;

	put_be32(dgram, PAYLOAD_LEN);
	dgram[4] = TOKEN;
	for (long k = 0; k < total; k++) {
		int64_t due = start + k * period, t = now_ns();

		if (t < due) {
			struct timespec ts = { .tv_sec = due / 1000000000LL,
					       .tv_nsec = due % 1000000000LL };

			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		long s = k % streams;

		t = now_ns();
		put_be64(dgram + FRAME_HDR_LEN, (uint64_t)t);
		put_be32(dgram + FRAME_HDR_LEN + 8, (uint32_t)s);
		put_be32(dgram + FRAME_HDR_LEN + 12, seq[s]);
		if (send(fds[s], dgram, sizeof(dgram), 0) == (ssize_t)sizeof(dgram)) {
			late[sent++] = t > due ? t - due : 0;
			seq[s]++;
		} else {
			errors++;
		}
	}
	int64_t end = now_ns();

	qsort(late, sent, sizeof(*late), cmp_i64);
	printf("{\"sent\": %ld, \"send_errors\": %ld, \"seconds\": %.6f, "
	       "\"frames_per_s\": %.1f, \"late_p50_us\": %.1f, \"late_p99_us\": %.1f, "
	       "\"late_max_us\": %.1f}\n",
	       sent, errors, (end - start) / 1e9, sent / ((end - start) / 1e9),
	       sent ? rank_us(late, sent, 0.5) : 0.0, sent ? rank_us(late, sent, 0.99) : 0.0,
	       sent ? late[sent - 1] / 1000.0 : 0.0);
	return 0;
}

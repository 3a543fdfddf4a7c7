// SPDX-License-Identifier: Apache-2.0
/* A plain TCP relay, the floor zerolayer's relays are benchmarked against
 * (pyxdp/bench/relay/peers.py compiles it at bench time).
 *
 * Each accepted client gets its own connection to the upstream; bytes move
 * both ways with splice(2) through one pipe per direction, so they never
 * enter this process. One thread, level-triggered epoll. It knows nothing of
 * frames: it cannot cut a stream at a frame boundary or count a malformed one.
 *
 * usage: splice_relay LISTEN_PORT UPSTREAM_PORT (both on 127.0.0.1; 0 picks
 * a free listening port). Prints the listening port on stdout, then serves
 * until killed; it dies with its parent.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (1 << 16)

struct conn;

/* One direction: bytes read from `from` wait in `pipe` until `to` takes them. */
struct half {
	int from, to;
	int pipe[2];
	size_t queued;
	int eof;  /* `from` sent its FIN */
	int done; /* ... and everything before it went out, FIN passed on */
};

/* epoll's data for one socket of a connection. */
struct end {
	struct conn *conn;
	int side; /* 0 client, 1 upstream */
};

struct conn {
	struct conn *next_dead; /* closed, freed after the epoll batch in hand */
	int dead;
	int fd[2];
	struct half half[2]; /* half[i] reads fd[i], writes fd[1 - i] */
	struct end end[2];
};

static int epfd;
static struct conn *dead;
static struct sockaddr_in upstream;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Closed now, freed later: events of the batch in hand may still name it. */
static void close_conn(struct conn *c)
{
	for (int i = 0; i < 2; i++) {
		close(c->fd[i]); /* also leaves the epoll set */
		close(c->half[i].pipe[0]);
		close(c->half[i].pipe[1]);
	}
	c->dead = 1;
	c->next_dead = dead;
	dead = c;
}

/* Moves what can be moved now; -1 when the connection failed. */
static int pump(struct half *h)
{
	for (;;) {
		if (!h->queued && !h->eof) {
			ssize_t n = splice(h->from, NULL, h->pipe[1], NULL, CHUNK,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n == 0)
				h->eof = 1;
			else if (n > 0)
				h->queued = n;
			else if (errno == EAGAIN)
				return 0;
			else
				return -1;
		}
		if (h->queued) {
			ssize_t n = splice(h->pipe[0], NULL, h->to, NULL, h->queued,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0)
				return errno == EAGAIN ? 0 : -1;
			h->queued -= n;
			continue;
		}
		if (h->eof && !h->done) {
			shutdown(h->to, SHUT_WR);
			h->done = 1;
		}
		return 0;
	}
}

/* Each socket waits to read while its direction can take more, and to write
 * while the other direction has bytes stuck in its pipe. */
static void rearm(struct conn *c)
{
	for (int i = 0; i < 2; i++) {
		struct epoll_event ev = {.data.ptr = &c->end[i]};

		if (!c->half[i].eof && !c->half[i].queued)
			ev.events |= EPOLLIN;
		if (c->half[1 - i].queued)
			ev.events |= EPOLLOUT;
		epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd[i], &ev);
	}
}

static void on_event(struct end *e)
{
	struct conn *c = e->conn;

	if (c->dead)
		return;
	if (pump(&c->half[e->side]) || pump(&c->half[1 - e->side]) ||
	    (c->half[0].done && c->half[1].done)) {
		close_conn(c);
		return;
	}
	rearm(c);
}

static void on_accept(int lst)
{
	for (;;) {
		int client = accept4(lst, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int up;
		struct conn *c;

		if (client < 0)
			return;
		/* Loopback: the connect completes at once, so it may block. */
		up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		c = calloc(1, sizeof(*c));
		if (up < 0 || !c || connect(up, (struct sockaddr *)&upstream, sizeof(upstream)) ||
		    pipe2(c->half[0].pipe, O_NONBLOCK | O_CLOEXEC) ||
		    pipe2(c->half[1].pipe, O_NONBLOCK | O_CLOEXEC)) {
			perror("splice_relay: a connection failed");
			exit(1); /* a bench run must not go on short of a stream */
		}
		fcntl(up, F_SETFL, O_NONBLOCK);
		nodelay(client);
		nodelay(up);
		c->fd[0] = client;
		c->fd[1] = up;
		for (int i = 0; i < 2; i++) {
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->end[i]};

			c->half[i].from = c->fd[i];
			c->half[i].to = c->fd[1 - i];
			c->end[i].conn = c;
			c->end[i].side = i;
			if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd[i], &ev))
				die("epoll_ctl");
		}
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t len = sizeof(addr);
	struct epoll_event ev = {.events = EPOLLIN};
	struct rlimit lim;
	int lst, one = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: splice_relay LISTEN_PORT UPSTREAM_PORT\n");
		return 2;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Six fds a connection: room for the bench's largest stream count. */
	if (!getrlimit(RLIMIT_NOFILE, &lim)) {
		lim.rlim_cur = lim.rlim_max;
		setrlimit(RLIMIT_NOFILE, &lim);
	}
	upstream.sin_family = AF_INET;
	upstream.sin_port = htons(atoi(argv[2]));
	upstream.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	addr.sin_port = htons(atoi(argv[1]));
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lst = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lst < 0)
		die("socket");
	setsockopt(lst, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lst, (struct sockaddr *)&addr, sizeof(addr)) || listen(lst, 4096) ||
	    getsockname(lst, (struct sockaddr *)&addr, &len))
		die("listen");
	epfd = epoll_create1(EPOLL_CLOEXEC);
	ev.data.ptr = NULL; /* the listener */
	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lst, &ev))
		die("epoll");
	printf("%d\n", ntohs(addr.sin_port));
	fflush(stdout);
	for (;;) {
		struct epoll_event evs[64];
		int n = epoll_wait(epfd, evs, 64, -1);

		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr)
				on_event(evs[i].data.ptr);
			else
				on_accept(lst);
		}
		while (dead) {
			struct conn *c = dead;

			dead = c->next_dead;
			free(c);
		}
	}
}

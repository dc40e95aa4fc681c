/* TCP streams: the cluster secret, listening, accepting (with the refusal
 * log), connecting, and a client's whole way in (connect, then the TLS
 * handshake of tls.c); see net.h. */
#include "net/net.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int sh_secret_load(unsigned char *buf, size_t *len, char *why, size_t whylen)
{
	const char *file = getenv("SHOAL_SECRET_FILE"), *val = getenv("SHOAL_SECRET");
	if (file && *file) {
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0) {
			int rc = shoal_errno();
			snprintf(why, whylen, "secret file %s: %s", file, strerror(errno));
			if (fd >= 0)
				close(fd);
			return rc;
		}
		if (st.st_mode & 0077)
			sh_warn("net", "secret file %s can be read by others (mode %03o)", file,
				(unsigned)(st.st_mode & 0777));
		ssize_t n = read(fd, buf, SH_SECRET_MAX);
		close(fd);
		if (n < 0)
			return shoal_errno();
		*len = (size_t)n;
		while (*len && (buf[*len - 1] == '\n' || buf[*len - 1] == '\r'))
			(*len)--;
	} else if (val && *val) {
		*len = strlen(val) < SH_SECRET_MAX ? strlen(val) : SH_SECRET_MAX;
		memcpy(buf, val, *len);
	} else {
		snprintf(why, whylen, "no secret: set SHOAL_SECRET_FILE (a file) or SHOAL_SECRET");
		return SHOAL_ENOENT;
	}
	if (*len < 16) {
		snprintf(why, whylen, "the secret has %zu bytes; at least 16 are expected", *len);
		return SHOAL_EINVAL;
	}
	return 0;
}

static int split(const char *hostport, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon = strrchr(hostport, ':');
	if (!colon || (size_t)(colon - hostport) >= hl || strlen(colon + 1) >= pl || !colon[1])
		return SHOAL_EINVAL;
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = 0;
	strcpy(port, colon + 1);
	return 0;
}

int sh_tcp_listen(const char *hostport, int *fd, char *bound, size_t boundlen, char *why,
		  size_t whylen)
{
	char host[256], port[32];
	if (split(hostport, host, sizeof(host), port, sizeof(port))) {
		snprintf(why, whylen, "'%s': expected HOST:PORT", hostport);
		return SHOAL_EINVAL;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE},
			*res;
	int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (g) {
		snprintf(why, whylen, "%s: %s", hostport, gai_strerror(g));
		return SHOAL_EINVAL;
	}
	int rc = SHOAL_EIO;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		int one = 1;
		if (s < 0)
			continue;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 128) == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			char h[128], p[16];
			getsockname(s, (struct sockaddr *)&ss, &sl);
			getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
				    NI_NUMERICHOST | NI_NUMERICSERV);
			snprintf(bound, boundlen, "%s:%s", h, p);
			*fd = s;
			rc = 0;
			break;
		}
		rc = shoal_errno();
		snprintf(why, whylen, "%s: %s", hostport, strerror(errno));
		close(s);
	}
	freeaddrinfo(res);
	return rc;
}

int sh_tcp_accept(int lsock, const char *area, char *who, size_t wholen)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(lsock, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			/* the thread's other fibers first: a flood of connections
			 * that never lets accept wait would have this loop alone
			 * run (the local peers, and every link in progress,
			 * crowded out by strangers) */
			shoal_yield();
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			char host[64] = "?", port[16] = "?";
			getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port,
				    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
			snprintf(who, wholen, "%s:%s", host, port);
			return fd;
		}
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) {
			if (shoal_fd_wait(lsock, SHOAL_FD_IN, SHOAL_FOREVER, NULL) ==
			    SHOAL_ECANCELED)
				return SHOAL_ECANCELED;
			continue;
		}
		/* out of descriptors or memory: it passes */
		sh_warn(area, "accept (TCP): %s; retrying in 100 ms", strerror(errno));
		if (shoal_sleep_until(shoal_deadline_in(100000000)) == SHOAL_ECANCELED)
			return SHOAL_ECANCELED;
	}
}

void sh_refused(sh_refusals *r, const char *area, const char *who, const char *how, const char *why)
{
	int64_t now = shoal_now_ns();
	if (now - r->since >= SH_REFUSALS_WINDOW_NS) {
		if (r->n > SH_REFUSALS_TOLD)
			sh_warn(area,
				"refused %llu more peers in the 10 s before (%d a 10 s are told "
				"one by one)",
				(unsigned long long)(r->n - SH_REFUSALS_TOLD), SH_REFUSALS_TOLD);
		r->since = now;
		r->n = 0;
	}
	if (++r->n <= SH_REFUSALS_TOLD)
		sh_warn(area, "refused %s%s: %s", who, how, why);
}

int sh_net_wait(int fd, unsigned ev, bool fiber, int64_t deadline)
{
	if (fiber)
		return shoal_fd_wait(fd, ev, deadline, NULL);
	for (;;) {
		int ms = -1;
		if (deadline != SHOAL_FOREVER) {
			int64_t left = deadline - shoal_now_ns();
			if (left <= 0)
				return SHOAL_ETIMEDOUT;
			ms = left / 1000000 + 1 > 3600000 ? 3600000 : (int)(left / 1000000 + 1);
		}
		struct pollfd p = {.fd = fd, .events = ev == SHOAL_FD_OUT ? POLLOUT : POLLIN};
		int r = poll(&p, 1, ms);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return shoal_errno();
	}
}

/* connect() that gives up at deadline. */
static int connect_until(int s, const struct sockaddr *a, socklen_t al, int64_t deadline)
{
	int fl = fcntl(s, F_GETFL);
	if (fl < 0 || fcntl(s, F_SETFL, fl | O_NONBLOCK) != 0)
		return shoal_errno();
	int rc = 0;
	if (connect(s, a, al) != 0) {
		if (errno != EINPROGRESS)
			return shoal_errno();
		int err = 0;
		socklen_t el = sizeof(err);
		if ((rc = sh_net_wait(s, SHOAL_FD_OUT, false, deadline)) == 0 &&
		    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err) {
			errno = err;
			rc = shoal_errno();
		}
	}
	if (rc == 0 && fcntl(s, F_SETFL, fl) != 0)
		rc = shoal_errno();
	return rc;
}

int sh_tcp_connect(const char *hostport, int *fd, int64_t deadline, char *why, size_t whylen)
{
	char host[256], port[32];
	if (split(hostport, host, sizeof(host), port, sizeof(port)) || !host[0]) {
		snprintf(why, whylen, "'%s': expected HOST:PORT", hostport);
		return SHOAL_EINVAL;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	int g = getaddrinfo(host, port, &hints, &res);
	if (g) {
		snprintf(why, whylen, "%s: %s", hostport, gai_strerror(g));
		return SHOAL_EINVAL;
	}
	int rc = SHOAL_ECONNREFUSED;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
		if (s < 0)
			continue;
		if ((rc = connect_until(s, a->ai_addr, a->ai_addrlen, deadline)) == 0) {
			int one = 1;
			setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			*fd = s;
			break;
		}
		snprintf(why, whylen, "connecting to %s: %s", hostport,
			 rc == SHOAL_ETIMEDOUT ? "no answer before the deadline"
					       : shoal_strerror(rc));
		close(s);
	}
	freeaddrinfo(res);
	return rc;
}

int sh_stream_write_part(int fd, const void *p, size_t n, size_t *done, bool wait)
{
	while (*done < n) {
		ssize_t k = send(fd, (const unsigned char *)p + *done, n - *done,
				 MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
		if (k > 0) {
			*done += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return SHOAL_EAGAIN;
		return k < 0 && (errno == EPIPE || errno == ECONNRESET) ? SHOAL_ECLOSED
									: shoal_errno();
	}
	return 0;
}

int sh_stream_write(int fd, const void *p, size_t n, bool fiber)
{
	size_t done = 0;
	for (;;) {
		int rc = sh_stream_write_part(fd, p, n, &done, !fiber);
		if (rc != SHOAL_EAGAIN || !fiber)
			return rc;
		if ((rc = shoal_fd_wait(fd, SHOAL_FD_OUT, SHOAL_FOREVER, NULL)) != 0)
			return rc;
	}
}

int sh_tcp_connect_auth(const char *hostport, uint32_t proto, int64_t deadline, int *fd,
			sh_channel **ch, char *why, size_t whylen)
{
	unsigned char key[SH_SECRET_MAX];
	char addr[300];
	size_t klen = 0;
	bool plain = false;
	*fd = -1;
	*ch = NULL;
	const char *q = strchr(hostport, '?');
	if (q && strcmp(q, "?encrypt=false") != 0 && strcmp(q, "?encrypt=true") != 0) {
		snprintf(why, whylen, "'%s': the only option after '?' is encrypt=true|false", q);
		return SHOAL_EINVAL;
	}
	plain = q && !strcmp(q, "?encrypt=false");
	size_t hl = q ? (size_t)(q - hostport) : strlen(hostport);
	if (hl >= sizeof(addr)) {
		snprintf(why, whylen, "'%s': too long for HOST:PORT", hostport);
		return SHOAL_EINVAL;
	}
	memcpy(addr, hostport, hl);
	addr[hl] = 0;
	int rc = sh_secret_load(key, &klen, why, whylen);
	if (rc == 0)
		rc = sh_tcp_open_auth(addr, key, klen, proto, plain, deadline, NULL, NULL, fd, ch,
				      why, whylen);
	explicit_bzero(key, sizeof(key));
	return rc;
}

int sh_tcp_open_auth(const char *addr, const void *key, size_t klen, uint32_t proto, bool plain,
		     int64_t deadline, void (*on_fd)(int fd, void *arg), void *arg, int *fd,
		     sh_channel **ch, char *why, size_t whylen)
{
	int64_t pause = 20 * 1000000LL;
	for (;;) {
		*fd = -1;
		*ch = NULL;
		int rc = sh_tcp_connect(addr, fd, deadline, why, whylen);
		if (rc)
			return rc;
		if (on_fd)
			on_fd(*fd, arg);
		rc = sh_auth_client(*fd, key, klen, proto, plain, deadline, ch, why, whylen);
		if (rc == 0)
			return 0;
		close(*fd);
		*fd = -1;
		if (on_fd)
			on_fd(-1, arg);
		if ((rc != SHOAL_ECLOSED && rc != SHOAL_ECONNRESET) ||
		    shoal_now_ns() + pause >= deadline)
			return rc;
		struct timespec t = {0, (long)pause};
		while (nanosleep(&t, &t) != 0 && errno == EINTR)
			;
		pause = pause * 2 < 500 * 1000000LL ? pause * 2 : 500 * 1000000LL;
	}
}

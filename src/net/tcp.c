/* TCP streams: listening and connecting, frames over a stream, and the
 * shared-secret handshake that opens the secure channel (see net.h). */
#include "net/net.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <unistd.h>

#define AUTH_MAGIC 0x31414853u /* "SHA1" */
#define AUTH_VERSION 2
#define AUTH_PLAIN 1u /* flag: this side may go without encryption */

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

void sh_tcp_refused(sh_refusals *r, const char *area, const char *who, const char *why)
{
	int64_t now = shoal_now_ns();
	if (now - r->since >= 1000000000LL) {
		if (r->n > 10)
			sh_warn(area, "refused %llu more TCP peers in the second before",
				(unsigned long long)(r->n - 10));
		r->since = now;
		r->n = 0;
	}
	if (++r->n <= 10)
		sh_warn(area, "refused %s over TCP: %s", who, why);
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

/* Exactly n bytes into p; SHOAL_ECLOSED when the stream ends first (at
 * once: *any stays false). */
static int read_full(int fd, unsigned char *p, size_t n, bool fiber, int64_t deadline, bool *any)
{
	while (n) {
		ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
		if (k > 0) {
			p += k, n -= (size_t)k;
			*any = true;
			continue;
		}
		if (k == 0)
			return SHOAL_ECLOSED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == ECONNRESET ? SHOAL_ECLOSED : shoal_errno();
		int rc = sh_net_wait(fd, SHOAL_FD_IN, fiber, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- the handshake ---- */

static int random_bytes(unsigned char *p, size_t n)
{
	while (n) {
		ssize_t k = getrandom(p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return shoal_errno();
		p += k, n -= (size_t)k;
	}
	return 0;
}

static void mac(const void *key, size_t klen, const char *label, const unsigned char *a,
		const unsigned char *b, const uint32_t *proto, unsigned char out[32])
{
	const void *parts[4] = {label, a, b, proto};
	size_t lens[4] = {strlen(label), 32, 32, 4};
	sh_hmac_sha256(key, klen, parts, lens, proto ? 4 : 3, out);
}

static bool same(const unsigned char *a, const unsigned char *b, size_t n)
{
	unsigned char d = 0; /* in constant time: no early exit to time */
	for (size_t i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

/* SHA-256 of the handshake's three messages, as this side saw them. */
static int transcript(const unsigned char *hello, size_t hl, const unsigned char *answer, size_t al,
		      const unsigned char *verdict, size_t vl, unsigned char out[32])
{
	sh_sha256 h;
	sh_sha256_init(&h);
	sh_sha256_update(&h, hello, hl);
	sh_sha256_update(&h, answer, al);
	sh_sha256_update(&h, verdict, vl);
	sh_sha256_final(&h, out);
	return 0;
}

#define HELLO_LEN 44
#define ANSWER_LEN 76
#define VERDICT_LEN 36

int sh_auth_server(int fd, const void *key, size_t klen, bool plain, uint32_t *proto,
		   sh_channel **ch, char *why, size_t whylen)
{
	unsigned char hello[HELLO_LEN], answer[ANSWER_LEN], verdict[VERDICT_LEN] = {0}, want[32];
	uint32_t magic = AUTH_MAGIC, version = AUTH_VERSION, flags = plain ? AUTH_PLAIN : 0, theirs;
	int64_t deadline = shoal_deadline_in(SH_AUTH_TIMEOUT_NS);
	*ch = NULL;
	memcpy(hello, &magic, 4);
	memcpy(hello + 4, &version, 4);
	memcpy(hello + 40, &flags, 4);
	int rc = random_bytes(hello + 8, 32);
	bool any = false;
	if (rc == 0)
		rc = sh_stream_write(fd, hello, sizeof(hello), true);
	if (rc == 0)
		rc = read_full(fd, answer, sizeof(answer), true, deadline, &any);
	if (rc) {
		snprintf(why, whylen, "no handshake: %s",
			 rc == SHOAL_ETIMEDOUT ? "nothing within 5 s" : shoal_strerror(rc));
		return rc;
	}
	memcpy(&magic, answer, 4);
	memcpy(proto, answer + 4, 4);
	memcpy(&theirs, answer + 40, 4);
	mac(key, klen, "shoal-client", hello + 8, answer + 8, proto, want);
	if (magic != AUTH_MAGIC || !same(want, answer + 44, 32)) {
		uint32_t no = 1;
		memcpy(verdict, &no, 4);
		sh_stream_write(fd, verdict, sizeof(verdict), true);
		snprintf(why, whylen, "%s",
			 magic != AUTH_MAGIC ? "not a shoal peer" : "wrong secret");
		return SHOAL_EACCES;
	}
	mac(key, klen, "shoal-server", answer + 8, hello + 8, NULL, verdict + 4);
	unsigned char th[32];
	bool encrypt = !(plain && (theirs & AUTH_PLAIN));
	if ((rc = sh_stream_write(fd, verdict, sizeof(verdict), true)) != 0 ||
	    (rc = transcript(hello, sizeof(hello), answer, sizeof(answer), verdict, sizeof(verdict),
			     th)) != 0 ||
	    (rc = sh_channel_open(ch, fd, key, klen, th, true, encrypt)) != 0)
		snprintf(why, whylen, "handshake: %s", shoal_strerror(rc));
	return rc;
}

int sh_auth_client(int fd, const void *key, size_t klen, uint32_t proto, bool plain,
		   int64_t deadline, sh_channel **ch, char *why, size_t whylen)
{
	unsigned char hello[HELLO_LEN], answer[ANSWER_LEN], verdict[VERDICT_LEN], want[32];
	bool any = false;
	*ch = NULL;
	int rc = read_full(fd, hello, sizeof(hello), false, deadline, &any);
	uint32_t magic, version, flags = plain ? AUTH_PLAIN : 0, theirs;
	if (rc) {
		snprintf(why, whylen, "no handshake from the server: %s",
			 rc == SHOAL_ETIMEDOUT ? "it said nothing before the deadline"
					       : shoal_strerror(rc));
		return rc;
	}
	memcpy(&magic, hello, 4);
	memcpy(&version, hello + 4, 4);
	memcpy(&theirs, hello + 40, 4);
	if (magic != AUTH_MAGIC || version != AUTH_VERSION) {
		snprintf(why, whylen, "the server is not a shoal peer of version %d", AUTH_VERSION);
		return SHOAL_EPROTO;
	}
	memcpy(answer, &magic, 4);
	memcpy(answer + 4, &proto, 4);
	memcpy(answer + 40, &flags, 4);
	if ((rc = random_bytes(answer + 8, 32)) != 0)
		return rc;
	mac(key, klen, "shoal-client", hello + 8, answer + 8, &proto, answer + 44);
	if ((rc = sh_stream_write(fd, answer, sizeof(answer), false)) != 0 ||
	    (rc = read_full(fd, verdict, sizeof(verdict), false, deadline, &any)) != 0) {
		snprintf(why, whylen, "handshake: %s",
			 rc == SHOAL_ETIMEDOUT ? "no verdict from the server before the deadline"
					       : shoal_strerror(rc));
		return rc == SHOAL_ECLOSED ? SHOAL_EACCES : rc;
	}
	uint32_t status;
	memcpy(&status, verdict, 4);
	mac(key, klen, "shoal-server", answer + 8, hello + 8, NULL, want);
	if (status != 0) {
		snprintf(why, whylen, "the server refused us: wrong secret");
		return SHOAL_EACCES;
	}
	if (!same(want, verdict + 4, 32)) {
		snprintf(why, whylen, "the server does not know the secret");
		return SHOAL_EACCES;
	}
	unsigned char th[32];
	bool encrypt = !(plain && (theirs & AUTH_PLAIN));
	if ((rc = transcript(hello, sizeof(hello), answer, sizeof(answer), verdict, sizeof(verdict),
			     th)) != 0 ||
	    (rc = sh_channel_open(ch, fd, key, klen, th, false, encrypt)) != 0)
		snprintf(why, whylen, "handshake: %s", shoal_strerror(rc));
	return rc;
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
	if (rc == 0 && (rc = sh_tcp_connect(addr, fd, deadline, why, whylen)) == 0 &&
	    (rc = sh_auth_client(*fd, key, klen, proto, plain, deadline, ch, why, whylen)) != 0) {
		close(*fd);
		*fd = -1;
	}
	explicit_bzero(key, sizeof(key));
	return rc;
}

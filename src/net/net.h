/* net: TCP for peers on other hosts (task engines and clients now, peer
 * daemons later). Listening and connecting; whole frames (wire.h headers)
 * over a stream, from a fiber (non-blocking, waiting in the poller) or
 * from a thread; and the shared-secret handshake that every TCP path goes
 * through before a byte of protocol: a peer that does not know the
 * secret can neither submit nor run anything.
 *
 * Handshake (K the secret, Ns and Nc 32 random bytes of each side):
 *   server -> client  "SHA1", version, Ns
 *   client -> server  "SHA1", proto, Nc, HMAC-SHA256(K, "shoal-client" Ns Nc proto)
 *   server -> client  0 and HMAC-SHA256(K, "shoal-server" Nc Ns), or 1 and zeros
 * so each side proves it knows K without sending it, and a recorded
 * exchange cannot be replayed (fresh nonces). The link is not encrypted:
 * that is for a tunnel or a later TLS layer. */
#ifndef SHOAL_NET_NET_H
#define SHOAL_NET_NET_H

#include "ring/msg.h"
#include "shoal_impl.h"

typedef struct sh_sha256 {
	uint32_t h[8];
	uint64_t len;
	unsigned char buf[64];
	size_t used;
} sh_sha256;

void sh_sha256_init(sh_sha256 *s);
void sh_sha256_update(sh_sha256 *s, const void *data, size_t n);
void sh_sha256_final(sh_sha256 *s, unsigned char out[32]);
/* HMAC-SHA256 of the concatenation of nparts parts. */
void sh_hmac_sha256(const void *key, size_t klen, const void *const *parts, const size_t *lens,
		    int nparts, unsigned char out[32]);

#define SH_SECRET_MAX 4096

/* The shared secret: the file named by $SHOAL_SECRET_FILE, else the
 * value of $SHOAL_SECRET; at least 16 bytes. SHOAL_ENOENT when neither is
 * set; why says what is wrong. */
int sh_secret_load(unsigned char *buf, size_t *len, char *why, size_t whylen);

/* A listening TCP socket (non-blocking) on "HOST:PORT" (HOST may be empty:
 * all addresses; PORT 0: any); bound gets "HOST:PORT" as bound. */
int sh_tcp_listen(const char *hostport, int *fd, char *bound, size_t boundlen, char *why,
		  size_t whylen);
/* A connected, blocking TCP socket to "HOST:PORT", TCP_NODELAY. */
int sh_tcp_connect(const char *hostport, int *fd, char *why, size_t whylen);

/* All n bytes of p to fd. fiber: fd is non-blocking and the caller a
 * fiber (waits in the poller); else fd blocks. */
int sh_stream_write(int fd, const void *p, size_t n, bool fiber);
/* The same in steps: from *done on, which it advances; without wait,
 * SHOAL_EAGAIN once the socket takes no more (the caller comes back). */
int sh_stream_write_part(int fd, const void *p, size_t n, size_t *done, bool wait);
/* The parts, in order, with as few system calls as the kernel allows. */
int sh_stream_writev(int fd, const sh_msg_part *parts, size_t n, bool fiber);
/* Exactly n bytes from fd into p; SHOAL_ECLOSED when the stream ends
 * first. */
int sh_stream_read(int fd, void *p, size_t n, bool fiber);
/* Writes head, then n bytes from the stream from, then tail, to the
 * stream to, through a pipe (pipefd, empty): the n bytes never enter this
 * process (the kernel hands their pages on). Both sockets non-blocking,
 * the caller a fiber; *taken counts the bytes read from from. On an error
 * *failed says whose: 1 from (then head and the *taken bytes are through,
 * and the tail is not), 2 to (the pipe may then hold bytes: close it). */
int sh_stream_splice(int from, int to, const int pipefd[2], const void *head, size_t hlen,
		     uint64_t n, const void *tail, size_t tlen, uint64_t *taken, int *failed);
/* One frame (header and body) from fd into *buf (grown as needed), at
 * most max bytes, until deadline (SHOAL_ETIMEDOUT; a thread: polled).
 * SHOAL_ECLOSED at a clean end between frames. */
int sh_stream_read_frame(int fd, unsigned char **buf, size_t *cap, size_t *len, size_t max,
			 bool fiber, int64_t deadline);

/* The handshake. Server: a fiber on a non-blocking fd; *proto gets what
 * the client says it is. Client: a thread on a blocking fd. Either side
 * fails with SHOAL_EACCES when the other does not know the secret, and
 * why says so. */
int sh_auth_server(int fd, const void *key, size_t klen, uint32_t *proto, char *why, size_t whylen);
int sh_auth_client(int fd, const void *key, size_t klen, uint32_t proto, char *why, size_t whylen);
/* A client's whole way in: the secret from the environment
 * (sh_secret_load), a connection to "HOST:PORT" and the handshake as
 * proto. *fd is -1 on failure. */
int sh_tcp_connect_auth(const char *hostport, uint32_t proto, int *fd, char *why, size_t whylen);

#endif

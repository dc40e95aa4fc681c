/* net: TCP for peers on other hosts (the task farm's engines and clients,
 * stores fetching objects from each other). Listening and connecting;
 * whole frames (wire.h headers) over a stream, from a fiber (non-blocking,
 * waiting in the poller) or from a thread; the shared-secret handshake
 * that every TCP path goes through before a byte of protocol (a peer that
 * does not know the secret can neither submit, run nor fetch anything);
 * and the secure channel every byte after it travels in.
 *
 * Handshake (K the secret, Ns and Nc 32 random bytes of each side, Fs and
 * Fc 4 bytes of flags: bit 0, "this side may go without encryption"):
 *   server -> client  "SHA1", version, Ns, Fs
 *   client -> server  "SHA1", proto, Nc, Fc, HMAC-SHA256(K, "shoal-client" Ns Nc proto)
 *   server -> client  0 and HMAC-SHA256(K, "shoal-server" Nc Ns), or 1 and zeros
 * so each side proves it knows K without sending it, and a recorded
 * exchange cannot be replayed (fresh nonces).
 *
 * Channel (channel.c): then both sides derive, with HKDF-SHA256 keyed by K
 * and salted with SHA-256 of the three messages as sent and received, an
 * AES-256-GCM key and IV per direction, and every byte goes in records
 * laid out as TLS 1.3's (a 5-byte header as additional data, the
 * plaintext and a type byte, a 16-byte tag; the nonce is the IV xor the
 * record's number). A changed, dropped, replayed, reordered or spliced
 * record, or a changed handshake (the keys then differ), fails the
 * record's tag: the channel is over (SHOAL_EBADMSG, sh_channel_error says
 * what). The records are encrypted unless BOTH sides were told that the
 * network is trusted (Fs and Fc bit 0); then they travel in clear, each
 * still authenticated (GMAC: the same AEAD over no ciphertext). Since the
 * records are TLS 1.3's byte for byte, kernel TLS (TCP_ULP "tls",
 * TLS_TX/TLS_RX with tls12_crypto_info_aes_gcm_256: the key, the IV split
 * into salt and iv, rec_seq 0) could take a channel over where the kernel
 * has it; this one has not (no CONFIG_TLS), so records are sealed in user
 * space, 16 of them a system call. */
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
/* A connected, blocking TCP socket to "HOST:PORT", TCP_NODELAY; blocks
 * until deadline at most (SHOAL_ETIMEDOUT). */
int sh_tcp_connect(const char *hostport, int *fd, int64_t deadline, char *why, size_t whylen);

/* The next connection on the listening lsock, from a fiber: its
 * descriptor (non-blocking, TCP_NODELAY), and who it is ("HOST:PORT").
 * Waits in the poller; a transient failure (out of descriptors) is logged
 * under area and tried again every 100 ms. SHOAL_ECANCELED when the fiber
 * is cancelled. */
int sh_tcp_accept(int lsock, const char *area, char *who, size_t wholen);
/* A peer refused, logged under area: past 10 in a second, the rest of that
 * second's are counted and said in one line (a flood of strangers must not
 * flood the log). */
typedef struct sh_refusals {
	int64_t since; /* when the current second of refusals began */
	uint64_t n;    /* in it */
} sh_refusals;
void sh_tcp_refused(sh_refusals *r, const char *area, const char *who, const char *why);

/* Waits until fd is ready for ev (SHOAL_FD_IN or SHOAL_FD_OUT) or
 * deadline: in the poller (fiber) or in poll (a thread). */
int sh_net_wait(int fd, unsigned ev, bool fiber, int64_t deadline);

/* All n bytes of p to fd, in clear: the handshake's own messages only
 * (everything after goes through a channel). fiber: fd is non-blocking
 * and the caller a fiber (waits in the poller); else fd blocks. */
int sh_stream_write(int fd, const void *p, size_t n, bool fiber);
/* The same in steps: from *done on, which it advances; without wait,
 * SHOAL_EAGAIN once the socket takes no more (the caller comes back). */
int sh_stream_write_part(int fd, const void *p, size_t n, size_t *done, bool wait);
/* A frame's header on a stream (wire.h): its length, and where the
 * body's length lies in it. */
#define SH_STREAM_FRAME_HDR 24
#define SH_STREAM_FRAME_LEN_AT 20

/* ---- the secure channel (channel.c) ---- */

typedef struct sh_channel sh_channel;
/* The most plaintext in one record (TLS's limit). */
#define SH_CHANNEL_RECORD 16384

/* A channel on the connected socket fd (which stays the caller's), after a
 * handshake whose hash is transcript; server: which side this is. */
int sh_channel_open(sh_channel **out, int fd, const void *key, size_t klen,
		    const unsigned char transcript[32], bool server, bool encrypt);
void sh_channel_free(sh_channel *ch);
/* Bounds every wait once bytes are on the move (writing, or reading past
 * a message's first byte) to ns without progress: a peer that stops
 * taking or sending mid-way is SHOAL_ETIMEDOUT. 0 (the default): only the
 * callers' deadlines. */
void sh_channel_set_stall(sh_channel *ch, int64_t ns);
int sh_channel_fd(const sh_channel *ch);
bool sh_channel_encrypted(const sh_channel *ch);
/* Why the channel failed (a record that failed its check), or "". */
const char *sh_channel_error(const sh_channel *ch);

/* fiber: the caller is
 * a fiber (waits in the poller), else a thread (waits in poll). A write
 * waits until deadline at most, and returns once the socket has every
 * record; its SHOAL_ETIMEDOUT leaves the channel in step (call again with
 * the same bytes to go on). A read's deadline bounds the wait for its
 * first byte: once bytes of a message came, the rest must (else the
 * stream is out of step and the channel fails). */
int sh_channel_write(sh_channel *ch, const void *p, size_t n, bool fiber, int64_t deadline);
int sh_channel_writev(sh_channel *ch, const sh_msg_part *parts, size_t n, bool fiber,
		      int64_t deadline);
/* In steps: from *done on, which it advances; without wait, SHOAL_EAGAIN
 * once the socket takes no more (the caller comes back with the same
 * bytes). */
int sh_channel_write_part(sh_channel *ch, const void *p, size_t n, size_t *done, bool wait,
			  bool fiber, int64_t deadline);
int sh_channel_writev_part(sh_channel *ch, const sh_msg_part *parts, size_t n, size_t *done,
			   bool wait, bool fiber, int64_t deadline);
/* Exactly n bytes; SHOAL_ECLOSED when the stream ends first (between
 * records), SHOAL_EBADMSG when a record fails its check. */
int sh_channel_read(sh_channel *ch, void *p, size_t n, bool fiber, int64_t deadline);
/* One frame (header and body) into *buf (grown as needed), at most max
 * bytes (SHOAL_EMSGSIZE); SHOAL_ECLOSED at a clean end between frames. */
int sh_channel_read_frame(sh_channel *ch, unsigned char **buf, size_t *cap, size_t *len, size_t max,
			  bool fiber, int64_t deadline);
/* The opened plaintext at hand (waiting for a record if none): *n bytes
 * at *p, valid until the next read; consume takes k of them. */
int sh_channel_peek(sh_channel *ch, const unsigned char **p, size_t *n, bool fiber,
		    int64_t deadline);
void sh_channel_consume(sh_channel *ch, size_t k);
/* Bulk bytes from and to files (a store's memfds), for a thread on a
 * blocking or non-blocking socket. send_fd: n bytes of fd at off, read by
 * the kernel straight into the records' slots and sealed there; flush:
 * and push every record into the socket before returning (else the last
 * ones may wait for the next write). recv_fd: n bytes into fd at off,
 * each record opened where it was received and written from there
 * (*got counts the bytes written as they are: another thread may watch).
 * Neither maps the file: on this kind of VM, user-space copies into or
 * out of a shared mapping cost several times the kernel's. deadline: the
 * whole transfer's; the stall bound (sh_channel_set_stall) applies too. */
int sh_channel_send_fd(sh_channel *ch, int fd, uint64_t off, uint64_t n, bool flush,
		       int64_t deadline);
int sh_channel_recv_fd(sh_channel *ch, int fd, uint64_t off, uint64_t n, int64_t deadline,
		       _Atomic uint64_t *got);
/* send_fd for bytes of several files (or places in one), one after
 * another, and every record pushed into the socket at the end. */
typedef struct sh_fd_piece {
	int fd;
	uint64_t off, len;
} sh_fd_piece;
int sh_channel_send_pieces(sh_channel *ch, const sh_fd_piece *p, size_t np, int64_t deadline);
/* recv_fd for several places in fd at once, in this order: the bytes of
 * a stream that fill them one after another. */
typedef struct sh_fd_range {
	uint64_t off, len;
} sh_fd_range;
int sh_channel_recv_ranges(sh_channel *ch, int fd, const sh_fd_range *r, size_t nr,
			   int64_t deadline, _Atomic uint64_t *got);
/* Pushes the records sealed so far into the socket (a thread's). */
int sh_channel_flush(sh_channel *ch, int64_t deadline);
/* Relays: head, n bytes read from from, tail, written to to.
 * Each record is opened and sealed again for to (the two links have their
 * own keys); a fiber. */
int sh_channel_relay(sh_channel *from, sh_channel *to, const void *head, size_t hlen, uint64_t n,
		     const void *tail, size_t tlen, uint64_t *taken, int *failed);
/* Opens the record rec of len bytes in place (the next one expected):
 * *plain bytes of plaintext at rec + 5. For the fuzzer. */
int sh_channel_open_record(sh_channel *ch, unsigned char *rec, size_t len, size_t *plain);

/* ---- the handshake ---- */

/* Where a handshake may take at most this long. */
#define SH_AUTH_TIMEOUT_NS 5000000000LL

/* Server: a fiber on a non-blocking fd, at most SH_AUTH_TIMEOUT_NS; *proto
 * gets what the client says it is. Client: a thread on a blocking fd,
 * until deadline. plain: this side may go without encryption (an
 * explicit option: a trusted network). Either side fails with SHOAL_EACCES
 * when the other does not know the secret, and why says so; on success
 * *ch is the channel for everything after. */
int sh_auth_server(int fd, const void *key, size_t klen, bool plain, uint32_t *proto,
		   sh_channel **ch, char *why, size_t whylen);
int sh_auth_client(int fd, const void *key, size_t klen, uint32_t proto, bool plain,
		   int64_t deadline, sh_channel **ch, char *why, size_t whylen);
/* A client's whole way in: the secret from the environment
 * (sh_secret_load), a connection to "HOST:PORT" and the handshake as
 * proto, until deadline. "HOST:PORT?encrypt=false" asks to go without
 * encryption (only if the server was told so too). *fd is -1 and *ch NULL
 * on failure. */
int sh_tcp_connect_auth(const char *hostport, uint32_t proto, int64_t deadline, int *fd,
			sh_channel **ch, char *why, size_t whylen);

#endif

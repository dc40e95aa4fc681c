/* net: TCP for peers on other hosts (task engines, clients, and stores
 * that fetch from one another). Listening and connecting; whole frames
 * (wire.h headers) over a stream, from a fiber (non-blocking, waiting in
 * the poller) or from a thread; the TLS 1.3 handshake that every TCP path
 * goes through before a byte of protocol (tls.c: libssl, with an external
 * PSK from the cluster secret, or certificates both ways: a peer that does
 * not know the secret can neither submit, run nor fetch anything); and the
 * secure channel every byte after it travels in.
 *
 * Channel (channel.c): TLS 1.3's record layer (RFC 8446 5) under the
 * traffic keys of that handshake, TLS_AES_128_GCM_SHA256: each record a
 * 5-byte header as additional data, the plaintext and its content type,
 * a 16-byte tag; the nonce is the IV xor the record's number. A changed,
 * dropped, replayed, reordered or spliced record fails its tag: the
 * channel is over (SHOAL_EBADMSG, sh_channel_error says what); a peer's
 * close_notify ends it cleanly (SHOAL_ECLOSED). The records are encrypted
 * unless BOTH sides were told that the network is trusted (ALPN
 * "shoal-clear/..."); then their plaintext travels in clear, each still
 * authenticated (GMAC: the same AEAD over no ciphertext). The channel
 * seals and opens records itself, in user space, 64 of them a system call
 * and in place where bytes come from or go to files (send_fd, recv_fd):
 * this kernel has no kernel TLS (no CONFIG_TLS), which could otherwise be
 * handed the same keys (TCP_ULP "tls"). */
#ifndef SHOAL_NET_NET_H
#define SHOAL_NET_NET_H

#include "shoal_impl.h"

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
/* A peer refused, logged under area: at most 10 lines every 10 s, each
 * with who and why; the rest of those 10 s are counted and said in one
 * line at the next refusal after them (a flood of strangers must not flood
 * the log). */
#define SH_REFUSALS_WINDOW_NS (10 * 1000000000LL)
#define SH_REFUSALS_TOLD 10
typedef struct sh_refusals {
	int64_t since; /* when the current 10 s of refusals began */
	uint64_t n;    /* in them */
} sh_refusals;
/* "refused WHO HOW: WHY" (how: " over TCP", or ""). */
void sh_refused(sh_refusals *r, const char *area, const char *who, const char *how,
		const char *why);

/* The handshakes in progress on a TCP listener: strangers until they
 * prove the secret, so their slots are bounded, in all (max) and from one
 * source address (per_source). When every slot is taken, the oldest
 * handshake whose peer has sent nothing (a silent one) gives its slot up
 * to the newcomer: its socket is shut down, which ends its handshake at
 * once. A fiber's listener's (one thread). */
typedef struct sh_hello {
	int fd;	       /* -1: free */
	int64_t since; /* accepted */
	char source[64];
} sh_hello;
typedef struct sh_hellos {
	uint32_t max, per_source, n;
	sh_hello *slots;
	uint64_t evicted; /* silent handshakes shut down for a newcomer */
} sh_hellos;
int sh_hellos_init(sh_hellos *h, uint32_t max, uint32_t per_source);
void sh_hellos_fini(sh_hellos *h);
/* A slot for fd, accepted from who ("HOST:PORT"): its index, or -1 with
 * why (the caller closes fd and says so). */
int sh_hellos_take(sh_hellos *h, int fd, const char *who, char *why, size_t whylen);
/* The handshake in slot i is over (proved, or failed). */
void sh_hellos_drop(sh_hellos *h, int i);

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

/* The keys of one link's records (TLS_AES_128_GCM_SHA256): what this side
 * seals with, what it opens with. */
typedef struct sh_channel_keys {
	unsigned char tx_key[16], tx_iv[12], rx_key[16], rx_iv[12];
} sh_channel_keys;

/* A channel on the connected socket fd (which stays the caller's), under
 * the keys of its handshake (tls.c). encrypt: else in clear, authenticated. */
int sh_channel_open(sh_channel **out, int fd, const sh_channel_keys *k, bool encrypt);
void sh_channel_free(sh_channel *ch);
/* Bounds every wait once bytes are on the move (writing, or reading past
 * a message's first byte) to ns without progress: a peer that stops
 * taking or sending mid-way is SHOAL_ETIMEDOUT. 0 (the default): only the
 * callers' deadlines. */
void sh_channel_set_stall(sh_channel *ch, int64_t ns);
/* From now on, a read that waits for the peer with bytes on the move fails
 * (SHOAL_ETIMEDOUT, sh_channel_error says so) when the peer sent fewer than
 * bytes_per_s a second over a window of window_ns: a peer trickling a few
 * bytes a second cannot hold what the reader set aside for it. 0: none. */
void sh_channel_set_min_rate(sh_channel *ch, uint64_t bytes_per_s, int64_t window_ns);
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
/* Whether bytes wait on the channel now, beyond what was read: opened or
 * received and not taken, or in the socket (without waiting). A peer's
 * stream that should be over (a transfer's last byte read) must have
 * none. */
bool sh_channel_pending(sh_channel *ch);
/* The opened plaintext at hand (waiting for a record if none): *n bytes
 * at *p, valid until the next read; consume takes k of them. */
int sh_channel_peek(sh_channel *ch, const unsigned char **p, size_t *n, bool fiber,
		    int64_t deadline);
void sh_channel_consume(sh_channel *ch, size_t k);
/* Bulk bytes, for a thread on a blocking or non-blocking socket: the
 * parts' bytes one after another, every record pushed into the socket
 * before it returns. A part is memory (p: a mapping of an object's,
 * read-only is enough), read where it lies: in clear each record's header
 * and tag go around the bytes in one sendmsg, so the kernel's copy into
 * the socket is the only one; encrypted, the cipher reads them where they
 * are. Or it is len bytes of fd at off (p NULL), read by the kernel
 * straight into the records' places and sealed there: on a VM whose
 * page tables the host shadows, a process's first touch of each 4 KiB
 * page of a mapping costs a microsecond (0.3 s a GiB), three times the
 * kernel's copy, so a file on 4 KiB pages goes this way and one on huge
 * pages is mapped. Records are cut at SH_CHANNEL_RECORD bytes and at each
 * part's end, so a receiver that knows the parts' sizes knows where each
 * record begins. deadline: the whole transfer's; the stall bound
 * (sh_channel_set_stall) applies too. */
typedef struct sh_bulk_part {
	const void *p;
	int fd;
	uint64_t off, len;
} sh_bulk_part;
int sh_channel_send_bulk(sh_channel *ch, const sh_bulk_part *parts, size_t np, int64_t deadline);
/* The bytes of a stream sent so, received into places of fd in this
 * order, one range after another (*got counts the bytes written as they
 * are: another thread may watch). With map (fd mapped writable, its pages
 * there already: huge pages, or a spare) each record is received straight
 * into its place (its header and tag beside) and opened there: no copy
 * but the kernel's, no fault, and a file of huge pages (hugetlbfs) takes
 * no write(2) at all; the ranges must then be the parts the sender sent
 * (its cut is checked). Without, each record is opened where it was
 * received and written into fd by pwritev from there: fresh 4 KiB pages
 * faulted into a mapping one by one cost more on a VM than the kernel's
 * copy. The caller checks every range lies inside the mapping or file. */
typedef struct sh_fd_range {
	uint64_t off, len;
} sh_fd_range;
int sh_channel_recv_ranges(sh_channel *ch, int fd, unsigned char *map, const sh_fd_range *r,
			   size_t nr, int64_t deadline, _Atomic uint64_t *got);
/* Relays: head, n bytes read from from, tail, written to to.
 * Each record is opened and sealed again for to (the two links have their
 * own keys); a fiber. */
int sh_channel_relay(sh_channel *from, sh_channel *to, const void *head, size_t hlen, uint64_t n,
		     const void *tail, size_t tlen, uint64_t *taken, int *failed);
/* Opens the record rec of len bytes in place (the next one expected):
 * *plain bytes of plaintext at rec + 5. For the fuzzer. */
int sh_channel_open_record(sh_channel *ch, unsigned char *rec, size_t len, size_t *plain);
/* Seals n bytes (at most SH_CHANNEL_RECORD) as the next record, of TLS
 * content type type, into out (n + 22 bytes): *len its bytes. For the
 * fuzzer: what a peer's stack may send besides data. */
int sh_channel_seal_record(sh_channel *ch, unsigned char type, const void *p, size_t n,
			   unsigned char *out, size_t *len);

/* ---- the handshake (tls.c) ---- */

/* Where a handshake may take at most this long. */
#define SH_AUTH_TIMEOUT_NS 5000000000LL

/* TLS 1.3 with the PSK of the secret key (klen bytes), or certificates
 * (SHOAL_TLS_CERT, SHOAL_TLS_KEY, SHOAL_TLS_CA all set; then key is not
 * used). Server: a fiber on a non-blocking fd, at most SH_AUTH_TIMEOUT_NS;
 * *proto gets the protocol the client names (ALPN). Client: a thread on a
 * blocking fd, until deadline; proto: the protocol it speaks. plain: this
 * side may go without encryption (an explicit option: a trusted network).
 * Either side fails with SHOAL_EACCES when the other does not know the
 * secret (or has no certificate the CA signed), and why says so; on
 * success *ch is the channel for everything after. */
int sh_auth_server(int fd, const void *key, size_t klen, bool plain, uint32_t *proto,
		   sh_channel **ch, char *why, size_t whylen);
int sh_auth_client(int fd, const void *key, size_t klen, uint32_t proto, bool plain,
		   int64_t deadline, sh_channel **ch, char *why, size_t whylen);
/* Connects to addr ("HOST:PORT") and runs the handshake as proto, until
 * deadline; a listener that closes the link during the handshake (one
 * turning strangers away under a flood) is tried again, after 20 ms, 40,
 * ... up to 500 ms between tries, while the deadline allows. on_fd (may
 * be NULL) hears each socket before its handshake (a caller that may cut
 * the link from another thread). *fd is -1 and *ch NULL on failure. */
int sh_tcp_open_auth(const char *addr, const void *key, size_t klen, uint32_t proto, bool plain,
		     int64_t deadline, void (*on_fd)(int fd, void *arg), void *arg, int *fd,
		     sh_channel **ch, char *why, size_t whylen);
/* A client's whole way in: the secret from the environment
 * (sh_secret_load), then sh_tcp_open_auth. "HOST:PORT?encrypt=false" asks
 * to go without encryption (only if the server was told so too). */
int sh_tcp_connect_auth(const char *hostport, uint32_t proto, int64_t deadline, int *fd,
			sh_channel **ch, char *why, size_t whylen);

#endif

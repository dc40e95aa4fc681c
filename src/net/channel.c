/* The secure channel: every byte of a TCP link after the TLS 1.3
 * handshake (tls.c) goes in TLS 1.3 records (RFC 8446 5.2) of
 * TLS_AES_128_GCM_SHA256, sealed and opened here with libcrypto's EVP
 * under the handshake's traffic keys: the header as additional data, the
 * plaintext and its content type, the tag; the nonce the IV xor the
 * record's number. Records of the peer's stack other than data are read
 * as TLS 1.3 says: a close_notify alert ends the channel cleanly, another
 * alert fails it, a NewSessionTicket is let go, and padding is taken off.
 * Sealing happens in place where bytes come from a file (send_fd reads
 * the kernel's copy straight into the records' slots), opening where they
 * were received (recv_fd writes them to the file from there). */
#include "net/net.h"
#include "net/ossl.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define REC_HDR 5
#define REC_TAG 16
#define REC_TYPE_DATA 0x17
#define REC_TYPE_ALERT 0x15
#define REC_TYPE_HANDSHAKE 0x16
/* Plaintext of one record at most (TLS's limit, which kernel TLS enforces)
 * and the largest record a peer may announce. */
#define REC_PLAIN SH_CHANNEL_RECORD
#define REC_MAX (REC_HDR + REC_PLAIN + 1 + REC_TAG)
/* Records sealed before one send, and bytes received at once: large
 * transfers cost one system call per 16 records each way. */
#define WBUF_RECORDS 64
#define RBUF_BYTES (WBUF_RECORDS * REC_MAX)

struct sh_channel {
	int fd;
	bool encrypt;
	EVP_CIPHER_CTX *tx, *rx;
	unsigned char tx_iv[12], rx_iv[12];
	uint64_t tx_seq, rx_seq;
	/* sealed records not yet in the socket: wbuf[wsent, wlen) */
	unsigned char *wbuf;
	size_t wlen, wsent;
	/* received bytes: rbuf[rpos, rend); the opened plaintext of the
	 * current record: rbuf[ppos, pend) */
	unsigned char *rbuf;
	size_t rpos, rend, ppos, pend;
	_Atomic int broken; /* a record failed its check: the channel is over */
	int64_t stall_ns;   /* the longest wait without progress once bytes move; 0: none */
	/* the least a peer must send while the channel waits for it: min_rate
	 * bytes a second over each window of rate_ns (sh_channel_set_min_rate) */
	uint64_t min_rate, rx_bytes, win_bytes;
	int64_t rate_ns, win_start;
	char why[240];
};

static int fail(sh_channel *ch, int rc, const char *fmt, const char *what)
{
	if (ch->broken && ch->why[0]) /* the first reason stays */
		return ch->broken;
	ch->broken = rc;
	snprintf(ch->why, sizeof(ch->why), fmt, what);
	return rc;
}

bool sh_channel_encrypted(const sh_channel *ch)
{
	return ch->encrypt;
}

void sh_channel_set_stall(sh_channel *ch, int64_t ns)
{
	ch->stall_ns = ns > 0 ? ns : 0;
}

void sh_channel_set_min_rate(sh_channel *ch, uint64_t bytes_per_s, int64_t window_ns)
{
	ch->min_rate = window_ns > 0 ? bytes_per_s : 0;
	ch->rate_ns = window_ns;
	ch->win_start = shoal_now_ns();
	ch->win_bytes = ch->rx_bytes;
}

/* Whether the peer kept its rate over the window that ended: a window
 * that has not ended yet, or no rate set, passes. */
static int rate_check(sh_channel *ch)
{
	if (!ch->min_rate)
		return 0;
	int64_t now = shoal_now_ns();
	if (now - ch->win_start < ch->rate_ns)
		return 0;
	uint64_t got = ch->rx_bytes - ch->win_bytes,
		 want = (uint64_t)((double)ch->min_rate * (double)(now - ch->win_start) / 1e9);
	if (got < want) {
		char what[180];
		snprintf(what, sizeof(what),
			 "the peer sent %" PRIu64
			 " bytes in %.1f s, below the least rate of %" PRIu64
			 " bytes a second a transfer must keep",
			 got, (double)(now - ch->win_start) / 1e9, ch->min_rate);
		return fail(ch, SHOAL_ETIMEDOUT, "%s", what);
	}
	ch->win_start = now;
	ch->win_bytes = ch->rx_bytes;
	return 0;
}

/* The deadline of one wait while bytes are on the move: the caller's, or
 * sooner, when the peer has taken or sent nothing for stall_ns. */
static int64_t bound(const sh_channel *ch, int64_t deadline)
{
	if (!ch->stall_ns)
		return deadline;
	int64_t s = shoal_deadline_in(ch->stall_ns);
	return deadline == SHOAL_FOREVER || s < deadline ? s : deadline;
}

const char *sh_channel_error(const sh_channel *ch)
{
	return ch->why;
}

static int seal_record(sh_channel *ch, unsigned char *h, size_t len, unsigned char type);

void sh_channel_free(sh_channel *ch)
{
	if (!ch)
		return;
	/* The end, as TLS says it (a close_notify alert), when the socket
	 * takes it now: a peer of another stack then sees a clean close. */
	unsigned char bye[REC_HDR + 2 + 1 + REC_TAG];
	bye[REC_HDR] = 1, bye[REC_HDR + 1] = 0; /* warning, close_notify */
	if (ch->tx && !ch->broken && seal_record(ch, bye, 2, REC_TYPE_ALERT) == 0)
		(void)!send(ch->fd, bye, sizeof(bye), MSG_DONTWAIT | MSG_NOSIGNAL);
	EVP_CIPHER_CTX_free(ch->tx);
	EVP_CIPHER_CTX_free(ch->rx);
	if (ch->wbuf)
		shoal_free(ch->wbuf, WBUF_RECORDS * REC_MAX);
	if (ch->rbuf)
		shoal_free(ch->rbuf, RBUF_BYTES);
	OPENSSL_cleanse(ch->tx_iv, sizeof(ch->tx_iv));
	OPENSSL_cleanse(ch->rx_iv, sizeof(ch->rx_iv));
	SH_DELETE(ch);
}

static EVP_CIPHER_CTX *cipher(const unsigned char key[16], bool enc)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	if (c && EVP_CipherInit_ex(c, EVP_aes_128_gcm(), NULL, key, NULL, enc) == 1)
		return c;
	EVP_CIPHER_CTX_free(c);
	return NULL;
}

int sh_channel_open(sh_channel **out, int fd, const sh_channel_keys *k, bool encrypt)
{
	*out = NULL;
	char why[200];
	if (sh_ossl_load(false, why, sizeof(why)) != 0) {
		sh_error("net", "TCP links need %s", why);
		return SHOAL_ENOSYS;
	}
	sh_channel *ch = SH_NEW(sh_channel);
	if (!ch)
		return SHOAL_ENOMEM;
	ch->fd = fd;
	ch->encrypt = encrypt;
	int rc = 0;
	ch->tx = cipher(k->tx_key, true);
	ch->rx = cipher(k->rx_key, false);
	memcpy(ch->tx_iv, k->tx_iv, 12);
	memcpy(ch->rx_iv, k->rx_iv, 12);
	ch->wbuf = shoal_alloc(WBUF_RECORDS * REC_MAX);
	ch->rbuf = shoal_alloc(RBUF_BYTES);
	if (!ch->tx || !ch->rx || !ch->wbuf || !ch->rbuf)
		rc = SHOAL_ENOMEM;
	if (rc) {
		sh_channel_free(ch);
		return rc;
	}
	*out = ch;
	return 0;
}

static void nonce(const unsigned char iv[12], uint64_t seq, unsigned char out[12])
{
	memcpy(out, iv, 12);
	for (int i = 0; i < 8; i++)
		out[11 - i] ^= (unsigned char)(seq >> (8 * i));
}

/* ---- sending ---- */

/* Sends the sealed records; without wait, SHOAL_EAGAIN once the socket
 * takes no more. */
/* Sends p[*sent, len); without wait, SHOAL_EAGAIN once the socket takes
 * no more. */
static int push_bytes(sh_channel *ch, const unsigned char *p, size_t len, size_t *sent, bool wait,
		      bool fiber, int64_t deadline)
{
	while (*sent < len) {
		ssize_t k = send(ch->fd, p + *sent, len - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			*sent += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (!wait)
				return SHOAL_EAGAIN;
			int rc = sh_net_wait(ch->fd, SHOAL_FD_OUT, fiber, bound(ch, deadline));
			if (rc)
				return rc;
			continue;
		}
		return k < 0 && (errno == EPIPE || errno == ECONNRESET) ? SHOAL_ECLOSED
									: shoal_errno();
	}
	return 0;
}

static int push(sh_channel *ch, bool wait, bool fiber, int64_t deadline)
{
	int rc = push_bytes(ch, ch->wbuf, ch->wlen, &ch->wsent, wait, fiber, deadline);
	if (rc == 0)
		ch->wlen = ch->wsent = 0;
	return rc;
}

/* Seals one record of up to REC_PLAIN bytes gathered from the parts
 * (from part *i, offset *at, which advance) into wbuf; *len: its bytes. */
static int seal(sh_channel *ch, const sh_msg_part *parts, size_t n, size_t *i, size_t *at,
		size_t *len)
{
	*len = 0;
	for (size_t j = *i, off = *at; j < n && *len < REC_PLAIN; j++, off = 0) {
		size_t k = parts[j].n - off;
		*len += k < REC_PLAIN - *len ? k : REC_PLAIN - *len;
	}
	unsigned char *h = ch->wbuf + ch->wlen, *o = h + REC_HDR, iv[12], type = REC_TYPE_DATA;
	size_t rlen = *len + 1 + REC_TAG;
	h[0] = REC_TYPE_DATA, h[1] = 3, h[2] = 3, h[3] = (unsigned char)(rlen >> 8);
	h[4] = (unsigned char)rlen;
	nonce(ch->tx_iv, ch->tx_seq, iv);
	int l, ok = EVP_EncryptInit_ex(ch->tx, NULL, NULL, NULL, iv) == 1 &&
		    EVP_EncryptUpdate(ch->tx, NULL, &l, h, REC_HDR) == 1;
	for (size_t left = *len; ok && left;) {
		const unsigned char *p = (const unsigned char *)parts[*i].p + *at;
		size_t k = parts[*i].n - *at < left ? parts[*i].n - *at : left;
		if (ch->encrypt) {
			ok = EVP_EncryptUpdate(ch->tx, o, &l, p, (int)k) == 1;
		} else { /* in clear, and all of it authenticated */
			memcpy(o, p, k);
			ok = EVP_EncryptUpdate(ch->tx, NULL, &l, p, (int)k) == 1;
		}
		o += k, left -= k, *at += k;
		if (*at == parts[*i].n)
			(*i)++, *at = 0;
	}
	while (*i < n && parts[*i].n == 0)
		(*i)++;
	if (ok && ch->encrypt) {
		ok = EVP_EncryptUpdate(ch->tx, o, &l, &type, 1) == 1;
	} else if (ok) {
		*o = type;
		ok = EVP_EncryptUpdate(ch->tx, NULL, &l, &type, 1) == 1;
	}
	ok = ok && EVP_EncryptFinal_ex(ch->tx, o + 1, &l) == 1 &&
	     EVP_CIPHER_CTX_ctrl(ch->tx, EVP_CTRL_AEAD_GET_TAG, REC_TAG, o + 1) == 1;
	if (!ok)
		return SHOAL_EIO;
	ch->tx_seq++;
	ch->wlen += REC_HDR + rlen;
	return 0;
}

/* Seals the parts from *done on (which it advances) and sends; flush:
 * until the socket has every record, else only when wbuf is full. */
static int put(sh_channel *ch, const sh_msg_part *parts, size_t n, size_t *done, bool wait,
	       bool fiber, int64_t deadline, bool flush)
{
	if (ch->broken)
		return ch->broken;
	size_t i = 0, at = 0;
	for (size_t skip = *done; i < n && skip;) {
		size_t k = parts[i].n - at < skip ? parts[i].n - at : skip;
		at += k, skip -= k;
		if (at == parts[i].n)
			i++, at = 0;
	}
	while (i < n && parts[i].n == at)
		i++, at = 0;
	for (;;) {
		while (i < n && ch->wlen + REC_MAX <= WBUF_RECORDS * REC_MAX) {
			size_t len;
			if (seal(ch, parts, n, &i, &at, &len) != 0)
				return fail(ch, SHOAL_EIO, "%s", "sealing a record failed");
			*done += len;
		}
		if (i == n && !flush)
			return 0;
		int rc = push(ch, wait, fiber, deadline);
		if (rc)
			return rc;
		if (i == n)
			return 0;
	}
}

int sh_channel_writev_part(sh_channel *ch, const sh_msg_part *parts, size_t n, size_t *done,
			   bool wait, bool fiber, int64_t deadline)
{
	return put(ch, parts, n, done, wait, fiber, deadline, true);
}

int sh_channel_writev(sh_channel *ch, const sh_msg_part *parts, size_t n, bool fiber,
		      int64_t deadline)
{
	size_t done = 0;
	return sh_channel_writev_part(ch, parts, n, &done, true, fiber, deadline);
}

int sh_channel_write_part(sh_channel *ch, const void *p, size_t n, size_t *done, bool wait,
			  bool fiber, int64_t deadline)
{
	sh_msg_part part = {(void *)p, n};
	return sh_channel_writev_part(ch, &part, 1, done, wait, fiber, deadline);
}

int sh_channel_write(sh_channel *ch, const void *p, size_t n, bool fiber, int64_t deadline)
{
	size_t done = 0;
	return sh_channel_write_part(ch, p, n, &done, true, fiber, deadline);
}

/* Seals, in place, the record at h whose len bytes of plaintext already
 * sit at h + REC_HDR: its whole length is REC_HDR + len + 1 + REC_TAG.
 * Touches only the sending key and sequence (a reader thread may call it
 * while the caller sends what it sealed before). */
static int seal_record(sh_channel *ch, unsigned char *h, size_t len, unsigned char type)
{
	unsigned char *o = h + REC_HDR, iv[12];
	size_t rlen = len + 1 + REC_TAG;
	h[0] = REC_TYPE_DATA, h[1] = 3, h[2] = 3, h[3] = (unsigned char)(rlen >> 8);
	h[4] = (unsigned char)rlen;
	o[len] = type;
	nonce(ch->tx_iv, ch->tx_seq, iv);
	int l, ok = EVP_EncryptInit_ex(ch->tx, NULL, NULL, NULL, iv) == 1 &&
		    EVP_EncryptUpdate(ch->tx, NULL, &l, h, REC_HDR) == 1 &&
		    (ch->encrypt ? EVP_EncryptUpdate(ch->tx, o, &l, o, (int)len + 1)
				 : EVP_EncryptUpdate(ch->tx, NULL, &l, o, (int)len + 1)) == 1 &&
		    EVP_EncryptFinal_ex(ch->tx, o + len + 1, &l) == 1 &&
		    EVP_CIPHER_CTX_ctrl(ch->tx, EVP_CTRL_AEAD_GET_TAG, REC_TAG, o + len + 1) == 1;
	if (!ok)
		return SHOAL_EIO;
	ch->tx_seq++;
	return 0;
}

int sh_channel_seal_record(sh_channel *ch, unsigned char type, const void *p, size_t n,
			   unsigned char *out, size_t *len)
{
	if (n > REC_PLAIN)
		return SHOAL_EINVAL;
	memcpy(out + REC_HDR, p, n);
	*len = REC_HDR + n + 1 + REC_TAG;
	return seal_record(ch, out, n, type);
}

/* Reads up to a buffer's worth of records of the file's bytes (pieces
 * from *pi, *left bytes of it at *off, which advance) into buf, each
 * read by the kernel straight into its record's slot and sealed there:
 * *used gets the bytes of the records. */
static int fill_records(sh_channel *ch, unsigned char *buf, size_t maxrec, const sh_fd_piece *p,
			size_t np, size_t *pi, uint64_t *off, uint64_t *left, size_t *used,
			char *why, size_t whylen)
{
	size_t nrec = 0;
	*used = 0;
	while (nrec < maxrec && *pi < np) {
		if (*left == 0) {
			if (++*pi < np)
				*off = p[*pi].off, *left = p[*pi].len;
			continue;
		}
		struct iovec iov[WBUF_RECORDS];
		size_t k = 0;
		uint64_t want = 0;
		for (; nrec + k < maxrec && want < *left; k++) {
			size_t len = *left - want < REC_PLAIN ? (size_t)(*left - want) : REC_PLAIN;
			iov[k].iov_base = buf + *used + k * REC_MAX + REC_HDR;
			iov[k].iov_len = len;
			want += len;
		}
		ssize_t got = preadv(p[*pi].fd, iov, (int)k, (off_t)*off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			snprintf(why, whylen, "reading the bytes to send failed: %s",
				 got < 0 ? strerror(errno) : "the file ended first");
			return got < 0 ? shoal_errno() : SHOAL_EIO;
		}
		/* records stay contiguous: only the last one read may be short */
		for (size_t j = 0, rest = (size_t)got; rest; j++) {
			size_t len = rest < iov[j].iov_len ? rest : iov[j].iov_len;
			unsigned char *h = (unsigned char *)iov[j].iov_base - REC_HDR;
			if (h != buf + *used)
				memmove(buf + *used + REC_HDR, h + REC_HDR, len);
			if (seal_record(ch, buf + *used, len, REC_TYPE_DATA) != 0) {
				snprintf(why, whylen, "sealing a record failed");
				return SHOAL_EIO;
			}
			*used += REC_HDR + len + 1 + REC_TAG;
			nrec++;
			rest -= len;
		}
		*off += (uint64_t)got;
		*left -= (uint64_t)got;
	}
	return 0;
}

int sh_channel_send_fd(sh_channel *ch, int fd, uint64_t off, uint64_t n, bool flush,
		       int64_t deadline)
{
	if (ch->broken)
		return ch->broken;
	char why[120];
	while (n) {
		size_t room = (WBUF_RECORDS * REC_MAX - ch->wlen) / REC_MAX;
		if (room == 0) {
			int rc = push(ch, true, false, deadline);
			if (rc)
				return rc;
			continue;
		}
		sh_fd_piece part = {fd, off, n};
		size_t pi = 0, used;
		uint64_t poff = off, pleft = n;
		int rc = fill_records(ch, ch->wbuf + ch->wlen, room, &part, 1, &pi, &poff, &pleft,
				      &used, why, sizeof(why));
		if (rc)
			return fail(ch, rc, "%s", why);
		ch->wlen += used;
		off = poff;
		n = pleft;
	}
	return flush ? push(ch, true, false, deadline) : 0;
}

/* ---- sending from files ---- */

/* Reading and sealing overlap the sending: a reader thread fills buffers
 * of records (kernel copies into their slots, sealed in place) while the
 * caller sends the ones before. */
#define SPOOL 3

typedef struct sreader {
	sh_channel *ch;
	const sh_fd_piece *p;
	size_t np;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned char *bufs[SPOOL];
	size_t lens[SPOOL];
	uint64_t produced, consumed;
	bool stop, done;
	int rc;
	char why[120];
} sreader;

static void *sreader_main(void *arg)
{
	sreader *r = arg;
	size_t pi = 0;
	uint64_t off = r->np ? r->p[0].off : 0, left = r->np ? r->p[0].len : 0;
	int rc = 0;
	while (rc == 0 && pi < r->np) {
		pthread_mutex_lock(&r->mu);
		while (r->produced - r->consumed == SPOOL && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		bool stop = r->stop;
		unsigned char *buf = r->bufs[r->produced % SPOOL];
		pthread_mutex_unlock(&r->mu);
		if (stop)
			break;
		size_t used;
		rc = fill_records(r->ch, buf, WBUF_RECORDS, r->p, r->np, &pi, &off, &left, &used,
				  r->why, sizeof(r->why));
		pthread_mutex_lock(&r->mu);
		if (rc == 0 && used) {
			r->lens[r->produced % SPOOL] = used;
			r->produced++;
		}
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
	pthread_mutex_lock(&r->mu);
	r->rc = rc;
	r->done = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int sh_channel_send_pieces(sh_channel *ch, const sh_fd_piece *p, size_t np, int64_t deadline)
{
	if (ch->broken)
		return ch->broken;
	uint64_t total = 0;
	for (size_t i = 0; i < np; i++)
		total += p[i].len;
	int rc = 0;
	if (total < (4u << 20)) { /* a thread only where it pays */
		for (size_t i = 0; rc == 0 && i < np; i++)
			rc = sh_channel_send_fd(ch, p[i].fd, p[i].off, p[i].len, false, deadline);
		return rc ? rc : push(ch, true, false, deadline);
	}
	if ((rc = push(ch, true, false, deadline)) != 0) /* what came before, first */
		return rc;
	sreader *r = SH_NEW(sreader);
	if (!r)
		return SHOAL_ENOMEM;
	r->ch = ch;
	r->p = p;
	r->np = np;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	for (int i = 0; i < SPOOL && rc == 0; i++)
		if (!(r->bufs[i] = shoal_alloc(WBUF_RECORDS * REC_MAX)))
			rc = SHOAL_ENOMEM;
	pthread_t th;
	if (rc == 0 && (rc = -pthread_create(&th, NULL, sreader_main, r)) == 0) {
		for (;;) {
			pthread_mutex_lock(&r->mu);
			while (r->produced == r->consumed && !r->done)
				pthread_cond_wait(&r->cv, &r->mu);
			bool have = r->produced > r->consumed;
			unsigned char *buf = r->bufs[r->consumed % SPOOL];
			size_t len = r->lens[r->consumed % SPOOL];
			pthread_mutex_unlock(&r->mu);
			if (!have)
				break;
			size_t sent = 0;
			rc = push_bytes(ch, buf, len, &sent, true, false, deadline);
			pthread_mutex_lock(&r->mu);
			r->consumed++;
			if (rc)
				r->stop = true;
			pthread_cond_broadcast(&r->cv);
			pthread_mutex_unlock(&r->mu);
			if (rc)
				break;
		}
		pthread_join(th, NULL);
		if (rc == 0 && r->rc)
			rc = fail(ch, r->rc, "%s", r->why);
		else if (rc)
			ch->broken = rc; /* records went out of step with the socket */
	}
	for (int i = 0; i < SPOOL; i++)
		if (r->bufs[i])
			shoal_free(r->bufs[i], WBUF_RECORDS * REC_MAX);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	SH_DELETE(r);
	return rc;
}

/* ---- receiving ---- */

/* A record other than data, opened (body, n bytes): a close_notify ends
 * the channel (SHOAL_ECLOSED); a NewSessionTicket of the peer's stack is
 * let go (*plain 0); anything else fails it, saying what came. */
static int control_record(sh_channel *ch, unsigned char type, const unsigned char *body, size_t n,
			  size_t *plain)
{
	*plain = 0;
	if (type == REC_TYPE_ALERT) {
		if (n == 2 && body[1] == 0) {
			ch->broken = SHOAL_ECLOSED; /* a clean end: no error to say */
			return SHOAL_ECLOSED;
		}
		char what[96];
		snprintf(what, sizeof(what), "the peer sent TLS alert %d (level %d): it gave up",
			 n == 2 ? body[1] : -1, n == 2 ? body[0] : -1);
		return fail(ch, SHOAL_EPROTO, "%s", what);
	}
	if (type == REC_TYPE_HANDSHAKE) {
		/* whole messages only, each [type, 3-byte length, body] */
		for (size_t i = 0; i + 4 <= n;) {
			size_t l =
				(size_t)body[i + 1] << 16 | (size_t)body[i + 2] << 8 | body[i + 3];
			if (l > n - i - 4)
				break;
			if (body[i] != 4) /* NewSessionTicket: we resume nothing */
				return fail(
					ch, SHOAL_EPROTO, "%s",
					body[i] == 24
						? "the peer asked for a KeyUpdate, which this "
						  "channel does not take: a new link has new keys"
						: "a TLS handshake message after the handshake");
			i += 4 + l;
			if (i == n)
				return 0;
		}
		return fail(ch, SHOAL_EPROTO, "%s", "a cut TLS handshake message");
	}
	char what[64];
	snprintf(what, sizeof(what), "a record of content type %d, expected data", type);
	return fail(ch, SHOAL_EBADMSG, "%s", what);
}

int sh_channel_open_record(sh_channel *ch, unsigned char *rec, size_t len, size_t *plain)
{
	if (len < REC_HDR + 1 + REC_TAG || rec[0] != REC_TYPE_DATA || rec[1] != 3 || rec[2] != 3 ||
	    ((size_t)rec[3] << 8 | rec[4]) != len - REC_HDR || len > REC_MAX)
		return fail(ch, SHOAL_EBADMSG, "%s", "a malformed record header");
	unsigned char iv[12], *body = rec + REC_HDR, *tag = rec + len - REC_TAG;
	size_t blen = len - REC_HDR - REC_TAG;
	int l;
	nonce(ch->rx_iv, ch->rx_seq, iv);
	int ok = EVP_DecryptInit_ex(ch->rx, NULL, NULL, NULL, iv) == 1 &&
		 EVP_CIPHER_CTX_ctrl(ch->rx, EVP_CTRL_AEAD_SET_TAG, REC_TAG, tag) == 1 &&
		 EVP_DecryptUpdate(ch->rx, NULL, &l, rec, REC_HDR) == 1 &&
		 (ch->encrypt ? EVP_DecryptUpdate(ch->rx, body, &l, body, (int)blen)
			      : EVP_DecryptUpdate(ch->rx, NULL, &l, body, (int)blen)) == 1 &&
		 EVP_DecryptFinal_ex(ch->rx, body + blen, &l) == 1;
	if (!ok)
		return fail(ch, SHOAL_EBADMSG,
			    "a record failed its authentication (%s): the link was tampered with, "
			    "replayed or reordered, or the peer's keys differ",
			    ch->encrypt ? "AES-128-GCM" : "GMAC");
	ch->rx_seq++;
	/* the content type is the last byte that is not padding */
	size_t end = blen;
	while (end > 0 && body[end - 1] == 0)
		end--;
	if (end == 0)
		return fail(ch, SHOAL_EBADMSG, "%s", "a record of padding alone");
	unsigned char type = body[end - 1];
	if (type != REC_TYPE_DATA)
		return control_record(ch, type, body, end - 1, plain);
	*plain = end - 1;
	return 0;
}

/* The next record's plaintext into rbuf[ppos, pend); started: bytes are
 * on their way (a frame began), so the stall bound applies. */
static int next_record(sh_channel *ch, bool fiber, int64_t deadline, bool started)
{
	for (;;) {
		size_t have = ch->rend - ch->rpos;
		if (have >= REC_HDR) {
			unsigned char *h = ch->rbuf + ch->rpos;
			size_t len = REC_HDR + ((size_t)h[3] << 8 | h[4]);
			if (len > REC_MAX || len < REC_HDR + 1 + REC_TAG || h[0] != REC_TYPE_DATA)
				return fail(ch, SHOAL_EBADMSG, "%s",
					    "a malformed record header: not a shoal channel");
			if (have >= len) {
				size_t plain;
				int rc = sh_channel_open_record(ch, h, len, &plain);
				if (rc)
					return rc;
				ch->ppos = ch->rpos + REC_HDR;
				ch->pend = ch->ppos + plain;
				ch->rpos += len;
				if (plain)
					return 0;
				continue;
			}
			if (ch->rpos + len > RBUF_BYTES) { /* room for the whole record */
				memmove(ch->rbuf, h, have);
				ch->rpos = 0, ch->rend = have;
			}
		} else if (ch->rpos == ch->rend) {
			ch->rpos = ch->rend = 0;
		}
		if (ch->rend == RBUF_BYTES) {
			memmove(ch->rbuf, ch->rbuf + ch->rpos, have);
			ch->rpos = 0, ch->rend = have;
		}
		ssize_t k = recv(ch->fd, ch->rbuf + ch->rend, RBUF_BYTES - ch->rend, MSG_DONTWAIT);
		if (k > 0) {
			ch->rend += (size_t)k;
			ch->rx_bytes += (uint64_t)k;
			int rc = rate_check(ch);
			if (rc)
				return rc;
			continue;
		}
		if (k == 0)
			return have ? fail(ch, SHOAL_EBADMSG, "%s",
					   "the stream ended inside a record: it was cut")
				    : SHOAL_ECLOSED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == ECONNRESET ? SHOAL_ECLOSED : shoal_errno();
		int64_t until = started || have ? bound(ch, deadline) : deadline;
		int64_t window_end = ch->win_start + ch->rate_ns;
		bool rated = ch->min_rate && (started || have) && window_end < until;
		int rc = sh_net_wait(ch->fd, SHOAL_FD_IN, fiber, rated ? window_end : until);
		if (rc == SHOAL_ETIMEDOUT && rated)
			rc = rate_check(ch);
		if (rc)
			return rc;
	}
}

static int peek(sh_channel *ch, const unsigned char **p, size_t *n, bool fiber, int64_t deadline,
		bool started)
{
	if (ch->broken)
		return ch->broken;
	if (ch->ppos == ch->pend) {
		int rc = next_record(ch, fiber, deadline, started);
		if (rc)
			return rc;
	}
	*p = ch->rbuf + ch->ppos;
	*n = ch->pend - ch->ppos;
	return 0;
}

int sh_channel_peek(sh_channel *ch, const unsigned char **p, size_t *n, bool fiber,
		    int64_t deadline)
{
	return peek(ch, p, n, fiber, deadline, true);
}

void sh_channel_consume(sh_channel *ch, size_t n)
{
	ch->ppos += n;
}

/* Exactly n bytes; *any: whether some came. deadline bounds the wait for
 * the first byte; once some are taken the rest must come (or the stream
 * is out of step), bounded only by the stall. */
static int read_full(sh_channel *ch, unsigned char *p, size_t n, bool fiber, int64_t deadline,
		     bool *any)
{
	while (n) {
		const unsigned char *q;
		size_t k;
		int rc = peek(ch, &q, &k, fiber, *any ? SHOAL_FOREVER : deadline, *any);
		if (rc == SHOAL_ETIMEDOUT && *any)
			return fail(ch, rc, "%s",
				    "the peer stopped sending in the middle of a message");
		if (rc)
			return rc;
		k = k < n ? k : n;
		memcpy(p, q, k);
		sh_channel_consume(ch, k);
		p += k, n -= k;
		*any = true;
	}
	return 0;
}

int sh_channel_read(sh_channel *ch, void *p, size_t n, bool fiber, int64_t deadline)
{
	bool any = false;
	return read_full(ch, p, n, fiber, deadline, &any);
}

int sh_channel_read_frame(sh_channel *ch, unsigned char **buf, size_t *cap, size_t *len, size_t max,
			  bool fiber, int64_t deadline)
{
	unsigned char hdr[SH_STREAM_FRAME_HDR];
	bool any = false;
	int rc = read_full(ch, hdr, sizeof(hdr), fiber, deadline, &any);
	if (rc)
		return rc == SHOAL_ECLOSED && any ? SHOAL_EPROTO : rc;
	uint32_t body;
	memcpy(&body, hdr + SH_STREAM_FRAME_LEN_AT, 4);
	size_t total = sizeof(hdr) + (size_t)body;
	if (total > max)
		return SHOAL_EMSGSIZE;
	if (total > *cap) {
		unsigned char *q = shoal_realloc(*buf, *cap, total);
		if (!q)
			return SHOAL_ENOMEM;
		*buf = q;
		*cap = total;
	}
	memcpy(*buf, hdr, sizeof(hdr));
	/* the frame has begun: the rest must come, whatever the caller's
	 * deadline for the next frame */
	if ((rc = read_full(ch, *buf + sizeof(hdr), body, fiber, SHOAL_FOREVER, &any)) != 0)
		return rc == SHOAL_ECLOSED ? SHOAL_EPROTO : rc;
	*len = total;
	return 0;
}

bool sh_channel_pending(sh_channel *ch)
{
	char b;
	return ch->ppos != ch->pend || ch->rpos != ch->rend ||
	       recv(ch->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* Whether a whole record waits in rbuf (so opening it reads nothing). */
static bool record_at_hand(const sh_channel *ch)
{
	size_t have = ch->rend - ch->rpos;
	if (have < REC_HDR)
		return false;
	const unsigned char *h = ch->rbuf + ch->rpos;
	size_t len = (size_t)h[3] << 8 | h[4];
	/* one without plaintext would make peek read on */
	return len > 1 + REC_TAG && have >= REC_HDR + len;
}

/* ---- receiving into a file ---- */

/* Receiving and writing to the file overlap: the opened records of one
 * buffer go to a writer thread while the next buffer fills, so on two
 * cores the copy into the file (the costlier one, into fresh pages) runs
 * beside the receiving and the checking. A buffer is the channel's rbuf,
 * swapped for a free one when handed over. */
#define RUNS_MAX 256
#define POOL 3

typedef struct wbatch {
	unsigned char *buf;
	size_t nruns;
	struct iovec iov[RUNS_MAX];
	uint64_t off[RUNS_MAX]; /* where each run goes in the file */
} wbatch;

typedef struct writer {
	int fd;
	unsigned char *map; /* the file mapped (pages that exist): memcpy, not pwritev */
	_Atomic uint64_t *got;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	wbatch b[POOL];
	unsigned char *free_bufs[POOL + 1];
	int nfree;
	int queue[POOL], qhead, qlen; /* batches to write, in order */
	bool stop, threaded;
	int rc;
	char why[120];
	pthread_t th;
} writer;

/* Writes batch b, runs that follow each other in the file together. */
static int write_batch(writer *w, wbatch *b)
{
	if (w->map) {
		uint64_t n = 0;
		for (size_t i = 0; i < b->nruns; i++) {
			memcpy(w->map + b->off[i], b->iov[i].iov_base, b->iov[i].iov_len);
			n += b->iov[i].iov_len;
		}
		atomic_fetch_add(w->got, n);
		return 0;
	}
	for (size_t i = 0; i < b->nruns;) {
		size_t j = i + 1;
		uint64_t end = b->off[i] + b->iov[i].iov_len;
		while (j < b->nruns && j - i < 64 && b->off[j] == end)
			end += b->iov[j++].iov_len;
		uint64_t off = b->off[i];
		struct iovec *v = b->iov + i;
		int cnt = (int)(j - i);
		while (cnt) {
			ssize_t k = pwritev(w->fd, v, cnt, (off_t)off);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				snprintf(w->why, sizeof(w->why),
					 "writing received bytes failed: %s",
					 k < 0 ? strerror(errno) : "no progress");
				return k < 0 ? shoal_errno() : SHOAL_EIO;
			}
			atomic_fetch_add(w->got, (uint64_t)k);
			off += (uint64_t)k;
			for (size_t left = (size_t)k; left;) {
				size_t t = left < v->iov_len ? left : v->iov_len;
				v->iov_base = (unsigned char *)v->iov_base + t;
				v->iov_len -= t;
				left -= t;
				if (!v->iov_len)
					v++, cnt--;
			}
		}
		i = j;
	}
	return 0;
}

static void *writer_main(void *arg)
{
	writer *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->qlen && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!w->qlen)
			break;
		wbatch *b = &w->b[w->queue[w->qhead]];
		pthread_mutex_unlock(&w->mu);
		int rc = w->rc ? 0 : write_batch(w, b);
		pthread_mutex_lock(&w->mu);
		if (rc && !w->rc)
			w->rc = rc;
		w->free_bufs[w->nfree++] = b->buf;
		w->qhead = (w->qhead + 1) % POOL;
		w->qlen--;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Hands batch *cur (its runs in ch->rbuf) to the writer and gives the
 * channel a free buffer holding what rbuf had not yet given out: the
 * rest of the opened record, and the bytes after it. */
static int hand_over(sh_channel *ch, writer *w, int *cur)
{
	wbatch *b = &w->b[*cur];
	if (!b->nruns)
		return 0;
	if (!w->threaded) {
		int rc = write_batch(w, b);
		b->nruns = 0;
		return rc;
	}
	pthread_mutex_lock(&w->mu);
	while (!w->nfree && !w->rc)
		pthread_cond_wait(&w->cv, &w->mu);
	int rc = w->rc;
	unsigned char *nb = rc ? NULL : w->free_bufs[--w->nfree];
	if (!rc) {
		b->buf = ch->rbuf;
		w->queue[(w->qhead + w->qlen) % POOL] = *cur;
		w->qlen++;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	if (rc)
		return rc;
	size_t plain = ch->pend - ch->ppos, raw = ch->rend - ch->rpos;
	memcpy(nb, ch->rbuf + ch->ppos, plain);
	memcpy(nb + plain, ch->rbuf + ch->rpos, raw);
	ch->rbuf = nb;
	ch->ppos = 0, ch->pend = plain;
	ch->rpos = plain, ch->rend = plain + raw;
	/* the next batch: one the writer is done with */
	pthread_mutex_lock(&w->mu);
	for (;;) {
		bool busy = false;
		for (int q = 0; q < w->qlen; q++)
			busy |= w->queue[(w->qhead + q) % POOL] == (*cur + 1) % POOL;
		if (!busy || w->rc)
			break;
		pthread_cond_wait(&w->cv, &w->mu);
	}
	rc = w->rc;
	pthread_mutex_unlock(&w->mu);
	*cur = (*cur + 1) % POOL;
	w->b[*cur].nruns = 0;
	return rc;
}

int sh_channel_recv_ranges(sh_channel *ch, int fd, unsigned char *map, const sh_fd_range *r,
			   size_t nr, int64_t deadline, _Atomic uint64_t *got)
{
	if (ch->broken)
		return ch->broken;
	uint64_t total = 0;
	for (size_t i = 0; i < nr; i++)
		total += r[i].len;
	writer *w = SH_NEW(writer);
	if (!w)
		return SHOAL_ENOMEM;
	w->fd = fd;
	w->map = map;
	w->got = got;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	int rc = 0;
	/* a thread only where it pays: a few MiB at least */
	if (total >= (4u << 20)) {
		for (; w->nfree < POOL && rc == 0; w->nfree++)
			if (!(w->free_bufs[w->nfree] = shoal_alloc(RBUF_BYTES)))
				rc = SHOAL_ENOMEM;
		if (rc == 0 && pthread_create(&w->th, NULL, writer_main, w) == 0)
			w->threaded = true;
	}
	int cur = 0;
	size_t ri = 0;
	uint64_t roff = 0; /* into r[ri] */
	while (rc == 0 && ri < nr) {
		if (roff == r[ri].len) {
			ri++, roff = 0;
			continue;
		}
		wbatch *b = &w->b[cur];
		if (b->nruns < RUNS_MAX && (ch->ppos < ch->pend || record_at_hand(ch))) {
			const unsigned char *p;
			size_t m;
			if ((rc = peek(ch, &p, &m, false, SHOAL_FOREVER, true)) != 0)
				break;
			m = m < r[ri].len - roff ? m : (size_t)(r[ri].len - roff);
			b->iov[b->nruns].iov_base = (void *)p;
			b->iov[b->nruns].iov_len = m;
			b->off[b->nruns++] = r[ri].off + roff;
			sh_channel_consume(ch, m);
			roff += m;
			continue;
		}
		/* nothing at hand, or the batch is full: off it goes before a
		 * read may move rbuf */
		if ((rc = hand_over(ch, w, &cur)) != 0)
			break;
		if (ch->ppos < ch->pend || record_at_hand(ch))
			continue;
		const unsigned char *p;
		size_t m;
		rc = peek(ch, &p, &m, false, deadline, true);
		if (rc == SHOAL_ETIMEDOUT)
			rc = fail(ch, rc, "%s",
				  "the peer stopped sending in the middle of the bytes");
	}
	if (rc == 0)
		rc = hand_over(ch, w, &cur);
	if (w->threaded) {
		pthread_mutex_lock(&w->mu);
		w->stop = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->th, NULL);
	}
	if (rc == 0 && w->rc)
		rc = fail(ch, w->rc, "%s", w->why);
	for (int i = 0; i < w->nfree; i++)
		if (w->free_bufs[i])
			shoal_free(w->free_bufs[i], RBUF_BYTES);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	SH_DELETE(w);
	return rc;
}

int sh_channel_recv_fd(sh_channel *ch, int fd, uint64_t off, uint64_t n, int64_t deadline,
		       _Atomic uint64_t *got)
{
	sh_fd_range r = {off, n};
	return sh_channel_recv_ranges(ch, fd, NULL, &r, 1, deadline, got);
}

int sh_channel_relay(sh_channel *from, sh_channel *to, const void *head, size_t hlen, uint64_t n,
		     const void *tail, size_t tlen, uint64_t *taken, int *failed)
{
	*taken = 0;
	*failed = 0;
	size_t done = 0;
	sh_msg_part part = {(void *)head, hlen};
	int rc = put(to, &part, 1, &done, true, true, SHOAL_FOREVER, false);
	if (rc) {
		*failed = 2;
		return rc;
	}
	/* each record's plaintext, opened in place, is sealed again for the
	 * engine straight from there: no copy beyond the two ciphers */
	while (*taken < n) {
		const unsigned char *p;
		size_t k;
		if ((rc = sh_channel_peek(from, &p, &k, true, SHOAL_FOREVER)) != 0) {
			*failed = 1;
			return rc;
		}
		k = n - *taken < k ? (size_t)(n - *taken) : k;
		sh_msg_part piece = {(void *)p, k};
		done = 0;
		if ((rc = put(to, &piece, 1, &done, true, true, SHOAL_FOREVER, false)) != 0) {
			*failed = 2;
			return rc;
		}
		sh_channel_consume(from, k);
		*taken += k;
	}
	done = 0;
	if ((rc = sh_channel_write_part(to, tail, tlen, &done, true, true, SHOAL_FOREVER)) != 0)
		*failed = 2;
	return rc;
}

/* The secure channel: every byte of a TCP link after the TLS 1.3
 * handshake (tls.c) goes in TLS 1.3 records (RFC 8446 5.2) of
 * TLS_AES_128_GCM_SHA256, sealed and opened here with libcrypto's EVP
 * under the handshake's traffic keys: the header as additional data, the
 * plaintext and its content type, the tag; the nonce the IV xor the
 * record's number. Records of the peer's stack other than data are read
 * as TLS 1.3 says: a close_notify alert ends the channel cleanly, another
 * alert fails it, a NewSessionTicket is let go, and padding is taken off.
 * Bulk bytes (an object's blobs) go in the same records from and to
 * where they lie: bulk.c. */
#include "net/channel_impl.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

int sh_ch_fail(sh_channel *ch, int rc, const char *fmt, const char *what)
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
int sh_ch_rate_check(sh_channel *ch)
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
		return sh_ch_fail(ch, SHOAL_ETIMEDOUT, "%s", what);
	}
	ch->win_start = now;
	ch->win_bytes = ch->rx_bytes;
	return 0;
}

/* The deadline of one wait while bytes are on the move: the caller's, or
 * sooner, when the peer has taken or sent nothing for stall_ns. */
int64_t sh_ch_bound(const sh_channel *ch, int64_t deadline)
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

void sh_channel_free(sh_channel *ch)
{
	if (!ch)
		return;
	/* The end, as TLS says it (a close_notify alert), when the socket
	 * takes it now: a peer of another stack then sees a clean close. */
	unsigned char bye[REC_HDR + 2 + 1 + REC_TAG];
	bye[REC_HDR] = 1, bye[REC_HDR + 1] = 0; /* warning, close_notify */
	if (ch->tx && !ch->broken && sh_ch_seal_record(ch, bye, 2, REC_TYPE_ALERT) == 0)
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

void sh_ch_nonce(const unsigned char iv[12], uint64_t seq, unsigned char out[12])
{
	memcpy(out, iv, 12);
	for (int i = 0; i < 8; i++)
		out[11 - i] ^= (unsigned char)(seq >> (8 * i));
}

/* Seals the record of the len bytes at p (the next one, of TLS content
 * type type): its header into hdr, its type and tag into trail (17
 * bytes). Encrypted, the ciphertext goes to out (p itself, or elsewhere:
 * p is then only read, a mapping of an object's may be); in clear the
 * bytes stay at p and are authenticated where they are. Touches only the
 * sending key and sequence (a sealing thread may call it while another
 * sends what was sealed before). */
int sh_ch_seal_from(sh_channel *ch, unsigned char *hdr, const unsigned char *p, size_t len,
		    unsigned char *out, unsigned char *trail, unsigned char type)
{
	unsigned char iv[12];
	size_t rlen = len + 1 + REC_TAG;
	hdr[0] = REC_TYPE_DATA, hdr[1] = 3, hdr[2] = 3, hdr[3] = (unsigned char)(rlen >> 8);
	hdr[4] = (unsigned char)rlen;
	sh_ch_nonce(ch->tx_iv, ch->tx_seq, iv);
	int l, ok = EVP_EncryptInit_ex(ch->tx, NULL, NULL, NULL, iv) == 1 &&
		    EVP_EncryptUpdate(ch->tx, NULL, &l, hdr, REC_HDR) == 1;
	if (ch->encrypt) {
		ok = ok && (len == 0 || EVP_EncryptUpdate(ch->tx, out, &l, p, (int)len) == 1) &&
		     EVP_EncryptUpdate(ch->tx, trail, &l, &type, 1) == 1;
	} else { /* in clear, and all of it authenticated */
		ok = ok && (len == 0 || EVP_EncryptUpdate(ch->tx, NULL, &l, p, (int)len) == 1) &&
		     EVP_EncryptUpdate(ch->tx, NULL, &l, &type, 1) == 1;
		trail[0] = type;
	}
	ok = ok && EVP_EncryptFinal_ex(ch->tx, trail + 1, &l) == 1 &&
	     EVP_CIPHER_CTX_ctrl(ch->tx, EVP_CTRL_AEAD_GET_TAG, REC_TAG, trail + 1) == 1;
	if (!ok)
		return SHOAL_EIO;
	ch->tx_seq++;
	return 0;
}

/* Seals, in place, the record at h whose len bytes of plaintext already
 * sit at h + REC_HDR: its whole length is REC_HDR + len + 1 + REC_TAG. */
int sh_ch_seal_record(sh_channel *ch, unsigned char *h, size_t len, unsigned char type)
{
	return sh_ch_seal_from(ch, h, h + REC_HDR, len, h + REC_HDR, h + REC_HDR + len, type);
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
			int rc =
				sh_net_wait(ch->fd, SHOAL_FD_OUT, fiber, sh_ch_bound(ch, deadline));
			if (rc)
				return rc;
			continue;
		}
		return k < 0 && (errno == EPIPE || errno == ECONNRESET) ? SHOAL_ECLOSED
									: shoal_errno();
	}
	return 0;
}

int sh_ch_push(sh_channel *ch, bool wait, bool fiber, int64_t deadline)
{
	int rc = push_bytes(ch, ch->wbuf, ch->wlen, &ch->wsent, wait, fiber, deadline);
	if (rc == 0)
		ch->wlen = ch->wsent = 0;
	return rc;
}

/* Seals one record of up to REC_PLAIN bytes gathered from the parts
 * (from part *i, offset *at, which advance) into wbuf; *len: its bytes.
 * Bytes of one part are encrypted from where they are; in clear, or
 * spread over parts, they are gathered into the record first. */
static int seal(sh_channel *ch, const sh_msg_part *parts, size_t n, size_t *i, size_t *at,
		size_t *len)
{
	*len = 0;
	for (size_t j = *i, off = *at; j < n && *len < REC_PLAIN; j++, off = 0) {
		size_t k = parts[j].n - off;
		*len += k < REC_PLAIN - *len ? k : REC_PLAIN - *len;
	}
	unsigned char *h = ch->wbuf + ch->wlen, *o = h + REC_HDR;
	const unsigned char *src = (const unsigned char *)parts[*i].p + *at;
	bool whole = parts[*i].n - *at >= *len;
	for (size_t left = *len; left;) {
		const unsigned char *p = (const unsigned char *)parts[*i].p + *at;
		size_t k = parts[*i].n - *at < left ? parts[*i].n - *at : left;
		if (!whole || !ch->encrypt)
			memcpy(o, p, k);
		o += k, left -= k, *at += k;
		if (*at == parts[*i].n)
			(*i)++, *at = 0;
	}
	while (*i < n && parts[*i].n == 0)
		(*i)++;
	int rc = whole && ch->encrypt ? sh_ch_seal_from(ch, h, src, *len, h + REC_HDR,
							h + REC_HDR + *len, REC_TYPE_DATA)
				      : sh_ch_seal_record(ch, h, *len, REC_TYPE_DATA);
	if (rc)
		return rc;
	ch->wlen += REC_OVER + *len;
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
				return sh_ch_fail(ch, SHOAL_EIO, "%s", "sealing a record failed");
			*done += len;
		}
		if (i == n && !flush)
			return 0;
		int rc = sh_ch_push(ch, wait, fiber, deadline);
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

int sh_channel_seal_record(sh_channel *ch, unsigned char type, const void *p, size_t n,
			   unsigned char *out, size_t *len)
{
	if (n > REC_PLAIN)
		return SHOAL_EINVAL;
	memcpy(out + REC_HDR, p, n);
	*len = REC_HDR + n + 1 + REC_TAG;
	return sh_ch_seal_record(ch, out, n, type);
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
		return sh_ch_fail(ch, SHOAL_EPROTO, "%s", what);
	}
	if (type == REC_TYPE_HANDSHAKE) {
		/* whole messages only, each [type, 3-byte length, body] */
		for (size_t i = 0; i + 4 <= n;) {
			size_t l =
				(size_t)body[i + 1] << 16 | (size_t)body[i + 2] << 8 | body[i + 3];
			if (l > n - i - 4)
				break;
			if (body[i] != 4) /* NewSessionTicket: we resume nothing */
				return sh_ch_fail(
					ch, SHOAL_EPROTO, "%s",
					body[i] == 24
						? "the peer asked for a KeyUpdate, which this "
						  "channel does not take: a new link has new keys"
						: "a TLS handshake message after the handshake");
			i += 4 + l;
			if (i == n)
				return 0;
		}
		return sh_ch_fail(ch, SHOAL_EPROTO, "%s", "a cut TLS handshake message");
	}
	char what[64];
	snprintf(what, sizeof(what), "a record of content type %d, expected data", type);
	return sh_ch_fail(ch, SHOAL_EBADMSG, "%s", what);
}

int sh_channel_open_record(sh_channel *ch, unsigned char *rec, size_t len, size_t *plain)
{
	if (len < REC_HDR + 1 + REC_TAG || rec[0] != REC_TYPE_DATA || rec[1] != 3 || rec[2] != 3 ||
	    ((size_t)rec[3] << 8 | rec[4]) != len - REC_HDR || len > REC_MAX)
		return sh_ch_fail(ch, SHOAL_EBADMSG, "%s", "a malformed record header");
	unsigned char iv[12], *body = rec + REC_HDR, *tag = rec + len - REC_TAG;
	size_t blen = len - REC_HDR - REC_TAG;
	int l;
	sh_ch_nonce(ch->rx_iv, ch->rx_seq, iv);
	int ok = EVP_DecryptInit_ex(ch->rx, NULL, NULL, NULL, iv) == 1 &&
		 EVP_CIPHER_CTX_ctrl(ch->rx, EVP_CTRL_AEAD_SET_TAG, REC_TAG, tag) == 1 &&
		 EVP_DecryptUpdate(ch->rx, NULL, &l, rec, REC_HDR) == 1 &&
		 (ch->encrypt ? EVP_DecryptUpdate(ch->rx, body, &l, body, (int)blen)
			      : EVP_DecryptUpdate(ch->rx, NULL, &l, body, (int)blen)) == 1 &&
		 EVP_DecryptFinal_ex(ch->rx, body + blen, &l) == 1;
	if (!ok)
		return sh_ch_fail(
			ch, SHOAL_EBADMSG,
			"a record failed its authentication (%s): the link was tampered with, "
			"replayed or reordered, or the peer's keys differ",
			ch->encrypt ? "AES-128-GCM" : "GMAC");
	ch->rx_seq++;
	/* the content type is the last byte that is not padding */
	size_t end = blen;
	while (end > 0 && body[end - 1] == 0)
		end--;
	if (end == 0)
		return sh_ch_fail(ch, SHOAL_EBADMSG, "%s", "a record of padding alone");
	unsigned char type = body[end - 1];
	if (type != REC_TYPE_DATA)
		return control_record(ch, type, body, end - 1, plain);
	*plain = end - 1;
	return 0;
}

/* Waits for bytes from the peer until deadline; moving: bytes are on
 * their way (a message began), so the stall bound and the least rate
 * apply too. */
int sh_ch_wait_in(sh_channel *ch, bool fiber, int64_t deadline, bool moving)
{
	int64_t until = moving ? sh_ch_bound(ch, deadline) : deadline;
	int64_t window_end = ch->win_start + ch->rate_ns;
	bool rated = ch->min_rate && moving && window_end < until;
	int rc = sh_net_wait(ch->fd, SHOAL_FD_IN, fiber, rated ? window_end : until);
	if (rc == SHOAL_ETIMEDOUT && rated)
		rc = sh_ch_rate_check(ch);
	return rc;
}

/* The next record's plaintext into rbuf[ppos, pend); started: bytes are
 * on their way (a frame began), so the stall bound applies; exact: read
 * no byte past that record (what follows it may go elsewhere). */
int sh_ch_next_record(sh_channel *ch, bool fiber, int64_t deadline, bool started, bool exact)
{
	for (;;) {
		size_t have = ch->rend - ch->rpos;
		if (have >= REC_HDR) {
			unsigned char *h = ch->rbuf + ch->rpos;
			size_t len = REC_HDR + ((size_t)h[3] << 8 | h[4]);
			if (len > REC_MAX || len < REC_HDR + 1 + REC_TAG || h[0] != REC_TYPE_DATA)
				return sh_ch_fail(ch, SHOAL_EBADMSG, "%s",
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
		size_t want = RBUF_BYTES - ch->rend;
		if (exact) {
			const unsigned char *h = ch->rbuf + ch->rpos;
			size_t need =
				have < REC_HDR ? REC_HDR : REC_HDR + ((size_t)h[3] << 8 | h[4]);
			want = need - have < want ? need - have : want;
		}
		ssize_t k = recv(ch->fd, ch->rbuf + ch->rend, want, MSG_DONTWAIT);
		if (k > 0) {
			ch->rend += (size_t)k;
			ch->rx_bytes += (uint64_t)k;
			int rc = sh_ch_rate_check(ch);
			if (rc)
				return rc;
			continue;
		}
		if (k == 0)
			return have ? sh_ch_fail(ch, SHOAL_EBADMSG, "%s",
						 "the stream ended inside a record: it was cut")
				    : SHOAL_ECLOSED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == ECONNRESET ? SHOAL_ECLOSED : shoal_errno();
		int rc = sh_ch_wait_in(ch, fiber, deadline, started || have);
		if (rc)
			return rc;
	}
}

int sh_ch_peek(sh_channel *ch, const unsigned char **p, size_t *n, bool fiber, int64_t deadline,
	       bool started)
{
	if (ch->broken)
		return ch->broken;
	if (ch->ppos == ch->pend) {
		int rc = sh_ch_next_record(ch, fiber, deadline, started, false);
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
	return sh_ch_peek(ch, p, n, fiber, deadline, true);
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
		int rc = sh_ch_peek(ch, &q, &k, fiber, *any ? SHOAL_FOREVER : deadline, *any);
		if (rc == SHOAL_ETIMEDOUT && *any)
			return sh_ch_fail(ch, rc, "%s",
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
bool sh_ch_record_at_hand(const sh_channel *ch)
{
	size_t have = ch->rend - ch->rpos;
	if (have < REC_HDR)
		return false;
	const unsigned char *h = ch->rbuf + ch->rpos;
	size_t len = (size_t)h[3] << 8 | h[4];
	/* one without plaintext would make peek read on */
	return len > 1 + REC_TAG && have >= REC_HDR + len;
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

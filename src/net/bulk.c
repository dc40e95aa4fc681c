/* Bulk bytes over the secure channel: an object's blobs sent from where
 * they lie and received where they go, the two ends of a migration
 * between stores. The records are the channel's (channel.c); what is
 * particular here is where their bytes come from and go to. Sending: from
 * a mapping (huge pages: in clear, only the records' headers and tags are
 * written, and sendmsg gathers them around the bytes) or read by the
 * kernel from a file into the records' places (4 KiB pages, which a
 * mapping would fault in one by one). Receiving: into the destination's
 * mapping when its pages are there, each record straight into its place
 * and opened there; else opened in the channel's buffer and written to
 * the file by a thread beside. */
#include "net/channel_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* ---- sending bulk bytes ---- */

/* Records a sendmsg carries: 1 MiB of bytes (a core's L2 here: sealed,
 * then sent while still there), 192 iovecs at most. */
#define SEND_RECORDS 64

/* Up to SEND_RECORDS records ready for the socket, named by iov. Bytes in
 * memory stay where they lie: in clear only their records' headers and
 * trailers are written (into buf), so the kernel's copy into the socket
 * is the only one; encrypted, the cipher reads them there and writes the
 * record into buf. Bytes of a file are read by the kernel into their
 * records' places in buf and sealed there. */
typedef struct sbatch {
	unsigned char *buf; /* SEND_RECORDS * REC_MAX */
	struct iovec iov[3 * SEND_RECORDS];
	size_t niov, used;
} sbatch;

/* Names the record just sealed at h (whole in buf, len bytes of
 * plaintext) for the socket. */
static void batch_add(const sh_channel *ch, sbatch *b, unsigned char *h, size_t len)
{
	b->used += REC_OVER + len;
	if (ch->encrypt) /* every record whole in buf, one after another */
		return;
	if (b->niov &&
	    (unsigned char *)b->iov[b->niov - 1].iov_base + b->iov[b->niov - 1].iov_len == h)
		b->iov[b->niov - 1].iov_len += REC_OVER + len;
	else
		b->iov[b->niov++] = (struct iovec){h, REC_OVER + len};
}

/* Records of part q from byte *at (which advances) read from its file
 * into their places in b, at most max of them, and sealed there. */
static int fill_from_file(sh_channel *ch, sbatch *b, const sh_bulk_part *q, uint64_t *at,
			  size_t max, size_t *nrec, char *why, size_t wl)
{
	struct iovec rv[SEND_RECORDS];
	size_t m = 0;
	uint64_t want = 0, left = q->len - *at;
	for (; m < max && want < left; m++) {
		size_t len = left - want < REC_PLAIN ? (size_t)(left - want) : REC_PLAIN;
		rv[m] = (struct iovec){b->buf + b->used + m * REC_MAX + REC_HDR, len};
		want += len;
	}
	ssize_t got;
	while ((got = preadv(q->fd, rv, (int)m, (off_t)(q->off + *at))) < 0 && errno == EINTR)
		;
	if (got <= 0) {
		snprintf(why, wl, "reading the bytes to send failed: %s",
			 got < 0 ? strerror(errno) : "the file ended first");
		return got < 0 ? shoal_errno() : SHOAL_EIO;
	}
	/* the records stay one after another: only the last one read may be
	 * short */
	*nrec = 0;
	for (size_t j = 0, rest = (size_t)got; rest; j++) {
		size_t len = rest < rv[j].iov_len ? rest : rv[j].iov_len;
		unsigned char *h = b->buf + b->used;
		if (sh_ch_seal_record(ch, h, len, REC_TYPE_DATA) != 0) {
			snprintf(why, wl, "sealing a record failed");
			return SHOAL_EIO;
		}
		batch_add(ch, b, h, len);
		++*nrec;
		rest -= len;
		*at += len;
	}
	return 0;
}

/* Seals the next records of the parts (from part *pi, byte *at, which
 * advance) into b: a record never spans two parts, so a receiver that
 * knows the parts' sizes knows where each record begins. */
static int fill_batch(sh_channel *ch, sbatch *b, const sh_bulk_part *parts, size_t np, size_t *pi,
		      uint64_t *at, char *why, size_t wl)
{
	size_t k = 0;
	b->niov = b->used = 0;
	while (k < SEND_RECORDS && *pi < np) {
		const sh_bulk_part *q = &parts[*pi];
		if (*at == q->len) {
			(*pi)++, *at = 0;
			continue;
		}
		if (!q->p) {
			size_t n = 0;
			int rc = fill_from_file(ch, b, q, at, SEND_RECORDS - k, &n, why, wl);
			if (rc)
				return rc;
			k += n;
			continue;
		}
		size_t len = q->len - *at < REC_PLAIN ? (size_t)(q->len - *at) : REC_PLAIN;
		const unsigned char *p = (const unsigned char *)q->p + *at;
		unsigned char *h = b->buf + b->used;
		int rc;
		if (ch->encrypt) {
			rc = sh_ch_seal_from(ch, h, p, len, h + REC_HDR, h + REC_HDR + len,
					     REC_TYPE_DATA);
			b->used += REC_OVER + len;
		} else {
			rc = sh_ch_seal_from(ch, h, p, len, NULL, h + REC_HDR, REC_TYPE_DATA);
			b->iov[b->niov++] = (struct iovec){h, REC_HDR};
			b->iov[b->niov++] = (struct iovec){(void *)p, len};
			b->iov[b->niov++] = (struct iovec){h + REC_HDR, 1 + REC_TAG};
			b->used += REC_OVER;
		}
		if (rc) {
			snprintf(why, wl, "sealing a record failed");
			return SHOAL_EIO;
		}
		*at += len;
		k++;
	}
	if (ch->encrypt && b->used)
		b->iov[b->niov++] = (struct iovec){b->buf, b->used};
	return 0;
}

/* Sends what iov names (changing it as it goes). */
static int push_iov(sh_channel *ch, struct iovec *iov, size_t n, int64_t deadline)
{
	while (n) {
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n};
		ssize_t k = sendmsg(ch->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k >= 0) {
			for (size_t left = (size_t)k; n && (left || !iov->iov_len);) {
				size_t t = left < iov->iov_len ? left : iov->iov_len;
				iov->iov_base = (unsigned char *)iov->iov_base + t;
				iov->iov_len -= t;
				left -= t;
				if (!iov->iov_len)
					iov++, n--;
			}
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int rc =
				sh_net_wait(ch->fd, SHOAL_FD_OUT, false, sh_ch_bound(ch, deadline));
			if (rc)
				return rc;
			continue;
		}
		return errno == EPIPE || errno == ECONNRESET ? SHOAL_ECLOSED : shoal_errno();
	}
	return 0;
}

/* One thread seals and sends in turn: on two cores a thread that sealed
 * while another sent cost more in hand-overs (and a core's cache lines
 * moving to the other) than it overlapped (measured: 2.5 GB/s against
 * 1.9 between two stores on loopback, and a third more CPU a byte). */
int sh_channel_send_bulk(sh_channel *ch, const sh_bulk_part *parts, size_t np, int64_t deadline)
{
	if (ch->broken)
		return ch->broken;
	int rc = sh_ch_push(ch, true, false, deadline); /* what came before, first */
	if (rc)
		return rc;
	sbatch *b = SH_NEW(sbatch);
	if (!b || !(b->buf = shoal_alloc(SEND_RECORDS * REC_MAX))) {
		if (b)
			SH_DELETE(b);
		return SHOAL_ENOMEM;
	}
	size_t pi = 0;
	uint64_t at = 0;
	char why[160];
	while (rc == 0 && pi < np) {
		if ((rc = fill_batch(ch, b, parts, np, &pi, &at, why, sizeof(why))) != 0)
			rc = sh_ch_fail(ch, rc, "%s", why);
		else if ((rc = push_iov(ch, b->iov, b->niov, deadline)) != 0)
			ch->broken = rc; /* records went out of step with the socket */
	}
	shoal_free(b->buf, SEND_RECORDS * REC_MAX);
	SH_DELETE(b);
	return rc;
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

static int recv_to_file(sh_channel *ch, int fd, const sh_fd_range *r, size_t nr, int64_t deadline,
			_Atomic uint64_t *got)
{
	uint64_t total = 0;
	for (size_t i = 0; i < nr; i++)
		total += r[i].len;
	writer *w = SH_NEW(writer);
	if (!w)
		return SHOAL_ENOMEM;
	w->fd = fd;
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
		if (b->nruns < RUNS_MAX && (ch->ppos < ch->pend || sh_ch_record_at_hand(ch))) {
			const unsigned char *p;
			size_t m;
			if ((rc = sh_ch_peek(ch, &p, &m, false, SHOAL_FOREVER, true)) != 0)
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
		if (ch->ppos < ch->pend || sh_ch_record_at_hand(ch))
			continue;
		const unsigned char *p;
		size_t m;
		rc = sh_ch_peek(ch, &p, &m, false, deadline, true);
		if (rc == SHOAL_ETIMEDOUT)
			rc = sh_ch_fail(ch, rc, "%s",
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
		rc = sh_ch_fail(ch, w->rc, "%s", w->why);
	for (int i = 0; i < w->nfree; i++)
		if (w->free_bufs[i])
			shoal_free(w->free_bufs[i], RBUF_BYTES);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	SH_DELETE(w);
	return rc;
}

/* ---- receiving into memory ---- */

/* Where pages exist to take them (a mapping of huge pages, or of a
 * spare), records are received straight into their places: a recvmsg
 * puts each record's header and trailer (type and tag) beside, in a
 * batch's side buffer, and its bytes where they go, and they are opened
 * there (checked in clear, decrypted in place). That they go there before
 * they are checked is safe because the memory is the receiver's alone
 * until the whole transfer checked out. The records are where the sender
 * cuts them (sh_channel_send_bulk): at most SH_CHANNEL_RECORD bytes,
 * never across two ranges; one cut otherwise fails the channel, as a
 * record failing its check would. */
#define DIRECT_RECORDS 16

typedef struct rbatch {
	unsigned char side[DIRECT_RECORDS * REC_OVER];
	unsigned char *at[DIRECT_RECORDS];
	size_t len[DIRECT_RECORDS];
	size_t n;
	uint64_t seq; /* the first record's number */
} rbatch;

/* Whether the header at h is that of a data record of len bytes, the
 * record a shoal sender sends there; else why says what came. */
static bool header_is(const unsigned char *h, size_t len, char *why, size_t wl)
{
	size_t rlen = len + 1 + REC_TAG, got = (size_t)h[3] << 8 | h[4];
	if (h[0] == REC_TYPE_DATA && h[1] == 3 && h[2] == 3 && got == rlen)
		return true;
	snprintf(why, wl,
		 "a record of %zu bytes (type %d) where one of %zu was expected: the peer cut its "
		 "bytes otherwise than a shoal sender does",
		 got, h[0], rlen);
	return false;
}

/* Checks (in clear) or decrypts in place (encrypted) the records of b,
 * whose headers were checked as they came; why says what failed. */
static int open_batch(sh_channel *ch, rbatch *b, uint64_t *bytes, char *why, size_t wl)
{
	*bytes = 0;
	for (size_t k = 0; k < b->n; k++) {
		unsigned char *h = b->side + k * REC_OVER, *t = h + REC_HDR, iv[12];
		size_t len = b->len[k];
		sh_ch_nonce(ch->rx_iv, b->seq + k, iv);
		int l, ok = EVP_DecryptInit_ex(ch->rx, NULL, NULL, NULL, iv) == 1 &&
			    EVP_CIPHER_CTX_ctrl(ch->rx, EVP_CTRL_AEAD_SET_TAG, REC_TAG, t + 1) ==
				    1 &&
			    EVP_DecryptUpdate(ch->rx, NULL, &l, h, REC_HDR) == 1;
		if (ch->encrypt)
			ok = ok &&
			     (len == 0 ||
			      EVP_DecryptUpdate(ch->rx, b->at[k], &l, b->at[k], (int)len) == 1) &&
			     EVP_DecryptUpdate(ch->rx, t, &l, t, 1) == 1;
		else
			ok = ok &&
			     (len == 0 ||
			      EVP_DecryptUpdate(ch->rx, NULL, &l, b->at[k], (int)len) == 1) &&
			     EVP_DecryptUpdate(ch->rx, NULL, &l, t, 1) == 1;
		ok = ok && EVP_DecryptFinal_ex(ch->rx, t + 1, &l) == 1;
		if (!ok) {
			snprintf(why, wl,
				 "a record failed its authentication (%s): the link was tampered "
				 "with, replayed or reordered, or the peer's keys differ",
				 ch->encrypt ? "AES-128-GCM" : "GMAC");
			return SHOAL_EBADMSG;
		}
		if (t[0] != REC_TYPE_DATA) {
			snprintf(why, wl, "a record other than data in the middle of the bytes");
			return SHOAL_EBADMSG;
		}
		*bytes += len;
	}
	return 0;
}

/* Receives the records of b whole: iov (3 a record: header, bytes,
 * trailer) names their places. Each header is checked once it is in, so
 * that a peer that cuts its bytes otherwise fails at once rather than
 * leaving the batch waiting for bytes that will not come. */
static int recv_batch(sh_channel *ch, rbatch *b, struct iovec *iov, size_t n, int64_t deadline)
{
	size_t i = 0, checked = 0;
	char why[200];
	while (i < n) {
		struct msghdr mh = {.msg_iov = iov + i, .msg_iovlen = n - i};
		ssize_t k = recvmsg(ch->fd, &mh, MSG_DONTWAIT);
		if (k > 0) {
			ch->rx_bytes += (uint64_t)k;
			for (size_t left = (size_t)k; i < n && left;) {
				size_t t = left < iov[i].iov_len ? left : iov[i].iov_len;
				iov[i].iov_base = (unsigned char *)iov[i].iov_base + t;
				iov[i].iov_len -= t;
				left -= t;
				if (!iov[i].iov_len)
					i++;
			}
			for (; checked < b->n && i > 3 * checked; checked++)
				if (!header_is(b->side + checked * REC_OVER, b->len[checked], why,
					       sizeof(why)))
					return sh_ch_fail(ch, SHOAL_EBADMSG, "%s", why);
			int rc = sh_ch_rate_check(ch);
			if (rc)
				return rc;
			continue;
		}
		if (k == 0)
			return sh_ch_fail(
				ch, SHOAL_EBADMSG, "%s",
				"the stream ended inside the bytes it announced: it was cut");
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == ECONNRESET ? SHOAL_ECLOSED : shoal_errno();
		int rc = sh_ch_wait_in(ch, false, deadline, true);
		if (rc == SHOAL_ETIMEDOUT)
			rc = sh_ch_fail(ch, rc, "%s",
					"the peer stopped sending in the middle of the bytes");
		if (rc)
			return rc;
	}
	return 0;
}

/* What the channel holds already (opened plaintext, a record received
 * whole or in part) goes to the ranges by copy, reading no byte past the
 * record it ends in: what follows may then be received in place. */
static int drain_into(sh_channel *ch, unsigned char *map, const sh_fd_range *r, size_t nr,
		      size_t *ri, uint64_t *roff, int64_t deadline, _Atomic uint64_t *got)
{
	for (;;) {
		while (ch->ppos < ch->pend && *ri < nr) {
			size_t m = ch->pend - ch->ppos;
			m = m < r[*ri].len - *roff ? m : (size_t)(r[*ri].len - *roff);
			memcpy(map + r[*ri].off + *roff, ch->rbuf + ch->ppos, m);
			atomic_fetch_add(got, m);
			ch->ppos += m;
			if ((*roff += m) == r[*ri].len)
				++*ri, *roff = 0;
		}
		if (*ri == nr)
			return 0;
		if (ch->rpos == ch->rend) {
			ch->rpos = ch->rend = ch->ppos = ch->pend = 0;
			return 0;
		}
		int rc = sh_ch_next_record(ch, false, deadline, true, true);
		if (rc == SHOAL_ETIMEDOUT)
			rc = sh_ch_fail(ch, rc, "%s",
					"the peer stopped sending in the middle of the bytes");
		if (rc)
			return rc;
	}
}

/* One thread receives a batch and opens it, in turn (as send_bulk seals
 * and sends): the batch is still in this core's cache when it is opened. */
static int recv_to_map(sh_channel *ch, unsigned char *map, const sh_fd_range *r, size_t nr,
		       int64_t deadline, _Atomic uint64_t *got)
{
	size_t ri = 0;
	uint64_t roff = 0;
	int rc = drain_into(ch, map, r, nr, &ri, &roff, deadline, got);
	if (rc || ri == nr)
		return rc;
	rbatch *b = SH_NEW(rbatch);
	if (!b)
		return SHOAL_ENOMEM;
	struct iovec iov[3 * DIRECT_RECORDS];
	char why[200];
	while (rc == 0 && ri < nr) {
		b->n = 0;
		b->seq = ch->rx_seq;
		size_t ni = 0;
		while (b->n < DIRECT_RECORDS && ri < nr) {
			if (roff == r[ri].len) {
				ri++, roff = 0;
				continue;
			}
			size_t len = r[ri].len - roff < REC_PLAIN ? (size_t)(r[ri].len - roff)
								  : REC_PLAIN;
			unsigned char *h = b->side + b->n * REC_OVER;
			b->at[b->n] = map + r[ri].off + roff;
			b->len[b->n++] = len;
			iov[ni++] = (struct iovec){h, REC_HDR};
			iov[ni++] = (struct iovec){map + r[ri].off + roff, len};
			iov[ni++] = (struct iovec){h + REC_HDR, 1 + REC_TAG};
			if ((roff += len) == r[ri].len)
				ri++, roff = 0;
		}
		if (!b->n)
			break;
		if ((rc = recv_batch(ch, b, iov, ni, deadline)) != 0)
			break;
		ch->rx_seq += b->n;
		uint64_t bytes;
		if ((rc = open_batch(ch, b, &bytes, why, sizeof(why))) == 0)
			atomic_fetch_add(got, bytes);
		else
			rc = sh_ch_fail(ch, rc, "%s", why);
	}
	if (rc && !ch->broken)
		ch->broken = rc; /* out of step with the stream */
	SH_DELETE(b);
	return rc;
}

int sh_channel_recv_ranges(sh_channel *ch, int fd, unsigned char *map, const sh_fd_range *r,
			   size_t nr, int64_t deadline, _Atomic uint64_t *got)
{
	if (ch->broken)
		return ch->broken;
	return map ? recv_to_map(ch, map, r, nr, deadline, got)
		   : recv_to_file(ch, fd, r, nr, deadline, got);
}

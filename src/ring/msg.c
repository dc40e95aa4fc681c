/* Messages larger than a ring record: written as consecutive records and
 * read back whole, or, out of band, read straight into their parts. The
 * frame header's length says how much follows; it is bounded (SH_MSG_MAX)
 * and every record must fit what is still owed. */
#include "ring/msg.h"

#include <string.h>

/* The largest record a message is cut into: an eighth of the ring, so
 * that both sides copy at once (one record being filled, others being
 * drained) instead of taking turns over the whole ring. */
static size_t chunk(const sh_ring *r)
{
	size_t max = sh_ring_max_payload(r) / 8;
	return max < 4096 ? sh_ring_max_payload(r) : max;
}

/* Inside a message the peer is busy copying the next record (or the last
 * one out): it is worth spinning that long rather than paying a futex
 * wake-up (20-115 us here) per record. */
#define STREAM_SPIN_NS 200000

static uint32_t stream_spin(sh_ring *r)
{
	uint32_t was = r->spin_ns;
	if (was < STREAM_SPIN_NS)
		r->spin_ns = STREAM_SPIN_NS;
	return was;
}

int sh_msg_write_part(sh_ring *r, const void *p, size_t len, size_t *done, int64_t deadline)
{
	if (len > SH_MSG_MAX)
		return SHOAL_EMSGSIZE;
	size_t max = chunk(r);
	const unsigned char *b = p;
	uint32_t spin = r->spin_ns;
	int rc = 0;
	do {
		size_t k = len - *done < max ? len - *done : max;
		if ((rc = sh_ring_write(r, b + *done, k, deadline)) != 0)
			break;
		*done += k;
		stream_spin(r);
	} while (*done < len);
	r->spin_ns = spin;
	return rc;
}

int sh_msg_write(sh_ring *r, const void *p, size_t len, int64_t deadline)
{
	size_t done = 0;
	return sh_msg_write_part(r, p, len, &done, deadline);
}

static int reserve(unsigned char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	unsigned char *p = shoal_realloc(*buf, *cap, need);
	if (!p)
		return SHOAL_ENOMEM;
	*buf = p;
	*cap = need;
	return 0;
}

/* The length of the message whose first record is rec (n bytes). */
static size_t claimed(const void *rec, size_t n)
{
	size_t t = n;
	if (n >= SH_MSG_HDR) {
		uint32_t body;
		memcpy(&body, (const unsigned char *)rec + SH_MSG_LEN_AT, 4);
		t = SH_MSG_HDR + (size_t)body;
		if (t < n)
			t = n; /* the frame decoder will say what is wrong */
	}
	return t;
}

int sh_msg_peek_total(sh_ring *r, size_t *total, int64_t deadline)
{
	const void *rec;
	size_t n;
	int rc = sh_ring_peek(r, &rec, &n, deadline);
	if (rc == 0)
		*total = claimed(rec, n);
	return rc;
}

int sh_msg_read_part(sh_ring *r, unsigned char **buf, size_t *cap, size_t *got, size_t *total,
		     size_t max, int64_t deadline)
{
	const void *rec;
	size_t n;
	int rc;
	if (*got == 0) {
		if ((rc = sh_ring_peek(r, &rec, &n, deadline)) != 0)
			return rc;
		size_t t = claimed(rec, n);
		if (t > max || t > SH_MSG_MAX) {
			sh_ring_release(r);
			return SHOAL_EMSGSIZE;
		}
		/* A private copy: the peer may still write the ring. */
		if ((rc = reserve(buf, cap, t ? t : 1)) != 0) {
			sh_ring_release(r);
			return rc;
		}
		memcpy(*buf, rec, n);
		sh_ring_release(r);
		*got = n;
		*total = t;
	}
	uint32_t spin = stream_spin(r);
	while (*got < *total) {
		if ((rc = sh_ring_peek(r, &rec, &n, deadline)) != 0)
			break;
		if (n > *total - *got) {
			sh_ring_release(r);
			rc = SHOAL_EPROTO;
			break;
		}
		memcpy(*buf + *got, rec, n);
		sh_ring_release(r);
		*got += n;
	}
	r->spin_ns = spin;
	return rc;
}

int sh_msg_read(sh_ring *r, unsigned char **buf, size_t *cap, size_t *len, int64_t deadline)
{
	size_t got = 0;
	return sh_msg_read_part(r, buf, cap, &got, len, SH_MSG_MAX, deadline);
}

int sh_msg_write_parts(sh_ring *r, const sh_msg_part *v, size_t n, int64_t deadline)
{
	size_t max = chunk(r), i = 0, at = 0; /* at: bytes of v[i] already sent */
	uint32_t spin = stream_spin(r);
	int rc = 0;
	while (i < n && v[i].n == 0)
		i++;
	while (i < n && rc == 0) {
		size_t want = 0;
		for (size_t j = i, a = at; j < n && want < max; j++, a = 0)
			want += v[j].n - a < max - want ? v[j].n - a : max - want;
		void *rec;
		if ((rc = sh_ring_reserve(r, want, &rec, deadline)) != 0)
			break;
		unsigned char *o = rec;
		for (size_t left = want; left;) {
			size_t k = v[i].n - at < left ? v[i].n - at : left;
			memcpy(o, (const unsigned char *)v[i].p + at, k);
			o += k;
			left -= k;
			if ((at += k) == v[i].n) {
				at = 0;
				while (++i < n && v[i].n == 0)
					;
			}
		}
		sh_ring_commit(r, want);
	}
	r->spin_ns = spin;
	return rc;
}

int sh_msg_read_parts(sh_ring *r, const sh_msg_part *v, size_t n, int64_t deadline)
{
	size_t owed = 0, i = 0, at = 0;
	for (size_t j = 0; j < n; j++)
		owed += v[j].n;
	uint32_t spin = stream_spin(r);
	int rc = 0;
	while (owed) {
		const void *rec;
		size_t len;
		if ((rc = sh_ring_peek(r, &rec, &len, deadline)) != 0)
			break;
		if (len > owed || len == 0) {
			sh_ring_release(r);
			rc = SHOAL_EPROTO;
			break;
		}
		owed -= len;
		for (const unsigned char *s = rec; len;) {
			while (v[i].n == at)
				i++, at = 0;
			size_t k = v[i].n - at < len ? v[i].n - at : len;
			if (v[i].p)
				memcpy((unsigned char *)v[i].p + at, s, k);
			s += k;
			len -= k;
			at += k;
		}
		sh_ring_release(r);
	}
	r->spin_ns = spin;
	return rc;
}

void sh_msg_trim(unsigned char **buf, size_t *cap)
{
	if (*cap > SH_MSG_BUF_KEEP) {
		shoal_free(*buf, *cap);
		*buf = NULL;
		*cap = 0;
	}
}

/* Messages larger than a ring record: written as consecutive records and
 * read back whole. The frame header's length says how much follows; it is
 * bounded (SH_MSG_MAX) and every record must fit what is still owed. */
#include "ring/msg.h"

#include <string.h>

int sh_msg_write_part(sh_ring *r, const void *p, size_t len, size_t *done, int64_t deadline)
{
	if (len > SH_MSG_MAX)
		return SHOAL_EMSGSIZE;
	size_t max = sh_ring_max_payload(r);
	const unsigned char *b = p;
	do {
		size_t k = len - *done < max ? len - *done : max;
		int rc = sh_ring_write(r, b + *done, k, deadline);
		if (rc)
			return rc;
		*done += k;
	} while (*done < len);
	return 0;
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

int sh_msg_read_part(sh_ring *r, unsigned char **buf, size_t *cap, size_t *got, size_t *total,
		     size_t max, int64_t deadline)
{
	const void *rec;
	size_t n;
	int rc;
	if (*got == 0) {
		if ((rc = sh_ring_peek(r, &rec, &n, deadline)) != 0)
			return rc;
		size_t t = n;
		if (n >= SH_MSG_HDR) {
			uint32_t body;
			memcpy(&body, (const unsigned char *)rec + SH_MSG_LEN_AT, 4);
			t = SH_MSG_HDR + (size_t)body;
			if (t < n)
				t = n; /* the frame decoder will say what is wrong */
		}
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
	while (*got < *total) {
		if ((rc = sh_ring_peek(r, &rec, &n, deadline)) != 0)
			return rc;
		if (n > *total - *got) {
			sh_ring_release(r);
			return SHOAL_EPROTO;
		}
		memcpy(*buf + *got, rec, n);
		sh_ring_release(r);
		*got += n;
	}
	return 0;
}

int sh_msg_read(sh_ring *r, unsigned char **buf, size_t *cap, size_t *len, int64_t deadline)
{
	size_t got = 0;
	return sh_msg_read_part(r, buf, cap, &got, len, SH_MSG_MAX, deadline);
}

void sh_msg_trim(unsigned char **buf, size_t *cap)
{
	if (*cap > SH_MSG_BUF_KEEP) {
		shoal_free(*buf, *cap);
		*buf = NULL;
		*cap = 0;
	}
}

/* Frames, the write buffer and the strict msgpack cursor. See wire.h for
 * why the reader is our own: every length and count is checked against
 * the bytes that are actually there before anything is trusted or
 * allocated. */
#include "wire/wire.h"
#include "ring/msg.h"

#include <stdio.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "frame headers are little-endian");
_Static_assert(SH_FRAME_HDR == SH_MSG_HDR, "ring/msg.h knows the header's size");

/* Header layout: magic u32, version u16, op u16, flags u16, reserved u16,
 * seq u32, status i32, body_len u32. */
void sh_frame_encode(const sh_frame *f, void *out)
{
	unsigned char *p = out;
	uint32_t magic = SH_WIRE_MAGIC;
	uint16_t version = SH_WIRE_VERSION, reserved = 0;
	memcpy(p, &magic, 4);
	memcpy(p + 4, &version, 2);
	memcpy(p + 6, &f->op, 2);
	memcpy(p + 8, &f->flags, 2);
	memcpy(p + 10, &reserved, 2);
	memcpy(p + 12, &f->seq, 4);
	memcpy(p + 16, &f->status, 4);
	memcpy(p + 20, &f->body_len, 4);
}

int sh_frame_decode(const void *buf, size_t len, sh_frame *f, char *why, size_t whylen)
{
	const unsigned char *p = buf;
	if (len < SH_FRAME_HDR) {
		snprintf(why, whylen, "frame of %zu bytes: expected at least a %d-byte header", len,
			 SH_FRAME_HDR);
		return SHOAL_EBADMSG;
	}
	uint32_t magic;
	uint16_t version, reserved;
	memcpy(&magic, p, 4);
	memcpy(&version, p + 4, 2);
	memcpy(&f->op, p + 6, 2);
	memcpy(&f->flags, p + 8, 2);
	memcpy(&reserved, p + 10, 2);
	memcpy(&f->seq, p + 12, 4);
	memcpy(&f->status, p + 16, 4);
	memcpy(&f->body_len, p + 20, 4);
	if (magic != SH_WIRE_MAGIC) {
		snprintf(why, whylen, "frame magic 0x%08x, expected 0x%08x", magic, SH_WIRE_MAGIC);
		return SHOAL_EBADMSG;
	}
	if (version != SH_WIRE_VERSION) {
		snprintf(why, whylen, "frame version %u, expected %u", version, SH_WIRE_VERSION);
		return SHOAL_EBADMSG;
	}
	uint16_t known = SH_FRAME_NOREPLY | SH_FRAME_SHARED | SH_FRAME_OOB;
	if (reserved != 0 || (f->flags & ~known) != 0) {
		snprintf(why, whylen, "frame flags 0x%x reserved 0x%x, expected flags within 0x%x",
			 f->flags, reserved, known);
		return SHOAL_EBADMSG;
	}
	if (f->status > 0) {
		snprintf(why, whylen, "frame status %d, expected 0 or a negative code", f->status);
		return SHOAL_EBADMSG;
	}
	if ((size_t)f->body_len != len - SH_FRAME_HDR) {
		snprintf(why, whylen, "frame body_len %u, but %zu bytes follow the header",
			 f->body_len, len - SH_FRAME_HDR);
		return SHOAL_EBADMSG;
	}
	f->oob = 0;
	if (f->flags & SH_FRAME_OOB) {
		if (f->body_len < 8) {
			snprintf(why, whylen,
				 "frame body of %u bytes, expected at least the 8 of its "
				 "out-of-band count",
				 f->body_len);
			return SHOAL_EBADMSG;
		}
		f->body_len -= 8;
		memcpy(&f->oob, p + SH_FRAME_HDR + f->body_len, 8);
		if (f->oob == 0) {
			snprintf(why, whylen, "frame flagged out-of-band, but with 0 bytes of it");
			return SHOAL_EBADMSG;
		}
	}
	return 0;
}

/* ---- sh_wbuf ---- */

void sh_wbuf_init(sh_wbuf *w)
{
	memset(w, 0, sizeof(*w));
}

void sh_wbuf_fini(sh_wbuf *w)
{
	if (w->p)
		shoal_free(w->p, w->cap);
	if (w->oob)
		shoal_free(w->oob, w->cap_oob * sizeof(*w->oob));
	if (w->refs)
		shoal_free(w->refs, w->cap_refs * sizeof(*w->refs));
	if (w->gather)
		shoal_free(w->gather, w->cap_gather * sizeof(*w->gather));
	memset(w, 0, sizeof(*w));
}

void sh_wbuf_reset(sh_wbuf *w)
{
	w->len = 0;
	w->err = 0;
	w->noob = 0;
	w->oob_bytes = 0;
	w->nrefs = 0;
	w->ref_bytes = 0;
}

int sh_wbuf_oob(sh_wbuf *w, const void *p, size_t n)
{
	if (w->err)
		return w->err;
	if (sh_grow_array((void **)&w->oob, &w->cap_oob, w->noob, sizeof(*w->oob)) != 0)
		return w->err = SHOAL_ENOMEM;
	w->oob[w->noob++] = (sh_msg_part){(void *)p, n};
	w->oob_bytes += n;
	return 0;
}

int sh_wbuf_ref(sh_wbuf *w, const void *p, size_t n)
{
	if (w->err)
		return w->err;
	if (n == 0)
		return 0;
	if (w->len + w->ref_bytes + n > UINT32_MAX)
		return w->err = SHOAL_EOVERFLOW;
	if (sh_grow_array((void **)&w->refs, &w->cap_refs, w->nrefs, sizeof(*w->refs)) != 0)
		return w->err = SHOAL_ENOMEM;
	w->refs[w->nrefs++] = (struct sh_wref){w->len, p, n};
	w->ref_bytes += n;
	return 0;
}

int sh_wbuf_gather(sh_wbuf *w, const sh_msg_part **parts, uint32_t *n)
{
	if (sh_grow_to((void **)&w->gather, &w->cap_gather, 2 * w->nrefs + 1, sizeof(*w->gather)) !=
	    0)
		return SHOAL_ENOMEM;
	uint32_t k = 0;
	size_t from = 0;
	for (uint32_t i = 0; i < w->nrefs; i++) {
		if (w->refs[i].at > from)
			w->gather[k++] = (sh_msg_part){w->p + from, w->refs[i].at - from};
		w->gather[k++] = (sh_msg_part){(void *)w->refs[i].p, w->refs[i].n};
		from = w->refs[i].at;
	}
	if (w->len > from)
		w->gather[k++] = (sh_msg_part){w->p + from, w->len - from};
	*parts = w->gather;
	*n = k;
	return 0;
}

int sh_frame_send(sh_ring *r, const sh_wbuf *w, int64_t deadline)
{
	SH_ASSERT(w->nrefs == 0); /* those go by sh_wbuf_gather */
	int rc = sh_msg_write(r, w->p, w->len, deadline);
	if (rc == 0 && w->noob)
		rc = sh_msg_write_parts(r, w->oob, w->noob, deadline);
	return rc;
}

int sh_wbuf_append(sh_wbuf *w, const void *p, size_t n)
{
	if (w->err)
		return w->err;
	size_t need;
	if (shoal_add_size(w->len, n, &need) != 0 || need > UINT32_MAX)
		return w->err = SHOAL_EOVERFLOW;
	if (need > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < need)
			cap *= 2;
		unsigned char *q = shoal_realloc(w->p, w->cap, cap);
		if (!q)
			return w->err = SHOAL_ENOMEM;
		w->p = q;
		w->cap = cap;
	}
	if (n)
		memcpy(w->p + w->len, p, n);
	w->len = need;
	return 0;
}

static int wbuf_write(void *data, const char *buf, size_t len)
{
	return sh_wbuf_append(data, buf, len) == 0 ? 0 : -1;
}

void sh_wbuf_packer(sh_wbuf *w, msgpack_packer *pk)
{
	msgpack_packer_init(pk, w, wbuf_write);
}

void sh_wbuf_frame_begin(sh_wbuf *w)
{
	static const unsigned char zero[SH_FRAME_HDR];
	sh_wbuf_reset(w);
	sh_wbuf_append(w, zero, sizeof(zero));
}

int sh_wbuf_frame_end(sh_wbuf *w, sh_frame *f)
{
	if (w->err)
		return w->err;
	SH_ASSERT(w->len >= SH_FRAME_HDR);
	if (w->oob_bytes) {
		int rc = sh_wbuf_append(w, &w->oob_bytes, 8);
		if (rc)
			return rc;
		f->flags |= SH_FRAME_OOB;
	}
	if (w->len - SH_FRAME_HDR + w->ref_bytes > UINT32_MAX)
		return w->err = SHOAL_EOVERFLOW;
	f->body_len = (uint32_t)(w->len - SH_FRAME_HDR + w->ref_bytes);
	sh_frame_encode(f, w->p);
	return 0;
}

void sh_mp_pack_cstr(msgpack_packer *pk, const char *s)
{
	if (!s) {
		msgpack_pack_nil(pk);
		return;
	}
	size_t n = strlen(s);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

/* ---- sh_mp ---- */

static inline uint64_t be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static int fail(sh_mp *m)
{
	m->err = SHOAL_EBADMSG;
	m->p = m->end;
	return SHOAL_EBADMSG;
}

/* Consumes the type byte and an n-byte big-endian argument. */
static int take(sh_mp *m, int n, uint64_t *v)
{
	if (m->err || sh_mp_left(m) < (size_t)1 + (size_t)n)
		return fail(m);
	*v = be(m->p + 1, n);
	m->p += 1 + n;
	return 0;
}

int sh_mp_kind(const sh_mp *m)
{
	if (m->err || m->p >= m->end)
		return SH_MP_NONE;
	unsigned b = *m->p;
	if (b <= 0x7f || (b >= 0xcc && b <= 0xcf))
		return SH_MP_UINT;
	if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3))
		return SH_MP_INT; /* int8..64 may still hold a non-negative value */
	if (b <= 0x8f || b == 0xde || b == 0xdf)
		return SH_MP_MAP;
	if (b <= 0x9f || b == 0xdc || b == 0xdd)
		return SH_MP_ARRAY;
	if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
		return SH_MP_STR;
	switch (b) {
	case 0xc0:
		return SH_MP_NIL;
	case 0xc2:
	case 0xc3:
		return SH_MP_BOOL;
	case 0xc4:
	case 0xc5:
	case 0xc6:
		return SH_MP_BIN;
	case 0xca:
	case 0xcb:
		return SH_MP_FLOAT;
	case 0xc7:
	case 0xc8:
	case 0xc9:
	case 0xd4:
	case 0xd5:
	case 0xd6:
	case 0xd7:
	case 0xd8:
		return SH_MP_EXT;
	}
	return SH_MP_NONE; /* 0xc1 */
}

static int container(sh_mp *m, uint32_t *n, unsigned fix, unsigned b16)
{
	if (m->err || m->p >= m->end)
		return fail(m);
	unsigned b = *m->p;
	uint64_t v;
	if ((b & 0xf0) == fix) {
		v = b & 0x0f;
		m->p++;
	} else if (b == b16) {
		if (take(m, 2, &v))
			return m->err;
	} else if (b == b16 + 1) {
		if (take(m, 4, &v))
			return m->err;
	} else {
		return fail(m);
	}
	/* Every element takes a byte at least (two for a map entry). */
	uint64_t min = fix == 0x80 ? v * 2 : v;
	if (min > sh_mp_left(m))
		return fail(m);
	*n = (uint32_t)v;
	return 0;
}

int sh_mp_array(sh_mp *m, uint32_t *n)
{
	return container(m, n, 0x90, 0xdc);
}

int sh_mp_map(sh_mp *m, uint32_t *n)
{
	return container(m, n, 0x80, 0xde);
}

int sh_mp_nil(sh_mp *m)
{
	if (sh_mp_kind(m) != SH_MP_NIL)
		return fail(m);
	m->p++;
	return 0;
}

bool sh_mp_take_nil(sh_mp *m)
{
	if (sh_mp_kind(m) != SH_MP_NIL)
		return false;
	m->p++;
	return true;
}

int sh_mp_bool(sh_mp *m, bool *v)
{
	if (sh_mp_kind(m) != SH_MP_BOOL)
		return fail(m);
	*v = *m->p++ == 0xc3;
	return 0;
}

/* Any integer, as a sign and magnitude pair folded into int64 / uint64. */
static int integer(sh_mp *m, bool *neg, uint64_t *u)
{
	if (m->err || m->p >= m->end)
		return fail(m);
	unsigned b = *m->p;
	uint64_t v;
	*neg = false;
	if (b <= 0x7f) {
		m->p++;
		*u = b;
		return 0;
	}
	if (b >= 0xe0) {
		m->p++;
		*neg = true;
		*u = (uint64_t)(int64_t)(int8_t)b;
		return 0;
	}
	if (b >= 0xcc && b <= 0xcf) {
		if (take(m, 1 << (b - 0xcc), &v))
			return m->err;
		*u = v;
		return 0;
	}
	if (b >= 0xd0 && b <= 0xd3) {
		int n = 1 << (b - 0xd0);
		if (take(m, n, &v))
			return m->err;
		/* sign-extend the n-byte value */
		int64_t s = n == 8 ? (int64_t)v : (int64_t)(v << (64 - 8 * n)) >> (64 - 8 * n);
		*neg = s < 0;
		*u = (uint64_t)s;
		return 0;
	}
	return fail(m);
}

int sh_mp_uint(sh_mp *m, uint64_t *v)
{
	bool neg;
	uint64_t u;
	if (integer(m, &neg, &u))
		return m->err;
	if (neg)
		return fail(m);
	*v = u;
	return 0;
}

int sh_mp_int(sh_mp *m, int64_t *v)
{
	bool neg;
	uint64_t u;
	if (integer(m, &neg, &u))
		return m->err;
	if (!neg && u > (uint64_t)INT64_MAX)
		return fail(m);
	*v = (int64_t)u;
	return 0;
}

int sh_mp_float(sh_mp *m, double *v)
{
	int k = sh_mp_kind(m);
	uint64_t bits;
	if (k != SH_MP_FLOAT)
		return fail(m);
	if (*m->p == 0xca) {
		if (take(m, 4, &bits))
			return m->err;
		uint32_t b32 = (uint32_t)bits;
		float f;
		memcpy(&f, &b32, 4);
		*v = f;
	} else {
		if (take(m, 8, &bits))
			return m->err;
		memcpy(v, &bits, 8);
	}
	return 0;
}

static int bytes(sh_mp *m, const void **s, uint32_t *len, int kind)
{
	if (sh_mp_kind(m) != kind)
		return fail(m);
	unsigned b = *m->p;
	uint64_t n;
	if (kind == SH_MP_STR && (b & 0xe0) == 0xa0) {
		n = b & 0x1f;
		m->p++;
	} else {
		unsigned base = kind == SH_MP_STR ? 0xd9 : 0xc4;
		if (take(m, 1 << (b - base), &n))
			return m->err;
	}
	if (n > sh_mp_left(m))
		return fail(m);
	*s = m->p;
	*len = (uint32_t)n;
	m->p += n;
	return 0;
}

int sh_mp_ext(sh_mp *m, int8_t *type, const void **b, uint32_t *len)
{
	if (sh_mp_kind(m) != SH_MP_EXT)
		return fail(m);
	unsigned c = *m->p;
	uint64_t n;
	if (c >= 0xd4) { /* fixext 1, 2, 4, 8, 16 */
		n = 1u << (c - 0xd4);
		m->p++;
	} else if (take(m, 1 << (c - 0xc7), &n)) {
		return m->err;
	}
	if (sh_mp_left(m) < 1 || n > sh_mp_left(m) - 1)
		return fail(m);
	*type = (int8_t)*m->p++;
	*b = m->p;
	*len = (uint32_t)n;
	m->p += n;
	return 0;
}

int sh_mp_str(sh_mp *m, const char **s, uint32_t *len)
{
	return bytes(m, (const void **)s, len, SH_MP_STR);
}

int sh_mp_bin(sh_mp *m, const void **b, uint32_t *len)
{
	return bytes(m, b, len, SH_MP_BIN);
}

static int skip(sh_mp *m, int depth)
{
	if (depth > SH_MP_MAX_DEPTH)
		return fail(m);
	uint32_t n;
	const void *b;
	double d;
	int64_t i;
	uint64_t u;
	bool t;
	switch (sh_mp_kind(m)) {
	case SH_MP_NIL:
		return sh_mp_nil(m);
	case SH_MP_BOOL:
		return sh_mp_bool(m, &t);
	case SH_MP_UINT:
		return sh_mp_uint(m, &u);
	case SH_MP_INT:
		return sh_mp_int(m, &i);
	case SH_MP_FLOAT:
		return sh_mp_float(m, &d);
	case SH_MP_STR:
		return sh_mp_str(m, (const char **)&b, &n);
	case SH_MP_BIN:
		return sh_mp_bin(m, &b, &n);
	case SH_MP_EXT: {
		int8_t et;
		return sh_mp_ext(m, &et, &b, &n);
	}
	case SH_MP_ARRAY:
		if (sh_mp_array(m, &n))
			return m->err;
		while (n-- && !m->err)
			skip(m, depth + 1);
		return m->err;
	case SH_MP_MAP:
		if (sh_mp_map(m, &n))
			return m->err;
		while (n-- && !m->err) {
			skip(m, depth + 1);
			skip(m, depth + 1);
		}
		return m->err;
	}
	return fail(m);
}

int sh_mp_skip(sh_mp *m)
{
	return skip(m, 0);
}

int sh_mp_done(sh_mp *m)
{
	if (m->err || m->p != m->end)
		return fail(m);
	return 0;
}

/* The safetensors header as the reference writer writes it (see
 * safetensors.h): the compact JSON in data order, empty tensors at one
 * offset ordered as that writer orders them (sh_st_cmp_data), padded with
 * spaces to a multiple of 8, so that a header read and written again
 * comes out byte for byte. */
#include "store/safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ------------------------------------------------------------ */

/* Output that is only counted while p is NULL: the header is written twice,
 * once to learn its size, once into a buffer of exactly that size. */
typedef struct out {
	unsigned char *p;
	size_t n;
	bool big; /* the count overflowed */
} out;

static void put(out *o, const void *s, size_t k)
{
	if (o->p)
		memcpy(o->p + o->n, s, k);
	if (__builtin_add_overflow(o->n, k, &o->n))
		o->big = true;
}

static void put_lit(out *o, const char *s)
{
	put(o, s, strlen(s));
}

static void put_u64(out *o, uint64_t v)
{
	char b[24];
	put(o, b, (size_t)snprintf(b, sizeof(b), "%" PRIu64, v));
}

/* A JSON string as serde_json writes one: only '"', '\' and bytes below
 * 0x20 escaped, the usual five by letter, the rest as \u00xx in lowercase;
 * everything else, non-ASCII included, as is. */
static void put_str(out *o, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;
	put(o, "\"", 1);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[6] = {'\\', 0, '0', '0', 0, 0};
		size_t k = 2;
		switch (c) {
		case '"':
		case '\\':
			e[1] = (char)c;
			break;
		case '\b':
			e[1] = 'b';
			break;
		case '\t':
			e[1] = 't';
			break;
		case '\n':
			e[1] = 'n';
			break;
		case '\f':
			e[1] = 'f';
			break;
		case '\r':
			e[1] = 'r';
			break;
		default:
			if (c >= 0x20)
				continue;
			e[1] = 'u';
			e[4] = hex[c >> 4];
			e[5] = hex[c & 15];
			k = 6;
		}
		put(o, s + run, i - run);
		put(o, e, k);
		run = i + 1;
	}
	put(o, s + run, len - run);
	put(o, "\"", 1);
}

static void emit(out *o, const sh_st_tensor *t, const size_t *idx, size_t n, const sh_st_meta *meta,
		 size_t nmeta)
{
	put(o, "{", 1);
	if (nmeta) {
		put_lit(o, "\"__metadata__\":{");
		for (size_t j = 0; j < nmeta; j++) {
			if (j)
				put(o, ",", 1);
			put_str(o, meta[j].key, strlen(meta[j].key));
			put(o, ":", 1);
			put_str(o, meta[j].val, strlen(meta[j].val));
		}
		put(o, n ? "}," : "}", n ? 2 : 1);
	}
	for (size_t k = 0; k < n; k++) {
		const sh_st_tensor *x = &t[idx[k]];
		if (k)
			put(o, ",", 1);
		put_str(o, x->name, x->name_len);
		put_lit(o, ":{\"dtype\":");
		put_str(o, shoal_dtype_name(x->dtype), strlen(shoal_dtype_name(x->dtype)));
		put_lit(o, ",\"shape\":[");
		for (int d = 0; d < x->ndim; d++) {
			if (d)
				put(o, ",", 1);
			put_u64(o, (uint64_t)x->shape[d]);
		}
		put_lit(o, "],\"data_offsets\":[");
		put_u64(o, x->begin);
		put(o, ",", 1);
		put_u64(o, x->end);
		put_lit(o, "]}");
	}
	put(o, "}", 1);
}

/* Whether a header can hold t as it is, and our reader read it back. */
static bool writable(const sh_st_tensor *t)
{
	if (!t->name || t->name_len == 0 || memchr(t->name, 0, t->name_len) ||
	    !sh_st_utf8_valid(t->name, t->name_len))
		return false;
	if (t->dtype <= SHOAL_DT_INVALID || t->dtype >= SHOAL_DT_COUNT)
		return false;
	if (t->ndim < 0 || t->ndim > SHOAL_TENSOR_MAX_DIMS)
		return false;
	for (int d = 0; d < t->ndim; d++)
		if (t->shape[d] < 0 || (double)t->shape[d] >= SH_ST_EXACT_LIMIT)
			return false;
	return t->begin <= t->end && (double)t->end < SH_ST_EXACT_LIMIT;
}

/* The writer sorts an index array, not the caller's t; qsort has no
 * context argument, and thread-local keeps concurrent writers apart. */
static _Thread_local const sh_st_tensor *sort_base;

static int cmp_idx(const void *a, const void *b)
{
	return sh_st_cmp_data(&sort_base[*(const size_t *)a], &sort_base[*(const size_t *)b]);
}

int sh_st_header_write(const sh_st_tensor *t, size_t n, const sh_st_meta *meta, size_t nmeta,
		       unsigned char **buf, size_t *len)
{
	*buf = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++)
		if (!writable(&t[i]))
			return SHOAL_EINVAL;
	for (size_t j = 0; j < nmeta; j++)
		if (!meta[j].key || !meta[j].val ||
		    !sh_st_utf8_valid(meta[j].key, strlen(meta[j].key)) ||
		    !sh_st_utf8_valid(meta[j].val, strlen(meta[j].val)))
			return SHOAL_EINVAL;

	size_t *idx = NULL, idx_bytes = 0;
	if (n) {
		if (shoal_mul_size(n, sizeof(*idx), &idx_bytes) != 0)
			return SHOAL_EOVERFLOW;
		if (!(idx = shoal_alloc(idx_bytes)))
			return SHOAL_ENOMEM;
		for (size_t i = 0; i < n; i++)
			idx[i] = i;
		sort_base = t;
		qsort(idx, n, sizeof(*idx), cmp_idx);
	}

	out o = {NULL, 0, false};
	emit(&o, t, idx, n, meta, nmeta);
	size_t pad = (8 - o.n % 8) % 8, total = o.n + pad;
	int rc = 0;
	if (o.big || total < o.n || total > SH_ST_MAX_HEADER) {
		rc = SHOAL_EMSGSIZE;
		goto done;
	}
	unsigned char *b = shoal_alloc(8 + total);
	if (!b) {
		rc = SHOAL_ENOMEM;
		goto done;
	}
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)total >> (8 * i));
	o = (out){b + 8, 0, false};
	emit(&o, t, idx, n, meta, nmeta);
	memset(b + 8 + o.n, ' ', pad);
	*buf = b;
	*len = 8 + total;
done:
	if (idx)
		shoal_free(idx, idx_bytes);
	return rc;
}

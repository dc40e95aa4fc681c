/* safetensors headers read (see safetensors.h). A header is parsed in
 * three passes: a lexical one over the raw bytes (st_lex.c), for what
 * cJSON lets through but the reference's serde_json rejects; cJSON for the
 * structure; then the checks on the tree, here. Every rejection says what
 * was expected and what came, naming the tensor. Writing one is
 * st_write.c's. */
#include "store/safetensors.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The order of the reference's Dtype enum. Its writer lays tensors out in
 * descending order of this, then by name; ties in data order (empty
 * tensors at one offset) are broken the same way so that a header read and
 * written again comes out byte for byte. */
static const uint8_t dtype_rank[SHOAL_DT_COUNT] = {
	[SHOAL_DT_BOOL] = 0,	[SHOAL_DT_U8] = 1,   [SHOAL_DT_I8] = 2,	  [SHOAL_DT_F8_E5M2] = 3,
	[SHOAL_DT_F8_E4M3] = 4, [SHOAL_DT_I16] = 5,  [SHOAL_DT_U16] = 6,  [SHOAL_DT_F16] = 7,
	[SHOAL_DT_BF16] = 8,	[SHOAL_DT_I32] = 9,  [SHOAL_DT_U32] = 10, [SHOAL_DT_F32] = 11,
	[SHOAL_DT_F64] = 12,	[SHOAL_DT_I64] = 13, [SHOAL_DT_U64] = 14,
};

/* ---- helpers for messages --------------------------------------------- */

/* A name as a message shows it: quoted, with control bytes, quotes and
 * backslashes escaped, cut at a character boundary when long (a hostile
 * name may be megabytes). */
typedef struct qname {
	char s[160];
} qname;

static const char *quote(qname *q, const char *name, size_t len)
{
	/* Past room, stop at the next character; past hard, at once. What
	 * one byte adds (4), "..." and the closing quote still fit. */
	size_t o = 0, room = sizeof(q->s) - 12, hard = sizeof(q->s) - 8;
	q->s[o++] = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if ((o >= room && (c & 0xc0) != 0x80) || o >= hard) {
			memcpy(q->s + o, "...", 3);
			o += 3;
			break;
		}
		if (c < 0x20 || c == '"' || c == '\\')
			o += (size_t)snprintf(q->s + o, 7, c < 0x20 ? "\\x%02x" : "\\%c", c);
		else
			q->s[o++] = (char)c;
	}
	q->s[o++] = '"';
	q->s[o] = '\0';
	return q->s;
}

static const char *json_kind(const cJSON *e)
{
	if (cJSON_IsObject(e))
		return "an object";
	if (cJSON_IsArray(e))
		return "an array";
	if (cJSON_IsString(e))
		return "a string";
	if (cJSON_IsNumber(e))
		return "a number";
	if (cJSON_IsBool(e))
		return "a boolean";
	return "null";
}

/* What a value that should have been a non-negative integer was. */
static const char *json_show(const cJSON *e, char *buf, size_t n)
{
	if (!cJSON_IsNumber(e))
		return json_kind(e);
	/* cJSON has rounded such a number: say so rather than show a value
	 * the header may not hold. */
	double d = e->valuedouble;
	snprintf(buf, n, d < SH_ST_EXACT_LIMIT ? "%.17g" : "%.17g (2^53 or more)", d);
	return buf;
}

/* "F32 [5, 6]", cut short if long. */
static const char *show_shape(const sh_st_tensor *t, char *buf, size_t n)
{
	size_t o = (size_t)snprintf(buf, n, "%s [", shoal_dtype_name(t->dtype));
	int d = 0;
	for (; d < t->ndim && o + 32 < n; d++)
		o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, d ? ", " : "", t->shape[d]);
	snprintf(buf + o, n - o, "%s]", d < t->ndim ? ", ..." : "");
	return buf;
}

const char *sh_st_show_byte(unsigned char c, char buf[16])
{
	if (c > 0x20 && c < 0x7f)
		snprintf(buf, 16, "'%c'", c);
	else
		snprintf(buf, 16, "byte 0x%02x", c);
	return buf;
}

/* ---- the checks on the tree --------------------------------------------- */

/* A JSON number that is an integer >= 0 which cJSON's double holds
 * exactly. -0 is out: serde_json reads it as a float. */
static bool json_uint(const cJSON *e, uint64_t *v)
{
	if (!cJSON_IsNumber(e))
		return false;
	double d = e->valuedouble;
	if (signbit(d) || !(d < SH_ST_EXACT_LIMIT))
		return false;
	uint64_t u = (uint64_t)d;
	if ((double)u != d)
		return false;
	*v = u;
	return true;
}

static size_t json_count(const cJSON *a)
{
	size_t n = 0;
	for (const cJSON *e = a->child; e; e = e->next)
		n++;
	return n;
}

static char *dup_str(const char *s, size_t len)
{
	char *p = shoal_alloc(len + 1);
	if (p) {
		memcpy(p, s, len);
		p[len] = '\0';
	}
	return p;
}

static int parse_tensor(const cJSON *c, sh_st_tensor *t, char *err, size_t errlen)
{
	const char *name = c->string;
	size_t nl = strlen(name);
	qname q;
	const char *qn = quote(&q, name, nl);
	char b[64], sb[256];
	if (nl == 0)
		return sh_say(err, errlen, SHOAL_EBADMSG, "a tensor has an empty name");
	if (!(t->name = dup_str(name, nl)))
		return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for tensor %s", qn);
	t->name_len = nl;
	if (!cJSON_IsObject(c))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: expected an object with dtype, shape and data_offsets, "
			      "got %s",
			      qn, json_kind(c));

	const cJSON *dt = NULL, *sh = NULL, *off = NULL;
	for (const cJSON *f = c->child; f; f = f->next) {
		const cJSON **slot = strcmp(f->string, "dtype") == 0	      ? &dt
				     : strcmp(f->string, "shape") == 0	      ? &sh
				     : strcmp(f->string, "data_offsets") == 0 ? &off
									      : NULL;
		qname qf;
		if (!slot)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "tensor %s: unknown field %s (a tensor has dtype, shape and "
				      "data_offsets)",
				      qn, quote(&qf, f->string, strlen(f->string)));
		if (*slot)
			return sh_say(err, errlen, SHOAL_EBADMSG, "tensor %s: duplicate field %s",
				      qn, quote(&qf, f->string, strlen(f->string)));
		*slot = f;
	}
	if (!dt || !sh || !off)
		return sh_say(err, errlen, SHOAL_EBADMSG, "tensor %s: missing field \"%s\"", qn,
			      !dt   ? "dtype"
			      : !sh ? "shape"
				    : "data_offsets");

	if (!cJSON_IsString(dt))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: dtype must be a string, got %s", qn, json_kind(dt));
	t->dtype = shoal_dtype_from_name(dt->valuestring, strlen(dt->valuestring));
	if (t->dtype == SHOAL_DT_INVALID) {
		char known[160];
		size_t o = 0;
		for (int d = 1; d < SHOAL_DT_COUNT; d++)
			o += (size_t)snprintf(known + o, sizeof(known) - o, "%s%s",
					      d > 1 ? " " : "", shoal_dtype_name((shoal_dtype)d));
		qname qd;
		return sh_say(err, errlen, SHOAL_EBADMSG, "tensor %s: unknown dtype %s (known: %s)",
			      qn, quote(&qd, dt->valuestring, strlen(dt->valuestring)), known);
	}

	if (!cJSON_IsArray(sh))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: shape must be an array of integers, got %s", qn,
			      json_kind(sh));
	size_t nd = json_count(sh);
	if (nd > SHOAL_TENSOR_MAX_DIMS)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: shape has %zu dimensions, at most %d are supported", qn,
			      nd, SHOAL_TENSOR_MAX_DIMS);
	t->ndim = 0;
	for (const cJSON *e = sh->child; e; e = e->next) {
		uint64_t v;
		if (!json_uint(e, &v))
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "tensor %s: shape[%d] is %s, expected an integer from 0 to "
				      "2^53 - 1",
				      qn, t->ndim, json_show(e, b, sizeof(b)));
		t->shape[t->ndim++] = (int64_t)v;
	}

	if (!cJSON_IsArray(off) || json_count(off) != 2)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: data_offsets must be [begin, end], got %s%s%zu", qn,
			      json_kind(off), cJSON_IsArray(off) ? " of length " : "",
			      cJSON_IsArray(off) ? json_count(off) : 0);
	const cJSON *e0 = off->child, *e1 = e0->next;
	if (!json_uint(e0, &t->begin) || !json_uint(e1, &t->end)) {
		const cJSON *bad = json_uint(e0, &t->begin) ? e1 : e0;
		return sh_say(
			err, errlen, SHOAL_EBADMSG,
			"tensor %s: data_offsets[%d] is %s, expected an integer from 0 to 2^53 - 1",
			qn, bad == e0 ? 0 : 1, json_show(bad, b, sizeof(b)));
	}
	if (t->begin > t->end)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
			      "): begin is after end",
			      qn, t->begin, t->end);

	/* size_t is 64 bits wherever shoal builds (x86_64, aarch64). The
	 * span (item size times every dimension but zeros) bounds the strides
	 * a reader computes: a zero-sized tensor may not have dimensions whose
	 * strides overflow. */
	size_t count = 1, bytes, span = shoal_dtype_size(t->dtype);
	bool wide = false;
	for (int d = 0; d < t->ndim; d++) {
		if (shoal_mul_size(count, (size_t)t->shape[d], &count) != 0)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "tensor %s: %s has more than 2^64 elements", qn,
				      show_shape(t, sb, sizeof(sb)));
		if (t->shape[d] &&
		    (shoal_mul_size(span, (size_t)t->shape[d], &span) != 0 || span > INT64_MAX))
			wide = true;
	}
	if (count == 0 && wide)
		return sh_say(
			err, errlen, SHOAL_EBADMSG,
			"tensor %s: %s has no elements, but strides that do not fit in 63 bits", qn,
			show_shape(t, sb, sizeof(sb)));
	if (shoal_mul_size(count, shoal_dtype_size(t->dtype), &bytes) != 0)
		return sh_say(err, errlen, SHOAL_EBADMSG, "tensor %s: %s has more than 2^64 bytes",
			      qn, show_shape(t, sb, sizeof(sb)));
	if (t->end - t->begin != bytes)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64
			      " bytes, but %s needs %zu",
			      qn, t->begin, t->end, t->end - t->begin,
			      show_shape(t, sb, sizeof(sb)), bytes);
	return 0;
}

static int cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_meta(const cJSON *m, sh_st_file *f, char *err, size_t errlen)
{
	char b[64];
	qname q;
	if (cJSON_IsNull(m))
		return 0; /* what serde makes of it: no metadata */
	if (!cJSON_IsObject(m))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "\"__metadata__\" must be an object of strings, got %s",
			      json_kind(m));
	size_t n = json_count(m);
	if (n == 0)
		return 0;
	if (!(f->meta = shoal_calloc(n, sizeof(*f->meta))))
		return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for %zu metadata entries",
			      n);
	f->nmeta = n;
	size_t i = 0;
	for (const cJSON *e = m->child; e; e = e->next, i++) {
		if (!cJSON_IsString(e))
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "\"__metadata__\" key %s: values must be strings, got %s",
				      quote(&q, e->string, strlen(e->string)),
				      cJSON_IsNumber(e) ? json_show(e, b, sizeof(b))
							: json_kind(e));
		f->meta[i].key = dup_str(e->string, strlen(e->string));
		f->meta[i].val = dup_str(e->valuestring, strlen(e->valuestring));
		if (!f->meta[i].key || !f->meta[i].val)
			return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for metadata");
	}
	/* key is the first member: sorting the entries' key pointers finds
	 * repeats without disturbing the file order. */
	char **keys = shoal_alloc(n * sizeof(*keys));
	if (!keys)
		return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for metadata");
	for (i = 0; i < n; i++)
		keys[i] = f->meta[i].key;
	qsort(keys, n, sizeof(*keys), cmp_cstr);
	int rc = 0;
	for (i = 1; i < n && rc == 0; i++)
		if (strcmp(keys[i - 1], keys[i]) == 0)
			rc = sh_say(err, errlen, SHOAL_EBADMSG, "duplicate \"__metadata__\" key %s",
				    quote(&q, keys[i], strlen(keys[i])));
	shoal_free(keys, n * sizeof(*keys));
	return rc;
}

static int cmp_name(const sh_st_tensor *a, const sh_st_tensor *b)
{
	size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
	int c = memcmp(a->name, b->name, n);
	if (c)
		return c;
	return a->name_len < b->name_len ? -1 : a->name_len > b->name_len;
}

static int cmp_name_ptr(const void *a, const void *b)
{
	return cmp_name(*(const sh_st_tensor *const *)a, *(const sh_st_tensor *const *)b);
}

/* Data order, and within it (empty tensors at one offset) the reference
 * writer's order: dtype descending, then name bytes. */
int sh_st_cmp_data(const sh_st_tensor *a, const sh_st_tensor *b)
{
	if (a->begin != b->begin)
		return a->begin < b->begin ? -1 : 1;
	if (a->end != b->end)
		return a->end < b->end ? -1 : 1;
	if (a->dtype != b->dtype)
		return dtype_rank[a->dtype] > dtype_rank[b->dtype] ? -1 : 1;
	return cmp_name(a, b);
}

static int cmp_data_qsort(const void *a, const void *b)
{
	return sh_st_cmp_data(a, b);
}

static int check_unique(const sh_st_file *f, char *err, size_t errlen)
{
	if (f->n < 2)
		return 0;
	const sh_st_tensor **p = shoal_alloc(f->n * sizeof(*p));
	if (!p)
		return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for %zu tensors", f->n);
	for (size_t i = 0; i < f->n; i++)
		p[i] = &f->t[i];
	qsort(p, f->n, sizeof(*p), cmp_name_ptr);
	int rc = 0;
	for (size_t i = 1; i < f->n && rc == 0; i++) {
		if (cmp_name(p[i - 1], p[i]) == 0) {
			qname q;
			rc = sh_say(err, errlen, SHOAL_EBADMSG, "duplicate tensor name %s",
				    quote(&q, p[i]->name, p[i]->name_len));
		}
	}
	shoal_free(p, f->n * sizeof(*p));
	return rc;
}

/* Sorted, the tensors must tile the data area: the first begins at 0, each
 * where the one before ends, the last at its end. */
static int check_tiling(const sh_st_file *f, char *err, size_t errlen)
{
	uint64_t pos = 0;
	qname q, qp;
	for (size_t i = 0; i < f->n; i++) {
		const sh_st_tensor *t = &f->t[i], *prev = i ? &f->t[i - 1] : NULL;
		if (t->begin < pos)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
				      ") overlap tensor %s [%" PRIu64 ", %" PRIu64 ")",
				      quote(&q, t->name, t->name_len), t->begin, t->end,
				      quote(&qp, prev->name, prev->name_len), prev->begin,
				      prev->end);
		if (t->begin > pos && !prev)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "gap of %" PRIu64
				      " bytes at the start of the data area: the first "
				      "tensor, %s, begins at %" PRIu64 ", expected 0",
				      t->begin, quote(&q, t->name, t->name_len), t->begin);
		if (t->begin > pos)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "gap of %" PRIu64
				      " bytes in the data area: tensor %s ends at %" PRIu64
				      ", the next, %s, begins at %" PRIu64,
				      t->begin - pos, quote(&qp, prev->name, prev->name_len), pos,
				      quote(&q, t->name, t->name_len), t->begin);
		if (t->end > f->data_len)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
				      ") run past the end of the %" PRIu64 "-byte data area",
				      quote(&q, t->name, t->name_len), t->begin, t->end,
				      f->data_len);
		pos = t->end;
	}
	if (pos != f->data_len)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "%" PRIu64 " trailing bytes: the tensors end at byte %" PRIu64
			      " of the %" PRIu64 "-byte data area",
			      f->data_len - pos, pos, f->data_len);
	return 0;
}

static int check_tree(const cJSON *root, sh_st_file *f, const sh_st_lexed *lx, const char *json,
		      char *err, size_t errlen)
{
	size_t nt = 0;
	const cJSON *meta = NULL;
	int rc;
	for (const cJSON *c = root->child; c; c = c->next)
		if (strcmp(c->string, "__metadata__") != 0)
			nt++;
	if (nt && !(f->t = shoal_calloc(nt, sizeof(*f->t))))
		return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for %zu tensors", nt);
	f->n = nt;
	size_t i = 0;
	for (const cJSON *c = root->child; c; c = c->next) {
		if (strcmp(c->string, "__metadata__") == 0) {
			if (meta)
				return sh_say(err, errlen, SHOAL_EBADMSG,
					      "duplicate key \"__metadata__\"");
			meta = c;
		} else if ((rc = parse_tensor(c, &f->t[i++], err, errlen)) != 0) {
			return rc;
		}
	}
	if (meta && (rc = parse_meta(meta, f, err, errlen)) != 0)
		return rc;
	if ((rc = check_unique(f, err, errlen)) != 0)
		return rc;
	/* Every number the tree holds was checked as an integer, so one
	 * written as 2.0 or 2e0 had an integral value: serde_json would still
	 * refuse it as a float. */
	if (lx->nonint_at != SIZE_MAX)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "number %.*s at byte %zu of the header: shapes and offsets are "
			      "written as integers",
			      (int)lx->nonint_len, json + lx->nonint_at, lx->nonint_at);
	if (f->n > 1)
		qsort(f->t, f->n, sizeof(*f->t), cmp_data_qsort);
	return check_tiling(f, err, errlen);
}

int sh_st_prefix(const unsigned char first8[8], uint64_t file_size, uint64_t *header_len, char *err,
		 size_t errlen)
{
	if (file_size < 8)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "file of %" PRIu64 " bytes is shorter than the 8-byte header length",
			      file_size);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | first8[i];
	if (n > SH_ST_MAX_HEADER)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "header length %" PRIu64 " is beyond the limit of %u bytes", n,
			      SH_ST_MAX_HEADER);
	if (n > file_size - 8)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "header length %" PRIu64 " runs past the end of the file: %" PRIu64
			      " bytes follow the length",
			      n, file_size - 8);
	*header_len = n;
	return 0;
}

int sh_st_parse(const char *json, size_t len, uint64_t data_len, sh_st_file **out, char *err,
		size_t errlen)
{
	sh_st_lexed lx = {SIZE_MAX, 0};
	int rc;
	*out = NULL;
	if (len > SH_ST_MAX_HEADER)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "header of %zu bytes is beyond the limit of %u bytes", len,
			      SH_ST_MAX_HEADER);
	if ((rc = sh_st_lex((const unsigned char *)json, len, &lx, err, errlen)) != 0)
		return rc;

	/* cJSON wants a NUL at the end; the lexical pass made sure there is
	 * no other. It allocates with malloc: its hooks are process-wide and
	 * not ours to take. */
	char *copy = shoal_alloc(len + 1);
	if (!copy)
		return sh_say(err, errlen, SHOAL_ENOMEM, "out of memory for a %zu-byte header",
			      len);
	memcpy(copy, json, len);
	copy[len] = '\0';
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithOpts(copy, &end, 0);
	if (!root) {
		size_t at = end ? (size_t)(end - copy) : 0;
		char b[16];
		rc = sh_say(err, errlen, SHOAL_EBADMSG,
			    "invalid JSON at byte %zu of the header (%s)", at,
			    at < len ? sh_st_show_byte((unsigned char)copy[at], b) : "the end");
		goto out;
	}
	size_t at = (size_t)(end - copy);
	while (at < len && sh_st_is_ws((unsigned char)copy[at]))
		at++;
	if (at < len) {
		char b[16];
		rc = sh_say(err, errlen, SHOAL_EBADMSG,
			    "unexpected %s at byte %zu of the header, after the JSON object",
			    sh_st_show_byte((unsigned char)copy[at], b), at);
		goto out;
	}

	sh_st_file *f = shoal_calloc(1, sizeof(*f));
	if (!f) {
		rc = sh_say(err, errlen, SHOAL_ENOMEM, "out of memory");
		goto out;
	}
	f->header_len = len;
	f->data_start = 8 + (uint64_t)len;
	f->data_len = data_len;
	if ((rc = check_tree(root, f, &lx, json, err, errlen)) != 0)
		sh_st_free(f);
	else
		*out = f;
out:
	cJSON_Delete(root);
	shoal_free(copy, len + 1);
	return rc;
}

void sh_st_free(sh_st_file *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		if (f->t[i].name)
			shoal_free(f->t[i].name, f->t[i].name_len + 1);
	if (f->t)
		shoal_free(f->t, f->n * sizeof(*f->t));
	for (size_t i = 0; i < f->nmeta; i++) {
		if (f->meta[i].key)
			shoal_free(f->meta[i].key, strlen(f->meta[i].key) + 1);
		if (f->meta[i].val)
			shoal_free(f->meta[i].val, strlen(f->meta[i].val) + 1);
	}
	if (f->meta)
		shoal_free(f->meta, f->nmeta * sizeof(*f->meta));
	shoal_free(f, sizeof(*f));
}

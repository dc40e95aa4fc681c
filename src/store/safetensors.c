/* safetensors headers (see safetensors.h). A header is parsed in three
 * passes: a lexical one over the raw bytes, for what cJSON lets through but
 * the reference's serde_json rejects (bad UTF-8, raw control bytes, numbers
 * like 01 or +1) and for nesting deep enough to hurt; cJSON for the
 * structure; then the checks on the tree. Every rejection says what was
 * expected and what came, naming the tensor. */
#include "store/safetensors.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A valid header nests 3 deep ({ "t": { "shape": [ ), so anything past
 * this is invalid anyway; stopping here keeps cJSON's recursion shallow. */
#define MAX_DEPTH 16
/* Longer numbers are beyond 2^53 or not integers either way. */
#define MAX_NUMBER_CHARS 40
/* JSON integers from here up may have been rounded by cJSON's double. */
#define EXACT_LIMIT 9007199254740992.0 /* 2^53 */

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
	snprintf(buf, n, d < EXACT_LIMIT ? "%.17g" : "%.17g (2^53 or more)", d);
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

static const char *show_byte(unsigned char c, char buf[16])
{
	if (c > 0x20 && c < 0x7f)
		snprintf(buf, 16, "'%c'", c);
	else
		snprintf(buf, 16, "byte 0x%02x", c);
	return buf;
}

/* ---- the lexical pass --------------------------------------------------- */

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is
 * not one: no overlong forms, surrogates or code points past U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t k;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		k = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		k = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		k = 4;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		return 0;
	}
	if (n < k || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < k; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return k;
}

static bool utf8_valid(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq(s + i, n - i);
		if (k == 0)
			return false;
		i += k;
	}
	return true;
}

/* The value of 4 hex digits (checked by the caller). */
static unsigned hex4(const unsigned char *s)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 4 | (unsigned)(is_digit(s[i]) ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10);
	return v;
}

static bool is_hex4(const unsigned char *s)
{
	return is_hex(s[0]) && is_hex(s[1]) && is_hex(s[2]) && is_hex(s[3]);
}

/* What the lexical pass learnt for the later ones. */
typedef struct lexed {
	size_t nonint_at; /* the first number written with a fraction or
			     exponent (2.0, 2e0), or SIZE_MAX */
	size_t nonint_len;
} lexed;

/* The escape at s[j] ('\\'): sets *k to its length. "\\u0000" is refused
 * (names are C strings) and so are unpaired surrogates, which cJSON would
 * refuse too, but only as "invalid JSON". */
static int lex_escape(const unsigned char *s, size_t len, size_t j, size_t *k, char *err,
		      size_t errlen)
{
	unsigned char e = j + 1 < len ? s[j + 1] : 0;
	char b[16];
	if (e && strchr("\"\\/bfnrt", e)) {
		*k = 2;
		return 0;
	}
	if (e != 'u')
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "invalid escape at byte %zu of the header: expected one of \\\" \\\\ "
			      "\\/ \\b \\f \\n \\r \\t \\uXXXX, got %s",
			      j, e ? show_byte(e, b) : "the end");
	if (j + 6 > len || !is_hex4(s + j + 2))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "invalid \\u escape at byte %zu of the header: expected 4 hex digits",
			      j);
	unsigned u = hex4(s + j + 2);
	if (u == 0)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "\\u0000 at byte %zu of the header: names and metadata are C strings "
			      "and cannot hold NUL",
			      j);
	bool high = u >= 0xd800 && u < 0xdc00;
	bool paired = high && j + 12 <= len && s[j + 6] == '\\' && s[j + 7] == 'u' &&
		      is_hex4(s + j + 8) && hex4(s + j + 8) >= 0xdc00 && hex4(s + j + 8) < 0xe000;
	if ((u >= 0xd800 && u < 0xe000) && !paired)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "unpaired UTF-16 surrogate \\u%04x at byte %zu of the header", u, j);
	*k = paired ? 12 : 6;
	return 0;
}

static int lex_string(const unsigned char *s, size_t len, size_t *ip, char *err, size_t errlen)
{
	size_t start = *ip, j = start + 1, k = 0;
	int rc;
	for (;;) {
		if (j >= len)
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "string starting at byte %zu of the header is not terminated",
				      start);
		unsigned char c = s[j];
		if (c == '"') {
			*ip = j + 1;
			return 0;
		}
		if (c == '\\') {
			if ((rc = lex_escape(s, len, j, &k, err, errlen)) != 0)
				return rc;
		} else if (c < 0x20) {
			return sh_say(
				err, errlen, SHOAL_EBADMSG,
				"raw control byte 0x%02x in a string at byte %zu of the header "
				"(JSON needs it escaped)",
				c, j);
		} else if ((k = utf8_seq(s + j, len - j)) == 0) {
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "invalid UTF-8 at byte %zu of the header (byte 0x%02x): the "
				      "header must be UTF-8",
				      j, c);
		}
		j += k;
	}
}

static int lex_number(const unsigned char *s, size_t len, size_t *ip, lexed *lx, char *err,
		      size_t errlen)
{
	size_t i = *ip, j = i;
	bool frac = false;
	if (s[j] == '-')
		j++;
	if (j >= len || !is_digit(s[j]))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "invalid number at byte %zu of the header: '-' without digits", i);
	if (s[j] == '0') {
		j++;
		if (j < len && is_digit(s[j]))
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "number with a leading zero at byte %zu of the header", i);
	} else {
		while (j < len && is_digit(s[j]))
			j++;
	}
	if (j < len && s[j] == '.') {
		j++;
		if (j >= len || !is_digit(s[j]))
			return sh_say(
				err, errlen, SHOAL_EBADMSG,
				"invalid number at byte %zu of the header: no digits after '.'", i);
		while (j < len && is_digit(s[j]))
			j++;
		frac = true;
	}
	if (j < len && (s[j] == 'e' || s[j] == 'E')) {
		j++;
		if (j < len && (s[j] == '+' || s[j] == '-'))
			j++;
		if (j >= len || !is_digit(s[j]))
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "invalid number at byte %zu of the header: no digits in the "
				      "exponent",
				      i);
		while (j < len && is_digit(s[j]))
			j++;
		frac = true;
	}
	if (j - i > MAX_NUMBER_CHARS)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "number of %zu characters at byte %zu of the header: shapes and "
			      "offsets are integers below 2^53",
			      j - i, i);
	if (frac && lx->nonint_at == SIZE_MAX) {
		lx->nonint_at = i;
		lx->nonint_len = j - i;
	}
	*ip = j;
	return 0;
}

/* What may follow the header's object: the format's padding, spaces
 * (0x20) only, no more of them than any writer needs. */
static int lex_padding(const unsigned char *s, size_t len, size_t i, char *err, size_t errlen)
{
	char b[16];
	size_t start = i;
	while (i < len && s[i] == ' ')
		i++;
	if (i < len && is_ws(s[i]))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "%s at byte %zu of the header, after the JSON object: the header may "
			      "be padded with spaces only",
			      show_byte(s[i], b), i);
	if (i < len)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "unexpected %s at byte %zu of the header, after the JSON object",
			      show_byte(s[i], b), i);
	if (i - start > SH_ST_MAX_WS)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "%zu bytes of padding after the JSON object: expected at most %u",
			      i - start, SH_ST_MAX_WS);
	return 0;
}

/* Checks the tokens of the header, not their arrangement (cJSON does that):
 * valid UTF-8, strings and numbers as RFC 8259 has them, no byte outside
 * a token but JSON whitespace, nesting at most MAX_DEPTH deep; '{' first,
 * whitespace in runs of at most SH_ST_MAX_WS, only spaces after the object. */
static int lex(const unsigned char *s, size_t len, lexed *lx, char *err, size_t errlen)
{
	size_t i = 0, depth = 0;
	char b[16], brackets[MAX_DEPTH];
	int rc;
	lx->nonint_at = SIZE_MAX;
	while (i < len && is_ws(s[i]))
		i++;
	if (i == len)
		return sh_say(err, errlen, SHOAL_EBADMSG, "header is %s: expected a JSON object",
			      len ? "all whitespace" : "empty");
	if (i > 0)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "header starts with %zu bytes of whitespace: expected '{' at byte 0 "
			      "(the format's rule; padding goes at the end)",
			      i);
	if (s[0] != '{')
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "header is not a JSON object: expected '{', got %s at byte 0",
			      show_byte(s[0], b));
	while (i < len) {
		unsigned char c = s[i];
		if (is_ws(c)) {
			size_t j = i;
			while (j < len && is_ws(s[j]))
				j++;
			if (j - i > SH_ST_MAX_WS)
				return sh_say(err, errlen, SHOAL_EBADMSG,
					      "%zu bytes of whitespace at byte %zu of the header: "
					      "expected at most %u (layout or padding, not filler)",
					      j - i, i, SH_ST_MAX_WS);
			i = j;
		} else if (c == ':' || c == ',') {
			i++;
		} else if (c == '{' || c == '[') {
			if (depth == MAX_DEPTH)
				return sh_say(err, errlen, SHOAL_EBADMSG,
					      "header nests deeper than %d levels at byte %zu (a "
					      "valid one nests 3)",
					      MAX_DEPTH, i);
			brackets[depth++] = c;
			i++;
		} else if (c == '}' || c == ']') {
			/* depth > 0: the object's end returns below */
			if (brackets[depth - 1] != (c == '}' ? '{' : '['))
				return sh_say(
					err, errlen, SHOAL_EBADMSG,
					"unbalanced '%c' at byte %zu of the header: it closes "
					"a '%c'",
					c, i, brackets[depth - 1]);
			depth--;
			i++;
			if (depth == 0)
				return lex_padding(s, len, i, err, errlen);
		} else if (c == '"') {
			if ((rc = lex_string(s, len, &i, err, errlen)) != 0)
				return rc;
		} else if (c == '-' || is_digit(c)) {
			if ((rc = lex_number(s, len, &i, lx, err, errlen)) != 0)
				return rc;
		} else if (len - i >= 4 &&
			   (memcmp(s + i, "true", 4) == 0 || memcmp(s + i, "null", 4) == 0)) {
			i += 4;
		} else if (len - i >= 5 && memcmp(s + i, "false", 5) == 0) {
			i += 5;
		} else {
			return sh_say(err, errlen, SHOAL_EBADMSG,
				      "invalid JSON: unexpected %s at byte %zu of the header",
				      show_byte(c, b), i);
		}
	}
	return 0;
}

/* ---- the checks on the tree --------------------------------------------- */

/* A JSON number that is an integer >= 0 which cJSON's double holds
 * exactly. -0 is out: serde_json reads it as a float. */
static bool json_uint(const cJSON *e, uint64_t *v)
{
	if (!cJSON_IsNumber(e))
		return false;
	double d = e->valuedouble;
	if (signbit(d) || !(d < EXACT_LIMIT))
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
static int cmp_data(const sh_st_tensor *a, const sh_st_tensor *b)
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
	return cmp_data(a, b);
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

static int check_tree(const cJSON *root, sh_st_file *f, const lexed *lx, const char *json,
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
	lexed lx = {SIZE_MAX, 0};
	int rc;
	*out = NULL;
	if (len > SH_ST_MAX_HEADER)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "header of %zu bytes is beyond the limit of %u bytes", len,
			      SH_ST_MAX_HEADER);
	if ((rc = lex((const unsigned char *)json, len, &lx, err, errlen)) != 0)
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
			    at < len ? show_byte((unsigned char)copy[at], b) : "the end");
		goto out;
	}
	size_t at = (size_t)(end - copy);
	while (at < len && is_ws((unsigned char)copy[at]))
		at++;
	if (at < len) {
		char b[16];
		rc = sh_say(err, errlen, SHOAL_EBADMSG,
			    "unexpected %s at byte %zu of the header, after the JSON object",
			    show_byte((unsigned char)copy[at], b), at);
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
	    !utf8_valid(t->name, t->name_len))
		return false;
	if (t->dtype <= SHOAL_DT_INVALID || t->dtype >= SHOAL_DT_COUNT)
		return false;
	if (t->ndim < 0 || t->ndim > SHOAL_TENSOR_MAX_DIMS)
		return false;
	for (int d = 0; d < t->ndim; d++)
		if (t->shape[d] < 0 || (double)t->shape[d] >= EXACT_LIMIT)
			return false;
	return t->begin <= t->end && (double)t->end < EXACT_LIMIT;
}

/* The writer sorts an index array, not the caller's t; qsort has no
 * context argument, and thread-local keeps concurrent writers apart. */
static _Thread_local const sh_st_tensor *sort_base;

static int cmp_idx(const void *a, const void *b)
{
	return cmp_data(&sort_base[*(const size_t *)a], &sort_base[*(const size_t *)b]);
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
		if (!meta[j].key || !meta[j].val || !utf8_valid(meta[j].key, strlen(meta[j].key)) ||
		    !utf8_valid(meta[j].val, strlen(meta[j].val)))
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

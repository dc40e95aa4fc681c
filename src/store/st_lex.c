/* The first pass of the safetensors header's reader (safetensors.c): over
 * the raw bytes, before cJSON sees them, for what cJSON lets through but
 * the reference's serde_json rejects (bad UTF-8, raw control bytes,
 * numbers like 01 or +1) and for nesting deep enough to hurt its
 * recursion. These are outside bytes: a rejection says what came where. */
#include "store/safetensors.h"

#include <stdint.h>
#include <string.h>

/* A valid header nests 3 deep ({ "t": { "shape": [ ), so anything past
 * this is invalid anyway; stopping here keeps cJSON's recursion shallow. */
#define MAX_DEPTH 16
/* Longer numbers are beyond 2^53 or not integers either way. */
#define MAX_NUMBER_CHARS 40

/* ---- the lexical pass --------------------------------------------------- */

bool sh_st_is_ws(unsigned char c)
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

bool sh_st_utf8_valid(const char *p, size_t n)
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
			      j, e ? sh_st_show_byte(e, b) : "the end");
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

static int lex_number(const unsigned char *s, size_t len, size_t *ip, sh_st_lexed *lx, char *err,
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
	if (i < len && sh_st_is_ws(s[i]))
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "%s at byte %zu of the header, after the JSON object: the header may "
			      "be padded with spaces only",
			      sh_st_show_byte(s[i], b), i);
	if (i < len)
		return sh_say(err, errlen, SHOAL_EBADMSG,
			      "unexpected %s at byte %zu of the header, after the JSON object",
			      sh_st_show_byte(s[i], b), i);
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
int sh_st_lex(const unsigned char *s, size_t len, sh_st_lexed *lx, char *err, size_t errlen)
{
	size_t i = 0, depth = 0;
	char b[16], brackets[MAX_DEPTH];
	int rc;
	lx->nonint_at = SIZE_MAX;
	while (i < len && sh_st_is_ws(s[i]))
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
			      sh_st_show_byte(s[0], b));
	while (i < len) {
		unsigned char c = s[i];
		if (sh_st_is_ws(c)) {
			size_t j = i;
			while (j < len && sh_st_is_ws(s[j]))
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
				      sh_st_show_byte(c, b), i);
		}
	}
	return 0;
}

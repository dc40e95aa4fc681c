/* Tests for the safetensors header reader and writer: valid headers parse
 * into tensors in data order; the writer reproduces the reference crate's
 * own test vectors byte for byte, and canonical headers survive a parse and
 * a write unchanged; every rule of validation rejects its case with a
 * message that names what was expected and what came; failed allocations
 * leak nothing. */
#include "test.h"

#include "store/safetensors.h"

/* Checks that json (NUL-terminated here) is rejected with code and a
 * message containing needle, and that nothing is left allocated. */
#define EXPECT_BAD(json, data_len, code, needle) \
	expect_bad(__LINE__, json, strlen(json), data_len, code, needle)

static void expect_bad(int line, const char *json, size_t len, uint64_t data_len, int code,
		       const char *needle)
{
	char err[512] = "";
	sh_st_file *f = (sh_st_file *)&err; /* must come back NULL */
	size_t b0 = shoal_alloc_bytes();
	int rc = sh_st_parse(json, len, data_len, &f, err, sizeof(err));
	if (rc != code)
		sh_test_fail(__FILE__, line, "expected %s, got %s (%s)", shoal_strerror(code),
			     shoal_strerror(rc), err);
	if (f != NULL)
		sh_test_fail(__FILE__, line, "a failed parse left *out set");
	if (!strstr(err, needle))
		sh_test_fail(__FILE__, line, "message \"%s\" lacks \"%s\"", err, needle);
	if (shoal_alloc_bytes() != b0)
		sh_test_fail(__FILE__, line, "%zu bytes leaked", shoal_alloc_bytes() - b0);
}

static sh_st_file *parse_ok(const char *json, uint64_t data_len)
{
	char err[512] = "";
	sh_st_file *f = NULL;
	int rc = sh_st_parse(json, strlen(json), data_len, &f, err, sizeof(err));
	if (rc != 0)
		sh_test_fail(__FILE__, __LINE__, "%s: %s", shoal_strerror(rc), err);
	return f;
}

static void check_tensor(const sh_st_tensor *t, const char *name, shoal_dtype dt, int ndim,
			 const int64_t *shape, uint64_t begin, uint64_t end)
{
	CHECK_STR(t->name, name);
	CHECK_EQ(t->name_len, strlen(name));
	CHECK_EQ(t->dtype, dt);
	CHECK_EQ(t->ndim, ndim);
	for (int d = 0; d < ndim; d++)
		CHECK_EQ(t->shape[d], shape[d]);
	CHECK_EQ(t->begin, begin);
	CHECK_EQ(t->end, end);
}

/* ---- reading valid headers ---------------------------------------------- */

SH_TEST(parse_valid)
{
	/* Out of data order, with metadata last, whitespace between tokens
	 * and padding with spaces: all of which a reader must take. */
	const char *h =
		"{ \"b.bias\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [24, 30]},\n"
		"\"a.weight\":{\"shape\":[2,3],\"dtype\":\"F32\",\"data_offsets\":[0,24]},"
		"\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[30,38]},"
		"\"mask\":{\"dtype\":\"BOOL\",\"shape\":[2,1,1],\"data_offsets\":[38,40]},"
		"\"__metadata__\":{\"format\":\"pt\",\"epoch\":\"3\"}}       ";
	size_t b0 = shoal_alloc_bytes();
	sh_st_file *f = parse_ok(h, 40);
	CHECK_EQ(f->header_len, strlen(h));
	CHECK_EQ(f->data_start, 8 + strlen(h));
	CHECK_EQ(f->data_len, 40);
	CHECK_EQ(f->n, 4);
	check_tensor(&f->t[0], "a.weight", SHOAL_DT_F32, 2, (int64_t[]){2, 3}, 0, 24);
	check_tensor(&f->t[1], "b.bias", SHOAL_DT_BF16, 1, (int64_t[]){3}, 24, 30);
	check_tensor(&f->t[2], "step", SHOAL_DT_I64, 0, NULL, 30, 38);
	check_tensor(&f->t[3], "mask", SHOAL_DT_BOOL, 3, (int64_t[]){2, 1, 1}, 38, 40);
	CHECK_EQ(f->nmeta, 2);
	CHECK_STR(f->meta[0].key, "format");
	CHECK_STR(f->meta[0].val, "pt");
	CHECK_STR(f->meta[1].key, "epoch");
	CHECK_STR(f->meta[1].val, "3");
	sh_st_free(f);
	CHECK_EQ(shoal_alloc_bytes(), b0);

	/* No tensors at all, and "__metadata__": null (serde's None). */
	f = parse_ok("{}", 0);
	CHECK_EQ(f->n, 0);
	CHECK_EQ(f->nmeta, 0);
	sh_st_free(f);
	f = parse_ok("{\"__metadata__\":null}", 0);
	CHECK_EQ(f->nmeta, 0);
	sh_st_free(f);
	/* Every dtype's name and size. */
	f = parse_ok("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[0,3]},"
		     "\"b\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[3,11]}}",
		     11);
	CHECK_EQ(f->t[0].dtype, SHOAL_DT_F8_E4M3);
	CHECK_EQ(f->t[1].dtype, SHOAL_DT_U64);
	sh_st_free(f);
	/* Escapes decode: \u00e9 and the raw UTF-8 are one name. */
	f = parse_ok("{\"caf\\u00e9 \\\"x\\\" \\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],"
		     "\"data_offsets\":[0,1]}}",
		     1);
	CHECK_STR(f->t[0].name, "caf\xc3\xa9 \"x\" \xf0\x9f\x98\x80");
	sh_st_free(f);
	CHECK_EQ(shoal_alloc_bytes(), b0);
}

SH_TEST(prefix)
{
	unsigned char p[8] = {64, 0, 0, 0, 0, 0, 0, 0};
	uint64_t n = 0;
	char err[256];
	CHECK_OK(sh_st_prefix(p, 8 + 64 + 24, &n, err, sizeof(err)));
	CHECK_EQ(n, 64);
	CHECK_OK(sh_st_prefix(p, 8 + 64, &n, err, sizeof(err))); /* no data: fine */

	CHECK_RC(sh_st_prefix(p, 5, &n, err, sizeof(err)), SHOAL_EBADMSG);
	CHECK(strstr(err, "file of 5 bytes") != NULL);
	CHECK_RC(sh_st_prefix(p, 50, &n, err, sizeof(err)), SHOAL_EBADMSG);
	CHECK(strstr(err, "header length 64 runs past the end of the file: 42 bytes") != NULL);

	uint64_t big = SH_ST_MAX_HEADER + 1ull;
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(big >> (8 * i));
	CHECK_RC(sh_st_prefix(p, UINT64_MAX, &n, err, sizeof(err)), SHOAL_EBADMSG);
	CHECK(strstr(err, "100000001") != NULL);
	memset(p, 0xff, 8);
	CHECK_RC(sh_st_prefix(p, UINT64_MAX, &n, err, sizeof(err)), SHOAL_EBADMSG);
	CHECK(strstr(err, "beyond the limit") != NULL);
	/* The bound itself is allowed. */
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)((uint64_t)SH_ST_MAX_HEADER >> (8 * i));
	CHECK_OK(sh_st_prefix(p, UINT64_MAX, &n, NULL, 0));
	CHECK_EQ(n, SH_ST_MAX_HEADER);
}

/* ---- writing ------------------------------------------------------------ */

static void check_bytes(const unsigned char *got, size_t got_len, const void *want, size_t want_len)
{
	if (got_len != want_len || memcmp(got, want, want_len) != 0)
		sh_test_fail(__FILE__, __LINE__, "wrote %zu bytes \"%.*s\", expected %zu \"%.*s\"",
			     got_len, (int)(got_len > 8 ? got_len - 8 : 0), got + 8, want_len,
			     (int)(want_len - 8), (const char *)want + 8);
}

/* The expected outputs of the crate's own tests (tensor.rs:
 * test_serialization, test_serialization_forced_alignement, test_empty). */
SH_TEST(write_reference_vectors)
{
	unsigned char *b;
	size_t len;
	sh_st_tensor t = {.name = "attn.0",
			  .name_len = 6,
			  .dtype = SHOAL_DT_F32,
			  .ndim = 3,
			  .shape = {1, 2, 3},
			  .begin = 0,
			  .end = 24};
	CHECK_OK(sh_st_header_write(&t, 1, NULL, 0, &b, &len));
	static const char v1[] = "\x40\0\0\0\0\0\0\0{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,"
				 "3],\"data_offsets\":[0,24]}}";
	check_bytes(b, len, v1, sizeof(v1) - 1);
	shoal_free(b, len);

	t = (sh_st_tensor){.name = "attn0",
			   .name_len = 5,
			   .dtype = SHOAL_DT_F32,
			   .ndim = 4,
			   .shape = {1, 1, 2, 3},
			   .begin = 0,
			   .end = 24};
	CHECK_OK(sh_st_header_write(&t, 1, NULL, 0, &b, &len));
	static const char v2[] = "\x48\0\0\0\0\0\0\0{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,"
				 "3],\"data_offsets\":[0,24]}}       ";
	check_bytes(b, len, v2, sizeof(v2) - 1);
	shoal_free(b, len);

	CHECK_OK(sh_st_header_write(NULL, 0, NULL, 0, &b, &len));
	static const char v3[] = "\x08\0\0\0\0\0\0\0{}      ";
	check_bytes(b, len, v3, sizeof(v3) - 1);
	shoal_free(b, len);

	sh_st_meta m = {"framework", "pt"};
	CHECK_OK(sh_st_header_write(NULL, 0, &m, 1, &b, &len));
	static const char v4[] = "\x28\0\0\0\0\0\0\0{\"__metadata__\":{\"framework\":\"pt\"}}     ";
	check_bytes(b, len, v4, sizeof(v4) - 1);
	shoal_free(b, len);
}

SH_TEST(write_escapes_and_order)
{
	/* serde_json escapes '"', '\' and bytes below 0x20 only; 0x7f, '/'
	 * and UTF-8 go out raw. */
	static char name[] = "\x01\b\t\n\x0b\f\r\x1f\"\\\x7f/\xc3\xa9";
	sh_st_tensor t[2] = {
		{.name = "z",
		 .name_len = 1,
		 .dtype = SHOAL_DT_U8,
		 .ndim = 1,
		 .shape = {2},
		 .begin = 2,
		 .end = 4},
		{.name = name,
		 .name_len = sizeof(name) - 1,
		 .dtype = SHOAL_DT_U8,
		 .ndim = 1,
		 .shape = {2},
		 .begin = 0,
		 .end = 2},
	};
	sh_st_meta m[2] = {{"k\n", "v\"\x02"}, {"a", ""}};
	unsigned char *b;
	size_t len;
	CHECK_OK(sh_st_header_write(t, 2, m, 2, &b, &len));
	/* Metadata first in the order given, tensors by offset. */
	static const char want[] =
		"{\"__metadata__\":{\"k\\n\":\"v\\\"\\u0002\",\"a\":\"\"},"
		"\"\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f\\\"\\\\\x7f/\xc3\xa9\":{\"dtype\":\"U8\","
		"\"shape\":[2],\"data_offsets\":[0,2]},"
		"\"z\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}";
	size_t n = sizeof(want) - 1, padded = (n + 7) / 8 * 8;
	CHECK_EQ(len, 8 + padded);
	CHECK_EQ(b[0] | b[1] << 8, padded);
	CHECK(memcmp(b + 8, want, n) == 0);
	for (size_t i = 8 + n; i < len; i++)
		CHECK_EQ(b[i], ' ');
	/* and it reads back to the same */
	sh_st_file *f = NULL;
	CHECK_OK(sh_st_parse((char *)b + 8, len - 8, 4, &f, NULL, 0));
	CHECK_EQ(f->n, 2);
	CHECK(f->t[0].name_len == sizeof(name) - 1 &&
	      memcmp(f->t[0].name, name, sizeof(name)) == 0);
	CHECK_STR(f->meta[0].val, "v\"\x02");
	sh_st_free(f);
	shoal_free(b, len);
}

SH_TEST(write_rejects_what_no_header_holds)
{
	unsigned char *b = (unsigned char *)"x";
	size_t len = 1;
	sh_st_tensor ok = {.name = "a",
			   .name_len = 1,
			   .dtype = SHOAL_DT_U8,
			   .ndim = 1,
			   .shape = {4},
			   .begin = 0,
			   .end = 4};
	sh_st_tensor t = ok;
	t.dtype = SHOAL_DT_INVALID;
	CHECK_RC(sh_st_header_write(&t, 1, NULL, 0, &b, &len), SHOAL_EINVAL);
	CHECK(b == NULL && len == 0);
	t = ok;
	t.begin = 5;
	CHECK_RC(sh_st_header_write(&t, 1, NULL, 0, &b, &len), SHOAL_EINVAL);
	t = ok;
	t.name_len = 0;
	CHECK_RC(sh_st_header_write(&t, 1, NULL, 0, &b, &len), SHOAL_EINVAL);
	t = ok;
	t.name = "\xff";
	CHECK_RC(sh_st_header_write(&t, 1, NULL, 0, &b, &len), SHOAL_EINVAL);
	t = ok;
	t.shape[0] = -1;
	CHECK_RC(sh_st_header_write(&t, 1, NULL, 0, &b, &len), SHOAL_EINVAL);
	t = ok;
	t.ndim = SHOAL_TENSOR_MAX_DIMS + 1;
	CHECK_RC(sh_st_header_write(&t, 1, NULL, 0, &b, &len), SHOAL_EINVAL);
	sh_st_meta m = {"k", "\xc3"}; /* cut UTF-8 */
	CHECK_RC(sh_st_header_write(&ok, 1, &m, 1, &b, &len), SHOAL_EINVAL);
}

/* ---- round trips -------------------------------------------------------- */

/* json as the reference writes it: parsed and written again, the prefix,
 * text and padding come out identical. */
static void round_trip(const char *json, uint64_t data_len)
{
	size_t n = strlen(json), padded = (n + 7) / 8 * 8;
	unsigned char *file = calloc(1, 8 + padded);
	CHECK(file != NULL);
	for (int i = 0; i < 8; i++)
		file[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	memcpy(file + 8, json, n);
	memset(file + 8 + n, ' ', padded - n);

	uint64_t hl;
	char err[512] = "";
	sh_st_file *f = NULL;
	CHECK_OK(sh_st_prefix(file, 8 + padded + data_len, &hl, err, sizeof(err)));
	CHECK_EQ(hl, padded);
	int rc = sh_st_parse((char *)file + 8, hl, data_len, &f, err, sizeof(err));
	if (rc != 0)
		sh_test_fail(__FILE__, __LINE__, "%s: %s", shoal_strerror(rc), err);
	unsigned char *b;
	size_t len;
	CHECK_OK(sh_st_header_write(f->t, f->n, f->meta, f->nmeta, &b, &len));
	check_bytes(b, len, file, 8 + padded);
	shoal_free(b, len);
	sh_st_free(f);
	free(file);
}

SH_TEST(round_trip_canonical)
{
	size_t b0 = shoal_alloc_bytes();
	/* The crate's layout: dtype descending in its enum's order (F64 >
	 * F32 > BF16 > U8), then by name. At offset 32 the empty F32 "zempty"
	 * precedes the empty BF16 "a0": order by name alone would swap them.
	 * Names need escaping, one is not ASCII, one tensor is a scalar. */
	round_trip("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"tab\\there \\\"q\\\"\"},"
		   "\"a\\\"q\\\\b\\n\\u001f\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,"
		   "16]},"
		   "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[16,16]},"
		   "\"w\xc3\xa9ight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]},"
		   "\"zempty\":{\"dtype\":\"F32\",\"shape\":[4,0],\"data_offsets\":[32,32]},"
		   "\"a0\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[32,32]},"
		   "\"scalar\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[32,34]},"
		   "\"\xe6\xa8\xa1\xe5\x9e\x8b\":{\"dtype\":\"U8\",\"shape\":[1,1,1],"
		   "\"data_offsets\":[34,35]}}",
		   35);
	/* All empty: every tensor at offset 0. */
	round_trip("{\"u\":{\"dtype\":\"U64\",\"shape\":[0],\"data_offsets\":[0,0]},"
		   "\"i\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]},"
		   "\"f\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[0,0]},"
		   "\"e\":{\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[0,0]},"
		   "\"d\":{\"dtype\":\"F8_E5M2\",\"shape\":[0],\"data_offsets\":[0,0]},"
		   "\"b\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[0,0]}}",
		   0);
	round_trip("{}", 0);
	round_trip("{\"__metadata__\":{\"framework\":\"pt\"}}", 0);
	round_trip("{\"x\":{\"dtype\":\"I32\",\"shape\":[1000000,1000],\"data_offsets\":[0,"
		   "4000000000]}}",
		   4000000000u);
	CHECK_EQ(shoal_alloc_bytes(), b0);
}

/* ---- rejections, one rule each ------------------------------------------ */

#define T1(name, dtype, shape, b, e)                                                             \
	"\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e \
	"]}"

SH_TEST(reject_not_an_object)
{
	EXPECT_BAD("[1,2]", 0, SHOAL_EBADMSG, "expected '{', got '['");
	EXPECT_BAD("\"x\"", 0, SHOAL_EBADMSG, "not a JSON object");
	EXPECT_BAD("", 0, SHOAL_EBADMSG, "header is empty");
	EXPECT_BAD("        ", 0, SHOAL_EBADMSG, "all whitespace");
	EXPECT_BAD("\xef\xbb\xbf{}", 0, SHOAL_EBADMSG, "byte 0xef"); /* a BOM */
	EXPECT_BAD("{\"a\":1}", 0, SHOAL_EBADMSG, "tensor \"a\": expected an object");
}

SH_TEST(reject_invalid_json)
{
	EXPECT_BAD("{\"a\":}", 0, SHOAL_EBADMSG, "invalid JSON at byte 5");
	EXPECT_BAD("{\"a\" 1}", 0, SHOAL_EBADMSG, "invalid JSON");
	EXPECT_BAD("{\"a\":1,}", 0, SHOAL_EBADMSG, "invalid JSON");
	EXPECT_BAD("{", 0, SHOAL_EBADMSG, "invalid JSON");
	EXPECT_BAD("{}}", 0, SHOAL_EBADMSG, "unexpected '}' at byte 2");
	EXPECT_BAD("}", 0, SHOAL_EBADMSG, "expected '{', got '}'");
	EXPECT_BAD("{\"a\":]}", 0, SHOAL_EBADMSG,
		   "unbalanced ']' at byte 5 of the header: it closes a '{'");
	EXPECT_BAD("{\"a\":[}", 0, SHOAL_EBADMSG, "unbalanced '}'");
	EXPECT_BAD("{} {}", 0, SHOAL_EBADMSG, "after the JSON object");
	EXPECT_BAD("{}x", 0, SHOAL_EBADMSG, "unexpected 'x' at byte 2");
	EXPECT_BAD("{\"a\":tru}", 0, SHOAL_EBADMSG, "unexpected 't'");
	EXPECT_BAD("{\"a", 0, SHOAL_EBADMSG, "not terminated");
	/* What cJSON alone would take but serde_json refuses. */
	EXPECT_BAD("{" T1("a", "U8", "[01]", 0, 1) "}", 1, SHOAL_EBADMSG, "leading zero");
	EXPECT_BAD("{" T1("a", "U8", "[+1]", 0, 1) "}", 1, SHOAL_EBADMSG, "unexpected '+'");
	EXPECT_BAD("{" T1("a", "U8", "[1.]", 0, 1) "}", 1, SHOAL_EBADMSG, "no digits after '.'");
	EXPECT_BAD("{" T1("a\x01", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "raw control byte 0x01");
	EXPECT_BAD("{" T1("a\xff", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "invalid UTF-8 at byte 3");
	EXPECT_BAD("{" T1("\xed\xa0\x80", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "invalid UTF-8"); /* an encoded surrogate */
	EXPECT_BAD("{" T1("a\\x", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG, "invalid escape");
	EXPECT_BAD("{" T1("a\\u12", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG, "4 hex digits");
	EXPECT_BAD("{" T1("\\ud800", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "unpaired UTF-16 surrogate \\ud800 at byte 2");
	EXPECT_BAD("{" T1("\\ud83d\\u0041", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "unpaired UTF-16 surrogate \\ud83d");
	EXPECT_BAD("{" T1("\\uDE00", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "unpaired UTF-16 surrogate \\ude00");
	EXPECT_BAD("{\"a\":\"b\", \"c\":1\x0b}", 0, SHOAL_EBADMSG, "byte 0x0b");
}

/* A header of n bytes: head, then fill bytes of c, then tail. */
static char *filled(const char *head, char c, size_t n, const char *tail)
{
	char *h = malloc(n + 1);
	CHECK(h != NULL);
	size_t hl = strlen(head), tl = strlen(tail);
	memcpy(h, head, hl);
	memset(h + hl, c, n - hl - tl);
	memcpy(h + n - tl, tail, tl);
	h[n] = 0;
	return h;
}

SH_TEST(reject_whitespace_filler)
{
	/* The attack: 50 MiB of spaces around "{}" (the reference reader takes
	 * it, serde_json skipping whitespace), which made an empty tensor_dict
	 * out of a 50 MiB header. */
	size_t big = 50u << 20;
	char *h = filled("{}", ' ', big, "");
	expect_bad(__LINE__, h, big, 0, SHOAL_EBADMSG,
		   "52428798 bytes of padding after the JSON object: expected at most 4095");
	free(h);
	h = filled("", ' ', big, "{}");
	expect_bad(__LINE__, h, big, 0, SHOAL_EBADMSG,
		   "header starts with 52428798 bytes of whitespace: expected '{' at byte 0");
	free(h);
	h = filled("{", '\n', big, "}");
	expect_bad(__LINE__, h, big, 0, SHOAL_EBADMSG,
		   "52428798 bytes of whitespace at byte 1 of the header: expected at most 4095");
	free(h);
	h = filled("", '\t', big, "");
	expect_bad(__LINE__, h, big, 0, SHOAL_EBADMSG, "all whitespace");
	free(h);
	/* The format's rule: '{' first; spaces only after the object. */
	EXPECT_BAD(" {}", 0, SHOAL_EBADMSG, "starts with 1 bytes of whitespace");
	EXPECT_BAD("\t\n{}\r ", 0, SHOAL_EBADMSG, "expected '{' at byte 0");
	EXPECT_BAD("{}\n", 0, SHOAL_EBADMSG,
		   "byte 0x0a at byte 2 of the header, after the JSON object: the header may be "
		   "padded with spaces only");
	EXPECT_BAD("{}   \t", 0, SHOAL_EBADMSG, "padded with spaces only");
	/* At the limit, both ways: 4095 spaces of padding or of layout pass,
	 * 4096 do not. */
	h = filled("{}", ' ', 2 + 4095, "");
	sh_st_file *f = parse_ok(h, 0);
	CHECK_EQ(f->n, 0);
	CHECK_EQ(f->header_len, 2 + 4095);
	sh_st_free(f);
	free(h);
	h = filled("{}", ' ', 2 + 4096, "");
	expect_bad(__LINE__, h, 2 + 4096, 0, SHOAL_EBADMSG, "4096 bytes of padding");
	free(h);
	h = filled("{", '\n', 2 + 4095, "}");
	f = parse_ok(h, 0);
	sh_st_free(f);
	free(h);
	h = filled("{", ' ', 2 + 4096, "}");
	expect_bad(__LINE__, h, 2 + 4096, 0, SHOAL_EBADMSG, "4096 bytes of whitespace at byte 1");
	free(h);
}

SH_TEST(reject_nul_in_strings)
{
	/* Names are C strings: "a\u0000b" would silently become "a". */
	EXPECT_BAD("{" T1("a\\u0000b", "U8", "[1]", 0, 1) "}", 1, SHOAL_EBADMSG, "cannot hold NUL");
	EXPECT_BAD("{\"__metadata__\":{\"k\":\"\\u0000\"}}", 0, SHOAL_EBADMSG, "\\u0000 at byte");
	/* a raw NUL byte is a control byte */
	static const char h[] = "{\"a\0\":{}}";
	expect_bad(__LINE__, h, sizeof(h) - 1, 0, SHOAL_EBADMSG, "raw control byte 0x00");
}

SH_TEST(reject_deep_nesting)
{
	/* 100000 '[' would take cJSON 100000 frames deep (it stops at 1000;
	 * the lexical pass stops far sooner). */
	size_t n = 100000;
	char *h = malloc(n + 16);
	CHECK(h != NULL);
	strcpy(h, "{\"a\":");
	memset(h + 5, '[', n);
	h[5 + n] = '\0';
	EXPECT_BAD(h, 0, SHOAL_EBADMSG, "nests deeper than 16 levels at byte 20");
	/* objects too, and well-formed */
	size_t o = 1;
	h[0] = '{';
	for (int i = 0; i < 5000; i++) {
		memcpy(h + o, "\"a\":{", 5);
		o += 5;
	}
	for (int i = 0; i < 5001; i++)
		h[o++] = '}';
	h[o] = '\0';
	EXPECT_BAD(h, 0, SHOAL_EBADMSG, "nests deeper than");
	free(h);
	/* depth 16 itself is allowed by the lexical pass (and then refused
	 * as a shape that holds arrays) */
	EXPECT_BAD("{" T1("a", "U8", "[[[[[[[[[[[[[[1]]]]]]]]]]]]]]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "shape[0] is an array");
}

SH_TEST(reject_tensor_fields)
{
	EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, SHOAL_EBADMSG,
		   "tensor \"a\": missing field \"data_offsets\"");
	EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
		   SHOAL_EBADMSG, "unknown field \"x\"");
	EXPECT_BAD(
		"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		1, SHOAL_EBADMSG, "duplicate field \"dtype\"");
	EXPECT_BAD("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, SHOAL_EBADMSG,
		   "dtype must be a string, got a number");
	EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":{},\"data_offsets\":[0,1]}}", 1,
		   SHOAL_EBADMSG, "shape must be an array of integers, got an object");
	EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
		   SHOAL_EBADMSG, "data_offsets must be [begin, end], got an array of length 1");
	EXPECT_BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":null}}", 1,
		   SHOAL_EBADMSG, "got null");
	EXPECT_BAD("{" T1("a", "U8", "[1]", 0, "1") "}", 1, SHOAL_EBADMSG,
		   "data_offsets[1] is a string");
}

SH_TEST(reject_unknown_dtype)
{
	EXPECT_BAD("{" T1("a", "F33", "[1]", 0, 4) "}", 4, SHOAL_EBADMSG,
		   "tensor \"a\": unknown dtype \"F33\" (known: BOOL U8");
	EXPECT_BAD("{" T1("a", "f32", "[1]", 0, 4) "}", 4, SHOAL_EBADMSG, "unknown dtype \"f32\"");
	/* newer than shoal: refused, not misread */
	EXPECT_BAD("{" T1("a", "C64", "[1]", 0, 8) "}", 8, SHOAL_EBADMSG, "unknown dtype \"C64\"");
}

SH_TEST(reject_bad_dims)
{
	EXPECT_BAD("{" T1("a", "U8", "[2.5]", 0, 2) "}", 2, SHOAL_EBADMSG,
		   "tensor \"a\": shape[0] is 2.5, expected an integer");
	EXPECT_BAD("{" T1("a", "U8", "[1,-1]", 0, 2) "}", 2, SHOAL_EBADMSG, "shape[1] is -1");
	EXPECT_BAD("{" T1("a", "U8", "[-0]", 0, 0) "}", 0, SHOAL_EBADMSG, "shape[0] is -0");
	/* integral values written as floats: serde_json refuses them */
	EXPECT_BAD("{" T1("a", "U8", "[2.0]", 0, 2) "}", 2, SHOAL_EBADMSG,
		   "number 2.0 at byte 28 of the header");
	EXPECT_BAD("{" T1("a", "U8", "[2]", 0, 2e0) "}", 2, SHOAL_EBADMSG, "number 2e0");
	/* beyond what a double holds exactly */
	EXPECT_BAD("{" T1("a", "U8", "[0,9007199254740993]", 0, 0) "}", 0, SHOAL_EBADMSG,
		   "shape[1] is 9007199254740992 (2^53 or more), expected an integer from 0 to "
		   "2^53 - 1");
	EXPECT_BAD("{" T1("a", "U8", "[1e300]", 0, 0) "}", 0, SHOAL_EBADMSG,
		   "1.0000000000000001e+300");
	EXPECT_BAD("{" T1("a", "U8", "[100000000000000000000000000000000000000000000]", 0, 0) "}",
		   0, SHOAL_EBADMSG, "number of 45 characters");
	EXPECT_BAD("{" T1("a", "U8", "[true]", 0, 1) "}", 1, SHOAL_EBADMSG,
		   "shape[0] is a boolean");
	EXPECT_BAD("{" T1("a", "U8", "[1]", -1, 0) "}", 1, SHOAL_EBADMSG, "data_offsets[0] is -1");
}

SH_TEST(reject_too_many_dims)
{
	char h[512];
	char shape[128] = "[1";
	for (int i = 1; i < SHOAL_TENSOR_MAX_DIMS; i++)
		strcat(shape, ",1");
	strcat(shape, "]");
	/* 32 dimensions are fine */
	snprintf(h, sizeof(h), "{\"a\":{\"dtype\":\"U8\",\"shape\":%s,\"data_offsets\":[0,1]}}",
		 shape);
	sh_st_file *f = parse_ok(h, 1);
	CHECK_EQ(f->t[0].ndim, SHOAL_TENSOR_MAX_DIMS);
	sh_st_free(f);
	shape[strlen(shape) - 1] = '\0';
	strcat(shape, ",1]");
	snprintf(h, sizeof(h), "{\"a\":{\"dtype\":\"U8\",\"shape\":%s,\"data_offsets\":[0,1]}}",
		 shape);
	EXPECT_BAD(h, 1, SHOAL_EBADMSG, "tensor \"a\": shape has 33 dimensions, at most 32");
}

SH_TEST(reject_size_overflow)
{
	EXPECT_BAD("{" T1("a", "U8", "[4294967296,4294967296,4294967296]", 0, 0) "}", 0,
		   SHOAL_EBADMSG,
		   "tensor \"a\": U8 [4294967296, 4294967296, 4294967296] has more than 2^64 "
		   "elements");
	/* the element count fits, the bytes do not */
	EXPECT_BAD("{" T1("a", "F32", "[4294967296,1073741824]", 0, 0) "}", 0, SHOAL_EBADMSG,
		   "more than 2^64 bytes");
	/* an empty dimension after a huge product is still an overflow:
	 * the reference multiplies left to right and fails the same way */
	EXPECT_BAD("{" T1("a", "U8", "[4294967296,4294967296,4294967296,0]", 0, 0) "}", 0,
		   SHOAL_EBADMSG, "2^64 elements");
	/* no elements, but a reader's strides would overflow (the fuzzer's find:
	 * its own check multiplies bytes, not elements, and disagreed) */
	EXPECT_BAD("{" T1("a", "F64", "[900719920,4854740991,0,4096]", 0, 0) "}", 0, SHOAL_EBADMSG,
		   "strides that do not fit");
}

SH_TEST(reject_size_mismatch)
{
	char err[512];
	sh_st_file *f = NULL;
	const char *h = "{" T1("a.weight", "F32", "[5,6]", 0, 100) "}";
	CHECK_RC(sh_st_parse(h, strlen(h), 100, &f, err, sizeof(err)), SHOAL_EBADMSG);
	CHECK_STR(err, "tensor \"a.weight\": data_offsets [0, 100) hold 100 bytes, but F32 [5, 6] "
		       "needs 120");
	EXPECT_BAD("{" T1("s", "I64", "[]", 0, 4) "}", 4, SHOAL_EBADMSG, "but I64 [] needs 8");
	EXPECT_BAD("{" T1("z", "I64", "[3,0]", 0, 8) "}", 8, SHOAL_EBADMSG, "I64 [3, 0] needs 0");
}

SH_TEST(reject_bad_offsets)
{
	EXPECT_BAD("{" T1("a", "U8", "[4]", 8, 4) "}", 8, SHOAL_EBADMSG,
		   "tensor \"a\": data_offsets [8, 4): begin is after end");
	EXPECT_BAD("{" T1("a", "F32", "[2]", 0, 8) "," T1("b", "F32", "[2]", 4, 12) "}", 12,
		   SHOAL_EBADMSG, "tensor \"b\": data_offsets [4, 12) overlap tensor \"a\" [0, 8)");
	/* the same range twice */
	EXPECT_BAD("{" T1("a", "F32", "[2]", 0, 8) "," T1("b", "U8", "[8]", 0, 8) "}", 8,
		   SHOAL_EBADMSG, "overlap");
	/* an empty tensor inside another */
	EXPECT_BAD("{" T1("a", "F32", "[2]", 0, 8) "," T1("b", "U8", "[0]", 4, 4) "}", 8,
		   SHOAL_EBADMSG, "tensor \"b\": data_offsets [4, 4) overlap");
	EXPECT_BAD("{" T1("a", "F32", "[1]", 0, 4) "," T1("b", "F32", "[1]", 8, 12) "}", 12,
		   SHOAL_EBADMSG,
		   "gap of 4 bytes in the data area: tensor \"a\" ends at 4, the next, \"b\", "
		   "begins at 8");
	EXPECT_BAD("{" T1("a", "F32", "[1]", 4, 8) "}", 8, SHOAL_EBADMSG,
		   "gap of 4 bytes at the start of the data area");
	EXPECT_BAD("{" T1("a", "F32", "[1]", 0, 4) "}", 10, SHOAL_EBADMSG,
		   "6 trailing bytes: the tensors end at byte 4 of the 10-byte data area");
	EXPECT_BAD("{}", 3, SHOAL_EBADMSG, "3 trailing bytes");
	EXPECT_BAD("{" T1("a", "F32", "[2]", 0, 8) "}", 4, SHOAL_EBADMSG,
		   "tensor \"a\": data_offsets [0, 8) run past the end of the 4-byte data area");
}

SH_TEST(reject_duplicate_names)
{
	EXPECT_BAD("{" T1("a", "U8", "[4]", 0, 4) "," T1("a", "U8", "[4]", 4, 8) "}", 8,
		   SHOAL_EBADMSG, "duplicate tensor name \"a\"");
	/* spelt differently, the same name */
	EXPECT_BAD("{" T1("ab", "U8", "[4]", 0, 4) "," T1("\\u0061b", "U8", "[4]", 4, 8) "}", 8,
		   SHOAL_EBADMSG, "duplicate tensor name \"ab\"");
	EXPECT_BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, SHOAL_EBADMSG,
		   "duplicate key \"__metadata__\"");
}

SH_TEST(reject_empty_name)
{
	EXPECT_BAD("{" T1("", "U8", "[4]", 0, 4) "}", 4, SHOAL_EBADMSG,
		   "a tensor has an empty name");
}

SH_TEST(reject_bad_metadata)
{
	EXPECT_BAD("{\"__metadata__\":{\"epoch\":3}}", 0, SHOAL_EBADMSG,
		   "\"__metadata__\" key \"epoch\": values must be strings, got 3");
	EXPECT_BAD("{\"__metadata__\":{\"a\":\"x\",\"n\":null}}", 0, SHOAL_EBADMSG,
		   "key \"n\": values must be strings, got null");
	EXPECT_BAD("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0, SHOAL_EBADMSG, "got an object");
	EXPECT_BAD("{\"__metadata__\":[\"a\"]}", 0, SHOAL_EBADMSG,
		   "\"__metadata__\" must be an object of strings, got an array");
	EXPECT_BAD("{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0, SHOAL_EBADMSG,
		   "duplicate \"__metadata__\" key \"k\"");
}

SH_TEST(reject_header_too_long)
{
	/* Refused on its length alone: not a byte past the first is read. */
	char err[256];
	sh_st_file *f = NULL;
	CHECK_RC(sh_st_parse("{}", SH_ST_MAX_HEADER + 1ull, 0, &f, err, sizeof(err)),
		 SHOAL_EBADMSG);
	CHECK(strstr(err, "header of 100000001 bytes is beyond the limit") != NULL);
}

SH_TEST(messages_stay_short)
{
	/* A hostile name of 64 KiB is cut in the message, at a character. */
	size_t n = 1 << 16;
	char *h = malloc(n * 2 + 128);
	CHECK(h != NULL);
	size_t o = 0;
	h[o++] = '{';
	h[o++] = '"';
	for (size_t i = 0; i < n / 2; i++) {
		h[o++] = '\xc3';
		h[o++] = '\xa9';
	}
	strcpy(h + o, "\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}");
	char err[1024];
	sh_st_file *f = NULL;
	CHECK_RC(sh_st_parse(h, strlen(h), 0, &f, err, sizeof(err)), SHOAL_EBADMSG);
	CHECK(strlen(err) < 400);
	CHECK(strstr(err, "\xc3\xa9...\": unknown dtype \"X\"") != NULL);
	/* errlen 0 and err NULL are fine */
	CHECK_RC(sh_st_parse(h, strlen(h), 0, &f, NULL, 0), SHOAL_EBADMSG);
	CHECK_RC(sh_st_parse(h, strlen(h), 0, &f, err, 1), SHOAL_EBADMSG);
	CHECK_EQ(err[0], '\0');
	free(h);
}

/* ---- allocation failures ------------------------------------------------ */

/* Fails the fail_at-th allocation; checks every free's size against the
 * one allocated. */
#define HDR 16
static long calls, fail_at = -1;
static size_t live;

static void *f_alloc(size_t size, void *ctx)
{
	if (fail_at >= 0 && calls++ == fail_at)
		return NULL;
	size_t *p = malloc(size + HDR);
	if (!p)
		return NULL;
	p[0] = size;
	live += size;
	return (char *)p + HDR;
}

static void f_free(void *p, size_t size, void *ctx)
{
	if (!p)
		return;
	size_t *h = (size_t *)((char *)p - HDR);
	if (h[0] != size)
		sh_test_fail(__FILE__, __LINE__, "sized free: %zu, allocated %zu", size, h[0]);
	live -= size;
	free(h);
}

static const shoal_allocator failing = {f_alloc, NULL, f_free, NULL};

SH_TEST(out_of_memory)
{
	const char *h =
		"{\"__metadata__\":{\"a\":\"b\",\"c\":\"d\"}," T1("x", "U8", "[4]", 0, 4) "," T1(
			"y", "U8", "[4]", 4, 8) "," T1("z", "U8", "[]", 8, 9) "}";
	shoal_set_allocator(&failing);
	bool done = false;
	for (long n = 0; n < 1000 && !done; n++) {
		char err[256] = "";
		sh_st_file *f = NULL;
		calls = 0;
		fail_at = n;
		int rc = sh_st_parse(h, strlen(h), 9, &f, err, sizeof(err));
		fail_at = -1;
		if (rc == 0) {
			done = true;
			sh_st_free(f);
		} else {
			CHECK_RC(rc, SHOAL_ENOMEM);
			CHECK(strstr(err, "out of memory") != NULL);
			CHECK(f == NULL);
		}
		CHECK_EQ(live, 0);
	}
	CHECK(done);

	sh_st_file *f = parse_ok(h, 9);
	done = false;
	for (long n = 0; n < 1000 && !done; n++) {
		unsigned char *b = NULL;
		size_t len = 0, live0 = live;
		calls = 0;
		fail_at = n;
		int rc = sh_st_header_write(f->t, f->n, f->meta, f->nmeta, &b, &len);
		fail_at = -1;
		if (rc == 0) {
			done = true;
			shoal_free(b, len);
		} else {
			CHECK_RC(rc, SHOAL_ENOMEM);
			CHECK(b == NULL);
		}
		CHECK_EQ(live, live0);
	}
	CHECK(done);
	sh_st_free(f);
	CHECK_EQ(live, 0);
	shoal_set_allocator(NULL);
}

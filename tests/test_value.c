/* RPC values: constructors, equality, and the wire: every kind round trips
 * through msgpack, and hostile bytes (bad UTF-8, ext types, deep nesting,
 * counts beyond the input, integers beyond int64) are rejected with a
 * reason. */
#include "test.h"

#include "rpc/value.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

/* Packs v as sh_value_pack_ref does, and gathers the bytes it left where
 * they lie into one buffer (freed by the caller). */
static unsigned char *pack_gathered(const shoal_value *v, size_t *len, uint32_t *nrefs)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_value_pack_ref(&pk, v, NULL, &w);
	CHECK_OK(w.err);
	const sh_msg_part *parts;
	uint32_t n;
	CHECK_OK(sh_wbuf_gather(&w, &parts, &n));
	unsigned char *all = malloc(w.len + w.ref_bytes + 1);
	CHECK(all != NULL);
	*len = 0;
	for (uint32_t i = 0; i < n; *len += parts[i++].n)
		memcpy(all + *len, parts[i].p, parts[i].n);
	CHECK_EQ(*len, w.len + w.ref_bytes);
	*nrefs = w.nrefs;
	sh_wbuf_fini(&w);
	return all;
}

/* Packs and decodes v; packing by reference must give the same bytes. */
static shoal_value *round_trip(shoal_vbuf *b, const shoal_value *v)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_value_pack(&pk, v, NULL, NULL);
	CHECK_OK(w.err);
	size_t glen;
	uint32_t nrefs;
	unsigned char *g = pack_gathered(v, &glen, &nrefs);
	CHECK_EQ(glen, w.len);
	CHECK(memcmp(g, w.p, w.len) == 0);
	free(g);
	sh_mp m;
	sh_mp_init(&m, w.p, w.len);
	shoal_value *out;
	char why[128];
	CHECK_OK(sh_value_decode(&m, b, NULL, &out, why, sizeof(why)));
	CHECK_OK(sh_mp_done(&m));
	sh_wbuf_fini(&w);
	return out;
}

static int decode(const char *bytes, size_t n, char *why, size_t whylen)
{
	shoal_vbuf *b;
	CHECK_OK(shoal_vbuf_create(&b));
	sh_mp m;
	sh_mp_init(&m, bytes, n);
	shoal_value *v;
	why[0] = 0;
	int rc = sh_value_decode(&m, b, NULL, &v, why, whylen);
	shoal_vbuf_free(b);
	return rc;
}

SH_TEST(every_kind_round_trips)
{
	shoal_vbuf *b;
	CHECK_OK(shoal_vbuf_create(&b));
	shoal_value *a = shoal_v_array(b, 10);
	shoal_v_set(a, 0, shoal_v_nil(b));
	shoal_v_set(a, 1, shoal_v_bool(b, false));
	shoal_v_set(a, 2, shoal_v_int(b, INT64_MIN));
	shoal_v_set(a, 3, shoal_v_int(b, INT64_MAX));
	shoal_v_set(a, 4, shoal_v_float(b, -0.0));
	shoal_v_set(a, 5, shoal_v_cstr(b, "\xe2\x82\xac uro"));
	shoal_v_set(a, 6, shoal_v_bytes(b, "\0\xff", 2));
	shoal_v_set(a, 7, shoal_v_map(b, 0));
	shoal_value *m = shoal_v_map(b, 1);
	shoal_v_map_set(m, 0, shoal_v_int(b, 5), shoal_v_array(b, 0)); /* any key kind */
	shoal_v_set(a, 8, m);
	static const float f[6] = {1, 2, 3, 4, 5, 6.5f};
	int64_t shape[2] = {2, 3};
	shoal_v_set(a, 9, shoal_v_tensor(b, SHOAL_DT_F32, 2, shape, f));
	shoal_value *r = round_trip(b, a);
	CHECK(shoal_v_equal(a, r));
	CHECK_EQ(r->v.items[5].v.s[r->v.items[5].n], 0); /* NUL after the bytes */
	const shoal_value *t = &r->v.items[9];
	CHECK_EQ(t->type, SHOAL_V_TENSOR);
	CHECK_EQ(t->v.t.shape[1], 3);
	CHECK_EQ(t->v.t.nbytes, 24);
	CHECK(((const float *)t->v.t.data)[5] == 6.5f);
	CHECK_EQ((uintptr_t)t->v.t.data % 8, 0);
	DLManagedTensor *dl;
	CHECK_OK(shoal_v_dlpack(t, &dl));
	CHECK_EQ(dl->dl_tensor.ndim, 2);
	CHECK_EQ(dl->dl_tensor.shape[1], 3);
	CHECK_EQ(dl->dl_tensor.strides[0], 3);
	CHECK_EQ(dl->dl_tensor.dtype.code, kDLFloat);
	CHECK(((const float *)dl->dl_tensor.data)[5] == 6.5f);
	dl->deleter(dl);
	CHECK_RC(shoal_v_dlpack(&r->v.items[2], &dl), SHOAL_EINVAL);	/* not a tensor */
	CHECK(shoal_v_tensor(b, SHOAL_DT_F32, 2, shape, NULL) == NULL); /* no data */
	/* equality tells apart what differs */
	shoal_value *other = shoal_v_int(b, 3);
	CHECK(!shoal_v_equal(a, other));
	CHECK(shoal_v_map_get(m, "x") == NULL);
	CHECK_RC(shoal_v_set(a, 10, other), SHOAL_EINVAL);
	/* large payloads, which packing by reference leaves where they lie */
	size_t big = 3 * SH_VALUE_REF_MIN;
	char *mem = calloc(1, big + 1);
	CHECK(mem != NULL);
	memset(mem, 'x', big);
	int64_t len = (int64_t)big / 4;
	shoal_value *l = shoal_v_array(b, 5);
	shoal_v_set(l, 0, shoal_v_str(b, mem, big));
	shoal_v_set(l, 1, shoal_v_bytes(b, mem, SH_VALUE_REF_MIN));
	shoal_v_set(l, 2, shoal_v_bytes(b, mem, SH_VALUE_REF_MIN - 1));
	shoal_v_set(l, 3, shoal_v_tensor(b, SHOAL_DT_F32, 1, &len, mem));
	shoal_v_set(l, 4, shoal_v_blob(b, mem, big));
	CHECK(shoal_v_equal(l, round_trip(b, l)));
	size_t glen;
	uint32_t nrefs;
	free(pack_gathered(l, &glen, &nrefs));
	CHECK_EQ(nrefs, 4);
	free(mem);
	shoal_vbuf_free(b);
}

/* Packs v with its large payloads out of band, then decodes the body and
 * those bytes as a receiver would; rc of the decode or of the fill. */
static int oob_trip(shoal_vbuf *b, const shoal_value *v, shoal_value **out, uint64_t *oob,
		    char *why, size_t whylen)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_value_pack(&pk, v, NULL, &w);
	CHECK_OK(w.err);
	*oob = w.oob_bytes;
	unsigned char *tail = malloc(w.oob_bytes + 1);
	CHECK(tail != NULL);
	size_t at = 0;
	for (uint32_t i = 0; i < w.noob; i++, at += w.oob[i - 1].n)
		memcpy(tail + at, w.oob[i].p, w.oob[i].n);
	sh_oob o = {0};
	sh_oob_reset(&o, w.oob_bytes);
	sh_mp m;
	sh_mp_init(&m, w.p, w.len);
	int rc = sh_value_decode(&m, b, &o, out, why, whylen);
	if (rc == 0)
		rc = sh_oob_copy(&o, tail, at, why, whylen);
	sh_oob_fini(&o);
	free(tail);
	sh_wbuf_fini(&w);
	return rc;
}

/* Large strings, bytes and tensors go after the body, by reference on
 * the way out and into the receiver's vbuf on the way in. */
SH_TEST(large_payloads_out_of_band)
{
	shoal_vbuf *b, *r;
	CHECK_OK(shoal_vbuf_create(&b));
	CHECK_OK(shoal_vbuf_create(&r));
	size_t n = 3 * SH_VALUE_OOB_MIN + 5;
	char *text = malloc(n);
	CHECK(text != NULL);
	for (size_t i = 0; i < n; i++)
		text[i] = (char)('a' + i % 26);
	int64_t shape[2] = {16, 33}; /* 4224 bytes, within text */
	shoal_value *a = shoal_v_array(b, 7);
	shoal_v_set(a, 5, shoal_v_blob(b, text, n));			/* out of band */
	shoal_v_set(a, 6, shoal_v_blob(b, text, SH_VALUE_OOB_MIN / 2)); /* inline */
	shoal_v_set(a, 0, shoal_v_str(b, text, n));
	shoal_v_set(a, 1, shoal_v_bytes(b, text, SH_VALUE_OOB_MIN - 1)); /* inline */
	shoal_v_set(a, 2, shoal_v_tensor(b, SHOAL_DT_F64, 2, shape, text));
	shoal_v_set(a, 3, shoal_v_bytes(b, text + 1, n - 1));
	shoal_v_set(a, 4, shoal_v_int(b, 7));
	shoal_value *out;
	uint64_t oob;
	char why[160];
	CHECK_OK(oob_trip(r, a, &out, &oob, why, sizeof(why)));
	CHECK_EQ(oob, n + 16 * 33 * 8 + n - 1 + n);
	CHECK(shoal_v_equal(a, out));
	CHECK_EQ(out->v.items[5].type, SHOAL_V_BLOB);
	CHECK_EQ(out->v.items[6].type, SHOAL_V_BLOB);
	CHECK_EQ(out->v.items[6].v.t.nbytes, SH_VALUE_OOB_MIN / 2);
	CHECK_EQ(out->v.items[0].v.s[n], 0); /* a NUL after a string's bytes */
	CHECK_EQ((uintptr_t)out->v.items[2].v.t.data % 64, 0);
	/* a string out of band is checked once its bytes are in */
	text[n - 1] = (char)0xff;
	shoal_v_set(a, 0, shoal_v_str(b, text, n));
	CHECK_RC(oob_trip(r, a, &out, &oob, why, sizeof(why)), SHOAL_EBADMSG);
	CHECK(strstr(why, "UTF-8") != NULL);
	/* hostile headers: more declared than the frame carries, less, an
	 * unknown kind, a tensor whose count disagrees with its shape, and
	 * any at all where nothing may follow */
	static const unsigned char hdr[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0x10};
	unsigned char body[3 + 24] = {0xc7, 16, SH_EXT_OOB};
	memcpy(body + 3, hdr, 16);
	sh_oob o = {0};
	sh_mp m;
	struct {
		uint64_t want;
		unsigned char kind, ndim, len;
		const char *says;
	} bad[] = {
		{8, 0, 0, 19, "more bytes declared"}, {32, 0, 0, 19, "frame carries 32"},
		{16, 4, 0, 19, "unknown kind"},	      {16, 3, 0, 19, "blob that is not 1-D uint8"},
		{16, 2, 1, 27, "does not match"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		body[1] = (unsigned char)(bad[i].len - 3);
		body[3] = bad[i].kind;
		body[4] = SHOAL_DT_F32;
		body[5] = bad[i].ndim;
		int64_t dim = 5; /* 20 bytes, not 16 */
		memcpy(body + 19, &dim, 8);
		sh_oob_reset(&o, bad[i].want);
		sh_mp_init(&m, body, bad[i].len);
		why[0] = 0;
		int rc = sh_value_decode(&m, r, &o, &out, why, sizeof(why));
		if (rc != SHOAL_EBADMSG || !strstr(why, bad[i].says))
			sh_test_fail(__FILE__, __LINE__, "case %zu: %d, \"%s\"", i, rc, why);
	}
	body[1] = 16;
	body[3] = 0;
	sh_mp_init(&m, body, 19);
	CHECK_RC(sh_value_decode(&m, r, NULL, &out, why, sizeof(why)), SHOAL_EBADMSG);
	CHECK(strstr(why, "where none can follow") != NULL);
	sh_oob_fini(&o);
	free(text);
	shoal_vbuf_free(b);
	shoal_vbuf_free(r);
}

/* A vbuf hands what it owns to another: values stay valid there. */
SH_TEST(vbuf_adopt_moves_memory)
{
	shoal_vbuf *a, *b;
	CHECK_OK(shoal_vbuf_create(&a));
	CHECK_OK(shoal_vbuf_create(&b));
	shoal_value *keep = shoal_v_cstr(b, "already here");
	char big[40000];
	memset(big, 'x', sizeof(big));
	shoal_value *v = shoal_v_str(a, big, sizeof(big)); /* a chunk of its own */
	shoal_value *w = shoal_v_cstr(a, "small");
	CHECK_OK(sh_vbuf_adopt(b, a));
	shoal_vbuf_reset(a); /* frees nothing of what moved */
	shoal_v_cstr(a, "reuse a");
	CHECK_EQ(v->n, sizeof(big));
	CHECK_EQ(v->v.s[39999], 'x');
	CHECK(!strcmp(w->v.s, "small"));
	CHECK(!strcmp(keep->v.s, "already here"));
	shoal_v_cstr(b, "b goes on");
	shoal_vbuf_free(a);
	CHECK(!strcmp(w->v.s, "small"));
	shoal_vbuf_free(b); /* ASan: everything freed once */
}

SH_TEST(hostile_bytes_rejected)
{
	char why[128];
	static const struct {
		const char *b;
		size_t n;
		const char *says;
	} bad[] = {
		{"\xa2\xc3\x28", 3, "UTF-8"},	       /* invalid continuation */
		{"\xa3\xed\xa0\x80", 4, "UTF-8"},      /* a surrogate */
		{"\xa2\xc0\x80", 3, "UTF-8"},	       /* overlong NUL */
		{"\xd4\x05\x02", 3, "ext type other"}, /* fixext 1 of type 5 */
		{"\xd4\x01\x02", 3, "tensor header"},  /* a tensor of 1 byte */
		{"\xc7\x10\x01\x0a\x01\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\0", 20,
		 "does not match"}, /* F32 [2] with 0 data bytes */
		{"\xc1", 1, "not a value"},
		{"\xc7\x10\x01\x0a\x01\x02\0\0\0\0\0\x02\0\0\0\0\0\0\0\0", 20, "flags beyond 1"},
		{"\xc7\x10\x01\x0a\x01\x01\0\0\0\0\0\x02\0\0\0\0\0\0\0\0", 20,
		 "not 1-D uint8"}, /* a blob of F32 */
		{"\xc7\x10\x01\x0a\x01\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\0", 20, "does not match"},
		{"\xdd\xff\xff\xff\xff", 5, "count"},	  /* array claiming 4G items */
		{"\xdb\x00\x00\x10\x00", 5, "truncated"}, /* str of 4 KiB, none there */
		{"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9, "int64"},
		{"", 0, "not a value"},
		{"\xca", 1, "truncated float"}, /* found by fuzz_value */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = decode(bad[i].b, bad[i].n, why, sizeof(why));
		if (rc != SHOAL_EBADMSG || !strstr(why, bad[i].says))
			sh_test_fail(__FILE__, __LINE__, "case %zu: %d, \"%s\"", i, rc, why);
	}
	/* 65 nested arrays is one too many; 64 are fine */
	char deep[70];
	memset(deep, 0x91, sizeof(deep));
	deep[64] = (char)0xc0;
	CHECK_OK(decode(deep, 65, why, sizeof(why)));
	deep[64] = (char)0x91;
	deep[65] = (char)0xc0;
	CHECK_RC(decode(deep, 66, why, sizeof(why)), SHOAL_EBADMSG);
	CHECK(strstr(why, "nested") != NULL);
}

/* A value kept as bytes (shoal_value_encode) comes back equal from a vbuf
 * of its own; bytes that are not one, or name a store object by
 * reference, are refused with why. */
SH_TEST(a_value_kept_as_bytes_comes_back)
{
	shoal_vbuf *b, *b2;
	CHECK_OK(shoal_vbuf_create(&b));
	CHECK_OK(shoal_vbuf_create(&b2));
	shoal_value *a = shoal_v_array(b, 4);
	shoal_v_set(a, 0, shoal_v_cstr(b, "state"));
	shoal_v_set(a, 1, shoal_v_float(b, 0.5));
	static const int64_t x[3] = {1, -2, 3};
	int64_t shape[1] = {3};
	shoal_v_set(a, 2, shoal_v_tensor(b, SHOAL_DT_I64, 1, shape, x));
	shoal_value *m = shoal_v_map(b, 1);
	shoal_v_map_set(m, 0, shoal_v_cstr(b, "k"), shoal_v_bytes(b, "\0\1", 2));
	shoal_v_set(a, 3, m);
	const void *p;
	size_t n;
	CHECK_OK(shoal_value_encode(b, a, &p, &n));
	unsigned char *copy = malloc(n + 1);
	CHECK(copy != NULL);
	memcpy(copy, p, n);
	shoal_vbuf_free(b); /* the bytes are all it needs */
	shoal_value *r;
	char why[200];
	CHECK_OK(shoal_value_decode(b2, copy, n, &r, why, sizeof(why)));
	CHECK_EQ(r->type, SHOAL_V_ARRAY);
	CHECK_EQ(r->n, 4);
	CHECK_STR(r->v.items[0].v.s, "state");
	CHECK_EQ(((const int64_t *)r->v.items[2].v.t.data)[1], -2);
	/* trailing bytes, a cut, garbage: refused, never read past */
	copy[n] = 0xc0;
	CHECK_RC(shoal_value_decode(b2, copy, n + 1, &r, why, sizeof(why)), SHOAL_EBADMSG);
	CHECK(strstr(why, "trailing") != NULL);
	for (size_t cut = 0; cut < n; cut++)
		CHECK(shoal_value_decode(b2, copy, cut, &r, why, sizeof(why)) != 0);
	CHECK(shoal_value_decode(b2, "\xc1", 1, &r, why, sizeof(why)) != 0);
	free(copy);
	/* a tensor by reference (ext 2: the tensor's header, then the object's
	 * id, segment and offset) names an object no kept bytes may */
	unsigned char ref[3 + 16 + 24] = {0xc7, 40, 2, (unsigned char)SHOAL_DT_I64, 1};
	ref[3 + 8] = 4;	     /* shape [4] */
	ref[3 + 16] = 7;     /* object 7 */
	ref[3 + 16 + 8] = 1; /* segment 1 */
	CHECK_RC(shoal_value_decode(b2, ref, sizeof(ref), &r, why, sizeof(why)), SHOAL_EPROTO);
	CHECK(strstr(why, "no store") != NULL);
	shoal_vbuf_free(b2);
}

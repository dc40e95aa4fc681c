/* Fuzzes the RPC value decoder, what an extension (which may be hostile)
 * or a host sends as arguments and results: any bytes must decode to a
 * value or fail with a reason, and a decoded value must re-encode to bytes
 * that decode to an equal value, with its large payloads inline or out of
 * band.
 *
 * Bodies without bytes out of band are also decoded in place (bytes and
 * blobs pointing into the input), which must agree.
 *
 * Input: a first byte; if it is odd, a 2-byte body length follows and the
 * bytes after the body are what a frame carries out of band; if even, the
 * rest is the body and nothing may follow it.
 *
 * Seeds: values our packer makes, of every type, nested, with payloads
 * inline and (from SH_VALUE_OOB_MIN bytes) out of band. */
#include "rpc/value.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Decodes body (+ tail out of band, when oob) into b. */
static int decode(shoal_vbuf *b, const uint8_t *body, size_t blen, const uint8_t *tail, size_t tlen,
		  bool oob, shoal_value **v, char *why, size_t whylen)
{
	sh_oob o = {0};
	sh_oob_reset(&o, tlen);
	sh_mp m;
	sh_mp_init(&m, body, blen);
	int rc = sh_value_decode(&m, b, oob ? &o : NULL, v, why, whylen);
	if (rc == 0 && oob)
		rc = sh_oob_copy(&o, tail, tlen, why, whylen);
	sh_oob_fini(&o);
	return rc;
}

/* Packs v, inline or with its payloads out of band, and decodes it again. */
static void round_trip(const shoal_value *v, bool oob)
{
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b))
		abort();
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_value_pack(&pk, v, NULL, oob ? &w : NULL);
	uint8_t *tail = malloc(w.oob_bytes + 1);
	size_t at = 0;
	for (uint32_t i = 0; tail && i < w.noob; i++) {
		memcpy(tail + at, w.oob[i].p, w.oob[i].n);
		at += w.oob[i].n;
	}
	shoal_value *v2;
	char why[256];
	if (tail && w.err == 0 &&
	    (decode(b, w.p, w.len, tail, at, oob, &v2, why, sizeof(why)) != 0 ||
	     !shoal_v_equal(v, v2)))
		abort();
	free(tail);
	sh_wbuf_fini(&w);
	shoal_vbuf_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	if (n < 1)
		return 0;
	bool oob = in[0] & 1;
	const uint8_t *body = in + 1, *tail = NULL;
	size_t blen = n - 1, tlen = 0;
	if (oob) {
		if (n < 3)
			return 0;
		size_t want = (size_t)in[1] | (size_t)in[2] << 8;
		body = in + 3;
		blen = want < n - 3 ? want : n - 3;
		tail = body + blen;
		tlen = n - 3 - blen;
	}
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b))
		abort();
	shoal_value *v;
	char why[256] = "";
	int rc = decode(b, body, blen, tail, tlen, oob, &v, why, sizeof(why));
	if (rc == 0) {
		round_trip(v, false);
		round_trip(v, true);
	} else if (rc == SHOAL_EBADMSG && !why[0]) {
		abort(); /* every rejection says why */
	}
	if (!oob) {
		/* decoded in place (as a task engine does), the same value */
		shoal_vbuf *b2;
		shoal_value *v2;
		if (shoal_vbuf_create(&b2))
			abort();
		sh_mp m;
		sh_mp_init(&m, body, blen);
		int rc2 = sh_value_decode_borrowing(&m, b2, &v2, why, sizeof(why));
		if ((rc2 == 0) != (rc == 0) || (rc == 0 && !shoal_v_equal(v, v2)))
			abort();
		shoal_vbuf_free(b2);
	}
	shoal_vbuf_free(b);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

/* v packed, as an input of this target: inline (first byte 0), and with
 * its large payloads out of band (first byte 1, the body's length, the
 * body, then the bytes out of band) when it has any. Each must decode to
 * v again. */
static void value_seed(const char *name, const shoal_value *v)
{
	for (int oob = 0; oob < 2; oob++) {
		sh_wbuf w;
		sh_wbuf_init(&w);
		msgpack_packer pk;
		sh_wbuf_packer(&w, &pk);
		sh_value_pack(&pk, v, NULL, oob ? &w : NULL);
		if (oob && w.noob == 0) {
			sh_wbuf_fini(&w);
			break; /* the same as inline */
		}
		size_t hdr = oob ? 3 : 1, n = hdr + w.len + w.oob_bytes;
		uint8_t *in = malloc(n);
		if (!in || w.err || w.len > 0xffff)
			seed_die("cannot pack it", name);
		in[0] = (uint8_t)oob;
		if (oob) {
			in[1] = (uint8_t)w.len;
			in[2] = (uint8_t)(w.len >> 8);
		}
		memcpy(in + hdr, w.p, w.len);
		size_t at = hdr + w.len;
		for (uint32_t i = 0; i < w.noob; i++) {
			memcpy(in + at, w.oob[i].p, w.oob[i].n);
			at += w.oob[i].n;
		}
		shoal_vbuf *b;
		shoal_value *back;
		char why[256] = "", file[96];
		if (shoal_vbuf_create(&b) ||
		    decode(b, in + hdr, w.len, in + hdr + w.len, w.oob_bytes, oob, &back, why,
			   sizeof(why)) != 0 ||
		    !shoal_v_equal(v, back))
			seed_die(why[0] ? why : "does not decode to itself", name);
		shoal_vbuf_free(b);
		snprintf(file, sizeof(file), "%s%s", name, oob ? "-oob" : "");
		seed_write(file, in, n);
		free(in);
		sh_wbuf_fini(&w);
	}
}

static shoal_value *pair_array(shoal_vbuf *b, const shoal_value *x, const shoal_value *y)
{
	shoal_value *a = shoal_v_array(b, 2);
	shoal_v_set(a, 0, x);
	shoal_v_set(a, 1, y);
	return a;
}

static void value_seeds(void)
{
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b))
		seed_die("out of memory", "vbuf");
	static unsigned char bytes[3 * SH_VALUE_OOB_MIN];
	static float f32[1200];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 131 + 7);
	for (size_t i = 0; i < 1200; i++)
		f32[i] = (float)i / 7.0f;
	value_seed("nil", shoal_v_nil(b));
	value_seed("true", shoal_v_bool(b, true));
	value_seed("false", shoal_v_bool(b, false));
	static const int64_t ints[] = {0,   1,	 -1,	127,	       128,	  -32,
				       -33, 255, 65536, -2147483649LL, INT64_MAX, INT64_MIN};
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "int-%zu", i);
		value_seed(name, shoal_v_int(b, ints[i]));
	}
	value_seed("float", shoal_v_float(b, 3.25));
	value_seed("float-neg-zero", shoal_v_float(b, -0.0));
	value_seed("str-empty", shoal_v_cstr(b, ""));
	value_seed("str-utf8",
		   shoal_v_cstr(b, "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"));
	value_seed("str-long", shoal_v_str(b, (const char *)"0123456789abcdef", 16));
	value_seed("bytes-small", shoal_v_bytes(b, bytes, 40));
	value_seed("bytes-large", shoal_v_bytes(b, bytes, sizeof(bytes)));
	value_seed("blob-small", shoal_v_blob(b, bytes, 100));
	value_seed("blob-large", shoal_v_blob(b, bytes, SH_VALUE_OOB_MIN + 8));
	int64_t sh2[] = {3, 4}, sh0[] = {0, 5}, sh1[] = {1200};
	value_seed("tensor-f32-3x4", shoal_v_tensor(b, SHOAL_DT_F32, 2, sh2, f32));
	value_seed("tensor-scalar-i64", shoal_v_tensor(b, SHOAL_DT_I64, 0, NULL, ints));
	value_seed("tensor-empty", shoal_v_tensor(b, SHOAL_DT_BF16, 2, sh0, f32));
	value_seed("tensor-large", shoal_v_tensor(b, SHOAL_DT_F32, 1, sh1, f32));
	value_seed("tensor-u8", shoal_v_tensor(b, SHOAL_DT_U8, 2, sh2, bytes));
	/* containers: what calls carry as arguments and results */
	value_seed("array-empty", shoal_v_array(b, 0));
	value_seed("map-empty", shoal_v_map(b, 0));
	shoal_value *args = shoal_v_array(b, 4);
	shoal_v_set(args, 0, shoal_v_int(b, 42));
	shoal_v_set(args, 1, shoal_v_cstr(b, "name"));
	shoal_v_set(args, 2, shoal_v_tensor(b, SHOAL_DT_F32, 2, sh2, f32));
	shoal_v_set(args, 3, shoal_v_nil(b));
	value_seed("args", args);
	shoal_value *m = shoal_v_map(b, 3);
	shoal_v_map_set(m, 0, shoal_v_cstr(b, "weights"),
			shoal_v_tensor(b, SHOAL_DT_F32, 1, sh1, f32));
	shoal_v_map_set(m, 1, shoal_v_cstr(b, "step"), shoal_v_int(b, 1000));
	shoal_v_map_set(m, 2, shoal_v_int(b, 7), shoal_v_bytes(b, bytes, SH_VALUE_OOB_MIN));
	value_seed("map-mixed", m);
	/* nesting, down to the decoder's limit */
	shoal_value *deep = shoal_v_int(b, 1);
	for (int i = 1; i < SH_VALUE_MAX_DEPTH; i++)
		deep = pair_array(b, deep, i % 2 ? shoal_v_nil(b) : shoal_v_cstr(b, "x"));
	value_seed("nested-max", deep);
	shoal_value *wide = shoal_v_array(b, 300);
	for (uint32_t i = 0; i < 300; i++)
		shoal_v_set(wide, i,
			    i % 3 ? shoal_v_int(b, (int64_t)i * 1000) : shoal_v_float(b, i));
	value_seed("array-wide", wide);
	shoal_vbuf_free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_value", value_seeds);
	return 0;
}

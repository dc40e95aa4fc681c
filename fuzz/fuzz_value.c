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
 * rest is the body and nothing may follow it. */
#include "rpc/value.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

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

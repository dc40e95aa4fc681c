/* Fuzzes the RPC value decoder, what an extension (which may be hostile)
 * or a host sends as arguments and results: any bytes must decode to a
 * value or fail with a reason, and a decoded value must re-encode to bytes
 * that decode to an equal value. */
#include "rpc/value.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	shoal_vbuf *b, *b2;
	if (shoal_vbuf_create(&b) || shoal_vbuf_create(&b2))
		abort();
	sh_mp m;
	sh_mp_init(&m, in, n);
	shoal_value *v;
	char why[256] = "";
	int rc = sh_value_decode(&m, b, &v, why, sizeof(why));
	if (rc == 0) {
		sh_wbuf w;
		sh_wbuf_init(&w);
		msgpack_packer pk;
		sh_wbuf_packer(&w, &pk);
		sh_value_pack(&pk, v, NULL);
		sh_mp m2;
		sh_mp_init(&m2, w.p, w.len);
		shoal_value *v2;
		if (w.err == 0 && (sh_value_decode(&m2, b2, &v2, why, sizeof(why)) != 0 ||
				   sh_mp_done(&m2) != 0 || !shoal_v_equal(v, v2)))
			abort();
		sh_wbuf_fini(&w);
	} else if (rc == SHOAL_EBADMSG && !why[0]) {
		abort(); /* every rejection says why */
	}
	shoal_vbuf_free(b);
	shoal_vbuf_free(b2);
	return 0;
}

/* Fuzzes the store's request decoding, the decoder of what any client
 * process writes into its request ring: the frame header, then the body as
 * the store reads it: the msgpack cursor over the whole body (skip), and
 * the metadata tree decoder with the built-in type checks. Whatever the
 * bytes, decoding must stop with a result or an error, never read outside
 * the input, and a decoded tree must re-encode to bytes that decode to the
 * same tree. */
#include "store/node.h"
#include "wire/wire.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

static int same(const shoal_node *a, const shoal_node *b)
{
	if (strcmp(a->type, b->type) || a->nfields != b->nfields || a->nblobs != b->nblobs ||
	    a->nmembers != b->nmembers)
		return 0;
	for (uint32_t i = 0; i < a->nfields; i++)
		if (strcmp(a->fields[i].key, b->fields[i].key) ||
		    a->fields[i].kind != b->fields[i].kind)
			return 0;
	for (uint32_t i = 0; i < a->nblobs; i++)
		if (a->blobs[i].size != b->blobs[i].size)
			return 0;
	for (uint32_t i = 0; i < a->nmembers; i++)
		if (strcmp(a->names[i], b->names[i]) || !same(a->members[i], b->members[i]))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	char why[256];
	sh_frame f;
	/* A frame: the header fields come from the input when it has one. */
	if (sh_frame_decode(in, n, &f, why, sizeof(why)) == 0 &&
	    f.body_len + (f.flags & SH_FRAME_OOB ? 8u : 0u) != n - SH_FRAME_HDR)
		abort();
	/* The body, with or without a valid header in front. */
	const uint8_t *body = n >= SH_FRAME_HDR ? in + SH_FRAME_HDR : in;
	size_t blen = n >= SH_FRAME_HDR ? n - SH_FRAME_HDR : n;
	sh_mp m;
	sh_mp_init(&m, body, blen);
	while (sh_mp_left(&m) && sh_mp_skip(&m) == 0)
		;
	sh_mp_init(&m, in, n);
	sh_bump a = {0};
	shoal_node *root;
	why[0] = 0;
	if (sh_node_decode(&m, &a, &root, why, sizeof(why)) == 0) {
		if (m.p > m.end)
			abort();
		sh_node_check_types(root, why, sizeof(why));
		sh_wbuf w;
		sh_wbuf_init(&w);
		msgpack_packer pk;
		sh_wbuf_packer(&w, &pk);
		sh_node_pack(&pk, root);
		if (w.err == 0) {
			sh_mp m2;
			sh_mp_init(&m2, w.p, w.len);
			sh_bump a2 = {0};
			shoal_node *again;
			if (sh_node_decode(&m2, &a2, &again, why, sizeof(why)) != 0 ||
			    sh_mp_done(&m2) != 0 || !same(root, again))
				abort();
			sh_bump_fini(&a2);
		}
		sh_wbuf_fini(&w);
	} else if (!why[0]) {
		abort(); /* every failure says why */
	}
	sh_bump_fini(&a);
	return 0;
}

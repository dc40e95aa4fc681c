/* Fuzzes what a store reads from a remote client (or anyone with the
 * cluster's secret) on its peer port when it is asked to PUT an object: the
 * frame as peer.c takes it (header, op, status, out-of-band bytes) and its
 * body (src/cluster/peer.c, sh_peer_parse_put): the name, the flags, the
 * region's size and the metadata tree with every blob placed in the one
 * region. What parses must hold: a name of 1 to SH_NODE_MAX_NAME bytes
 * without NUL, flags PERSIST|REPLACE only, a region within
 * SH_PEER_REGION_MAX, every blob inside it, their bytes adding up to the
 * total; what fails says why, with one of shoal's codes.
 *
 * Input: the frame, as the link's channel delivers it.
 *
 * Seeds: requests packed by the remote client's own encoder
 * (sh_peer_pack_put) for bytes, a tensor, a tensor_dict with metadata, an
 * empty object, and trees that lie (a blob outside the region, a region no
 * store has, a tensor whose blob is not its shape's bytes). */
#include "store/proto.h"
#include "cluster/cluster.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static int parse(const uint8_t *in, size_t n)
{
	sh_frame f;
	char why[512] = "";
	if (sh_frame_decode(in, n, &f, why, sizeof(why)) != 0) {
		if (!why[0])
			abort();
		return SHOAL_EPROTO;
	}
	if (f.op != SH_PEER_PUT || f.status || f.oob)
		return SHOAL_EPROTO; /* not a PUT: peer.c answers or closes before parsing */
	sh_bump a = {0};
	sh_peer_put p;
	sh_mp m;
	sh_mp_init(&m, in + SH_FRAME_HDR, f.body_len);
	int rc = sh_peer_parse_put(&m, &p, &a, why, sizeof(why));
	if (rc > 0 || (rc && !why[0]))
		abort(); /* a failure says why */
	if (rc < 0 && !strncmp(shoal_strerror(rc), "SHOAL_E?", 8))
		abort(); /* with one of shoal's codes: it goes back to the client */
	if (rc == 0) {
		if (!p.root || p.region > SH_PEER_REGION_MAX ||
		    (p.flags & ~(unsigned)(SHOAL_PERSIST | SHOAL_REPLACE)))
			abort();
		if (p.name && (!p.name[0] || strlen(p.name) > SH_NODE_MAX_NAME))
			abort();
		uint64_t sum = 0;
		for (uint64_t i = 0; i < p.nblobs; i++) {
			if (p.blobs[i].off > p.region ||
			    p.blobs[i].size > p.region - p.blobs[i].off)
				abort();
			sum += p.blobs[i].size;
		}
		if (sum != p.total)
			abort();
	}
	sh_bump_fini(&a);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	parse(in, n);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static void seed_put(const char *name, const char *key, unsigned flags, uint64_t region,
		     const shoal_node *root, bool ok)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	if (sh_peer_pack_put(&w, key, flags, region, root) != 0)
		seed_die("packing failed", name);
	if ((parse(w.p, w.len) == 0) != ok)
		seed_die(ok ? "does not parse" : "parses", name);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static void put_seeds(void)
{
	sh_blobref one = {.seg = 1, .off = 0, .size = 5};
	shoal_node bytes = {.type = "bytes", .nblobs = 1, .blobs = &one};
	seed_put("bytes", "greeting", SHOAL_PERSIST, 5, &bytes, true);
	seed_put("bytes-unnamed", NULL, 0, 5, &bytes, true);
	seed_put("bytes-replace", "greeting", SHOAL_PERSIST | SHOAL_REPLACE, 5, &bytes, true);
	seed_put("blob-outside", "x", 0, 4, &bytes, false);
	seed_put("region-too-large", "x", 0, SH_PEER_REGION_MAX + 1, &bytes, false);

	/* a tensor_dict laid out as the client lays one out: one region,
	 * 64-byte aligned, in the tree's order, with metadata */
	static const char *const dt[3] = {"F32", "BF16", "U8"};
	static const uint64_t sz[3] = {24, 8, 100};
	shoal_node t[3];
	sh_field f[3][2];
	int64_t shapes[3][1] = {{6}, {4}, {100}};
	sh_blobref b[3];
	uint64_t at = 0;
	for (int i = 0; i < 3; i++) {
		f[i][0] =
			(sh_field){.key = "dtype", .kind = SH_F_STR, .n = (uint32_t)strlen(dt[i])};
		f[i][0].v.s = dt[i];
		f[i][1] = (sh_field){.key = "shape", .kind = SH_F_INTS, .n = 1};
		f[i][1].v.ints = shapes[i];
		at = (at + 63) & ~63ull;
		b[i] = (sh_blobref){.seg = 1, .off = at, .size = sz[i]};
		at += sz[i];
		t[i] = (shoal_node){.type = "tensor",
				    .nfields = 2,
				    .nblobs = 1,
				    .fields = f[i],
				    .blobs = &b[i]};
	}
	seed_put("tensor", "t", 0, sz[0], &t[0], true);
	const char *names[3] = {"a.bias", "a.weight", "b"};
	shoal_node *members[3] = {&t[0], &t[1], &t[2]};
	sh_field meta = {.key = "format", .kind = SH_F_STR, .n = 2};
	meta.v.s = "pt";
	shoal_node dict = {.type = "tensor_dict",
			   .nfields = 1,
			   .fields = &meta,
			   .nmembers = 3,
			   .names = names,
			   .members = members};
	seed_put("dict", "model", SHOAL_PERSIST, at, &dict, true);
	b[2].size = 99; /* not the shape's bytes */
	seed_put("dict-bad-tensor", "model", 0, at, &dict, false);

	shoal_node empty = {.type = "empty"};
	seed_put("empty", NULL, 0, 0, &empty, true);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_peer_put", put_seeds);
	return 0;
}

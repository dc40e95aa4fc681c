/* Fuzzes what a store reads from another store when it migrates an object:
 * the answer to FETCH (src/cluster/migrate.c, sh_mig_parse_reply), whatever the
 * peer sends once it knows the secret: the frame header, the source's
 * failure and its message, the object's id, signature, region size, the
 * shares, and the metadata tree with every blob placed in the one region.
 * What parses must hold: blobs inside the region, in the tree's order, their
 * bytes adding up to the total, the shares covering it exactly; what fails
 * says why, with one of shoal's codes.
 *
 * Input: the frame, as the peer's channel delivers it.
 *
 * Seeds: answers packed by the source's own encoder (sh_peer_pack_reply)
 * for a tensor_dict, a one-blob object, many small blobs, several shares,
 * an empty object, and the source's failures. The corpus also keeps two
 * inputs the target found as it was written (regression-*: failures whose
 * message is one NUL byte, one with bytes after it, which once gave an
 * empty reason). */
#include "store/proto.h"
#include "cluster/cluster.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static int parse(const uint8_t *in, size_t n)
{
	sh_bump a = {0};
	sh_mig_reply r;
	char why[512];
	int rc = sh_mig_parse_reply(in, n, &r, &a, why, sizeof(why));
	if (rc > 0 || (rc && !why[0]))
		abort(); /* a failure says why */
	if (rc < 0 && !strncmp(shoal_strerror(rc), "SHOAL_E?", 8))
		abort(); /* with one of shoal's codes: it goes on to our clients */
	if (rc == 0) {
		uint64_t sum = 0;
		for (uint64_t i = 0; i < r.nblobs; i++) {
			if (r.blobs[i].off > r.region ||
			    r.blobs[i].size > r.region - r.blobs[i].off)
				abort();
			sum += r.blobs[i].size;
		}
		if (sum != r.total || r.k == 0 || r.k > SH_PEER_STREAMS_MAX || !r.root ||
		    r.region > SH_PEER_REGION_MAX)
			abort();
		uint64_t next = 0;
		for (uint32_t i = 0; i < r.k; i++) {
			uint64_t lo, hi;
			sh_peer_share(r.total, r.k, i, &lo, &hi);
			if (lo != next || hi < lo || hi > r.total)
				abort();
			next = hi;
		}
		if (next != r.total)
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

static void seed_reply(const char *name, const sh_peer_fetch_reply *r, bool ok)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	if (sh_peer_pack_reply(&w, 1, r) != 0)
		seed_die("packing failed", name);
	if ((parse(w.p, w.len) == 0) != ok)
		seed_die(ok ? "does not parse" : "parses", name);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static void seed_failure(const char *name, int code, const char *msg)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 1);
	sh_mp_pack_cstr(&pk, msg);
	sh_frame f = {.op = SH_PEER_FETCH, .seq = 1, .status = code};
	if (sh_wbuf_frame_end(&w, &f) != 0 || parse(w.p, w.len) != code)
		seed_die("not read back as the failure", name);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static void peer_seeds(void)
{
	/* a tensor_dict of three tensors, laid out as the source lays out a
	 * copy: one region, 64-byte aligned, in the tree's order */
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
		b[i] = (sh_blobref){.seg = 1, .off = at, .size = sz[i]};
		at = (at + sz[i] + 63) & ~63ull;
		t[i] = (shoal_node){.type = "tensor",
				    .nfields = 2,
				    .nblobs = 1,
				    .fields = f[i],
				    .blobs = &b[i]};
	}
	const char *names[3] = {"a.bias", "a.weight", "b"};
	shoal_node *members[3] = {&t[0], &t[1], &t[2]};
	shoal_node dict = {
		.type = "tensor_dict", .nmembers = 3, .names = names, .members = members};
	sh_peer_fetch_reply r = {.id = 0x40895d0000000001ull,
				 .sig = 0x40895d0000000001ull,
				 .region = at,
				 .name = "model",
				 .root = &dict,
				 .k = 1};
	seed_reply("dict", &r, true);
	r.name = NULL;
	seed_reply("dict-unnamed", &r, true);
	r.region = b[2].off + b[2].size - 1; /* the last blob sticks out */
	seed_reply("dict-blob-outside", &r, false);

	sh_blobref one = {.seg = 1, .off = 0, .size = 1u << 30};
	shoal_node bytes = {.type = "bytes", .nblobs = 1, .blobs = &one};
	r = (sh_peer_fetch_reply){
		.id = 7, .sig = 9, .region = 1u << 30, .root = &bytes, .token = 5, .k = 4};
	seed_reply("one-blob-4-shares", &r, true);
	r.token = 0;
	seed_reply("shares-without-token", &r, false);
	r = (sh_peer_fetch_reply){.id = 7, .sig = 9, .region = UINT64_MAX, .root = &bytes, .k = 1};
	seed_reply("region-wraps", &r, false);

	sh_blobref many[40];
	for (int i = 0; i < 40; i++)
		many[i] = (sh_blobref){.seg = 1, .off = (uint64_t)i * 64, .size = (uint64_t)i};
	shoal_node thing = {.type = "thing", .nblobs = 40, .blobs = many};
	r = (sh_peer_fetch_reply){.id = 8, .sig = 8, .region = 40 * 64, .root = &thing, .k = 1};
	seed_reply("many-blobs", &r, true);

	shoal_node empty = {.type = "empty"};
	r = (sh_peer_fetch_reply){.id = 3, .sig = 3, .region = 0, .root = &empty, .k = 1};
	seed_reply("empty", &r, true);

	seed_failure("not-found", SHOAL_ENOENT, "no object named \"model\" at 10.0.0.1:7000");
	seed_failure("bad-request", SHOAL_EBADMSG, "FETCH: expected [id or name, streams]");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_peer_reply", peer_seeds);
	return 0;
}

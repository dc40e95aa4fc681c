/* Fuzzes what a remote client (src/cluster/remote.c) reads from a store
 * when it lists names: the NAMES answer, frame and body, as the client
 * takes it (sh_frame_decode, then sh_remote_parse_names or the store's
 * failure, sh_peer_failure). What parses must hold: as many entries as
 * said, each a NUL-terminated name of 1 to SH_NODE_MAX_NAME bytes and a
 * type; what fails says why, with one of shoal's codes.
 *
 * Input: the frame, as the link's channel delivers it.
 *
 * Seeds: answers packed as the store packs them (peer.c's names: the
 * entries, then whether there were more), an empty one, a failure, and
 * answers that lie (a count beyond the bytes, an entry of three fields, a
 * name with a NUL, bytes after the end). */
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
	if (f.op != SH_PEER_NAMES || f.seq != 1 || f.oob)
		return SHOAL_EPROTO; /* out of step: the client ends the link */
	sh_mp m;
	sh_mp_init(&m, in + SH_FRAME_HDR, f.body_len);
	if (f.status) {
		int rc = sh_peer_failure(f.status, &m, why, sizeof(why));
		if (rc >= 0 || !why[0] || !strncmp(shoal_strerror(rc), "SHOAL_E?", 8))
			abort();
		return rc;
	}
	sh_bump a = {0};
	shoal_entry *v;
	uint32_t k;
	bool more;
	int rc = sh_remote_parse_names(&m, &a, &v, &k, &more, why, sizeof(why));
	if (rc > 0 || (rc && !why[0]) || (rc && strncmp(shoal_strerror(rc), "SHOAL_E?", 8) == 0))
		abort();
	for (uint32_t i = 0; rc == 0 && i < k; i++)
		if (!v[i].name || !v[i].type || !v[i].name[0] ||
		    strlen(v[i].name) > SH_NODE_MAX_NAME)
			abort();
	sh_bump_fini(&a);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	parse(in, n);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

typedef struct entry {
	const char *name;
	uint64_t id;
	const char *type;
	uint64_t bytes;
	int fields; /* 4, or another count: a lie */
	bool nul;   /* the name packed with its NUL terminator: a lie */
} entry;

static void seed_names(const char *name, const entry *e, size_t n, int64_t count, int status,
		       bool trailing, bool ok)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	if (status) {
		msgpack_pack_array(&pk, 1);
		sh_mp_pack_cstr(&pk, "NAMES: expected [prefix]");
	} else {
		msgpack_pack_array(&pk, 2);
		msgpack_pack_array(&pk, (uint32_t)(count >= 0 ? (uint64_t)count : n));
		for (size_t i = 0; i < n; i++) {
			msgpack_pack_array(&pk, (uint32_t)e[i].fields);
			msgpack_pack_str(&pk, strlen(e[i].name) + e[i].nul);
			msgpack_pack_str_body(&pk, e[i].name, strlen(e[i].name) + e[i].nul);
			msgpack_pack_uint64(&pk, e[i].id);
			if (e[i].fields >= 4) {
				sh_mp_pack_cstr(&pk, e[i].type);
				msgpack_pack_uint64(&pk, e[i].bytes);
			}
		}
		msgpack_pack_false(&pk);
		if (trailing)
			msgpack_pack_nil(&pk);
	}
	sh_frame f = {.op = SH_PEER_NAMES, .seq = 1, .status = status};
	if (sh_wbuf_frame_end(&w, &f) != 0)
		seed_die("packing failed", name);
	if ((parse(w.p, w.len) == 0) != ok)
		seed_die(ok ? "does not parse" : "parses", name);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static void names_seeds(void)
{
	static const entry e[] = {
		{"model", 0x40895d0000000001ull, "tensor_dict", 1u << 30, 4, false},
		{"layers.0.weight", 7, "tensor", 4096, 4, false},
		{"greeting", 8, "bytes", 5, 4, false},
	};
	seed_names("three", e, 3, -1, 0, false, true);
	seed_names("empty", NULL, 0, -1, 0, false, true);
	seed_names("failure", NULL, 0, -1, SHOAL_EBADMSG, false, false);
	seed_names("count-beyond-bytes", e, 3, 1000000, 0, false, false);
	seed_names("trailing", e, 3, -1, 0, true, false);
	static const entry three_fields[] = {{"model", 1, "bytes", 1, 3, false}};
	seed_names("three-fields", three_fields, 1, -1, 0, false, false);
	static const entry nul[] = {{"model", 1, "bytes", 1, 4, true}};
	seed_names("name-with-nul", nul, 1, -1, 0, false, false);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_remote_names", names_seeds);
	return 0;
}

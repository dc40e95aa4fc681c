/* Fuzzes the store's request decoding, the decoder of what any client
 * process writes into its request ring: the frame header, then the body as
 * the store reads it: the msgpack cursor over the whole body (skip), and
 * the metadata tree decoder with the built-in type checks. Whatever the
 * bytes, decoding must stop with a result or an error, never read outside
 * the input, and a decoded tree must re-encode to bytes that decode to the
 * same tree.
 *
 * Seeds: metadata trees as sh_node_pack writes them (tensor_dicts, every
 * field kind, inline and referenced blobs, nesting), and whole frames of
 * every store request and reply as client.c, builder.c and server.c lay
 * them out (store/proto.h). */
#include "store/node.h"
#include "store/proto.h"
#include "wire/wire.h"

#include "seed.h"
#include "seed_tree.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

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

/* ---- seeds ---------------------------------------------------------------- */

/* A tree seed: n packed, and decoded back to the same tree. */
static void node_seed(const char *name, const shoal_node *n)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_node_pack(&pk, n);
	sh_mp m;
	sh_mp_init(&m, w.p, w.len);
	sh_bump a = {0};
	shoal_node *back;
	char why[256] = "";
	if (w.err || sh_node_decode(&m, &a, &back, why, sizeof(why)) != 0 || sh_mp_done(&m) ||
	    !same(n, back))
		seed_die(why[0] ? why : "does not decode to itself", name);
	seed_write(name, w.p, w.len);
	sh_bump_fini(&a);
	sh_wbuf_fini(&w);
}

/* A frame seed: the body packed by body() after a header as
 * sh_wbuf_frame_end writes it. */
static void frame_seed(const char *name, uint16_t op, uint16_t flags, int32_t status,
		       void (*body)(msgpack_packer *pk, const void *arg), const void *arg)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	body(&pk, arg);
	sh_frame f = {.op = op, .flags = flags, .seq = 7, .status = status}, back;
	char why[256] = "";
	if (sh_wbuf_frame_end(&w, &f) != 0 || sh_frame_decode(w.p, w.len, &back, why, sizeof(why)))
		seed_die(why[0] ? why : "cannot frame it", name);
	sh_mp m;
	sh_mp_init(&m, w.p + SH_FRAME_HDR, back.body_len);
	if (sh_mp_skip(&m) || sh_mp_done(&m))
		seed_die("the body is not one msgpack value", name);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static const shoal_node *seed_root;

static void body_seal(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 3);
	sh_mp_pack_cstr(pk, arg);
	msgpack_pack_uint32(pk, SHOAL_PERSIST);
	sh_node_pack(pk, seed_root);
}

static void body_seal_owned(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 4);
	sh_mp_pack_cstr(pk, arg);
	msgpack_pack_uint32(pk, SHOAL_REPLACE);
	sh_node_pack(pk, seed_root);
	msgpack_pack_uint64(pk, 0x1234567890abcdefull);
}

static void body_name(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	sh_mp_pack_cstr(pk, arg);
}

static void body_id(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

static void body_get_local(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 2);
	sh_mp_pack_cstr(pk, arg);
	msgpack_pack_uint64(pk, SH_GET_LOCAL);
}

static void body_rename(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint64(pk, *(const uint64_t *)arg);
	sh_mp_pack_cstr(pk, "model/sd15-final");
	msgpack_pack_true(pk);
}

static void body_unname(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 3);
	sh_mp_pack_cstr(pk, arg);
	msgpack_pack_nil(pk);
	msgpack_pack_false(pk);
}

static void body_empty(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 0);
}

static void body_release(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_array(pk, 2);
	msgpack_pack_uint64(pk, 0x100000001ull);
	msgpack_pack_uint64(pk, 0x100000002ull);
	msgpack_pack_array(pk, 1);
	msgpack_pack_uint64(pk, 3);
}

static void body_list(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 3);
	sh_mp_pack_cstr(pk, "model/");
	sh_mp_pack_cstr(pk, arg);
	msgpack_pack_uint64(pk, SH_STORE_LIST_MAX);
}

static void body_get_reply(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 4);
	msgpack_pack_uint64(pk, 0x40895d0000000001ull);
	msgpack_pack_uint64(pk, 0x0123456789abcdefull);
	msgpack_pack_array(pk, 2);
	for (uint64_t s = 1; s <= 2; s++) {
		msgpack_pack_array(pk, 2);
		msgpack_pack_uint64(pk, s);
		msgpack_pack_uint64(pk, s << 20);
	}
	sh_node_pack(pk, seed_root);
}

static void body_seal_reply(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_uint64(pk, 0x40895d0000000002ull);
	msgpack_pack_uint64(pk, 0xfedcba9876543210ull);
}

static void body_list_reply(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_array(pk, 3);
	static const char *names[] = {"model/a", "model/b", "model/\xc3\xa9t\xc3\xa9"};
	for (int i = 0; i < 3; i++) {
		msgpack_pack_array(pk, 4);
		sh_mp_pack_cstr(pk, names[i]);
		msgpack_pack_uint64(pk, 0x40895d0000000001ull + (uint64_t)i);
		sh_mp_pack_cstr(pk, i ? "tensor_dict" : "tensor");
		msgpack_pack_uint64(pk, (uint64_t)i << 30);
	}
	msgpack_pack_true(pk);
}

static void body_stat_reply(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 6);
	static const uint64_t v[] = {1ull << 34, 1ull << 30, 12, 10, 3, 1};
	for (int i = 0; i < 6; i++)
		msgpack_pack_uint64(pk, v[i]);
}

static void body_error(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	sh_mp_pack_cstr(pk, arg);
}

static void frame_seeds(void)
{
	static unsigned char bytes[SH_STORE_INLINE_MAX];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 37 + 1);
	static const int64_t s23[] = {2, 3}, s4[] = {4}, s0[] = {0, 8}, s128[] = {64, 64};
	seed_tensor t[6];
	make_tensor(&t[0], "F32", 2, s23, NULL, 1, 0);
	make_tensor(&t[1], "BF16", 1, s4, NULL, 1, 64);
	make_tensor(&t[2], "I64", 0, NULL, NULL, 0, 4096);
	make_tensor(&t[3], "U8", 2, s0, NULL, 0, 0);
	make_tensor(&t[4], "F32", 2, s23, bytes, 0, 0);
	make_tensor(&t[5], "F8_E4M3", 2, s128, bytes, 0, 0);
	node_seed("tree-tensor", &t[0].n);
	node_seed("tree-tensor-scalar", &t[2].n);
	node_seed("tree-tensor-inline", &t[4].n);
	node_seed("tree-tensor-inline-4k", &t[5].n);

	/* a tensor_dict of the first four, metadata as string fields */
	sh_field meta[2] = {{.key = "format", .kind = SH_F_STR, .n = 2},
			    {.key = "step", .kind = SH_F_STR, .n = 4}};
	meta[0].v.s = "pt";
	meta[1].v.s = "1000";
	const char *names[4] = {"layer.0.weight", "layer.0.bias", "step", "empty"};
	shoal_node *members[4] = {&t[0].n, &t[1].n, &t[2].n, &t[3].n};
	shoal_node dict = {.type = "tensor_dict",
			   .nfields = 2,
			   .nmembers = 4,
			   .fields = meta,
			   .names = names,
			   .members = members};
	node_seed("tree-tensor-dict", &dict);
	shoal_node *inl[2] = {&t[4].n, &t[5].n};
	const char *inl_names[2] = {"small", "smaller"};
	shoal_node dict_inline = {
		.type = "tensor_dict", .nmembers = 2, .names = inl_names, .members = inl};
	node_seed("tree-tensor-dict-inline", &dict_inline);

	/* a user type: every field kind, raw blobs, members nested down */
	int64_t ints[] = {-1, 0, 1, INT64_MAX, INT64_MIN};
	sh_field all[7] = {
		{.key = "nil", .kind = SH_F_NIL},	   {.key = "yes", .kind = SH_F_BOOL},
		{.key = "no", .kind = SH_F_BOOL},	   {.key = "int", .kind = SH_F_INT},
		{.key = "float", .kind = SH_F_FLOAT},	   {.key = "str", .kind = SH_F_STR, .n = 7},
		{.key = "ints", .kind = SH_F_INTS, .n = 5}};
	all[1].v.b = true;
	all[3].v.i = -42;
	all[4].v.f = 0.125;
	all[5].v.s = "caf\xc3\xa9 !";
	all[6].v.ints = ints;
	sh_blobref blobs[3] = {{.size = 5, .inline_data = "hello"},
			       {.seg = 0, .off = 128, .size = 16},
			       {.seg = 9, .off = 1 << 20, .size = 1 << 20}};
	shoal_node leaf = {
		.type = "leaf", .nfields = 7, .nblobs = 3, .fields = all, .blobs = blobs};
	node_seed("tree-every-field", &leaf);
	shoal_node chain[SH_NODE_MAX_DEPTH];
	shoal_node *child[SH_NODE_MAX_DEPTH];
	const char *cname[1] = {"next"};
	chain[0] = (shoal_node){.type = "leaf", .nfields = 1, .fields = all + 3};
	for (int i = 1; i < SH_NODE_MAX_DEPTH; i++) {
		child[i] = &chain[i - 1];
		chain[i] = (shoal_node){
			.type = "link", .nmembers = 1, .names = cname, .members = &child[i]};
	}
	node_seed("tree-nested-max", &chain[SH_NODE_MAX_DEPTH - 1]);
	shoal_node empty = {.type = "x"};
	node_seed("tree-empty", &empty);

	/* requests, as the client sends them */
	uint64_t id = 0x40895d0000000001ull, seg = 5, size = 1 << 20;
	seed_root = &dict;
	frame_seed("req-seal", SH_OP_SEAL, 0, 0, body_seal, "model/sd15");
	seed_root = &dict_inline;
	frame_seed("req-seal-inline", SH_OP_SEAL, 0, 0, body_seal, NULL);
	seed_root = &leaf;
	frame_seed("req-seal-owned", SH_OP_SEAL, 0, 0, body_seal_owned, "x");
	frame_seed("req-create", SH_OP_CREATE, 0, 0, body_id, &size);
	frame_seed("req-abort", SH_OP_ABORT, SH_FRAME_NOREPLY, 0, body_id, &seg);
	frame_seed("req-get-name", SH_OP_GET, 0, 0, body_name, "model/sd15");
	frame_seed("req-get-id", SH_OP_GET, 0, 0, body_id, &id);
	frame_seed("req-get-local", SH_OP_GET, 0, 0, body_get_local, "model/sd15");
	frame_seed("req-name", SH_OP_NAME, 0, 0, body_rename, &id);
	frame_seed("req-unname", SH_OP_NAME, 0, 0, body_unname, "model/sd15");
	frame_seed("req-release", SH_OP_RELEASE, SH_FRAME_NOREPLY, 0, body_release, NULL);
	frame_seed("req-delete", SH_OP_DELETE, 0, 0, body_name, "model/sd15");
	frame_seed("req-persist", SH_OP_PERSIST, 0, 0, body_id, &id);
	frame_seed("req-list", SH_OP_LIST, 0, 0, body_list, NULL);
	frame_seed("req-list-after", SH_OP_LIST, 0, 0, body_list, "model/b");
	frame_seed("req-stat", SH_OP_STAT, 0, 0, body_empty, NULL);
	frame_seed("req-claim", SH_OP_CLAIM, 0, 0, body_empty, NULL);
	frame_seed("req-restrict", SH_OP_RESTRICT, 0, 0, body_id, &id);
	/* replies, as the store sends them */
	seed_root = &dict;
	frame_seed("rep-get", SH_OP_GET, 0, 0, body_get_reply, NULL);
	frame_seed("rep-seal", SH_OP_SEAL, 0, 0, body_seal_reply, NULL);
	frame_seed("rep-create", SH_OP_CREATE, 0, 0, body_id, &seg);
	frame_seed("rep-delete", SH_OP_DELETE, 0, 0, body_empty, NULL);
	frame_seed("rep-list", SH_OP_LIST, 0, 0, body_list_reply, NULL);
	frame_seed("rep-stat", SH_OP_STAT, 0, 0, body_stat_reply, NULL);
	frame_seed("rep-claim", SH_OP_CLAIM, 0, 0, body_id, &id);
	frame_seed("rep-error", SH_OP_GET, 0, SHOAL_ENOENT, body_error,
		   "no object named \"model/sd15\"");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_frame", frame_seeds);
	return 0;
}

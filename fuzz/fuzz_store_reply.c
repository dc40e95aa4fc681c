/* Fuzzes a store client's reading of replies, what a client takes from
 * whatever serves the socket it connected to (a squatter's daemon
 * included): the reply to each call of the public API (stat, list, get by
 * name and by id, delete, persist, claim, seal), decoded by client.c,
 * client_get.c, client_ops.c and builder.c, and for a get the object it
 * makes, walked to every byte of its blobs. The client is a real one on
 * real rings in a memfd and a real socket (whose far end is closed:
 * descriptors never come); the input is
 * what the store side writes into its ring, after which that ring is
 * closed, so that a client waiting for more gets an error at once. The
 * arena is a real 64 KiB memfd mapped read-only. Whatever the replies say,
 * a call must return, and nothing may be read outside what is mapped.
 *
 * Input: a byte choosing the call, then replies: a status byte (0: ok,
 * else its negation), 2 bytes of body length (little-endian), the body.
 * Each gets the frame header of the call's op and the next sequence number.
 *
 * Seeds: the replies store/server.c makes, packed the way it packs them
 * (store/proto.h), for each call: good ones, errors, empty listings and
 * pages, objects with blobs in the arena. */
#include "shm/shm.h"
#include "store/client.h"

#include "seed.h"
#include "seed_tree.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define CAP (64u << 10)
#define ARENA (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

enum {
	C_STAT,
	C_LIST,
	C_GET_NAME,
	C_GET_ID,
	C_DELETE,
	C_PERSIST,
	C_CLAIM,
	C_SEAL,
	C_MIGRATE,
	C_COUNT
};
static const uint16_t call_op[C_COUNT] = {SH_OP_STAT,  SH_OP_LIST,   SH_OP_GET,
					  SH_OP_GET,   SH_OP_DELETE, SH_OP_PERSIST,
					  SH_OP_CLAIM, SH_OP_SEAL,   SH_OP_MIGRATE};

static const unsigned char *arena;

/* A client on fresh rings, as shoal_connect leaves one; *store is the
 * store's end of the down ring. */
static shoal_client *client_new(sh_ring *store)
{
	if (!arena) {
		int fd;
		void *p;
		if (sh_memfd_create("fuzz-arena", ARENA, false, &fd) ||
		    sh_shm_map(fd, ARENA, true, &p))
			abort();
		for (size_t i = 0; i < ARENA; i++)
			((unsigned char *)p)[i] = (unsigned char)(i * 7);
		sh_shm_unmap(p, ARENA);
		if (sh_shm_map(fd, ARENA, false, &p))
			abort();
		close(fd);
		arena = p;
	}
	size_t one;
	int sv[2], fd;
	shoal_client *c = SH_NEW(shoal_client);
	if (!c || sh_ring_bytes(CAP, &one) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		abort();
	close(sv[1]);
	sh_link_init(&c->l, sv[0]);
	sh_wbuf_init(&c->out);
	c->l.bytes = 2 * one;
	if (sh_memfd_create("fuzz-rings", c->l.bytes, false, &fd) ||
	    sh_shm_map(fd, c->l.bytes, true, &c->l.mem))
		abort();
	close(fd);
	unsigned char *base = c->l.mem;
	if (sh_ring_format(base, one) || sh_ring_format(base + one, one) ||
	    sh_ring_attach(&c->l.up, base, one, true) ||
	    sh_ring_attach(&c->l.down, base + one, one, false) ||
	    sh_ring_attach(store, base + one, one, true))
		abort();
	c->arena = arena;
	c->arena_size = ARENA;
	c->id = 1;
	c->timeout_ns = 1000000000LL; /* as a connection's; the replies are all there */
	return c;
}

static void client_end(shoal_client *c)
{
	c->arena = NULL; /* ours, kept for the next input */
	shoal_disconnect(c);
}

static int count_entry(const shoal_entry *e, void *ctx)
{
	if (!e->name || !e->type || strlen(e->name) > SH_NODE_MAX_NAME)
		abort();
	++*(size_t *)ctx;
	return 0;
}

/* Reads every field, member and blob byte of a tree a get made. */
static unsigned walk(const shoal_node *n, int depth)
{
	unsigned sum = 0;
	if (depth > SH_NODE_MAX_DEPTH || !shoal_node_type(n))
		abort();
	for (size_t i = 0; i < shoal_node_nfields(n); i++) {
		const char *k = shoal_node_field_name(n, i), *s;
		size_t len, cnt;
		int64_t v[4];
		if (shoal_node_get_str(n, k, &s, &len) == 0)
			sum += len ? (unsigned char)s[len - 1] : 0;
		shoal_node_get_ints(n, k, v, 4, &cnt);
	}
	for (size_t i = 0; i < shoal_node_nblobs(n); i++) {
		const void *p;
		size_t len;
		if (shoal_node_blob(n, i, &p, &len) == 0)
			for (size_t j = 0; j < len; j++)
				sum += ((const unsigned char *)p)[j];
	}
	shoal_tensor t;
	if (shoal_node_tensor(n, &t) == 0)
		for (size_t j = 0; j < t.nbytes; j++)
			sum += ((const unsigned char *)t.data)[j];
	for (size_t i = 0; i < shoal_node_nmembers(n); i++) {
		const char *name;
		const shoal_node *m = shoal_node_member(n, i, &name);
		if (!m || !name)
			abort();
		sum += walk(m, depth + 1);
	}
	return sum;
}

static volatile unsigned sink;

static int call(shoal_client *c, int which)
{
	shoal_object *o = NULL;
	int rc = 0;
	switch (which) {
	case C_STAT: {
		shoal_store_stat st;
		rc = shoal_store_stat_get(c, &st);
		break;
	}
	case C_LIST: {
		size_t n = 0;
		rc = shoal_list(c, "m", count_entry, &n);
		break;
	}
	case C_GET_NAME:
		rc = shoal_get_by_name(c, "model", &o);
		break;
	case C_GET_ID:
		rc = shoal_get(c, 0x40895d0000000001ull, &o);
		break;
	case C_DELETE:
		rc = shoal_delete(c, "model");
		break;
	case C_PERSIST:
		rc = shoal_persist(c, 5);
		break;
	case C_CLAIM: {
		uint64_t token;
		rc = shoal_claim(c, &token);
		break;
	}
	case C_MIGRATE: {
		/* its first ask is MIGRATE, those after it MIGWAIT */
		shoal_migrate_opts mo = {.from = "127.0.0.1:7000"};
		shoal_id id;
		rc = shoal_migrate(c, "model", 0, &mo, &id);
		break;
	}
	case C_SEAL: {
		shoal_builder *b;
		shoal_id id;
		if (shoal_builder_create(c, "thing", &b) != 0)
			abort();
		shoal_node_set_int(shoal_builder_root(b), "k", 1);
		rc = shoal_builder_seal(b, "model", 0, &id);
		break;
	}
	}
	if (rc == 0 && o) {
		sink = walk(shoal_object_root(o), 0);
		shoal_object_release(o);
	}
	/* A failure is a code of ours. Its message may be empty: a store's
	 * own message comes as it sent it, NUL bytes included. */
	if (rc > 0 || (rc != 0 && !shoal_strerror(rc)))
		abort();
	return rc;
}

/* Runs the input: the replies into the ring, then the call. */
static int run(const uint8_t *in, size_t n)
{
	int which = in[0] % C_COUNT;
	sh_ring store;
	shoal_client *c = client_new(&store);
	uint32_t seq = 0;
	unsigned char frame[SH_FRAME_HDR];
	for (size_t at = 1; n - at >= 3;) {
		size_t len = (size_t)in[at + 1] | (size_t)in[at + 2] << 8;
		if (len > n - at - 3)
			len = n - at - 3;
		uint16_t op = which == C_MIGRATE && seq ? SH_OP_MIGWAIT : call_op[which];
		sh_frame f = {.op = op,
			      .seq = ++seq,
			      .status = in[at] ? -(int32_t)in[at] : 0,
			      .body_len = (uint32_t)len};
		sh_frame_encode(&f, frame);
		sh_msg_part v[2] = {{frame, sizeof(frame)}, {(void *)(in + at + 3), len}};
		if (sh_msg_write_parts(&store, v, 2, SHOAL_NOWAIT) != 0)
			break; /* the ring is full: the rest is never sent */
		at += 3 + len;
	}
	sh_ring_close(&store);
	int rc = call(c, which);
	client_end(c);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	if (n >= 1)
		run(in, n);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static uint8_t seed_buf[SEED_MAX];
static size_t seed_len;

static void seed_begin(int which)
{
	seed_buf[0] = (uint8_t)which;
	seed_len = 1;
}

/* Appends a reply: status, then the body that pack() packs. */
static void seed_reply(uint8_t status, void (*pack)(msgpack_packer *pk, const void *arg),
		       const void *arg)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	pack(&pk, arg);
	if (w.err || w.len > 0xffff || seed_len + 3 + w.len > sizeof(seed_buf))
		seed_die("reply too large", "seed");
	seed_buf[seed_len++] = status;
	seed_buf[seed_len++] = (uint8_t)w.len;
	seed_buf[seed_len++] = (uint8_t)(w.len >> 8);
	memcpy(seed_buf + seed_len, w.p, w.len);
	seed_len += w.len;
	sh_wbuf_fini(&w);
}

/* Writes the seed; the call must succeed on it (ok) or fail. */
static void seed_end(const char *name, bool ok)
{
	if ((run(seed_buf, seed_len) == 0) != ok)
		seed_die(ok ? "the call failed" : "the call succeeded", name);
	seed_write(name, seed_buf, seed_len);
}

static void pk_empty(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 0);
}

static void pk_message(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	sh_mp_pack_cstr(pk, arg);
}

/* STAT: 17 counters, a page kind and its reason, then 9 of spilling. */
static void pk_stat(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	static const uint64_t v[] = {1ull << 34, 1ull << 30, 12, 10, 3, 1, 2, 1ull << 31, 1,
				     4096,	 1,	     3,	 1,  0, 0, 0, 1ull << 29};
	msgpack_pack_array(pk, 28);
	for (int i = 0; i < 17; i++)
		msgpack_pack_uint64(pk, v[i]);
	msgpack_pack_uint64(pk, SHOAL_PAGES_THP);
	sh_mp_pack_cstr(pk, "shmem's transparent huge pages");
	for (int i = 0; i < 9; i++)
		msgpack_pack_uint64(pk, (uint64_t)i << 20);
}

/* A LIST page: *arg entries (names m0, m1, ...), more when arg[1]. */
static void pk_list(msgpack_packer *pk, const void *arg)
{
	const unsigned *a = arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_array(pk, a[0]);
	for (unsigned i = 0; i < a[0]; i++) {
		char name[32];
		snprintf(name, sizeof(name), "m%u/%s", a[2] + i, i % 2 ? "w\xc3\xa9ight" : "bias");
		msgpack_pack_array(pk, 4);
		sh_mp_pack_cstr(pk, name);
		msgpack_pack_uint64(pk, 0x40895d0000000001ull + i);
		sh_mp_pack_cstr(pk, i % 3 ? "tensor_dict" : "tensor");
		msgpack_pack_uint64(pk, (uint64_t)i << 20);
	}
	a[1] ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
}

static void pk_uint(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

static void pk_seal(msgpack_packer *pk, const void *arg)
{
	(void)arg;
	msgpack_pack_array(pk, 2);
	msgpack_pack_uint64(pk, 0x40895d0000000002ull);
	msgpack_pack_uint64(pk, 0xfedcba9876543210ull);
}

/* A GET reply: no new segments, the tree at arg, blobs in the arena. */
static void pk_get(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 5);
	msgpack_pack_uint64(pk, 0x40895d0000000001ull);
	msgpack_pack_uint64(pk, 0x0123456789abcdefull);
	msgpack_pack_array(pk, 0);
	msgpack_pack_uint64(pk, SH_GET_SHORT); /* the store spills: keep nothing idle */
	sh_node_pack(pk, arg);
}

/* The same with object id 0, which no store gives: the reply that once
 * reached the client's object map, whose keys must be nonzero. */
static void pk_get_id0(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 5);
	msgpack_pack_uint64(pk, 0);
	msgpack_pack_uint64(pk, 0x0123456789abcdefull);
	msgpack_pack_array(pk, 0);
	msgpack_pack_uint64(pk, 0);
	sh_node_pack(pk, arg);
}

/* MIGRATE's answers: [true, id], or [false, ticket, received, total]. */
static void pk_migrated(msgpack_packer *pk, const void *arg)
{
	msgpack_pack_array(pk, 2);
	msgpack_pack_true(pk);
	msgpack_pack_uint64(pk, *(const uint64_t *)arg);
}

static void pk_migrating(msgpack_packer *pk, const void *arg)
{
	const uint64_t *v = arg;
	msgpack_pack_array(pk, 4);
	msgpack_pack_false(pk);
	for (int i = 0; i < 3; i++)
		msgpack_pack_uint64(pk, v[i]);
}

static void migrate_seeds(void)
{
	static const uint64_t id = 0x40895d0000000001ull, half[3] = {3, 1u << 20, 2u << 20},
			      most[3] = {3, 2000000, 2u << 20}, zero = 0;
	seed_begin(C_MIGRATE);
	seed_reply(0, pk_migrated, &id);
	seed_end("migrate-here", true);
	seed_begin(C_MIGRATE);
	seed_reply(0, pk_migrating, half);
	seed_reply(0, pk_migrating, most);
	seed_reply(0, pk_migrated, &id);
	seed_end("migrate-three-asks", true);
	seed_begin(C_MIGRATE);
	seed_reply(0, pk_migrating, half);
	seed_reply((uint8_t)-SHOAL_ECONNRESET, pk_message,
		   "object 40895d0000000001 from 10.0.0.1:7000: the transfer broke after 1048576 "
		   "of 2097152 bytes");
	seed_end("migrate-broke", false);
	seed_begin(C_MIGRATE);
	seed_reply(0, pk_migrated, &zero);
	seed_end("migrate-id-zero", false);
}

static void reply_seeds(void)
{
	migrate_seeds();
	static const uint64_t token = 0x1234567890abcdefull;
	seed_begin(C_STAT);
	seed_reply(0, pk_stat, NULL);
	seed_end("stat", true);
	seed_begin(C_STAT);
	seed_reply((uint8_t)-SHOAL_EACCES, pk_message, "not allowed");
	seed_end("stat-error", false);

	static const unsigned empty[3] = {0, 0, 0}, page[3] = {5, 0, 0}, first[3] = {3, 1, 0},
			      second[3] = {4, 0, 3}, bigpage[3] = {200, 0, 0};
	seed_begin(C_LIST);
	seed_reply(0, pk_list, empty);
	seed_end("list-empty", true);
	seed_begin(C_LIST);
	seed_reply(0, pk_list, page);
	seed_end("list-page", true);
	seed_begin(C_LIST);
	seed_reply(0, pk_list, first);
	seed_reply(0, pk_list, second);
	seed_end("list-two-pages", true);
	seed_begin(C_LIST);
	seed_reply(0, pk_list, bigpage);
	seed_end("list-200", true);
	seed_begin(C_LIST);
	seed_reply(0, pk_list, first);
	seed_end("list-more-never-comes", false);

	static const int64_t s23[] = {2, 3}, s4[] = {4}, s0[] = {0, 8};
	seed_tensor t[4];
	make_tensor(&t[0], "F32", 2, s23, NULL, 0, 0);
	make_tensor(&t[1], "BF16", 1, s4, NULL, 0, 64);
	make_tensor(&t[2], "I64", 0, NULL, NULL, 0, 128);
	make_tensor(&t[3], "U8", 2, s0, NULL, 0, 0);
	sh_field meta[2] = {{.key = "format", .kind = SH_F_STR, .n = 2},
			    {.key = "step", .kind = SH_F_INT}};
	meta[0].v.s = "pt";
	meta[1].v.i = 1000;
	const char *names[4] = {"layer.0.bias", "layer.0.weight", "step", "z.empty"};
	shoal_node *members[4] = {&t[1].n, &t[0].n, &t[2].n, &t[3].n};
	shoal_node dict = {.type = "tensor_dict",
			   .nfields = 2,
			   .nmembers = 4,
			   .fields = meta,
			   .names = names,
			   .members = members};
	sh_blobref raw[2] = {{.seg = 0, .off = 1024, .size = 4096},
			     {.seg = 0, .off = ARENA - 64, .size = 64}};
	shoal_node thing = {.type = "thing", .nblobs = 2, .blobs = raw};
	for (int k = 0; k < 2; k++) {
		int which = k ? C_GET_ID : C_GET_NAME;
		const char *tag = k ? "get-id" : "get-name";
		char name[64];
		snprintf(name, sizeof(name), "%s-tensor-dict", tag);
		seed_begin(which);
		seed_reply(0, pk_get, &dict);
		seed_end(name, true);
		snprintf(name, sizeof(name), "%s-tensor", tag);
		seed_begin(which);
		seed_reply(0, pk_get, &t[0].n);
		seed_end(name, true);
		snprintf(name, sizeof(name), "%s-blobs-to-the-end", tag);
		seed_begin(which);
		seed_reply(0, pk_get, &thing);
		seed_end(name, true);
		if (k) {
			seed_begin(which);
			seed_reply(0, pk_get_id0, &t[0].n);
			seed_end("regress-reply-id-zero", false);
		}
		snprintf(name, sizeof(name), "%s-not-found", tag);
		seed_begin(which);
		seed_reply((uint8_t)-SHOAL_ENOENT, pk_message, "no object named \"model\"");
		seed_end(name, false);
	}
	seed_begin(C_DELETE);
	seed_reply(0, pk_empty, NULL);
	seed_end("delete", true);
	seed_begin(C_DELETE);
	seed_reply((uint8_t)-SHOAL_ENOENT, pk_message, "no object named \"model\"");
	seed_end("delete-not-found", false);
	seed_begin(C_PERSIST);
	seed_reply(0, pk_empty, NULL);
	seed_end("persist", true);
	seed_begin(C_CLAIM);
	seed_reply(0, pk_uint, &token);
	seed_end("claim", true);
	seed_begin(C_SEAL);
	seed_reply(0, pk_seal, NULL);
	seed_end("seal", true);
	seed_begin(C_SEAL);
	seed_reply((uint8_t)-SHOAL_EEXIST, pk_message, "the name \"model\" is taken");
	seed_end("seal-taken", false);
	seed_begin(C_SEAL);
	seed_reply((uint8_t)-SHOAL_ENOSPC, pk_message, "store full: asked 64 bytes");
	seed_end("seal-full", false);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_store_reply", reply_seeds);
	return 0;
}

/* Fuzzes the reader of an object's record in a file (src/store/record.c,
 * sh_rec_read): what a store reads back from its state directory (a record
 * a file, its size exact) and its spill directory (many a file, a record
 * followed by others), files on disk that are hostile until checked. The
 * input is the file: a record is read from its offset 0, once as a state
 * file and once as a spill file's, into sealable memfds as the state
 * directory's reader makes them, at most 64 MiB of them (a file cannot make
 * the fuzzer allocate GBs), with arrays sized by the header as the state
 * directory's loader sizes them. What is read is checked against the file: the header's
 * fields, the metadata, each segment sealed and holding the file's bytes at
 * its place; a read as a state file that holds must hold as a spill file's
 * too, alike. A refusal says why; every descriptor made is closed or
 * handed back. What reads is decoded as a restore decodes it
 * (spilling.c restore_tree): [name | nil, node], the node through the
 * tree decoder and the built-in type checks, no byte after it. Each input
 * is read as it is, then with its two hashes made anew over what it holds
 * (they catch a disk's faults; whoever may write the directory can make
 * them), so that the fuzzer gets past them to the sizes and the tree.
 *
 * Seeds: records written by the store's own writer (sh_rec_write): small
 * objects with their blobs inline, tight and padded, named and not; objects
 * with one to three small segments from sealed memfds, some blobs inline
 * too; a record followed by another (a spill file); and, refused, records
 * cut short, with a byte of a segment flipped, and one whose tree the type
 * checks refuse. */
#include "store/node.h"
#include "store/proto.h"
#include "store/record.h"
#include "shm/shm.h"
#include "wire/wire.h"

#include "seed.h"
#include "seed_tree.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The most bytes of segments one record may make. */
#define FIT_MAX ((uint64_t)64 << 20)
#define PAGE 4096u

static uint64_t page_up(uint64_t v)
{
	return (v + PAGE - 1) & ~(uint64_t)(PAGE - 1);
}

/* The descriptors the reader asked for, to account for each of them. */
typedef struct made {
	uint32_t n;
	int last;
} made;

static int seg_make(void *ctx, uint64_t size, int *fd, uint64_t *map_len)
{
	made *m = ctx;
	*map_len = size;
	int rc = sh_memfd_create("shoal-fuzz-segment", size, true, fd);
	if (rc == 0) {
		m->n++;
		m->last = *fd;
	}
	return rc;
}

static int seg_fit(void *ctx, uint32_t nsegs, const uint64_t *sizes, char *why, size_t whylen)
{
	(void)ctx;
	uint64_t total = 0;
	for (uint32_t i = 0; i < nsegs; i++) {
		if (sizes[i] > FIT_MAX - total) {
			snprintf(why, whylen, "segments of more than %llu bytes",
				 (unsigned long long)FIT_MAX);
			return SHOAL_ENOSPC;
		}
		total += sizes[i];
	}
	return 0;
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* What a read came to. */
enum { READ_OK, READ_REFUSED, TREE_REFUSED };

/* Checks a record read from the file in (n bytes) against its bytes. */
static void check_read(const uint8_t *in, size_t n, bool exact, const sh_rec_reader *x,
		       const sh_state_rec *r)
{
	uint32_t ns = sh_rec_nsegs(in);
	size_t tlen = (size_t)ns * 8;
	if (r->nsegs != ns || r->id != load64(in + 16) || r->sig != load64(in + 24) ||
	    r->gen != load64(in + 32) || r->meta_len != load64(in + 40) ||
	    SH_REC_HDR + tlen + r->meta_len > n)
		abort();
	if (tlen + r->meta_len &&
	    (r->meta != x->buf + tlen || memcmp(x->buf, in + SH_REC_HDR, tlen + r->meta_len) != 0))
		abort();
	uint64_t at = ns ? page_up(SH_REC_HDR + tlen + r->meta_len) : SH_REC_HDR + r->meta_len;
	for (uint32_t i = 0; i < ns; i++) {
		uint64_t size = r->seg_sizes[i];
		if (size != load64(in + SH_REC_HDR + 8 * i) || at > n || size > n - at ||
		    !sh_memfd_is_sealed(r->seg_fds[i]))
			abort();
		void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, r->seg_fds[i], 0);
		if (p == MAP_FAILED)
			abort();
		if (memcmp(p, in + at, size) != 0)
			abort(); /* a segment holds what was hashed: the file's bytes */
		munmap(p, size);
		at += page_up(size);
	}
	if (exact ? n != page_up(at) : n < at)
		abort();
}

/* The record's metadata as a start and a restore decode it (sh_rec_tree). */
static int decode_tree(const sh_state_rec *r)
{
	const char *name;
	uint32_t nl;
	sh_bump a = {0};
	shoal_node *root;
	char why[256] = "";
	int rc = sh_rec_tree(r, &a, &root, &name, &nl, why, sizeof(why));
	if (rc && (rc > 0 || !why[0]))
		abort(); /* a refusal says why */
	sh_bump_fini(&a);
	return rc ? TREE_REFUSED : READ_OK;
}

/* One read of the file fd (in, n bytes) from offset 0, as a state file's
 * (exact) or a spill file's record; *id and *sig: what it read. */
static int read_one(sh_rec_reader *x, made *mk, int fd, const uint8_t *in, size_t n, bool exact,
		    uint64_t *id, uint64_t *sig)
{
	unsigned char h[SH_REC_HDR] = {0};
	memcpy(h, in, n < SH_REC_HDR ? n : SH_REC_HDR);
	uint32_t ns = sh_rec_nsegs(h), room = ns > 1 ? ns : 1;
	int *fds = malloc(room * sizeof(int));
	uint64_t *sizes = malloc(room * sizeof(uint64_t));
	if (!fds || !sizes) {
		free(fds);
		free(sizes);
		return READ_REFUSED;
	}
	sh_state_rec r = {.seg_fds = fds, .seg_sizes = sizes, .seg_room = room};
	char why[256] = "";
	*mk = (made){.last = -1};
	int rc = sh_rec_read(x, fd, 0, n, exact, &r, why, sizeof(why));
	/* Every descriptor made is handed back in r, but for one that failed,
	 * which the reader closed. */
	if (r.nsegs > ns || (rc == 0 && mk->n != ns) || mk->n < r.nsegs || mk->n > r.nsegs + 1 ||
	    (mk->n == r.nsegs + 1 && fcntl(mk->last, F_GETFD) != -1))
		abort();
	int out = READ_REFUSED;
	if (rc == 0) {
		check_read(in, n, exact, x, &r);
		*id = r.id;
		*sig = r.sig;
		out = decode_tree(&r);
	} else if (!why[0] || rc > 0) {
		abort(); /* a refusal says why */
	}
	for (uint32_t i = 0; i < r.nsegs; i++)
		close(fds[i]);
	free(fds);
	free(sizes);
	return out;
}

/* Reads the record of in as a state file and as a spill file: *state and
 * *spill say what each came to. */
static void run(const uint8_t *in, size_t n, int *state, int *spill)
{
	int fd = -1;
	if (sh_memfd_create("shoal-fuzz-record", n, false, &fd) != 0)
		abort();
	if (n && sh_fd_pwrite_all(fd, in, n, 0) != 0)
		abort();
	made mk;
	sh_rec_reader x = {.make = seg_make, .fit = seg_fit, .ctx = &mk};
	uint64_t id[2] = {0}, sig[2] = {0};
	*state = read_one(&x, &mk, fd, in, n, true, &id[0], &sig[0]);
	/* the same reader again, as a store reads file after file */
	*spill = read_one(&x, &mk, fd, in, n, false, &id[1], &sig[1]);
	if (*state != READ_REFUSED && (*spill != *state || id[0] != id[1] || sig[0] != sig[1]))
		abort(); /* an exact read is the stricter */
	sh_rec_reader_fini(&x);
	close(fd);
}

/* in with its two hashes made again over what it holds, as whoever may
 * write the directory can make them (they guard against a disk's faults,
 * not against its owner): so the fuzzer reaches past them to the sizes,
 * the metadata and the tree. False when there is nothing to hash or it
 * changes nothing. */
static bool forge(const uint8_t *in, size_t n, uint8_t *out)
{
	if (n < SH_REC_HDR)
		return false;
	memcpy(out, in, n);
	uint32_t ns = sh_rec_nsegs(in);
	uint64_t tlen = (uint64_t)ns * 8, meta_len = load64(in + 40);
	if (meta_len <= n - SH_REC_HDR && tlen <= n - SH_REC_HDR - meta_len) {
		uint64_t h = sh_hash64(in + SH_REC_HDR, tlen, 0);
		h = sh_hash64(in + SH_REC_HDR + tlen, meta_len, h);
		uint64_t at = page_up(SH_REC_HDR + tlen + meta_len);
		for (uint32_t i = 0; i < ns; i++) {
			uint64_t size = load64(in + SH_REC_HDR + 8 * i);
			if (at > n || size > n - at)
				break;
			h = sh_hash64(in + at, size, h);
			at += page_up(size);
		}
		memcpy(out + 48, &h, 8);
	}
	uint64_t hh = sh_hash64(out, 56, 0);
	memcpy(out + 56, &hh, 8);
	return memcmp(in, out, SH_REC_HDR) != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	int state, spill;
	run(in, n, &state, &spill);
	uint8_t *forged = malloc(n ? n : 1);
	if (!forged)
		return 0;
	if (forge(in, n, forged))
		run(forged, n, &state, &spill);
	free(forged);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

/* A sealed memfd of size bytes of a pattern from seed. */
static int seed_segment(const char *name, uint64_t size, unsigned seed)
{
	int fd;
	if (sh_memfd_create("shoal-seed-segment", size, true, &fd) != 0)
		seed_die("cannot make a segment", name);
	unsigned char *p = malloc(size);
	if (!p)
		seed_die("out of memory", name);
	for (uint64_t i = 0; i < size; i++)
		p[i] = (unsigned char)(i * 131 + seed);
	if (sh_fd_pwrite_all(fd, p, size, 0) != 0 || sh_memfd_seal(fd) != 0)
		seed_die("cannot fill a segment", name);
	free(p);
	return fd;
}

/* The record [name | nil, root] with the segments of sizes (made here),
 * written by sh_rec_write, tight or padded, then more bytes as given
 * (extra: a tight record after it, as in a spill file; cut: bytes taken
 * off its end; flip: a byte of it flipped, from its end). */
typedef struct seed_rec {
	const char *name;
	const shoal_node *root;
	uint32_t nsegs;
	uint64_t sizes[3];
	bool tight;
	bool extra;
	uint64_t cut;
	uint64_t flip;
	int state, spill; /* what a read must come to */
} seed_rec;

static void pack_meta(sh_wbuf *w, const char *name, const shoal_node *root)
{
	sh_wbuf_init(w);
	msgpack_packer pk;
	sh_wbuf_packer(w, &pk);
	msgpack_pack_array(&pk, 2);
	if (name)
		sh_mp_pack_cstr(&pk, name);
	else
		msgpack_pack_nil(&pk);
	sh_node_pack(&pk, root);
}

static void record_seed(const char *file, const seed_rec *s)
{
	int fds[3];
	uint64_t sizes[3];
	for (uint32_t i = 0; i < s->nsegs; i++) {
		sizes[i] = s->sizes[i];
		fds[i] = seed_segment(file, sizes[i], i + 1);
	}
	sh_wbuf meta;
	pack_meta(&meta, s->name, s->root);
	sh_state_rec r = {.id = 0x40895d0000000001ull,
			  .sig = 0x0123456789abcdefull,
			  .gen = 1796500000000000000ull,
			  .meta = meta.p,
			  .meta_len = meta.len,
			  .nsegs = s->nsegs,
			  .seg_fds = fds,
			  .seg_sizes = sizes};
	int fd = -1;
	uint64_t len = sh_rec_len(&r, s->tight);
	if (meta.err || sh_memfd_create("shoal-seed-record", 0, false, &fd) != 0 ||
	    sh_rec_write(fd, 0, &r, s->tight) != 0)
		seed_die("cannot write the record", file);
	if (s->extra) {
		sh_wbuf m2;
		shoal_node small = {.type = "opaque"};
		pack_meta(&m2, NULL, &small);
		sh_state_rec next = {.id = r.id + 1,
				     .sig = r.sig ^ 1,
				     .gen = r.gen + 1,
				     .meta = m2.p,
				     .meta_len = m2.len};
		if (m2.err || sh_rec_write(fd, len, &next, true) != 0)
			seed_die("cannot write the record after it", file);
		len += sh_rec_len(&next, true);
		sh_wbuf_fini(&m2);
	}
	len -= s->cut;
	if (len > SEED_MAX)
		seed_die("larger than 64 KiB", file);
	unsigned char *b = malloc(len);
	if (!b || sh_fd_pread_all(fd, b, len, 0) != 0)
		seed_die("cannot read the record back", file);
	if (s->flip)
		b[len - s->flip] ^= 0x20; /* within the segment, not its padding */
	int state, spill;
	run(b, len, &state, &spill);
	if (state != s->state || spill != s->spill)
		seed_die("not read back as meant", file);
	seed_write(file, b, len);
	free(b);
	close(fd);
	sh_wbuf_fini(&meta);
	for (uint32_t i = 0; i < s->nsegs; i++)
		close(fds[i]);
}

static void record_seeds(void)
{
	static unsigned char bytes[SH_STORE_INLINE_MAX];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 37 + 1);
	/* A state file is padded: a tight record is a spill file's only. */
	const int ok = READ_OK, no = READ_REFUSED;

	/* bytes inline: an opaque object as a client puts a small blob */
	sh_blobref blob = {.size = 100, .inline_data = bytes};
	shoal_node opaque = {.type = "bytes", .nblobs = 1, .blobs = &blob};
	record_seed("tight-nil-bytes",
		    &(seed_rec){.root = &opaque, .tight = true, .state = no, .spill = ok});
	record_seed(
		"padded-named-bytes",
		&(seed_rec){.name = "cache/item-17", .root = &opaque, .state = ok, .spill = ok});

	/* fields of every kind, no blob */
	int64_t ints[3] = {-1, 0, 1ll << 40};
	sh_field f[6] = {{.key = "a-nil", .kind = SH_F_NIL},
			 {.key = "b-bool", .kind = SH_F_BOOL},
			 {.key = "c-int", .kind = SH_F_INT},
			 {.key = "d-float", .kind = SH_F_FLOAT},
			 {.key = "e-str", .kind = SH_F_STR, .n = 5},
			 {.key = "f-ints", .kind = SH_F_INTS, .n = 3}};
	f[1].v.b = true;
	f[2].v.i = -42;
	f[3].v.f = 0.25;
	f[4].v.s = "hello";
	f[5].v.ints = ints;
	shoal_node fields = {.type = "config", .nfields = 6, .fields = f};
	record_seed("tight-named-fields", &(seed_rec){.name = "run/config",
						      .root = &fields,
						      .tight = true,
						      .state = no,
						      .spill = ok});

	/* tensors inline, one alone and a tensor_dict of two */
	static const int64_t s23[] = {2, 3}, s64[] = {64, 64};
	seed_tensor t[9];
	make_tensor(&t[0], "F32", 2, s23, bytes, 0, 0);
	make_tensor(&t[1], "F8_E4M3", 2, s64, bytes, 0, 0);
	record_seed("padded-nil-tensor", &(seed_rec){.root = &t[0].n, .state = ok, .spill = ok});
	const char *names[2] = {"layer.0.bias", "layer.0.weight"};
	shoal_node *inl[2] = {&t[0].n, &t[1].n};
	sh_field fmt = {.key = "format", .kind = SH_F_STR, .n = 2};
	fmt.v.s = "pt";
	shoal_node dict_inline = {.type = "tensor_dict",
				  .nfields = 1,
				  .nmembers = 2,
				  .fields = &fmt,
				  .names = names,
				  .members = inl};
	record_seed("tight-named-tensor-dict-inline", &(seed_rec){.name = "model/small",
								  .root = &dict_inline,
								  .tight = true,
								  .state = no,
								  .spill = ok});
	/* a record followed by the next one, as small objects in a spill file */
	record_seed(
		"tight-then-another",
		&(seed_rec){
			.root = &t[0].n, .tight = true, .extra = true, .state = no, .spill = ok});

	/* segments: one, then three of sizes off the page, a blob inline too */
	static const int64_t s4k[] = {32, 32}, s25[] = {25, 50}, s1[] = {1, 4};
	make_tensor(&t[2], "F32", 2, s4k, NULL, 1, 0);
	record_seed("one-segment", &(seed_rec){.name = "model/w",
					       .root = &t[2].n,
					       .nsegs = 1,
					       .sizes = {4096},
					       .state = ok,
					       .spill = ok});
	make_tensor(&t[3], "U8", 2, s1, NULL, 1, 96);
	make_tensor(&t[4], "F32", 2, s4k, NULL, 2, 0);
	make_tensor(&t[5], "F32", 2, s25, NULL, 3, 0);
	make_tensor(&t[6], "I64", 2, s1, bytes, 0, 0);
	const char *seg_names[4] = {"bias", "embed", "head", "inline"};
	shoal_node *segd[4] = {&t[3].n, &t[4].n, &t[5].n, &t[6].n};
	shoal_node dict_segs = {
		.type = "tensor_dict", .nmembers = 4, .names = seg_names, .members = segd};
	const seed_rec three = {.name = "model/three",
				.root = &dict_segs,
				.nsegs = 3,
				.sizes = {100, 4096, 5000},
				.state = ok,
				.spill = ok};
	record_seed("three-segments", &three);
	seed_rec more = three;
	more.extra = true;
	more.state = no;
	record_seed("three-segments-then-another", &more);
	/* two segments, no name: the tensor of the third inline */
	make_tensor(&t[8], "F32", 2, s1, bytes, 0, 0);
	shoal_node *segd2[4] = {&t[3].n, &t[4].n, &t[8].n, &t[6].n};
	shoal_node dict_segs2 = {
		.type = "tensor_dict", .nmembers = 4, .names = seg_names, .members = segd2};
	record_seed("two-segments-nil", &(seed_rec){.root = &dict_segs2,
						    .nsegs = 2,
						    .sizes = {100, 4200},
						    .state = ok,
						    .spill = ok});

	/* refused: cut into its last segment, a byte of that segment flipped,
	 * a tight one cut short, a tensor of the wrong size (the record holds,
	 * its tree does not) */
	seed_rec cut = three;
	cut.cut = 4000;
	cut.state = cut.spill = no;
	record_seed("three-segments-cut", &cut);
	seed_rec flip = three;
	flip.flip = 4000;
	flip.state = flip.spill = no;
	record_seed("three-segments-flipped", &flip);
	record_seed(
		"tight-cut",
		&(seed_rec){
			.root = &dict_inline, .tight = true, .cut = 7, .state = no, .spill = no});
	make_tensor(&t[7], "F32", 2, s23, bytes, 0, 0);
	t[7].b.size = 20;
	record_seed("tensor-wrong-size",
		    &(seed_rec){.root = &t[7].n, .state = TREE_REFUSED, .spill = TREE_REFUSED});
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_store_record", record_seeds);
	return 0;
}

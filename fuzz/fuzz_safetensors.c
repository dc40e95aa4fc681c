/* Fuzzes the safetensors header reader, the decoder of the first bytes of
 * every file a user hands the store: the input is the data area's length
 * (8 bytes) and then the header's JSON. Whatever it holds, a rejection must
 * say why, and a header that parses must describe tensors that tile the
 * data area, each as long as its shape needs. Writing it and reading that
 * back must give the same tensors and metadata, and writing those again
 * the same bytes.
 *
 * Seeds: headers as our writer (the reference writer's layout) makes them,
 * from empty to a few dozen tensors of every dtype, with metadata, odd
 * names and empty tensors. */
#include "store/safetensors.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void check_file(const sh_st_file *f)
{
	uint64_t pos = 0;
	for (size_t i = 0; i < f->n; i++) {
		const sh_st_tensor *t = &f->t[i];
		if (!t->name || t->name_len == 0 || strlen(t->name) != t->name_len)
			abort();
		if (t->dtype <= SHOAL_DT_INVALID || t->dtype >= SHOAL_DT_COUNT)
			abort();
		if (t->ndim < 0 || t->ndim > SHOAL_TENSOR_MAX_DIMS)
			abort();
		uint64_t bytes = shoal_dtype_size(t->dtype);
		for (int d = 0; d < t->ndim; d++)
			if (t->shape[d] < 0 ||
			    __builtin_mul_overflow(bytes, (uint64_t)t->shape[d], &bytes))
				abort();
		if (t->begin != pos || t->end < t->begin || t->end - t->begin != bytes)
			abort();
		pos = t->end;
	}
	if (pos != f->data_len)
		abort();
	for (size_t j = 0; j < f->nmeta; j++)
		if (!f->meta[j].key || !f->meta[j].val)
			abort();
}

static void check_same(const sh_st_file *a, const sh_st_file *b)
{
	if (a->n != b->n || a->nmeta != b->nmeta || a->data_len != b->data_len)
		abort();
	for (size_t i = 0; i < a->n; i++) {
		const sh_st_tensor *x = &a->t[i], *y = &b->t[i];
		if (x->name_len != y->name_len || memcmp(x->name, y->name, x->name_len) != 0 ||
		    x->dtype != y->dtype || x->ndim != y->ndim ||
		    memcmp(x->shape, y->shape, sizeof(x->shape[0]) * (size_t)x->ndim) != 0 ||
		    x->begin != y->begin || x->end != y->end)
			abort();
	}
	for (size_t j = 0; j < a->nmeta; j++)
		if (strcmp(a->meta[j].key, b->meta[j].key) != 0 ||
		    strcmp(a->meta[j].val, b->meta[j].val) != 0)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	if (n < 8)
		return 0;
	uint64_t data_len;
	memcpy(&data_len, in, 8);
	char err[256] = "";
	sh_st_file *f = NULL;
	int rc = sh_st_parse((const char *)in + 8, n - 8, data_len, &f, err, sizeof(err));
	if (rc != 0) {
		if (rc != SHOAL_EBADMSG || f || err[0] == '\0')
			abort();
		return 0;
	}
	check_file(f);

	unsigned char *b, *b2;
	size_t len, len2;
	uint64_t hl;
	sh_st_file *g = NULL;
	if (sh_st_header_write(f->t, f->n, f->meta, f->nmeta, &b, &len) != 0 || len % 8 != 0)
		abort();
	/* data_len is what the tensors add up to, so this cannot wrap */
	if (sh_st_prefix(b, len + data_len, &hl, err, sizeof(err)) != 0 || hl != len - 8)
		abort();
	if (sh_st_parse((const char *)b + 8, hl, data_len, &g, err, sizeof(err)) != 0)
		abort();
	check_same(f, g);
	if (sh_st_header_write(g->t, g->n, g->meta, g->nmeta, &b2, &len2) != 0 || len2 != len ||
	    memcmp(b, b2, len) != 0)
		abort();
	shoal_free(b, len);
	shoal_free(b2, len2);
	sh_st_free(f);
	sh_st_free(g);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

/* One seed: the data area's length, then the header our writer makes for
 * t (laid out back to back from 0 in the given order) and meta. */
static void st_seed(const char *name, sh_st_tensor *t, size_t n, const sh_st_meta *meta,
		    size_t nmeta)
{
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t bytes = shoal_dtype_size(t[i].dtype);
		for (int d = 0; d < t[i].ndim; d++)
			bytes *= (uint64_t)t[i].shape[d];
		t[i].name_len = strlen(t[i].name);
		t[i].begin = off;
		t[i].end = off += bytes;
	}
	unsigned char *h;
	size_t len;
	if (sh_st_header_write(t, n, meta, nmeta, &h, &len) != 0)
		seed_die("the writer refused it", name);
	unsigned char *in = malloc(len);
	if (!in)
		seed_die("out of memory", name);
	memcpy(in, &off, 8); /* the prefix's place: the data area's length */
	memcpy(in + 8, h + 8, len - 8);
	sh_st_file *f = NULL;
	char err[256];
	if (sh_st_parse((const char *)in + 8, len - 8, off, &f, err, sizeof(err)) != 0)
		seed_die(err, name);
	sh_st_free(f);
	seed_write(name, in, len);
	free(in);
	shoal_free(h, len);
}

static void st_seeds(void)
{
	static const shoal_dtype all[] = {
		SHOAL_DT_BOOL, SHOAL_DT_U8,   SHOAL_DT_I8,  SHOAL_DT_U16,     SHOAL_DT_I16,
		SHOAL_DT_F16,  SHOAL_DT_BF16, SHOAL_DT_U32, SHOAL_DT_I32,     SHOAL_DT_F32,
		SHOAL_DT_U64,  SHOAL_DT_I64,  SHOAL_DT_F64, SHOAL_DT_F8_E4M3, SHOAL_DT_F8_E5M2};
	size_t ndt = sizeof(all) / sizeof(all[0]);
	sh_st_tensor t[48];
	char names[48][64], file[64];
	st_seed("empty", t, 0, NULL, 0);
	sh_st_meta meta[] = {{"format", "pt"},
			     {"epoch", "3"},
			     {"note", "tab\there \"quoted\" \\ caf\xc3\xa9 \x01"}};
	st_seed("metadata-only", t, 0, meta, 2);
	/* one tensor of each dtype, in shapes from a scalar to 4-D */
	for (size_t i = 0; i < ndt; i++) {
		memset(t, 0, sizeof(t[0]));
		t[0].name = "w";
		t[0].dtype = all[i];
		t[0].ndim = (int)(i % 5);
		for (int d = 0; d < t[0].ndim; d++)
			t[0].shape[d] = d + 2;
		snprintf(file, sizeof(file), "one-%s-%dd", shoal_dtype_name(all[i]), t[0].ndim);
		st_seed(file, t, 1, NULL, 0);
	}
	/* checkpoints: n tensors of mixed dtypes, some empty, with metadata */
	static const size_t counts[] = {2, 3, 5, 8, 13, 21, 34, 48};
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		size_t n = counts[k];
		memset(t, 0, sizeof(t));
		for (size_t i = 0; i < n; i++) {
			snprintf(names[i], sizeof(names[i]), "model.layers.%zu.%s", i,
				 i % 3 ? "weight" : "bias");
			t[i].name = names[i];
			t[i].dtype = all[(i * 7 + k) % ndt];
			t[i].ndim = 1 + (int)((i + k) % 3);
			for (int d = 0; d < t[i].ndim; d++)
				t[i].shape[d] = (int64_t)((i + (size_t)d + k) % 5);
		}
		snprintf(file, sizeof(file), "checkpoint-%zu", n);
		st_seed(file, t, n, meta, k % 4);
	}
	/* names the writer escapes, and non-ASCII */
	memset(t, 0, 3 * sizeof(t[0]));
	t[0].name = "quote\"back\\slash";
	t[1].name = "ctl\x01\x1f\n\t";
	t[2].name = "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";
	for (int i = 0; i < 3; i++) {
		t[i].dtype = all[i * 4];
		t[i].ndim = 1;
		t[i].shape[0] = 3;
	}
	st_seed("escaped-names", t, 3, meta, 3);
	/* large dims (2^53 - 1 is the largest a header holds) in empty tensors */
	memset(t, 0, 2 * sizeof(t[0]));
	t[0].name = "huge-but-empty";
	t[0].dtype = SHOAL_DT_F64;
	t[0].ndim = 3;
	t[0].shape[0] = 9007199254740991;
	t[0].shape[1] = 0;
	t[0].shape[2] = 4096;
	t[1].name = "deep";
	t[1].dtype = SHOAL_DT_U8;
	t[1].ndim = SHOAL_TENSOR_MAX_DIMS;
	for (int d = 0; d < SHOAL_TENSOR_MAX_DIMS; d++)
		t[1].shape[d] = 1;
	st_seed("large-dims", t, 2, NULL, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_safetensors", st_seeds);
	return 0;
}

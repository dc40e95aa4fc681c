/* Fuzzes the safetensors header reader, the decoder of the first bytes of
 * every file a user hands the store: the input is the data area's length
 * (8 bytes) and then the header's JSON. Whatever it holds, a rejection must
 * say why, and a header that parses must describe tensors that tile the
 * data area, each as long as its shape needs. Writing it and reading that
 * back must give the same tensors and metadata, and writing those again
 * the same bytes. */
#include "store/safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

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
		if ((rc != SHOAL_EBADMSG && rc != SHOAL_EOVERFLOW) || f || err[0] == '\0')
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

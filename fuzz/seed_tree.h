/* Trees for the seed functions of the targets that decode stored nodes
 * (fuzz_frame, fuzz_store_reply, fuzz_store_record): a tensor node over
 * one blob, built by hand as the store's encoder expects it. */
#ifndef SHOAL_FUZZ_SEED_TREE_H
#define SHOAL_FUZZ_SEED_TREE_H

#include "store/node.h"

#include <string.h>

typedef struct seed_tensor {
	shoal_node n;
	sh_field f[2];
	sh_blobref b;
	int64_t shape[4];
} seed_tensor;

/* A tensor of dtype and shape (ndim <= 4) over a blob of its size: inline
 * (inline_data), or in segment seg (1.., 0: the arena) at off. */
static inline void make_tensor(seed_tensor *t, const char *dtype, int ndim, const int64_t *shape,
			       const void *inline_data, uint64_t seg, uint64_t off)
{
	memset(t, 0, sizeof(*t));
	uint64_t bytes = shoal_dtype_size(shoal_dtype_from_name(dtype, strlen(dtype)));
	for (int d = 0; d < ndim; d++) {
		t->shape[d] = shape[d];
		bytes *= (uint64_t)shape[d];
	}
	t->f[0] = (sh_field){.key = "dtype", .kind = SH_F_STR, .n = (uint32_t)strlen(dtype)};
	t->f[0].v.s = dtype;
	t->f[1] = (sh_field){.key = "shape", .kind = SH_F_INTS, .n = (uint32_t)ndim};
	t->f[1].v.ints = t->shape;
	t->b = (sh_blobref){.seg = seg, .off = off, .size = bytes, .inline_data = inline_data};
	t->n = (shoal_node){
		.type = "tensor", .nfields = 2, .nblobs = 1, .fields = t->f, .blobs = &t->b};
}

#endif

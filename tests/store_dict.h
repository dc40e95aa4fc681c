/* A state-dict-shaped object for the store's tests: n f32 tensors of
 * [rows, cols] in one reserved region, rows varying (t % 7 + 1), element i
 * of tensor t equal to t * 1000 + i. Included by the tests that put one. */
#ifndef SHOAL_TESTS_STORE_DICT_H
#define SHOAL_TESTS_STORE_DICT_H

#include "test.h"

#include "store/client.h"

#include <stdio.h>

static shoal_id put_dict_of(shoal_client *c, const char *name, int n, int cols, unsigned flags)
{
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "tensor_dict", &b));
	size_t total = 0;
	for (int t = 0; t < n; t++)
		total += (size_t)(t % 7 + 1) * (size_t)cols * 4 + SH_STORE_BLOB_ALIGN;
	CHECK_OK(shoal_builder_reserve(b, total));
	for (int t = 0; t < n; t++) {
		char nm[64];
		snprintf(nm, sizeof(nm), "layers.%d.weight", t);
		shoal_node *m;
		CHECK_OK(shoal_node_add_member(shoal_builder_root(b), nm, "tensor", &m));
		int64_t shape[2] = {t % 7 + 1, cols};
		float *p;
		CHECK_OK(shoal_node_set_tensor(m, SHOAL_DT_F32, 2, shape, (void **)&p));
		for (int i = 0; i < shape[0] * cols; i++)
			p[i] = (float)(t * 1000 + i);
	}
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, name, flags, &id));
	return id;
}

#endif

/* The one allocator every shoal allocation goes through. Frees are sized so
 * a replacement can count bytes without headers; the default counts too, so
 * shoal_alloc_bytes() works for leak checks in tests and for the daemon's
 * accounting. */
#include "shoal_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static shoal_allocator cur;
static _Atomic size_t used;

void shoal_set_allocator(const shoal_allocator *a)
{
	if (a)
		cur = *a;
	else
		memset(&cur, 0, sizeof(cur));
}

size_t shoal_alloc_bytes(void)
{
	return atomic_load_explicit(&used, memory_order_relaxed);
}

/* Size 0 is treated as 1 everywhere so the sized free matches the alloc. */
void *shoal_alloc(size_t size)
{
	if (size == 0)
		size = 1;
	void *p = cur.alloc ? cur.alloc(size, cur.ctx) : malloc(size);
	if (p)
		atomic_fetch_add_explicit(&used, size, memory_order_relaxed);
	return p;
}

void *shoal_calloc(size_t n, size_t size)
{
	size_t total;
	if (shoal_mul_size(n, size, &total) != 0)
		return NULL;
	void *p = shoal_alloc(total);
	if (p)
		memset(p, 0, total);
	return p;
}

void *shoal_realloc(void *p, size_t old_size, size_t new_size)
{
	if (!p)
		return shoal_alloc(new_size);
	void *q;
	if (old_size == 0)
		old_size = 1;
	if (new_size == 0)
		new_size = 1;
	if (cur.alloc && cur.realloc) {
		q = cur.realloc(p, old_size, new_size, cur.ctx);
	} else if (cur.alloc) {
		q = shoal_alloc(new_size);
		if (!q)
			return NULL;
		memcpy(q, p, old_size < new_size ? old_size : new_size);
		shoal_free(p, old_size);
		return q;
	} else {
		q = realloc(p, new_size);
	}
	if (q) {
		atomic_fetch_add_explicit(&used, new_size, memory_order_relaxed);
		atomic_fetch_sub_explicit(&used, old_size, memory_order_relaxed);
	}
	return q;
}

void shoal_free(void *p, size_t size)
{
	if (!p)
		return;
	if (size == 0)
		size = 1;
	atomic_fetch_sub_explicit(&used, size, memory_order_relaxed);
	if (cur.free)
		cur.free(p, size, cur.ctx);
	else
		free(p);
}

int sh_grow_to(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	uint64_t nc = *cap ? *cap : 8;
	while (nc < need)
		nc *= 2;
	if (nc > UINT32_MAX)
		return SHOAL_EOVERFLOW;
	void *q = shoal_realloc(*p, (size_t)*cap * elem, (size_t)nc * elem);
	if (!q)
		return SHOAL_ENOMEM;
	*p = q;
	*cap = (uint32_t)nc;
	return 0;
}

int sh_grow_array(void **p, uint32_t *cap, uint32_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	return n == UINT32_MAX ? SHOAL_EOVERFLOW : sh_grow_to(p, cap, n + 1, elem);
}

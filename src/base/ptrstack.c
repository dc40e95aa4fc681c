/* Growth and release of sh_ptrstack, the array-backed free list. */
#include "shoal_impl.h"

int sh_ptrstack_reserve(sh_ptrstack *ps, size_t want)
{
	if (want <= ps->cap)
		return 0;
	size_t cap = ps->cap ? ps->cap : 64, bytes;
	while (cap < want)
		if (shoal_mul_size(cap, 2, &cap) != 0)
			return SHOAL_ENOMEM;
	if (shoal_mul_size(cap, sizeof(void *), &bytes) != 0)
		return SHOAL_ENOMEM;
	void **v = shoal_realloc(ps->v, ps->cap * sizeof(void *), bytes);
	if (!v)
		return SHOAL_ENOMEM;
	ps->v = v;
	ps->cap = cap;
	return 0;
}

void sh_ptrstack_fini(sh_ptrstack *ps)
{
	shoal_free(ps->v, ps->cap * sizeof(void *));
	ps->v = NULL;
	ps->n = ps->cap = 0;
}

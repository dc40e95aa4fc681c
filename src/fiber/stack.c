/* The stack pool. Stacks are carved from large slabs (one mmap for many
 * stacks) so 100 000 fibers cost a few hundred mappings, not 200 000: that
 * is what keeps us under vm.max_map_count. A guard page sits below every
 * stack; on kernels with guard regions (MADV_GUARD_INSTALL, Linux 6.13) it
 * costs no mapping at all, otherwise mprotect splits the slab and we stop
 * guarding once a budget of mappings is spent. Memory is reserved with
 * MAP_NORESERVE: a fiber pays only for pages it touches. Freed stacks are
 * reused LIFO (warm first); the excess is returned to the kernel only when
 * the scheduler is idle (sh_stack_trim), never on the hot path. */
#include "fiber_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(SH_ASAN)
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

#define MIN_SLAB 16
#define MAX_SLAB 1024

typedef struct slab {
	struct slab *next;
	char *base;
	size_t len;
	size_t nstacks, used;
} slab;

typedef struct pool {
	size_t size, stride;
	slab *slabs;
	size_t nslab_stacks; /* next slab's count */
	sh_stack *free;	     /* [0, ncold) returned to kernel, [ncold, nfree) warm */
	size_t nfree, ncold, cap;
	size_t reserved; /* free stacks promised to fibers that have not run yet */
	size_t mapped, guarded;
} pool;

typedef struct pools {
	pool *p;
	size_t n, cap;
	pool *last; /* most fibers use one size: look there first */
} pools;

static size_t page_size; /* set once, by the first scheduler (pthread_once) */
static pthread_once_t page_size_once = PTHREAD_ONCE_INIT;

static void init_page_size(void)
{
	page_size = (size_t)sysconf(_SC_PAGESIZE);
}
/* -1 unknown, 0 unsupported, 1 works: probed once per process. */
static _Atomic int madv_guard_ok = -1;
/* mprotect guards left before we would crowd vm.max_map_count. */
static _Atomic long mprotect_budget = -1;
static _Atomic int warned_unguarded;

static long read_max_map_count(void)
{
	return sh_read_long("/proc/sys/vm/max_map_count", 65530);
}

int sh_stack_pools_init(void **out)
{
	/* Schedulers of several threads may start at once (a daemon's store
	 * and task controller do). */
	pthread_once(&page_size_once, init_page_size);
	long b = atomic_load(&mprotect_budget);
	if (b < 0) {
		/* Each mprotect guard splits a slab into two more mappings;
		 * leave three quarters of the limit to everything else. */
		long expect = -1;
		atomic_compare_exchange_strong(&mprotect_budget, &expect, read_max_map_count() / 8);
	}
	pools *ps = SH_NEW(pools);
	if (!ps)
		return SHOAL_ENOMEM;
	*out = ps;
	return 0;
}

void sh_stack_pools_fini(void *vp)
{
	pools *ps = vp;
	if (!ps)
		return;
	for (size_t i = 0; i < ps->n; i++) {
		pool *p = &ps->p[i];
		slab *sl = p->slabs;
		while (sl) {
			slab *nx = sl->next;
			munmap(sl->base, sl->len);
			SH_DELETE(sl);
			sl = nx;
		}
		shoal_free(p->free, p->cap * sizeof(sh_stack));
	}
	shoal_free(ps->p, ps->cap * sizeof(pool));
	SH_DELETE(ps);
}

static pool *pool_for(pools *ps, size_t size)
{
	if (sh_likely(ps->last && ps->last->size == size))
		return ps->last;
	for (size_t i = 0; i < ps->n; i++)
		if (ps->p[i].size == size)
			return ps->last = &ps->p[i];
	if (ps->n == ps->cap) {
		size_t nc = ps->cap ? ps->cap * 2 : 4;
		pool *np = shoal_realloc(ps->p, ps->cap * sizeof(pool), nc * sizeof(pool));
		if (!np)
			return NULL;
		ps->p = np;
		ps->cap = nc;
	}
	pool *p = &ps->p[ps->n++];
	memset(p, 0, sizeof(*p));
	ps->last = p;
	p->size = size;
	p->stride = size + page_size;
	p->nslab_stacks = MIN_SLAB;
	return p;
}

static int add_slab(pool *p)
{
	size_t len;
	if (shoal_mul_size(p->stride, p->nslab_stacks, &len) != 0)
		return SHOAL_ENOMEM;
	slab *sl = SH_NEW(slab);
	if (!sl)
		return SHOAL_ENOMEM;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (m == MAP_FAILED) {
		SH_DELETE(sl);
		return SHOAL_ENOMEM;
	}
	sl->base = m;
	sl->len = len;
	sl->nstacks = p->nslab_stacks;
	sl->next = p->slabs;
	p->slabs = sl;
	p->mapped += sl->nstacks;
	if (p->nslab_stacks < MAX_SLAB)
		p->nslab_stacks *= 2;
	return 0;
}

static bool guard_madvise(char *g)
{
	int ok = atomic_load_explicit(&madv_guard_ok, memory_order_relaxed);
	if (ok == 0)
		return false;
	if (madvise(g, page_size, MADV_GUARD_INSTALL) == 0) {
		if (ok < 0)
			atomic_store(&madv_guard_ok, 1);
		return true;
	}
	if (errno == EINVAL || errno == ENOSYS)
		atomic_store(&madv_guard_ok, 0);
	return false;
}

static bool guard_mprotect(char *g)
{
	if (atomic_fetch_sub(&mprotect_budget, 1) <= 0) {
		atomic_fetch_add(&mprotect_budget, 1);
		return false;
	}
	if (mprotect(g, page_size, PROT_NONE) != 0) {
		atomic_fetch_add(&mprotect_budget, 1);
		return false;
	}
	return true;
}

static bool install_guard(char *g, shoal_guard_mode mode)
{
	switch (mode) {
	case SHOAL_GUARD_NONE:
		return false;
	case SHOAL_GUARD_MADVISE:
		return guard_madvise(g);
	case SHOAL_GUARD_MPROTECT:
		return guard_mprotect(g);
	case SHOAL_GUARD_AUTO:
	default:
		return guard_madvise(g) || guard_mprotect(g);
	}
}

static void pop_free(pool *p, sh_stack *out)
{
	*out = p->free[--p->nfree];
	if (p->ncold > p->nfree)
		p->ncold = p->nfree;
#if defined(SH_ASAN)
	__asan_unpoison_memory_region(out->base, out->size);
#endif
}

static int carve(pool *p, shoal_guard_mode mode, sh_stack *out);

int sh_stack_get(void *vp, size_t size, shoal_guard_mode mode, sh_stack *out)
{
	pools *ps = vp;
	pool *p = pool_for(ps, size);
	if (!p)
		return SHOAL_ENOMEM;
	if (p->nfree > p->reserved) {
		pop_free(p, out);
		return 0;
	}
	return carve(p, mode, out);
}

int sh_stack_reserve(void *vp, size_t size, shoal_guard_mode mode)
{
	pools *ps = vp;
	pool *p = pool_for(ps, size);
	if (!p)
		return SHOAL_ENOMEM;
	if (p->reserved == p->nfree) {
		/* every free stack is promised already: one more from a slab */
		sh_stack st;
		int rc = carve(p, mode, &st);
		if (rc)
			return rc;
		size_t n = p->nfree;
		sh_stack_put(vp, &st);
		if (p->nfree == n)
			return SHOAL_ENOMEM; /* the free list could not grow */
	}
	p->reserved++;
	return 0;
}

void sh_stack_take(void *vp, size_t size, sh_stack *out)
{
	pools *ps = vp;
	pool *p = pool_for(ps, size);
	SH_ASSERT(p && p->reserved > 0 && p->nfree >= p->reserved);
	p->reserved--;
	pop_free(p, out);
}

const sh_stack *sh_stack_next(void *vp, size_t size)
{
	pool *p = pool_for(vp, size);
	return p && p->nfree ? &p->free[p->nfree - 1] : NULL;
}

static int carve(pool *p, shoal_guard_mode mode, sh_stack *out)
{
	if (!p->slabs || p->slabs->used == p->slabs->nstacks) {
		int rc = add_slab(p);
		if (rc)
			return rc;
	}
	slab *sl = p->slabs;
	char *g = sl->base + sl->used * p->stride;
	sl->used++;
	out->base = g + page_size;
	out->size = (uint32_t)p->size;
	out->guarded = install_guard(g, mode);
	if (out->guarded) {
		p->guarded++;
	} else if (mode != SHOAL_GUARD_NONE && !atomic_exchange(&warned_unguarded, 1)) {
		sh_warn("fiber",
			"stack guard pages unavailable (mode %d, mapping budget spent"
			" or kernel without guard regions): further stacks are unguarded",
			(int)mode);
	}
	return 0;
}

void sh_stack_put(void *vp, const sh_stack *st)
{
	pools *ps = vp;
	pool *p = pool_for(ps, st->size);
	SH_ASSERT(p);
	if (p->nfree == p->cap) {
		size_t ncap = p->cap ? p->cap * 2 : 64;
		sh_stack *nf =
			shoal_realloc(p->free, p->cap * sizeof(sh_stack), ncap * sizeof(sh_stack));
		if (!nf) {
			/* Keep the memory reserved but give back its pages; the
			 * stack is lost to reuse until the pool is freed. */
			madvise(st->base, st->size, MADV_DONTNEED);
			return;
		}
		p->free = nf;
		p->cap = ncap;
	}
	p->free[p->nfree++] = *st;
}

void sh_stack_trim(void *vp, size_t keep)
{
	pools *ps = vp;
	for (size_t i = 0; i < ps->n; i++) {
		pool *p = &ps->p[i];
		while (p->nfree - p->ncold > keep) {
			sh_stack *st = &p->free[p->ncold++];
			madvise(st->base, st->size, MADV_DONTNEED);
		}
	}
}

void sh_stack_stats(void *vp, size_t *mapped, size_t *nfree, size_t *guarded)
{
	pools *ps = vp;
	*mapped = *nfree = *guarded = 0;
	for (size_t i = 0; i < ps->n; i++) {
		*mapped += ps->p[i].mapped;
		*nfree += ps->p[i].nfree;
		*guarded += ps->p[i].guarded;
	}
}

bool sh_stack_is_guard(void *vp, const void *addr)
{
	pools *ps = vp;
	const char *a = addr;
	for (size_t i = 0; ps && i < ps->n; i++) {
		pool *p = &ps->p[i];
		for (slab *sl = p->slabs; sl; sl = sl->next) {
			if (a < sl->base || a >= sl->base + sl->len)
				continue;
			return (size_t)(a - sl->base) % p->stride < page_size;
		}
	}
	return false;
}

/* sh_bump: a bump allocator for trees that are built or decoded once and
 * freed whole (store metadata, RPC values). Chunks come from the one
 * allocator; nothing is freed before the end. */
#include "shoal_impl.h"

#include <string.h>
#include <sys/mman.h>

struct sh_bump_chunk {
	sh_bump_chunk *next;
	size_t size; /* of the whole chunk */
	_Alignas(16) unsigned char data[];
};

#define BUMP_CHUNK (16u << 10)
#define HUGE_PAGE ((size_t)2 << 20)

/* A chunk for a payload of many MiB is written once right away (a copy
 * arrives in it): 2 MiB pages make that 512 times fewer page faults,
 * which cost 7-14 us each on the VMs we run on. Advice only: whatever the
 * allocator and the kernel say, the memory works the same. */
static void huge_pages(void *p, size_t n)
{
	if (n < 2 * HUGE_PAGE)
		return;
	uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	uintptr_t e = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);
	if (e > a)
		madvise((void *)a, e - a, MADV_HUGEPAGE);
}

void *sh_bump_alloc_raw(sh_bump *b, size_t size)
{
	size = (size + 7) & ~(size_t)7;
	size_t room = b->head ? b->head->size - sizeof(sh_bump_chunk) - b->used : 0;
	if (size > room) {
		size_t want = size + sizeof(sh_bump_chunk);
		if (want < BUMP_CHUNK)
			want = BUMP_CHUNK;
		sh_bump_chunk *c;
		if (b->spare && want > BUMP_CHUNK && b->spare->size >= want) {
			/* the big chunk a reset kept: its pages are faulted in */
			c = b->spare;
			b->spare = NULL;
		} else if (!(c = shoal_alloc(want))) {
			return NULL;
		} else {
			c->size = want;
			b->total += want;
			huge_pages(c, want);
		}
		c->next = b->head;
		b->head = c;
		b->used = 0;
	}
	void *p = b->head->data + b->used;
	b->used += size;
	return p;
}

void *sh_bump_alloc(sh_bump *b, size_t size)
{
	void *p = sh_bump_alloc_raw(b, size);
	if (p)
		memset(p, 0, size);
	return p;
}

char *sh_bump_str(sh_bump *b, const char *s, size_t len)
{
	char *p = sh_bump_alloc(b, len + 1);
	if (p) {
		memcpy(p, s, len);
		p[len] = 0;
	}
	return p;
}

void sh_bump_fini(sh_bump *b)
{
	while (b->head) {
		sh_bump_chunk *c = b->head;
		b->head = c->next;
		shoal_free(c, c->size);
	}
	if (b->spare)
		shoal_free(b->spare, b->spare->size);
	b->spare = NULL;
	b->used = b->total = 0;
}

bool sh_bump_holds(const sh_bump *b, const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	for (const sh_bump_chunk *c = b->head; c; c = c->next) {
		uintptr_t s = (uintptr_t)c->data, e = (uintptr_t)c + c->size;
		if (a >= s && a <= e && n <= e - a)
			return true;
	}
	return false;
}

void sh_bump_reset(sh_bump *b)
{
	/* Kept: the newest small chunk, for the tree of the next value, and
	 * the largest, whatever its size, for the next payload of that size:
	 * its pages are faulted in, where a fresh one costs a fault a page
	 * (a 6 GiB payload: seconds). sh_bump_trim gives it back. */
	sh_bump_chunk *small = NULL, *big = b->spare;
	for (sh_bump_chunk *c = b->head, *next; c; c = next) {
		next = c->next;
		if (c->size <= BUMP_CHUNK && !small) {
			small = c;
		} else if (c->size > BUMP_CHUNK && (!big || c->size > big->size)) {
			if (big)
				shoal_free(big, big->size);
			big = c;
		} else {
			shoal_free(c, c->size);
		}
	}
	b->head = small;
	if (small)
		small->next = NULL;
	b->spare = big;
	b->used = 0;
	b->total = (small ? small->size : 0) + (big ? big->size : 0);
}

void sh_bump_adopt(sh_bump *dst, sh_bump *src)
{
	/* Behind dst's current chunk, which goes on filling. */
	sh_bump_chunk *first = src->head, *last = first;
	if (first) {
		while (last->next)
			last = last->next;
		if (dst->head) {
			last->next = dst->head->next;
			dst->head->next = first;
		} else {
			dst->head = first;
			dst->used = src->used;
		}
		for (sh_bump_chunk *c = first; c; c = c->next)
			dst->total += c->size;
	}
	src->head = NULL;
	src->used = 0;
	src->total = src->spare ? src->spare->size : 0;
}

void sh_bump_trim(sh_bump *b, size_t keep)
{
	if (b->spare && b->spare->size > keep) {
		b->total -= b->spare->size;
		shoal_free(b->spare, b->spare->size);
		b->spare = NULL;
	}
}

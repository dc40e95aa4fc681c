/* sh_bump: a bump allocator for trees that are built or decoded once and
 * freed whole (store metadata, RPC values). Chunks come from the one
 * allocator; nothing is freed before the end. */
#include "shoal_impl.h"

#include <string.h>

struct sh_bump_chunk {
	sh_bump_chunk *next;
	size_t size; /* of the whole chunk */
	_Alignas(16) unsigned char data[];
};

#define BUMP_CHUNK (16u << 10)
#define BUMP_KEEP (64u << 20) /* the largest chunk a reset keeps */

void *sh_bump_alloc_raw(sh_bump *b, size_t size)
{
	size = (size + 7) & ~(size_t)7;
	size_t room = b->head ? b->head->size - sizeof(sh_bump_chunk) - b->used : 0;
	if (size > room) {
		size_t want = size + sizeof(sh_bump_chunk);
		if (want < BUMP_CHUNK)
			want = BUMP_CHUNK;
		sh_bump_chunk *c;
		if (b->spare && b->spare->size >= want) {
			/* the big chunk a reset kept: its pages are faulted in */
			c = b->spare;
			b->spare = NULL;
		} else if (!(c = shoal_alloc(want))) {
			return NULL;
		} else {
			c->size = want;
			b->total += want;
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

void sh_bump_reset(sh_bump *b)
{
	/* Kept: the newest chunk, for the small things, and the largest
	 * beyond it up to BUMP_KEEP, for the next payload of that size. */
	sh_bump_chunk *keep = b->head, *big = b->spare;
	b->spare = NULL;
	b->head = keep ? keep->next : NULL;
	if (keep && keep->size > BUMP_KEEP) {
		b->head = keep;
		keep = NULL;
	}
	for (sh_bump_chunk *c = b->head, *next; c; c = next) {
		next = c->next;
		if (c->size <= BUMP_KEEP && c->size > BUMP_CHUNK && (!big || c->size > big->size)) {
			if (big)
				shoal_free(big, big->size);
			big = c;
		} else {
			shoal_free(c, c->size);
		}
	}
	b->head = keep;
	if (keep)
		keep->next = NULL;
	b->spare = big;
	b->used = 0;
	b->total = (keep ? keep->size : 0) + (big ? big->size : 0);
}

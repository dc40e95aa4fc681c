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

void *sh_bump_alloc(sh_bump *b, size_t size)
{
	size = (size + 7) & ~(size_t)7;
	size_t room = b->head ? b->head->size - sizeof(sh_bump_chunk) - b->used : 0;
	if (size > room) {
		size_t want = size + sizeof(sh_bump_chunk);
		if (want < BUMP_CHUNK)
			want = BUMP_CHUNK;
		sh_bump_chunk *c = shoal_alloc(want);
		if (!c)
			return NULL;
		c->size = want;
		c->next = b->head;
		b->head = c;
		b->used = 0;
		b->total += want;
	}
	void *p = b->head->data + b->used;
	b->used += size;
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
	b->used = b->total = 0;
}

void sh_bump_reset(sh_bump *b)
{
	if (!b->head)
		return;
	if (b->head->size > BUMP_KEEP) {
		sh_bump_fini(b); /* a big one-off (a payload): not kept */
		return;
	}
	sh_bump_chunk *keep = b->head;
	b->head = keep->next;
	sh_bump_fini(b);
	keep->next = NULL;
	b->head = keep;
	b->used = 0;
	b->total = keep->size;
}

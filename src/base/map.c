/* sh_map: a hash table from nonzero 64-bit keys to pointers, open
 * addressing with linear probing and backward-shift deletion (no
 * tombstones, so lookups stay short after many deletes). The store keys
 * objects, segments and per-connection references with it. */
#include "shoal_impl.h"

#include <string.h>

static inline uint64_t mix(uint64_t k)
{
	/* splitmix64's finalizer: ids are sequential, so spread them. */
	k ^= k >> 30;
	k *= 0xbf58476d1ce4e5b9ULL;
	k ^= k >> 27;
	k *= 0x94d049bb133111ebULL;
	return k ^ (k >> 31);
}

static int grow(sh_map *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 16;
	sh_map_slot *s = shoal_calloc(ncap, sizeof(*s));
	if (!s)
		return SHOAL_ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].key)
			continue;
		size_t j = mix(m->slots[i].key) & (ncap - 1);
		while (s[j].key)
			j = (j + 1) & (ncap - 1);
		s[j] = m->slots[i];
	}
	if (m->slots)
		shoal_free(m->slots, m->cap * sizeof(*s));
	m->slots = s;
	m->cap = ncap;
	return 0;
}

void sh_map_fini(sh_map *m)
{
	if (m->slots)
		shoal_free(m->slots, m->cap * sizeof(*m->slots));
	memset(m, 0, sizeof(*m));
}

static sh_map_slot *find(const sh_map *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->slots[i].key == key)
			return &m->slots[i];
		if (!m->slots[i].key)
			return NULL;
	}
}

void *sh_map_get(const sh_map *m, uint64_t key)
{
	SH_ASSERT(key != 0);
	sh_map_slot *s = find(m, key);
	return s ? s->val : NULL;
}

int sh_map_put(sh_map *m, uint64_t key, void *val)
{
	SH_ASSERT(key != 0);
	sh_map_slot *s = find(m, key);
	if (s) {
		s->val = val;
		return 0;
	}
	if ((m->n + 1) * 4 > m->cap * 3 && grow(m) != 0) /* load <= 3/4 */
		return SHOAL_ENOMEM;
	size_t i = mix(key) & (m->cap - 1);
	while (m->slots[i].key)
		i = (i + 1) & (m->cap - 1);
	m->slots[i].key = key;
	m->slots[i].val = val;
	m->n++;
	return 0;
}

void *sh_map_del(sh_map *m, uint64_t key)
{
	SH_ASSERT(key != 0);
	sh_map_slot *s = find(m, key);
	if (!s)
		return NULL;
	void *val = s->val;
	size_t mask = m->cap - 1, i = (size_t)(s - m->slots), j = i;
	/* Shift back every later entry of the run that would be unreachable
	 * across the hole. */
	for (;;) {
		j = (j + 1) & mask;
		if (!m->slots[j].key)
			break;
		size_t home = mix(m->slots[j].key) & mask;
		/* j's entry may move to i unless its home lies cyclically in (i, j]. */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (stays)
			continue;
		m->slots[i] = m->slots[j];
		i = j;
	}
	m->slots[i].key = 0;
	m->slots[i].val = NULL;
	m->n--;
	return val;
}

bool sh_map_next(const sh_map *m, size_t *it, uint64_t *key, void **val)
{
	for (; *it < m->cap; (*it)++) {
		if (m->slots[*it].key) {
			*key = m->slots[*it].key;
			*val = m->slots[*it].val;
			(*it)++;
			return true;
		}
	}
	return false;
}

/* Copy-on-write views of an object (shoal_object_cow): the object's pages
 * mapped again, privately and writable, from the descriptors the client
 * kept. A reader that writes (torch has no read-only tensors) makes the
 * pages it touches its own; the sealed bytes, the object's other views and
 * every other process are untouched, and an untouched view cost no copy.
 * Where no private mapping can be made (a descriptor not kept, a hugetlb
 * pool without room for the private pages a mapping reserves), the view's
 * bytes are copied once into memory of its own.
 *
 * A fresh mapping costs a fault a page on first touch (on this kind of VM
 * ~2 us a page), which a reader getting the same object again and again
 * would pay each time; so a view's mapping that was never written (no page
 * of it is anonymous, /proc/self/pagemap says) is kept when the view goes
 * and given to the next view of the same bytes, its pages still mapped.
 * Not one of hugetlb pages: a private mapping of those reserves its size in
 * the pool, which the store's next huge allocation would miss. */
#include "store/client.h"

#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

typedef struct cow_seg {
	uint64_t seg, lo, hi; /* the object's bytes in the segment */
	void *map;	      /* where [lo rounded down to a page...) is */
	uint64_t map_off;     /* the segment offset map starts at */
} cow_seg;

static int collect(const shoal_node *n, cow_seg *v, uint32_t *nv, uint32_t cap)
{
	for (uint32_t i = 0; i < n->nblobs; i++) {
		const sh_blobref *b = &n->blobs[i];
		if (b->size == 0)
			continue;
		uint32_t k = 0;
		while (k < *nv && v[k].seg != b->seg)
			k++;
		if (k == *nv) {
			if (k == cap)
				return SHOAL_EPROTO; /* more segments than resolve() counted */
			v[k] = (cow_seg){.seg = b->seg, .lo = b->off, .hi = b->off + b->size};
			(*nv)++;
		}
		if (b->off < v[k].lo)
			v[k].lo = b->off;
		if (b->off + b->size > v[k].hi)
			v[k].hi = b->off + b->size;
	}
	for (uint32_t i = 0; i < n->nmembers; i++) {
		int rc = collect(n->members[i], v, nv, cap);
		if (rc)
			return rc;
	}
	return 0;
}

/* Whether no page of [addr, +len) was written: none is anonymous (a
 * private mapping's written page is a copy of its own). pagemap's flags are
 * readable by anyone for their own process (only frame numbers are not). */
static bool never_written(const void *addr, size_t len)
{
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	const uint64_t present = 1ull << 63, swapped = 1ull << 62, file = 1ull << 61;
	uint64_t e[512];
	size_t pages = len / 4096, first = (uintptr_t)addr / 4096;
	bool clean = true;
	for (size_t i = 0; i < pages && clean;) {
		size_t k = pages - i < 512 ? pages - i : 512;
		ssize_t n = pread(fd, e, k * 8, (off_t)((first + i) * 8));
		if (n != (ssize_t)(k * 8)) {
			clean = false;
			break;
		}
		for (size_t j = 0; j < k && clean; j++)
			clean = !(e[j] & swapped) && (!(e[j] & present) || (e[j] & file));
		i += k;
	}
	close(fd);
	return clean;
}

/* A kept mapping of exactly these bytes, taken from the keep. */
static void *take_kept(shoal_client *c, uint64_t seg, uint64_t off, size_t len)
{
	for (uint32_t i = 0; i < c->ncow_kept; i++) {
		sh_cow_map *k = &c->cow_kept[i];
		if (k->seg == seg && k->off == off && k->len == len) {
			void *m = k->addr;
			c->cow_kept_bytes -= len;
			memmove(k, k + 1, (c->ncow_kept - i - 1) * sizeof(*k));
			c->ncow_kept--;
			return m;
		}
	}
	return NULL;
}

/* Keeps m for the next view of its bytes if it was never written, the
 * oldest kept going first; else unmaps it. */
static void keep_or_unmap(shoal_client *c, const sh_cow_map *m)
{
	if (m->copied || m->huge || m->len > SH_COW_KEEP_BYTES || !never_written(m->addr, m->len)) {
		munmap(m->addr, m->len);
		return;
	}
	while (c->ncow_kept &&
	       (c->ncow_kept == SH_COW_KEEP || c->cow_kept_bytes + m->len > SH_COW_KEEP_BYTES)) {
		munmap(c->cow_kept[0].addr, c->cow_kept[0].len);
		c->cow_kept_bytes -= c->cow_kept[0].len;
		memmove(c->cow_kept, c->cow_kept + 1, (c->ncow_kept - 1) * sizeof(*c->cow_kept));
		c->ncow_kept--;
	}
	c->cow_kept[c->ncow_kept++] = *m;
	c->cow_kept_bytes += m->len;
}

void sh_cow_forget(shoal_client *c, uint64_t seg)
{
	for (uint32_t i = 0; i < c->ncow_kept;) {
		sh_cow_map *k = &c->cow_kept[i];
		if (seg != UINT64_MAX && k->seg != seg) {
			i++;
			continue;
		}
		munmap(k->addr, k->len);
		c->cow_kept_bytes -= k->len;
		memmove(k, k + 1, (c->ncow_kept - i - 1) * sizeof(*k));
		c->ncow_kept--;
	}
}

/* Maps s privately from fd (or takes a kept mapping of it), or copies its
 * bytes from the shared mapping. */
static int map_seg(shoal_client *c, cow_seg *s, int fd, const unsigned char *shared,
		   sh_cow_map *out)
{
	uint64_t page = 4096;
	struct stat st;
	/* hugetlbfs maps whole huge pages from offsets that are multiples */
	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_blksize > 4096 &&
	    (st.st_blksize & (st.st_blksize - 1)) == 0)
		page = (uint64_t)st.st_blksize;
	uint64_t a = s->lo & ~(page - 1), b = (s->hi + page - 1) & ~(page - 1);
	void *m = MAP_FAILED;
	bool copied = false;
	if (fd >= 0 && !(m = take_kept(c, s->seg, a, b - a)))
		m = mmap(NULL, b - a, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)a);
	if (m == MAP_FAILED) {
		copied = true;
		sh_debug("store",
			 "copy-on-write view of segment %" PRIu64 ": %s; copying %" PRIu64 " bytes",
			 s->seg, fd < 0 ? "its descriptor was not kept" : strerror(errno),
			 s->hi - s->lo);
		page = 4096;
		a = s->lo & ~(page - 1);
		b = (s->hi + page - 1) & ~(page - 1);
		m = mmap(NULL, b - a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return sh_err_set(c, SHOAL_ENOMEM,
					  "copy-on-write view: no memory for a copy of %" PRIu64
					  " bytes",
					  s->hi - s->lo);
		memcpy((unsigned char *)m + (s->lo - a), shared + s->lo, s->hi - s->lo);
	}
	s->map = m;
	s->map_off = a;
	*out = (sh_cow_map){.addr = m,
			    .len = b - a,
			    .seg = s->seg,
			    .off = a,
			    .copied = copied,
			    .huge = page > 4096};
	return 0;
}

static shoal_node *clone(sh_bump *a, const shoal_node *n, const cow_seg *v, uint32_t nv)
{
	shoal_node *m = sh_bump_alloc_raw(a, sizeof(*m));
	if (!m)
		return NULL;
	*m = *n;
	if (n->nblobs) {
		m->blobs = sh_bump_alloc_raw(a, n->nblobs * sizeof(*m->blobs));
		if (!m->blobs)
			return NULL;
		memcpy(m->blobs, n->blobs, n->nblobs * sizeof(*m->blobs));
		for (uint32_t i = 0; i < n->nblobs; i++) {
			sh_blobref *b = &m->blobs[i];
			for (uint32_t k = 0; k < nv && b->size; k++)
				if (v[k].seg == b->seg)
					b->ptr =
						(unsigned char *)v[k].map + (b->off - v[k].map_off);
		}
	}
	if (n->nmembers) {
		m->members = sh_bump_alloc_raw(a, n->nmembers * sizeof(*m->members));
		if (!m->members)
			return NULL;
		for (uint32_t i = 0; i < n->nmembers; i++)
			if (!(m->members[i] = clone(a, n->members[i], v, nv)))
				return NULL;
	}
	return m;
}

void sh_cow_drop(shoal_object *o)
{
	for (uint32_t i = 0; i < o->nmaps; i++)
		keep_or_unmap(o->c, &o->maps[i]);
	shoal_object_release(o->base);
	sh_bump_fini(&o->a);
	SH_DELETE(o);
}

int shoal_object_cow(shoal_object *o, shoal_object **out)
{
	if (!o || !out)
		return SHOAL_EINVAL;
	if (o->base) /* a view of a view is one of the object */
		o = o->base;
	if (!o->c) { /* a remote store's: its bytes are this process's own already */
		o->refs++;
		*out = o;
		return 0;
	}
	shoal_client *c = o->c;
	shoal_object *v = SH_NEW(shoal_object);
	if (!v)
		return SHOAL_ENOMEM;
	v->c = c;
	v->id = o->id;
	v->sig = o->sig;
	v->bytes = o->bytes;
	v->base = o;
	v->refs = 1;
	o->refs++;
	uint32_t cap = o->nsegs + 1, nv = 0; /* its segments and the arena */
	cow_seg *segs = sh_bump_alloc(&v->a, cap * sizeof(*segs));
	v->maps = sh_bump_alloc(&v->a, cap * sizeof(*v->maps));
	int rc = segs && v->maps ? collect(o->root, segs, &nv, cap) : SHOAL_ENOMEM;
	for (uint32_t i = 0; i < nv && rc == 0; i++) {
		const unsigned char *shared;
		int fd;
		if (segs[i].seg == 0) {
			shared = c->arena;
			fd = c->arena_fd;
		} else {
			sh_cseg *g = sh_map_get(&c->segs, segs[i].seg);
			if (!g) {
				rc = SHOAL_EPROTO;
				break;
			}
			shared = g->addr;
			fd = g->fd;
		}
		if ((rc = map_seg(c, &segs[i], fd, shared, &v->maps[i])) == 0)
			v->nmaps++;
	}
	if (rc == 0 && !(v->root = clone(&v->a, o->root, segs, nv)))
		rc = SHOAL_ENOMEM;
	if (rc) {
		sh_cow_drop(v);
		return rc;
	}
	*out = v;
	return 0;
}

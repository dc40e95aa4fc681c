/* What a layer above reaches of a store (store/extend.h): its objects,
 * their bytes' places, names, and the room and regions of copies coming
 * from elsewhere, each as one call, so that the layer above never touches
 * the store's insides (server.h) and the store never knows what it is. */
#include "store/server.h"
#include "store/proto.h"
#include "store/pages.h"
#include "store/spare.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void *sh_store_hooks_ctx(const shoal_store *s)
{
	return s->hooks.ctx;
}

const shoal_store_opts *sh_store_opts(const shoal_store *s)
{
	return &s->opts;
}

uint64_t sh_store_instance(const shoal_store *s)
{
	return s->instance;
}

bool sh_store_stopping(const shoal_store *s)
{
	return s->stopping;
}

shoal_store *sh_st_conn_store(const st_conn *c)
{
	return c->srv;
}

/* ---- objects ---- */

st_obj *sh_store_find(shoal_store *s, const char *name, size_t nl, uint64_t id)
{
	st_obj *o = name ? sh_st_name_find(s, name, nl) : id ? sh_map_get(&s->objs, id) : NULL;
	return o && !o->deleted ? o : NULL;
}

st_obj *sh_store_find_copy(shoal_store *s, uint64_t id, uint64_t sig)
{
	st_obj *o = sh_store_find(s, NULL, 0, id);
	size_t it = 0;
	uint64_t k;
	void *v;
	while (!o && sh_map_next(&s->objs, &it, &k, &v))
		if (((st_obj *)v)->sig == sig && !((st_obj *)v)->deleted)
			o = v;
	return o;
}

void sh_store_hold(shoal_store *s, st_obj *o)
{
	(void)s;
	o->refs++;
}

void sh_store_unhold(shoal_store *s, st_obj *o)
{
	sh_st_obj_unref(s, o, 1);
}

int sh_store_resident(shoal_store *s, st_obj *o, char *why, size_t whylen)
{
	if (!o->spilled)
		return 0;
	int rc = sh_st_restore(s, o, why, whylen);
	if (rc == SHOAL_EBADMSG) /* never served: gone */
		sh_st_obj_delete(s, o);
	return rc;
}

sh_store_objinfo sh_store_info(const st_obj *o)
{
	return (sh_store_objinfo){
		.id = o->id, .sig = o->sig, .bytes = o->bytes, .name = o->name, .type = o->type};
}

int sh_store_tree(const st_obj *o, sh_bump *a, shoal_node **root, char *why, size_t whylen)
{
	sh_mp m;
	sh_mp_init(&m, o->meta, o->meta_len);
	int rc = sh_node_decode(&m, a, root, why, whylen);
	SH_ASSERT(rc != SHOAL_EBADMSG); /* the store wrote it */
	return rc;
}

void sh_store_blob_place(shoal_store *s, const st_obj *o, const sh_blobref *b, sh_store_place *out)
{
	*out = (sh_store_place){.off = b->off};
	if (!b->seg) {
		out->mem = s->arena + b->off;
		return;
	}
	const st_seg *g = sh_map_get(&s->segs, b->seg);
	SH_ASSERT(g); /* the store wrote this tree */
	for (out->seg = 0; out->seg < o->nsegs && o->segs[out->seg] != g; out->seg++)
		;
	SH_ASSERT(out->seg < o->nsegs); /* every blob's segment is the object's own */
}

uint32_t sh_store_nsegs(const st_obj *o)
{
	return o->nsegs;
}

void sh_store_seg(const shoal_store *s, const st_obj *o, uint32_t i, int *fd, uint64_t *size,
		  bool *huge)
{
	const st_seg *g = o->segs[i];
	struct stat st;
	*fd = g->fd;
	*size = g->size;
	/* hugetlbfs says its page size; shmem's huge pages are the store's
	 * kind for a segment that large */
	*huge = (fstat(g->fd, &st) == 0 && st.st_blksize > 4096) ||
		(s->pages.kind == SHOAL_PAGES_THP && g->size >= SH_HUGE_MIN);
}

bool sh_store_name_if_free(shoal_store *s, st_obj *o, const char *name, size_t nl)
{
	return o->name || sh_st_name_find(s, name, nl) || sh_st_name_bind(s, o, name, nl) == 0;
}

bool sh_store_name_from_registry(shoal_store *s, st_obj *o, const char *name, size_t nl)
{
	st_obj *had = sh_st_name_find(s, name, nl);
	if (had == o) {
		o->name_cached = o->copy && !o->global;
		return true;
	}
	if (had && !had->name_cached)
		return true; /* a name of this store's own stays its own */
	if (had)
		sh_st_name_unbind(s, had);
	if (o->name)
		return true; /* known here by another name already */
	if (sh_st_name_bind(s, o, name, nl) != 0)
		return false;
	o->name_cached = o->copy && !o->global;
	return true;
}

void sh_store_each_persistent_named(shoal_store *s,
				    bool (*fn)(void *arg, const sh_store_objinfo *i,
					       const shoal_node *root),
				    void *arg)
{
	size_t it = 0;
	uint64_t k;
	void *v;
	while (sh_map_next(&s->objs, &it, &k, &v)) {
		st_obj *o = v;
		if (!o->persistent || !o->name || o->deleted)
			continue;
		sh_bump a = {0};
		shoal_node *root;
		char why[200];
		sh_store_objinfo i = sh_store_info(o);
		if (sh_store_tree(o, &a, &root, why, sizeof(why)) == 0 && fn(arg, &i, root))
			o->global = true;
		sh_bump_fini(&a);
	}
}

/* ---- copies coming from elsewhere ---- */

uint64_t sh_store_free_bytes(const shoal_store *s)
{
	return s->capacity - s->used;
}

int sh_store_room_for_copy(shoal_store *s, uint64_t region, sh_store_room *r, char *why,
			   size_t whylen)
{
	*r = (sh_store_room){.spare_fd = -1};
	uint64_t charged = sh_pages_round(&s->pages, (region + PAGE - 1) & ~(uint64_t)(PAGE - 1));
	uint64_t room = s->opts.peer_room ? s->opts.peer_room : s->capacity;
	if (room < s->capacity && s->incoming + charged > room) {
		snprintf(why, whylen,
			 "no room for copies coming from other stores: it needs %" PRIu64
			 " bytes, copies on their way hold %" PRIu64 " of the %" PRIu64
			 " they may (--peer-room)",
			 region, s->incoming, room);
		return SHOAL_ENOSPC;
	}
	if (!sh_store_make_room(s, charged, false)) {
		snprintf(why, whylen,
			 "store full: it needs %" PRIu64 " bytes, %" PRIu64 " of %" PRIu64 " free",
			 region, s->capacity - s->used, s->capacity);
		return SHOAL_ENOSPC;
	}
	/* a spare of its size, when one is ready: the bytes then land in pages
	 * that exist (zeroed off the path), as a put's do */
	r->size = sh_pages_round(&s->pages, region);
	if (s->spares) {
		r->spare_fd = sh_spares_take(s->spares, r->size);
		if (r->spare_fd < 0)
			sh_spares_fit(s->spares, s->capacity - s->used - charged, 0);
	}
	s->used += charged;
	s->incoming += charged;
	r->charged = charged;
	return 0;
}

void sh_store_room_release(shoal_store *s, uint64_t charged)
{
	s->used -= charged;
	s->incoming -= charged;
}

int sh_store_copy_region(shoal_store *s, uint64_t region, sh_store_room *r, sh_store_region *out)
{
	*out = (sh_store_region){.fd = -1};
	shoal_pages kind;
	if (r->spare_fd >= 0) { /* of r->size: its pages exist */
		out->fd = r->spare_fd;
		out->size = r->size;
		r->spare_fd = -1;
		out->maplen = out->size;
		return sh_shm_map_len(out->fd, &out->maplen, true, (void **)&out->map);
	}
	return sh_pages_segment_ahead(&s->pages, "shoal-migrated", region ? region : 1, &out->fd,
				      &out->size, &kind, (void **)&out->map, &out->maplen,
				      &out->ahead);
}

void sh_store_copy_region_done(sh_store_region *g, bool failed)
{
	sh_pages_ahead_end(g->ahead, failed);
	g->ahead = NULL;
	if (g->map)
		sh_shm_unmap(g->map, g->maplen);
	g->map = NULL;
}

int sh_store_adopt_copy(shoal_store *s, uint64_t id, uint64_t sig, shoal_node *root, int fd,
			uint64_t size, st_obj **out, char *why, size_t whylen)
{
	int rc = sh_store_adopt(s, id, sig, root, 1, &fd, &size, out, why, whylen);
	if (rc == 0) {
		(*out)->copy = true;
		(*out)->last_get = shoal_now_ns();
	}
	return rc;
}

/* ---- objects a remote client puts, deletes, lists ---- */

int sh_store_put_allowed(shoal_store *s, const char *name, size_t nl, unsigned flags, char *why,
			 size_t whylen)
{
	st_obj *old = name ? sh_st_name_find(s, name, nl) : NULL;
	if (old && !(flags & SHOAL_REPLACE)) {
		snprintf(why, whylen, "name %.*s is taken by object %016" PRIx64,
			 (int)(nl > 200 ? 200 : nl), name, old->id);
		return SHOAL_EEXIST;
	}
	return 0;
}

int sh_store_adopt_put(shoal_store *s, shoal_node *root, int *fd, uint64_t size, const char *name,
		       size_t nl, unsigned flags, st_obj **out, char *why, size_t whylen)
{
	*out = NULL; /* until it is served: a failure deletes what was adopted */
	int rc = sh_store_put_allowed(s, name, nl, flags, why, whylen);
	if (rc)
		return rc;
	uint64_t id = s->instance | s->next_id++;
	st_obj *o;
	if ((rc = sh_store_adopt(s, id, id, root, 1, fd, &size, &o, why, whylen)) != 0)
		return rc;
	*fd = -1; /* the object's, and goes with it, whatever comes next */
	o->persistent = flags & SHOAL_PERSIST;
	/* a persistent object's file first, as a seal writes it before the
	 * old object of its name goes */
	if (o->persistent && s->state &&
	    (rc = sh_st_persist_obj(s, o, name, nl, why, whylen)) != 0) {
		o->persistent = false;
		sh_st_obj_delete(s, o);
		return rc;
	}
	if (name) {
		st_obj *old = sh_st_name_find(s, name, nl);
		if (old)
			sh_st_obj_delete(s, old);
		if (sh_st_name_bind(s, o, name, nl) != 0) {
			sh_st_obj_delete(s, o);
			snprintf(why, whylen, "out of memory naming the object");
			return SHOAL_ENOMEM;
		}
	}
	if (name && o->persistent && s->hooks.global_names) {
		/* the name is the cluster's: taken in its registry (a wait, from
		 * the fiber of the put), or the object goes */
		rc = sh_st_name_global(s, o, name, nl, false, flags & SHOAL_REPLACE, why, whylen);
		o = sh_map_get(&s->objs, id);
		if (rc) {
			if (o && !o->deleted)
				sh_st_obj_delete(s, o);
			return rc;
		}
		if (!o || o->deleted) {
			snprintf(why, whylen, "object %016" PRIx64 " was deleted meanwhile", id);
			return SHOAL_ENOENT;
		}
		o->global = true;
	}
	*out = o;
	return 0;
}

void sh_store_drop_transient(shoal_store *s, uint64_t id)
{
	st_obj *o = sh_map_get(&s->objs, id);
	if (o && !o->deleted && !o->persistent)
		sh_st_obj_delete(s, o);
}

int sh_store_delete_obj(shoal_store *s, st_obj *o, char *why, size_t whylen)
{
	if (o->global && o->name && s->hooks.global_names) {
		snprintf(why, whylen,
			 "object %016" PRIx64 "'s name %.200s is the cluster registry's: delete "
			 "it through a local client of a store",
			 o->id, o->name);
		return SHOAL_EPERM;
	}
	sh_st_obj_delete(s, o);
	return 0;
}

void sh_store_each_name(shoal_store *s, const char *prefix, size_t plen,
			bool (*fn)(void *arg, const sh_store_objinfo *i), void *arg)
{
	size_t it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&s->names, &it, &key, &val))
		for (st_obj *o = val; o; o = o->name_next) {
			if (strlen(o->name) < plen || memcmp(o->name, prefix, plen) != 0)
				continue;
			sh_store_objinfo i = sh_store_info(o);
			if (!fn(arg, &i))
				return;
		}
}

/* ---- links ---- */

bool sh_store_fd_room(const shoal_store *s, uint64_t more)
{
	return s->nclients * 5 + s->segs.n + more + 64 <= s->fd_budget;
}

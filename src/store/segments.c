/* Large objects: segments, and the objects they and the arena's blobs make.
 * A segment is a memfd per builder region (CREATE), written by its creator,
 * then sealed by us at SEAL (write, grow, shrink, seal), which the kernel
 * refuses while any writable mapping exists, so after the seal nobody, the
 * creator included, can change a byte. A create takes a spare when one of
 * its size is ready (spare.c); a freed segment asks for one like it.
 *
 * Also here: room within --size (copies from other stores give way), the
 * life of an object (delete, unref, free), and the adoption of objects that
 * come from outside a connection (a state file read back, a copy migrated
 * here), checked as a seal is. */
#include "store/server.h"
#include "store/node.h"
#include "store/proto.h"
#include "store/pages.h"
#include "store/spare.h"
#include "store/state.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool sh_store_make_room(shoal_store *s, uint64_t bytes, bool local)
{
	/* copies fetched from other stores are a cache: those no one reads
	 * go, least recently got first, before anything is refused */
	while (bytes > s->capacity - s->used) {
		st_obj *victim = NULL;
		size_t it = 0;
		uint64_t k;
		void *v;
		while (sh_map_next(&s->objs, &it, &k, &v)) {
			st_obj *o = v;
			if (o->copy && !o->refs && !o->deleted && !o->global &&
			    (!victim || o->last_get < victim->last_get))
				victim = o;
		}
		/* then cold objects go to disk; local puts come first: copies on
		 * their way give way */
		if (!victim)
			return sh_st_spill_room(s, bytes) ||
			       (local && s->hooks.yield_room &&
				s->hooks.yield_room(s->hooks.ctx, bytes));
		sh_debug("store", "copy %016" PRIx64 " (%" PRIu64 " bytes) evicted for room",
			 victim->id, victim->bytes);
		sh_st_obj_delete(s, victim);
	}
	return true;
}

/* Frees g; guess: ask for a spare of its size for the next put. */
static void seg_release(shoal_store *s, st_seg *g, bool guess)
{
	sh_map_del(&s->segs, g->id);
	bool big = s->spares && g->size >= SH_SPARE_MIN;
	if (big)
		sh_spares_dispose(s->spares, g->fd); /* freeing a GiB takes ms */
	else
		close(g->fd);
	s->used -= g->charged;
	/* A sealed memfd cannot be written again, but a fresh one of its size
	 * takes the pages it gives back (the worker closes it first; the pool
	 * hands out the last freed first): the next put or copy of that size
	 * (a model replaced, a checkpoint moved again) only copies. */
	if (big && guess && !s->stopping)
		sh_spares_want(s->spares, g->size, s->capacity - s->used, false);
	SH_DELETE(g);
}

void sh_st_seg_free(shoal_store *s, st_seg *g)
{
	seg_release(s, g, true);
}

/* What an object owns besides its blobs and their lists: freed with it, or
 * when one never published is dropped. */
static void obj_shell_free(st_obj *o)
{
	if (o->meta)
		shoal_free(o->meta, o->meta_cap);
	if (o->type)
		shoal_free(o->type, strlen(o->type) + 1);
	SH_DELETE(o);
}

void sh_st_obj_free(shoal_store *s, st_obj *o)
{
	sh_st_name_unbind(s, o);
	sh_st_spill_forget(s, o);
	if (o->creator)
		sh_map_del(&o->creator->created, o->id);
	for (uint32_t i = 0; i < o->nsegs; i++)
		sh_st_seg_free(s, o->segs[i]);
	for (uint32_t i = 0; i < o->narena; i++)
		sh_st_arena_free(s, o->arena[i] >> 8, (int)(o->arena[i] & 0xff));
	if (o->deleted && o->refs == 0 && s->pending)
		s->pending--;
	sh_map_del(&s->objs, o->id);
	s->nobjs--;
	if (o->segs)
		shoal_free(o->segs, o->cap_segs * sizeof(*o->segs));
	if (o->arena)
		shoal_free(o->arena, o->cap_arena * sizeof(*o->arena));
	obj_shell_free(o);
}

/* Deletes o: unbinds its name now, frees it when its last reader lets go. */
void sh_st_obj_delete(shoal_store *s, st_obj *o)
{
	sh_st_name_unbind(s, o);
	if (o->creator) {
		sh_map_del(&o->creator->created, o->id);
		o->creator = NULL;
	}
	if (o->deleted)
		return;
	o->deleted = true;
	if (o->persistent && s->state)
		sh_state_remove(s->state, o->id);
	if (o->refs == 0) {
		sh_st_obj_free(s, o);
		return;
	}
	s->pending++;
}

void sh_st_obj_unref(shoal_store *s, st_obj *o, uint64_t n)
{
	SH_ASSERT(o->refs >= n);
	o->refs -= n;
	if (o->refs == 0 && o->deleted) {
		sh_st_obj_free(s, o);
	}
}

static int no_space(st_conn *c, const sh_frame *req, uint64_t asked)
{
	shoal_store *s = c->srv;
	return sh_st_reply_err(c, req, SHOAL_ENOSPC,
			       "store full: asked %" PRIu64 " bytes, %" PRIu64 " of %" PRIu64
			       " free",
			       asked, s->capacity - s->used, s->capacity);
}

int sh_st_op_create(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n;
	uint64_t size;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_uint(m, &size) || sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "CREATE: expected [size]");
	if (size == 0)
		return sh_st_reply_err(c, req, SHOAL_EINVAL, "CREATE: size 0, expected at least 1");
	/* whole pages: huge ones where the segment will be on them */
	uint64_t charged = sh_pages_round(&s->pages, (size + PAGE - 1) & ~(uint64_t)(PAGE - 1));
	if (charged < size || !sh_store_make_room(s, charged, true))
		return no_space(c, req, size);
	if (sh_st_fds_held(s) + 1 + FD_SPARE_CONNS * FDS_PER_CONN > s->fd_budget)
		return sh_st_reply_err(c, req, SHOAL_ENOSPC,
				       "CREATE: the store holds %zu segments and %" PRIu64
				       " connections, as many descriptors as it may (%" PRIu64
				       "); pack blobs into fewer regions (shoal_builder_reserve)",
				       (size_t)s->segs.n, s->nclients, s->fd_budget);
	st_seg *g = SH_NEW(st_seg);
	if (!g)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "CREATE: out of memory");
	int rc = 0;
	uint64_t got = sh_pages_round(&s->pages, size);
	shoal_pages kind = s->pages.kind;
	g->fd = s->spares ? sh_spares_take(s->spares, got) : -1;
	if (g->fd < 0 && s->spares) /* the capacity spares hold is this create's first */
		sh_spares_fit(s->spares, s->capacity - s->used - charged, 0);
	/* the room is this create's from here: other fibers run while huge
	 * pages are allocated for it off this thread */
	s->used += charged;
	if (g->fd < 0)
		rc = sh_pages_segment_aside(&s->pages, "shoal-segment", size, &g->fd, &got, &kind);
	/* Its size is fixed from the start: a creator that shrank it before
	 * the seal would leave readers mapping pages past its end (SIGBUS). */
	if (rc == 0 && (rc = sh_memfd_fix_size_open(g->fd)) != 0)
		close(g->fd);
	if (rc) {
		s->used -= charged;
		SH_DELETE(g);
		return sh_st_reply_err(c, req, rc, "CREATE: memfd of %" PRIu64 " bytes: %s", size,
				       shoal_strerror(rc));
	}
	if (kind != s->pages.kind && size >= SH_HUGE_MIN && !s->pages.short_said) {
		s->pages.short_said = true;
		sh_warn("store",
			"a segment of %" PRIu64 " bytes went on 4 KiB pages: the hugetlb pool has "
			"no room for it (vm.nr_hugepages; said once)",
			size);
	}
	g->id = s->next_seg++;
	g->size = got;
	g->charged = charged;
	g->creator = c;
	if (sh_map_put(&s->segs, g->id, g) || sh_map_put(&c->regions, g->id, g)) {
		sh_map_del(&s->segs, g->id);
		close(g->fd);
		SH_DELETE(g);
		s->used -= charged;
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "CREATE: out of memory");
	}
	if ((rc = sh_st_send_fds(c, &g, 1)) != 0)
		return rc; /* the socket is broken: the connection ends */
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, g->id);
	return sh_st_reply_ok(c, req, &pk);
}

void sh_st_region_drop(st_conn *c, st_seg *g)
{
	sh_map_del(&c->regions, g->id);
	sh_st_seg_free(c->srv, g);
}

int sh_st_op_abort(st_conn *c, const sh_frame *req, sh_mp *m)
{
	uint32_t n;
	uint64_t id;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_uint(m, &id) || sh_mp_done(m) || id == 0)
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "ABORT: expected [segment]");
	st_seg *g = sh_map_get(&c->regions, id);
	if (!g)
		return sh_st_reply_err(c, req, SHOAL_ENOENT, "ABORT: no unsealed segment %" PRIu64,
				       id);
	sh_st_region_drop(c, g);
	return 0;
}

/* Seal: where the blobs of the tree are, collected while checking them. */
typedef struct seal_ctx {
	shoal_store *s;
	sh_map *regions; /* the unsealed segments blobs may lie in */
	st_seg **segs;
	uint32_t nsegs, cap_segs;
	uint64_t *arena;
	uint32_t narena, cap_arena;
	uint64_t inline_total;
} seal_ctx;

static int place_blobs(seal_ctx *x, shoal_node *n, char *why, size_t whylen)
{
	shoal_store *s = x->s;
	for (uint32_t i = 0; i < n->nblobs; i++) {
		sh_blobref *b = &n->blobs[i];
		if (b->inline_data) {
			if (b->size > SH_STORE_INLINE_MAX ||
			    (x->inline_total += b->size) > SH_STORE_INLINE_TOTAL) {
				snprintf(why, whylen,
					 "inline blob of %" PRIu64 " bytes (%" PRIu64
					 " in this request), expected at most %u (%u)",
					 b->size, x->inline_total, SH_STORE_INLINE_MAX,
					 SH_STORE_INLINE_TOTAL);
				return SHOAL_EBADMSG;
			}
			uint64_t off;
			int rc = sh_st_arena_alloc(s, b->size ? b->size : 1, &off);
			if (rc) {
				snprintf(why, whylen,
					 "store full: asked %" PRIu64 " bytes, %" PRIu64
					 " of %" PRIu64
					 " free (small-object arena: %zu of %zu used)",
					 b->size, s->capacity - s->used, s->capacity, s->arena_bump,
					 s->arena_size);
				return rc;
			}
			if (sh_grow_array((void **)&x->arena, &x->cap_arena, x->narena, 8)) {
				sh_st_arena_free(s, off, sh_st_arena_class(b->size ? b->size : 1));
				return SHOAL_ENOMEM;
			}
			x->arena[x->narena++] =
				off << 8 | (uint64_t)sh_st_arena_class(b->size ? b->size : 1);
			memcpy(s->arena + off, b->inline_data, b->size);
			b->inline_data = NULL;
			b->seg = 0;
			b->off = off;
			continue;
		}
		st_seg *g = b->seg ? sh_map_get(x->regions, b->seg) : NULL;
		if (!g) {
			snprintf(why, whylen,
				 "blob in segment %" PRIu64
				 ": not an unsealed segment of this client",
				 b->seg);
			return SHOAL_EBADMSG;
		}
		if (b->off + b->size > g->size) {
			snprintf(why, whylen,
				 "blob [%" PRIu64 ", +%" PRIu64 ") outside segment %" PRIu64
				 " of %" PRIu64 " bytes",
				 b->off, b->size, g->id, g->size);
			return SHOAL_EBADMSG;
		}
		bool seen = false;
		for (uint32_t j = 0; j < x->nsegs && !seen; j++)
			seen = x->segs[j] == g;
		if (!seen) {
			if (sh_grow_array((void **)&x->segs, &x->cap_segs, x->nsegs,
					  sizeof(st_seg *)))
				return SHOAL_ENOMEM;
			x->segs[x->nsegs++] = g;
		}
	}
	for (uint32_t i = 0; i < n->nmembers; i++) {
		int rc = place_blobs(x, n->members[i], why, whylen);
		if (rc)
			return rc;
	}
	return 0;
}

/* The arena's bytes a tree's inline blobs will take. */
static uint64_t inline_need(const shoal_node *n)
{
	uint64_t need = 0;
	for (uint32_t i = 0; i < n->nblobs; i++)
		if (n->blobs[i].inline_data)
			need += 1ull
				<< (sh_st_arena_class(n->blobs[i].size ? n->blobs[i].size : 1) +
				    ARENA_MIN_CLASS);
	for (uint32_t i = 0; i < n->nmembers; i++)
		need += inline_need(n->members[i]);
	return need;
}

/* o's stored encoding and type, from its tree (blobs placed). */
static int obj_set_tree(st_obj *o, const shoal_node *root, char *why, size_t whylen)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_node_pack(&pk, root);
	size_t tl = strlen(root->type) + 1;
	o->meta = w.p;
	o->meta_cap = w.cap;
	o->meta_len = w.len;
	if (w.err || !(o->type = shoal_alloc(tl)))
		return SHOAL_ENOMEM;
	memcpy(o->type, root->type, tl);
	/* A get sends the metadata in one reply: it must fit one. */
	if (w.len > SH_STORE_REPLY_MAX - 4096) {
		snprintf(why, whylen,
			 "metadata of %zu bytes: a get could not return it (at most %u)", w.len,
			 SH_STORE_REPLY_MAX - 4096);
		return SHOAL_EMSGSIZE;
	}
	return 0;
}

int sh_st_op_seal(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n;
	const char *name = NULL;
	uint32_t name_len = 0;
	uint64_t flags;
	if (sh_mp_array(m, &n) || (n != 3 && n != 4))
		return sh_st_reply_err(
			c, req, SHOAL_EBADMSG,
			"SEAL: expected [name, flags, node] or [name, flags, node, owner]");
	if (!sh_mp_take_nil(m)) {
		if (sh_mp_str(m, &name, &name_len) || name_len == 0 ||
		    name_len > SH_NODE_MAX_NAME || memchr(name, 0, name_len))
			return sh_st_reply_err(
				c, req, SHOAL_EBADMSG,
				"SEAL: name must be nil or 1 to %d bytes without NUL",
				SH_NODE_MAX_NAME);
	}
	if (sh_mp_uint(m, &flags) || (flags & ~(uint64_t)(SHOAL_PERSIST | SHOAL_REPLACE)))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "SEAL: flags must be PERSIST|REPLACE");
	sh_bump a = {0};
	shoal_node *root;
	seal_ctx x = {.s = s, .regions = &c->regions};
	st_obj *o = NULL;
	char *why = c->why;
	why[0] = 0;
	int rc = sh_node_decode(m, &a, &root, why, sizeof(c->why));
	/* Room for its small blobs, before anything of the store is looked
	 * up: making it may wait for cold objects to spill. */
	uint64_t need = rc == 0 ? inline_need(root) : 0;
	if (need > s->capacity - s->used)
		sh_store_make_room(s, need, true);
	/* made for another connection, which owns it from now on */
	st_conn *owner = c;
	uint64_t token = 0;
	if (rc == 0 && n == 4 && (sh_mp_uint(m, &token) || token == 0)) {
		snprintf(why, sizeof(c->why), "owner: expected a token from CLAIM");
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0 && token && !(owner = sh_map_get(&s->claims, token))) {
		snprintf(why, sizeof(c->why),
			 "no connection claims owner %016" PRIx64 " (it is gone)", token);
		rc = SHOAL_ENOENT;
	}
	if (rc == 0 && c->restricted && (token || (flags & (SHOAL_PERSIST | SHOAL_REPLACE)))) {
		snprintf(why, sizeof(c->why),
			 "this connection is restricted (a strict extension's): it seals only "
			 "objects of its own, never PERSIST, REPLACE nor for another owner");
		rc = SHOAL_EPERM;
	}
	if (rc == 0 && token && (flags & SHOAL_PERSIST)) {
		snprintf(why, sizeof(c->why), "an object with an owner cannot be PERSIST");
		rc = SHOAL_EINVAL;
	}
	if (rc == 0 && sh_mp_done(m) != 0) {
		snprintf(why, sizeof(c->why), "trailing bytes after the node");
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0)
		rc = sh_node_check_types(root, why, sizeof(c->why));
	st_obj *old = name ? sh_st_name_find(s, name, name_len) : NULL;
	if (rc == 0 && old && !(flags & SHOAL_REPLACE)) {
		snprintf(why, sizeof(c->why), "name %.*s is taken by object %016" PRIx64,
			 (int)name_len, name, old->id);
		rc = SHOAL_EEXIST;
	}
	/* A persistent name is the cluster's: taken there first (the wait
	 * lets others run, so the name is looked at here again after). */
	uint64_t pre_id = 0;
	if (rc == 0 && name && (flags & SHOAL_PERSIST) && s->hooks.global_names) {
		pre_id = s->instance | s->next_id++;
		rc = s->hooks.name(s->hooks.ctx, false, name, name_len, pre_id, root,
				   flags & SHOAL_REPLACE, why, sizeof(c->why));
		old = sh_st_name_find(s, name, name_len);
		if (rc == 0 && old && !(flags & SHOAL_REPLACE)) {
			snprintf(why, sizeof(c->why), "name %.*s is taken by object %016" PRIx64,
				 (int)name_len, name, old->id);
			rc = SHOAL_EEXIST;
		} else if (rc) {
			pre_id = 0; /* not registered: nothing to undo */
		}
	}
	if (rc == 0)
		rc = place_blobs(&x, root, why, sizeof(c->why));
	/* The kernel enforces the immutability from here: sealing fails while
	 * any writable mapping of a segment exists, anywhere. */
	for (uint32_t i = 0; rc == 0 && i < x.nsegs; i++) {
		if ((rc = sh_memfd_seal(x.segs[i]->fd)) != 0)
			snprintf(why, sizeof(c->why), "segment %" PRIu64 ": %s%s", x.segs[i]->id,
				 shoal_strerror(rc),
				 rc == SHOAL_EBUSY
					 ? " (still mapped writable: unmap before sealing)"
					 : "");
	}
	if (rc == 0 && !(o = SH_NEW(st_obj)))
		rc = SHOAL_ENOMEM;
	if (rc == 0)
		rc = obj_set_tree(o, root, why, sizeof(c->why));
	if (rc != 0) {
		for (uint32_t i = 0; i < x.narena; i++)
			sh_st_arena_free(s, x.arena[i] >> 8, (int)(x.arena[i] & 0xff));
		if (x.arena)
			shoal_free(x.arena, x.cap_arena * 8);
		if (x.segs)
			shoal_free(x.segs, x.cap_segs * sizeof(st_seg *));
		if (o)
			obj_shell_free(o);
		if (pre_id) { /* registered for nothing: undone, as far as etcd lets us */
			char w2[600];
			s->hooks.name(s->hooks.ctx, true, name, name_len, pre_id, NULL, false, w2,
				      sizeof(w2));
		}
		sh_bump_fini(&a);
		if (rc == SHOAL_ENOSPC)
			return sh_st_reply_err(c, req, rc, "%s", why);
		return sh_st_reply_err(c, req, rc, "SEAL: %s", why[0] ? why : shoal_strerror(rc));
	}
	o->id = pre_id ? pre_id : s->instance | s->next_id++;
	o->sig = o->id;
	o->last_get = shoal_now_ns(); /* made counts as used, for what spills first */
	o->global = pre_id != 0;
	o->bytes = sh_node_bytes(root);
	sh_bump_fini(&a);
	o->segs = x.segs;
	o->nsegs = x.nsegs;
	o->cap_segs = x.cap_segs;
	o->arena = x.arena;
	o->narena = x.narena;
	o->cap_arena = x.cap_arena;
	for (uint32_t i = 0; i < x.nsegs; i++) {
		sh_map_del(&c->regions, x.segs[i]->id);
		x.segs[i]->creator = NULL;
		x.segs[i]->owner = o;
	}
	if (sh_map_put(&s->objs, o->id, o) != 0 ||
	    (!(flags & SHOAL_PERSIST) && sh_map_put(&owner->created, o->id, o) != 0)) {
		sh_map_del(&s->objs, o->id);
		s->nobjs++; /* sh_st_obj_free counts it down */
		sh_st_obj_free(s, o);
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "SEAL: out of memory");
	}
	s->nobjs++;
	o->persistent = flags & SHOAL_PERSIST;
	o->creator = o->persistent ? NULL : owner;
	/* Written before the old object of the name goes: a stop between the
	 * two leaves both files, and the newer wins at the next start. */
	if (o->persistent && s->state &&
	    (rc = sh_st_persist_obj(s, o, name, name_len, why, sizeof(c->why))) != 0) {
		sh_st_obj_free(s, o);
		return sh_st_reply_err(c, req, rc, "SEAL: %s", why);
	}
	if (name) {
		if (old)
			sh_st_obj_delete(s, old);
		if (sh_st_name_bind(s, o, name, name_len) != 0) {
			sh_st_obj_delete(s, o);
			return sh_st_reply_err(c, req, SHOAL_ENOMEM, "SEAL: out of memory");
		}
	}
	sh_st_spill_check(s);
	/* The next put is likely of this size: its spare is made now that
	 * this one's copy is done (not during it, which it would slow). */
	for (uint32_t i = 0; s->spares && i < o->nsegs; i++)
		sh_spares_want(s->spares, o->segs[i]->size, s->capacity - s->used, false);
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, o->id);
	msgpack_pack_uint64(&pk, o->sig);
	return sh_st_reply_ok(c, req, &pk);
}

/* The segment references of a tree read back, from indices into the
 * file's segments to the ids they now have. */
static void blobs_from_state(shoal_node *n, st_seg **segs)
{
	for (uint32_t i = 0; i < n->nblobs; i++)
		if (n->blobs[i].seg) /* 0: placed in the arena */
			n->blobs[i].seg = segs[n->blobs[i].seg - 1]->id;
	for (uint32_t i = 0; i < n->nmembers; i++)
		blobs_from_state(n->members[i], segs);
}

/* Whether segments of these sizes fit --size and the descriptor budget:
 * asked before a state file's segments are read (sh_state_load). */
int sh_st_restore_fits(void *arg, uint32_t nsegs, const uint64_t *sizes, char *why, size_t whylen)
{
	shoal_store *s = arg;
	uint64_t charged = 0;
	for (uint32_t i = 0; i < nsegs; i++)
		charged += (sizes[i] + PAGE - 1) & ~(uint64_t)(PAGE - 1); /* each < 2^62 */
	if (charged > s->capacity - s->used) {
		snprintf(why, whylen,
			 "%" PRIu64 " bytes of segments do not fit the store's size (%" PRIu64
			 " of %" PRIu64 " free)",
			 charged, s->capacity - s->used, s->capacity);
		return SHOAL_ENOSPC;
	}
	if (sh_st_fds_held(s) + nsegs + FD_SPARE_CONNS * FDS_PER_CONN > s->fd_budget) {
		snprintf(why, whylen,
			 "%u segments: the store may hold no more descriptors (%" PRIu64 ")", nsegs,
			 s->fd_budget);
		return SHOAL_ENOSPC;
	}
	return 0;
}

/* Gives o the bytes of root: its blobs inline (copied into the arena) or
 * in nsegs sealed files (fds, sizes), named [index + 1, offset, size],
 * checked as a seal request is, within --size and the descriptor budget;
 * o's segments, arena slots, meta, type and bytes are set. On failure
 * nothing is left of it and the descriptors stay the caller's. */
static int obj_fill(shoal_store *s, st_obj *o, shoal_node *root, uint32_t nsegs, const int *fds,
		    const uint64_t *sizes, char *why, size_t whylen)
{
	sh_map regions = {0};
	st_seg **segs = nsegs ? shoal_alloc(nsegs * sizeof(*segs)) : NULL;
	seal_ctx x = {.s = s, .regions = &regions};
	int rc = nsegs && !segs ? SHOAL_ENOMEM : 0;
	if (rc == 0)
		rc = sh_st_restore_fits(s, nsegs, sizes, why, whylen);
	uint32_t made = 0;
	for (; rc == 0 && made < nsegs; made++) {
		st_seg *g = SH_NEW(st_seg);
		if (!g || sh_map_put(&s->segs, s->next_seg, g) != 0 ||
		    sh_map_put(&regions, made + 1, g) != 0) {
			if (g) {
				sh_map_del(&s->segs, s->next_seg);
				SH_DELETE(g);
			}
			rc = SHOAL_ENOMEM;
			break;
		}
		g->id = s->next_seg++;
		g->fd = fds[made];
		g->size = sizes[made];
		g->charged = (g->size + PAGE - 1) & ~(uint64_t)(PAGE - 1);
		s->used += g->charged;
		segs[made] = g;
	}
	if (rc == 0)
		rc = place_blobs(&x, root, why, whylen);
	if (rc == 0 && x.nsegs != nsegs) {
		snprintf(why, whylen, "%u segments, of which blobs use %u", nsegs, x.nsegs);
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0) {
		blobs_from_state(root, segs);
		rc = obj_set_tree(o, root, why, whylen);
	}
	if (rc != 0) {
		for (uint32_t i = 0; i < x.narena; i++)
			sh_st_arena_free(s, x.arena[i] >> 8, (int)(x.arena[i] & 0xff));
		for (uint32_t i = 0; i < made; i++) {
			sh_map_del(&s->segs, segs[i]->id);
			s->used -= segs[i]->charged;
			SH_DELETE(segs[i]);
		}
		if (x.arena)
			shoal_free(x.arena, x.cap_arena * 8);
		if (x.segs)
			shoal_free(x.segs, x.cap_segs * sizeof(st_seg *));
	} else {
		o->bytes = sh_node_bytes(root);
		o->segs = x.segs;
		o->nsegs = x.nsegs;
		o->cap_segs = x.cap_segs;
		o->arena = x.arena;
		o->narena = x.narena;
		o->cap_arena = x.cap_arena;
		for (uint32_t i = 0; i < x.nsegs; i++)
			x.segs[i]->owner = o;
	}
	sh_map_fini(&regions);
	if (segs)
		shoal_free(segs, nsegs * sizeof(*segs));
	return rc;
}

/* Serves such a tree as the persistent object id with signature sig: on
 * success *out is the object and the descriptors are the store's. For
 * objects that come from outside a connection: a state file read back, a
 * copy migrated from another host. */
int sh_store_adopt(shoal_store *s, uint64_t id, uint64_t sig, shoal_node *root, uint32_t nsegs,
		   const int *fds, const uint64_t *sizes, st_obj **out, char *why, size_t whylen)
{
	if (id == 0 || sh_map_get(&s->objs, id)) {
		snprintf(why, whylen, "object %016" PRIx64 " is here already", id);
		return SHOAL_EEXIST;
	}
	st_obj *o = SH_NEW(st_obj);
	if (!o || sh_map_put(&s->objs, id, o) != 0) {
		if (o)
			SH_DELETE(o);
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	int rc = obj_fill(s, o, root, nsegs, fds, sizes, why, whylen);
	if (rc) {
		sh_map_del(&s->objs, id);
		obj_shell_free(o);
		return rc;
	}
	o->id = id;
	o->sig = sig;
	o->persistent = true;
	o->last_get = shoal_now_ns();
	s->nobjs++;
	*out = o;
	return 0;
}

int sh_st_obj_load(shoal_store *s, st_obj *o, shoal_node *root, uint32_t nsegs, const int *fds,
		   const uint64_t *sizes, char *why, size_t whylen)
{
	SH_ASSERT(o->nsegs == 0 && o->narena == 0);
	if (o->meta)
		shoal_free(o->meta, o->meta_cap);
	o->meta = NULL;
	o->meta_len = o->meta_cap = 0;
	/* its type stays where it was: what a layer above holds of it */
	char *type = o->type;
	o->type = NULL;
	int rc = obj_fill(s, o, root, nsegs, fds, sizes, why, whylen);
	if (o->type)
		shoal_free(o->type, strlen(o->type) + 1);
	o->type = type;
	return rc;
}

void sh_st_obj_unload(shoal_store *s, st_obj *o)
{
	for (uint32_t i = 0; i < o->nsegs; i++)
		seg_release(s, o->segs[i], false); /* the spiller asks for its own */
	for (uint32_t i = 0; i < o->narena; i++)
		sh_st_arena_free(s, o->arena[i] >> 8, (int)(o->arena[i] & 0xff));
	if (o->segs)
		shoal_free(o->segs, o->cap_segs * sizeof(*o->segs));
	if (o->arena)
		shoal_free(o->arena, o->cap_arena * sizeof(*o->arena));
	o->segs = NULL;
	o->arena = NULL;
	o->nsegs = o->narena = o->cap_segs = o->cap_arena = 0;
}

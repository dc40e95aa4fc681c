/* The store server: the state of shoald and of an embedded store, and the
 * handling of every request (protocol in proto.h). One thread runs it, as
 * fibers over one poller: an accept fiber, per connection a request fiber
 * reading the request ring and a watcher that sees on the socket when the
 * client is gone, and a mail fiber. The threads of migrations, of peers'
 * transfers and of the registry touch none of the store's state: they
 * post what they finished to the mailbox (sh_store_post), whose fiber
 * runs it here; the spares' worker shares only its lists (spare.c). So
 * the mailbox's is the one lock taken here.
 *
 * Memory: blobs up to SH_STORE_INLINE_MAX arrive inside the seal request
 * and are copied into the arena, one memfd that only this process maps
 * writable and clients map read-only from a read-only descriptor. Larger
 * blobs live in segments: a memfd per builder region, written by its
 * creator, then sealed by us (write, grow, shrink, seal), which the kernel
 * refuses while any writable mapping exists, so after the seal nobody,
 * the creator included, can change a byte.
 *
 * Also here: the state directory's objects read back at start (state.c
 * keeps the files), and gets of objects that are elsewhere in the cluster
 * (the registry's, else the --peers-file stores'), fetched here as a
 * migration (migrate.c). */
#include "store/server.h"
#include "store/node.h"
#include "store/proto.h"
#include "store/pages.h"
#include "store/spare.h"
#include "store/state.h"
#include "shm/shm.h"
#include "ring/link.h"
#include "ring/msg.h"
#include "ring/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Every connection holds FDS_PER_CONN descriptors (its socket, two
 * doorbells' two ends, the write end of the client's fiber doorbell) and
 * every segment one, all within RLIMIT_NOFILE: a
 * client that made segments or connections until none was left would stop
 * the store from accepting anyone. Connections may use the whole budget,
 * segments all but what keeps FD_SPARE_CONNS connections possible. */
#define FDS_PER_CONN 6
#define FD_SPARE_CONNS 32

static uint64_t fds_held(const shoal_store *s)
{
	return s->nclients * FDS_PER_CONN + s->segs.n + (s->spares ? sh_spares_fds(s->spares) : 0);
}

/* ---- the arena ---- */

static int arena_class(uint64_t size)
{
	int c = 0;
	while ((1ull << (c + ARENA_MIN_CLASS)) < size)
		c++;
	return c;
}

static int arena_alloc(shoal_store *s, uint64_t size, uint64_t *off)
{
	int c = arena_class(size);
	uint64_t bytes = 1ull << (c + ARENA_MIN_CLASS);
	if (s->used + bytes > s->capacity)
		return SHOAL_ENOSPC;
	void *p = sh_ptrstack_pop(&s->arena_free[c]);
	if (p) {
		*off = (uint64_t)(uintptr_t)p - 1;
	} else {
		if (s->arena_bump + bytes > s->arena_size)
			return SHOAL_ENOSPC;
		*off = s->arena_bump;
		s->arena_bump += bytes;
	}
	s->used += bytes;
	return 0;
}

static void arena_free(shoal_store *s, uint64_t off, int c)
{
	s->used -= 1ull << (c + ARENA_MIN_CLASS);
	/* +1: offset 0 is a valid slot, NULL means empty */
	if (sh_ptrstack_push(&s->arena_free[c], (void *)(uintptr_t)(off + 1)) != 0)
		sh_warn("store", "arena: lost a %d-byte slot (out of memory)",
			1 << (c + ARENA_MIN_CLASS));
}

/* ---- segments and objects ---- */

static void seg_free(shoal_store *s, st_seg *g)
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
	if (big && !s->stopping)
		sh_spares_want(s->spares, g->size, s->capacity - s->used);
	SH_DELETE(g);
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

static void obj_free(shoal_store *s, st_obj *o)
{
	sh_st_name_unbind(s, o);
	if (o->creator)
		sh_map_del(&o->creator->created, o->id);
	for (uint32_t i = 0; i < o->nsegs; i++)
		seg_free(s, o->segs[i]);
	for (uint32_t i = 0; i < o->narena; i++)
		arena_free(s, o->arena[i] >> 8, (int)(o->arena[i] & 0xff));
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
		obj_free(s, o);
		return;
	}
	s->pending++;
}

void sh_st_obj_unref(shoal_store *s, st_obj *o, uint64_t n)
{
	SH_ASSERT(o->refs >= n);
	o->refs -= n;
	if (o->refs == 0 && o->deleted) {
		obj_free(s, o);
	}
}

/* ---- replies ---- */

/* How long a client may leave a reply, or descriptors, unread: one that
 * does not read holds its request's buffer, and its fiber, until then. */
#define REPLY_NS (10 * 1000000000LL)

static int send_frame(st_conn *c, sh_frame *f)
{
	int rc = sh_wbuf_frame_end(&c->out, f);
	if (rc == 0)
		rc = sh_msg_write(&c->l.down, c->out.p, c->out.len, shoal_deadline_in(REPLY_NS));
	if (rc == SHOAL_ETIMEDOUT)
		sh_warn("store", "client %u (pid %d): left a reply unread for %lld s; closing",
			c->id, (int)c->pid, REPLY_NS / 1000000000LL);
	return rc;
}

void sh_st_begin_reply(st_conn *c, msgpack_packer *pk)
{
	sh_wbuf_frame_begin(&c->out);
	sh_wbuf_packer(&c->out, pk);
}

/* Sends an error reply whose message says what was asked and what we had;
 * the message also goes to the debug log. */
int sh_st_reply_err(st_conn *c, const sh_frame *req, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sh_debug("store", "client %u: op %u failed: %s: %s", c->id, req->op, shoal_strerror(code),
		 msg);
	if (req->flags & SH_FRAME_NOREPLY)
		return 0;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 1);
	sh_mp_pack_cstr(&pk, msg);
	sh_frame f = {.op = req->op, .seq = req->seq, .status = code};
	return send_frame(c, &f);
}

int sh_st_reply_ok(st_conn *c, const sh_frame *req, msgpack_packer *pk_unused)
{
	(void)pk_unused;
	sh_frame f = {.op = req->op, .seq = req->seq};
	return send_frame(c, &f);
}

/* Sends the descriptors of segments to the client, SH_FD_MAX a message,
 * each message the count and the ids of what it carries. */
static int send_fds(st_conn *c, st_seg **g, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = n - i < SH_FD_MAX ? n - i : SH_FD_MAX;
		uint64_t msg[1 + SH_FD_MAX];
		int fds[SH_FD_MAX];
		msg[0] = k;
		for (size_t j = 0; j < k; j++) {
			msg[1 + j] = g[i + j]->id;
			fds[j] = g[i + j]->fd;
		}
		int rc;
		int64_t deadline = shoal_deadline_in(REPLY_NS);
		while ((rc = sh_fd_send(c->l.sock, msg, (1 + k) * 8, fds, (int)k)) == SHOAL_EAGAIN)
			if ((rc = shoal_fd_wait(c->l.sock, SHOAL_FD_OUT, deadline, NULL)) != 0) {
				if (rc == SHOAL_ETIMEDOUT)
					sh_warn("store",
						"client %u (pid %d): left descriptors unread for "
						"%lld s; closing",
						c->id, (int)c->pid, REPLY_NS / 1000000000LL);
				return rc;
			}
		if (rc)
			return rc;
		i += k;
	}
	return 0;
}

/* ---- request handlers ---- */

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
		if (!victim) /* local puts come first: copies on their way give way */
			return local && s->hooks.yield_room &&
			       s->hooks.yield_room(s->hooks.ctx, bytes);
		sh_debug("store", "copy %016" PRIx64 " (%" PRIu64 " bytes) evicted for room",
			 victim->id, victim->bytes);
		sh_st_obj_delete(s, victim);
	}
	return true;
}

static int no_space(st_conn *c, const sh_frame *req, uint64_t asked)
{
	shoal_store *s = c->srv;
	return sh_st_reply_err(c, req, SHOAL_ENOSPC,
			       "store full: asked %" PRIu64 " bytes, %" PRIu64 " of %" PRIu64
			       " free",
			       asked, s->capacity - s->used, s->capacity);
}

static int op_create(st_conn *c, const sh_frame *req, sh_mp *m)
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
	if (fds_held(s) + 1 + FD_SPARE_CONNS * FDS_PER_CONN > s->fd_budget)
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
		sh_spares_fit(s->spares, s->capacity - s->used - charged);
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
	if ((rc = send_fds(c, &g, 1)) != 0)
		return rc; /* the socket is broken: the connection ends */
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, g->id);
	return sh_st_reply_ok(c, req, &pk);
}

static void region_drop(st_conn *c, st_seg *g)
{
	sh_map_del(&c->regions, g->id);
	seg_free(c->srv, g);
}

static int op_abort(st_conn *c, const sh_frame *req, sh_mp *m)
{
	uint32_t n;
	uint64_t id;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_uint(m, &id) || sh_mp_done(m) || id == 0)
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "ABORT: expected [segment]");
	st_seg *g = sh_map_get(&c->regions, id);
	if (!g)
		return sh_st_reply_err(c, req, SHOAL_ENOENT, "ABORT: no unsealed segment %" PRIu64,
				       id);
	region_drop(c, g);
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
			int rc = arena_alloc(s, b->size ? b->size : 1, &off);
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
				arena_free(s, off, arena_class(b->size ? b->size : 1));
				return SHOAL_ENOMEM;
			}
			x->arena[x->narena++] =
				off << 8 | (uint64_t)arena_class(b->size ? b->size : 1);
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

/* The blobs of a stored tree (of object o), rewritten for a state file:
 * the arena's inline, a segment's [its index in o->segs + 1, ...]. */
static int blobs_for_state(shoal_store *s, const st_obj *o, shoal_node *n)
{
	for (uint32_t i = 0; i < n->nblobs; i++) {
		sh_blobref *b = &n->blobs[i];
		if (b->seg == 0) {
			b->inline_data = s->arena + b->off;
			continue;
		}
		uint32_t j = 0;
		while (j < o->nsegs && o->segs[j]->id != b->seg)
			j++;
		SH_ASSERT(j < o->nsegs); /* the store wrote this tree */
		b->seg = j + 1;
	}
	for (uint32_t i = 0; i < n->nmembers; i++) {
		int rc = blobs_for_state(s, o, n->members[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* Writes persistent object o, named name (or not), into the state
 * directory: its tree with the arena's blobs inline and its segments
 * numbered in the order of o->segs (state.h). */
int sh_st_persist_obj(shoal_store *s, st_obj *o, const char *name, size_t name_len, char *why,
		      size_t whylen)
{
	sh_bump a = {0};
	shoal_node *root;
	sh_mp m;
	sh_mp_init(&m, o->meta, o->meta_len);
	int rc = sh_node_decode(&m, &a, &root, why, whylen);
	int *fds = o->nsegs ? shoal_alloc(o->nsegs * sizeof(int)) : NULL;
	uint64_t *sizes = o->nsegs ? shoal_alloc(o->nsegs * sizeof(uint64_t)) : NULL;
	if (rc == 0 && o->nsegs && (!fds || !sizes))
		rc = SHOAL_ENOMEM;
	if (rc == 0)
		rc = blobs_for_state(s, o, root);
	sh_wbuf w;
	sh_wbuf_init(&w);
	if (rc == 0) {
		msgpack_packer pk;
		sh_wbuf_packer(&w, &pk);
		msgpack_pack_array(&pk, 2);
		if (name) {
			msgpack_pack_str(&pk, name_len);
			msgpack_pack_str_body(&pk, name, name_len);
		} else
			msgpack_pack_nil(&pk);
		sh_node_pack(&pk, root);
		if (w.err)
			rc = SHOAL_ENOMEM;
	}
	if (rc == 0) {
		for (uint32_t i = 0; i < o->nsegs; i++) {
			fds[i] = o->segs[i]->fd;
			sizes[i] = o->segs[i]->size;
		}
		sh_state_rec r = {.id = o->id,
				  .sig = o->sig,
				  .meta = w.p,
				  .meta_len = w.len,
				  .nsegs = o->nsegs,
				  .seg_fds = fds,
				  .seg_sizes = sizes};
		rc = sh_state_write(s->state, &r, why, whylen);
		o->gen = r.gen;
	} else if (rc == SHOAL_ENOMEM) {
		snprintf(why, whylen, "out of memory writing object %016" PRIx64 " to the state",
			 o->id);
	}
	sh_wbuf_fini(&w);
	sh_bump_fini(&a);
	if (fds)
		shoal_free(fds, o->nsegs * sizeof(int));
	if (sizes)
		shoal_free(sizes, o->nsegs * sizeof(uint64_t));
	return rc;
}

/* A call of the cluster's registry, waited for in this request's fiber. */
/* The digest of o's tree (sh_node_digest), for the registry's record. */
/* Names (or, with drop, lets go of) o's name in the cluster (the hooks'
 * global names): o is held meanwhile, so that a delete by another client
 * cannot free it under us. */
int sh_st_name_global(shoal_store *s, st_obj *o, const char *name, size_t nl, bool drop,
		      bool replace, char *why, size_t whylen)
{
	sh_bump a = {0};
	shoal_node *root = NULL;
	int rc = drop ? 0 : sh_store_tree(o, &a, &root, why, whylen);
	if (rc == 0) {
		o->refs++;
		rc = s->hooks.name(s->hooks.ctx, drop, name, nl, o->id, root, replace, why, whylen);
		sh_st_obj_unref(s, o, 1);
	}
	sh_bump_fini(&a);
	return rc;
}

static int op_seal(st_conn *c, const sh_frame *req, sh_mp *m)
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
			arena_free(s, x.arena[i] >> 8, (int)(x.arena[i] & 0xff));
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
		s->nobjs++; /* obj_free counts it down */
		obj_free(s, o);
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "SEAL: out of memory");
	}
	s->nobjs++;
	o->persistent = flags & SHOAL_PERSIST;
	o->creator = o->persistent ? NULL : owner;
	/* Written before the old object of the name goes: a stop between the
	 * two leaves both files, and the newer wins at the next start. */
	if (o->persistent && s->state &&
	    (rc = sh_st_persist_obj(s, o, name, name_len, why, sizeof(c->why))) != 0) {
		obj_free(s, o);
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
	/* The next put is likely of this size: its spare is made now that
	 * this one's copy is done (not during it, which it would slow). */
	for (uint32_t i = 0; s->spares && i < o->nsegs; i++)
		sh_spares_want(s->spares, o->segs[i]->size, s->capacity - s->used);
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, o->id);
	msgpack_pack_uint64(&pk, o->sig);
	return sh_st_reply_ok(c, req, &pk);
}

/* Whether restricted c may read o (write: delete it): its own always; to
 * read, also what its grantor holds or made. */
static bool restricted_may(st_conn *c, const st_obj *o, bool write)
{
	if (sh_map_get(&c->created, o->id) || (!write && sh_map_get(&c->refs, o->id)))
		return true;
	st_conn *g = write ? NULL : sh_map_get(&c->srv->claims, c->grant);
	return g && (sh_map_get(&g->refs, o->id) || sh_map_get(&g->created, o->id));
}

static int restricted_refuse(st_conn *c, const sh_frame *req, const char *what)
{
	return sh_st_reply_err(c, req, SHOAL_EPERM,
			       "%s: this connection is restricted (a strict extension's): it reads "
			       "only what its host holds and its own objects, and deletes only its "
			       "own",
			       what);
}

/* An object by [id | name] (GET, DELETE), or with flags by [id | name,
 * flags] too. */
int sh_st_lookup_flags(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, uint64_t *flags,
		       st_obj **out)
{
	shoal_store *s = c->srv;
	uint32_t n;
	if (flags)
		*flags = 0;
	if (sh_mp_array(m, &n) || (n != 1 && !(flags && n == 2)))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "%s: expected [id or name%s]", what,
				       flags ? "] or [id or name, flags" : "");
	const char *name = NULL;
	uint32_t len = 0;
	uint64_t id = 0;
	if (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &len) : sh_mp_uint(m, &id))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "%s: expected [id or name]", what);
	if ((n == 2 && (sh_mp_uint(m, flags) || (*flags & ~(uint64_t)SH_GET_LOCAL))) ||
	    sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "%s: trailing bytes, or flags other than LOCAL", what);
	if (name) {
		if (!(*out = sh_st_name_find(s, name, len)))
			return sh_st_reply_err(c, req, SHOAL_ENOENT, "%s: no object named \"%.*s\"",
					       what, (int)(len > 200 ? 200 : len), name);
		return 0;
	}
	st_obj *o = id ? sh_map_get(&s->objs, id) : NULL;
	if (!o || o->deleted)
		return sh_st_reply_err(c, req, SHOAL_ENOENT, "%s: no object %016" PRIx64 "%s", what,
				       id, o ? " (deleted)" : "");
	*out = o;
	return 0;
}

int sh_st_lookup(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, st_obj **out)
{
	return sh_st_lookup_flags(c, req, m, what, NULL, out);
}

/* A GET with SH_GET_LOCAL of what is not here, or of a copy the registry
 * named: where the cluster has it, said in the error; nothing fetched.
 * *replied false: the lookup answers (here, nowhere, or a copy that still
 * has the name or serves while the registry cannot be asked). */
static int get_local_only(st_conn *c, const sh_frame *req, const char *name, uint32_t nl,
			  uint64_t id, st_obj *here, bool *replied)
{
	*replied = false;
	shoal_store *s = c->srv;
	bool cached = here && here->name_cached;
	if ((here && !cached) || !s->hooks.locate)
		return 0;
	uint64_t got = 0;
	char where[256] = "";
	int rc = s->hooks.locate(s->hooks.ctx, name, nl, id, &got, where, sizeof(where), c->why,
				 sizeof(c->why));
	if (cached) {
		/* the wait let others in: the name's copy is looked for again */
		here = sh_st_name_find(s, name, nl);
		if (!here || !here->name_cached)
			return 0;
		if ((rc == 0 && got == here->id) || (rc && rc != SHOAL_ENOENT))
			return 0;	    /* still this copy's, or the registry away: it serves */
		sh_st_name_unbind(s, here); /* no longer what the cluster calls so */
	}
	if (rc == SHOAL_ENOENT)
		return 0;
	*replied = true;
	int nlen = name ? (int)(nl > 200 ? 200 : nl) : 0;
	if (rc)
		return sh_st_reply_err(c, req, rc,
				       "GET: %s%.*s%s is not in this store, and the cluster could "
				       "not be asked where it is: %s",
				       name ? "\"" : "", nlen, name ? name : "", name ? "\"" : "",
				       c->why);
	if (name)
		return sh_st_reply_err(
			c, req, SHOAL_ENOENT,
			"GET: \"%.*s\" is object %016" PRIx64 " in the store at %s, "
			"not in this one: get it with fetch (a copy into this store)",
			nlen, name, got, where);
	return sh_st_reply_err(c, req, SHOAL_ENOENT,
			       "GET: object %016" PRIx64 " is in the store at %s, not in this one: "
			       "get it with fetch (a copy into this store)",
			       id, where);
}

static int op_get(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	st_obj *o = NULL;
	if (s->hooks.fetch_missing && !s->stopping && !c->restricted) {
		/* not here: from the cluster first, then as any get */
		sh_mp k = *m;
		uint32_t n, nl = 0;
		const char *name = NULL;
		uint64_t id = 0, flags = 0;
		if (!sh_mp_array(&k, &n) && (n == 1 || n == 2) &&
		    (sh_mp_kind(&k) == SH_MP_STR ? !sh_mp_str(&k, &name, &nl) && nl
						 : !sh_mp_uint(&k, &id) && id) &&
		    (n == 1 || !sh_mp_uint(&k, &flags))) {
			st_obj *here =
				name ? sh_st_name_find(s, name, nl) : sh_map_get(&s->objs, id);
			if (flags & SH_GET_LOCAL) {
				bool replied;
				int rc = get_local_only(c, req, name, nl, id,
							here && !here->deleted ? here : NULL,
							&replied);
				if (replied)
					return rc;
				goto lookup;
			}
			/* a name the registry gave a copy here may have been bound
			 * again to another object since, or dropped: asked again */
			bool cached = here && !here->deleted && here->name_cached;
			if (!here || here->deleted || cached) {
				int rc = s->hooks.fetch(s->hooks.ctx, c, name, nl, id, c->why,
							sizeof(c->why));
				if (cached && rc == SHOAL_ENOENT &&
				    (here = sh_st_name_find(s, name, nl)) && here->name_cached)
					sh_st_name_unbind(s, here); /* no longer the cluster's */
				else if (rc && rc != SHOAL_ENOENT && !cached)
					return sh_st_reply_err(c, req, rc, "GET: %s", c->why);
				/* cached, the registry away: the copy here serves */
			}
		}
	}
lookup:;
	uint64_t flags;
	int rc = sh_st_lookup_flags(c, req, m, "GET", &flags, &o);
	if (!o)
		return rc;
	if (c->restricted && !restricted_may(c, o, false))
		return restricted_refuse(c, req, "GET");
	uintptr_t held = (uintptr_t)sh_map_get(&c->refs, o->id);
	if (sh_map_put(&c->refs, o->id, (void *)(held + 1)) != 0)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "GET: out of memory");
	o->refs++;
	o->last_get = shoal_now_ns();
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint64(&pk, o->id);
	msgpack_pack_uint64(&pk, o->sig);
	uint32_t nnew = 0;
	for (uint32_t i = 0; i < o->nsegs; i++)
		nnew += !sh_map_get(&c->sent, o->segs[i]->id);
	/* The reply goes first, then the descriptors it lists: the client
	 * reads them after the reply, so an object of thousands of segments
	 * cannot fill the socket while the client still waits on the ring. */
	st_seg **fresh = nnew ? shoal_alloc(nnew * sizeof(*fresh)) : NULL;
	if (nnew && !fresh)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "GET: out of memory");
	size_t nfresh = 0;
	msgpack_pack_array(&pk, nnew);
	for (uint32_t i = 0; i < o->nsegs; i++) {
		st_seg *g = o->segs[i];
		if (sh_map_get(&c->sent, g->id))
			continue;
		if (sh_map_put(&c->sent, g->id, (void *)1) != 0)
			rc = SHOAL_ENOMEM;
		msgpack_pack_array(&pk, 2);
		msgpack_pack_uint64(&pk, g->id);
		msgpack_pack_uint64(&pk, g->size);
		fresh[nfresh++] = g;
	}
	if (rc == 0) {
		sh_wbuf_append(&c->out, o->meta, o->meta_len);
		rc = sh_st_reply_ok(c, req, &pk);
	}
	if (rc == 0 && nfresh)
		rc = send_fds(c, fresh, nfresh);
	if (fresh)
		shoal_free(fresh, nnew * sizeof(*fresh));
	return rc; /* not 0: the socket, the ring or our memory failed: the connection ends */
}

static int op_release(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n, k;
	if (sh_mp_array(m, &n) || n != 2 || sh_mp_array(m, &k))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "RELEASE: expected [[id...], [segment...]]");
	for (uint32_t i = 0; i < k; i++) {
		uint64_t id;
		if (sh_mp_uint(m, &id) || id == 0)
			return sh_st_reply_err(c, req, SHOAL_EBADMSG,
					       "RELEASE: ids must be nonzero");
		uintptr_t held = (uintptr_t)sh_map_get(&c->refs, id);
		if (!held)
			return sh_st_reply_err(c, req, SHOAL_EINVAL,
					       "RELEASE: object %016" PRIx64 " is not held", id);
		if (held == 1)
			sh_map_del(&c->refs, id);
		else
			sh_map_put(&c->refs, id, (void *)(held - 1)); /* replaces: cannot fail */
		sh_st_obj_unref(s, sh_map_get(&s->objs, id), 1);
	}
	if (sh_mp_array(m, &k))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "RELEASE: segments must be an array");
	for (uint32_t i = 0; i < k; i++) {
		uint64_t id;
		if (sh_mp_uint(m, &id) || id == 0)
			return sh_st_reply_err(c, req, SHOAL_EBADMSG,
					       "RELEASE: segments must be nonzero");
		sh_map_del(&c->sent, id);
	}
	if (sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "RELEASE: trailing bytes");
	if (req->flags & SH_FRAME_NOREPLY)
		return 0;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

static int op_delete(st_conn *c, const sh_frame *req, sh_mp *m)
{
	st_obj *o = NULL;
	int rc = sh_st_lookup(c, req, m, "DELETE", &o);
	if (!o)
		return rc;
	if (c->restricted && !restricted_may(c, o, true))
		return restricted_refuse(c, req, "DELETE");
	shoal_store *s = c->srv;
	if (o->global && o->name && s->hooks.global_names) {
		/* the cluster's name goes first: while etcd is away, the
		 * object stays, named here and there alike */
		uint64_t id = o->id;
		if ((rc = sh_st_name_global(s, o, o->name, strlen(o->name), true, false, c->why,
					    sizeof(c->why))) != 0)
			return sh_st_reply_err(c, req, rc, "DELETE: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted) /* gone meanwhile */
			o = NULL;
	}
	if (o)
		sh_st_obj_delete(s, o);
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

static int op_persist(st_conn *c, const sh_frame *req, sh_mp *m)
{
	st_obj *o = NULL;
	int rc = sh_st_lookup(c, req, m, "PERSIST", &o);
	if (!o)
		return rc;
	shoal_store *s = c->srv;
	if (!o->persistent && o->name && s->hooks.global_names && !o->global) {
		uint64_t id = o->id;
		if ((rc = sh_st_name_global(s, o, o->name, strlen(o->name), false, false, c->why,
					    sizeof(c->why))) != 0)
			return sh_st_reply_err(c, req, rc, "PERSIST: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted)
			return sh_st_reply_err(
				c, req, SHOAL_ENOENT,
				"PERSIST: object %016" PRIx64 " was deleted meanwhile", id);
		o->global = true;
	}
	if (!o->persistent && s->state &&
	    (rc = sh_st_persist_obj(s, o, o->name, o->name ? strlen(o->name) : 0, c->why,
				    sizeof(c->why))) != 0)
		return sh_st_reply_err(c, req, rc, "PERSIST: %s", c->why);
	o->persistent = true;
	if (o->creator) {
		sh_map_del(&o->creator->created, o->id);
		o->creator = NULL;
	}
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

/* CLAIM []: a fresh owner token for this connection, which others name
 * when they seal objects for it (its results, say): those go when it
 * does, whoever made them. */
static int op_claim(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n;
	if (sh_mp_array(m, &n) || n != 0 || sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "CLAIM: expected []");
	if (!c->claim) {
		uint64_t t = 0;
		while (t == 0 || sh_map_get(&s->claims, t))
			if (getrandom(&t, sizeof(t), 0) != sizeof(t))
				return sh_st_reply_err(c, req, SHOAL_EIO, "CLAIM: no random bytes");
		if (sh_map_put(&s->claims, t, c) != 0)
			return sh_st_reply_err(c, req, SHOAL_ENOMEM, "CLAIM: out of memory");
		c->claim = t;
	}
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, c->claim);
	return sh_st_reply_ok(c, req, &pk);
}

/* RESTRICT [grant]: this connection is restricted from now on (a strict
 * extension's runner makes its connection so, naming its host's): see
 * st_conn. Once only. */
static int op_restrict(st_conn *c, const sh_frame *req, sh_mp *m)
{
	uint32_t n;
	uint64_t grant;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_uint(m, &grant) || grant == 0 || sh_mp_done(m))
		return sh_st_reply_err(
			c, req, SHOAL_EBADMSG,
			"RESTRICT: expected [grant] (another connection's CLAIM token)");
	if (!sh_map_get(&c->srv->claims, grant) || grant == c->claim)
		return sh_st_reply_err(c, req, SHOAL_ENOENT,
				       "RESTRICT: no other connection claims %016" PRIx64, grant);
	c->restricted = true;
	c->grant = grant;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

static int cmp_obj_name(const void *a, const void *b)
{
	return strcmp((*(st_obj *const *)a)->name, (*(st_obj *const *)b)->name);
}

static int op_list(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n, plen, alen = 0;
	const char *prefix, *after = NULL;
	uint64_t max;
	if (sh_mp_array(m, &n) || n != 3 || sh_mp_str(m, &prefix, &plen) ||
	    (!sh_mp_take_nil(m) && sh_mp_str(m, &after, &alen)) || sh_mp_uint(m, &max) ||
	    sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "LIST: expected [prefix, after, max]");
	if (max == 0 || max > SH_STORE_LIST_MAX)
		max = SH_STORE_LIST_MAX;
	char aftbuf[SH_NODE_MAX_NAME + 1], *aft = NULL;
	if (after) {
		if (alen > SH_NODE_MAX_NAME)
			return sh_st_reply_err(c, req, SHOAL_EBADMSG, "LIST: after is too long");
		memcpy(aftbuf, after, alen);
		aftbuf[alen] = 0;
		aft = aftbuf;
	}
	st_obj **v = s->nnames ? shoal_alloc(s->nnames * sizeof(*v)) : NULL;
	if (s->nnames && !v)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "LIST: out of memory");
	size_t k = 0, it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&s->names, &it, &key, &val))
		for (st_obj *o = val; o; o = o->name_next)
			if (strncmp(o->name, prefix, plen) == 0 &&
			    (!aft || strcmp(o->name, aft) > 0) && k < s->nnames)
				v[k++] = o;
	qsort(v, k, sizeof(*v), cmp_obj_name);
	/* As many as fit one reply (names are up to 4 KiB each). */
	size_t out = 0, bytes = 64;
	while (out < k && out < max &&
	       (bytes += strlen(v[out]->name) + strlen(v[out]->type) + 40) < SH_STORE_REPLY_MAX)
		out++;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_array(&pk, out);
	for (size_t i = 0; i < out; i++) {
		msgpack_pack_array(&pk, 4);
		sh_mp_pack_cstr(&pk, v[i]->name);
		msgpack_pack_uint64(&pk, v[i]->id);
		sh_mp_pack_cstr(&pk, v[i]->type);
		msgpack_pack_uint64(&pk, v[i]->bytes);
	}
	k > out ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
	if (v)
		shoal_free(v, s->nnames * sizeof(*v));
	return sh_st_reply_ok(c, req, &pk);
}

static int op_stat(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n;
	if (sh_mp_array(m, &n) || n != 0 || sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "STAT: expected []");
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	shoal_store_stat st = {0}; /* the layer above's figures */
	if (s->hooks.stat)
		s->hooks.stat(s->hooks.ctx, &st);
	msgpack_pack_array(&pk, 19);
	msgpack_pack_uint64(&pk, s->capacity);
	msgpack_pack_uint64(&pk, s->used);
	msgpack_pack_uint64(&pk, s->nobjs);
	msgpack_pack_uint64(&pk, s->nnames);
	msgpack_pack_uint64(&pk, s->nclients);
	msgpack_pack_uint64(&pk, s->pending);
	msgpack_pack_uint64(&pk, st.sent);
	msgpack_pack_uint64(&pk, st.sent_bytes);
	msgpack_pack_uint64(&pk, st.fetched);
	msgpack_pack_uint64(&pk, st.fetched_bytes);
	msgpack_pack_uint64(&pk, st.migrating);
	msgpack_pack_uint64(&pk, st.peers);
	msgpack_pack_uint64(&pk, st.registry);
	msgpack_pack_uint64(&pk, st.incoming_bytes);
	msgpack_pack_uint64(&pk, st.incoming_total);
	msgpack_pack_uint64(&pk, st.incoming_rate);
	msgpack_pack_uint64(&pk, s->spares ? sh_spares_ready_bytes(s->spares) : 0);
	msgpack_pack_uint64(&pk, (uint64_t)s->pages.kind);
	size_t wl = strlen(s->pages.why);
	msgpack_pack_str(&pk, wl);
	msgpack_pack_str_body(&pk, s->pages.why, wl);
	return sh_st_reply_ok(c, req, &pk);
}

/* What the layer above handles (MIGRATE, MIGWAIT): the hooks' request. */
static int op_above(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	if (!s->hooks.request)
		return sh_st_reply_err(c, req, SHOAL_ENOSYS,
				       "op %u: this store copies nothing from other stores (it "
				       "was opened without the cluster's layer)",
				       req->op);
	return s->hooks.request(s->hooks.ctx, c, req, m);
}

typedef int (*op_fn)(st_conn *c, const sh_frame *req, sh_mp *m);
static const op_fn ops[SH_OP_MAX_] = {
	[SH_OP_CREATE] = op_create,	[SH_OP_SEAL] = op_seal,	      [SH_OP_ABORT] = op_abort,
	[SH_OP_GET] = op_get,		[SH_OP_RELEASE] = op_release, [SH_OP_DELETE] = op_delete,
	[SH_OP_PERSIST] = op_persist,	[SH_OP_LIST] = op_list,	      [SH_OP_STAT] = op_stat,
	[SH_OP_CLAIM] = op_claim,	[SH_OP_MIGRATE] = op_above,   [SH_OP_MIGWAIT] = op_above,
	[SH_OP_RESTRICT] = op_restrict, [SH_OP_NAME] = sh_st_op_name,
};

/* Handles one request record. A nonzero return ends the connection: only
 * for failures of the transport itself, never for a bad request, which
 * gets an error reply. */
static int handle(st_conn *c, size_t len)
{
	sh_frame f;
	char why[160];
	if (sh_frame_decode(c->in, len, &f, why, sizeof(why)) != 0) {
		/* Answer what we could read of the header, so a client waiting
		 * on that sequence number learns why. */
		sh_frame g = {0};
		if (len >= 16)
			memcpy(&g.seq, c->in + 12, 4);
		return sh_st_reply_err(c, &g, SHOAL_EBADMSG, "%s", why);
	}
	if (f.status != 0)
		return sh_st_reply_err(c, &f, SHOAL_EBADMSG, "request with status %d, expected 0",
				       f.status);
	if (f.oob) {
		/* Bytes would follow that we cannot read as requests: the
		 * connection is out of step, so it ends. */
		sh_st_reply_err(c, &f, SHOAL_EBADMSG,
				"out-of-band bytes, which store requests never have");
		return SHOAL_EPROTO;
	}
	if (f.op == 0 || f.op >= SH_OP_MAX_ || !ops[f.op])
		return sh_st_reply_err(c, &f, SHOAL_EBADMSG, "unknown op %u, expected 1 to %d",
				       f.op, SH_OP_MAX_ - 1);
	/* a restricted connection asks only what a strict extension needs */
	static const char *const refused[SH_OP_MAX_] = {
		[SH_OP_PERSIST] = "PERSIST",   [SH_OP_LIST] = "LIST",
		[SH_OP_MIGRATE] = "MIGRATE",   [SH_OP_MIGWAIT] = "MIGWAIT",
		[SH_OP_RESTRICT] = "RESTRICT", [SH_OP_NAME] = "NAME",
	};
	if (c->restricted && refused[f.op])
		return sh_st_reply_err(c, &f, SHOAL_EPERM,
				       "%s: this connection is restricted (a strict extension's): "
				       "it may not list, persist, name, migrate or restrict again",
				       refused[f.op]);
	sh_mp m;
	sh_mp_init(&m, c->in + SH_FRAME_HDR, f.body_len);
	return ops[f.op](c, &f, &m);
}

/* ---- connections ---- */

/* Waits for the client's end of the socket to close (or to send anything:
 * after set-up it has nothing to say), then closes the rings, which wakes
 * the request fiber wherever it waits. */
static void *watch_main(void *arg)
{
	st_conn *c = arg;
	for (;;) {
		char b;
		ssize_t n = recv(c->l.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n >= 0 || (errno != EAGAIN && errno != EINTR))
			break;
		if (shoal_fd_wait(c->l.sock, SHOAL_FD_IN, SHOAL_FOREVER, NULL) == SHOAL_ECANCELED)
			return NULL;
	}
	c->watcher_done = true;
	sh_ring_close(&c->l.up);
	sh_ring_close(&c->l.down);
	return NULL;
}

/* Everything the connection held goes: references, unsealed regions,
 * transient objects. */
static void conn_drop(st_conn *c)
{
	shoal_store *s = c->srv;
	size_t it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&c->refs, &it, &key, &val))
		sh_st_obj_unref(s, sh_map_get(&s->objs, key), (uintptr_t)val);
	sh_map_fini(&c->refs);
	if (c->claim)
		sh_map_del(&s->claims, c->claim);
	/* Deleting changes c->created (obj_delete removes the entry): collect
	 * first. */
	while (c->created.n) {
		it = 0;
		if (!sh_map_next(&c->created, &it, &key, &val))
			break;
		sh_st_obj_delete(s, val);
	}
	sh_map_fini(&c->created);
	while (c->regions.n) {
		it = 0;
		if (!sh_map_next(&c->regions, &it, &key, &val))
			break;
		region_drop(c, val);
	}
	sh_map_fini(&c->regions);
	sh_map_fini(&c->sent);
}

static void conn_free(st_conn *c)
{
	shoal_store *s = c->srv;
	if (c->prev)
		c->prev->next = c->next;
	else if (s->conns == c)
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	sh_link_fini(&c->l);
	sh_wbuf_fini(&c->out);
	if (c->in)
		shoal_free(c->in, c->in_cap);
	s->nclients--;
	SH_DELETE(c);
}

/* Set-up: HELLO in, rings + doorbell + arena out. */
static int conn_setup(st_conn *c)
{
	shoal_store *s = c->srv;
	uint32_t proto, version;
	int rc = sh_link_hello(&c->l, &proto, &version);
	if (rc == SHOAL_EPROTO ||
	    (rc == 0 && (proto != SH_STORE_PROTO || version != SH_STORE_VERSION))) {
		sh_warn("store",
			"client pid %d: a hello of another protocol or version (%u, %u); expected "
			"(%u, %u)",
			(int)c->pid, rc ? 0 : proto, rc ? 0 : version, SH_STORE_PROTO,
			SH_STORE_VERSION);
		return SHOAL_EPROTO;
	}
	if (rc)
		return rc;
	uint64_t info[4] = {SH_STORE_VERSION, s->arena_size, c->id, s->instance};
	rc = sh_link_accept(&c->l, SH_STORE_RING_CAP, info, 4, &s->arena_ro_fd, 1);
	c->l.up.spin_ns = 100000;
	return rc;
}

/* Request buffers are memory outside --size: a request larger than
 * REQ_FREE_MAX is read only once the store's budget for such requests has
 * room for it, and the rest of any request must arrive within REQ_READ_NS,
 * so clients that stall mid-request hold at most REQ_BUDGET between them
 * (and REQ_FREE_MAX each). */
#define REQ_FREE_MAX ((size_t)256 << 10)
#define REQ_BUDGET ((size_t)128 << 20)
#define REQ_READ_NS (10 * 1000000000LL)

static int budget_take(st_conn *c, size_t bytes)
{
	shoal_store *s = c->srv;
	int64_t deadline = shoal_deadline_in(REQ_READ_NS);
	while (s->req_used + bytes > REQ_BUDGET) {
		if (shoal_now_ns() >= deadline) {
			sh_warn("store",
				"client %u (pid %d): a request of %zu bytes found no room for "
				"%lld s (%zu of %zu bytes of request buffers in use); closing",
				c->id, (int)c->pid, bytes, REQ_READ_NS / 1000000000LL, s->req_used,
				REQ_BUDGET);
			return SHOAL_EBUSY;
		}
		if (shoal_sleep_until(shoal_deadline_in(1000000)) == SHOAL_ECANCELED)
			return SHOAL_ECANCELED;
	}
	s->req_used += bytes;
	return 0;
}

/* The next request, whole, into c->in; *charged is what it took of the
 * budget. */
static int read_request(st_conn *c, size_t *len, size_t *charged)
{
	size_t total, got = 0, max = SH_STORE_REPLY_MAX + 4096;
	*charged = 0;
	int rc = sh_msg_peek_total(&c->l.up, &total, SHOAL_FOREVER);
	if (rc)
		return rc;
	if (total > REQ_FREE_MAX && total <= max) {
		if ((rc = budget_take(c, total)) != 0)
			return rc;
		*charged = max = total;
	} else if (total <= REQ_FREE_MAX) {
		max = REQ_FREE_MAX;
	}
	/* The whole request, copied out of the ring (the client can still
	 * write there while we read), bounded in size and in time. */
	rc = sh_msg_read_part(&c->l.up, &c->in, &c->in_cap, &got, len, max,
			      shoal_deadline_in(REQ_READ_NS));
	if (rc == SHOAL_ETIMEDOUT)
		sh_warn("store",
			"client %u (pid %d): %zu of a %zu-byte request came in %lld s; closing",
			c->id, (int)c->pid, got, *len, REQ_READ_NS / 1000000000LL);
	return rc;
}

static void *conn_main(void *arg)
{
	st_conn *c = arg;
	int rc = conn_setup(c);
	if (rc == 0)
		rc = shoal_spawn(&c->watcher, watch_main, c,
				 &(shoal_fiber_opts){.name = "store-watch"});
	while (rc == 0) {
		size_t len, charged;
		rc = read_request(c, &len, &charged);
		if (rc == 0)
			rc = handle(c, len);
		c->srv->req_used -= charged;
		/* Buffers of big requests and replies are not kept: idle
		 * connections would hold them outside --size. */
		if (c->in_cap > REQ_FREE_MAX) {
			shoal_free(c->in, c->in_cap);
			c->in = NULL;
			c->in_cap = 0;
		}
		if (c->out.cap > REQ_FREE_MAX)
			sh_wbuf_fini(&c->out);
	}
	if (rc != SHOAL_ECLOSED && rc != SHOAL_ECANCELED)
		sh_warn("store", "client %u (pid %d): connection ends: %s", c->id, (int)c->pid,
			shoal_strerror(rc));
	if (c->l.mem)
		sh_ring_close(&c->l.down);
	if (c->watcher) {
		shoal_cancel(c->watcher);
		shoal_join(c->watcher, NULL);
	}
	conn_drop(c);
	sh_debug("store", "client %u (pid %d) gone", c->id, (int)c->pid);
	conn_free(c);
	return NULL;
}

static void *accept_main(void *arg)
{
	shoal_store *s = arg;
	for (;;) {
		int fd = accept4(s->lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) {
				if (shoal_fd_wait(s->lsock, SHOAL_FD_IN, SHOAL_FOREVER, NULL) ==
				    SHOAL_ECANCELED)
					return NULL;
				continue;
			}
			if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
				sh_warn("store", "accept: %s; retrying in 100 ms", strerror(errno));
				if (shoal_sleep_until(shoal_deadline_in(100000000)) ==
				    SHOAL_ECANCELED)
					return NULL;
				continue;
			}
			sh_error("store", "accept: %s", strerror(errno));
			return NULL;
		}
		shoal_yield(); /* a flood of connects must not crowd out the rest (tcp.c) */
		pid_t pid = 0;
		st_conn *c = NULL;
		if (fds_held(s) + FDS_PER_CONN > s->fd_budget) {
			sh_warn("store",
				"refused a connection: %" PRIu64 " clients and %zu segments hold "
				"%" PRIu64 " of the %" PRIu64 " descriptors the store may use",
				s->nclients, (size_t)s->segs.n, fds_held(s), s->fd_budget);
			close(fd);
			continue;
		}
		if (!sh_link_peer_allowed(fd, s->opts.group, "store", &pid) ||
		    !(c = SH_NEW(st_conn))) {
			close(fd);
			continue;
		}
		c->srv = s;
		sh_link_init(&c->l, fd);
		c->pid = pid;
		c->id = ++s->next_client;
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->nclients++;
		sh_wbuf_init(&c->out);
		if (shoal_spawn(NULL, conn_main, c,
				&(shoal_fiber_opts){.name = "store-conn", .detached = 1}) != 0) {
			sh_warn("store", "refused pid %d: out of memory", (int)pid);
			conn_free(c);
		}
	}
}

/* ---- the server thread ---- */

void sh_store_post(shoal_store *s, sh_st_mail *m)
{
	m->next = NULL;
	pthread_mutex_lock(&s->mail_mu);
	if (s->mail_tail)
		s->mail_tail->next = m;
	else
		s->mail_head = m;
	s->mail_tail = m;
	pthread_mutex_unlock(&s->mail_mu);
	sh_eventfd_signal(s->mail_efd);
}

/* Runs what other threads posted, in the order they posted it. */
static void *mail_main(void *arg)
{
	shoal_store *s = arg;
	for (;;) {
		uint64_t v;
		if (read(s->mail_efd, &v, 8) != 8) {
			if (shoal_fd_wait(s->mail_efd, SHOAL_FD_IN, SHOAL_FOREVER, NULL) ==
			    SHOAL_ECANCELED)
				return NULL;
			continue;
		}
		pthread_mutex_lock(&s->mail_mu);
		sh_st_mail *m = s->mail_head;
		s->mail_head = s->mail_tail = NULL;
		pthread_mutex_unlock(&s->mail_mu);
		while (m) {
			sh_st_mail *next = m->next;
			m->fn(s, m);
			m = next;
		}
	}
}

static void *server_thread(void *arg)
{
	shoal_store *s = arg;
	shoal_sched *sched;
	int rc = shoal_sched_create(&sched, NULL);
	if (rc) {
		sh_error("store", "scheduler: %s", shoal_strerror(rc));
		return NULL;
	}
	shoal_fiber *acc = NULL, *mail = NULL;
	if ((rc = shoal_spawn(&acc, accept_main, s, &(shoal_fiber_opts){.name = "store-accept"})))
		sh_error("store", "accept fiber: %s", shoal_strerror(rc));
	if (rc == 0 &&
	    (rc = shoal_spawn(&mail, mail_main, s, &(shoal_fiber_opts){.name = "store-mail"})))
		sh_error("store", "mail fiber: %s", shoal_strerror(rc));
	if (rc == 0 && s->hooks.serve && (rc = s->hooks.serve(s->hooks.ctx)) != 0)
		sh_error("store", "what extends the store: %s", shoal_strerror(rc));
	/* Until shoal_store_close rings stop_efd. */
	while (rc == 0) {
		uint64_t v;
		if (read(s->stop_efd, &v, 8) == 8)
			break;
		shoal_fd_wait(s->stop_efd, SHOAL_FD_IN, SHOAL_FOREVER, NULL);
	}
	s->stopping = true;
	if (acc) {
		shoal_cancel(acc);
		shoal_join(acc, NULL);
	}
	/* what extends the store ends first (the registry's and transfers'
	 * threads), and then the connections (whose requests may wait on
	 * them): all post to the mail fiber, which goes last */
	if (s->hooks.stop)
		s->hooks.stop(s->hooks.ctx);
	/* Closing a connection's rings ends its fiber, which frees it. */
	for (st_conn *c = s->conns; c; c = c->next)
		sh_link_shut(&c->l);
	while (s->conns)
		shoal_sleep_until(shoal_deadline_in(1000000));
	if (mail) {
		shoal_cancel(mail);
		shoal_join(mail, NULL);
	}
	shoal_fd_forget(s->lsock);
	shoal_fd_forget(s->stop_efd);
	shoal_fd_forget(s->mail_efd);
	shoal_sched_destroy(sched);
	return NULL;
}

void shoal_store_opts_init(shoal_store_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->group = (gid_t)-1;
	o->spares = SHOAL_STORE_SPARES_AUTO;
}

/* ---- the state directory ---- */

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
static int restore_fits(void *arg, uint32_t nsegs, const uint64_t *sizes, char *why, size_t whylen)
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
	if (fds_held(s) + nsegs + FD_SPARE_CONNS * FDS_PER_CONN > s->fd_budget) {
		snprintf(why, whylen,
			 "%u segments: the store may hold no more descriptors (%" PRIu64 ")", nsegs,
			 s->fd_budget);
		return SHOAL_ENOSPC;
	}
	return 0;
}

/* Serves a tree whose blobs are inline (copied into the arena) or lie in
 * nsegs sealed files (fds, sizes), named [index + 1, offset, size], as
 * the persistent object id with signature sig: checked as a seal request
 * is, within --size and the descriptor budget. On success *out is the
 * object and the descriptors are the store's; on failure they stay the
 * caller's. For objects that come from outside a client's connection: a
 * state file read back, a copy migrated from another host. */
int sh_store_adopt(shoal_store *s, uint64_t id, uint64_t sig, shoal_node *root, uint32_t nsegs,
		   const int *fds, const uint64_t *sizes, st_obj **out, char *why, size_t whylen)
{
	sh_map regions = {0};
	st_seg **segs = nsegs ? shoal_alloc(nsegs * sizeof(*segs)) : NULL;
	seal_ctx x = {.s = s, .regions = &regions};
	st_obj *o = NULL;
	int rc = 0;
	if (nsegs && !segs)
		rc = SHOAL_ENOMEM;
	if (rc == 0 && (id == 0 || sh_map_get(&s->objs, id))) {
		snprintf(why, whylen, "object %016" PRIx64 " is here already", id);
		rc = SHOAL_EEXIST;
	}
	if (rc == 0)
		rc = restore_fits(s, nsegs, sizes, why, whylen);
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
	if (rc == 0 && !(o = SH_NEW(st_obj)))
		rc = SHOAL_ENOMEM;
	if (rc == 0) {
		blobs_from_state(root, segs);
		rc = obj_set_tree(o, root, why, whylen);
	}
	if (rc == 0 && sh_map_put(&s->objs, id, o) != 0)
		rc = SHOAL_ENOMEM;
	if (rc != 0) {
		for (uint32_t i = 0; i < x.narena; i++)
			arena_free(s, x.arena[i] >> 8, (int)(x.arena[i] & 0xff));
		for (uint32_t i = 0; i < made; i++) {
			sh_map_del(&s->segs, segs[i]->id);
			s->used -= segs[i]->charged;
			SH_DELETE(segs[i]);
		}
		if (x.arena)
			shoal_free(x.arena, x.cap_arena * 8);
		if (x.segs)
			shoal_free(x.segs, x.cap_segs * sizeof(st_seg *));
		if (o)
			obj_shell_free(o);
	} else {
		o->id = id;
		o->sig = sig;
		o->bytes = sh_node_bytes(root);
		o->persistent = true;
		o->segs = x.segs;
		o->nsegs = x.nsegs;
		o->cap_segs = x.cap_segs;
		o->arena = x.arena;
		o->narena = x.narena;
		o->cap_arena = x.cap_arena;
		for (uint32_t i = 0; i < x.nsegs; i++)
			x.segs[i]->owner = o;
		s->nobjs++;
		*out = o;
	}
	sh_map_fini(&regions);
	if (segs)
		shoal_free(segs, nsegs * sizeof(*segs));
	return rc;
}

/* One object read back from the state directory (sh_state_load): checked
 * as a seal request is, placed within --size and the descriptor budget,
 * and served under its id, signature and name. */
static int restore_obj(void *arg, sh_state_rec *r, char *why, size_t whylen)
{
	shoal_store *s = arg;
	sh_mp m;
	sh_mp_init(&m, r->meta, r->meta_len);
	uint32_t n, name_len = 0;
	const char *name = NULL;
	sh_bump a = {0};
	shoal_node *root = NULL;
	st_obj *o = NULL, *old = NULL;
	int rc = 0;
	if (sh_mp_array(&m, &n) || n != 2 ||
	    (!sh_mp_take_nil(&m) && (sh_mp_str(&m, &name, &name_len) || name_len == 0 ||
				     name_len > SH_NODE_MAX_NAME || memchr(name, 0, name_len)))) {
		snprintf(why, whylen, "metadata: expected [name or nil, node]");
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0)
		rc = sh_node_decode(&m, &a, &root, why, whylen);
	if (rc == 0 && sh_mp_done(&m) != 0) {
		snprintf(why, whylen, "metadata: trailing bytes after the node");
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0)
		rc = sh_node_check_types(root, why, whylen);
	if (rc == 0 && name && (old = sh_st_name_find(s, name, name_len)) && old->gen >= r->gen) {
		snprintf(why, whylen, "replaced by %016" PRIx64 ", a newer object named %.*s",
			 old->id, (int)(name_len > 200 ? 200 : name_len), name);
		rc = SH_STATE_SUPERSEDED;
	}
	if (rc == 0)
		rc = sh_store_adopt(s, r->id, r->sig, root, r->nsegs, r->seg_fds, r->seg_sizes, &o,
				    why, whylen);
	if (rc == 0) {
		o->gen = r->gen;
		/* New ids of this start must not meet it. */
		if ((r->id & ~ID_COUNTER) == s->instance && (r->id & ID_COUNTER) >= s->next_id)
			s->next_id = (r->id & ID_COUNTER) + 1;
		if (old) { /* an older object of the name, which this one replaced */
			sh_info("store",
				"state %s: removing %016" PRIx64 ".obj: replaced by %016" PRIx64,
				sh_state_dir(s->state), old->id, o->id);
			sh_state_remove(s->state, old->id);
			old->persistent = false;
			sh_st_obj_delete(s, old);
		}
		if (name && sh_st_name_bind(s, o, name, name_len) != 0) {
			/* kept by id: its file stays for the next start */
			sh_error("store", "state %s: out of memory naming %016" PRIx64 " %.*s",
				 sh_state_dir(s->state), o->id, (int)name_len, name);
		}
	}
	sh_bump_fini(&a);
	return rc;
}

static int open_state(shoal_store *s)
{
	char why[512];
	int rc = sh_state_open(s->opts.state_dir, &s->state, why, sizeof(why));
	if (rc) {
		sh_error("store", "%s", why);
		return rc;
	}
	int kept = sh_state_load(s->state, restore_fits, restore_obj, s);
	sh_info("store", "state %s: %d persistent objects back, %" PRIu64 " bytes of %" PRIu64,
		s->opts.state_dir, kept, s->used, s->capacity);
	return 0;
}

static int make_socket(shoal_store *s)
{
	return sh_link_listen(s->opts.socket_path, "store", s->opts.group, s->path, sizeof(s->path),
			      &s->lsock);
}

static int make_arena(shoal_store *s)
{
	size_t sz = s->capacity < SH_STORE_ARENA_MAX ? s->capacity : SH_STORE_ARENA_MAX;
	sz = (sz + PAGE - 1) & ~(size_t)(PAGE - 1);
	s->arena_size = sz;
	int rc = sh_memfd_create("shoal-arena", sz, true, &s->arena_fd);
	if (rc)
		return rc;
	if ((rc = sh_shm_map(s->arena_fd, sz, true, (void **)&s->arena)) != 0)
		return rc;
	/* Clients get a read-only open of the same file, so they cannot map it
	 * writable and mprotect cannot change that. That alone is not enough: a
	 * client can reopen its descriptor read-write through /proc/self/fd.
	 * So, now that our own mapping exists, the kernel refuses every new
	 * write to the file from anyone (write(2), fallocate, a writable
	 * mapping), and the file's mode refuses a read-write open by anyone
	 * but root. */
	if ((rc = sh_memfd_freeze_others(s->arena_fd)) != 0)
		return rc;
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", s->arena_fd);
	s->arena_ro_fd = open(p, O_RDONLY | O_CLOEXEC);
	if (s->arena_ro_fd < 0 || fchmod(s->arena_fd, 0400) != 0)
		return shoal_errno();
	if (s->opts.reserve) {
		/* Fault every page in now, so puts never pay first touches. */
		for (size_t off = 0; off < sz; off += PAGE)
			s->arena[off] = 0;
	}
	return 0;
}

static void store_free(shoal_store *s)
{
	s->stopping = true; /* what is freed now makes no spares */
	size_t it = 0;
	uint64_t key;
	void *val;
	/* Objects first (they free their segments), then what is left. */
	while (s->objs.n) {
		it = 0;
		if (!sh_map_next(&s->objs, &it, &key, &val))
			break;
		st_obj *o = val;
		o->creator = NULL;
		obj_free(s, o);
	}
	while (s->segs.n) {
		it = 0;
		if (!sh_map_next(&s->segs, &it, &key, &val))
			break;
		seg_free(s, val);
	}
	sh_state_close(s->state);
	sh_spares_stop(s->spares);
	sh_map_fini(&s->objs);
	sh_map_fini(&s->names);
	sh_map_fini(&s->segs);
	sh_map_fini(&s->claims);
	for (int i = 0; i < ARENA_CLASSES; i++)
		sh_ptrstack_fini(&s->arena_free[i]);
	if (s->arena)
		sh_shm_unmap(s->arena, s->arena_size);
	if (s->arena_fd >= 0)
		close(s->arena_fd);
	if (s->arena_ro_fd >= 0)
		close(s->arena_ro_fd);
	if (s->lsock >= 0)
		close(s->lsock);
	if (s->stop_efd >= 0)
		close(s->stop_efd);
	if (s->mail_efd >= 0)
		close(s->mail_efd);
	if (s->hooks.free)
		s->hooks.free(s->hooks.ctx);
	pthread_mutex_destroy(&s->mail_mu);
	SH_DELETE(s);
}

shoal_pages shoal_store_pages(const shoal_store *s, const char **why)
{
	if (why)
		*why = s->pages.why;
	return s->pages.kind;
}

int sh_store_create(shoal_store **out, const shoal_store_opts *opts)
{
	shoal_store *s = SH_NEW(shoal_store);
	if (!s)
		return SHOAL_ENOMEM;
	if (opts)
		s->opts = *opts;
	else
		shoal_store_opts_init(&s->opts);
	s->lsock = s->stop_efd = s->mail_efd = s->arena_fd = s->arena_ro_fd = -1;
	pthread_mutex_init(&s->mail_mu, NULL);
	s->capacity = s->opts.size ? s->opts.size : (1ull << 30);
	uint32_t r = 0;
	while (r == 0)
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint32_t)shoal_now_ns() ^ (uint32_t)getpid();
	s->instance = (uint64_t)(r & 0xffffff) << 40;
	s->next_id = 1;
	s->next_seg = 1;
	s->fd_budget = sh_link_fd_budget();
	sh_pages_choose(&s->pages, s->opts.huge_pages);
	int rc = make_arena(s);
	uint64_t spares = s->opts.spares;
	/* with --reserve the memory is the store's to hold: spares up to half
	 * of it, whatever their size (a checkpoint of several GiB) */
	if (spares == SHOAL_STORE_SPARES_AUTO)
		spares = s->opts.reserve || s->capacity / 2 < (1ull << 30) ? s->capacity / 2
									   : (1ull << 30);
	if (rc == 0 && spares >= SH_SPARE_MIN)
		rc = sh_spares_start(&s->spares, spares, &s->pages);
	/* the capacity's first touch at start, before a client can ask */
	if (rc == 0 && s->opts.reserve)
		sh_pages_warm(&s->pages, s->capacity);
	if (rc == 0 && s->opts.state_dir)
		rc = open_state(s);
	if (rc == 0 && (s->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		rc = shoal_errno();
	if (rc == 0 && (s->mail_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		rc = shoal_errno();
	if (rc) {
		store_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void sh_store_set_hooks(shoal_store *s, const sh_store_hooks *h)
{
	s->hooks = *h;
}

void sh_store_destroy(shoal_store *s)
{
	store_free(s);
}

int sh_store_serve(shoal_store *s)
{
	int rc = make_socket(s);
	if (rc == 0 && (rc = -pthread_create(&s->thread, NULL, server_thread, s)) != 0)
		unlink(s->path);
	return rc;
}

const char *shoal_store_socket(const shoal_store *s)
{
	return s->path;
}

int shoal_store_close(shoal_store *s)
{
	if (!s)
		return SHOAL_EINVAL;
	sh_eventfd_signal(s->stop_efd);
	pthread_join(s->thread, NULL);
	unlink(s->path);
	store_free(s);
	return 0;
}

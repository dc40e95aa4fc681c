/* Spilling (server.h): with a spill directory, cold objects go to disk when
 * memory runs short and come back at their next get.
 *
 * One fiber, the spiller, does every spill, a batch at a time: when use
 * passes the high mark (after a seal), or when a create, a seal or an
 * incoming copy needs room that is not free (sh_st_spill_room, which waits
 * for its round). A batch takes the objects no one holds, least recently
 * got (or made) first, down to the low mark; their records are appended to
 * the spill files by a thread of its own, synced once, and only then is
 * their memory freed. An object got meanwhile is served from memory and
 * kept there; one deleted meanwhile is forgotten. Never spilled: an object
 * a client holds or still has mapped (an idle mapping pins its pages
 * whatever the store frees), one being created (not an object yet), a copy
 * from another store (evicted instead: sh_store_make_room), one being
 * restored. A persistent object of a store with a state directory has its
 * file there already: its spill frees its memory and writes nothing.
 *
 * A get of a spilled object restores it within the get (sh_st_restore):
 * room is made, the record is read on a thread of its own with large reads
 * straight into fresh segments on the store's pages (huge ones where the
 * store has them), hashed as it comes and sealed, then checked as a seal
 * request is. The object keeps its id, name, type and signature; its
 * record stays on disk, so a second spill of it writes nothing. */
#include "store/server.h"
#include "store/state.h"
#include "store/spare.h"
#include "fiber/waitq.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A batch's bounds: its records' metadata is held in memory while it is
 * written (small objects' bytes are inline in it), and a room waiter
 * waits for a whole batch. */
#define BATCH_META ((uint64_t)32 << 20)
#define BATCH_BYTES ((uint64_t)1 << 30)
#define BATCH_OBJS 16384u

typedef struct sh_spiller {
	sh_spill *sp;
	uint64_t high, low; /* marks of --size, bytes */
	shoal_fiber *fiber;
	sh_waitq wake;	   /* the spiller waits here for work */
	sh_waitq done;	   /* room waiters wait here for the end of a round */
	sh_waitq restored; /* gets of an object being restored wait here */
	uint64_t need;	   /* bytes room waiters want free */
	/* after a write that found the disk (or --spill-limit) full: no
	 * write until then, rather than the same failure at every seal */
	int64_t full_until;
	uint64_t rounds;
	bool stuck; /* the last round freed nothing */
	bool stopping;
	/* the figures of STAT */
	uint64_t spilled, spilled_bytes, restored_n, restored_bytes;
	uint64_t spill_ns, restore_ns; /* time in the disk's writes and reads */
	uint64_t on_disk, on_disk_bytes;
} sh_spiller;

static uint64_t page_up(uint64_t v)
{
	return (v + PAGE - 1) & ~(uint64_t)(PAGE - 1);
}

/* ---- what spills ---- */

static bool spillable(const st_obj *o)
{
	if (o->spilled || o->busy || o->deleted || o->refs || o->copy ||
	    (o->nsegs == 0 && o->narena == 0))
		return false;
	for (uint32_t i = 0; i < o->nsegs; i++)
		if (o->segs[i]->mapped)
			return false;
	return true;
}

/* What freeing o's bytes gives back of --size. */
static uint64_t obj_charged(const st_obj *o)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < o->nsegs; i++)
		n += o->segs[i]->charged;
	for (uint32_t i = 0; i < o->narena; i++)
		n += 1ull << ((o->arena[i] & 0xff) + ARENA_MIN_CLASS);
	return n;
}

static int by_last_get(const void *a, const void *b)
{
	const st_obj *x = *(st_obj *const *)a, *y = *(st_obj *const *)b;
	return x->last_get < y->last_get ? -1 : x->last_get > y->last_get;
}

/* Keeps the sizes of o's n segments in its record. */
static void set_sizes(st_obj *o, uint32_t n, const uint64_t *sizes)
{
	if (o->spill_sizes)
		shoal_free(o->spill_sizes, o->spill_nsegs * sizeof(uint64_t));
	o->spill_sizes = n ? shoal_alloc(n * sizeof(uint64_t)) : NULL;
	if (o->spill_sizes) /* else no spare is taken for its restore */
		memcpy(o->spill_sizes, sizes, n * sizeof(uint64_t));
	o->spill_nsegs = n;
}

/* The same from o's segments now (its state file's, in that order). */
static void keep_sizes(st_obj *o)
{
	uint64_t *sizes = o->nsegs ? shoal_alloc(o->nsegs * sizeof(uint64_t)) : NULL;
	for (uint32_t k = 0; sizes && k < o->nsegs; k++)
		sizes[k] = o->segs[k]->size;
	set_sizes(o, sizes ? o->nsegs : 0, sizes);
	o->spill_nsegs = o->nsegs;
	if (sizes)
		shoal_free(sizes, o->nsegs * sizeof(uint64_t));
}

/* Frees the bytes of o, whose record is on disk. Its segments' sizes are
 * wanted as spares for its restore: made now, from the pages it gave back
 * (the last freed are the first handed out, and they are still backed),
 * they spare the restore the first touch of fresh memory, which on a VM
 * costs several times the read. */
static void unload(shoal_store *s, st_obj *o)
{
	sh_spiller *sp = s->spiller;
	sh_st_obj_unload(s, o);
	for (uint32_t k = 0; s->spares && o->spill_sizes && k < o->spill_nsegs; k++)
		sh_spares_want(s->spares, o->spill_sizes[k], s->capacity - s->used, true);
	o->spilled = true;
	sp->on_disk++;
	sp->on_disk_bytes += o->bytes;
}

typedef struct batch {
	sh_spill *sp;
	sh_state_rec *recs;
	sh_spill_loc *loc;
	size_t n, done;
	int rc;
	char why[512];
} batch;

static void batch_main(void *arg)
{
	batch *b = arg;
	b->done = sh_spill_write(b->sp, b->recs, b->n, b->loc, &b->rc, b->why, sizeof(b->why));
}

static void batch_free(batch *b, sh_wbuf *metas)
{
	for (size_t i = 0; i < b->n; i++) {
		sh_state_rec *r = &b->recs[i];
		for (uint32_t k = 0; k < r->nsegs; k++)
			close(r->seg_fds[k]);
		if (r->nsegs) {
			shoal_free(r->seg_fds, r->nsegs * sizeof(int));
			shoal_free(r->seg_sizes, r->nsegs * sizeof(uint64_t));
		}
		sh_wbuf_fini(&metas[i]);
	}
}

/* Prepares o's record in b (its segments' descriptors duplicated: o may
 * be deleted while the batch is written). */
static int batch_add(shoal_store *s, batch *b, sh_wbuf *meta, st_obj *o)
{
	sh_state_rec *r = &b->recs[b->n];
	*r = (sh_state_rec){.id = o->id, .sig = o->sig};
	sh_wbuf_init(meta);
	int *fds = o->nsegs ? shoal_alloc(o->nsegs * sizeof(int)) : NULL;
	uint64_t *sizes = o->nsegs ? shoal_alloc(o->nsegs * sizeof(uint64_t)) : NULL;
	char why[256];
	int rc = o->nsegs && (!fds || !sizes) ? SHOAL_ENOMEM : 0;
	if (rc == 0)
		rc = sh_st_obj_record(s, o, o->name, o->name ? strlen(o->name) : 0, meta, fds,
				      sizes, why, sizeof(why));
	uint32_t k = 0;
	for (; rc == 0 && k < o->nsegs; k++) {
		int d = fcntl(fds[k], F_DUPFD_CLOEXEC, 0);
		if (d < 0) {
			rc = shoal_errno();
			break;
		}
		fds[k] = d;
	}
	if (rc) {
		for (uint32_t i = 0; i < k; i++)
			close(fds[i]);
		if (fds)
			shoal_free(fds, o->nsegs * sizeof(int));
		if (sizes)
			shoal_free(sizes, o->nsegs * sizeof(uint64_t));
		sh_wbuf_fini(meta);
		return rc;
	}
	r->meta = meta->p;
	r->meta_len = meta->len;
	r->nsegs = o->nsegs;
	r->seg_fds = fds;
	r->seg_sizes = sizes;
	b->n++;
	return 0;
}

/* One round: spills about want bytes of the coldest objects, at most a
 * batch. Returns the bytes of --size it freed. */
static uint64_t spill_round(shoal_store *s, uint64_t want)
{
	sh_spiller *sp = s->spiller;
	size_t nc = 0, capc = s->objs.n;
	st_obj **cand = capc ? shoal_alloc(capc * sizeof(*cand)) : NULL;
	if (!cand)
		return 0;
	size_t it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&s->objs, &it, &key, &val) && nc < capc)
		if (spillable(val))
			cand[nc++] = val;
	qsort(cand, nc, sizeof(*cand), by_last_get);
	/* Objects whose record is on disk already go at once; the others are
	 * written first. */
	uint64_t freed = 0, planned = 0, meta_bytes = 0;
	batch b = {.sp = sp->sp};
	size_t nb = 0;
	for (size_t i = 0; i < nc && planned < want; i++) {
		st_obj *o = cand[i];
		if (o->spill.len) {
			uint64_t ch = obj_charged(o);
			unload(s, o);
			freed += ch;
			planned += ch;
			continue;
		}
		if (nb == BATCH_OBJS || meta_bytes > BATCH_META || planned - freed > BATCH_BYTES ||
		    shoal_now_ns() < sp->full_until)
			continue; /* the next round takes it */
		cand[nb++] = o;	  /* the written ones, in cand's front */
		planned += obj_charged(o);
		meta_bytes += o->meta_len;
		for (uint32_t k = 0; k < o->narena; k++)
			meta_bytes += 1ull << ((o->arena[k] & 0xff) + ARENA_MIN_CLASS);
	}
	/* a persistent object's file in the state directory is its record */
	size_t nw = 0;
	for (size_t i = 0; i < nb; i++) {
		st_obj *o = cand[i];
		if (o->persistent && s->state) {
			/* the room a restore makes: at least its file's length */
			uint64_t ch = obj_charged(o);
			o->spill = (sh_spill_loc){.len = ch + o->meta_len + 8ull * o->nsegs +
							 2 * PAGE};
			keep_sizes(o); /* in the order of its file's */
			o->in_state = true;
			unload(s, o);
			freed += ch;
			continue;
		}
		cand[nw++] = o;
	}
	if (nw) {
		b.recs = shoal_alloc(nw * sizeof(*b.recs));
		b.loc = shoal_alloc(nw * sizeof(*b.loc));
		sh_wbuf *metas = shoal_alloc(nw * sizeof(*metas));
		if (b.recs && b.loc && metas) {
			for (size_t i = 0; i < nw; i++)
				if (batch_add(s, &b, &metas[b.n], cand[i]) == 0)
					cand[i]->busy = true;
			uint64_t t0 = shoal_now_ns();
			sh_run_aside("shoal-spill", batch_main, &b);
			sp->spill_ns += shoal_now_ns() - t0;
			if (b.done < b.n)
				sh_error("store", "%s: %zu of %zu objects stay in memory%s", b.why,
					 b.n - b.done, b.n,
					 b.rc == SHOAL_ENOSPC ? " (no spill is tried for 1 s)"
							      : "");
			if (b.rc == SHOAL_ENOSPC)
				sp->full_until = shoal_now_ns() + 1000000000ll;
			for (size_t i = 0; i < b.n; i++) {
				st_obj *o = sh_map_get(&s->objs, b.recs[i].id);
				if (!o) { /* deleted meanwhile */
					if (i < b.done)
						sh_spill_drop(sp->sp, &b.loc[i]);
					continue;
				}
				o->busy = false;
				if (i >= b.done)
					continue;
				o->spill = b.loc[i];
				set_sizes(o, b.recs[i].nsegs, b.recs[i].seg_sizes);
				sp->spilled++;
				sp->spilled_bytes += o->bytes;
				if (spillable(o)) { /* not got meanwhile */
					uint64_t ch = obj_charged(o);
					unload(s, o);
					freed += ch;
				}
			}
			batch_free(&b, metas);
		} else {
			sh_error("store", "spill: out of memory for a batch of %zu objects", nw);
		}
		if (b.recs)
			shoal_free(b.recs, nw * sizeof(*b.recs));
		if (b.loc)
			shoal_free(b.loc, nw * sizeof(*b.loc));
		if (metas)
			shoal_free(metas, nw * sizeof(*metas));
	}
	shoal_free(cand, capc * sizeof(*cand));
	return freed;
}

static void *spiller_main(void *arg)
{
	shoal_store *s = arg;
	sh_spiller *sp = s->spiller;
	while (!sp->stopping) {
		uint64_t free_ = s->capacity - s->used, want = 0;
		if (s->used > sp->high)
			want = s->used - sp->low;
		if (sp->need > free_ && sp->need - free_ > want)
			want = sp->need - free_;
		sp->need = 0;
		if (want) {
			uint64_t freed = spill_round(s, want);
			sp->rounds++;
			sp->stuck = freed == 0;
			sh_waitq_wake_all(&sp->done);
			if (freed)
				continue;
		}
		/* nothing to do, or nothing that may spill: until a seal or a
		 * waiter says there may be */
		if (sh_waitq_wait(&sp->wake, SHOAL_FOREVER) == SHOAL_ECANCELED)
			break;
	}
	return NULL;
}

bool sh_st_spill_room(shoal_store *s, uint64_t bytes)
{
	sh_spiller *sp = s->spiller;
	if (!sp || !shoal_self() || shoal_self() == sp->fiber)
		return bytes <= s->capacity - s->used;
	while (bytes > s->capacity - s->used) {
		if (sp->stopping)
			return false;
		uint64_t r = sp->rounds;
		if (bytes > sp->need)
			sp->need = bytes;
		sh_waitq_wake_all(&sp->wake);
		while (sp->rounds == r && !sp->stopping)
			if (sh_waitq_wait(&sp->done, SHOAL_FOREVER) != 0)
				return false;
		if (sp->stuck && bytes > s->capacity - s->used)
			return false;
	}
	return true;
}

bool sh_st_spill_short(const shoal_store *s)
{
	return s->spiller &&
	       (s->used > s->spiller->high || s->spiller->stuck || s->spiller->on_disk);
}

void sh_st_spill_check(shoal_store *s)
{
	if (s->spiller && s->used > s->spiller->high)
		sh_waitq_wake_all(&s->spiller->wake);
}

/* ---- coming back ---- */

typedef struct restore_job {
	shoal_store *s;
	st_obj *o; /* read only off the store's thread: its spill fields */
	sh_rec_reader x;
	sh_state_rec r;
	int rc;
	char why[512];
} restore_job;

/* A segment to read into: a spare, whose pages exist (a fresh page's first
 * touch costs more than its read here), waited for when the one being
 * made would serve (made since the spill, for this restore), else a fresh
 * one on the store's pages. */
static int seg_make(void *ctx, uint64_t size, int *fd, uint64_t *map_len)
{
	restore_job *j = ctx;
	int x = j->s->spares ? sh_spares_take_wait(j->s->spares, size) : -1;
	if (x >= 0) {
		*fd = x;
		*map_len = size;
		return 0;
	}
	shoal_pages kind;
	return sh_pages_segment(&j->s->pages, "shoal-segment", size, fd, map_len, &kind);
}

static void restore_main(void *arg)
{
	restore_job *j = arg;
	shoal_store *s = j->s;
	if (j->o->in_state)
		j->rc = sh_state_read(s->state, j->o->id, &j->x, &j->r, j->why, sizeof(j->why));
	else
		j->rc = sh_spill_read(s->spiller->sp, &j->o->spill, j->o->id, &j->x, &j->r, j->why,
				      sizeof(j->why));
}

/* The record's tree into o: [name | nil, node], checked. */
static int restore_tree(shoal_store *s, st_obj *o, const sh_state_rec *r, char *why, size_t whylen)
{
	const char *name;
	uint32_t nl;
	sh_bump a = {0};
	shoal_node *root;
	int rc = sh_rec_tree(r, &a, &root, &name, &nl, why, whylen);
	if (rc == 0 && r->sig != o->sig) {
		snprintf(why, whylen, "signature %016" PRIx64 ", expected %016" PRIx64, r->sig,
			 o->sig);
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0)
		rc = sh_st_obj_load(s, o, root, r->nsegs, r->seg_fds, r->seg_sizes, why, whylen);
	sh_bump_fini(&a);
	return rc;
}

int sh_st_restore(shoal_store *s, st_obj *o, char *why, size_t whylen)
{
	sh_spiller *sp = s->spiller;
	while (o->busy) /* another get brings it back */
		if (sh_waitq_wait(&sp->restored, SHOAL_FOREVER) != 0)
			return SHOAL_ECANCELED;
	if (!o->spilled)
		return 0;
	o->busy = true;
	int rc = 0;
	uint64_t reserve = page_up(o->spill.len);
	if (!sh_store_make_room(s, reserve, true)) {
		snprintf(why, whylen,
			 "store full: %" PRIu64 " bytes to bring it back, %" PRIu64 " of %" PRIu64
			 " free, and nothing more may spill",
			 reserve, s->capacity - s->used, s->capacity);
		rc = SHOAL_ENOSPC;
	}
	uint32_t ns = o->spill_nsegs ? o->spill_nsegs : 1;
	restore_job *j = rc == 0 ? SH_NEW(restore_job) : NULL;
	int *fds = j ? shoal_alloc(ns * sizeof(int)) : NULL;
	uint64_t *sizes = j ? shoal_alloc(ns * sizeof(uint64_t)) : NULL;
	if (rc == 0 && (!j || !fds || !sizes)) {
		snprintf(why, whylen, "out of memory");
		rc = SHOAL_ENOMEM;
	}
	if (rc == 0) {
		/* the room is this restore's while it reads; spares give it
		 * up, but for the one its largest segment will take */
		uint64_t keep = 0;
		for (uint32_t k = 0; o->spill_sizes && k < o->spill_nsegs; k++)
			if (o->spill_sizes[k] > keep)
				keep = o->spill_sizes[k];
		s->used += reserve;
		if (s->spares)
			sh_spares_fit(s->spares, s->capacity - s->used, keep);
		*j = (restore_job){.s = s,
				   .o = o,
				   .x = {.make = seg_make, .ctx = j},
				   .r = {.seg_fds = fds, .seg_sizes = sizes, .seg_room = ns}};
		uint64_t t0 = shoal_now_ns();
		sh_run_aside("shoal-restore", restore_main, j);
		sp->restore_ns += shoal_now_ns() - t0;
		s->used -= reserve;
		rc = j->rc;
		if (rc == 0 && j->r.nsegs != o->spill_nsegs) {
			snprintf(j->why, sizeof(j->why), "%u segments, expected %u", j->r.nsegs,
				 o->spill_nsegs);
			rc = SHOAL_EBADMSG;
		}
		if (rc == 0)
			rc = restore_tree(s, o, &j->r, j->why, sizeof(j->why));
		if (rc) {
			for (uint32_t k = 0; k < j->r.nsegs; k++)
				close(fds[k]);
			snprintf(why, whylen, "%s", j->why);
			sh_error("store", "restoring object %016" PRIx64 ": %s", o->id, j->why);
			if (o->in_state && rc == SHOAL_EBADMSG) {
				/* as at a start: aside, not read again at the next */
				char file[40];
				snprintf(file, sizeof(file), "%016" PRIx64 ".obj", o->id);
				sh_state_set_aside(s->state, file, j->why);
				o->persistent = false;
			}
		} else {
			/* the next restore or put of these sizes finds a spare */
			for (uint32_t k = 0; s->spares && k < o->nsegs; k++)
				if (o->segs[k]->size >= SH_SPARE_MIN)
					sh_spares_want(s->spares, o->segs[k]->size,
						       s->capacity - s->used, false);
			o->spilled = false;
			sp->on_disk--;
			sp->on_disk_bytes -= o->bytes;
			sp->restored_n++;
			sp->restored_bytes += o->bytes;
		}
		sh_rec_reader_fini(&j->x);
	}
	if (j)
		SH_DELETE(j);
	if (fds)
		shoal_free(fds, ns * sizeof(int));
	if (sizes)
		shoal_free(sizes, ns * sizeof(uint64_t));
	o->busy = false;
	sh_waitq_wake_all(&sp->restored);
	return rc;
}

int sh_st_spill_adopt(shoal_store *s, const sh_state_rec *r, shoal_node *root, st_obj **out,
		      char *why, size_t whylen)
{
	if (r->id == 0 || sh_map_get(&s->objs, r->id)) {
		snprintf(why, whylen, "object %016" PRIx64 " is here already", r->id);
		return SHOAL_EEXIST;
	}
	st_obj *o = SH_NEW(st_obj);
	size_t tl = strlen(root->type) + 1;
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	sh_node_pack(&pk, root); /* its blobs' places are the file's until it comes back */
	if (!o || w.err || !(o->type = shoal_alloc(tl)) || sh_map_put(&s->objs, r->id, o) != 0) {
		if (o && o->type)
			shoal_free(o->type, tl);
		if (o)
			SH_DELETE(o);
		sh_wbuf_fini(&w);
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	memcpy(o->type, root->type, tl);
	o->meta = w.p;
	o->meta_len = w.len;
	o->meta_cap = w.cap;
	o->id = r->id;
	o->sig = r->sig;
	o->gen = r->gen;
	o->bytes = sh_node_bytes(root);
	o->persistent = true;
	o->spilled = o->in_state = true;
	o->spill = (sh_spill_loc){.len = r->len};
	set_sizes(o, r->nsegs, r->seg_sizes);
	s->nobjs++;
	s->spiller->on_disk++;
	s->spiller->on_disk_bytes += o->bytes;
	*out = o;
	return 0;
}

void sh_st_spill_forget(shoal_store *s, st_obj *o)
{
	sh_spiller *sp = s->spiller;
	if (!sp)
		return;
	if (o->spilled) {
		sp->on_disk--;
		sp->on_disk_bytes -= o->bytes;
		o->spilled = false;
	}
	if (o->spill.len && !o->in_state)
		sh_spill_drop(sp->sp, &o->spill);
	o->spill.len = 0;
	if (o->spill_sizes)
		shoal_free(o->spill_sizes, o->spill_nsegs * sizeof(uint64_t));
	o->spill_sizes = NULL;
}

/* ---- the spiller's life ---- */

int sh_st_spill_open(shoal_store *s)
{
	const shoal_store_opts *op = &s->opts;
	double high = op->spill_high > 0 ? op->spill_high : 0.8;
	double low = op->spill_low > 0 ? op->spill_low : high - 0.1;
	char why[512];
	if (high > 1 || low >= high || low <= 0) {
		sh_error("store",
			 "spill marks: high %.2f and low %.2f of --size; expected 0 < low < high "
			 "<= 1",
			 high, low);
		return SHOAL_EINVAL;
	}
	sh_spiller *sp = SH_NEW(sh_spiller);
	if (!sp)
		return SHOAL_ENOMEM;
	int rc = sh_spill_open(op->spill_dir, op->spill_limit, op->spill_any_fs, &sp->sp, why,
			       sizeof(why));
	if (rc) {
		sh_error("store", "%s", why);
		SH_DELETE(sp);
		return rc;
	}
	sp->high = (uint64_t)((double)s->capacity * high);
	sp->low = (uint64_t)((double)s->capacity * low);
	s->spiller = sp;
	sh_info("store", "spill %s: cold objects go there past %.0f%% of --size, down to %.0f%%",
		op->spill_dir, high * 100, low * 100);
	return 0;
}

int sh_st_spill_start(shoal_store *s)
{
	if (!s->spiller)
		return 0;
	return shoal_spawn(&s->spiller->fiber, spiller_main, s,
			   &(shoal_fiber_opts){.name = "store-spill"});
}

void sh_st_spill_stop(shoal_store *s)
{
	sh_spiller *sp = s->spiller;
	if (!sp)
		return;
	sp->stopping = true;
	sh_waitq_wake_all(&sp->done);
	if (sp->fiber) {
		shoal_cancel(sp->fiber);
		shoal_join(sp->fiber, NULL);
		sp->fiber = NULL;
	}
}

void sh_st_spill_close(shoal_store *s)
{
	sh_spiller *sp = s->spiller;
	if (!sp)
		return;
	sh_spill_close(sp->sp);
	SH_DELETE(sp);
	s->spiller = NULL;
}

void sh_st_spill_stat(shoal_store *s, shoal_store_stat *st)
{
	sh_spiller *sp = s->spiller;
	if (!sp)
		return;
	st->spill_objects = sp->on_disk;
	st->spill_bytes = sp->on_disk_bytes;
	st->spill_file_bytes = sh_spill_file_bytes(sp->sp);
	st->spilled = sp->spilled;
	st->spilled_bytes = sp->spilled_bytes;
	st->restored = sp->restored_n;
	st->restored_bytes = sp->restored_bytes;
	st->spill_rate =
		sp->spill_ns ? (uint64_t)((double)sp->spilled_bytes * 1e9 / (double)sp->spill_ns)
			     : 0;
	st->restore_rate =
		sp->restore_ns
			? (uint64_t)((double)sp->restored_bytes * 1e9 / (double)sp->restore_ns)
			: 0;
}

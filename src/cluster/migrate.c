/* The fetching side of migrations: a client's MIGRATE, or a GET of an
 * object that is elsewhere in the cluster, makes this store copy it from
 * another store (its peer address, TCP). A thread per transfer connects,
 * proves the secret, sends FETCH and writes every blob straight into one
 * new region as its records come, beside a thread for each other share
 * the source grants, which JOINs the transfer on a link of its own; the
 * store's thread checks the metadata, reserves the room, and at the end
 * serves the copy under the object's own id and signature, as any object
 * of its own.
 *
 * Asks for an object already on its way join its transfer (same peer and
 * key); a copy already here answers at once (same id, or, once the
 * source named the object, same signature: a copy is as good as the
 * original). A transfer that fails fails every ask waiting on it, with the
 * peer and the bytes received; its region is closed, its room given back.
 *
 * This file is the store's side (asks, MIGRATE and MIGWAIT, the copy
 * served, room, stop); a transfer's thread is mig_thread.c, the FETCH
 * answer's decoding peer_wire.c. */
#include "cluster/migrate_impl.h"
#include "store/proto.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- the store's thread ---- */

static void mig_free(sh_cluster *cl, mig *g)
{
	sh_migs *ms = cl->migs;
	for (mig **p = &ms->list; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	if (g->done)
		shoal_chan_destroy(g->done);
	if (g->key_name)
		shoal_free(g->key_name, g->key_len + 1);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	SH_DELETE(g);
}

/* Drops finished transfers no ask will collect. */
static void migs_reap(sh_cluster *cl)
{
	int64_t now = shoal_now_ns();
	for (mig *g = cl->migs->list, *next; g; g = next) {
		next = g->next;
		if (g->state == MIG_DONE && g->users == 0 &&
		    (g->tickets == 0 || now - g->done_at > MIG_LINGER_NS))
			mig_free(cl, g);
	}
}

static void finish(sh_cluster *cl, mig *g, int rc)
{
	g->rc = rc;
	g->state = MIG_DONE;
	g->done_at = shoal_now_ns();
	if (g->room.charged) {
		sh_store_room_release(cl->s, g->room.charged);
		g->room.charged = 0;
	}
	shoal_chan_close(g->done);
}

static void answer(mig *g, int verdict)
{
	pthread_mutex_lock(&g->mu);
	g->verdict = verdict;
	g->answered = true;
	pthread_cond_signal(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* The source's reply came (the thread waits for the answer): is a copy
 * here already, is there room? */
void sh_mig_on_meta(shoal_store *s, sh_st_mail *m)
{
	mig *g = (mig *)((char *)m - offsetof(mig, mail));
	st_obj *o = sh_store_find_copy(s, g->id, g->sig);
	if (o) {
		g->id = sh_store_info(o).id;
		answer(g, 1);
		return;
	}
	char why[400];
	int rc = sh_store_room_for_copy(s, g->region, &g->room, why, sizeof(why));
	if (rc) {
		snprintf(g->why, sizeof(g->why), "object %016" PRIx64 " from %.200s: %.280s", g->id,
			 g->from, why);
		answer(g, rc);
		return;
	}
	g->region_total = g->total;
	g->bytes_at = shoal_now_ns();
	g->state = MIG_BYTES;
	answer(g, 0);
}

/* The thread is over: serve the copy, or tell every waiter why not. */
void sh_mig_on_end(shoal_store *s, sh_st_mail *m)
{
	mig *g = (mig *)((char *)m - offsetof(mig, mail));
	sh_cluster *cl = g->cl;
	pthread_join(g->thread, NULL);
	cl->migs->running--;
	if (!cl->migs->running)
		sh_waitq_wake_all(&cl->migs->ended);
	cl->migrating--;
	int rc = g->rc;
	sh_store_room_release(s, g->room.charged); /* adopt counts the region itself */
	g->room.charged = 0;
	if (g->yielded) /* its room went to a local put meanwhile: that is why it ended */
		rc = SHOAL_ENOSPC;
	if (g->yielded)
		snprintf(g->why, sizeof(g->why),
			 "object %016" PRIx64 " from %s: its room went to a local put (local puts "
			 "come first)",
			 g->id, g->from);
	if (rc == 0 && g->region_of.fd >= 0) {
		st_obj *o = NULL;
		rc = sh_store_adopt_copy(s, g->id, g->sig, g->root, g->region_of.fd,
					 g->region_of.size, &o, g->why, sizeof(g->why));
		if (rc == SHOAL_EEXIST) { /* another transfer brought it meanwhile */
			rc = 0;
		} else if (rc) {
			char tmp[200];
			snprintf(tmp, sizeof(tmp), "%.199s", g->why);
			snprintf(g->why, sizeof(g->why), "object %016" PRIx64 " from %.255s: %s",
				 g->id, g->from, tmp);
		} else {
			g->region_of.fd = -1; /* the store's now */
			sh_store_objinfo oi = sh_store_info(o);
			cl->fetched++;
			cl->fetched_bytes += oi.bytes;
			sh_debug("store",
				 "object %016" PRIx64 " migrated from %s: %" PRIu64 " bytes", oi.id,
				 g->from, oi.bytes);
		}
	}
	/* asked by name: the name the source answered for binds the object
	 * here, whether this copy brought it, another did meanwhile, or one
	 * fetched by id before was here already */
	st_obj *here = rc == 0 && g->name ? sh_store_find(s, NULL, 0, g->id) : NULL;
	if (here && !sh_store_name_if_free(s, here, g->name, strlen(g->name)))
		sh_warn("store", "object %016" PRIx64 ": out of memory naming it %s", g->id,
			g->name);
	if (g->region_of.fd >= 0)
		close(g->region_of.fd);
	if (g->room.spare_fd >= 0) /* given, and not taken: the thread ended first */
		close(g->room.spare_fd);
	g->region_of.fd = g->room.spare_fd = -1;
	sh_bump_fini(&g->a);
	g->root = NULL;
	if (g->name)
		shoal_free(g->name, strlen(g->name) + 1);
	g->name = NULL;
	finish(cl, g, rc);
}

bool sh_migs_yield_room(sh_cluster *cl, uint64_t bytes)
{
	sh_migs *ms = cl->migs;
	while (ms && bytes > sh_store_free_bytes(cl->s)) {
		mig *newest = NULL;
		for (mig *g = ms->list; g; g = g->next)
			if (g->room.charged && !g->yielded &&
			    (!newest || g->ticket > newest->ticket))
				newest = g;
		if (!newest)
			return false;
		sh_warn("store",
			"object %016" PRIx64 " from %s: ended, its room (%" PRIu64
			" bytes) going to a local put",
			newest->id, newest->from, newest->room.charged);
		newest->yielded = true;
		sh_store_room_release(cl->s, newest->room.charged);
		newest->room.charged = 0;
		sh_mig_cut(newest);
	}
	return true;
}

/* The transfer of (from, name or id): on its way already, or started. */
static int mig_get(sh_cluster *cl, const char *name, size_t nl, uint64_t id, const char *from,
		   size_t fl, uint32_t streams, const sh_mig_expect *x, mig **out)
{
	migs_reap(cl);
	for (mig *g = cl->migs->list; g; g = g->next)
		if (g->state != MIG_DONE && strlen(g->from) == fl && !memcmp(g->from, from, fl) &&
		    (name ? g->key_name && g->key_len == nl && !memcmp(g->key_name, name, nl)
			  : !g->key_name && g->key_id == id)) {
			*out = g;
			return 0;
		}
	if (sh_store_stopping(cl->s))
		return SHOAL_ECANCELED;
	mig *g = SH_NEW(mig);
	if (!g)
		return SHOAL_ENOMEM;
	g->cl = cl;
	g->region_of.fd = g->room.spare_fd = -1;
	g->streams = streams;
	for (int i = 0; i < SH_PEER_STREAMS_MAX; i++)
		g->fds[i] = -1;
	memcpy(g->from, from, fl);
	g->key_id = id;
	if (x) {
		g->has_expect = true;
		g->x_sig = x->sig;
		g->x_bytes = x->bytes;
		snprintf(g->x_type, sizeof(g->x_type), "%s", x->type ? x->type : "");
		memcpy(g->x_meta, x->meta, 32);
	}
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	int rc = shoal_chan_create(&g->done, 1, 0);
	if (rc == 0 && name) {
		if (!(g->key_name = shoal_alloc(nl + 1)))
			rc = SHOAL_ENOMEM;
		else {
			memcpy(g->key_name, name, nl);
			g->key_name[nl] = 0;
			g->key_len = nl;
		}
	}
	if (rc == 0)
		rc = -pthread_create(&g->thread, NULL, sh_mig_main, g);
	if (rc) {
		if (g->done)
			shoal_chan_destroy(g->done);
		if (g->key_name)
			shoal_free(g->key_name, nl + 1);
		pthread_mutex_destroy(&g->mu);
		pthread_cond_destroy(&g->cv);
		SH_DELETE(g);
		return rc;
	}
	g->ticket = ++cl->migs->next_ticket;
	g->next = cl->migs->list;
	cl->migs->list = g;
	cl->migs->running++;
	cl->migrating++;
	*out = g;
	return 0;
}

int sh_migs_fetch(sh_cluster *cl, const char *name, size_t nl, uint64_t id, const char *from,
		  const sh_mig_expect *x, char *why, size_t whylen)
{
	shoal_store *s = cl->s;
	if (!cl->klen) {
		snprintf(why, whylen, "this store has no cluster secret to prove itself to %s",
			 from);
		return SHOAL_EACCES;
	}
	/* the registry's record names an object here already (a copy fetched
	 * by id before, or by this name): no transfer, only the name */
	st_obj *here = x && x->name ? sh_store_find(s, NULL, 0, x->id) : NULL;
	if (here && sh_store_info(here).sig == x->sig) {
		if (!sh_store_name_from_registry(s, here, x->name, x->nl)) {
			snprintf(why, whylen, "out of memory naming object %016" PRIx64, x->id);
			return SHOAL_ENOMEM;
		}
		return 0;
	}
	mig *g = NULL;
	int rc = mig_get(cl, name, nl, id, from, strlen(from), 0, x, &g);
	if (rc) {
		snprintf(why, whylen, "fetching from %s: %s", from, shoal_strerror(rc));
		return rc;
	}
	g->users++; /* g stays while we wait on it */
	char b;
	while (g->state != MIG_DONE)
		shoal_chan_recv(g->done, &b, SHOAL_FOREVER);
	g->users--;
	rc = g->rc;
	if (rc)
		snprintf(why, whylen, "%s", g->why[0] ? g->why : shoal_strerror(rc));
	/* fetched by id for the name the registry was asked: the copy is
	 * known by it here too (a copy it named before loses it) */
	st_obj *o = rc == 0 && x && x->name ? sh_store_find(s, NULL, 0, g->id) : NULL;
	if (o && !sh_store_name_from_registry(s, o, x->name, x->nl))
		sh_warn("store", "object %016" PRIx64 ": out of memory naming it %.*s", g->id,
			(int)x->nl, x->name);
	migs_reap(cl);
	return rc;
}

void sh_migs_progress(sh_cluster *cl, uint64_t *received, uint64_t *total, uint64_t *rate)
{
	*received = *total = *rate = 0;
	int64_t now = shoal_now_ns();
	for (mig *g = cl->migs ? cl->migs->list : NULL; g; g = g->next) {
		if (g->state != MIG_BYTES)
			continue;
		uint64_t r = atomic_load(&g->received);
		*received += r;
		*total += g->region_total;
		if (now > g->bytes_at)
			*rate += (uint64_t)((double)r * 1e9 / (double)(now - g->bytes_at));
	}
}

/* ---- requests ---- */

/* Replies with where g stands, waiting up to wait_ms for it to finish. */
static int reply(sh_cluster *cl, st_conn *c, const sh_frame *req, mig *g, uint64_t wait_ms,
		 bool ticketed)
{
	if (g->state != MIG_DONE && wait_ms) {
		char x;
		int64_t until = shoal_deadline_in((int64_t)wait_ms * 1000000);
		g->users++; /* g stays while we wait on it */
		shoal_chan_recv(g->done, &x, until);
		g->users--;
	}
	msgpack_packer pk;
	if (g->state != MIG_DONE) {
		if (!ticketed)
			g->tickets++;
		sh_st_begin_reply(c, &pk);
		msgpack_pack_array(&pk, 4);
		msgpack_pack_false(&pk);
		msgpack_pack_uint64(&pk, g->ticket);
		msgpack_pack_uint64(&pk, atomic_load(&g->received));
		msgpack_pack_uint64(&pk, g->region_total);
		return sh_st_reply_ok(c, req, &pk);
	}
	if (ticketed && g->tickets)
		g->tickets--;
	int rc;
	if (g->rc) {
		rc = sh_st_reply_err(c, req, g->rc, "%s",
				     g->why[0] ? g->why : shoal_strerror(g->rc));
	} else {
		sh_st_begin_reply(c, &pk);
		msgpack_pack_array(&pk, 2);
		msgpack_pack_true(&pk);
		msgpack_pack_uint64(&pk, g->id);
		rc = sh_st_reply_ok(c, req, &pk);
	}
	migs_reap(cl);
	return rc;
}

static int op_migrate(sh_cluster *cl, st_conn *c, const sh_frame *req, sh_mp *m)
{
	uint32_t n, nl = 0, fl = 0;
	const char *name = NULL, *from = NULL;
	uint64_t id = 0, wait_ms, streams;
	if (sh_mp_array(m, &n) || n != 4 ||
	    (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &nl) : sh_mp_uint(m, &id)) ||
	    (!sh_mp_take_nil(m) && sh_mp_str(m, &from, &fl)) || sh_mp_uint(m, &streams) ||
	    sh_mp_uint(m, &wait_ms) || sh_mp_done(m) || streams > SH_PEER_STREAMS_MAX)
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "MIGRATE: expected [id or name, from or nil, streams (0 to "
				       "%d), wait_ms]",
				       SH_PEER_STREAMS_MAX);
	if (name ? (nl == 0 || nl > SH_NODE_MAX_NAME || memchr(name, 0, nl)) : id == 0)
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "MIGRATE: a name of 1 to %d bytes, or a nonzero id",
				       SH_NODE_MAX_NAME);
	/* here already? */
	st_obj *o = sh_store_find(cl->s, name, nl, id);
	if (o) {
		msgpack_packer pk;
		sh_st_begin_reply(c, &pk);
		msgpack_pack_array(&pk, 2);
		msgpack_pack_true(&pk);
		msgpack_pack_uint64(&pk, sh_store_info(o).id);
		return sh_st_reply_ok(c, req, &pk);
	}
	if (!from)
		return sh_st_reply_err(c, req, SHOAL_ENOENT,
				       "%s%.*s%s is not in this store, and no store to fetch it "
				       "from was named (from: HOST:PORT)",
				       name ? "object \"" : "object ", name ? (int)nl : 0,
				       name ? name : "", name ? "\"" : "");
	if (fl == 0 || fl >= sizeof(((mig *)0)->from) || memchr(from, 0, fl))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "MIGRATE: from must be HOST:PORT, 1 to 255 bytes");
	if (!cl->klen)
		return sh_st_reply_err(c, req, SHOAL_EACCES,
				       "this store has no cluster secret, so it cannot prove "
				       "itself to %.*s: start it with $SHOAL_SECRET_FILE or "
				       "$SHOAL_SECRET set",
				       (int)fl, from);
	if (wait_ms > MIG_WAIT_MAX_MS)
		wait_ms = MIG_WAIT_MAX_MS;
	mig *g = NULL;
	int rc = mig_get(cl, name, nl, id, from, fl, (uint32_t)streams, NULL, &g);
	if (rc)
		return sh_st_reply_err(c, req, rc, "MIGRATE: %s", shoal_strerror(rc));
	return reply(cl, c, req, g, wait_ms, false);
}

static int op_migwait(sh_cluster *cl, st_conn *c, const sh_frame *req, sh_mp *m)
{
	uint32_t n;
	uint64_t ticket, wait_ms;
	if (sh_mp_array(m, &n) || n != 2 || sh_mp_uint(m, &ticket) || sh_mp_uint(m, &wait_ms) ||
	    sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "MIGWAIT: expected [ticket, wait_ms]");
	if (wait_ms > MIG_WAIT_MAX_MS)
		wait_ms = MIG_WAIT_MAX_MS;
	for (mig *g = cl->migs->list; g; g = g->next)
		if (g->ticket == ticket)
			return reply(cl, c, req, g, wait_ms, true);
	return sh_st_reply_err(c, req, SHOAL_ENOENT,
			       "MIGWAIT: no migration %" PRIu64 " (it ended over %lld s ago)",
			       ticket, MIG_LINGER_NS / 1000000000LL);
}

int sh_migs_request(sh_cluster *cl, st_conn *c, const sh_frame *req, sh_mp *m)
{
	return req->op == SH_OP_MIGRATE ? op_migrate(cl, c, req, m) : op_migwait(cl, c, req, m);
}

/* ---- start and stop ---- */

int sh_migs_start(sh_cluster *cl)
{
	if (!(cl->migs = SH_NEW(sh_migs)))
		return SHOAL_ENOMEM;
	pthread_mutex_init(&cl->migs->pool_mu, NULL);
	return 0;
}

void sh_migs_stop(sh_cluster *cl)
{
	if (!cl->migs)
		return;
	/* a transfer's threads end when their sockets do */
	for (mig *g = cl->migs->list; g; g = g->next)
		if (g->state != MIG_DONE)
			sh_mig_cut(g);
	while (cl->migs->running) /* each thread's end (sh_mig_on_end, in the mail fiber) */
		sh_waitq_wait(&cl->migs->ended, SHOAL_FOREVER);
}

void sh_migs_free(sh_cluster *cl)
{
	sh_migs *ms = cl->migs;
	if (!ms)
		return;
	while (ms->list)
		mig_free(cl, ms->list);
	for (int i = 0; i < ms->npool; i++) {
		sh_channel_free(ms->pool[i].ch);
		close(ms->pool[i].fd);
	}
	pthread_mutex_destroy(&ms->pool_mu);
	SH_DELETE(ms);
	cl->migs = NULL;
}

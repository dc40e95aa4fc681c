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
 * peer and the bytes received; its region is closed, its room given back. */
#include "cluster/cluster.h"
#include "fiber/waitq.h"
#include "shm/shm.h"
#include "store/proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MIG_CONNECT_NS (5 * 1000000000LL)
/* No byte for this long mid-transfer: the peer or the link is gone. */
#define MIG_STALL_NS (10 * 1000000000LL)
/* A finished transfer's outcome waits this long at most for the asks that
 * hold a ticket to collect it. */
#define MIG_LINGER_NS (60 * 1000000000LL)
#define MIG_WAIT_MAX_MS 10000

typedef struct mig mig;

/* Links to other stores kept after a fetch, for the next from the same
 * one: a task's arguments, fetched one by one, would otherwise each pay a
 * connection and a handshake (ms on this machine). */
#define POOL_MAX 16
#define POOL_IDLE_NS (30 * 1000000000LL)

typedef struct idle_link {
	char from[256];
	int fd;
	sh_channel *ch;
	int64_t since;
} idle_link;

struct sh_migs {
	mig *list;
	uint64_t next_ticket;
	uint32_t running; /* threads */
	sh_waitq ended;	  /* the stop, waiting for running to reach 0 */
	pthread_mutex_t pool_mu;
	idle_link pool[POOL_MAX];
	int npool;
};

enum { MIG_CONNECTING, MIG_META, MIG_BYTES, MIG_DONE };

struct mig {
	sh_cluster *cl;
	mig *next;
	uint64_t ticket;
	/* what was asked: from whom, and an id or a name */
	char from[256];
	uint64_t key_id;
	char *key_name;
	size_t key_len;
	/* the outcome: rc, and then id or why */
	int state, rc;
	uint64_t id, sig, region;
	uint64_t total;	       /* the blobs' bytes: the thread's, until on_meta */
	uint64_t region_total; /* the same, the store's */
	char why[512];
	_Atomic uint64_t received;
	int64_t bytes_at;   /* when its bytes began to come (MIG_BYTES) */
	uint64_t tickets;   /* asks told to come back */
	uint32_t users;	    /* requests waiting on it now */
	int64_t done_at;    /* when it finished */
	shoal_chan *done;   /* closed when it finishes: wakes every waiter */
	sh_store_room room; /* taken for the region (room.charged, until it is the copy's) */
	bool yielded;	    /* a local put took its room back: it is ended */
	uint32_t streams;   /* the most links asked for; 0: SHOAL_MIGRATE_STREAMS */
	bool in_step;	    /* the first link ended its exchange cleanly: it may be kept */
	/* the thread's */
	pthread_t thread;
	int fds[SH_PEER_STREAMS_MAX]; /* the links' sockets (under mu: a stop ends them) */
	bool cut;		      /* (under mu) one failed: no more links */
	sh_store_region region_of;    /* the region's file, and mapping (huge pages) */
	sh_channel *ch;
	sh_bump a;
	sh_mig_reply r;
	shoal_node *root;
	char *name; /* the name the copy is bound to (NUL-terminated), or NULL */
	/* what the registry says the object is (has_expect), checked before a
	 * byte of it is taken */
	bool has_expect;
	uint64_t x_sig, x_bytes;
	char x_type[SH_NODE_MAX_KEY + 1];
	unsigned char x_meta[32];
	unsigned char *in;
	size_t in_cap;
	/* the hand-over between the thread and the store's: verdict 0 go on,
	 * else stop (a copy is here already: 1, or a failure) */
	sh_st_mail mail;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool answered;
	int verdict;
};

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
static void on_meta(shoal_store *s, sh_st_mail *m)
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
static void on_end(shoal_store *s, sh_st_mail *m)
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

static void cut(mig *g);

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
		cut(newest);
	}
	return true;
}

/* ---- the thread ---- */

/* A link to the source, the secret proven: its socket is in fds[slot]
 * (under mu), which a stop or a failed share shuts down. */
typedef struct link_slot {
	mig *g;
	uint32_t slot;
} link_slot;

/* The link's socket, where a stop can end it (cut). */
static void link_fd(int fd, void *arg)
{
	link_slot *ls = arg;
	mig *g = ls->g;
	pthread_mutex_lock(&g->mu);
	g->fds[ls->slot] = fd;
	if (g->cut && fd >= 0)
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&g->mu);
}

/* A link to the source: tried again with backoff while the source turns
 * strangers away (sh_tcp_open_auth), within MIG_CONNECT_NS. */
static int link_open(mig *g, uint32_t slot, sh_channel **ch, char *why, size_t whylen)
{
	sh_cluster *cl = g->cl;
	link_slot ls = {g, slot};
	int fd = -1;
	int rc = sh_tcp_open_auth(g->from, cl->key, cl->klen, SH_PEER_PROTO,
				  cl->opts->peer_no_encrypt, shoal_deadline_in(MIG_CONNECT_NS),
				  link_fd, &ls, &fd, ch, why, whylen);
	if (rc == 0)
		sh_channel_set_stall(*ch, MIG_STALL_NS);
	return rc;
}

static void link_close(mig *g, uint32_t slot, sh_channel *ch)
{
	sh_channel_free(ch);
	pthread_mutex_lock(&g->mu); /* a stop may be shutting it down */
	if (g->fds[slot] >= 0)
		close(g->fds[slot]);
	g->fds[slot] = -1;
	pthread_mutex_unlock(&g->mu);
}

/* Ends every link of g: its other shares fail at once. */
static void cut(mig *g)
{
	pthread_mutex_lock(&g->mu);
	g->cut = true;
	for (uint32_t i = 0; i < SH_PEER_STREAMS_MAX; i++)
		if (g->fds[i] >= 0)
			shutdown(g->fds[i], SHUT_RDWR);
	pthread_mutex_unlock(&g->mu);
}

static int send_request(sh_channel *ch, uint16_t op, uint64_t a, const char *name, size_t nl,
			uint64_t b)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 2);
	if (name) {
		msgpack_pack_str(&pk, nl);
		msgpack_pack_str_body(&pk, name, nl);
	} else {
		msgpack_pack_uint64(&pk, a);
	}
	msgpack_pack_uint64(&pk, b);
	sh_frame f = {.op = op, .seq = 1};
	int rc = w.err ? SHOAL_ENOMEM : sh_wbuf_frame_end(&w, &f);
	if (rc == 0)
		rc = sh_channel_write(ch, w.p, w.len, false, shoal_deadline_in(MIG_STALL_NS));
	sh_wbuf_fini(&w);
	return rc;
}

/* A source must keep this rate while its bytes come (--peer-min-rate). */
#define MIG_RATE_WINDOW_NS (5 * 1000000000LL)
#define MIG_MIN_RATE 1000000u

int sh_peer_recv_blobs(sh_channel *ch, const sh_mig_blob *blobs, uint64_t nblobs, uint64_t lo,
		       uint64_t hi, const sh_store_region *dst, uint64_t min_rate, int64_t deadline,
		       _Atomic uint64_t *got)
{
	sh_channel_set_min_rate(ch, min_rate ? min_rate : MIG_MIN_RATE, MIG_RATE_WINDOW_NS);
	uint64_t at = 0;
	size_t n = 0, cap = 0;
	sh_fd_range *v = NULL;
	int rc = 0;
	for (uint64_t j = 0; rc == 0 && j < nblobs && at < hi; j++) {
		const sh_mig_blob *b = &blobs[j];
		uint64_t x = lo > at ? lo : at, y = at + b->size < hi ? at + b->size : hi;
		if (x < y) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				sh_fd_range *q =
					shoal_realloc(v, cap * sizeof(*v), nc * sizeof(*v));
				if (!q) {
					rc = SHOAL_ENOMEM;
					break;
				}
				v = q;
				cap = nc;
			}
			v[n++] = (sh_fd_range){b->off + (x - at), y - x};
		}
		at += b->size;
	}
	if (rc == 0)
		rc = sh_channel_recv_ranges(ch, dst->fd, dst->map, v, n, deadline, got);
	sh_channel_set_min_rate(ch, 0, 0); /* a link kept idle owes no rate */
	if (v)
		shoal_free(v, cap * sizeof(*v));
	return rc;
}

/* Share i of the blobs' bytes, written at their places in the region. */
static int recv_share(mig *g, sh_channel *ch, uint32_t i)
{
	const sh_mig_reply *r = &g->r;
	uint64_t lo, hi;
	sh_peer_share(r->total, r->k, i, &lo, &hi);
	return sh_peer_recv_blobs(ch, r->blobs, r->nblobs, lo, hi, &g->region_of,
				  g->cl->opts->peer_min_rate, SHOAL_FOREVER, &g->received);
}

typedef struct share {
	mig *g;
	uint32_t i;
	pthread_t th;
	int rc;
	char why[256];
} share;

/* Another link: JOIN the transfer, receive share i. */
static void *share_main(void *arg)
{
	share *sh = arg;
	mig *g = sh->g;
	sh_channel *ch = NULL;
	int rc = link_open(g, sh->i, &ch, sh->why, sizeof(sh->why));
	if (rc == 0)
		rc = send_request(ch, SH_PEER_JOIN, g->r.token, NULL, 0, sh->i);
	unsigned char *in = NULL;
	size_t cap = 0, len;
	if (rc == 0)
		rc = sh_channel_read_frame(ch, &in, &cap, &len, 4096, false,
					   shoal_deadline_in(MIG_STALL_NS));
	sh_frame f;
	if (rc == 0 && (sh_frame_decode(in, len, &f, sh->why, sizeof(sh->why)) != 0 ||
			f.op != SH_PEER_JOIN || f.seq != 1 || f.oob || f.status)) {
		rc = f.status < 0 ? f.status : SHOAL_EPROTO;
		snprintf(sh->why, sizeof(sh->why), "JOIN refused");
	}
	if (in)
		shoal_free(in, cap);
	if (rc == 0 && (rc = recv_share(g, ch, sh->i)) != 0)
		snprintf(sh->why, sizeof(sh->why), "%s", sh_channel_error(ch));
	if (rc == 0 && sh_channel_pending(ch)) {
		rc = SHOAL_EPROTO;
		snprintf(sh->why, sizeof(sh->why),
			 "bytes came after share %u's: expected it to end there", sh->i);
	}
	if (rc)
		cut(g);
	link_close(g, sh->i, ch);
	sh->rc = rc;
	return NULL;
}

/* An idle link to g->from, as slot 0 of g's: true if there was one. */
static bool link_take(mig *g, sh_channel **ch)
{
	sh_migs *ms = g->cl->migs;
	int64_t now = shoal_now_ns();
	int fd = -1;
	pthread_mutex_lock(&ms->pool_mu);
	for (int i = ms->npool - 1; i >= 0 && fd < 0; i--) {
		idle_link *l = &ms->pool[i];
		bool stale = now - l->since > POOL_IDLE_NS;
		if (!stale && strcmp(l->from, g->from))
			continue;
		if (!stale) {
			fd = l->fd;
			*ch = l->ch;
		} else {
			sh_channel_free(l->ch);
			close(l->fd);
		}
		ms->pool[i] = ms->pool[--ms->npool];
	}
	pthread_mutex_unlock(&ms->pool_mu);
	if (fd < 0)
		return false;
	pthread_mutex_lock(&g->mu);
	g->fds[0] = fd;
	pthread_mutex_unlock(&g->mu);
	return true;
}

/* Keeps g's first link for the next fetch from the same store. */
static void link_keep(mig *g, sh_channel *ch)
{
	sh_migs *ms = g->cl->migs;
	pthread_mutex_lock(&g->mu);
	int fd = g->fds[0];
	g->fds[0] = -1;
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_lock(&ms->pool_mu);
	if (ms->npool == POOL_MAX) { /* the oldest goes */
		int old = 0;
		for (int i = 1; i < ms->npool; i++)
			if (ms->pool[i].since < ms->pool[old].since)
				old = i;
		sh_channel_free(ms->pool[old].ch);
		close(ms->pool[old].fd);
		ms->pool[old] = ms->pool[--ms->npool];
	}
	idle_link *l = &ms->pool[ms->npool++];
	snprintf(l->from, sizeof(l->from), "%s", g->from);
	l->fd = fd;
	l->ch = ch;
	l->since = shoal_now_ns();
	pthread_mutex_unlock(&ms->pool_mu);
}

/* FETCH on a link, its answer into g->in: a kept link the source may
 * have closed meanwhile is replaced by a fresh one, once. */
static int ask(mig *g, size_t *len, char *why, size_t whylen)
{
	sh_channel *ch = NULL;
	bool kept = link_take(g, &ch);
	for (;;) {
		int rc = 0;
		if (!kept && (rc = link_open(g, 0, &ch, why, whylen)) != 0) {
			g->ch = ch;
			return sh_say(g->why, sizeof(g->why), rc,
				      "cannot reach the store at %s: %s", g->from, why);
		}
		g->ch = ch;
		rc = send_request(ch, SH_PEER_FETCH, g->key_id, g->key_name, g->key_len,
				  g->streams ? g->streams : SHOAL_MIGRATE_STREAMS);
		if (rc == 0)
			rc = sh_channel_read_frame(ch, &g->in, &g->in_cap, len,
						   SH_PEER_META_MAX + 4096, false,
						   shoal_deadline_in(MIG_STALL_NS));
		if (rc == 0)
			return 0;
		if (kept && (rc == SHOAL_ECLOSED || rc == SHOAL_ECONNRESET || rc == SHOAL_EPROTO)) {
			link_close(g, 0, ch);
			g->ch = ch = NULL;
			kept = false;
			continue;
		}
		if (rc == SHOAL_EMSGSIZE)
			return sh_say(
				g->why, sizeof(g->why), rc,
				"the store at %s answered FETCH with a frame over %u bytes: "
				"expected an answer of at most %u (a metadata tree of at most "
				"%u bytes)",
				g->from, SH_PEER_META_MAX + 4096, SH_PEER_META_MAX + 4096,
				SH_PEER_META_MAX);
		return sh_say(g->why, sizeof(g->why), rc, "the store at %s: %s%s%s", g->from,
			      shoal_strerror(rc), sh_channel_error(ch)[0] ? ": " : "",
			      sh_channel_error(ch));
	}
}

/* What came against what the registry's signed record says: the same id,
 * signature, type, bytes and tree (its digest). */
static int expect_check(mig *g, char *why, size_t wl)
{
	if (!g->has_expect)
		return 0;
	unsigned char d[32];
	int rc = sh_node_digest(g->r.root, d);
	if (rc) {
		snprintf(why, wl, "the answer's tree could not be digested: %s",
			 shoal_strerror(rc));
		return rc;
	}
	const char *what = g->r.sig != g->x_sig			? "signature"
			   : strcmp(g->r.root->type, g->x_type) ? "type"
			   : g->r.total != g->x_bytes		? "bytes"
			   : memcmp(d, g->x_meta, 32) != 0	? "metadata (its digest)"
								: NULL;
	if (!what)
		return 0;
	snprintf(why, wl,
		 "object %016" PRIx64 " came with another %s than the registry's signed record "
		 "(type %.40s, %" PRIu64 " bytes; the record: %.40s, %" PRIu64 " bytes): refused",
		 g->r.id, what, g->r.root->type, g->r.total, g->x_type, g->x_bytes);
	return SHOAL_EPROTO;
}

static int fetch(mig *g)
{
	char why[256];
	size_t len = 0;
	int rc = ask(g, &len, why, sizeof(why));
	if (rc)
		return rc;
	sh_channel *ch = g->ch;
	if ((rc = sh_mig_parse_reply(g->in, len, &g->r, &g->a, why, sizeof(why))) != 0) {
		g->in_step = rc < 0 && rc != SHOAL_EPROTO && rc != SHOAL_EBADMSG;
		return g->in_step ? sh_say(g->why, sizeof(g->why), rc, "%s", why)
				  : sh_say(g->why, sizeof(g->why), rc, "the store at %s: %s",
					   g->from, why);
	}
	/* What comes is what was asked for: the id, or the name, which the
	 * copy is bound to (never a name the source gives instead) */
	if (g->key_id && g->r.id != g->key_id)
		return sh_say(g->why, sizeof(g->why), SHOAL_EPROTO,
			      "the store at %s sent object %016" PRIx64 " for %016" PRIx64
			      ": expected the object asked for",
			      g->from, g->r.id, g->key_id);
	if (g->key_name && (!g->r.name || strcmp(g->r.name, g->key_name) != 0))
		return sh_say(g->why, sizeof(g->why), SHOAL_EPROTO,
			      "the store at %s answered for \"%.200s\" with %s%.200s%s: expected "
			      "the object named \"%.200s\"",
			      g->from, g->key_name, g->r.name ? "\"" : "",
			      g->r.name ? g->r.name : "an unnamed object", g->r.name ? "\"" : "",
			      g->key_name);
	if ((rc = expect_check(g, why, sizeof(why))) != 0)
		return sh_say(g->why, sizeof(g->why), rc, "the store at %s: %s", g->from, why);
	g->id = g->r.id;
	g->sig = g->r.sig;
	g->region = g->r.region;
	g->root = g->r.root;
	g->total = g->r.total;
	if (g->key_name && !(g->name = shoal_alloc(g->key_len + 1)))
		return sh_say(g->why, sizeof(g->why), SHOAL_ENOMEM, "out of memory");
	if (g->key_name)
		memcpy(g->name, g->key_name, g->key_len + 1);
	/* is it here already, is there room? */
	g->answered = false;
	g->mail.fn = on_meta;
	sh_store_post(g->cl->s, &g->mail);
	pthread_mutex_lock(&g->mu);
	while (!g->answered)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	if (g->verdict == 1)
		return 0; /* a copy is here: nothing to receive (the link is out of step) */
	if (g->verdict)
		return g->verdict;
	/* the room's spare, or a fresh region: with a mapping (huge pages, a
	 * spare) the bytes are received into it, no fault a 4 KiB page, no
	 * write(2), which hugetlbfs has not; fresh 4 KiB pages would be faulted
	 * one by one there, the kernel's pwritev is cheaper */
	if ((rc = sh_store_copy_region(g->cl->s, g->region, &g->room, &g->region_of)) != 0)
		return sh_say(g->why, sizeof(g->why), rc,
			      "object %016" PRIx64 ": a region of %" PRIu64 " bytes: %s", g->id,
			      g->region, shoal_strerror(rc));
	share sh[SH_PEER_STREAMS_MAX];
	uint32_t started = 1;
	for (; started < g->r.k; started++) {
		sh[started] = (share){.g = g, .i = started};
		if (pthread_create(&sh[started].th, NULL, share_main, &sh[started]) != 0)
			break;
	}
	if (started < g->r.k)
		cut(g);
	rc = started < g->r.k ? SHOAL_ENOMEM : recv_share(g, ch, 0);
	const char *cause = rc && rc != SHOAL_ENOMEM ? sh_channel_error(ch) : "";
	if (rc)
		cut(g);
	for (uint32_t i = 1; i < started; i++) {
		pthread_join(sh[i].th, NULL);
		if (!rc && sh[i].rc) {
			rc = sh[i].rc;
			cause = sh[i].why;
		}
	}
	/* every page the copy needs exists, and no writable mapping may
	 * remain for the seal */
	sh_store_copy_region_done(&g->region_of, rc != 0);
	if (rc)
		return sh_say(g->why, sizeof(g->why), rc,
			      "object %016" PRIx64 " from %s: the transfer broke after %" PRIu64
			      " of %" PRIu64 " bytes: %s%s%s",
			      g->id, g->from, (uint64_t)atomic_load(&g->received), g->total,
			      shoal_strerror(rc), cause[0] ? ": " : "", cause);
	if (sh_channel_pending(ch))
		return sh_say(g->why, sizeof(g->why), SHOAL_EPROTO,
			      "object %016" PRIx64 " from %s: bytes came after the %" PRIu64
			      " its answer announced: expected the transfer to end there",
			      g->id, g->from, g->total);
	g->in_step = g->r.k == 1; /* every byte of the one link read */
	if ((rc = sh_memfd_seal(g->region_of.fd)) != 0)
		return sh_say(g->why, sizeof(g->why), rc,
			      "object %016" PRIx64 ": sealing its region: %s", g->id,
			      shoal_strerror(rc));
	return 0;
}

static void *mig_main(void *arg)
{
	mig *g = arg;
	g->rc = fetch(g);
	if ((g->rc || g->verdict == 1) && g->region_of.fd >= 0) {
		close(g->region_of.fd);
		g->region_of.fd = -1;
	}
	if (g->in_step && g->ch)
		link_keep(g, g->ch);
	else
		link_close(g, 0, g->ch);
	g->ch = NULL;
	if (g->in)
		shoal_free(g->in, g->in_cap);
	g->in = NULL;
	g->mail.fn = on_end;
	sh_store_post(g->cl->s, &g->mail);
	return NULL;
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
		rc = -pthread_create(&g->thread, NULL, mig_main, g);
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
			cut(g);
	while (cl->migs->running) /* each thread's end (on_end, in the mail fiber) */
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

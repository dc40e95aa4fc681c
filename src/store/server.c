/* The store server: shoald's and an embedded store's loop. One thread
 * runs it, as fibers over one poller: a listener (net/listener.h), per
 * connection a request fiber of the listener's group reading the request
 * ring and a watcher that sees on the socket when the client is gone, and
 * a mail fiber. The threads of migrations, of peers' transfers and of the
 * registry touch none of the store's state: they post what they finished
 * to the mailbox (sh_store_post), whose fiber runs it here; the spares'
 * worker shares only its lists (spare.c). So the mailbox's is the one lock
 * taken here.
 *
 * The jobs the loop ties together are in files of their own: requests
 * (ops.c), the arena of small objects (arena.c), segments, seals and
 * objects (segments.c), names (names.c). Here: opening and closing, the
 * connections, and persistence: the state directory's objects written and
 * read back at start (state.c keeps the files). Gets of objects that are
 * elsewhere in the cluster (the registry's, else the --peers-file stores')
 * are fetched as a migration (migrate.c). */
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

uint64_t sh_st_fds_held(const shoal_store *s)
{
	return s->nclients * FDS_PER_CONN + s->segs.n + (s->spares ? sh_spares_fds(s->spares) : 0);
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
		sh_st_region_drop(c, val);
	}
	sh_map_fini(&c->regions);
	it = 0;
	while (sh_map_next(&c->sent, &it, &key, &val)) {
		st_seg *g = sh_map_get(&s->segs, key);
		if (g)
			g->mapped--;
	}
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
		/* woken when a request gives back what it took */
		if (sh_waitq_wait(&s->req_room, deadline) == SHOAL_ECANCELED)
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
			rc = sh_st_handle(c, len);
		c->srv->req_used -= charged;
		if (charged)
			sh_waitq_wake_all(&c->srv->req_room);
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

/* Whether one more connection fits the descriptor budget (the listener's
 * room). */
static bool conn_room(void *arg, char *why, size_t whylen)
{
	shoal_store *s = arg;
	if (sh_st_fds_held(s) + FDS_PER_CONN <= s->fd_budget)
		return true;
	snprintf(why, whylen,
		 "%" PRIu64 " clients and %zu segments hold %" PRIu64 " of the %" PRIu64
		 " descriptors the store may use",
		 s->nclients, (size_t)s->segs.n, sh_st_fds_held(s), s->fd_budget);
	return false;
}

/* A connection the listener took: its st_conn, served by a fiber of the
 * listener's group. */
static int conn_take(void *arg, sh_accepted *a, char *why, size_t whylen)
{
	shoal_store *s = arg;
	st_conn *c = SH_NEW(st_conn);
	if (!c) {
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	c->srv = s;
	sh_link_init(&c->l, a->fd);
	c->pid = a->pid;
	c->id = ++s->next_client;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nclients++;
	sh_wbuf_init(&c->out);
	int rc = sh_listener_spawn(&s->listener, conn_main, c, "store-conn");
	if (rc) {
		snprintf(why, whylen, "out of memory");
		c->l.sock = -1; /* the listener closes the socket */
		conn_free(c);
	}
	return rc;
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
		if (sh_efd_wait(s->mail_efd, SHOAL_FOREVER) == SHOAL_ECANCELED)
			return NULL;
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

static int server_start(void *arg)
{
	shoal_store *s = arg;
	sh_listener_opts lo = {.area = "store",
			       .lsock = s->lsock,
			       .group = s->opts.group,
			       .room = conn_room,
			       .take = conn_take,
			       .arg = s,
			       .fiber_name = "store-accept"};
	int rc;
	if ((rc = sh_listener_start(&s->listener, &lo)))
		sh_error("store", "accept fiber: %s", shoal_strerror(rc));
	if (rc == 0 &&
	    (rc = shoal_spawn(&s->mail, mail_main, s, &(shoal_fiber_opts){.name = "store-mail"})))
		sh_error("store", "mail fiber: %s", shoal_strerror(rc));
	if (rc == 0 && (rc = sh_st_spill_start(s)) != 0)
		sh_error("store", "spill fiber: %s", shoal_strerror(rc));
	if (rc == 0 && s->hooks.serve && (rc = s->hooks.serve(s->hooks.ctx)) != 0)
		sh_error("store", "what extends the store: %s", shoal_strerror(rc));
	return rc;
}

static void server_stop(void *arg)
{
	shoal_store *s = arg;
	s->stopping = true;
	sh_listener_close(&s->listener);
	/* before the connections: a create waiting for room wakes and fails */
	sh_st_spill_stop(s);
	/* what extends the store ends first (the registry's and transfers'
	 * threads), and then the connections (whose requests may wait on
	 * them): all post to the mail fiber, which goes last */
	if (s->hooks.stop)
		s->hooks.stop(s->hooks.ctx);
	/* Closing a connection's rings ends its fiber, which frees it; the
	 * listener's group is done when the last one is. */
	for (st_conn *c = s->conns; c; c = c->next)
		sh_link_shut(&c->l);
	sh_listener_stop(&s->listener, false, SHOAL_FOREVER);
	if (s->mail) {
		shoal_cancel(s->mail);
		shoal_join(s->mail, NULL);
		s->mail = NULL;
	}
	shoal_fd_forget(s->lsock);
	shoal_fd_forget(s->mail_efd);
}

/* Until shoal_store_close rings stop_efd. */
static void *server_thread(void *arg)
{
	sh_service_run(&(sh_service){.area = "store",
				     .stop_efd = ((shoal_store *)arg)->stop_efd,
				     .start = server_start,
				     .stop = server_stop,
				     .arg = arg});
	return NULL;
}

void shoal_store_opts_init(shoal_store_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->group = (gid_t)-1;
	o->spares = SHOAL_STORE_SPARES_AUTO;
}

/* ---- the state directory ---- */

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

int sh_st_obj_record(shoal_store *s, st_obj *o, const char *name, size_t name_len, sh_wbuf *w,
		     int *fds, uint64_t *sizes, char *why, size_t whylen)
{
	sh_bump a = {0};
	shoal_node *root;
	sh_mp m;
	sh_mp_init(&m, o->meta, o->meta_len);
	int rc = sh_node_decode(&m, &a, &root, why, whylen);
	if (rc == 0)
		rc = blobs_for_state(s, o, root);
	if (rc == 0) {
		msgpack_packer pk;
		sh_wbuf_packer(w, &pk);
		msgpack_pack_array(&pk, 2);
		if (name) {
			msgpack_pack_str(&pk, name_len);
			msgpack_pack_str_body(&pk, name, name_len);
		} else
			msgpack_pack_nil(&pk);
		sh_node_pack(&pk, root);
		if (w->err) {
			rc = SHOAL_ENOMEM;
			snprintf(why, whylen, "out of memory packing object %016" PRIx64, o->id);
		}
	}
	for (uint32_t i = 0; rc == 0 && i < o->nsegs; i++) {
		fds[i] = o->segs[i]->fd;
		sizes[i] = o->segs[i]->size;
	}
	sh_bump_fini(&a);
	return rc;
}

/* Writes persistent object o, named name (or not), into the state
 * directory. */
int sh_st_persist_obj(shoal_store *s, st_obj *o, const char *name, size_t name_len, char *why,
		      size_t whylen)
{
	int *fds = o->nsegs ? shoal_alloc(o->nsegs * sizeof(int)) : NULL;
	uint64_t *sizes = o->nsegs ? shoal_alloc(o->nsegs * sizeof(uint64_t)) : NULL;
	sh_wbuf w;
	sh_wbuf_init(&w);
	int rc = o->nsegs && (!fds || !sizes) ? SHOAL_ENOMEM : 0;
	if (rc)
		snprintf(why, whylen, "out of memory writing object %016" PRIx64 " to the state",
			 o->id);
	if (rc == 0)
		rc = sh_st_obj_record(s, o, name, name_len, &w, fds, sizes, why, whylen);
	if (rc == 0) {
		sh_state_rec r = {.id = o->id,
				  .sig = o->sig,
				  .meta = w.p,
				  .meta_len = w.len,
				  .nsegs = o->nsegs,
				  .seg_fds = fds,
				  .seg_sizes = sizes};
		rc = sh_state_write(s->state, &r, why, whylen);
		o->gen = r.gen;
	}
	sh_wbuf_fini(&w);
	if (fds)
		shoal_free(fds, o->nsegs * sizeof(int));
	if (sizes)
		shoal_free(sizes, o->nsegs * sizeof(uint64_t));
	return rc;
}

/* One object read back from the state directory (sh_state_load): checked
 * as a seal request is, placed within --size and the descriptor budget,
 * and served under its id, signature and name. */
static int restore_obj(void *arg, sh_state_rec *r, char *why, size_t whylen)
{
	shoal_store *s = arg;
	uint32_t name_len = 0;
	const char *name = NULL;
	sh_bump a = {0};
	shoal_node *root = NULL;
	st_obj *o = NULL, *old = NULL;
	int rc = sh_rec_tree(r, &a, &root, &name, &name_len, why, whylen);
	if (rc == 0 && name && (old = sh_st_name_find(s, name, name_len)) && old->gen >= r->gen) {
		snprintf(why, whylen, "replaced by %016" PRIx64 ", a newer object named %.*s",
			 old->id, (int)(name_len > 200 ? 200 : name_len), name);
		rc = SH_STATE_SUPERSEDED;
	}
	/* with a spill directory its bytes stay in the file until a get */
	if (rc == 0 && s->spiller)
		rc = sh_st_spill_adopt(s, r, root, &o, why, whylen);
	else if (rc == 0)
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
	int kept = sh_state_load(s->state, s->spiller != NULL, sh_st_restore_fits, restore_obj, s);
	if (s->spiller)
		sh_info("store",
			"state %s: %d persistent objects back, each read from its file at its "
			"first get",
			s->opts.state_dir, kept);
	else
		sh_info("store",
			"state %s: %d persistent objects back, %" PRIu64 " bytes of %" PRIu64,
			s->opts.state_dir, kept, s->used, s->capacity);
	return 0;
}

static int make_socket(shoal_store *s)
{
	return sh_link_listen(s->opts.socket_path, "store", s->opts.group, s->path, sizeof(s->path),
			      &s->lsock);
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
		sh_st_obj_free(s, o);
	}
	while (s->segs.n) {
		it = 0;
		if (!sh_map_next(&s->segs, &it, &key, &val))
			break;
		sh_st_seg_free(s, val);
	}
	sh_st_spill_close(s);
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
	int rc = sh_st_arena_make(s);
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
	if (rc == 0 && s->opts.spill_dir)
		rc = sh_st_spill_open(s);
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

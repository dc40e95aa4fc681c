/* The task engine: what shoal-engine runs, and `python3 -m shoal.engine`
 * with the Python module's functions built in (cfg->init). It loads a
 * library of functions (as an extension runner does), connects to the
 * controller as an engine, and runs the RUN batches it gets in order,
 * sending results back in DONE batches: whenever a batch of them is full,
 * 100 us after the last was sent, and when the RUN batch is done. A
 * flusher thread sends them too when one task runs long, so that a result
 * does not wait for the tasks behind it. A thread beside it watches the
 * socket, so that the engine ends when the controller does.
 *
 * The controller drops the tasks of a client that went: on this host by
 * marking their entries in the page it shares with us, over TCP in DROP
 * frames behind the RUN batches. Over TCP the engine reads ahead of the
 * batch it runs (between tasks, and the flusher while one runs long), so
 * that it skips the entries it has not reached, and a running task hears
 * of it (shoal_ext_cancelled), within WATCH_NS. */
#include "net/net.h"
#include "rpc/ext_lib.h"
#include "rpc/value.h"
#include "shm/shm.h"
#include "tasks/proto.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_NS 100000
/* How long results wait, at most, while a task runs: the flusher's tick
 * while the engine is busy (a thousand wake-ups a second at most). */
#define FLUSHER_NS 1000000
/* Over TCP: how often the flusher reads ahead while tasks run, and how
 * often the engine does between tasks (one recv when nothing came). */
#define WATCH_NS 10000000
#define LOOK_NS 100000
/* Bytes of frames read ahead at most: the window of small tasks (those
 * under SH_TASKS_REF_MIN) fits; DROP frames behind more than that, large
 * tasks, are seen when the engine reaches them. */
#define LOOK_BYTES ((size_t)4 << 20)
/* Frames kept to read into. */
#define POOL_MAX 16
/* Dropped entries the engine has not reached, at most: twice the largest
 * window; a controller that drops more is broken. */
#define DROPS_MAX (2 * (size_t)SH_TASKS_WINDOW_MAX)

/* A frame from the controller, with its out-of-band bytes (over TCP, read
 * with it; on this host, read from the ring when its entry runs). */
typedef struct rx_frame {
	struct rx_frame *next;
	unsigned char *p, *oob;
	size_t cap, len, oob_cap;
	sh_frame f;
} rx_frame;

typedef struct engine {
	sh_link l;
	int tcp;	/* the controller over TCP (then l is unused), or -1 */
	sh_channel *ch; /* the secure channel on tcp */
	sh_ext_lib lib;
	sh_wbuf w; /* the DONE batch */
	uint32_t nw;
	int64_t last_flush;
	shoal_vbuf in, out;
	const char *name;
	/* The DONE batch is shared with the flusher: lock guards w, nw,
	 * last_flush, the writes of DONE batches and what follows. */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	uint64_t seq;  /* tasks started */
	uint64_t rseq; /* RUN entries received: the one being run now */
	/* where the controller learns which entry we start, before we do:
	 * its page (on this host: sh_tk_page_bytes), or a STARTED frame (over
	 * TCP) */
	_Atomic uint64_t *page;
	size_t page_len;
	sh_wbuf st;
	/* Over TCP, under rlock: frames read ahead of the one being run,
	 * frames to read into (warm: a fresh buffer costs page faults), and
	 * the read's error once one failed. */
	pthread_mutex_t rlock;
	rx_frame *qhead, *qtail, *pool;
	size_t qbytes;
	uint32_t npool;
	int read_rc;
	int64_t last_look;
	/* Over TCP, under lock: entries not reached yet that the controller
	 * dropped (seq -> 1); the one being run, once dropped (what
	 * shoal_ext_cancelled reads). */
	sh_map drops;
	_Atomic uint64_t cancel;
	bool running;	 /* a task runs now */
	bool idle, stop; /* the flusher waits for work; it is to end */
	int flusher_rc;	 /* a failed write of the flusher's */
} engine;

/* Sends the DONE batch, and then the frame in st if it holds one (over
 * TCP: both in one write); the lock is held. */
static int flush(engine *g)
{
	bool st = g->st.len > 0;
	if (g->nw == 0 && !st)
		return 0;
	int rc = g->nw ? sh_tk_batch_end(&g->w, g->nw, SH_TK_DONE) : 0;
	sh_msg_part parts[2] = {{g->w.p, g->nw ? g->w.len : 0}, {g->st.p, g->st.len}};
	if (rc == 0 && g->tcp >= 0)
		rc = sh_channel_writev(g->ch, parts + !g->nw, (g->nw ? 1 : 0) + st, false,
				       SHOAL_FOREVER);
	else if (rc == 0 && g->nw)
		rc = sh_msg_write(&g->l.up, g->w.p, g->w.len, SHOAL_FOREVER);
	sh_wbuf_reset(&g->st);
	if (g->nw == 0)
		return rc;
	if (g->w.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&g->w);
	g->nw = 0;
	sh_tk_batch_begin(&g->w);
	g->last_flush = shoal_now_ns();
	return rc;
}

static void look_ahead(engine *g);

/* Sends what waits in the DONE batch when one task has been running for
 * FLUSHER_NS: results are not held up by a slow task behind them. Over
 * TCP it also reads ahead every WATCH_NS while tasks run, so that a
 * running task hears that its client went; it sleeps once a tick passes
 * with none. */
static void *flusher_main(void *arg)
{
	engine *g = arg;
	bool tcp = g->tcp >= 0;
	uint64_t seen = 0;
	pthread_mutex_lock(&g->lock);
	while (!g->stop) {
		bool watch = tcp && (g->running || g->seq != seen);
		if (!watch && (!g->running || !g->nw)) {
			g->idle = true;
			pthread_cond_wait(&g->wake, &g->lock);
			g->idle = false;
			continue;
		}
		uint64_t seq = g->seq;
		int64_t until = shoal_now_ns() + (g->running && g->nw ? FLUSHER_NS : WATCH_NS);
		struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
		pthread_cond_timedwait(&g->wake, &g->lock, &ts);
		if (!g->stop && g->running && g->seq == seq && g->nw && g->flusher_rc == 0)
			g->flusher_rc = flush(g);
		if (tcp && !g->stop && shoal_now_ns() >= until) {
			seen = seq;
			pthread_mutex_unlock(&g->lock);
			if (pthread_mutex_trylock(&g->rlock) == 0) { /* else the engine reads */
				look_ahead(g);
				pthread_mutex_unlock(&g->rlock);
			}
			pthread_mutex_lock(&g->lock);
		}
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* A task starts: the controller is told first (it must know, should we
 * die, that the tasks after it never started), and the flusher watches it
 * if results wait. 1: the controller dropped it (its client went): skip
 * it, without an answer. */
static int task_starts(engine *g)
{
	int rc = 0;
	if (g->page) {
		size_t nslots = g->page_len / 8 - 1;
		if (atomic_load_explicit(&g->page[1 + g->rseq % nslots], memory_order_acquire) ==
		    g->rseq)
			return 1;
	} else if (atomic_load_explicit(&g->cancel, memory_order_acquire) == g->rseq) {
		return 1; /* dropped since it was reached */
	}
	pthread_mutex_lock(&g->lock);
	if (g->page) {
		atomic_store_explicit(&g->page[0], g->rseq, memory_order_release);
	} else {
		msgpack_packer pk;
		sh_tk_batch_begin(&g->st);
		sh_wbuf_packer(&g->st, &pk);
		msgpack_pack_uint64(&pk, g->rseq);
		/* with the results so far: one write */
		if ((rc = sh_tk_batch_end(&g->st, 1, SH_TK_STARTED)) == 0)
			rc = flush(g);
	}
	g->seq++;
	g->running = true;
	if (g->idle && (g->nw || g->tcp >= 0))
		pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->lock);
	return rc;
}

/* Runs task r (its args at m) and adds its result to the batch. */
static int run_call(engine *g, const sh_tk_run *r, sh_mp *m)
{
	uint64_t tid = r->tid;
	const char *fname = r->fn;
	uint32_t fl = r->fn_len;
	shoal_vbuf_reset(&g->in);
	shoal_vbuf_reset(&g->out);
	shoal_ext_ctx ctx = {.vb = &g->out};
	shoal_value *args = NULL, *result = NULL;
	char why[SH_EXT_MSG_MAX];
	/* the batch's buffer outlives the task: bytes are used where they lie */
	int status = sh_value_decode_borrowing(m, &g->in, &args, why, sizeof(why));
	if (status == SHOAL_EBADMSG)
		return SHOAL_EPROTO; /* the controller forwards what clients encoded */
	shoal_ext_fn fn = status == 0 ? sh_ext_lib_find(&g->lib, fname, fl) : NULL;
	if (status == 0 && !fn) {
		status = SHOAL_ENOENT;
		snprintf(why, sizeof(why), "engine %s has no function %.*s", g->name, (int)fl,
			 fname);
	}
	if (status == 0 && (status = task_starts(g)) != 0) {
		shoal_vbuf_reset(&g->in);
		return status == 1 ? 0 : status; /* dropped; or the controller is gone */
	}
	if (status == 0) {
		/* where a gone client's task is marked */
		ctx.gone = g->page ? &g->page[1 + g->rseq % (g->page_len / 8 - 1)] : &g->cancel;
		ctx.task = g->rseq;
		status = fn(&ctx, args, &result);
		if (status > 0)
			status = SHOAL_EIO;
		if (status == 0 && g->out.err)
			status = g->out.err;
		/* Large results go by reference, sealed for the client (its
		 * objects from then on), when both have the store; else inline.
		 * The result is a copy of the tree, so arguments it points to are
		 * not changed. */
		if (status == 0 && result && g->out.store && r->owner &&
		    sh_value_needs_share(result)) {
			shoal_value *c = sh_value_clone(&g->out, result);
			g->out.owner = r->owner;
			if (!c)
				status = SHOAL_ENOMEM;
			else if ((status = sh_value_share_min(&g->out, c, SH_TASKS_SHARE_MIN,
							      ctx.msg, sizeof(ctx.msg))) == 0)
				result = c;
			else if (status == SHOAL_ENOENT) /* the client is not on our store */
				status = 0, ctx.msg[0] = 0;
			g->out.owner = 0;
		}
		if (status)
			snprintf(why, sizeof(why), "%s",
				 ctx.msg[0] ? ctx.msg : shoal_strerror(status));
	}
	msgpack_packer pk;
	pthread_mutex_lock(&g->lock);
	g->running = false;
	sh_wbuf_packer(&g->w, &pk);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint64(&pk, tid);
	msgpack_pack_int32(&pk, status);
	shoal_value nil = {.type = SHOAL_V_NIL};
	if (status == 0) {
		msgpack_pack_array(&pk, 2);
		sh_value_pack(&pk, result ? result : &nil, g->out.store, NULL);
		/* the objects made for it are the client's now */
		msgpack_pack_array(&pk, g->out.nmade);
		for (uint32_t i = 0; i < g->out.nmade; i++)
			msgpack_pack_uint64(&pk, g->out.made[i]);
		g->out.nmade = 0;
	} else {
		sh_mp_pack_cstr(&pk, why);
	}
	g->nw++;
	int rc = g->flusher_rc;
	if (rc == 0 &&
	    (g->w.len >= SH_TASKS_BATCH_BYTES || shoal_now_ns() - g->last_flush > FLUSH_NS))
		rc = flush(g);
	pthread_mutex_unlock(&g->lock);
	/* The result is encoded: what the arguments mapped from the store is
	 * let go now, not at the next task (the client deletes those objects
	 * once the result is in). */
	shoal_vbuf_reset(&g->in);
	shoal_vbuf_reset(&g->out);
	return rc;
}

/* A task alone in its frame, its fn and args (n bytes) and verdict out of
 * band after it (over TCP read with the frame; on this host read from the
 * ring now), then run. */
static int run_oob(engine *g, sh_tk_run *r, rx_frame *fr)
{
	uint64_t n = r->oob;
	if (fr->f.oob != n + 8)
		return SHOAL_EPROTO;
	if (g->tcp < 0) {
		if (fr->oob_cap < fr->f.oob) {
			unsigned char *p = shoal_realloc(fr->oob, fr->oob_cap, fr->f.oob);
			if (!p)
				return SHOAL_ENOMEM;
			fr->oob = p;
			fr->oob_cap = fr->f.oob;
		}
		sh_msg_part part = {fr->oob, fr->f.oob};
		int rc = sh_msg_read_parts(&g->l.down, &part, 1, SHOAL_FOREVER);
		if (rc)
			return rc;
	}
	uint64_t verdict;
	memcpy(&verdict, fr->oob + n, 8);
	if (verdict != SH_TK_RUN_IT)
		return 0; /* its client went: nothing to run, nobody to answer */
	sh_mp m;
	sh_mp_init(&m, fr->oob, n);
	if (sh_mp_str(&m, &r->fn, &r->fn_len) || r->fn_len == 0)
		return SHOAL_EPROTO;
	return run_call(g, r, &m);
}

/* ---- over TCP: reading ahead, and DROP frames ---- */

/* A DROP frame: [seq...], RUN entries whose client went. One not reached
 * yet is skipped when it is; the one reached (running, or about to) is
 * asked to give up; those done are past helping. */
static int on_drop(engine *g, const rx_frame *fr)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, fr->p + SH_FRAME_HDR, fr->f.body_len);
	if (fr->f.oob || sh_mp_array(&m, &n))
		return SHOAL_EPROTO;
	int rc = 0;
	pthread_mutex_lock(&g->lock);
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		uint64_t seq;
		if (sh_mp_uint(&m, &seq) || (seq > g->rseq && g->drops.n >= DROPS_MAX))
			rc = SHOAL_EPROTO;
		else if (seq > g->rseq)
			rc = sh_map_put(&g->drops, seq, (void *)1);
		else if (seq == g->rseq)
			atomic_store_explicit(&g->cancel, seq, memory_order_release);
	}
	pthread_mutex_unlock(&g->lock);
	return rc ? rc : sh_mp_done(&m) ? SHOAL_EPROTO : 0;
}

/* Reads the next frame into fr, with its out-of-band bytes. 1: it was a
 * DROP frame, taken in. deadline: for its first byte (0: only if it is
 * here already). */
static int read_one(engine *g, rx_frame *fr, int64_t deadline)
{
	char why[160];
	int rc = sh_channel_read_frame(g->ch, &fr->p, &fr->cap, &fr->len, SH_TASKS_MSG_MAX, false,
				       deadline);
	if (rc)
		return rc;
	if ((rc = sh_frame_decode(fr->p, fr->len, &fr->f, why, sizeof(why))) != 0 ||
	    (fr->f.op != SH_TK_RUN && fr->f.op != SH_TK_DROP)) {
		fprintf(stderr,
			"shoal-engine %s: a frame that is neither a RUN batch nor a DROP: %s\n",
			g->name, rc ? why : "another operation");
		return SHOAL_EPROTO;
	}
	if (fr->f.op == SH_TK_DROP)
		return (rc = on_drop(g, fr)) != 0 ? rc : 1;
	if (!fr->f.oob)
		return 0;
	if (fr->oob_cap < fr->f.oob) {
		unsigned char *p = shoal_realloc(fr->oob, fr->oob_cap, fr->f.oob);
		if (!p)
			return SHOAL_ENOMEM;
		fr->oob = p;
		fr->oob_cap = fr->f.oob;
	}
	return sh_channel_read(g->ch, fr->oob, fr->f.oob, false, SHOAL_FOREVER);
}

static void rx_free(rx_frame *fr)
{
	if (!fr)
		return;
	if (fr->p)
		shoal_free(fr->p, fr->cap);
	if (fr->oob)
		shoal_free(fr->oob, fr->oob_cap);
	SH_DELETE(fr);
}

/* A frame to read into, and one given back (rlock held). */
static rx_frame *rx_get(engine *g)
{
	rx_frame *fr = g->pool;
	if (!fr)
		return SH_NEW(rx_frame);
	g->pool = fr->next;
	g->npool--;
	return fr;
}

static void rx_put(engine *g, rx_frame *fr)
{
	if (g->npool >= POOL_MAX) {
		rx_free(fr);
		return;
	}
	fr->next = g->pool;
	g->pool = fr;
	g->npool++;
}

/* Reads the frames that are here already, while fewer than LOOK_BYTES
 * wait: DROP frames among them are taken in at once (rlock held). */
static void look_ahead(engine *g)
{
	while (g->read_rc == 0 && g->qbytes < LOOK_BYTES) {
		rx_frame *fr = rx_get(g);
		if (!fr) {
			g->read_rc = SHOAL_ENOMEM;
			break;
		}
		int rc = read_one(g, fr, 0);
		if (rc == 0) {
			fr->next = NULL;
			if (g->qtail)
				g->qtail->next = fr;
			else
				g->qhead = fr;
			g->qtail = fr;
			g->qbytes += fr->len + fr->f.oob;
			continue;
		}
		rx_put(g, fr);
		if (rc == 1)
			continue;
		if (rc != SHOAL_ETIMEDOUT)
			g->read_rc = rc;
		break;
	}
}

/* The next RUN frame over TCP: read ahead already, or waited for; *cur,
 * done with, is read into next. */
static int next_frame(engine *g, rx_frame **cur)
{
	pthread_mutex_lock(&g->rlock);
	if (*cur) {
		sh_msg_trim(&(*cur)->p, &(*cur)->cap);
		sh_msg_trim(&(*cur)->oob, &(*cur)->oob_cap);
		rx_put(g, *cur);
		*cur = NULL;
	}
	int rc = 0;
	while (!g->qhead && (rc = g->read_rc) == 0) {
		rx_frame *fr = rx_get(g);
		if (!fr || (rc = read_one(g, fr, SHOAL_FOREVER)) == 0) {
			*cur = fr;
			rc = fr ? 0 : SHOAL_ENOMEM;
			break;
		}
		rx_put(g, fr);
		if (rc != 1) {
			g->read_rc = rc;
			break;
		}
	}
	if (!*cur && g->qhead) {
		*cur = g->qhead;
		if (!(g->qhead = g->qhead->next))
			g->qtail = NULL;
		g->qbytes -= (*cur)->len + (*cur)->f.oob;
		rc = 0;
	}
	pthread_mutex_unlock(&g->rlock);
	return rc;
}

/* Frees what was read ahead, once nobody reads. */
static void rx_fini(engine *g)
{
	for (rx_frame *q; (q = g->pool) != NULL; rx_free(q))
		g->pool = q->next;
	for (rx_frame *q; (q = g->qhead) != NULL; rx_free(q))
		g->qhead = q->next;
	g->qtail = NULL;
}

/* The next RUN frame on this host's ring. */
static int next_frame_local(engine *g, rx_frame *fr)
{
	char why[160];
	sh_msg_trim(&fr->p, &fr->cap);
	sh_msg_trim(&fr->oob, &fr->oob_cap);
	int rc = sh_msg_read(&g->l.down, &fr->p, &fr->cap, &fr->len, SHOAL_FOREVER);
	if (rc)
		return rc;
	if ((rc = sh_frame_decode(fr->p, fr->len, &fr->f, why, sizeof(why))) != 0 ||
	    fr->f.op != SH_TK_RUN) {
		fprintf(stderr, "shoal-engine %s: a frame that is not a RUN batch: %s\n", g->name,
			rc ? why : "another operation");
		return SHOAL_EPROTO;
	}
	return 0;
}

/* The next entry is reached. One the controller dropped is marked as the
 * running one is when dropped: task_starts skips it. */
static void reached(engine *g)
{
	if (g->tcp < 0) {
		g->rseq++;
		return;
	}
	pthread_mutex_lock(&g->lock);
	g->rseq++;
	if (g->drops.n && sh_map_del(&g->drops, g->rseq))
		atomic_store_explicit(&g->cancel, g->rseq, memory_order_release);
	pthread_mutex_unlock(&g->lock);
}

static int flush_locked(engine *g)
{
	pthread_mutex_lock(&g->lock);
	int rc = g->flusher_rc ? g->flusher_rc : flush(g);
	pthread_mutex_unlock(&g->lock);
	return rc;
}

static int serve(engine *g)
{
	rx_frame local = {0}, *fr = g->tcp >= 0 ? NULL : &local;
	int rc = 0;
	while (rc == 0) {
		rc = g->tcp >= 0 ? next_frame(g, &fr) : next_frame_local(g, fr);
		if (rc)
			break;
		sh_mp m;
		uint32_t n;
		sh_mp_init(&m, fr->p + SH_FRAME_HDR, fr->f.body_len);
		if (sh_mp_array(&m, &n) || (fr->f.oob && n != 1))
			rc = SHOAL_EPROTO;
		for (uint32_t i = 0; rc == 0 && i < n; i++) {
			sh_tk_run r;
			if (sh_tk_read_run(&m, &r) || !r.fn != !!fr->f.oob)
				rc = SHOAL_EPROTO;
			else if (reached(g), r.fn)
				rc = run_call(g, &r, &m);
			else
				rc = run_oob(g, &r, fr);
			/* Half way through a batch the results so far go: the
			 * controller then refills our window while we run the
			 * rest, and we do not wait for the next batch. */
			if (rc == 0 && n >= 8 && i + 1 == n / 2)
				rc = flush_locked(g);
			if (rc == 0 && g->tcp >= 0 && shoal_now_ns() - g->last_look > LOOK_NS) {
				pthread_mutex_lock(&g->rlock);
				look_ahead(g);
				pthread_mutex_unlock(&g->rlock);
				g->last_look = shoal_now_ns();
			}
		}
		if (rc == 0)
			rc = flush_locked(g);
	}
	if (g->tcp >= 0) {
		rx_free(fr); /* the rest once the flusher is done (rx_fini) */
	} else {
		if (local.p)
			shoal_free(local.p, local.cap);
		if (local.oob)
			shoal_free(local.oob, local.oob_cap);
	}
	return rc == SHOAL_ECLOSED ? 0 : rc;
}

/* Ends the engine's rings when the controller's socket closes. */
static void *watch(void *arg)
{
	engine *g = arg;
	struct pollfd p = {.fd = g->l.sock, .events = POLLIN};
	while (poll(&p, 1, -1) < 0 || !(p.revents & (POLLHUP | POLLERR | POLLIN)))
		;
	sh_link_shut(&g->l);
	return NULL;
}

int sh_engine_main(const sh_engine_cfg *cfg)
{
	const char *socket = cfg->socket, *so = cfg->so, *connect_to = cfg->connect,
		   *store = cfg->store;
	bool with_parent = cfg->with_parent;
	engine g = {.name = cfg->name, .tcp = -1};
	if (socket && !strncmp(socket, "tcp://", 6))
		connect_to = socket + 6, socket = NULL;
	if (with_parent) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			return 3;
	}
	char why[SH_EXT_MSG_MAX];
	int rc = cfg->init ? sh_ext_lib_init(&g.lib, cfg->init, why, sizeof(why))
			   : sh_ext_lib_load(&g.lib, so, -1, why, sizeof(why));
	if (rc) {
		fprintf(stderr, "shoal-engine %s: %s\n", g.name, why);
		return 1;
	}
	/* Arguments that clients share through the store are mapped from it. */
	shoal_client *sc = NULL;
	if (store && (rc = shoal_connect(&sc, store)) != 0) {
		fprintf(stderr, "shoal-engine %s: no store at %s: %s\n", g.name, store,
			shoal_strerror(rc));
		sh_ext_lib_unload(&g.lib);
		return 1;
	}
	g.in.store = g.out.store = sc;
	uint64_t info[1];
	sh_link_init(&g.l, -1);
	if (connect_to) {
		rc = sh_tcp_connect_auth(connect_to, SH_TASKS_ENGINE,
					 shoal_deadline_in(SH_TASKS_CONNECT_NS), &g.tcp, &g.ch, why,
					 sizeof(why));
	} else {
		int page = -1;
		void *p = NULL;
		struct stat pst;
		rc = sh_link_connect(&g.l, socket, SH_TASKS_ENGINE, SH_TASKS_VERSION,
				     SH_TASKS_RING_CAP, info, 1, &page, 1, why, sizeof(why));
		if (rc == 0 && (fstat(page, &pst) != 0 || pst.st_size < 4096 ||
				(rc = sh_shm_map(page, (size_t)pst.st_size, true, &p)) != 0)) {
			rc = rc ? rc : SHOAL_EPROTO;
			snprintf(why, sizeof(why), "mapping the controller's page: %s",
				 shoal_strerror(rc));
		}
		if (page >= 0)
			close(page);
		g.page = p;
		g.page_len = p ? (size_t)pst.st_size : 0;
	}
	if (rc) {
		fprintf(stderr, "shoal-engine %s: %s\n", g.name, why);
		if (g.tcp >= 0)
			close(g.tcp);
		sh_ext_lib_unload(&g.lib);
		return 1;
	}
	g.l.down.spin_ns = 50000;
	sh_wbuf_init(&g.w);
	sh_wbuf_init(&g.st);
	sh_tk_batch_begin(&g.w);
	g.last_flush = shoal_now_ns();
	pthread_mutex_init(&g.lock, NULL);
	pthread_mutex_init(&g.rlock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* shoal_now_ns's */
	pthread_cond_init(&g.wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t t, ft;
	bool watching = g.tcp < 0 && pthread_create(&t, NULL, watch, &g) == 0;
	bool flushing = pthread_create(&ft, NULL, flusher_main, &g) == 0;
	rc = serve(&g);
	if (flushing) {
		pthread_mutex_lock(&g.lock);
		g.stop = true;
		pthread_cond_signal(&g.wake);
		pthread_mutex_unlock(&g.lock);
		pthread_join(ft, NULL);
	}
	pthread_cond_destroy(&g.wake);
	pthread_mutex_destroy(&g.lock);
	pthread_mutex_destroy(&g.rlock);
	rx_fini(&g);
	sh_map_fini(&g.drops);
	if (watching) {
		shutdown(g.l.sock, SHUT_RDWR); /* wakes the watcher */
		pthread_join(t, NULL);
	}
	if (rc)
		fprintf(stderr, "shoal-engine %s: %s%s%s\n", g.name, shoal_strerror(rc),
			g.ch && *sh_channel_error(g.ch) ? ": " : "",
			g.ch ? sh_channel_error(g.ch) : "");
	sh_wbuf_fini(&g.w);
	sh_wbuf_fini(&g.st);
	if (g.page)
		sh_shm_unmap((void *)g.page, g.page_len);
	shoal_vbuf_reset(&g.in); /* lets go of what it mapped */
	shoal_vbuf_reset(&g.out);
	sh_bump_fini(&g.in.a);
	sh_bump_fini(&g.out.a);
	if (sc)
		shoal_disconnect(sc);
	sh_link_fini(&g.l);
	sh_channel_free(g.ch);
	if (g.tcp >= 0)
		close(g.tcp);
	sh_ext_lib_unload(&g.lib);
	return rc ? 1 : 0;
}

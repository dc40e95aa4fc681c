/* The task controller: a thread with a fiber scheduler, as the store's
 * server is. Clients and engines connect on this host as links (rings) or
 * from others over TCP (the secure channel of net.h). A fiber per
 * connection reads what it sends (clients' SUBMITs, engines' DONEs); a
 * writer fiber per connection sends its batches (RUNs to an engine,
 * RESULTS to a client), so that a reader never blocks on a full ring or
 * socket of another connection. Tasks are routed by the scheme as they
 * arrive, at most a window of them on each engine, batched per engine, and
 * their results batched per client; dependencies (after, follow), retries
 * and deadlines are kept here.
 *
 * Arguments and results are forwarded as the bytes their sender encoded;
 * the controller reads only ids, options and statuses (proto.h). A large
 * task's bytes, out of band, are relayed as they come from a client over
 * TCP to an engine over TCP when nothing must be kept for a retry or a
 * dependency; else they are held in a buffer, and while the buffers hold
 * more than HELD_MAX bytes no client is read further. */
#include "net/net.h"
#include "shm/shm.h"
#include "store/proto.h"
#include "tasks/proto.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

typedef struct tk_task tk_task;

/* Why a task left the controller (sh_task_end). */
typedef enum sh_task_why {
	SH_TASK_RESULT = 1, /* its engine answered (a value, or the error its function raised) */
	SH_TASK_FAILED,	    /* failed here: no engine for it, a dependency, its engine went */
	SH_TASK_RETRIES,    /* its engine went while running it, and no retries were left */
	SH_TASK_DEADLINE,   /* its deadline passed */
	SH_TASK_GONE,	    /* its client went (or its bytes never came): nobody to answer */
	SH_TASK_STOP,	    /* the controller stops */
	SH_TASK_NOMEM,	    /* never got on the books */
} sh_task_why;

/* A hold buffer: the out-of-band bytes of a large task, read from its
 * client. Freed (or kept for the next large task, warm) with its last
 * reference. */
typedef struct tk_frame {
	shoal_controller *ctl;
	unsigned char *p;
	size_t cap;
	uint32_t refs;
	struct tk_frame *next;
} tk_frame;
typedef struct tk_engine tk_engine;
typedef struct tk_client tk_client;

struct tk_task {
	uint64_t tid;	    /* ours, across clients */
	uint64_t cid;	    /* the client's */
	tk_client *client;  /* NULL once the client is gone */
	tk_engine *on;	    /* assigned to (in its outbox or running), or NULL */
	tk_task *next;	    /* in an outbox or the pending queue */
	unsigned char *raw; /* fn and args, as the client encoded them */
	tk_frame *frame;    /* raw is this hold buffer's (else its own, or NULL: relayed) */
	uint32_t rawlen;
	uint32_t retries;
	int32_t engine_want; /* -1: any */
	int64_t deadline;    /* absolute; 0: none */
	uint64_t seq;	     /* its place in its engine's stream of RUN entries (1, 2, ...) */
	uint32_t unmet;	     /* dependencies not done yet (it waits in their lists) */
	uint32_t writing;    /* writers sending its bytes by reference right now */
	uint64_t *follow;    /* the client's ids it must run beside (where they ran) */
	uint32_t nfollow;
	bool queued; /* in an outbox or the pending queue */
	bool sent;   /* its engine has it */
	bool over;   /* ended (sh_task_end): freed once nothing holds it */
	uint8_t end; /* why it ended (sh_task_why) */
};

typedef struct tk_queue {
	tk_task *head, *tail;
} tk_queue;

/* What a connection has of its own, engine or client. */
typedef struct tk_conn {
	shoal_controller *ctl;
	sh_link l;
	int tcp;	/* a peer over TCP: its socket (then l is unused); else -1 */
	int hello;	/* over TCP: its handshake's slot (sh_hellos), until it is over */
	sh_channel *ch; /* and the secure channel on it, which all its bytes go through */
	char peer[96];	/* its address, for messages */
	pid_t pid;
	uint32_t num; /* engines: 0, 1, 2 ...; clients: 1, 2, ... */
	bool engine, gone, kick_pending;
	bool shut; /* its traffic is over (conn_shut) */
	/* the right to write to it, a token that the writer fiber and relays
	 * pass around; relays using it (it is freed only once they are done) */
	shoal_chan *turn;
	uint32_t users;
	shoal_chan *kick;
	shoal_fiber *writer, *watcher;
	unsigned char *in;
	size_t in_cap;
	sh_wbuf w; /* the writer's batch */
} tk_conn;

struct tk_engine {
	tk_conn c;
	tk_engine *next;
	/* large tasks in the RUN batch being written, by reference */
	tk_task **pinned;
	uint32_t npinned, cap_pinned;
	tk_queue outbox;   /* assigned, not sent yet */
	uint32_t inflight; /* assigned and not answered: at most the window */
	uint64_t last;	   /* lru: when it was last given a task */
	tk_queue waiting;  /* tasks for this engine alone, waiting for room in its window */
	/* RUN entries sent (the last one's seq), and the last the engine said
	 * it started: those after it never ran. An engine on this host says
	 * so in a page it shares with us (page[0]), one over TCP in STARTED
	 * frames. The page's other words are slots where we drop entries it
	 * has not started (SH_TASKS_PAGE). */
	uint64_t seq_out, started;
	_Atomic uint64_t *page;
	size_t page_len;
	/* Over TCP: entries of gone clients' tasks it holds, for its next DROP
	 * frame. */
	uint64_t *drops;
	uint32_t ndrops, cap_drops;
};

/* Tasks waiting for one task of their client. */
typedef struct tk_waiters {
	tk_task **v;
	uint32_t n, cap;
} tk_waiters;

struct tk_client {
	tk_conn c;
	tk_client *next;
	sh_wbuf res; /* results not sent yet (a batch being built) */
	uint32_t nres;
	/* For dependencies, by the client's ids (1, 2, ...): how each ended
	 * (0: not yet; > 0: done on engine fate - 1; < 0: failed), the
	 * largest id seen, and who waits for whom. */
	int32_t *fate;
	uint64_t cap_fate, max_id;
	uint64_t owner; /* its store owner token (SH_TK_OWNER), or 0 */
	sh_map waiters; /* id -> tk_waiters */
	uint32_t asks;	/* STATUS questions not answered yet */
};

struct shoal_controller {
	shoal_controller_opts opts;
	char path[108];
	int lsock, stop_efd;
	int tcp_lsock;	     /* -1: no TCP */
	char tcp_bound[128]; /* where it listens */
	unsigned char key[SH_SECRET_MAX];
	size_t klen;
	pthread_t thread;
	/* the controller thread's own */
	tk_engine *engines;
	tk_client *clients;
	uint32_t nconns, next_engine, next_client;
	sh_hellos tcp_hellos; /* TCP peers still in their handshake */
	uint64_t conn_budget; /* connections the descriptor limit allows */
	sh_refusals refusals; /* TCP peers refused, for the log */
	sh_map tasks;	      /* tid -> tk_task */
	uint64_t next_tid, clock, rng;
	uint32_t rr;
	uint64_t with_deadline;	  /* tasks that have one */
	tk_frame *spare_frames;	  /* hold buffers let go, kept warm */
	size_t spare_bytes, held; /* in those; in buffers tasks hold */
	uint32_t nheld;		  /* those buffers */
	int64_t last_hold;	  /* when one was last let go */
	tk_queue pending;	  /* no engine can take them yet (none, or not theirs) */
	tk_queue backlog;	  /* for any engine, waiting for room in a window */
	uint32_t window;	  /* tasks an engine holds at most */
	bool stopping;
	/* read by other threads */
	_Atomic uint32_t n_engines, n_clients;
	_Atomic uint64_t n_queued, n_running, n_done, n_retried, n_failed, n_held, n_held_peak;
};

/* ---- queues ---- */

static void q_push(tk_queue *q, tk_task *t)
{
	t->next = NULL;
	if (q->tail)
		q->tail->next = t;
	else
		q->head = t;
	q->tail = t;
	t->queued = true;
}

static tk_task *q_pop(tk_queue *q)
{
	tk_task *t = q->head;
	if (t) {
		q->head = t->next;
		if (!q->head)
			q->tail = NULL;
		t->next = NULL;
		t->queued = false;
	}
	return t;
}

/* Bytes of large tasks held in buffers (tk_frame) beyond which, once
 * there are two for each engine, the controller stops reading clients: a
 * flood of large tasks then waits in the clients' rings or sockets (their
 * submits block), and the buffers are reused, warm and in the caches,
 * rather than fresh memory faulting in (a fresh MiB costs 256 page faults
 * here). */
#define HELD_MAX ((size_t)16 << 20)
/* Spare buffers, kept for the next large tasks: at most this many bytes,
 * and given back after a second without large tasks. */
#define SPARE_MAX ((size_t)64 << 20)
#define SPARE_IDLE_NS 1000000000
/* Entries a DROP frame names at most (about 600 KiB). */
#define DROPS_PER_FRAME 65536u

static void frame_unref(tk_frame *fr)
{
	if (--fr->refs)
		return;
	shoal_controller *ctl = fr->ctl;
	ctl->held -= fr->cap;
	ctl->nheld--;
	atomic_store_explicit(&ctl->n_held, ctl->held, memory_order_relaxed);
	ctl->last_hold = shoal_now_ns();
	if (ctl->spare_bytes + fr->cap <= SPARE_MAX) {
		fr->next = ctl->spare_frames;
		ctl->spare_frames = fr;
		ctl->spare_bytes += fr->cap;
		return;
	}
	shoal_free(fr->p, fr->cap);
	SH_DELETE(fr);
}

static void task_free(tk_task *t)
{
	if (t->frame)
		frame_unref(t->frame);
	else if (t->raw)
		shoal_free(t->raw, t->rawlen);
	if (t->follow)
		shoal_free(t->follow, t->nfollow * sizeof(*t->follow));
	SH_DELETE(t);
}

/* ---- waking writers ---- */

static void kick(tk_conn *c)
{
	if (c->gone || c->kick_pending)
		return;
	c->kick_pending = true;
	char one = 1;
	/* capacity 1 and at most one in flight: never blocks */
	shoal_chan_send(c->kick, &one, SHOAL_FOREVER);
}

/* ---- results ---- */

/* t is engine e's from now on (sent already, or not yet), on the books. */
static void give(shoal_controller *ctl, tk_task *t, tk_engine *e, bool sent)
{
	t->on = e;
	t->sent = sent;
	e->inflight++;
	e->last = ++ctl->clock;
	atomic_fetch_add_explicit(&ctl->n_running, 1, memory_order_relaxed);
}

static void fill(shoal_controller *ctl, tk_engine *e);

/* The reverse: t is no engine's (it goes elsewhere, or nowhere); its
 * engine has room for the next. */
static void take_back(shoal_controller *ctl, tk_task *t)
{
	tk_engine *e = t->on;
	e->inflight--;
	t->on = NULL;
	t->seq = 0;
	atomic_fetch_sub_explicit(&ctl->n_running, 1, memory_order_relaxed);
	fill(ctl, e);
}

/* Every task leaves through here: once when it ends (why), and again each
 * time something that held it lets go of it (sh_task_let_go: a queue it
 * was in, a dependency it waited for, a writer sending its bytes). The
 * first time takes it off the books; it is freed once nothing holds it,
 * here and nowhere else. */
static void sh_task_end(shoal_controller *ctl, tk_task *t, sh_task_why why)
{
	if (!t->over) {
		t->over = true;
		t->end = (uint8_t)why;
		if (t->deadline)
			ctl->with_deadline--;
		sh_map_del(&ctl->tasks, t->tid);
		if (t->on)
			take_back(ctl, t);
		else if (t->queued) /* pending */
			atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
	}
	if (!t->queued && !t->unmet && !t->writing)
		task_free(t);
}

/* Something that held t let go of it: if t has ended, it may go now. */
static void sh_task_let_go(shoal_controller *ctl, tk_task *t)
{
	if (t->over)
		sh_task_end(ctl, t, (sh_task_why)t->end);
}

/* Appends the result of t (status, and raw: an encoded value, or NULL
 * with a message) to its client's batch, and ends t (why). */
static void settle_deps(shoal_controller *ctl, tk_client *c, uint64_t id, int32_t fate);

static void answer(shoal_controller *ctl, tk_task *t, sh_task_why why, int32_t status,
		   const void *raw, size_t len, const char *msg)
{
	tk_client *c = t->client;
	uint64_t cid = t->cid;
	int32_t fate = status ? -1 : t->on ? (int32_t)t->on->c.num + 1 : INT32_MAX;
	if (c && !c->c.gone) {
		msgpack_packer pk;
		sh_wbuf_packer(&c->res, &pk);
		msgpack_pack_array(&pk, 3);
		msgpack_pack_uint64(&pk, t->cid);
		msgpack_pack_int32(&pk, status);
		if (raw)
			sh_wbuf_append(&c->res, raw, len);
		else
			sh_mp_pack_cstr(&pk, msg);
		c->nres++;
		kick(&c->c);
	}
	atomic_fetch_add_explicit(&ctl->n_done, 1, memory_order_relaxed);
	if (status != 0 && !raw)
		atomic_fetch_add_explicit(&ctl->n_failed, 1, memory_order_relaxed);
	sh_task_end(ctl, t, why);
	if (c && !c->c.gone)
		settle_deps(ctl, c, cid, fate);
}

static void fail(shoal_controller *ctl, tk_task *t, sh_task_why why, int code, const char *fmt, ...)
	SHOAL_PRINTF(5, 6);
static void fail(shoal_controller *ctl, tk_task *t, sh_task_why why, int code, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	answer(ctl, t, why, code, NULL, 0, msg);
}

/* ---- schemes ---- */

static uint64_t rnd(shoal_controller *ctl)
{
	/* xorshift64*: the weighted and twobin picks need no more */
	uint64_t x = ctl->rng;
	x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
	ctl->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Whether engine e may take t now: t asked for it, or for any, and its
 * window has room. */
static bool may_run(const tk_task *t, const tk_engine *e)
{
	return (t->engine_want < 0 || (uint32_t)t->engine_want == e->c.num) &&
	       e->inflight < e->c.ctl->window;
}

/* The engine t goes to, by the scheme, or NULL (none can take it now). */
static tk_engine *pick(shoal_controller *ctl, const tk_task *t)
{
	uint32_t n = 0;
	for (tk_engine *e = ctl->engines; e; e = e->next)
		if (may_run(t, e))
			n++;
	if (n == 0)
		return NULL;
	tk_engine *best = NULL;
	uint32_t i = 0, k;
	switch (ctl->opts.scheme) {
	case SHOAL_SCHEME_PURE:
		k = ctl->rr++ % n;
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (may_run(t, e) && i++ == k)
				return e;
		return NULL;
	case SHOAL_SCHEME_LRU:
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (may_run(t, e) && (!best || e->last < best->last))
				best = e;
		return best;
	case SHOAL_SCHEME_WEIGHTED: {
		/* at random, weighted by how much less loaded than the most
		 * loaded each is (plus one, so all have a chance) */
		uint32_t max = 0;
		uint64_t sum = 0;
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (e->inflight > max)
				max = e->inflight;
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (may_run(t, e))
				sum += max - e->inflight + 1;
		uint64_t r = rnd(ctl) % sum;
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (may_run(t, e)) {
				uint64_t w = max - e->inflight + 1;
				if (r < w)
					return e;
				r -= w;
			}
		return NULL;
	}
	case SHOAL_SCHEME_TWOBIN: {
		tk_engine *a = NULL, *b = NULL;
		uint32_t ka = (uint32_t)(rnd(ctl) % n), kb = (uint32_t)(rnd(ctl) % n);
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (may_run(t, e)) {
				if (i == ka)
					a = e;
				if (i == kb)
					b = e;
				i++;
			}
		return b && b->inflight < a->inflight ? b : a;
	}
	case SHOAL_SCHEME_LEASTLOAD:
	default:
		for (tk_engine *e = ctl->engines; e; e = e->next)
			if (may_run(t, e) && (!best || e->inflight < best->inflight))
				best = e;
		return best;
	}
}

/* Gives t to an engine with room in its window, into its outbox (its
 * writer is kicked), or queues it: in the backlog (any engine), in its
 * engine's waiting queue, or pending (no engine of the number it wants
 * has joined yet). A task for an engine that has gone fails: numbers are
 * never given twice, so none of its number will come. */
static void assign(shoal_controller *ctl, tk_task *t)
{
	tk_engine *e = pick(ctl, t);
	if (!e) {
		tk_queue *q = &ctl->pending;
		if (t->engine_want < 0)
			q = &ctl->backlog;
		else
			for (tk_engine *g = ctl->engines; g; g = g->next)
				if (g->c.num == (uint32_t)t->engine_want)
					q = &g->waiting;
		if (q == &ctl->pending && (uint32_t)t->engine_want < ctl->next_engine) {
			fail(ctl, t, SH_TASK_FAILED, SHOAL_EENGINE,
			     "task %llu was for engine %d alone, which has gone",
			     (unsigned long long)t->cid, t->engine_want);
			return;
		}
		q_push(q, t);
		atomic_fetch_add_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		return;
	}
	give(ctl, t, e, false);
	q_push(&e->outbox, t);
	kick(&e->c);
}

/* Engine e has room: tasks waiting for it alone, then the backlog's. */
static void fill(shoal_controller *ctl, tk_engine *e)
{
	bool gave = false;
	while (e->inflight < ctl->window && !e->c.gone) {
		tk_task *t = q_pop(&e->waiting);
		if (!t && !(t = q_pop(&ctl->backlog)))
			break;
		if (t->over) { /* answered or dropped while it waited */
			sh_task_let_go(ctl, t);
			continue;
		}
		atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		give(ctl, t, e, false);
		q_push(&e->outbox, t);
		gave = true;
	}
	if (gave)
		kick(&e->c);
}

/* Tasks that waited for an engine try again (one connected). */
static void assign_pending(shoal_controller *ctl)
{
	tk_queue q = ctl->pending;
	ctl->pending = (tk_queue){0};
	for (tk_task *t; (t = q_pop(&q)) != NULL;) {
		if (t->over) {
			sh_task_let_go(ctl, t);
			continue;
		}
		atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		assign(ctl, t);
	}
}

/* ---- dependencies ---- */

/* Where the tasks t follows ran: all on one engine, or why not. */
static int follow_engine(tk_client *c, const tk_task *t, int32_t *engine, char *why, size_t len)
{
	int32_t e = -1;
	for (uint32_t i = 0; i < t->nfollow; i++) {
		int32_t f = c->fate[t->follow[i]];
		int32_t on = f == INT32_MAX ? -1 : f - 1;
		if (on < 0)
			continue; /* failed early (never ran): no place to follow */
		if (e >= 0 && on != e) {
			snprintf(why, len, "the tasks it follows ran on engines %d and %d", e, on);
			return SHOAL_EDEPFAIL;
		}
		e = on;
	}
	*engine = e;
	return 0;
}

/* t's dependencies are met: it goes to an engine (the one of the tasks
 * it follows, if any). */
static void release(shoal_controller *ctl, tk_task *t)
{
	char why[128];
	int32_t e = -1;
	if (t->nfollow && follow_engine(t->client, t, &e, why, sizeof(why)) != 0) {
		fail(ctl, t, SH_TASK_FAILED, SHOAL_EDEPFAIL, "task %llu: %s",
		     (unsigned long long)t->cid, why);
		return;
	}
	if (e >= 0) {
		bool there = false;
		for (tk_engine *g = ctl->engines; g && !there; g = g->next)
			there = (int32_t)g->c.num == e;
		if (!there) {
			fail(ctl, t, SH_TASK_FAILED, SHOAL_EDEPFAIL,
			     "task %llu follows tasks that ran on engine %d, which is gone",
			     (unsigned long long)t->cid, e);
			return;
		}
		t->engine_want = e;
	}
	assign(ctl, t);
}

/* Task id of client c ended (fate as in tk_client): its waiters go on, or
 * fail with it. */
static void settle_deps(shoal_controller *ctl, tk_client *c, uint64_t id, int32_t fate)
{
	if (id < c->cap_fate)
		c->fate[id] = fate;
	tk_waiters *w = sh_map_del(&c->waiters, id);
	if (!w)
		return;
	for (uint32_t i = 0; i < w->n; i++) {
		tk_task *t = w->v[i];
		t->unmet--;
		if (t->over) {
			sh_task_let_go(ctl, t);
			continue;
		}
		if (fate < 0)
			fail(ctl, t, SH_TASK_FAILED, SHOAL_EDEPFAIL,
			     "task %llu depends on task %llu, which failed",
			     (unsigned long long)t->cid, (unsigned long long)id);
		else if (t->unmet == 0)
			release(ctl, t);
	}
	if (w->v)
		shoal_free(w->v, w->cap * sizeof(*w->v));
	SH_DELETE(w);
}

/* t depends on the client's task id: done already, or t waits for it. */
static int add_dep(shoal_controller *ctl, tk_client *c, tk_task *t, uint64_t id, char *why,
		   size_t len)
{
	if (ctl->opts.scheme == SHOAL_SCHEME_PURE) {
		snprintf(why, len, "the pure scheme has no dependencies (as in ipyparallel)");
		return SHOAL_ENOTSUP;
	}
	if (id == 0 || id >= t->cid) {
		snprintf(why, len,
			 "task %llu depends on task %llu: expected an earlier task of this client",
			 (unsigned long long)t->cid, (unsigned long long)id);
		return SHOAL_EDEPFAIL;
	}
	int32_t fate = c->fate[id];
	if (fate < 0) {
		snprintf(why, len, "task %llu depends on task %llu, which failed",
			 (unsigned long long)t->cid, (unsigned long long)id);
		return SHOAL_EDEPFAIL;
	}
	if (fate > 0)
		return 0;
	tk_waiters *w = sh_map_get(&c->waiters, id);
	if (!w && (!(w = SH_NEW(tk_waiters)) || sh_map_put(&c->waiters, id, w) != 0)) {
		if (w)
			SH_DELETE(w);
		return SHOAL_ENOMEM;
	}
	if (sh_grow_array((void **)&w->v, &w->cap, w->n, sizeof(*w->v)) != 0)
		return SHOAL_ENOMEM;
	w->v[w->n++] = t;
	t->unmet++;
	return 0;
}

/* ---- clients ---- */

/* A task of client c as its entry v says, its fn and args at raw (the
 * hold buffer fr's, or copied): taken on the books, its dependencies
 * noted, and routed if route (or failed early: then *out is NULL). A
 * malformed entry ends the connection (a client of ours never sends one). */
static int add_task(tk_client *c, const sh_tk_submit *v, int64_t now, const unsigned char *raw,
		    tk_frame *fr, bool route, tk_task **out)
{
	shoal_controller *ctl = c->c.ctl;
	*out = NULL;
	if (v->id <= c->max_id || v->id > c->max_id + (1u << 24))
		return SHOAL_EPROTO; /* ids go up, without wild jumps */
	c->max_id = v->id;
	if (v->id >= c->cap_fate) {
		uint64_t cap = c->cap_fate ? c->cap_fate : 4096;
		while (cap <= v->id)
			cap *= 2;
		int32_t *fate =
			shoal_realloc(c->fate, c->cap_fate * sizeof(*fate), cap * sizeof(*fate));
		if (!fate)
			return SHOAL_ENOMEM;
		memset(fate + c->cap_fate, 0, (cap - c->cap_fate) * sizeof(*fate));
		c->fate = fate;
		c->cap_fate = cap;
	}
	tk_task *t = SH_NEW(tk_task);
	if (t && fr) {
		t->raw = fr->p;
		t->frame = fr;
		fr->refs++;
	} else if (t && raw && (t->raw = shoal_alloc(v->call_len)) != NULL) {
		memcpy(t->raw, raw, v->call_len);
	} else if (!t || raw) {
		if (t)
			SH_DELETE(t);
		return SHOAL_ENOMEM;
	}
	t->rawlen = (uint32_t)v->call_len;
	t->tid = ++ctl->next_tid;
	t->cid = v->id;
	t->client = c;
	t->retries = v->retries;
	t->engine_want = v->engine;
	if (v->timeout_ns > 0) {
		t->deadline = now + v->timeout_ns;
		ctl->with_deadline++;
	}
	if (sh_map_put(&ctl->tasks, t->tid, t) != 0) {
		sh_task_end(ctl, t, SH_TASK_NOMEM);
		return SHOAL_ENOMEM;
	}
	int rc = 0;
	if (v->nfollow && !(t->follow = shoal_alloc(v->nfollow * sizeof(*t->follow))))
		return SHOAL_ENOMEM; /* the connection ends: the task goes with it */
	t->nfollow = v->nfollow;
	sh_mp after = v->after, follow = v->follow;
	for (uint32_t d = 0; d < v->nfollow; d++)
		sh_mp_uint(&follow, &t->follow[d]); /* checked by the reader */
	char why[192] = "";
	for (uint32_t d = 0; rc == 0 && d < v->nafter + v->nfollow; d++) {
		uint64_t dep;
		if (d < v->nafter)
			sh_mp_uint(&after, &dep);
		else
			dep = t->follow[d - v->nafter];
		rc = add_dep(ctl, c, t, dep, why, sizeof(why));
	}
	if (rc == SHOAL_ENOMEM)
		return rc;
	if (rc) {
		fail(ctl, t, SH_TASK_FAILED, rc, "%s", why);
		return 0;
	}
	*out = t;
	if (route && t->unmet == 0)
		release(ctl, t);
	return 0;
}

/* A SUBMIT batch of small tasks: each is routed as it is read. */
static int on_submit(tk_client *c, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (sh_mp_array(&m, &n) != 0)
		return SHOAL_EPROTO;
	int64_t now = shoal_now_ns();
	for (uint32_t i = 0; i < n; i++) {
		sh_tk_submit v;
		tk_task *t;
		int rc;
		if (sh_tk_read_submit(&m, &v) || !v.call)
			return SHOAL_EPROTO;
		if ((rc = add_task(c, &v, now, v.call, NULL, true, &t)) != 0)
			return rc;
	}
	return sh_mp_done(&m) == 0 ? 0 : SHOAL_EPROTO;
}

/* The tasks on the books that match, to act on one by one. Acting on one
 * may take it or others off the books, and deleting from the map moves
 * its entries, so their ids are gathered before the first is acted on
 * (scanning again from the start after each made n of them cost n
 * scans), and each is looked up again when its turn comes. Out of memory
 * for the ids, the rest are found by rescanning. */
typedef bool (*tk_match)(const tk_task *t, const void *arg);

typedef struct tk_sweep {
	shoal_controller *ctl;
	tk_match match;
	const void *arg;
	uint64_t *tids;
	uint32_t n, cap;
	bool all; /* every match is in tids */
} tk_sweep;

static void sweep_begin(tk_sweep *w, shoal_controller *ctl, tk_match match, const void *arg)
{
	*w = (tk_sweep){.ctl = ctl, .match = match, .arg = arg, .all = true};
	size_t it = 0;
	uint64_t key;
	void *val;
	while (w->all && sh_map_next(&ctl->tasks, &it, &key, &val))
		if (match(val, arg)) {
			w->all = sh_grow_array((void **)&w->tids, &w->cap, w->n,
					       sizeof(*w->tids)) == 0;
			if (w->all)
				w->tids[w->n++] = key;
		}
}

/* The next match not acted on yet, or NULL; the caller acts on it so that
 * it no longer matches. */
static tk_task *sweep_next(tk_sweep *w)
{
	while (w->n) {
		tk_task *t = sh_map_get(&w->ctl->tasks, w->tids[--w->n]);
		if (t && w->match(t, w->arg))
			return t;
	}
	size_t it = 0;
	uint64_t key;
	void *val;
	while (!w->all && sh_map_next(&w->ctl->tasks, &it, &key, &val))
		if (w->match(val, w->arg))
			return val;
	if (w->tids)
		shoal_free(w->tids, w->cap * sizeof(*w->tids));
	w->tids = NULL;
	w->cap = 0;
	return NULL;
}

/* Whether t may be dropped: not sent yet, or sent to an engine that has
 * not started it, as far as we know (we take it out of its window). */
static bool droppable(const tk_task *t)
{
	if (!t->sent)
		return true;
	tk_engine *e = t->on;
	if (!e || !t->seq)
		return false;
	uint64_t started =
		e->page ? atomic_load_explicit(&e->page[0], memory_order_acquire) : e->started;
	return t->seq > started;
}

static bool droppable_of(const tk_task *t, const void *client)
{
	return t->client == client && droppable(t);
}

/* Tells t's engine that its client went: on this host by its number in
 * its slot of the page, over TCP in the next DROP frame. Either way the
 * engine skips it if it has not reached it, or asks it to give up
 * (shoal_ext_cancelled). */
static void drop_on_engine(tk_task *t)
{
	tk_engine *e = t->on;
	if (e->page) {
		size_t nslots = e->page_len / 8 - 1;
		atomic_store_explicit(&e->page[1 + t->seq % nslots], t->seq, memory_order_release);
	} else if (!e->c.gone && sh_grow_array((void **)&e->drops, &e->cap_drops, e->ndrops,
					       sizeof(*e->drops)) == 0) {
		e->drops[e->ndrops++] = t->seq;
		kick(&e->c);
	} /* else without memory it runs: its result goes to nobody */
}

/* The client went: what it queued is dropped, and what engines hold of it
 * and have not started; what runs is answered to nobody, and asked to
 * give up. */
static void client_gone(shoal_controller *ctl, tk_client *c)
{
	tk_sweep w;
	uint64_t dropped = 0;
	sweep_begin(&w, ctl, droppable_of, c);
	for (tk_task *t; (t = sweep_next(&w)) != NULL; dropped++) {
		if (t->sent)
			drop_on_engine(t);
		sh_task_end(ctl, t, SH_TASK_GONE);
	}
	size_t it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&ctl->tasks, &it, &key, &val)) {
		tk_task *t = val;
		if (t->client != c)
			continue;
		t->client = NULL;
		if (t->sent && t->on && t->seq)
			drop_on_engine(t);
	}
	if (dropped)
		sh_debug("tasks", "client %u gone: %llu tasks dropped", c->c.num,
			 (unsigned long long)dropped);
}

/* What a client held for dependencies: tasks still waiting were taken
 * off the books when it went, and go with their last wait. */
static void client_fini(tk_client *c)
{
	size_t it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&c->waiters, &it, &key, &val)) {
		tk_waiters *w = val;
		for (uint32_t i = 0; i < w->n; i++) {
			tk_task *t = w->v[i];
			t->unmet--;
			sh_task_let_go(c->c.ctl, t);
		}
		if (w->v)
			shoal_free(w->v, w->cap * sizeof(*w->v));
		SH_DELETE(w);
	}
	sh_map_fini(&c->waiters);
	if (c->fate)
		shoal_free(c->fate, c->cap_fate * sizeof(*c->fate));
}

/* ---- engines ---- */

/* A DONE frame: results go to their clients. */
static int on_done(tk_engine *e, const sh_frame *f)
{
	shoal_controller *ctl = e->c.ctl;
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, e->c.in + SH_FRAME_HDR, f->body_len);
	if (f->op != SH_TK_DONE || f->oob || sh_mp_array(&m, &n) != 0)
		return SHOAL_EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t tid;
		int32_t status;
		const unsigned char *raw;
		size_t len;
		if (sh_tk_read_result(&m, &tid, &status, &raw, &len))
			return SHOAL_EPROTO;
		tk_task *t = sh_map_get(&ctl->tasks, tid);
		if (!t || t->on != e)
			continue; /* answered already (its deadline passed) */
		answer(ctl, t, SH_TASK_RESULT, status, raw, len, NULL);
	}
	return sh_mp_done(&m) == 0 ? 0 : SHOAL_EPROTO;
}

/* A STARTED frame of an engine over TCP: [seq], the RUN entry it starts
 * now (it says so before). */
static int on_started(tk_engine *e, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	uint64_t seq;
	sh_mp_init(&m, e->c.in + SH_FRAME_HDR, f->body_len);
	if (f->oob || sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &seq) || sh_mp_done(&m) ||
	    seq > e->seq_out)
		return SHOAL_EPROTO;
	if (seq > e->started)
		e->started = seq;
	return 0;
}

/* How the engine process ended, when it is a child of this process. It
 * is looked at, not reaped (WNOWAIT): whoever spawned it waits for it, as
 * for any child of theirs. */
static void engine_end(pid_t pid, char *how, size_t len)
{
	snprintf(how, len, "went away");
	if (pid <= 0)
		return; /* over TCP: no process of ours */
	/* It may still be on its way out. */
	for (int i = 0; i < 100; i++) {
		siginfo_t si;
		si.si_pid = 0;
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
			return; /* not ours, or reaped already */
		if (si.si_pid == pid) {
			if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)
				snprintf(how, len, "was killed by signal %d (%s)", si.si_status,
					 strsignal(si.si_status));
			else
				snprintf(how, len, "exited with status %d", si.si_status);
			return;
		}
		shoal_sleep_until(shoal_deadline_in(1000000));
	}
}

static bool runs_on(const tk_task *t, const void *engine)
{
	return t->on == engine;
}

/* The engine went: what it had goes to another one, while retries last. */
static void engine_gone(shoal_controller *ctl, tk_engine *e)
{
	for (tk_engine **p = &ctl->engines; *p; p = &(*p)->next)
		if (*p == e) {
			*p = e->next;
			break;
		}
	char how[96];
	engine_end(e->c.pid, how, sizeof(how));
	if (e->page)
		e->started = atomic_load_explicit(&e->page[0], memory_order_acquire);
	/* Tasks waiting for this engine alone fail (assign): no engine of its
	 * number will come. */
	for (tk_task *t; (t = q_pop(&e->waiting)) != NULL;) {
		if (t->over) { /* answered or dropped while it waited */
			sh_task_let_go(ctl, t);
			continue;
		}
		atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		assign(ctl, t);
	}
	/* The outbox first: those never ran. */
	for (tk_task *t; (t = q_pop(&e->outbox)) != NULL;) {
		if (t->over) {
			sh_task_let_go(ctl, t);
			continue;
		}
		take_back(ctl, t);
		assign(ctl, t);
	}
	/* Then those it had: the ones it never started go elsewhere as they
	 * are (retries count runs); those it started, while retries last. */
	tk_sweep w;
	uint64_t again = 0;
	sweep_begin(&w, ctl, runs_on, e);
	for (tk_task *t; (t = sweep_next(&w)) != NULL;) {
		if ((t->seq == 0 || t->seq > e->started) && t->raw) {
			take_back(ctl, t);
			again++;
			assign(ctl, t);
		} else if (t->seq == 0 || t->seq > e->started) {
			fail(ctl, t, SH_TASK_FAILED, SHOAL_EENGINE,
			     "engine %u (%s) %s before it started the task, whose arguments were "
			     "relayed to it, not kept",
			     e->c.num, e->c.peer, how);
		} else if (t->retries > 0) {
			t->retries--;
			take_back(ctl, t);
			atomic_fetch_add_explicit(&ctl->n_retried, 1, memory_order_relaxed);
			assign(ctl, t);
		} else {
			fail(ctl, t, SH_TASK_RETRIES, SHOAL_EENGINE,
			     "engine %u (%s) %s while running it", e->c.num, e->c.peer, how);
		}
	}
	uint32_t left = 0;
	for (tk_engine *o = ctl->engines; o; o = o->next)
		left++;
	sh_info("tasks",
		"engine %u (%s) %s; %llu tasks it had not started go elsewhere; %u engine%s left",
		e->c.num, e->c.peer, how, (unsigned long long)again, left, left == 1 ? "" : "s");
	for (tk_engine *o = ctl->engines; o; o = o->next)
		kick(&o->c);
}

/* ---- the two transports: rings on this host, a stream over TCP ---- */

static int conn_send(tk_conn *c, const void *p, size_t n)
{
	return c->tcp >= 0 ? sh_channel_write(c->ch, p, n, true, SHOAL_FOREVER)
			   : sh_msg_write(&c->l.down, p, n, SHOAL_FOREVER);
}

static int conn_read(tk_conn *c, size_t *len)
{
	size_t got = 0;
	return c->tcp >= 0 ? sh_channel_read_frame(c->ch, &c->in, &c->in_cap, len, SH_TASKS_MSG_MAX,
						   true, SHOAL_FOREVER)
			   : sh_msg_read_part(&c->l.up, &c->in, &c->in_cap, &got, len,
					      SH_TASKS_MSG_MAX, SHOAL_FOREVER);
}

/* Ends the connection's traffic: its fibers wake and see it. */
static void conn_shut(tk_conn *c)
{
	c->shut = true;
	if (c->tcp >= 0)
		shutdown(c->tcp, SHUT_RDWR);
	else
		sh_link_shut(&c->l);
}

/* ---- writers ---- */

/* For whom the engine seals t's large results (0: nobody, inline). */
static uint64_t owner_of(const tk_task *t)
{
	return t->client && !t->client->c.gone ? t->client->owner : 0;
}

/* Waits for the right to write to c (its writer fiber's, or a relay's). */
static int take_turn(tk_conn *c)
{
	char token;
	return shoal_chan_recv(c->turn, &token, SHOAL_FOREVER);
}

static void give_turn(tk_conn *c)
{
	char token = 1;
	shoal_chan_send(c->turn, &token, SHOAL_FOREVER); /* capacity 1: never waits */
}

/* Sends the engine's outbox in RUN batches. Small tasks are copied into
 * the batch; large ones are written from their own bytes (pinned until
 * the write is done: a deadline may answer a task meanwhile). */
static int engine_flush(tk_engine *e)
{
	sh_wbuf *w = &e->c.w;
	int rc = 0;
	/* Drops first: they are of entries sent already. Copied into the
	 * frame before it is written, so that drops made meanwhile wait for
	 * the next. */
	while (e->ndrops && rc == 0 && (rc = take_turn(&e->c)) == 0) {
		uint32_t n = e->ndrops < DROPS_PER_FRAME ? e->ndrops : DROPS_PER_FRAME;
		sh_tk_batch_begin(w);
		msgpack_packer pk;
		sh_wbuf_packer(w, &pk);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_uint64(&pk, e->drops[e->ndrops - n + i]);
		e->ndrops -= n;
		if ((rc = sh_tk_batch_end(w, n, SH_TK_DROP)) == 0)
			rc = conn_send(&e->c, w->p, w->len);
		give_turn(&e->c);
	}
	while (e->outbox.head && rc == 0 && (rc = take_turn(&e->c)) == 0) {
		sh_tk_batch_begin(w);
		msgpack_packer pk;
		sh_wbuf_packer(w, &pk);
		uint32_t n = 0;
		while (e->outbox.head && w->len + w->ref_bytes < 4 * SH_TASKS_BATCH_BYTES &&
		       rc == 0) {
			tk_task *t = q_pop(&e->outbox);
			if (t->over) {
				sh_task_let_go(e->c.ctl, t);
				continue;
			}
			t->sent = true; /* a retry sends it again */
			t->seq = ++e->seq_out;
			msgpack_pack_array(&pk, 4);
			msgpack_pack_uint64(&pk, t->tid);
			msgpack_pack_uint64(&pk, owner_of(t));
			if (t->rawlen < SH_TASKS_REF_MIN) {
				sh_wbuf_append(w, t->raw, t->rawlen);
			} else if ((rc = sh_wbuf_ref(w, t->raw, t->rawlen)) == 0 &&
				   (rc = sh_grow_array((void **)&e->pinned, &e->cap_pinned,
						       e->npinned, sizeof(*e->pinned))) == 0) {
				t->writing++;
				e->pinned[e->npinned++] = t;
			}
			n++;
		}
		if (rc == 0)
			rc = sh_tk_batch_end(w, n, SH_TK_RUN);
		if (rc == 0 && n && w->nrefs) {
			const sh_msg_part *parts;
			uint32_t np;
			if ((rc = sh_wbuf_gather(w, &parts, &np)) == 0)
				rc = e->c.tcp >= 0 ? sh_channel_writev(e->c.ch, parts, np, true,
								       SHOAL_FOREVER)
						   : sh_msg_write_parts(&e->c.l.down, parts, np,
									SHOAL_FOREVER);
		} else if (rc == 0 && n) {
			rc = conn_send(&e->c, w->p, w->len);
		}
		for (uint32_t i = 0; i < e->npinned; i++) {
			tk_task *t = e->pinned[i];
			t->writing--;
			sh_task_let_go(e->c.ctl, t);
		}
		e->npinned = 0;
		give_turn(&e->c);
	}
	return rc;
}

/* The answer to a STATUS question, into w: the figures, then a row per
 * engine. */
static int status_frame(shoal_controller *ctl, sh_wbuf *w)
{
	shoal_controller_stat st;
	shoal_controller_stat_get(ctl, &st);
	uint32_t n = 0;
	for (tk_engine *e = ctl->engines; e; e = e->next)
		n++;
	msgpack_packer pk;
	sh_tk_batch_begin(w);
	sh_wbuf_packer(w, &pk);
	msgpack_pack_uint32(&pk, st.engines);
	msgpack_pack_uint32(&pk, st.clients);
	msgpack_pack_uint64(&pk, st.queued);
	msgpack_pack_uint64(&pk, st.running);
	msgpack_pack_uint64(&pk, st.done);
	msgpack_pack_uint64(&pk, st.retried);
	msgpack_pack_uint64(&pk, st.failed);
	msgpack_pack_uint64(&pk, st.held_bytes);
	msgpack_pack_uint64(&pk, st.held_peak);
	msgpack_pack_array(&pk, n);
	for (tk_engine *e = ctl->engines; e; e = e->next) {
		msgpack_pack_array(&pk, 4);
		msgpack_pack_uint32(&pk, e->c.num);
		sh_mp_pack_cstr(&pk, e->c.peer);
		msgpack_pack_int32(&pk, (int32_t)e->c.pid);
		msgpack_pack_uint32(&pk, e->inflight);
	}
	return sh_tk_batch_end(w, 10, SH_TK_STATUS);
}

/* Sends the client's results, swapping batches so that results arriving
 * while this one is written go into the next; then the answers to its
 * STATUS questions, which see those results done. */
static int client_flush(tk_client *c)
{
	while (c->nres) {
		uint32_t n = c->nres;
		sh_wbuf t = c->res;
		c->res = c->c.w;
		c->c.w = t;
		c->nres = 0;
		sh_tk_batch_begin(&c->res);
		int rc = sh_tk_batch_end(&c->c.w, n, SH_TK_RESULTS);
		if (rc == 0)
			rc = conn_send(&c->c, c->c.w.p, c->c.w.len);
		if (c->c.w.cap > SH_MSG_BUF_KEEP)
			sh_wbuf_fini(&c->c.w);
		if (rc)
			return rc;
	}
	for (; c->asks && !c->nres; c->asks--) {
		sh_wbuf_reset(&c->c.w);
		int rc = status_frame(c->c.ctl, &c->c.w);
		if (rc == 0)
			rc = conn_send(&c->c, c->c.w.p, c->c.w.len);
		if (rc)
			return rc;
	}
	return 0;
}

static void *writer_main(void *arg)
{
	tk_conn *c = arg;
	char one;
	while (shoal_chan_recv(c->kick, &one, SHOAL_FOREVER) == 0) {
		c->kick_pending = false;
		int rc = c->engine ? engine_flush((tk_engine *)c) : client_flush((tk_client *)c);
		if (rc) {
			if (rc != SHOAL_ECLOSED)
				sh_warn("tasks", "%s %u: sending: %s",
					c->engine ? "engine" : "client", c->num,
					shoal_strerror(rc));
			conn_shut(c);
			break;
		}
	}
	return NULL;
}

/* Ends the connection when its socket does: the peer process is gone. */
static void *watch_main(void *arg)
{
	tk_conn *c = arg;
	for (;;) {
		char b;
		ssize_t n = recv(c->l.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (shoal_fd_wait(c->l.sock, SHOAL_FD_IN, SHOAL_FOREVER, NULL) == SHOAL_ECANCELED)
			return NULL;
	}
	conn_shut(c);
	return NULL;
}

/* ---- connections ---- */

static void conn_fini(tk_conn *c)
{
	if (c->writer) {
		shoal_cancel(c->writer);
		shoal_join(c->writer, NULL);
	}
	if (c->watcher) {
		shoal_cancel(c->watcher);
		shoal_join(c->watcher, NULL);
	}
	if (c->kick)
		shoal_chan_destroy(c->kick);
	if (c->turn)
		shoal_chan_destroy(c->turn);
	sh_link_fini(&c->l);
	sh_channel_free(c->ch);
	if (c->tcp >= 0) {
		shoal_fd_forget(c->tcp);
		close(c->tcp);
	}
	sh_wbuf_fini(&c->w);
	if (c->in)
		shoal_free(c->in, c->in_cap);
}

/* A buffer for n bytes of a large task: a spare one, warm, or new. */
static tk_frame *hold_get(shoal_controller *ctl, size_t n)
{
	tk_frame **p = &ctl->spare_frames, *fr;
	while (*p && (*p)->cap < n)
		p = &(*p)->next;
	if ((fr = *p) != NULL) {
		*p = fr->next;
		ctl->spare_bytes -= fr->cap;
	} else if ((fr = SH_NEW(tk_frame)) == NULL) {
		return NULL;
	} else if ((fr->p = shoal_alloc(n)) == NULL) {
		SH_DELETE(fr);
		return NULL;
	} else {
		fr->cap = n;
		fr->ctl = ctl;
	}
	fr->refs = 1;
	fr->next = NULL;
	ctl->held += fr->cap;
	ctl->nheld++;
	atomic_store_explicit(&ctl->n_held, ctl->held, memory_order_relaxed);
	if (ctl->held > atomic_load_explicit(&ctl->n_held_peak, memory_order_relaxed))
		atomic_store_explicit(&ctl->n_held_peak, ctl->held, memory_order_relaxed);
	return fr;
}

/* Reads and drops n bytes of a channel. */
static int discard(sh_channel *ch, uint64_t n)
{
	for (; n;) {
		const unsigned char *p;
		size_t k;
		int rc = sh_channel_peek(ch, &p, &k, true, SHOAL_FOREVER);
		if (rc)
			return rc;
		k = n < k ? (size_t)n : k;
		sh_channel_consume(ch, k);
		n -= k;
	}
	return 0;
}

/* Writes n zero bytes: the rest of a task whose client went on the way. */
static int pad(sh_channel *ch, uint64_t n)
{
	static const unsigned char zero[16384];
	int rc = 0;
	for (size_t k; rc == 0 && n; n -= k) {
		k = n < sizeof(zero) ? (size_t)n : sizeof(zero);
		rc = sh_channel_write(ch, zero, k, true, SHOAL_FOREVER);
	}
	return rc;
}

/* Passes the n bytes of t's fn and args from its client's channel on to
 * engine e's as they come, record by record (opened and sealed again:
 * each link has its own keys), without holding them. Over when the bytes are through; an engine
 * that goes on the way fails t (which has no retries: nothing is kept to send again) and the rest
 * of the bytes are dropped; a client that goes on the way leaves the engine a task padded with
 * zeros and a verdict of 0. */
static int relay(tk_client *c, tk_engine *e, tk_task *t, uint64_t n)
{
	shoal_controller *ctl = c->c.ctl;
	give(ctl, t, e, true);
	t->writing++;
	e->c.users++;
	int crc = 0, erc = take_turn(&e->c);
	bool turn = erc == 0;
	if (turn)
		t->seq = ++e->seq_out; /* its entry is next in the engine's stream */
	sh_wbuf w;
	sh_wbuf_init(&w);
	if (erc == 0) {
		msgpack_packer pk;
		sh_tk_batch_begin(&w);
		sh_wbuf_packer(&w, &pk);
		msgpack_pack_array(&pk, 3);
		msgpack_pack_uint64(&pk, t->tid);
		msgpack_pack_uint64(&pk, owner_of(t));
		msgpack_pack_uint64(&pk, n);
		w.oob_bytes = n + 8; /* declared; they come from the client */
		erc = sh_tk_batch_end(&w, 1, SH_TK_RUN);
	}
	/* the frame, the bytes and the verdict go as one stream of records */
	uint64_t taken = 0, verdict = SH_TK_RUN_IT;
	if (erc == 0) {
		int failed;
		int rc = sh_channel_relay(c->c.ch, e->c.ch, w.p, w.len, n, &verdict, 8, &taken,
					  &failed);
		*(failed == 1 ? &crc : &erc) = rc;
	}
	sh_wbuf_fini(&w);
	if (crc == 0 && taken < n)
		crc = discard(c->c.ch, n - taken); /* the engine failed first */
	else if (crc && erc == 0) {
		verdict = 0; /* the client went: the engine runs nothing */
		if ((erc = pad(e->c.ch, n - taken)) == 0)
			erc = sh_channel_write(e->c.ch, &verdict, 8, true, SHOAL_FOREVER);
	}
	if (turn)
		give_turn(&e->c);
	e->c.users--;
	if (erc) {
		conn_shut(&e->c);
		if (t->on == e)
			fail(ctl, t, SH_TASK_FAILED, SHOAL_EENGINE,
			     "engine %u (%s) went while the task's arguments were on their way: %s",
			     e->c.num, e->c.peer, shoal_strerror(erc));
	} else if (crc && t->on == e) {
		sh_task_end(ctl, t, SH_TASK_GONE); /* nobody to answer, and no answer coming */
	}
	t->writing--;
	sh_task_let_go(ctl, t);
	return crc;
}

/* A task with large arguments, alone in its frame: its bytes follow out
 * of band. From a client over TCP to an engine over TCP, with nothing to
 * keep for a retry or a dependency, they are relayed; else read into a
 * hold buffer (by reference from then on, as far as the engine). */
static int on_large(tk_client *c, const sh_frame *f)
{
	shoal_controller *ctl = c->c.ctl;
	sh_mp m;
	uint32_t k;
	sh_tk_submit v;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (sh_mp_array(&m, &k) || k != 1 || sh_tk_read_submit(&m, &v) || v.call ||
	    v.call_len != f->oob || sh_mp_done(&m))
		return SHOAL_EPROTO;
	int64_t now = shoal_now_ns();
	tk_task *t = NULL;
	int rc;
	if (c->c.tcp >= 0 && v.retries == 0 && v.nafter == 0 && v.nfollow == 0) {
		if ((rc = add_task(c, &v, now, NULL, NULL, false, &t)) != 0)
			return rc;
		tk_engine *e = t ? pick(ctl, t) : NULL;
		if (e && e->c.tcp >= 0 && !e->c.shut)
			return relay(c, e, t, v.call_len);
		if (!t)
			return discard(c->c.ch, v.call_len); /* failed early */
		t->writing++;				     /* while it waits for its bytes */
	}
	tk_frame *fr = hold_get(ctl, v.call_len);
	if (!fr)
		rc = SHOAL_ENOMEM;
	else if (c->c.tcp >= 0)
		rc = sh_channel_read(c->c.ch, fr->p, v.call_len, true, SHOAL_FOREVER);
	else
		rc = sh_msg_read_parts(&c->c.l.up, &(sh_msg_part){fr->p, v.call_len}, 1,
				       SHOAL_FOREVER);
	if (rc == 0 && t) {
		/* routed now that its bytes are in (unless answered meanwhile) */
		t->raw = fr->p;
		t->frame = fr;
		fr->refs++;
		t->writing--;
		if (t->over)
			sh_task_let_go(ctl, t);
		else
			release(ctl, t);
	} else if (rc == 0) {
		rc = add_task(c, &v, now, NULL, fr, true, &t);
	} else if (t) { /* its bytes never came: the connection ends */
		t->writing--;
		sh_task_end(ctl, t, SH_TASK_GONE);
	}
	if (fr)
		frame_unref(fr);
	return rc;
}

/* SH_TK_OWNER: the client's store owner token, for its results. */
static int on_owner(tk_client *c, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (f->oob || sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &c->owner) || sh_mp_done(&m))
		return SHOAL_EPROTO;
	return 0;
}

/* SH_TK_STATUS: a question, answered by the client's writer after the
 * results it has (at most a few pending: each is one small frame). */
static int on_status(tk_client *c, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (f->oob || sh_mp_array(&m, &n) || n != 0 || sh_mp_done(&m) || c->asks >= 16)
		return SHOAL_EPROTO;
	c->asks++;
	kick(&c->c);
	return 0;
}

static int submit_frame(tk_client *c, const sh_frame *f)
{
	if (f->op == SH_TK_OWNER)
		return on_owner(c, f);
	if (f->op == SH_TK_STATUS)
		return on_status(c, f);
	if (f->op != SH_TK_SUBMIT)
		return SHOAL_EPROTO;
	return f->oob ? on_large(c, f) : on_submit(c, f);
}

/* Waits, before reading more of a client, while the controller holds
 * HELD_MAX bytes of large tasks; polled, since what frees them (results,
 * deadlines, engines and clients leaving) is everywhere. */
static int hold_back(tk_client *c)
{
	shoal_controller *ctl = c->c.ctl;
	while (ctl->held > HELD_MAX &&
	       ctl->nheld > 2 * atomic_load_explicit(&ctl->n_engines, memory_order_relaxed)) {
		struct pollfd p = {.fd = c->c.tcp, .events = POLLRDHUP};
		if (c->c.shut || (c->c.tcp >= 0 && poll(&p, 1, 0) == 1))
			return SHOAL_ECLOSED;
		int rc = shoal_sleep_until(shoal_deadline_in(200000));
		if (rc != 0 && rc != SHOAL_ETIMEDOUT)
			return rc; /* cancelled */
	}
	return 0;
}

static void *conn_main(void *arg)
{
	tk_conn *hello = arg; /* a stand-in until we know what it is */
	shoal_controller *ctl = hello->ctl;
	uint32_t proto = 0, version = SH_TASKS_VERSION;
	int rc;
	if (hello->tcp >= 0) {
		char why[128];
		rc = sh_auth_server(hello->tcp, ctl->key, ctl->klen, ctl->opts.no_encrypt, &proto,
				    &hello->ch, why, sizeof(why));
		sh_hellos_drop(&ctl->tcp_hellos, hello->hello);
		if (rc != 0)
			sh_tcp_refused(&ctl->refusals, "tasks", hello->peer, why);
		else /* a message half moved may not hold its peer (or an engine) */
			sh_channel_set_stall(hello->ch, ctl->opts.stall_ns ? ctl->opts.stall_ns
									   : SH_TASKS_STALL_NS);
	} else {
		rc = sh_link_hello(&hello->l, &proto, &version);
	}
	if (rc == 0 && proto == SH_STORE_PROTO) {
		/* `shoal stat` asks a socket whether it is a store's first */
		sh_debug("tasks", "pid %d: a store's client; not ours", (int)hello->pid);
		rc = SHOAL_EPROTO;
	} else if (rc == 0 && (version != SH_TASKS_VERSION ||
			       (proto != SH_TASKS_CLIENT && proto != SH_TASKS_ENGINE))) {
		sh_warn("tasks",
			"pid %d: hello (%08x, %u), expected a client or an engine of "
			"version %d",
			(int)hello->pid, proto, version, SH_TASKS_VERSION);
		rc = SHOAL_EPROTO;
	}
	tk_conn *c = NULL;
	tk_engine *e = NULL;
	tk_client *cl = NULL;
	bool joined = false;
	if (rc == 0 && proto == SH_TASKS_ENGINE && (e = SH_NEW(tk_engine)) != NULL)
		c = &e->c;
	else if (rc == 0 && proto == SH_TASKS_CLIENT && (cl = SH_NEW(tk_client)) != NULL)
		c = &cl->c;
	else if (rc == 0)
		rc = SHOAL_ENOMEM;
	if (c) {
		c->ctl = ctl;
		c->l = hello->l;
		c->tcp = hello->tcp;
		c->ch = hello->ch;
		hello->tcp = -1;
		hello->ch = NULL;
		memcpy(c->peer, hello->peer, sizeof(c->peer));
		c->pid = hello->pid;
		c->engine = e != NULL;
		sh_link_init(&hello->l, -1);
		sh_wbuf_init(&c->w);
		uint64_t info[1] = {e ? ctl->next_engine : ctl->next_client + 1};
		/* an engine on this host gets a page where it says which task
		 * it starts (its size fixed: no truncating it under us) */
		int page = -1;
		if (e)
			e->page_len = sh_tk_page_bytes(ctl->window);
		if (c->tcp < 0 && e &&
		    (rc = sh_memfd_create("shoal-engine-page", e->page_len, true, &page)) == 0 &&
		    (rc = sh_memfd_fix_size(page)) == 0)
			rc = sh_shm_map(page, e->page_len, true, (void **)&e->page);
		if (c->tcp < 0 && rc == 0)
			rc = sh_link_accept(&c->l, SH_TASKS_RING_CAP, info, 1, e ? &page : NULL,
					    e ? 1 : 0);
		if (page >= 0)
			close(page);
		if (rc == 0)
			rc = shoal_chan_create(&c->kick, 1, 1);
		if (rc == 0 && (rc = shoal_chan_create(&c->turn, 1, 1)) == 0)
			give_turn(c);
		if (rc == 0)
			rc = shoal_spawn(&c->writer, writer_main, c,
					 &(shoal_fiber_opts){.name = "tasks-writer"});
		if (rc == 0 && c->tcp < 0)
			rc = shoal_spawn(&c->watcher, watch_main, c,
					 &(shoal_fiber_opts){.name = "tasks-watch"});
		c->l.up.spin_ns = 50000;
	}
	sh_link_fini(&hello->l);
	sh_channel_free(hello->ch);
	if (hello->tcp >= 0) {
		shoal_fd_forget(hello->tcp);
		close(hello->tcp);
	}
	SH_DELETE(hello);
	if (rc == 0 && e) {
		e->c.num = ctl->next_engine++;
		e->next = ctl->engines;
		ctl->engines = e;
		atomic_fetch_add_explicit(&ctl->n_engines, 1, memory_order_relaxed);
		sh_info("tasks", "engine %u (%s) joined; %u engine%s now", e->c.num, e->c.peer,
			atomic_load_explicit(&ctl->n_engines, memory_order_relaxed),
			atomic_load_explicit(&ctl->n_engines, memory_order_relaxed) == 1 ? ""
											 : "s");
		joined = true;
		assign_pending(ctl);
		fill(ctl, e);
	} else if (rc == 0) {
		cl->c.num = ++ctl->next_client;
		sh_wbuf_init(&cl->res);
		sh_tk_batch_begin(&cl->res);
		cl->next = ctl->clients;
		ctl->clients = cl;
		atomic_fetch_add_explicit(&ctl->n_clients, 1, memory_order_relaxed);
		joined = true;
	}
	while (rc == 0) {
		size_t len = 0;
		sh_frame f;
		char why[160];
		if (cl && (rc = hold_back(cl)) != 0)
			break;
		rc = conn_read(c, &len);
		if (rc == 0 && (rc = sh_frame_decode(c->in, len, &f, why, sizeof(why))) != 0)
			sh_warn("tasks", "%s %u (%s): %s", e ? "engine" : "client", c->num, c->peer,
				why);
		if (rc == 0 && e)
			rc = f.op == SH_TK_STARTED && c->tcp >= 0 ? on_started(e, &f)
								  : on_done(e, &f);
		else if (rc == 0)
			rc = submit_frame(cl, &f);
		if (rc == SHOAL_EPROTO)
			sh_warn("tasks", "%s %u (%s): a malformed batch; connection ends",
				e ? "engine" : "client", c->num, c->peer);
		sh_msg_trim(&c->in, &c->in_cap);
	}
	if (c && c->ch && *sh_channel_error(c->ch))
		sh_warn("tasks", "%s %u (%s): %s; connection dropped", e ? "engine" : "client",
			c->num, c->peer, sh_channel_error(c->ch));
	if (c) {
		c->gone = true;
		conn_shut(c);
		if (e && joined) {
			engine_gone(ctl, e);
		} else if (cl && joined) {
			for (tk_client **p = &ctl->clients; *p; p = &(*p)->next)
				if (*p == cl) {
					*p = cl->next;
					break;
				}
			client_gone(ctl, cl);
		}
		while (c->users) /* relays to it, finding it gone */
			shoal_sleep_until(shoal_deadline_in(1000000));
		conn_fini(c);
		if (e) {
			if (e->pinned)
				shoal_free(e->pinned, e->cap_pinned * sizeof(*e->pinned));
			if (e->page)
				sh_shm_unmap((void *)e->page, e->page_len);
			if (e->drops)
				shoal_free(e->drops, e->cap_drops * sizeof(*e->drops));
		}
		if (cl && joined)
			sh_wbuf_fini(&cl->res);
		if (cl)
			client_fini(cl);
		/* counted out once nothing of theirs is open any more */
		if (joined)
			atomic_fetch_sub_explicit(e ? &ctl->n_engines : &ctl->n_clients, 1,
						  memory_order_relaxed);
		SH_DELETE(e ? (void *)e : (void *)cl);
	}
	ctl->nconns--;
	return NULL;
}

static void *accept_main(void *arg)
{
	shoal_controller *ctl = arg;
	for (;;) {
		int fd = accept4(ctl->lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ||
			    errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
				int64_t until =
					errno == EAGAIN || errno == EINTR || errno == ECONNABORTED
						? SHOAL_FOREVER
						: shoal_deadline_in(100000000);
				if (until != SHOAL_FOREVER)
					sh_warn("tasks", "accept: %s; retrying in 100 ms",
						strerror(errno));
				if ((until == SHOAL_FOREVER
					     ? shoal_fd_wait(ctl->lsock, SHOAL_FD_IN, until, NULL)
					     : shoal_sleep_until(until)) == SHOAL_ECANCELED)
					return NULL;
				continue;
			}
			sh_error("tasks", "accept: %s", strerror(errno));
			return NULL;
		}
		shoal_yield(); /* a flood of connects must not crowd out the rest (tcp.c) */
		pid_t pid = 0;
		tk_conn *h = NULL;
		if (!sh_link_peer_allowed(fd, (gid_t)-1, "tasks", &pid) || !(h = SH_NEW(tk_conn))) {
			close(fd);
			continue;
		}
		h->ctl = ctl;
		h->pid = pid;
		h->tcp = -1;
		snprintf(h->peer, sizeof(h->peer), "pid %d", (int)pid);
		sh_link_init(&h->l, fd);
		ctl->nconns++;
		if (shoal_spawn(NULL, conn_main, h,
				&(shoal_fiber_opts){.name = "tasks-conn", .detached = 1}) != 0) {
			ctl->nconns--;
			sh_link_fini(&h->l);
			SH_DELETE(h);
		}
	}
}

/* Peers on other hosts: each proves it knows the secret first. Strangers
 * may not crowd out anyone: at most TCP_HELLOS of them at once in their
 * handshake (5 s each at most), TCP_HELLOS_PER_SOURCE from one address, a
 * silent one giving its place up to a newcomer when all are taken
 * (sh_hellos), and TCP takes no connection that would leave fewer than
 * LOCAL_SPARE descriptors' worth of local ones. */
#define TCP_HELLOS 64
#define TCP_HELLOS_PER_SOURCE 16
#define FDS_PER_CONN 7 /* 6 before the link's connector doorbell (efd_conn) */
#define LOCAL_SPARE 32

static void *tcp_accept_main(void *arg)
{
	shoal_controller *ctl = arg;
	for (;;) {
		char who[96];
		int fd = sh_tcp_accept(ctl->tcp_lsock, "tasks", who, sizeof(who));
		if (fd < 0)
			return NULL; /* cancelled */
		uint64_t spare =
			ctl->conn_budget / 4 < LOCAL_SPARE ? ctl->conn_budget / 4 : LOCAL_SPARE;
		char why[160];
		int slot = -1;
		if ((uint64_t)ctl->nconns + spare >= ctl->conn_budget)
			snprintf(why, sizeof(why), "out of descriptors");
		else
			slot = sh_hellos_take(&ctl->tcp_hellos, fd, who, why, sizeof(why));
		if (slot < 0) {
			close(fd);
			sh_tcp_refused(&ctl->refusals, "tasks", who, why);
			continue;
		}
		tk_conn *h = SH_NEW(tk_conn);
		if (!h) {
			sh_hellos_drop(&ctl->tcp_hellos, slot);
			close(fd);
			continue;
		}
		h->ctl = ctl;
		h->tcp = fd;
		h->hello = slot;
		sh_link_init(&h->l, -1);
		snprintf(h->peer, sizeof(h->peer), "%s", who);
		ctl->nconns++;
		if (shoal_spawn(NULL, conn_main, h,
				&(shoal_fiber_opts){.name = "tasks-tcp", .detached = 1}) != 0) {
			ctl->nconns--;
			sh_hellos_drop(&ctl->tcp_hellos, slot);
			close(fd);
			SH_DELETE(h);
		}
	}
}

static void spares_free(shoal_controller *ctl)
{
	for (tk_frame *fr; (fr = ctl->spare_frames) != NULL;) {
		ctl->spare_frames = fr->next;
		shoal_free(fr->p, fr->cap);
		SH_DELETE(fr);
	}
	ctl->spare_bytes = 0;
}

/* Spare buffers go back once no large task came for a second. */
static void spares_trim(shoal_controller *ctl)
{
	if (!ctl->nheld && ctl->spare_frames && shoal_now_ns() - ctl->last_hold >= SPARE_IDLE_NS)
		spares_free(ctl);
}

static bool overdue(const tk_task *t, const void *now)
{
	return t->deadline && *(const int64_t *)now > t->deadline;
}

/* Fails what passed its deadline; trims the spares. */
static void *deadline_main(void *arg)
{
	shoal_controller *ctl = arg;
	while (shoal_sleep_until(shoal_deadline_in(5000000)) == SHOAL_ETIMEDOUT) {
		spares_trim(ctl);
		if (!ctl->with_deadline)
			continue;
		int64_t now = shoal_now_ns();
		tk_sweep w;
		sweep_begin(&w, ctl, overdue, &now);
		for (tk_task *t; (t = sweep_next(&w)) != NULL;)
			fail(ctl, t, SH_TASK_DEADLINE, SHOAL_ETIMEDOUT,
			     "task %llu did not finish before its deadline",
			     (unsigned long long)t->cid);
	}
	return NULL;
}

static void *controller_thread(void *arg)
{
	shoal_controller *ctl = arg;
	/* a write to a socket whose peer went raises SIGPIPE where no
	 * MSG_NOSIGNAL can say otherwise: blocked in this thread, it stays
	 * pending, harmless, and the call fails with EPIPE */
	sigset_t pipe_sig;
	sigemptyset(&pipe_sig);
	sigaddset(&pipe_sig, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL);
	shoal_sched *sched;
	int rc = shoal_sched_create(&sched, NULL);
	if (rc) {
		sh_error("tasks", "scheduler: %s", shoal_strerror(rc));
		return NULL;
	}
	shoal_fiber *acc = NULL, *dl = NULL, *tacc = NULL;
	if ((rc = shoal_spawn(&acc, accept_main, ctl,
			      &(shoal_fiber_opts){.name = "tasks-accept"})) ||
	    (rc = shoal_spawn(&dl, deadline_main, ctl,
			      &(shoal_fiber_opts){.name = "tasks-deadlines"})) ||
	    (ctl->tcp_lsock >= 0 &&
	     (rc = shoal_spawn(&tacc, tcp_accept_main, ctl,
			       &(shoal_fiber_opts){.name = "tasks-tcp-accept"}))))
		sh_error("tasks", "fibers: %s", shoal_strerror(rc));
	while (rc == 0) {
		uint64_t v;
		if (read(ctl->stop_efd, &v, 8) == 8)
			break;
		shoal_fd_wait(ctl->stop_efd, SHOAL_FD_IN, SHOAL_FOREVER, NULL);
	}
	ctl->stopping = true;
	if (acc) {
		shoal_cancel(acc);
		shoal_join(acc, NULL);
	}
	if (dl) {
		shoal_cancel(dl);
		shoal_join(dl, NULL);
	}
	if (tacc) {
		shoal_cancel(tacc);
		shoal_join(tacc, NULL);
	}
	/* Closing a connection's rings ends its fiber, which frees it. */
	for (tk_engine *e = ctl->engines; e; e = e->next)
		conn_shut(&e->c);
	for (tk_client *c = ctl->clients; c; c = c->next)
		conn_shut(&c->c);
	while (ctl->nconns)
		shoal_sleep_until(shoal_deadline_in(1000000));
	/* What is left had no engine and no client any more. */
	for (tk_task *t; (t = q_pop(&ctl->pending)) != NULL || (t = q_pop(&ctl->backlog)) != NULL;)
		sh_task_end(ctl, t, SH_TASK_STOP);
	shoal_fd_forget(ctl->lsock);
	shoal_fd_forget(ctl->stop_efd);
	if (ctl->tcp_lsock >= 0)
		shoal_fd_forget(ctl->tcp_lsock);
	shoal_sched_destroy(sched);
	return NULL;
}

/* ---- the API ---- */

static const char *const scheme_names[] = {
	[SHOAL_SCHEME_LEASTLOAD] = "leastload",
	[SHOAL_SCHEME_PURE] = "pure",
	[SHOAL_SCHEME_LRU] = "lru",
	[SHOAL_SCHEME_WEIGHTED] = "weighted",
	[SHOAL_SCHEME_TWOBIN] = "twobin",
};

int shoal_scheme_parse(const char *name)
{
	for (size_t i = 0; name && i < sizeof(scheme_names) / sizeof(scheme_names[0]); i++)
		if (!strcmp(name, scheme_names[i]))
			return (int)i;
	return -1;
}

const char *shoal_scheme_name(shoal_scheme s)
{
	return (unsigned)s < sizeof(scheme_names) / sizeof(scheme_names[0]) ? scheme_names[s] : "?";
}

void shoal_controller_opts_init(shoal_controller_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->scheme = SHOAL_SCHEME_LEASTLOAD;
	o->window = SH_TASKS_WINDOW;
}

static void controller_free(shoal_controller *ctl)
{
	sh_map_fini(&ctl->tasks);
	spares_free(ctl);
	if (ctl->lsock >= 0) {
		close(ctl->lsock);
		unlink(ctl->path);
	}
	if (ctl->stop_efd >= 0)
		close(ctl->stop_efd);
	if (ctl->tcp_lsock >= 0)
		close(ctl->tcp_lsock);
	sh_hellos_fini(&ctl->tcp_hellos);
	memset(ctl->key, 0, sizeof(ctl->key));
	SH_DELETE(ctl);
}

int shoal_controller_open(shoal_controller **out, const shoal_controller_opts *o)
{
	if (!out || (o && (unsigned)o->scheme > SHOAL_SCHEME_TWOBIN))
		return SHOAL_EINVAL;
	shoal_controller *ctl = SH_NEW(shoal_controller);
	if (!ctl)
		return SHOAL_ENOMEM;
	if (o)
		ctl->opts = *o;
	else
		shoal_controller_opts_init(&ctl->opts);
	ctl->lsock = ctl->stop_efd = ctl->tcp_lsock = -1;
	if (sh_hellos_init(&ctl->tcp_hellos, TCP_HELLOS, TCP_HELLOS_PER_SOURCE) != 0) {
		SH_DELETE(ctl);
		return SHOAL_ENOMEM;
	}
	ctl->rng = (uint64_t)shoal_now_ns() | 1;
	ctl->window = ctl->opts.window ? ctl->opts.window : SH_TASKS_WINDOW;
	if (ctl->window > SH_TASKS_WINDOW_MAX) {
		sh_error("tasks", "a window of %u tasks: expected at most %u", ctl->window,
			 SH_TASKS_WINDOW_MAX);
		sh_hellos_fini(&ctl->tcp_hellos);
		SH_DELETE(ctl);
		return SHOAL_EINVAL;
	}
	ctl->conn_budget = sh_link_fd_budget() / FDS_PER_CONN;
	int rc = 0;
	if (ctl->opts.tcp) {
		/* No TCP without a secret: nobody unauthenticated runs anything. */
		char why[160];
		if (ctl->opts.secret && ctl->opts.secret_len >= 16 &&
		    ctl->opts.secret_len <= SH_SECRET_MAX) {
			memcpy(ctl->key, ctl->opts.secret, ctl->opts.secret_len);
			ctl->klen = ctl->opts.secret_len;
		} else if (ctl->opts.secret) {
			snprintf(why, sizeof(why), "a secret of %zu bytes: expected 16 to %d",
				 ctl->opts.secret_len, SH_SECRET_MAX);
			rc = SHOAL_EINVAL;
		} else {
			rc = sh_secret_load(ctl->key, &ctl->klen, why, sizeof(why));
		}
		if (rc == 0)
			rc = sh_tcp_listen(ctl->opts.tcp, &ctl->tcp_lsock, ctl->tcp_bound,
					   sizeof(ctl->tcp_bound), why, sizeof(why));
		if (rc == 0 && ctl->opts.no_encrypt)
			sh_warn("tasks",
				"TCP at %s: links whose peers also ask for it go unencrypted "
				"(no_encrypt: a trusted network); each record is still "
				"authenticated",
				ctl->tcp_bound);
		if (rc) {
			sh_error("tasks", "TCP: %s", why);
			controller_free(ctl);
			return rc;
		}
	}
	rc = sh_link_listen(ctl->opts.socket, "tasks", (gid_t)-1, ctl->path, sizeof(ctl->path),
			    &ctl->lsock);
	if (rc == 0 && (ctl->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		rc = shoal_errno();
	if (rc == 0 && (rc = -pthread_create(&ctl->thread, NULL, controller_thread, ctl)) != 0)
		sh_error("tasks", "thread: %s", shoal_strerror(rc));
	if (rc) {
		controller_free(ctl);
		return rc;
	}
	ctl->opts.socket = ctl->path;
	ctl->opts.tcp = ctl->tcp_lsock >= 0 ? ctl->tcp_bound : NULL;
	ctl->opts.secret = NULL; /* the caller's memory: our copy is in key */
	*out = ctl;
	return 0;
}

const char *shoal_controller_tcp(const shoal_controller *c)
{
	return c && c->tcp_lsock >= 0 ? c->tcp_bound : NULL;
}

const char *shoal_controller_socket(const shoal_controller *c)
{
	return c ? c->path : NULL;
}

void shoal_controller_close(shoal_controller *ctl)
{
	if (!ctl)
		return;
	sh_eventfd_signal(ctl->stop_efd);
	pthread_join(ctl->thread, NULL);
	controller_free(ctl);
}

int shoal_engine_spawn(const char *socket, const char *so, const char *runner, pid_t *pid)
{
	return shoal_engine_spawn_store(socket, so, runner, NULL, pid);
}

int shoal_engine_spawn_store(const char *socket, const char *so, const char *runner,
			     const char *store, pid_t *pid)
{
	if (!socket || !so || !pid)
		return SHOAL_EINVAL;
	char installed[PATH_MAX];
	if (!runner)
		runner = getenv("SHOAL_ENGINE");
	if (!runner)
		runner = sh_program_path("shoal-engine", installed, sizeof(installed));
	char *argv[] = {(char *)runner,
			"--socket",
			(char *)socket,
			"--so",
			(char *)so,
			"--die-with-parent",
			store ? "--store" : NULL,
			(char *)store,
			NULL};
	extern char **environ;
	int rc = posix_spawn(pid, runner, NULL, NULL, argv, environ);
	if (rc)
		sh_warn("tasks", "cannot run %s: %s", runner, strerror(rc));
	return -rc;
}

int shoal_controller_stat_get(shoal_controller *c, shoal_controller_stat *st)
{
	if (!c || !st)
		return SHOAL_EINVAL;
	st->engines = atomic_load_explicit(&c->n_engines, memory_order_relaxed);
	st->clients = atomic_load_explicit(&c->n_clients, memory_order_relaxed);
	st->queued = atomic_load_explicit(&c->n_queued, memory_order_relaxed);
	st->running = atomic_load_explicit(&c->n_running, memory_order_relaxed);
	st->done = atomic_load_explicit(&c->n_done, memory_order_relaxed);
	st->retried = atomic_load_explicit(&c->n_retried, memory_order_relaxed);
	st->failed = atomic_load_explicit(&c->n_failed, memory_order_relaxed);
	st->held_bytes = atomic_load_explicit(&c->n_held, memory_order_relaxed);
	st->held_peak = atomic_load_explicit(&c->n_held_peak, memory_order_relaxed);
	return 0;
}

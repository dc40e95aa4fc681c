/* The task controller's scheduling: the queues a task waits in, the
 * schemes that pick its engine, at most a window of tasks on each engine,
 * dependencies (after, follow), and what becomes of tasks when an engine
 * goes (elsewhere, while retries last) or a client does (dropped where
 * not started). Runs on the controller thread's fibers (controller.c). */
#include "tasks/controller_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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

tk_task *sh_ctl_q_pop(tk_queue *q)
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

/* ---- engines' windows and answers ---- */

/* t is engine e's from now on (sent already, or not yet), on the books. */
void sh_ctl_give(shoal_controller *ctl, tk_task *t, tk_engine *e, bool sent)
{
	t->on = e;
	t->sent = sent;
	e->inflight++;
	e->last = ++ctl->clock;
	atomic_fetch_add_explicit(&ctl->n_running, 1, memory_order_relaxed);
}

/* The reverse: t is no engine's (it goes elsewhere, or nowhere); its
 * engine has room for the next. */
void sh_ctl_take_back(shoal_controller *ctl, tk_task *t)
{
	tk_engine *e = t->on;
	e->inflight--;
	t->on = NULL;
	t->seq = 0;
	atomic_fetch_sub_explicit(&ctl->n_running, 1, memory_order_relaxed);
	sh_ctl_fill(ctl, e);
}

static void settle_deps(shoal_controller *ctl, tk_client *c, uint64_t id, int32_t fate);

/* Appends the result of t (status, and raw: an encoded value, or NULL
 * with a message) to its client's batch, and ends t (why). */
void sh_ctl_answer(shoal_controller *ctl, tk_task *t, sh_task_why why, int32_t status,
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
		sh_ctl_kick(&c->c);
	}
	atomic_fetch_add_explicit(&ctl->n_done, 1, memory_order_relaxed);
	if (status != 0 && !raw)
		atomic_fetch_add_explicit(&ctl->n_failed, 1, memory_order_relaxed);
	sh_task_end(ctl, t, why);
	if (c && !c->c.gone)
		settle_deps(ctl, c, cid, fate);
}

void sh_ctl_fail(shoal_controller *ctl, tk_task *t, sh_task_why why, int code, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sh_ctl_answer(ctl, t, why, code, NULL, 0, msg);
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
tk_engine *sh_ctl_pick(shoal_controller *ctl, const tk_task *t)
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
	tk_engine *e = sh_ctl_pick(ctl, t);
	if (!e) {
		tk_queue *q = &ctl->pending;
		if (t->engine_want < 0)
			q = &ctl->backlog;
		else
			for (tk_engine *g = ctl->engines; g; g = g->next)
				if (g->c.num == (uint32_t)t->engine_want)
					q = &g->waiting;
		if (q == &ctl->pending && (uint32_t)t->engine_want < ctl->next_engine) {
			sh_ctl_fail(ctl, t, SH_TASK_FAILED, SHOAL_EENGINE,
				    "task %llu was for engine %d alone, which has gone",
				    (unsigned long long)t->cid, t->engine_want);
			return;
		}
		q_push(q, t);
		atomic_fetch_add_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		return;
	}
	sh_ctl_give(ctl, t, e, false);
	q_push(&e->outbox, t);
	sh_ctl_kick(&e->c);
}

/* Engine e has room: tasks waiting for it alone, then the backlog's. */
void sh_ctl_fill(shoal_controller *ctl, tk_engine *e)
{
	bool gave = false;
	while (e->inflight < ctl->window && !e->c.gone) {
		tk_task *t = sh_ctl_q_pop(&e->waiting);
		if (!t && !(t = sh_ctl_q_pop(&ctl->backlog)))
			break;
		if (t->over) { /* answered or dropped while it waited */
			sh_task_let_go(ctl, t);
			continue;
		}
		atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		sh_ctl_give(ctl, t, e, false);
		q_push(&e->outbox, t);
		gave = true;
	}
	if (gave)
		sh_ctl_kick(&e->c);
}

/* Tasks that waited for an engine try again (one connected). */
void sh_ctl_assign_pending(shoal_controller *ctl)
{
	tk_queue q = ctl->pending;
	ctl->pending = (tk_queue){0};
	for (tk_task *t; (t = sh_ctl_q_pop(&q)) != NULL;) {
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
void sh_ctl_release(shoal_controller *ctl, tk_task *t)
{
	char why[128];
	int32_t e = -1;
	if (t->nfollow && follow_engine(t->client, t, &e, why, sizeof(why)) != 0) {
		sh_ctl_fail(ctl, t, SH_TASK_FAILED, SHOAL_EDEPFAIL, "task %llu: %s",
			    (unsigned long long)t->cid, why);
		return;
	}
	if (e >= 0) {
		bool there = false;
		for (tk_engine *g = ctl->engines; g && !there; g = g->next)
			there = (int32_t)g->c.num == e;
		if (!there) {
			sh_ctl_fail(ctl, t, SH_TASK_FAILED, SHOAL_EDEPFAIL,
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
			sh_ctl_fail(ctl, t, SH_TASK_FAILED, SHOAL_EDEPFAIL,
				    "task %llu depends on task %llu, which failed",
				    (unsigned long long)t->cid, (unsigned long long)id);
		else if (t->unmet == 0)
			sh_ctl_release(ctl, t);
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

/* A task of client c as its entry v says, its fn and args at raw (the
 * hold buffer fr's, or copied): taken on the books, its dependencies
 * noted, and routed if route (or failed early: then *out is NULL). A
 * malformed entry ends the connection (a client of ours never sends one). */
int sh_ctl_add_task(tk_client *c, const sh_tk_submit *v, int64_t now, const unsigned char *raw,
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
		sh_ctl_fail(ctl, t, SH_TASK_FAILED, rc, "%s", why);
		return 0;
	}
	*out = t;
	if (route && t->unmet == 0)
		sh_ctl_release(ctl, t);
	return 0;
}

/* ---- clients and engines that go ---- */

void sh_ctl_sweep_begin(tk_sweep *w, shoal_controller *ctl, tk_match match, const void *arg)
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
tk_task *sh_ctl_sweep_next(tk_sweep *w)
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
		sh_ctl_kick(&e->c);
	} /* else without memory it runs: its result goes to nobody */
}

/* The client went: what it queued is dropped, and what engines hold of it
 * and have not started; what runs is answered to nobody, and asked to
 * give up. */
void sh_ctl_client_gone(shoal_controller *ctl, tk_client *c)
{
	tk_sweep w;
	uint64_t dropped = 0;
	sh_ctl_sweep_begin(&w, ctl, droppable_of, c);
	for (tk_task *t; (t = sh_ctl_sweep_next(&w)) != NULL; dropped++) {
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
void sh_ctl_client_fini(tk_client *c)
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

/* How the engine process ended, when it is a child of this process. It
 * is looked at, not reaped (WNOWAIT): whoever spawned it waits for it, as
 * for any child of theirs. */
static void engine_end(pid_t pid, char *how, size_t len)
{
	snprintf(how, len, "went away");
	if (pid <= 0)
		return; /* over TCP: no process of ours */
	/* It may still be on its way out: its pidfd says when it is, within
	 * 100 ms. */
	int64_t until = shoal_deadline_in(100000000);
	int pidfd = -1;
	for (;;) {
		siginfo_t si;
		si.si_pid = 0;
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
			break; /* not ours, or reaped already */
		if (si.si_pid == pid) {
			if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)
				snprintf(how, len, "was killed by signal %d (%s)", si.si_status,
					 strsignal(si.si_status));
			else
				snprintf(how, len, "exited with status %d", si.si_status);
			break;
		}
		if (pidfd < 0 && (pidfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0)
			break; /* gone meanwhile (then reaped), or no pidfds */
		if (shoal_fd_wait(pidfd, SHOAL_FD_IN, until, NULL) != 0)
			break; /* still running after 100 ms, or cancelled */
	}
	if (pidfd >= 0) {
		shoal_fd_forget(pidfd);
		close(pidfd);
	}
}

static bool runs_on(const tk_task *t, const void *engine)
{
	return t->on == engine;
}

/* The engine went: what it had goes to another one, while retries last. */
void sh_ctl_engine_gone(shoal_controller *ctl, tk_engine *e)
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
	for (tk_task *t; (t = sh_ctl_q_pop(&e->waiting)) != NULL;) {
		if (t->over) { /* answered or dropped while it waited */
			sh_task_let_go(ctl, t);
			continue;
		}
		atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
		assign(ctl, t);
	}
	/* The outbox first: those never ran. */
	for (tk_task *t; (t = sh_ctl_q_pop(&e->outbox)) != NULL;) {
		if (t->over) {
			sh_task_let_go(ctl, t);
			continue;
		}
		sh_ctl_take_back(ctl, t);
		assign(ctl, t);
	}
	/* Then those it had: the ones it never started go elsewhere as they
	 * are (retries count runs); those it started, while retries last. */
	tk_sweep w;
	uint64_t again = 0;
	sh_ctl_sweep_begin(&w, ctl, runs_on, e);
	for (tk_task *t; (t = sh_ctl_sweep_next(&w)) != NULL;) {
		if ((t->seq == 0 || t->seq > e->started) && t->raw) {
			sh_ctl_take_back(ctl, t);
			again++;
			assign(ctl, t);
		} else if (t->seq == 0 || t->seq > e->started) {
			sh_ctl_fail(ctl, t, SH_TASK_FAILED, SHOAL_EENGINE,
				    "engine %u (%s) %s before it started the task, whose "
				    "arguments were relayed to it, not kept",
				    e->c.num, e->c.peer, how);
		} else if (t->retries > 0) {
			t->retries--;
			sh_ctl_take_back(ctl, t);
			atomic_fetch_add_explicit(&ctl->n_retried, 1, memory_order_relaxed);
			assign(ctl, t);
		} else {
			sh_ctl_fail(ctl, t, SH_TASK_RETRIES, SHOAL_EENGINE,
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
		sh_ctl_kick(&o->c);
}

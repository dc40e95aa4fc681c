/* shoal's blocking C calls from a thread with tasklets (module.h:
 * sh_tl_blocking_begin/end, sh_tl_turn_take/give): a store client's,
 * an extension's or the task farm's wait switches fibers inside the C
 * call, so the call keeps the GIL and saves and restores the calling
 * context's per-tasklet thread-state fields around it, as a park does;
 * the tasklets of a thread take turns at one connection through a queue
 * of parked waiters, never the object's pthread mutex (its holder keeps
 * it across switches). Outside tasklets the calls let go of the GIL as
 * any blocking call does. */
#include "module.h"
#include "tasklet_impl.h"
#include "tasklet_pystate.h"

#include <stddef.h>

_Static_assert(sizeof(sh_pystate) <= sizeof(((sh_tl_blocking *)0)->st), "sh_pystate fits");
_Static_assert(sizeof(sh_wait) <= sizeof(((sh_tl_turn *)0)->w), "sh_wait fits");
_Static_assert(offsetof(sh_tl_turn, w) == 0, "a turn's wait is its first member");

bool sh_tl_active(void)
{
	return sh_tl_peek() != NULL;
}

void sh_tl_blocking_begin(sh_tl_blocking *b, bool cancel)
{
	sh_tl *tl = sh_tl_peek();
	b->tl = tl;
	b->cancel = cancel;
	if (!tl) {
		b->ts = PyEval_SaveThread();
		return;
	}
	ShTasklet *me = tl->current;
	b->me = me;
	b->outer = me->call; /* from a host service inside that call */
	me->call = b;
	sh_pystate_save(tl->ts, (sh_pystate *)b->st, &tl->tracing);
}

void sh_tl_blocking_python(void)
{
	sh_tl *tl = sh_tl_peek();
	if (!tl)
		return;
	shoal_fiber *f = shoal_self();
	if (tl->current->fiber == f)
		return; /* no other context ran since */
	/* a tasklet's fiber has the tasklet as its argument (tasklet_call) */
	ShTasklet *me = f == tl->main->fiber ? tl->main : f->arg;
	if (!me->call)
		return;
	sh_pystate_restore(tl->ts, (const sh_pystate *)me->call->st, tl->tracing);
	tl->current = me;
}

bool sh_tl_blocking_end(sh_tl_blocking *b, int rc)
{
	sh_tl *tl = b->tl;
	if (!tl) {
		PyEval_RestoreThread(b->ts);
		return false;
	}
	sh_pystate_restore(tl->ts, (const sh_pystate *)b->st, tl->tracing);
	ShTasklet *me = b->me;
	tl->current = me;
	me->call = b->outer;
	if (!me->kill_pending)
		return false;
	/* The kill cancelled the fiber for this call's wait only: the
	 * tasklet's own waits (a finally that sleeps) must still work. */
	shoal_self()->cancelled = false;
	if (rc != SHOAL_ECANCELED)
		return false; /* done anyway: TaskletExit at its next switch point */
	me->kill_pending = false;
	return true;
}

void sh_tl_raise_killed(void)
{
	PyErr_SetString(ShTaskletExit, "the tasklet was killed");
}

/* The turns held by tasklets of this thread (a short list: the
 * connections in use at once). */
static _Thread_local sh_tl_turn *turns;

static sh_tl_turn *turn_of(const void *obj)
{
	for (sh_tl_turn *t = turns; t; t = t->next)
		if (t->obj == obj)
			return t;
	return NULL;
}

bool sh_tl_turn_held(const void *obj)
{
	return sh_tl_peek() && turn_of(obj) != NULL;
}

int sh_tl_turn_take(sh_tl_turn *h, const void *obj, const char *what)
{
	sh_tl *tl = sh_tl_peek();
	h->mine = false;
	if (!tl)
		return 0;
	if (sh_tl_check_kill(tl))
		return -1;
	h->obj = obj;
	h->owner = tl->current;
	h->head = h->tail = NULL;
	sh_tl_turn *holder = turn_of(obj);
	if (holder && holder->owner == tl->current)
		return 0; /* nested: a host service of the holder's call calls again */
	if (!holder) {
		h->next = turns;
		turns = h;
		h->mine = true;
		return 0;
	}
	/* For ever: the holder's call has its own deadline, and a context in
	 * a call is not parked in our waits, so no deadlock is seen while it
	 * lasts. */
	sh_wait *w = (sh_wait *)h->w;
	*w = (sh_wait){.what = what};
	sh_tl_link((sh_wait **)&holder->head, (sh_wait **)&holder->tail, w);
	int rc = sh_tl_wait(tl, w, SHOAL_FOREVER);
	if (!w->done) {
		/* the queue is the current holder's by now */
		holder = turn_of(obj);
		if (holder)
			sh_tl_unlink((sh_wait **)&holder->head, (sh_wait **)&holder->tail, w);
		sh_tl_wait_error(tl, rc, what);
		return -1;
	}
	/* handed over: the giver put h in its place, with the rest of the queue */
	h->mine = true;
	if (sh_tl_check_kill(tl)) {
		sh_tl_turn_give(h);
		return -1;
	}
	return 0;
}

void sh_tl_turn_give(sh_tl_turn *h)
{
	if (!h->mine)
		return;
	h->mine = false;
	for (sh_tl_turn **p = &turns; *p; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			break;
		}
	sh_wait *w = h->head;
	if (!w)
		return;
	sh_tl_unlink((sh_wait **)&h->head, (sh_wait **)&h->tail, w);
	sh_tl_turn *n = (sh_tl_turn *)(void *)w;
	n->head = h->head;
	n->tail = h->tail;
	n->obj = h->obj;
	n->owner = w->who;
	n->next = turns;
	turns = n;
	w->done = true;
	/* not parked: killed meanwhile, it runs and sees the turn is its own */
	sh_fiber_unpark(w->who->fiber, 0);
}

/* Python tasklets on shoal's fibers (issue 34): Stackless's tasklet,
 * channel, getcurrent, schedule, run and sleep. Each tasklet is a detached
 * fiber of the thread's shoal scheduler, on a 1 MiB stack of its own (from
 * the scheduler's pool, guard page below, committed as touched), so a
 * switch costs the same at any depth: no stack copying. The thread keeps
 * its one PyThreadState; a context that parks saves the per-tasklet fields
 * (tasklet_pystate.h) into its own C frame and restores them when it
 * resumes, so the scheduler's switch knows nothing of Python. The main
 * context (the thread's root fiber) is a tasklet too, `getcurrent()` there.
 * Channels, joins and run() keep their own wait queues of waiters on the
 * waiting contexts' stacks and park/unpark fibers (fiber_impl.h); the
 * scheduler's idle hook detects deadlocks (every context parked for ever
 * on something only another context can do) and lets go of the GIL while
 * the thread sleeps. Tasklets never leave their thread; a wait another
 * thread ends (a channel, to_thread) is posted to the waiter's thread
 * (xhead), which unparks it at its next switch point or idle check. */
#include "module.h"
#include "tasklet_impl.h"
#include "tasklet_pystate.h"

#include "fiber/fiber_impl.h"

#include <string.h>

/* About 1300 levels of recursion through C code (measured 640-800 bytes a
 * level on 3.11), more than the default recursion limit lets a tasklet
 * reach: a runaway recursion is a RecursionError, not an overflow. */
#define TASKLET_STACK (1024 * 1024)
static _Thread_local sh_tl *tl_state;
PyObject *ShTaskletExit;
Py_ssize_t sh_tl_idle_workers;

/* ---- the thread's state ---- */

static void describe_blocked(sh_tl *tl, char *buf, size_t cap)
{
	size_t n = 0, shown = 0, total = 0;
	buf[0] = '\0';
	for (ShTasklet *t = tl->live; t; t = t->live_next)
		total += t->wait != NULL;
	for (ShTasklet *t = tl->live; t && n + 1 < cap; t = t->live_next) {
		if (!t->wait)
			continue;
		const char *nm =
			t->name && PyUnicode_Check(t->name) ? PyUnicode_AsUTF8(t->name) : "";
		if (!nm) {
			PyErr_Clear();
			nm = "?";
		}
		if (shown++ == 8) {
			snprintf(buf + n, cap - n, ", and %zu more", total - 8);
			return;
		}
		int w = snprintf(buf + n, cap - n, "%stasklet %llu '%s' in %s",
				 shown > 1 ? ", " : "", (unsigned long long)t->id, nm,
				 t->wait->what);
		if (w < 0)
			return;
		n += (size_t)w;
	}
}

/* Unparks the waits other threads ended. True when one was the running
 * context's own (own_rc non-NULL): it need not park then, *own_rc is its
 * code. */
static bool xdrain(sh_tl *tl, int *own_rc)
{
	bool own = false;
	while (tl->xhead) {
		sh_wait *w = tl->xhead;
		tl->xhead = w->xnext;
		w->xnext = NULL;
		w->xposted = false;
		if (own_rc && w->who == tl->current) {
			own = true;
			*own_rc = w->xrc;
			continue;
		}
		sh_fiber_unpark(w->who->fiber, w->xrc);
	}
	return own;
}

/* Whether a context waits where another thread may end it (a channel):
 * looked for only when every context waits for ever, so the switch path
 * keeps no count of it. */
static bool shared_wait(sh_tl *tl)
{
	if (tl->main->wait && tl->main->wait->shared)
		return true;
	for (ShTasklet *t = tl->live; t; t = t->live_next)
		if (t->wait && t->wait->shared)
			return true;
	return false;
}

/* Another Python thread that may yet end a shared wait (a channel
 * receive): any thread but this one and to_thread()'s idle workers. */
static bool other_threads(sh_tl *tl)
{
	Py_ssize_t n = 0;
	for (PyThreadState *t = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(tl->ts));
	     t; t = PyThreadState_Next(t))
		n++;
	return n - 1 > sh_tl_idle_workers;
}

/* Every context is parked for ever on another's doing: nothing can ever
 * run again. The main context is woken to raise it. */
static bool idle_hook(void *arg, int phase, int64_t timeout)
{
	sh_tl *tl = arg;
	(void)timeout;
	switch (phase) {
	case SH_IDLE_CHECK:
		if (!PyGILState_Check())
			return false;
		if (tl->xhead) {
			xdrain(tl, NULL);
			return true;
		}
		if (tl->main->wait && tl->main->wait->forever && tl->nforever == tl->nlive + 1 &&
		    !(other_threads(tl) && shared_wait(tl)))
			return sh_fiber_unpark(tl->main->fiber, SHOAL_EDEADLK) == 0;
		return false;
	case SH_IDLE_SLEEP:
		/* C code of this thread that let go of the GIL may idle too */
		if (PyGILState_Check())
			tl->released = PyEval_SaveThread();
		return false;
	default:
		if (tl->released) {
			PyThreadState *ts = tl->released;
			tl->released = NULL;
			PyEval_RestoreThread(ts);
			/* The sleep may have ended for a signal (Ctrl-C): the
			 * main context runs its handler (sh_tl_wait), at once
			 * rather than at the next timer or event. */
			sh_tl_interrupt(tl->main, SHOAL_EINTR);
		}
		return false;
	}
}

static ShTasklet *tasklet_alloc(void)
{
	ShTasklet *t = PyObject_GC_New(ShTasklet, &ShTasklet_Type);
	if (!t)
		return NULL;
	memset((char *)t + sizeof(PyObject), 0, sizeof(*t) - sizeof(PyObject));
	PyObject_GC_Track(t);
	return t;
}

/* The thread's tasklet state goes with its PyThreadState: a capsule in
 * the thread's dict, dropped when the thread ends (PyThreadState_Clear, in
 * that thread, GIL held). Tasklets still parked then can never run again,
 * and a state cleared from another thread (daemon threads at exit) cannot
 * be destroyed there: both are left as they are. */
static void tl_gone(PyObject *cap)
{
	sh_tl *tl = PyCapsule_GetPointer(cap, "shoal._shoal.tasklets");
	if (!tl) {
		PyErr_Clear();
		return;
	}
	if (tl_state != tl)
		return;
	sh_tl_reap(tl);
	if (tl->nlive || tl->zombies || tl->current != tl->main || !tl->sched->cur->is_root)
		return;
	tl_state = NULL;
	if (tl->own_sched)
		shoal_sched_destroy(tl->sched);
	else
		sh_sched_set_idle_hook(tl->sched, NULL, NULL);
	tl->main->tl = NULL;
	Py_DECREF(tl->main);
	PyMem_RawFree(tl);
}

/* The calling thread's tasklet state, made at its first use: the thread's
 * scheduler (made here unless it has one) and its main tasklet. */
sh_tl *sh_tl_get(void)
{
	if (tl_state)
		return tl_state;
	shoal_sched *s = shoal_sched_current();
	if (s && !s->cur->is_root) {
		PyErr_SetString(PyExc_RuntimeError,
				"tasklets run on a thread's root fiber: this Python code runs in "
				"another fiber of the thread's shoal scheduler");
		return NULL;
	}
	if (s && s->idle_hook) {
		PyErr_SetString(PyExc_RuntimeError,
				"this thread's shoal scheduler has an idle hook already: tasklets "
				"cannot run on it");
		return NULL;
	}
	sh_tl *tl = PyMem_RawCalloc(1, sizeof(*tl));
	ShTasklet *m = tasklet_alloc();
	if (m)
		m->name = PyUnicode_FromString("main");
	if (!tl || !m || !m->name) {
		PyMem_RawFree(tl);
		Py_XDECREF(m);
		if (!PyErr_Occurred())
			PyErr_NoMemory();
		return NULL;
	}
	bool own = !s;
	if (own) {
		/* Stacks of finished tasklets kept committed for reuse: fewer
		 * than the scheduler's default, as tasklet stacks are larger. */
		shoal_sched_opts o = {.stack_cache = 1024};
		int rc = shoal_sched_create(&s, &o);
		if (rc) {
			PyMem_RawFree(tl);
			Py_DECREF(m);
			sh_py_raise(rc, "could not make this thread a shoal scheduler");
			return NULL;
		}
	}
	PyObject *cap = PyCapsule_New(tl, "shoal._shoal.tasklets", tl_gone);
	PyObject *dict = PyThreadState_GetDict();
	if (!cap || !dict || PyDict_SetItemString(dict, "shoal._shoal.tasklets", cap) != 0) {
		if (cap)
			PyCapsule_SetDestructor(cap, NULL);
		Py_XDECREF(cap);
		if (own)
			shoal_sched_destroy(s);
		PyMem_RawFree(tl);
		Py_DECREF(m);
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError,
					"this thread has no Python thread state dict");
		return NULL;
	}
	Py_DECREF(cap);
	tl->own_sched = own;
	tl->ts = PyThreadState_Get();
	tl->sched = s;
	m->is_main = true;
	m->scheduled = true;
	m->tl = tl;
	m->fiber = shoal_self();
	tl->main = m;
	tl->current = m;
	sh_sched_set_idle_hook(s, idle_hook, tl);
	tl_state = tl;
	return tl;
}

/* Drops the references finished tasklets' fibers held, in a context that
 * may run Python code (their finalizers), keeping any pending exception. */
void sh_tl_reap_zombies(sh_tl *tl)
{
	PyObject *et, *ev, *tb;
	PyErr_Fetch(&et, &ev, &tb);
	while (tl->zombies) {
		ShTasklet *t = tl->zombies;
		tl->zombies = t->live_next;
		t->live_next = NULL;
		Py_DECREF(t);
	}
	PyErr_Restore(et, ev, tb);
}

/* ---- switching: the only places a Python context leaves the CPU ---- */

int sh_tl_park(sh_tl *tl, int64_t deadline)
{
	ShTasklet *me = tl->current;
	int rc = 0;
	if (sh_unlikely(tl->xhead != NULL) && xdrain(tl, &rc))
		return rc;
	sh_pystate st;
	sh_pystate_save(tl->ts, &st, &tl->tracing);
	rc = sh_fiber_park(deadline);
	sh_pystate_restore(tl->ts, &st, tl->tracing);
	tl->current = me;
	return rc;
}

void sh_tl_yield(sh_tl *tl)
{
	ShTasklet *me = tl->current;
	if (tl->xhead)
		xdrain(tl, NULL);
	sh_pystate st;
	sh_pystate_save(tl->ts, &st, &tl->tracing);
	shoal_yield();
	sh_pystate_restore(tl->ts, &st, tl->tracing);
	tl->current = me;
}

/* Wakes w's context, which runs at once when `now` (the caller right
 * behind it), else after those already runnable. */
void sh_tl_wake(sh_tl *tl, sh_wait *w, int rc, bool now)
{
	if (sh_unlikely(w->who->tl != tl)) {
		sh_tl_xwake(w, rc);
		return;
	}
	shoal_fiber *f = w->fiber;
	if (!now) {
		sh_fiber_unpark(f, rc);
		return;
	}
	ShTasklet *me = tl->current;
	sh_pystate st;
	sh_pystate_save(tl->ts, &st, &tl->tracing);
	sh_fiber_handoff(f, rc);
	sh_pystate_restore(tl->ts, &st, tl->tracing);
	tl->current = me;
}

void sh_tl_xwake(sh_wait *w, int rc)
{
	sh_tl *o = w->who->tl;
	w->xrc = rc;
	if (w->xposted)
		return;
	w->xposted = true;
	w->xnext = o->xhead;
	o->xhead = w;
	/* once per batch: the list is emptied by the thread it belongs to */
	if (!w->xnext)
		sh_eventfd_signal(o->sched->evfd);
}

void sh_tl_interrupt(ShTasklet *t, int rc)
{
	sh_wait *w = t->wait;
	if (!w || w->done)
		return;
	if (w->interruptible)
		w->u.interrupt(w, rc);
	else
		sh_fiber_unpark(t->fiber, rc);
}

sh_tl *sh_tl_peek(void)
{
	return tl_state;
}

/* Parks the current context in w (linked by the caller where its waker
 * finds it) until done, the deadline, a kill or a deadlock. */
int sh_tl_wait(sh_tl *tl, sh_wait *w, int64_t deadline)
{
	ShTasklet *me = tl->current;
	w->who = me;
	w->fiber = me->fiber;
	w->forever = deadline == SHOAL_FOREVER && !w->external;
	me->wait = w;
	if (w->forever)
		tl->nforever++;
	int rc;
	for (;;) {
		rc = sh_tl_park(tl, deadline);
		if ((rc != SHOAL_EINTR && rc != RC_FATAL) || w->done)
			break;
		if (sh_tl_check_kill(tl) < 0 || PyErr_CheckSignals() < 0) {
			rc = RC_RAISED;
			break;
		}
	}
	if (w->forever)
		tl->nforever--;
	if (sh_unlikely(w->xposted)) { /* ended by another thread while a kill or timer woke it */
		for (sh_wait **p = &tl->xhead; *p; p = &(*p)->xnext)
			if (*p == w) {
				*p = w->xnext;
				break;
			}
		w->xposted = false;
	}
	me->wait = NULL;
	return rc;
}

/* At a switch point: TaskletExit in a tasklet that was killed, in the
 * main tasklet what ended a tasklet fatally. */
int sh_tl_check_kill_slow(sh_tl *tl)
{
	ShTasklet *me = tl->current;
	if (me == tl->main && tl->fatal) {
		PyObject *e = tl->fatal;
		tl->fatal = NULL;
		PyErr_SetObject((PyObject *)Py_TYPE(e), e);
		Py_DECREF(e);
		return -1;
	}
	if (!me->kill_pending)
		return 0;
	me->kill_pending = false;
	PyErr_SetString(ShTaskletExit, "the tasklet was killed");
	return -1;
}

PyObject *sh_tl_wait_error(sh_tl *tl, int rc, const char *what)
{
	char blocked[1024];
	switch (rc) {
	case RC_RAISED:
		return NULL;
	case RC_KILLED:
		tl->current->kill_pending = false;
		PyErr_SetString(ShTaskletExit, "the tasklet was killed");
		return NULL;
	case SHOAL_EDEADLK:
		describe_blocked(tl, blocked, sizeof(blocked));
		PyErr_Format(PyExc_RuntimeError,
			     "deadlock: the main tasklet waits in %s, and no tasklet can ever run "
			     "again (%zu blocked: %s)",
			     what, tl->nlive, blocked[0] ? blocked : "none");
		return NULL;
	case SHOAL_ETIMEDOUT:
		PyErr_Format(PyExc_TimeoutError, "%s: the timeout passed", what);
		return NULL;
	default:
		return sh_py_raise(rc, "");
	}
}

void sh_tl_unlink(sh_wait **head, sh_wait **tail, sh_wait *w)
{
	if (!w->linked)
		return;
	if (w->prev)
		w->prev->next = w->next;
	else
		*head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else if (tail)
		*tail = w->prev;
	w->prev = w->next = NULL;
	w->linked = false;
}

void sh_tl_link(sh_wait **head, sh_wait **tail, sh_wait *w)
{
	w->next = NULL;
	w->prev = tail ? *tail : NULL;
	if (tail) {
		if (*tail)
			(*tail)->next = w;
		else
			*head = w;
		*tail = w;
	} else {
		w->next = *head;
		if (*head)
			(*head)->prev = w;
		*head = w;
	}
	w->linked = true;
}

/* -1 with an exception unless t belongs to the calling thread. */
sh_tl *sh_tl_own(sh_tl *owner)
{
	/* Every channel operation asks: a thread runs one scheduler, its own,
	 * so the owner's being this thread's is the answer, read from the
	 * fiber layer's initial-exec TLS; tl_state, a dynamic TLS variable of
	 * a dlopen'ed module, costs a call to __tls_get_addr (a tenth of a
	 * channel hop's own instructions). */
	if (sh_likely(owner && sh_tls_sched && owner->sched == sh_tls_sched))
		return owner;
	sh_tl *tl = sh_tl_get();
	if (tl && owner && owner != tl) {
		PyErr_SetString(PyExc_RuntimeError,
				"this tasklet or channel belongs to another thread: tasklets never "
				"leave the thread that made them");
		return NULL;
	}
	return tl;
}

/* ---- a tasklet's life ---- */

static void finish(sh_tl *tl, ShTasklet *t, PyObject *res)
{
	if (res) {
		t->result = res;
	} else {
		PyObject *et, *ev, *tb;
		PyErr_Fetch(&et, &ev, &tb);
		PyErr_NormalizeException(&et, &ev, &tb);
		if (tb && ev)
			PyException_SetTraceback(ev, tb);
		Py_XDECREF(et);
		Py_XDECREF(tb);
		t->result = ev ? ev : Py_NewRef(Py_None);
		t->failed = true;
		if (ev && !PyObject_TypeCheck(ev, (PyTypeObject *)PyExc_Exception) &&
		    !PyObject_TypeCheck(ev, (PyTypeObject *)ShTaskletExit)) {
			t->retrieved = true;
			if (!tl->fatal) {
				tl->fatal = Py_NewRef(ev);
				sh_tl_interrupt(tl->main, RC_FATAL);
			}
		}
	}
	t->done = true;
	t->kill_pending = false;
	while (t->joiners) {
		sh_wait *w = t->joiners;
		sh_tl_unlink(&t->joiners, NULL, w);
		w->done = true;
		sh_fiber_unpark(w->fiber, 0);
	}
	if (t->live_prev)
		t->live_prev->live_next = t->live_next;
	else
		tl->live = t->live_next;
	if (t->live_next)
		t->live_next->live_prev = t->live_prev;
	tl->nlive--;
	if (!tl->nlive && tl->run_wait) {
		tl->run_wait->done = true;
		sh_fiber_unpark(tl->main->fiber, 0);
	}
	t->fiber = NULL;
	t->live_prev = NULL;
	t->live_next = tl->zombies;
	tl->zombies = t;
	PyObject_GC_Track(t);
	/* Last: their finalizers may run any code, which then sees the
	 * tasklet finished and every list consistent. */
	Py_CLEAR(t->fn);
	Py_CLEAR(t->args);
	Py_CLEAR(t->kwargs);
}

/* A tasklet's life. Its data stack's root chunk is the top of its own
 * stack, kept free above its first frame (sh_fiber_spawn_late_stack's
 * reserve), which comes warm from the pool: a start allocates nothing for
 * it, and the chunk's low end, where the frames go, is beside the
 * tasklet's C frames, so a tasklet that resumes touches one stretch of
 * memory (with the chunk between its first frames and the rest, each
 * resume or end also touched a page 16 KiB away: a tenth of hackysack).
 * CPython never frees a root chunk (its first slot is skipped) and frees
 * the chunks it chained after it as their frames return, so the chunk is
 * only ever this one once the function has returned. The fiber ends from
 * here (sh_fiber_exit), not returning through frames it left long ago. */
static void *tasklet_main(void *arg)
{
	ShTasklet *t = arg;
	sh_tl *tl = t->tl;
	PyThreadState *ts = tl->ts;
	_PyCFrame cf;
	_PyErr_StackItem exc;
	PyObject *ctx = t->context;
	t->context = NULL;
	sh_pystate_start(ts, &cf, &exc, sh_fiber_reserved(tl->sched->cur), ctx, tl->tracing);
	tl->current = t;
	sh_tl_reap(tl);
	PyObject *res = NULL;
	if (t->kill_pending)
		PyErr_SetString(ShTaskletExit, "the tasklet was killed before it started");
	else
		res = PyObject_Call(t->fn, t->args, t->kwargs);
	finish(tl, t, res);
	/* What the tasklet's context and exception item hold may run Python
	 * code as it goes, which may set a context again. */
	Py_CLEAR(exc.exc_value);
	while (ts->context) {
		PyObject *c = ts->context;
		ts->context = NULL;
		Py_DECREF(c);
	}
	sh_pystate_park(ts, &tl->park_cf, cf.use_tracing);
	tl->tracing = cf.use_tracing;
	sh_fiber_exit(NULL);
}

/* ---- tasklet ---- */

static PyObject *tasklet_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *fn;
	static char *kwlist[] = {"fn", NULL};
	/* tasklet(fn), positional, is most of them: the general parser costs
	 * a tenth of a spawn */
	if (!kw && PyTuple_GET_SIZE(args) == 1)
		fn = PyTuple_GET_ITEM(args, 0);
	else if (!PyArg_ParseTupleAndKeywords(args, kw, "O:tasklet", kwlist, &fn))
		return NULL;
	if (!PyCallable_Check(fn))
		return PyErr_Format(PyExc_TypeError, "tasklet(fn) wants a callable, not %.100s",
				    Py_TYPE(fn)->tp_name);
	(void)type;
	ShTasklet *t = tasklet_alloc();
	if (!t)
		return NULL;
	t->fn = Py_NewRef(fn);
	/* A function's (or a method's function's) qualified name is a field:
	 * looking __qualname__ up by its name made and interned a string and
	 * walked the type's dict, a third of a spawn. */
	PyObject *f = PyMethod_Check(fn) ? PyMethod_GET_FUNCTION(fn) : fn;
	if (PyFunction_Check(f) && PyUnicode_Check(((PyFunctionObject *)f)->func_qualname)) {
		t->name = Py_NewRef(((PyFunctionObject *)f)->func_qualname);
		return (PyObject *)t;
	}
	t->name = PyObject_GetAttrString(fn, "__qualname__");
	if (!t->name || !PyUnicode_Check(t->name)) {
		PyErr_Clear();
		Py_XSETREF(t->name, PyObject_Repr(fn));
		if (!t->name) {
			Py_DECREF(t);
			return NULL;
		}
	}
	return (PyObject *)t;
}

/* tasklet(fn)(*args, **kwargs): schedules it and returns it. */
static PyObject *tasklet_call(PyObject *self, PyObject *args, PyObject *kw)
{
	ShTasklet *t = (ShTasklet *)self;
	if (t->scheduled)
		return PyErr_Format(PyExc_RuntimeError,
				    "tasklet '%U' was started already: a tasklet runs once",
				    t->name);
	sh_tl *tl = sh_tl_get();
	if (!tl)
		return NULL;
	/* A copy of an empty context is what CPython makes for a thread state
	 * without one at its first use of a context variable: such a tasklet
	 * starts without one (NULL), which saves a context object a spawn. */
	PyObject *ctx = NULL, *cur = tl->ts->context;
	if (cur) {
		Py_ssize_t nvars = PyObject_Size(cur);
		if (nvars < 0)
			return NULL;
		if (nvars > 0 && !(ctx = PyContext_CopyCurrent()))
			return NULL;
	}
	shoal_fiber_opts o = {.stack_size = TASKLET_STACK, .detached = 1};
	shoal_fiber *f;
	/* its stack is taken as it starts: a tasklet spawned after another
	 * ended runs on that one's stack, still in the caches */
	int rc = sh_fiber_spawn_late_stack(&f, tasklet_main, t, &o, SH_PY_CHUNK_BYTES);
	if (rc) {
		Py_XDECREF(ctx);
		return sh_py_raise(rc, "could not start a tasklet's fiber");
	}
	t->args = Py_NewRef(args);
	t->kwargs = Py_XNewRef(kw);
	t->context = ctx;
	t->tl = tl;
	t->fiber = f;
	t->id = shoal_fiber_id(f);
	/* a stack overflow's report names the fiber: the tasklet's name */
	const char *nm = PyUnicode_AsUTF8(t->name);
	if (nm)
		shoal_fiber_set_name(f, nm);
	else
		PyErr_Clear();
	t->scheduled = true;
	t->live_prev = NULL;
	t->live_next = tl->live;
	if (tl->live)
		tl->live->live_prev = t;
	tl->live = t;
	tl->nlive++;
	Py_INCREF(t); /* the fiber's, dropped by sh_tl_reap() once it finished */
	/* Alive, it is held by its fiber, so never garbage: the collector
	 * need not visit it (what it holds counts as referenced from outside
	 * meanwhile). finish() hands it back to the collector. */
	PyObject_GC_UnTrack(t);
	return Py_NewRef(self);
}

static void tasklet_finalize(PyObject *self)
{
	ShTasklet *t = (ShTasklet *)self;
	if (!t->failed || t->retrieved || !t->result ||
	    PyObject_TypeCheck(t->result, (PyTypeObject *)ShTaskletExit))
		return;
	PyObject *et, *ev, *tb;
	PyErr_Fetch(&et, &ev, &tb);
	t->retrieved = true;
	PyErr_SetObject((PyObject *)Py_TYPE(t->result), t->result);
	_PyErr_WriteUnraisableMsg("in a tasklet nobody joined (its exception was never retrieved)",
				  self);
	PyErr_Restore(et, ev, tb);
}

/* A tasklet alive is held by its fiber, a reference the collector does
 * not see: only a finished or never started one can be in a garbage
 * cycle (its result or function referring back to it). */
static int tasklet_traverse(PyObject *self, visitproc visit, void *arg)
{
	ShTasklet *t = (ShTasklet *)self;
	Py_VISIT(t->fn);
	Py_VISIT(t->args);
	Py_VISIT(t->kwargs);
	Py_VISIT(t->context);
	Py_VISIT(t->result);
	Py_VISIT(t->name);
	return 0;
}

static int tasklet_clear(PyObject *self)
{
	ShTasklet *t = (ShTasklet *)self;
	Py_CLEAR(t->fn);
	Py_CLEAR(t->args);
	Py_CLEAR(t->kwargs);
	Py_CLEAR(t->context);
	Py_CLEAR(t->result);
	return 0;
}

static void tasklet_dealloc(PyObject *self)
{
	ShTasklet *t = (ShTasklet *)self;
	if (PyObject_CallFinalizerFromDealloc(self) < 0)
		return;
	PyObject_GC_UnTrack(self);
	tasklet_clear(self);
	Py_CLEAR(t->name);
	PyObject_GC_Del(self);
}

static PyObject *tasklet_repr(PyObject *self)
{
	ShTasklet *t = (ShTasklet *)self;
	const char *st = t->is_main	 ? "main"
			 : !t->scheduled ? "not started"
			 : t->done	 ? (t->failed ? "failed" : "done")
			 : t->wait	 ? t->wait->what
					 : "runnable";
	return PyUnicode_FromFormat("<shoal.tasklet %llu '%U' %s>", (unsigned long long)t->id,
				    t->name, st);
}

static PyObject *tasklet_alive(PyObject *self, void *unused)
{
	ShTasklet *t = (ShTasklet *)self;
	(void)unused;
	return PyBool_FromLong(t->scheduled && !t->done);
}

static PyObject *tasklet_get_name(PyObject *self, void *unused)
{
	(void)unused;
	return Py_NewRef(((ShTasklet *)self)->name);
}

static int tasklet_set_name(PyObject *self, PyObject *v, void *unused)
{
	(void)unused;
	if (!v || !PyUnicode_Check(v)) {
		PyErr_SetString(PyExc_TypeError, "a tasklet's name is a str");
		return -1;
	}
	ShTasklet *t = (ShTasklet *)self;
	const char *nm = PyUnicode_AsUTF8(v);
	if (!nm)
		return -1;
	Py_XSETREF(t->name, Py_NewRef(v));
	if (t->fiber && !t->is_main)
		shoal_fiber_set_name(t->fiber, nm);
	return 0;
}

static PyObject *tasklet_get_id(PyObject *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(((ShTasklet *)self)->id);
}

static PyObject *tasklet_kill(PyObject *self, PyObject *unused)
{
	ShTasklet *t = (ShTasklet *)self;
	(void)unused;
	if (t->is_main)
		return PyErr_Format(PyExc_RuntimeError, "the main tasklet cannot be killed");
	if (!t->scheduled || t->done)
		Py_RETURN_NONE;
	sh_tl *tl = sh_tl_own(t->tl);
	if (!tl)
		return NULL;
	if (t == tl->current) {
		PyErr_SetString(ShTaskletExit, "the tasklet killed itself");
		return NULL;
	}
	t->kill_pending = true;
	if (t->wait)
		sh_tl_interrupt(t, RC_KILLED);
	else if (t->call && t->call->cancel)
		shoal_cancel(t->fiber); /* its C call's wait: see sh_tl_blocking_end */
	Py_RETURN_NONE;
}

static PyObject *tasklet_join(PyObject *self, PyObject *args, PyObject *kw)
{
	ShTasklet *t = (ShTasklet *)self;
	PyObject *tmo = Py_None;
	static char *kwlist[] = {"timeout", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:join", kwlist, &tmo))
		return NULL;
	int64_t ns;
	if (sh_py_parse_timeout(tmo, &ns) != 0)
		return NULL;
	if (t->is_main)
		return PyErr_Format(PyExc_RuntimeError, "the main tasklet cannot be joined");
	if (!t->scheduled)
		return PyErr_Format(PyExc_RuntimeError,
				    "tasklet '%U' was never started: call it with its arguments "
				    "first",
				    t->name);
	sh_tl *tl = sh_tl_own(t->tl);
	if (!tl)
		return NULL;
	if (t == tl->current)
		return PyErr_Format(PyExc_RuntimeError, "a tasklet cannot join itself");
	if (!t->done) {
		if (sh_tl_check_kill(tl))
			return NULL;
		sh_wait w = {.what = "tasklet.join"};
		sh_tl_link(&t->joiners, NULL, &w);
		int rc = sh_tl_wait(tl, &w,
				    ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(ns));
		if (!w.done) {
			sh_tl_unlink(&t->joiners, NULL, &w);
			return sh_tl_wait_error(tl, rc, "tasklet.join");
		}
	}
	sh_tl_reap(tl);
	t->retrieved = true;
	if (t->failed) {
		PyErr_SetObject((PyObject *)Py_TYPE(t->result), t->result);
		return NULL;
	}
	return Py_NewRef(t->result);
}

static PyMethodDef tasklet_methods[] = {
	{"kill", tasklet_kill, METH_NOARGS,
	 "kill()\n\nRaises TaskletExit in the tasklet at its next switch point (at once if it is "
	 "blocked); a tasklet that has not run yet ends without running."},
	{"join", (PyCFunction)(void (*)(void))tasklet_join, METH_VARARGS | METH_KEYWORDS,
	 "join(timeout=None) -> result\n\nWaits until the tasklet ended (running the others "
	 "meanwhile) and returns what its function returned, or raises what it raised. "
	 "TimeoutError when the timeout passes first."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef tasklet_getset[] = {
	{"alive", tasklet_alive, NULL, "Started and not finished.", NULL},
	{"name", tasklet_get_name, tasklet_set_name, "The function's __qualname__ unless set.",
	 NULL},
	{"id", tasklet_get_id, NULL, "The fiber's id (0 before it starts, and for main).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShTasklet_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.tasklet",
	.tp_basicsize = sizeof(ShTasklet),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_traverse = tasklet_traverse,
	.tp_clear = tasklet_clear,
	.tp_doc = "tasklet(fn): a tasklet that will run fn; calling it with fn's arguments "
		  "schedules it and returns it.",
	.tp_new = tasklet_new,
	.tp_call = tasklet_call,
	.tp_dealloc = tasklet_dealloc,
	.tp_finalize = tasklet_finalize,
	.tp_repr = tasklet_repr,
	.tp_methods = tasklet_methods,
	.tp_getset = tasklet_getset,
};

/* ---- module functions ---- */

PyObject *sh_py_getcurrent(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	sh_tl *tl = sh_tl_get();
	return tl ? Py_NewRef(tl->current) : NULL;
}

PyObject *sh_py_schedule(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	sh_tl *tl = sh_tl_get();
	if (!tl || sh_tl_check_kill(tl))
		return NULL;
	sh_tl_yield(tl);
	sh_tl_reap(tl);
	if (sh_tl_check_kill(tl))
		return NULL;
	Py_RETURN_NONE;
}

PyObject *sh_py_sleep(PyObject *mod, PyObject *secs)
{
	(void)mod;
	double s = PyFloat_AsDouble(secs);
	if (s == -1.0 && PyErr_Occurred())
		return NULL;
	if (!(s >= 0) || s > 1e9)
		return PyErr_Format(PyExc_ValueError,
				    "sleep(seconds) wants seconds >= 0 (and below 1e9), not %R",
				    secs);
	sh_tl *tl = sh_tl_get();
	if (!tl || sh_tl_check_kill(tl))
		return NULL;
	sh_wait w = {.what = "sleep"};
	int rc = sh_tl_wait(tl, &w, shoal_deadline_in((int64_t)(s * 1e9)));
	sh_tl_reap(tl);
	if (rc != SHOAL_ETIMEDOUT)
		return sh_tl_wait_error(tl, rc, "sleep");
	Py_RETURN_NONE;
}

PyObject *sh_py_run(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	PyObject *tmo = Py_None;
	static char *kwlist[] = {"timeout", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:run", kwlist, &tmo))
		return NULL;
	int64_t ns;
	if (sh_py_parse_timeout(tmo, &ns) != 0)
		return NULL;
	sh_tl *tl = sh_tl_get();
	if (!tl)
		return NULL;
	if (tl->current != tl->main)
		return PyErr_Format(
			PyExc_RuntimeError,
			"run() waits for every tasklet, so only the main tasklet may call "
			"it, not tasklet '%U'",
			tl->current->name);
	int64_t deadline = ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(ns);
	while (tl->nlive) {
		sh_wait w = {.what = "run()"};
		tl->run_wait = &w;
		int rc = sh_tl_wait(tl, &w, deadline);
		tl->run_wait = NULL;
		if (!w.done && tl->nlive) {
			sh_tl_reap(tl);
			if (rc == SHOAL_ETIMEDOUT) {
				char blocked[1024];
				describe_blocked(tl, blocked, sizeof(blocked));
				return PyErr_Format(
					PyExc_TimeoutError,
					"run(): the timeout passed with %zu tasklets alive "
					"(blocked: %s)",
					tl->nlive, blocked[0] ? blocked : "none");
			}
			return sh_tl_wait_error(tl, rc, "run()");
		}
	}
	sh_tl_reap(tl);
	if (sh_tl_check_kill(tl))
		return NULL;
	Py_RETURN_NONE;
}

int sh_py_tasklet_init(PyObject *mod)
{
	ShTaskletExit = PyErr_NewExceptionWithDoc(
		"shoal._shoal.TaskletExit",
		"Raised in a tasklet that was killed; it ends the tasklet quietly.",
		PyExc_BaseException, NULL);
	if (!ShTaskletExit || PyModule_AddObjectRef(mod, "TaskletExit", ShTaskletExit) != 0 ||
	    PyModule_AddType(mod, &ShTasklet_Type) != 0 || sh_py_channel_init(mod) != 0 ||
	    sh_py_tasklet_io_init(mod) != 0)
		return -1;
	return 0;
}

/* Tasklets waiting on the world outside their thread: wait_readable() and
 * wait_writable() on a file descriptor (the scheduler's poller, through
 * shoal_fd_wait), and the completion a to_thread() worker hands its result
 * through (python/shoal/tasklets.py runs the worker pool). Both suspend
 * only the calling tasklet; neither counts as a deadlock however long it
 * waits, since what ends it is not another tasklet. */
#include "tasklet_impl.h"
#include "tasklet_pystate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

/* ---- fd waits ---- */

/* 1 when fd is ready for ev now, 0 when not, -1 with OSError set. */
static int ready_now(int fd, short ev)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int r;
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	if (r < 0 || (r > 0 && (p.revents & POLLNVAL))) {
		if (r > 0)
			errno = EBADF;
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	/* an error or hang-up is ready too: the caller's read or write says
	 * which */
	return r > 0;
}

/* A kill or a signal ends the wait: forgetting our descriptor wakes its
 * waiter (SHOAL_ECLOSED), which finds why in irc. */
typedef struct {
	sh_wait w; /* first: the interrupt gets this */
	int irc;   /* why it was interrupted, 0 if it was not */
	int fd;	   /* our duplicate */
} fd_waiter;

static void fd_interrupt(sh_wait *w, int rc)
{
	fd_waiter *f = (fd_waiter *)w;
	if (f->irc != RC_KILLED)
		f->irc = rc;
	/* not when readiness woke it already: it finds irc when it runs */
	if (w->who->fiber->state == SH_BLOCKED)
		shoal_fd_forget(f->fd);
}

/* The poller registers a descriptor once and keeps it until
 * shoal_fd_forget(), and one fiber may wait per direction: the caller's
 * descriptor may be closed (and its number reused) behind our back, and
 * several tasklets may wait on it. So each wait registers a duplicate of
 * its own and forgets it after. The duplicate shares the open file, so
 * its readiness is the caller's; the registration is edge-triggered, so
 * the wait starts by asking poll() whether the fd is ready already and
 * checks again after each wake. */
static PyObject *fd_wait(PyObject *args, PyObject *kw, unsigned ev, const char *what)
{
	PyObject *fo, *tmo = Py_None;
	static char *kwlist[] = {"fd", "timeout", NULL};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &fo, &tmo))
		return NULL;
	int fd = PyObject_AsFileDescriptor(fo);
	if (fd < 0)
		return NULL;
	int64_t ns = 0;
	int zero = tmo != Py_None && PyNumber_Check(tmo) ? PyObject_Not(tmo) : 0;
	if (zero < 0 || (!zero && sh_py_parse_timeout(tmo, &ns) != 0))
		return NULL;
	sh_tl *tl = sh_tl_get();
	if (!tl || sh_tl_check_kill(tl))
		return NULL;
	short pev = ev == SHOAL_FD_IN ? POLLIN : POLLOUT;
	int r = ready_now(fd, pev);
	if (r < 0)
		return NULL;
	if (r)
		Py_RETURN_NONE;
	if (zero)
		return PyErr_Format(PyExc_TimeoutError, "%s: fd %d is not ready (timeout=0)", what,
				    fd);
	int64_t deadline = ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(ns);
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (d < 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	ShTasklet *me = tl->current;
	fd_waiter w = {.w = {.what = what,
			     .external = true,
			     .who = me,
			     .u.interrupt = fd_interrupt,
			     .interruptible = true},
		       .fd = d};
	me->wait = &w.w;
	int rc;
	for (;;) {
		/* as sh_tl_park does: the switch inside must not know Python */
		sh_pystate st;
		sh_pystate_save(tl->ts, &st, &tl->tracing);
		rc = shoal_fd_wait(d, ev, deadline, NULL);
		sh_pystate_restore(tl->ts, &st, tl->tracing);
		tl->current = me;
		if (w.irc) {
			int why = w.irc;
			w.irc = 0;
			if (why == RC_KILLED) {
				rc = RC_KILLED;
				break;
			}
			/* a signal (or a fatal end in another tasklet): run the
			 * handlers, then look again unless they raised */
			if (sh_tl_check_kill(tl) < 0 || PyErr_CheckSignals() < 0) {
				rc = RC_RAISED;
				break;
			}
			if (rc == SHOAL_ECLOSED) /* our own forget */
				rc = 0;
		}
		if (rc != 0)
			break;
		r = ready_now(fd, pev); /* a wake may be an older edge's */
		if (r) {
			rc = r < 0 ? RC_RAISED : 0;
			break;
		}
	}
	me->wait = NULL;
	shoal_fd_forget(d);
	close(d);
	sh_tl_reap(tl);
	if (rc == 0)
		Py_RETURN_NONE;
	return sh_tl_wait_error(tl, rc, what);
}

PyObject *sh_py_wait_readable(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	return fd_wait(args, kw, SHOAL_FD_IN, "wait_readable");
}

PyObject *sh_py_wait_writable(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	return fd_wait(args, kw, SHOAL_FD_OUT, "wait_writable");
}

/* ---- a result from another thread ---- */

/* One result, set once by any thread, waited for by one tasklet at a
 * time. The GIL guards it, as it guards channels. */
typedef struct {
	PyObject_HEAD sh_wait *w; /* the waiting context's, while it waits */
	PyObject *value;	  /* the result, or the exception */
	bool done, failed;
} ShCompletion;

static void completion_dealloc(PyObject *self)
{
	ShCompletion *c = (ShCompletion *)self;
	Py_CLEAR(c->value);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *completion_set(ShCompletion *c, PyObject *v, bool failed)
{
	if (c->done)
		Py_RETURN_FALSE;
	c->value = Py_NewRef(v);
	c->failed = failed;
	c->done = true;
	if (c->w && !c->w->done) {
		c->w->done = true;
		/* from the waiter's own thread an unpark, from any other a post
		 * that rings its scheduler */
		sh_tl_wake(sh_tl_peek(), c->w, 0, false);
	}
	Py_RETURN_TRUE;
}

static PyObject *completion_set_result(PyObject *self, PyObject *v)
{
	return completion_set((ShCompletion *)self, v, false);
}

static PyObject *completion_set_exception(PyObject *self, PyObject *e)
{
	if (!PyExceptionInstance_Check(e))
		return PyErr_Format(PyExc_TypeError,
				    "set_exception() wants an exception instance, not %.100s",
				    Py_TYPE(e)->tp_name);
	return completion_set((ShCompletion *)self, e, true);
}

static PyObject *completion_result(ShCompletion *c)
{
	if (c->failed) {
		PyErr_SetObject((PyObject *)Py_TYPE(c->value), c->value);
		return NULL;
	}
	return Py_NewRef(c->value);
}

static PyObject *completion_wait(PyObject *self, PyObject *what)
{
	ShCompletion *c = (ShCompletion *)self;
	if (!PyUnicode_Check(what))
		return PyErr_Format(PyExc_TypeError, "wait(what) wants a str, not %.100s",
				    Py_TYPE(what)->tp_name);
	sh_tl *tl = sh_tl_get();
	if (!tl || sh_tl_check_kill(tl))
		return NULL;
	if (c->done)
		return completion_result(c);
	if (c->w)
		return PyErr_Format(PyExc_RuntimeError, "another tasklet waits for this result");
	const char *nm = PyUnicode_AsUTF8(what);
	if (!nm)
		return NULL;
	/* external: a worker thread ends it, so waiting on it is no deadlock */
	sh_wait w = {.what = nm, .external = true};
	c->w = &w;
	int rc = sh_tl_wait(tl, &w, SHOAL_FOREVER);
	c->w = NULL;
	sh_tl_reap(tl);
	if (w.done)
		return completion_result(c);
	return sh_tl_wait_error(tl, rc, nm);
}

static PyObject *completion_get_done(PyObject *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(((ShCompletion *)self)->done);
}

static PyMethodDef completion_methods[] = {
	{"set_result", completion_set_result, METH_O,
	 "set_result(value) -> bool\n\nFrom any thread: the result; False when one was set "
	 "already."},
	{"set_exception", completion_set_exception, METH_O,
	 "set_exception(exc) -> bool\n\nFrom any thread: the exception the waiter raises."},
	{"wait", completion_wait, METH_O,
	 "wait(what) -> value\n\nSuspends the calling tasklet until a result is set (what names "
	 "the wait in reprs and errors)."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef completion_getset[] = {
	{"done", completion_get_done, NULL, "A result or exception was set.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ShCompletion_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal._Completion",
	.tp_basicsize = sizeof(ShCompletion),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "_Completion(): a result another thread sets and a tasklet waits for "
		  "(to_thread()'s).",
	.tp_new = PyType_GenericNew,
	.tp_dealloc = completion_dealloc,
	.tp_methods = completion_methods,
	.tp_getset = completion_getset,
};

/* _worker_idle(delta) -> count: to_thread()'s pool counts its idle workers
 * here, for deadlock detection. */
PyObject *sh_py_worker_idle(PyObject *mod, PyObject *delta)
{
	(void)mod;
	Py_ssize_t d = PyLong_AsSsize_t(delta);
	if (d == -1 && PyErr_Occurred())
		return NULL;
	sh_tl_idle_workers += d;
	return PyLong_FromSsize_t(sh_tl_idle_workers);
}

int sh_py_tasklet_io_init(PyObject *mod)
{
	return PyModule_AddType(mod, &ShCompletion_Type);
}

/* shoal._shoal: the task farm from Python (shoal.tasks). A Controller is
 * shoal_controller_open's thread in this process; a Farm is a client:
 * submit encodes Python values (value.c) into a task, results come back
 * as Python values, many at a time. A Farm is shared by the threads that
 * submit and shoal.tasks' result thread: one at a time holds it, and a
 * thread that must wait for it, or for the controller, lets go of the GIL
 * first. */
#include "module.h"

#include <shoal/tasks.h>

#include <string.h>

/* ---- Controller ---- */

typedef struct {
	PyObject_HEAD shoal_controller *c; /* NULL once closed */
} ShController;

static PyObject *ctl_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "scheme", "tcp", "window", NULL};
	const char *socket = NULL, *scheme = "leastload", *tcp = NULL;
	unsigned int window = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zszI:Controller", kwlist, &socket, &scheme,
					 &tcp, &window))
		return NULL;
	int s = shoal_scheme_parse(scheme);
	if (s < 0)
		return sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
				    "scheme %s: expected pure, lru, leastload, weighted or twobin",
				    scheme);
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.socket = socket;
	o.scheme = (shoal_scheme)s;
	o.tcp = tcp;
	o.window = window;
	ShController *self = (ShController *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = shoal_controller_open(&self->c, &o);
	Py_END_ALLOW_THREADS if (rc)
	{
		self->c = NULL;
		Py_DECREF(self);
		return sh_py_raise(rc, tcp && rc == SHOAL_ENOENT
					       ? "a controller listens on TCP only with a secret "
						 "($SHOAL_SECRET_FILE or $SHOAL_SECRET)"
					       : "");
	}
	return (PyObject *)self;
}

static void ctl_close_now(ShController *self)
{
	shoal_controller *c = self->c;
	self->c = NULL;
	if (c) {
		Py_BEGIN_ALLOW_THREADS shoal_controller_close(c);
		Py_END_ALLOW_THREADS
	}
}

static void ctl_dealloc(ShController *self)
{
	ctl_close_now(self);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ctl_close(ShController *self, PyObject *unused)
{
	ctl_close_now(self);
	Py_RETURN_NONE;
}

static PyObject *stat_dict(const shoal_controller_stat *st)
{
	return Py_BuildValue(
		"{sIsIsKsKsKsKsKsKsK}", "engines", st->engines, "clients", st->clients, "queued",
		(unsigned long long)st->queued, "running", (unsigned long long)st->running, "done",
		(unsigned long long)st->done, "retried", (unsigned long long)st->retried, "failed",
		(unsigned long long)st->failed, "held_bytes", (unsigned long long)st->held_bytes,
		"held_peak", (unsigned long long)st->held_peak);
}

static PyObject *ctl_stat(ShController *self, PyObject *unused)
{
	if (!self->c)
		return sh_py_raisef(ShClosed, SHOAL_ECLOSED, "the controller is closed");
	shoal_controller_stat st;
	int rc = shoal_controller_stat_get(self->c, &st);
	return rc ? sh_py_raise(rc, "") : stat_dict(&st);
}

static PyObject *ctl_get_socket(ShController *self, void *unused)
{
	if (!self->c)
		Py_RETURN_NONE;
	return PyUnicode_DecodeFSDefault(shoal_controller_socket(self->c));
}

static PyObject *ctl_get_tcp(ShController *self, void *unused)
{
	const char *t = self->c ? shoal_controller_tcp(self->c) : NULL;
	if (!t)
		Py_RETURN_NONE;
	return PyUnicode_FromString(t);
}

static PyMethodDef ctl_methods[] = {
	{"stat", (PyCFunction)ctl_stat, METH_NOARGS,
	 "stat() -> dict\n\nengines, clients, queued, running, done, retried, failed, "
	 "held_bytes, held_peak."},
	{"close", (PyCFunction)ctl_close, METH_NOARGS,
	 "close()\n\nStops it: clients and engines see their connection end (blocks: until its "
	 "thread has ended)."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef ctl_getset[] = {
	{"socket", (getter)ctl_get_socket, NULL, "Its unix socket (None once closed).", NULL},
	{"tcp", (getter)ctl_get_tcp, NULL, "Where it listens on TCP (HOST:PORT), or None.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShController_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Controller",
	.tp_basicsize = sizeof(ShController),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Controller(socket=None, scheme='leastload', tcp=None, window=0)\n\nA task "
		  "controller in a thread of this process (tcp: also on HOST:PORT, with the "
		  "secret of $SHOAL_SECRET_FILE or $SHOAL_SECRET).",
	.tp_new = ctl_new,
	.tp_dealloc = (destructor)ctl_dealloc,
	.tp_methods = ctl_methods,
	.tp_getset = ctl_getset,
};

/* ---- Farm ---- */

#define RESULTS_MAX 4096 /* taken at most in one results() */

typedef struct {
	int rc;
	const shoal_value *v;
	char *msg; /* a failure's, PyMem_RawMalloc'd */
} taken;

typedef struct {
	PyObject_HEAD shoal_farm *f; /* NULL once closed */
	pthread_mutex_t mu;	     /* one thread at a time on f, ids and got */
	shoal_vbuf *in, *out;	     /* a submission's arguments; results being taken */
	shoal_task *ids;	     /* results(): RESULTS_MAX of each */
	taken *got;
	PyObject *socket;
} ShFarm;

/* Takes the farm with the GIL released when it must wait; -1 and Closed
 * set once closed (the mutex then not held). On a thread with tasklets,
 * its tasklets take turns at the farm first (module.h: sh_tl_turn_take):
 * the holder keeps the mutex while its call's waits switch to the others.
 * -1 with TaskletExit when killed while waiting for its turn. */
static int farm_lock(ShFarm *self, sh_tl_turn *turn)
{
	if (sh_tl_turn_take(turn, self, "a task client call") != 0)
		return -1;
	sh_py_lock(&self->mu);
	if (self->f)
		return 0;
	pthread_mutex_unlock(&self->mu);
	sh_tl_turn_give(turn);
	sh_py_raisef(ShClosed, SHOAL_ECLOSED, "the task client is closed");
	return -1;
}

static void farm_unlock(ShFarm *self, sh_tl_turn *turn)
{
	pthread_mutex_unlock(&self->mu);
	sh_tl_turn_give(turn);
}

static int seconds_ns(PyObject *v, const char *what, int64_t *ns)
{
	if (v == Py_None) {
		*ns = 0;
		return 0;
	}
	double s = PyFloat_AsDouble(v);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	if (!(s >= 0) || s > 1e9) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "%s is %g: expected seconds >= 0", what,
			     s);
		return -1;
	}
	*ns = (int64_t)(s * 1e9);
	return 0;
}

static PyObject *farm_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "timeout", NULL};
	PyObject *sock, *timeout = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O:Farm", kwlist, &sock, &timeout))
		return NULL;
	const char *s = sh_py_cstr(sock, "socket");
	int64_t tmo;
	if (!s || seconds_ns(timeout, "timeout", &tmo) != 0)
		return NULL;
	ShFarm *self = (ShFarm *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	pthread_mutex_init(&self->mu, NULL);
	self->ids = PyMem_Calloc(RESULTS_MAX, sizeof(*self->ids));
	self->got = PyMem_Calloc(RESULTS_MAX, sizeof(*self->got));
	if (!self->ids || !self->got || shoal_vbuf_create(&self->in) != 0 ||
	    shoal_vbuf_create(&self->out) != 0) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	Py_INCREF(sock);
	self->socket = sock;
	int rc;
	shoal_farm *f = NULL;
	Py_BEGIN_ALLOW_THREADS rc = shoal_farm_connect_until(
		&f, s, shoal_deadline_in(tmo ? tmo : 10 * (int64_t)1000000000));
	Py_END_ALLOW_THREADS if (rc)
	{
		Py_DECREF(self);
		return sh_py_raisef(rc == SHOAL_ENOENT || rc == SHOAL_ECONNREFUSED ? ShClosed
										   : NULL,
				    rc, "no task controller at %s: %s", s, sh_py_strerror(rc));
	}
	if (tmo)
		shoal_farm_set_timeout(f, tmo);
	self->f = f;
	return (PyObject *)self;
}

static void farm_close_now(ShFarm *self)
{
	shoal_farm *f = self->f;
	self->f = NULL;
	if (f)
		shoal_farm_close(f); /* does not block */
}

static void farm_dealloc(ShFarm *self)
{
	farm_close_now(self);
	shoal_vbuf_free(self->in);
	shoal_vbuf_free(self->out);
	PyMem_Free(self->ids);
	PyMem_Free(self->got);
	pthread_mutex_destroy(&self->mu);
	Py_XDECREF(self->socket);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A list of task ids into a fresh array (PyMem_Free it); n 0: NULL. */
static int task_ids(PyObject *l, const char *what, shoal_task **out, uint32_t *n)
{
	*out = NULL;
	*n = 0;
	if (l == Py_None)
		return 0;
	PyObject *seq = PySequence_Fast(l, what);
	if (!seq)
		return -1;
	Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
	if (k > 0 && !(*out = PyMem_Calloc((size_t)k, sizeof(shoal_task)))) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < k; i++) {
		unsigned long long id = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
		if (id == (unsigned long long)-1 && PyErr_Occurred()) {
			PyMem_Free(*out);
			*out = NULL;
			Py_DECREF(seq);
			return -1;
		}
		(*out)[i] = id;
	}
	*n = (uint32_t)k;
	Py_DECREF(seq);
	return 0;
}

/* submit(fn, args, timeout=None, retries=0, engine=-1, after=None,
 * follow=None) -> id */
static PyObject *farm_submit(ShFarm *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"fn",	   "args",  "timeout", "retries",
				 "engine", "after", "follow",  NULL};
	const char *fn;
	PyObject *a, *timeout = Py_None, *after = Py_None, *follow = Py_None;
	unsigned int retries = 0;
	int engine = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|OIiOO:submit", kwlist, &fn, &a, &timeout,
					 &retries, &engine, &after, &follow))
		return NULL;
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	shoal_task *af = NULL, *fo = NULL;
	if (seconds_ns(timeout, "timeout", &o.timeout_ns) != 0 ||
	    task_ids(after, "after: expected task ids", &af, &o.nafter) != 0 ||
	    task_ids(follow, "follow: expected task ids", &fo, &o.nfollow) != 0) {
		PyMem_Free(af);
		return NULL;
	}
	o.retries = retries;
	o.engine = engine;
	o.after = af;
	o.follow = fo;
	PyObject *res = NULL;
	sh_tl_turn turn;
	if (farm_lock(self, &turn) == 0) {
		PyObject *keep = PyList_New(0);
		shoal_value *v = keep ? sh_py_to_value(self->in, a, keep) : NULL;
		bool killed = false;
		if (v) {
			shoal_task id = 0;
			/* a large task is sent now, which may wait for the controller
			 * (the GIL is kept, as always here: only a tasklet's wait
			 * switches, and saves its thread-state fields first) */
			sh_tl_blocking b;
			bool tl = sh_tl_active();
			if (tl)
				sh_tl_blocking_begin(&b, true);
			int rc = shoal_farm_submit(self->f, fn, v, &o, &id);
			if (tl)
				killed = sh_tl_blocking_end(&b, rc);
			if (rc == 0)
				res = PyLong_FromUnsignedLongLong(id);
			else if (!killed)
				sh_py_raise(rc, shoal_farm_error(self->f));
		}
		Py_XDECREF(keep);
		shoal_vbuf_reset(self->in);
		farm_unlock(self, &turn);
		if (killed)
			sh_tl_raise_killed();
	}
	PyMem_Free(af);
	PyMem_Free(fo);
	return res;
}

static PyObject *farm_flush(ShFarm *self, PyObject *unused)
{
	sh_tl_turn turn;
	if (farm_lock(self, &turn) != 0)
		return NULL;
	int rc;
	shoal_farm *f = self->f;
	sh_tl_blocking b;
	sh_tl_blocking_begin(&b, true);
	rc = shoal_farm_flush(f);
	bool killed = sh_tl_blocking_end(&b, rc);
	if (rc && !killed)
		sh_py_raise(rc, shoal_farm_error(f));
	farm_unlock(self, &turn);
	if (killed)
		sh_tl_raise_killed();
	if (rc)
		return NULL;
	Py_RETURN_NONE;
}

/* results(timeout) -> [(id, status, value or message)]: waits at most
 * timeout seconds for some result, then takes every one that is here (up
 * to RESULTS_MAX). status 0: the function's value; else a farm error's
 * code (the engine died, a deadline, a dependency) and its message. [] when
 * none came in time or no task is waiting. */
static PyObject *farm_results(ShFarm *self, PyObject *args)
{
	double timeout;
	if (!PyArg_ParseTuple(args, "d:results", &timeout))
		return NULL;
	sh_tl_turn turn;
	if (farm_lock(self, &turn) != 0)
		return NULL;
	shoal_task *ids = self->ids;
	taken *got = self->got;
	shoal_farm *f = self->f;
	shoal_vbuf *out = self->out;
	uint32_t n = 0;
	int rc;
	sh_tl_blocking b;
	sh_tl_blocking_begin(&b, true);
	rc = shoal_farm_wait_some(f, ids, RESULTS_MAX, &n,
				  shoal_deadline_in((int64_t)(timeout * 1e9)));
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		got[i].v = NULL;
		/* here already: no wait (nothing is queued to send either) */
		got[i].rc = shoal_farm_wait(f, ids[i], out, &got[i].v, SHOAL_FOREVER);
		got[i].msg = NULL;
		if (got[i].rc) {
			const char *m = shoal_farm_error(f);
			size_t l = strlen(m) + 1;
			if ((got[i].msg = PyMem_RawMalloc(l)))
				memcpy(got[i].msg, m, l);
		}
	}
	/* a kill gives the wait up: what came stays in the farm for the next */
	bool killed = sh_tl_blocking_end(&b, rc);
	PyObject *list = NULL;
	if (rc == SHOAL_ETIMEDOUT || rc == SHOAL_ENOENT)
		rc = 0, n = 0;
	if (killed)
		sh_tl_raise_killed();
	else if (rc)
		sh_py_raise(rc, shoal_farm_error(f));
	else if ((list = PyList_New(n)))
		for (uint32_t i = 0; i < n; i++) {
			const char *m = got[i].msg ? got[i].msg : "(no memory for its message)";
			PyObject *v = got[i].rc == 0
					      ? sh_py_from_value(got[i].v)
					      : PyUnicode_DecodeUTF8(m, strlen(m), "replace");
			PyObject *t =
				v ? Py_BuildValue("(KiN)", (unsigned long long)ids[i], got[i].rc, v)
				  : NULL;
			if (!t) {
				Py_CLEAR(list);
				break;
			}
			PyList_SET_ITEM(list, i, t);
		}
	for (uint32_t i = 0; i < n; i++)
		PyMem_RawFree(got[i].msg);
	shoal_vbuf_reset(out);
	/* the views made of shared results hold them now: the farm's objects go */
	sh_tl_blocking_begin(&b, false);
	shoal_farm_drop_taken(f);
	sh_tl_blocking_end(&b, 0);
	farm_unlock(self, &turn);
	return list;
}

static PyObject *farm_stat(ShFarm *self, PyObject *args)
{
	double timeout = 10;
	if (!PyArg_ParseTuple(args, "|d:stat", &timeout))
		return NULL;
	sh_tl_turn turn;
	if (farm_lock(self, &turn) != 0)
		return NULL;
	shoal_controller_stat st;
	shoal_farm_engine eng[256];
	uint32_t ne = 0;
	int rc;
	shoal_farm *f = self->f;
	sh_tl_blocking b;
	sh_tl_blocking_begin(&b, true);
	rc = shoal_farm_stat(f, &st, eng, 256, &ne, shoal_deadline_in((int64_t)(timeout * 1e9)));
	bool killed = sh_tl_blocking_end(&b, rc);
	PyObject *d = NULL, *l = NULL;
	if (killed)
		sh_tl_raise_killed();
	else if (rc)
		sh_py_raise(rc, shoal_farm_error(f));
	else if ((d = stat_dict(&st)) && (l = PyList_New(ne < 256 ? ne : 256))) {
		for (uint32_t i = 0; i < ne && i < 256; i++) {
			PyObject *e = Py_BuildValue("{sIsIsiss}", "num", eng[i].num, "inflight",
						    eng[i].inflight, "pid", eng[i].pid, "peer",
						    eng[i].peer);
			if (!e) {
				Py_CLEAR(l);
				break;
			}
			PyList_SET_ITEM(l, i, e);
		}
		if (!l || PyDict_SetItemString(d, "engine_list", l) != 0)
			Py_CLEAR(d);
	}
	Py_XDECREF(l);
	farm_unlock(self, &turn);
	return d;
}

static PyObject *farm_use_store(ShFarm *self, PyObject *args)
{
	PyObject *p, *b;
	if (!PyArg_ParseTuple(args, "O:use_store", &p) || sh_py_fspath(p, &b) != 0)
		return NULL;
	sh_tl_turn turn;
	if (farm_lock(self, &turn) != 0) {
		Py_DECREF(b);
		return NULL;
	}
	int rc;
	shoal_farm *f = self->f;
	const char *path = PyBytes_AS_STRING(b);
	sh_tl_blocking bl;
	sh_tl_blocking_begin(&bl, false);
	rc = shoal_farm_use_store(f, path);
	sh_tl_blocking_end(&bl, rc);
	if (rc)
		sh_py_raise(rc, shoal_farm_error(f));
	else
		shoal_farm_defer_drops(f, true); /* results() makes views of them first */
	farm_unlock(self, &turn);
	Py_DECREF(b);
	if (rc)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *farm_close(ShFarm *self, PyObject *unused)
{
	sh_tl_turn turn;
	if (sh_tl_turn_take(&turn, self, "a task client's close") != 0)
		return NULL;
	sh_py_lock(&self->mu);
	farm_close_now(self);
	farm_unlock(self, &turn);
	Py_RETURN_NONE;
}

static PyMethodDef farm_methods[] = {
	{"submit", (PyCFunction)(void (*)(void))farm_submit, METH_VARARGS | METH_KEYWORDS,
	 "submit(fn, args, timeout=None, retries=0, engine=-1, after=None, follow=None) -> id"
	 "\n\nQueues a task of the engines' function fn (blocks only for a task of 16 KiB or "
	 "more, sent now: the client's timeout)."},
	{"flush", (PyCFunction)farm_flush, METH_NOARGS,
	 "flush()\n\nSends what is queued (blocks: until the controller has it)."},
	{"results", (PyCFunction)farm_results, METH_VARARGS,
	 "results(timeout) -> [(id, status, value or message)]\n\nWaits at most timeout "
	 "seconds for results (blocks), then takes every one that is here."},
	{"stat", (PyCFunction)farm_stat, METH_VARARGS,
	 "stat(timeout=10) -> dict\n\nThe controller's figures and its engines (engine_list) "
	 "(blocks: at most timeout seconds)."},
	{"use_store", (PyCFunction)farm_use_store, METH_VARARGS,
	 "use_store(socket)\n\nTensors and blobs of arguments go by reference through this "
	 "store from now on (blocks: its connect)."},
	{"close", (PyCFunction)farm_close, METH_NOARGS,
	 "close()\n\nCloses the connection: the controller drops this client's tasks not yet "
	 "run."},
	{NULL, NULL, 0, NULL},
};

static PyObject *farm_get_socket(ShFarm *self, void *unused)
{
	Py_INCREF(self->socket);
	return self->socket;
}

static PyGetSetDef farm_getset[] = {
	{"socket", (getter)farm_get_socket, NULL, "The controller's address.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShFarm_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Farm",
	.tp_basicsize = sizeof(ShFarm),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Farm(socket, timeout=None)\n\nA client of a task controller (a unix socket "
		  "or tcp://HOST:PORT; blocks: the connect, at most timeout seconds, else 10). "
		  "timeout also bounds how long a call waits for the controller.",
	.tp_new = farm_new,
	.tp_dealloc = (destructor)farm_dealloc,
	.tp_methods = farm_methods,
	.tp_getset = farm_getset,
};

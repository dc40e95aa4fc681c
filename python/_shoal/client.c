/* shoal._shoal: Client (a store connection) and Store (an embedded store).
 * Every call that talks to the store runs with the GIL released and the
 * connection's mutex held (run()); arguments are converted to C first,
 * results to Python after, so no Python object is touched without the
 * GIL. A connection is its process's: after a fork the child gets Closed
 * and the parent's connection is never touched (not even freed). */
#include "module.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bumped in the child of every fork: a client or store made under another
 * generation belongs to the parent. Cheaper than getpid() on each call. */
static unsigned long fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	fork_gen++;
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

static bool foreign(const ShClient *c)
{
	return c->gen != fork_gen;
}

bool sh_py_client_foreign(const ShClient *c)
{
	return c && foreign(c);
}

int sh_py_client_check(ShClient *c)
{
	if (foreign(c)) {
		sh_py_raisef(ShClosed, SHOAL_ECLOSED,
			     "this connection was made by process %ld before a fork: connect "
			     "again in the child",
			     (long)c->pid);
		return -1;
	}
	/* a hint without the mutex (run() checks again under it) */
	if (__atomic_load_n(&c->closed, __ATOMIC_RELAXED)) {
		sh_py_raisef(ShClosed, SHOAL_ECLOSED, "the connection is closed");
		return -1;
	}
	return 0;
}

void sh_py_lock(pthread_mutex_t *mu)
{
	if (pthread_mutex_trylock(mu) == 0)
		return;
	PyThreadState *ts_ = PyEval_SaveThread();
	pthread_mutex_lock(mu);
	PyEval_RestoreThread(ts_);
}

typedef int (*job_fn)(ShClient *c, void *arg);

/* A timeout argument: absent (NULL) is the connection's, None no bound,
 * else seconds > 0. */
int sh_py_parse_timeout(PyObject *t, int64_t *ns)
{
	if (!t) {
		*ns = SH_PY_CONN_TIMEOUT;
		return 0;
	}
	if (t == Py_None) {
		*ns = SHOAL_FOREVER;
		return 0;
	}
	double d = PyFloat_AsDouble(t);
	if (d == -1.0 && PyErr_Occurred())
		return -1;
	if (!(d > 0) || d > 1e9) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "timeout is %g: expected seconds > 0, or None for no bound", d);
		return -1;
	}
	*ns = (int64_t)(d * 1e9);
	if (*ns == 0)
		*ns = 1;
	return 0;
}

/* Ctrl-C during a call: the C client asks every 100 ms while it waits.
 * Only the main thread sees signals, so only its calls ask. No Python code
 * may run here (a handler could use this connection, whose mutex we hold,
 * or drop an object of it): the interrupt is taken, the call ends, and the
 * interrupt is given back to Python to handle once the mutex is free. */
typedef struct {
	PyThreadState *ts;
	bool interrupted;
} waiter;

static int py_interrupted(void *arg)
{
	waiter *w = arg;
	PyEval_RestoreThread(w->ts);
	if (PyOS_InterruptOccurred())
		w->interrupted = true;
	w->ts = PyEval_SaveThread();
	return w->interrupted;
}

/* The same in a thread with tasklets, where the call keeps the GIL
 * (sh_tl_blocking_begin): it is held whenever the call's fiber runs. */
static int py_interrupted_held(void *arg)
{
	waiter *w = arg;
	if (PyOS_InterruptOccurred())
		w->interrupted = true;
	return w->interrupted;
}

/* Objects a tasklet dropped while another tasklet of the thread was inside
 * a call on the connection: released now, by that call (mutex held). */
static void release_dropped(ShClient *self)
{
	while (self->ndropped) {
		shoal_object_release(self->dropped[--self->ndropped]);
		self->nobjs--;
	}
}

/* Runs fn under the connection's mutex with the GIL released, within
 * timeout_ns (SH_PY_CONN_TIMEOUT: the connection's). On failure err holds the
 * message (copied under the mutex: the next call on the connection
 * overwrites the client's). Returns 1 when a Python exception is set.
 * On a thread with tasklets the GIL stays held and only the calling
 * tasklet waits (module.h: sh_tl_blocking_begin); the tasklets of the
 * thread take turns at the connection (sh_tl_turn_take). */
/* The call itself, the connection's mutex held: its timeout and Ctrl-C
 * check set around fn, the error's text copied. In a tasklet (killed not
 * NULL) fn runs between sh_tl_blocking_begin and _end, and *killed says
 * whether a kill gave it up. */
static int run_locked(ShClient *self, job_fn fn, void *arg, char *err, size_t errlen,
		      int64_t timeout_ns, bool main, waiter *w, bool *killed)
{
	if (!self->c || self->closed) {
		snprintf(err, errlen, "the connection is closed");
		return SHOAL_ECLOSED;
	}
	int64_t old = 0;
	if (timeout_ns != SH_PY_CONN_TIMEOUT)
		old = shoal_client_set_timeout(self->c, timeout_ns);
	if (main)
		shoal_client_set_interrupt(self->c, killed ? py_interrupted_held : py_interrupted,
					   w);
	int rc;
	if (killed) {
		sh_tl_blocking b;
		sh_tl_blocking_begin(&b, true);
		rc = fn(self, arg);
		*killed = sh_tl_blocking_end(&b, rc);
	} else {
		rc = fn(self, arg);
	}
	if (main)
		shoal_client_set_interrupt(self->c, NULL, NULL);
	if (timeout_ns != SH_PY_CONN_TIMEOUT)
		shoal_client_set_timeout(self->c, old);
	if (rc && !err[0])
		snprintf(err, errlen, "%s", shoal_client_error(self->c));
	if (killed && self->ndropped) {
		sh_tl_blocking b;
		sh_tl_blocking_begin(&b, false);
		release_dropped(self);
		sh_tl_blocking_end(&b, 0);
	}
	return rc;
}

/* A Ctrl-C the client's check saw while the call waited: its handler runs
 * now (KeyboardInterrupt by default). 1 when it raised. */
static int raise_interrupt(const waiter *w)
{
	if (!w->interrupted)
		return 0;
	PyErr_SetInterruptEx(SIGINT);
	return PyErr_CheckSignals() != 0;
}

static int run_tasklet(ShClient *self, job_fn fn, void *arg, char *err, size_t errlen,
		       int64_t timeout_ns, bool main)
{
	sh_tl_turn turn;
	if (sh_tl_turn_take(&turn, self, "a store call") != 0)
		return 1;
	/* Another thread's call may hold the mutex: waiting for it blocks
	 * this whole thread (no switch happens meanwhile), with the GIL
	 * released so that thread can finish. */
	sh_py_lock(&self->mu);
	bool killed = false;
	waiter w = {0};
	int rc = run_locked(self, fn, arg, err, errlen, timeout_ns, main, &w, &killed);
	pthread_mutex_unlock(&self->mu);
	sh_tl_turn_give(&turn);
	if (killed) {
		sh_tl_raise_killed();
		return 1;
	}
	return raise_interrupt(&w) ? 1 : rc;
}

/* Runs fn under the connection's mutex with the GIL released, within
 * timeout_ns (SH_PY_CONN_TIMEOUT: the connection's). On failure err holds the
 * message (copied under the mutex: the next call on the connection
 * overwrites the client's). Returns 1 when a Python exception is set.
 * On a thread with tasklets the GIL stays held and only the calling
 * tasklet waits (module.h: sh_tl_blocking_begin); the tasklets of the
 * thread take turns at the connection (sh_tl_turn_take). */
static int run(ShClient *self, job_fn fn, void *arg, char *err, size_t errlen, int64_t timeout_ns)
{
	err[0] = 0;
	if (sh_py_client_check(self) != 0)
		return 1; /* raised */
	bool main = _PyOS_IsMainThread();
	if (sh_tl_active())
		return run_tasklet(self, fn, arg, err, errlen, timeout_ns, main);
	waiter w = {0};
	w.ts = PyEval_SaveThread();
	pthread_mutex_lock(&self->mu);
	int rc = run_locked(self, fn, arg, err, errlen, timeout_ns, main, &w, NULL);
	pthread_mutex_unlock(&self->mu);
	PyEval_RestoreThread(w.ts);
	return raise_interrupt(&w) ? 1 : rc;
}

/* run() and, on failure, the exception. */
static int call(ShClient *self, job_fn fn, void *arg, int64_t timeout_ns)
{
	char err[600];
	int rc = run(self, fn, arg, err, sizeof(err), timeout_ns);
	if (rc == 1)
		return -1;
	if (rc) {
		sh_py_raise(rc, err);
		return -1;
	}
	return 0;
}

/* sh_py_object_drop on a thread with tasklets, where it may run at any
 * point of a tasklet (a dealloc), so it never waits for a turn: with
 * another tasklet of the thread inside a call on c (whose wait must not be
 * interleaved with a request of ours), the object is left for that call
 * to release as it ends. */
static void drop_in_tasklets(ShClient *c, shoal_object *so)
{
	if (sh_tl_turn_held(c)) {
		if (c->ndropped == c->dropped_cap) {
			size_t cap = c->dropped_cap ? 2 * c->dropped_cap : 16;
			shoal_object **d = PyMem_RawRealloc(c->dropped, cap * sizeof(*d));
			if (!d) {
				/* no memory to defer it: the store keeps the
				 * reference until the connection closes */
				c->nobjs--;
				return;
			}
			c->dropped = d;
			c->dropped_cap = cap;
		}
		c->dropped[c->ndropped++] = so;
		return;
	}
	sh_tl_turn turn;
	PyObject *et, *ev, *tb;
	PyErr_Fetch(&et, &ev, &tb);
	int taken = sh_tl_turn_take(&turn, c, "an object's release");
	PyErr_Clear(); /* free just now: it never waits, nor fails */
	PyErr_Restore(et, ev, tb);
	(void)taken;
	sh_py_lock(&c->mu);
	sh_tl_blocking b;
	sh_tl_blocking_begin(&b, false);
	shoal_object_release(so);
	sh_tl_blocking_end(&b, 0);
	c->nobjs--;
	if (c->closed && c->nobjs == 0 && c->c) {
		shoal_disconnect(c->c);
		c->c = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	sh_tl_turn_give(&turn);
}

void sh_py_object_drop(ShObject *o)
{
	shoal_object *so = o->o;
	ShClient *c = o->client;
	if (!so)
		return;
	o->o = NULL;
	if (!c) { /* a remote store's: this process's memory, no store to tell */
		shoal_object_release(so);
		return;
	}
	if (foreign(c))
		return; /* the parent's: leave it be */
	if (sh_tl_active()) {
		drop_in_tasklets(c, so);
		return;
	}
	PyThreadState *ts_ = PyEval_SaveThread();
	pthread_mutex_lock(&c->mu);
	shoal_object_release(so);
	c->nobjs--;
	/* close() waited for the last object: its memory is unmapped now */
	if (c->closed && c->nobjs == 0 && c->c) {
		shoal_disconnect(c->c);
		c->c = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	PyEval_RestoreThread(ts_);
}

/* ---- arguments ---- */

const char *sh_py_opt_name(PyObject *name)
{
	if (name == Py_None)
		return NULL;
	const char *s = sh_py_cstr(name, "name");
	if (s && !*s) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "name is empty: pass None for no name");
		return NULL;
	}
	return s;
}

/* An id (a positive int) or a name (a non-empty str). */
int sh_py_parse_key(PyObject *k, shoal_id *id, const char **name)
{
	*id = 0;
	*name = NULL;
	if (PyLong_Check(k) && !PyBool_Check(k)) {
		unsigned long long v = PyLong_AsUnsignedLongLong(k);
		if (PyErr_Occurred() || v == 0) {
			PyErr_Clear();
			sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
				     "an object id is an int from 1 to 2**64-1");
			return -1;
		}
		*id = v;
		return 0;
	}
	if (PyUnicode_Check(k)) {
		*name = sh_py_cstr(k, "name");
		if (*name && !**name) {
			sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "name is empty");
			return -1;
		}
		return *name ? 0 : -1;
	}
	PyErr_Format(PyExc_TypeError, "expected an object id (int) or a name (str), not %.100s",
		     Py_TYPE(k)->tp_name);
	return -1;
}

/* A read-only, C-contiguous view of any buffer. */
int sh_py_get_buffer(PyObject *data, Py_buffer *v, const char *what)
{
	if (PyObject_GetBuffer(data, v, PyBUF_C_CONTIGUOUS) == 0)
		return 0;
	if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError)) {
		PyObject *t, *val, *tb;
		PyErr_Fetch(&t, &val, &tb);
		PyObject *s = val ? PyObject_Str(val) : NULL;
		const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
		PyErr_Clear();
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "%s must be a C-contiguous buffer (make it contiguous first): %s",
			     what, m ? m : "");
		Py_XDECREF(s);
		Py_XDECREF(t);
		Py_XDECREF(val);
		Py_XDECREF(tb);
	}
	return -1;
}

int sh_py_parse_dtype(PyObject *o, shoal_dtype *dt)
{
	const char *s = sh_py_cstr(o, "dtype");
	if (!s)
		return -1;
	*dt = shoal_dtype_from_name(s, strlen(s));
	if (*dt == SHOAL_DT_INVALID) {
		char all[256] = "";
		for (int i = 1; i < SHOAL_DT_COUNT; i++) {
			strcat(all, i > 1 ? ", " : "");
			strcat(all, shoal_dtype_name((shoal_dtype)i));
		}
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "unknown dtype '%.64s': expected one of %s", s, all);
		return -1;
	}
	return 0;
}

/* shape: a tuple or list of ints >= 0, at most SHOAL_TENSOR_MAX_DIMS;
 * *bytes: their product times the element size, checked. */
int sh_py_parse_shape(PyObject *o, shoal_dtype dt, int64_t *shape, int *ndim, size_t *bytes)
{
	if (!PyTuple_Check(o) && !PyList_Check(o)) {
		PyErr_Format(PyExc_TypeError, "shape must be a tuple of ints, not %.100s",
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	PyObject *f = PySequence_Fast(o, "shape");
	if (!f)
		return -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
	if (n > SHOAL_TENSOR_MAX_DIMS) {
		Py_DECREF(f);
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "a shape of %zd dimensions: at most %d",
			     n, SHOAL_TENSOR_MAX_DIMS);
		return -1;
	}
	size_t b = shoal_dtype_size(dt), nz = b; /* nz: the product of the non-zero dims */
	bool over = false;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *d = PySequence_Fast_GET_ITEM(f, i);
		if (!PyLong_Check(d) || PyBool_Check(d)) {
			PyErr_Format(PyExc_TypeError, "shape[%zd] must be an int, not %.100s", i,
				     Py_TYPE(d)->tp_name);
			Py_DECREF(f);
			return -1;
		}
		long long v = PyLong_AsLongLong(d);
		if (v == -1 && PyErr_Occurred()) {
			PyErr_Clear();
			over = true;
			v = INT64_MAX;
		}
		if (v < 0) {
			Py_DECREF(f);
			sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
				     "shape[%zd] is %lld: expected >= 0", i, v);
			return -1;
		}
		shape[i] = v;
		if (!over && shoal_mul_size(b, (size_t)v, &b) != 0)
			over = true;
		if (!over && v && shoal_mul_size(nz, (size_t)v, &nz) != 0)
			over = true;
	}
	Py_DECREF(f);
	/* an empty dimension makes the product 0 whatever the others are, but
	 * the store would still have to carry the huge ones: refuse them all */
	if (over || nz > (size_t)PY_SSIZE_T_MAX) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "the shape's product times %zu bytes overflows 63 bits",
			     shoal_dtype_size(dt));
		return -1;
	}
	*ndim = (int)n;
	*bytes = b;
	return 0;
}

unsigned sh_py_flags_of(int persist, int replace)
{
	return (persist ? SHOAL_PERSIST : 0) | (replace ? SHOAL_REPLACE : 0);
}

/* ---- Client ---- */

/* (key, *, timeout=...) of get, delete and persist, read without a tuple
 * or a dict: get of a small object is a microsecond or two in all. */
static int key_and_timeout(const char *fname, PyObject *const *args, Py_ssize_t nargs,
			   PyObject *kwnames, PyObject **key, int64_t *timeout_ns)
{
	PyObject *t = NULL;
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	if (nargs != 1) {
		PyErr_Format(PyExc_TypeError, "%s() takes one key (an id or a name), got %zd",
			     fname, nargs);
		return -1;
	}
	for (Py_ssize_t i = 0; i < nkw; i++) {
		PyObject *k = PyTuple_GET_ITEM(kwnames, i);
		if (PyUnicode_CompareWithASCIIString(k, "timeout") != 0) {
			PyErr_Format(PyExc_TypeError,
				     "%s() got an unexpected keyword argument '%U'", fname, k);
			return -1;
		}
		t = args[nargs + i];
	}
	*key = args[0];
	return sh_py_parse_timeout(t, timeout_ns);
}

typedef struct {
	const char *path;
	shoal_connect_opts o;
	shoal_client *c;
	char err[600];
} connect_job;

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "timeout", NULL};
	PyObject *sock, *timeout = NULL, *path = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:Client", kwlist, &sock, &timeout))
		return NULL;
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	int64_t t;
	if (sh_py_parse_timeout(timeout, &t) != 0)
		return NULL;
	if (t != SH_PY_CONN_TIMEOUT)
		o.timeout_ns = t;
	if (sh_py_fspath(sock, &path) != 0)
		return NULL;
	pthread_once(&atfork_once, register_atfork);
	ShClient *self = (ShClient *)type->tp_alloc(type, 0);
	if (!self) {
		Py_DECREF(path);
		return NULL;
	}
	pthread_mutex_init(&self->mu, NULL);
	self->pid = getpid();
	self->gen = fork_gen;
	self->socket =
		PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(path), PyBytes_GET_SIZE(path));
	if (!self->socket) {
		Py_DECREF(path);
		Py_DECREF(self);
		return NULL;
	}
	int rc;
	shoal_client *c = NULL;
	const char *p = PyBytes_AS_STRING(path);
	PyThreadState *ts_ = PyEval_SaveThread();
	rc = shoal_connect_with(&c, p, &o);
	PyEval_RestoreThread(ts_);
	if (rc != 0) {
		sh_py_raisef(NULL, rc, "cannot connect to the store at %s: %s", p,
			     sh_py_strerror(rc));
		Py_DECREF(path);
		Py_DECREF(self);
		return NULL;
	}
	Py_DECREF(path);
	self->c = c;
	return (PyObject *)self;
}

static void client_dealloc(ShClient *self)
{
	/* Objects hold their client: none is left here. */
	if (!foreign(self)) {
		shoal_client *c = self->c;
		self->c = NULL;
		if (c) {
			PyThreadState *ts_ = PyEval_SaveThread();
			shoal_disconnect(c);
			PyEval_RestoreThread(ts_);
		}
		pthread_mutex_destroy(&self->mu);
	}
	PyMem_RawFree(self->dropped); /* empty: the call that held the turn held us */
	Py_CLEAR(self->socket);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(ShClient *self, PyObject *unused)
{
	if (foreign(self)) {
		/* the parent's connection: only forget it */
		__atomic_store_n(&self->closed, true, __ATOMIC_RELAXED);
		Py_RETURN_NONE;
	}
	/* With tasklets: after the call of another tasklet of the thread */
	sh_tl_turn turn;
	if (sh_tl_turn_take(&turn, self, "Client.close") != 0)
		return NULL;
	PyThreadState *ts_ = PyEval_SaveThread();
	pthread_mutex_lock(&self->mu);
	__atomic_store_n(&self->closed, true, __ATOMIC_RELAXED);
	/* Live objects keep the connection (their memory is mapped through
	 * it); the last one to go disconnects. */
	if (self->nobjs == 0 && self->c) {
		shoal_disconnect(self->c);
		self->c = NULL;
	}
	pthread_mutex_unlock(&self->mu);
	PyEval_RestoreThread(ts_);
	sh_tl_turn_give(&turn);
	Py_RETURN_NONE;
}

static PyObject *client_enter(PyObject *self, PyObject *unused)
{
	if (sh_py_client_check((ShClient *)self) != 0)
		return NULL;
	return Py_NewRef(self);
}

static PyObject *client_exit(PyObject *self, PyObject *args)
{
	PyObject *r = client_close((ShClient *)self, NULL);
	Py_XDECREF(r);
	if (!r)
		return NULL;
	Py_RETURN_FALSE;
}

static PyObject *client_closed(ShClient *self, void *unused)
{
	return PyBool_FromLong(__atomic_load_n(&self->closed, __ATOMIC_RELAXED) || foreign(self));
}

static PyObject *client_socket(ShClient *self, void *unused)
{
	return Py_NewRef(self->socket);
}

typedef struct {
	const char *name, *type; /* type NULL: "bytes" */
	const void *data;
	size_t size;
	unsigned flags;
	shoal_id id;
} put_bytes_job;

static int do_put_bytes(ShClient *c, void *arg)
{
	put_bytes_job *j = arg;
	if (!j->type)
		return shoal_put_bytes(c->c, j->name, j->data, j->size, j->flags, &j->id);
	shoal_builder *b;
	void *p;
	int rc = shoal_builder_create(c->c, j->type, &b);
	if (rc)
		return rc;
	if ((rc = shoal_node_add_blob(shoal_builder_root(b), j->size, &p)) != 0 ||
	    (rc = shoal_builder_write(b, p, j->data, j->size)) != 0) {
		shoal_builder_abort(b);
		return rc;
	}
	return shoal_builder_seal(b, j->name, j->flags, &j->id);
}

static PyObject *client_put_bytes(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "name", "persist", "replace", "timeout", "type", NULL};
	PyObject *data, *name = Py_None, *timeout = NULL, *type = Py_None;
	int persist = 0, replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Opp$OO:put_bytes", kwlist, &data, &name,
					 &persist, &replace, &timeout, &type) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	put_bytes_job j = {.flags = sh_py_flags_of(persist, replace)};
	if ((name != Py_None && !(j.name = sh_py_opt_name(name))) ||
	    (type != Py_None && !(j.type = sh_py_cstr(type, "type"))))
		return NULL;
	Py_buffer v;
	if (sh_py_get_buffer(data, &v, "data") != 0)
		return NULL;
	j.data = v.buf;
	j.size = (size_t)v.len;
	int rc = call(self, do_put_bytes, &j, tmo);
	PyBuffer_Release(&v);
	return rc ? NULL : PyLong_FromUnsignedLongLong(j.id);
}

typedef struct {
	const char *name;
	const void *data;
	size_t size;
	shoal_dtype dt;
	int ndim;
	unsigned flags;
	int64_t shape[SHOAL_TENSOR_MAX_DIMS];
	shoal_id id;
	const sh_py_items *meta; /* its metadata (no items) */
	char err[400];
} put_tensor_job;

/* The root's string fields: a put's metadata. */
static int set_meta(shoal_node *root, const sh_py_items *t, char *err, size_t errlen)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < t->nmeta; i++)
		if ((rc = shoal_node_set_str(root, t->keys[i], t->vals[i], t->vlens[i])) != 0)
			snprintf(err, errlen, "metadata key '%.300s': %s", t->keys[i],
				 sh_py_strerror(rc));
	return rc;
}

static int do_put_tensor(ShClient *c, void *arg)
{
	put_tensor_job *j = arg;
	shoal_builder *b;
	void *p;
	int rc = shoal_builder_create(c->c, "tensor", &b);
	if (rc)
		return rc;
	rc = set_meta(shoal_builder_root(b), j->meta, j->err, sizeof(j->err));
	if (rc == 0)
		rc = shoal_node_set_tensor(shoal_builder_root(b), j->dt, j->ndim, j->shape, &p);
	if (rc) {
		shoal_builder_abort(b);
		return rc;
	}
	if ((rc = shoal_builder_write(b, p, j->data, j->size)) != 0) {
		shoal_builder_abort(b);
		return rc;
	}
	return shoal_builder_seal(b, j->name, j->flags, &j->id);
}

static PyObject *client_put_tensor(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data",    "dtype",   "shape",	   "name", "persist",
				 "replace", "timeout", "metadata", NULL};
	PyObject *data, *dtype, *shape, *name = Py_None, *timeout = NULL, *metadata = Py_None;
	int persist = 0, replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|Opp$OO:put_tensor", kwlist, &data, &dtype,
					 &shape, &name, &persist, &replace, &timeout, &metadata) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	put_tensor_job j = {.flags = sh_py_flags_of(persist, replace)};
	size_t need;
	if ((name != Py_None && !(j.name = sh_py_opt_name(name))) ||
	    sh_py_parse_dtype(dtype, &j.dt) != 0 ||
	    sh_py_parse_shape(shape, j.dt, j.shape, &j.ndim, &need) != 0)
		return NULL;
	sh_py_items meta;
	PyObject *none = PyList_New(0);
	int parsed = none ? sh_py_items_parse(none, metadata, &meta) : -1;
	Py_XDECREF(none);
	if (parsed != 0)
		return NULL;
	j.meta = &meta;
	Py_buffer v;
	PyObject *res = NULL;
	if (sh_py_get_buffer(data, &v, "data") != 0) {
		sh_py_items_free(&meta);
		return NULL;
	}
	if ((size_t)v.len != need) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "data has %zd bytes; a %s tensor of this shape needs %zu", v.len,
			     shoal_dtype_name(j.dt), need);
	} else {
		j.data = v.buf;
		j.size = need;
		char e2[600];
		int rc = run(self, do_put_tensor, &j, e2, sizeof(e2), tmo);
		if (rc == 0)
			res = PyLong_FromUnsignedLongLong(j.id);
		else if (rc != 1)
			sh_py_raise(rc, j.err[0] ? j.err : e2);
	}
	PyBuffer_Release(&v);
	sh_py_items_free(&meta);
	return res;
}

typedef struct {
	sh_py_items it;
	const char *name;
	unsigned flags;
	shoal_id id;
	char *err;
	size_t errlen;
} put_dict_job;

static int do_put_dict(ShClient *c, void *arg)
{
	put_dict_job *j = arg;
	const sh_py_items *t = &j->it;
	shoal_builder *b;
	int rc = shoal_builder_create(c->c, "tensor_dict", &b);
	if (rc)
		return rc;
	shoal_node *root = shoal_builder_root(b);
	for (size_t i = 0; rc == 0 && i < t->nmeta; i++)
		if ((rc = shoal_node_set_str(root, t->keys[i], t->vals[i], t->vlens[i])) != 0)
			snprintf(j->err, j->errlen, "metadata key '%.300s': %s", t->keys[i],
				 sh_py_strerror(rc));
	/* one region for all the tensors: one mapping for every reader */
	if (rc == 0 && t->total > 0)
		rc = shoal_builder_reserve(b, t->total);
	for (size_t i = 0; rc == 0 && i < t->n; i++) {
		sh_py_item *it = &t->items[i];
		shoal_node *m;
		void *p;
		rc = shoal_node_add_member(root, it->name, "tensor", &m);
		if (rc == 0)
			rc = shoal_node_set_tensor(m, it->dt, it->ndim, it->shape, &p);
		if (rc)
			snprintf(j->err, j->errlen, "tensor %zu ('%.300s'): %s", i, it->name,
				 rc == SHOAL_EEXIST ? "the name is used twice"
						    : sh_py_strerror(rc));
		else
			rc = shoal_builder_write(b, p, it->v.buf, (size_t)it->v.len);
	}
	if (rc) {
		shoal_builder_abort(b);
		return rc;
	}
	return shoal_builder_seal(b, j->name, j->flags, &j->id);
}

int sh_py_items_parse(PyObject *items, PyObject *metadata, sh_py_items *j)
{
	memset(j, 0, sizeof(*j));
	if (metadata != Py_None && !PyDict_Check(metadata)) {
		PyErr_Format(PyExc_TypeError, "metadata must be a dict[str, str], not %.100s",
			     Py_TYPE(metadata)->tp_name);
		return -1;
	}
	/* Everything the items borrow is kept alive here: another thread may
	 * change the caller's list or dict while the GIL is released. */
	PyObject *seq = NULL, *mitems = NULL;
	if (!(j->keep = PyList_New(0)) ||
	    !(seq = PySequence_Fast(items, "items must be a list of tuples")) ||
	    PyList_Append(j->keep, seq) != 0)
		goto fail;
	j->n = (size_t)PySequence_Fast_GET_SIZE(seq);
	if (j->n && !(j->items = PyMem_Calloc(j->n, sizeof(sh_py_item)))) {
		PyErr_NoMemory();
		goto fail;
	}
	for (size_t i = 0; i < j->n; i++) {
		PyObject *t = PySequence_Tuple(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
		if (!t || PyList_Append(j->keep, t) != 0) {
			Py_XDECREF(t);
			goto fail;
		}
		Py_DECREF(t);
		if (PyTuple_GET_SIZE(t) != 4) {
			PyErr_Format(
				PyExc_TypeError,
				"items[%zu] must be (name, data, dtype, shape), not %zd values", i,
				PyTuple_GET_SIZE(t));
			goto fail;
		}
		sh_py_item *it = &j->items[i];
		size_t need;
		if (!(it->name = sh_py_cstr(PyTuple_GET_ITEM(t, 0), "a tensor's name")) ||
		    sh_py_parse_dtype(PyTuple_GET_ITEM(t, 2), &it->dt) != 0 ||
		    sh_py_parse_shape(PyTuple_GET_ITEM(t, 3), it->dt, it->shape, &it->ndim,
				      &need) != 0 ||
		    sh_py_get_buffer(PyTuple_GET_ITEM(t, 1), &it->v, "a tensor's data") != 0)
			goto fail;
		j->got++;
		if ((size_t)it->v.len != need) {
			sh_py_raisef(
				ShInvalidInput, SHOAL_EINVAL,
				"tensor '%.300s' has %zd bytes; a %s tensor of its shape needs "
				"%zu",
				it->name, it->v.len, shoal_dtype_name(it->dt), need);
			goto fail;
		}
		size_t a;
		/* blobs start 64-byte aligned in the region */
		if (shoal_align_size(need, 64, &a) != 0 ||
		    shoal_add_size(j->total, a, &j->total) != 0) {
			sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "the tensors' sizes overflow");
			goto fail;
		}
	}
	if (metadata != Py_None) {
		if (!(mitems = PyDict_Items(metadata)) || PyList_Append(j->keep, mitems) != 0)
			goto fail;
		j->nmeta = (size_t)PyList_GET_SIZE(mitems);
		if (j->nmeta && (!(j->keys = PyMem_Calloc(j->nmeta, sizeof(char *))) ||
				 !(j->vals = PyMem_Calloc(j->nmeta, sizeof(char *))) ||
				 !(j->vlens = PyMem_Calloc(j->nmeta, sizeof(size_t))))) {
			PyErr_NoMemory();
			goto fail;
		}
		for (size_t i = 0; i < j->nmeta; i++) {
			PyObject *kv = PyList_GET_ITEM(mitems, (Py_ssize_t)i);
			Py_ssize_t vl;
			if (!(j->keys[i] = sh_py_cstr(PyTuple_GET_ITEM(kv, 0), "a metadata key")))
				goto fail;
			if (!PyUnicode_Check(PyTuple_GET_ITEM(kv, 1))) {
				PyErr_Format(PyExc_TypeError, "metadata['%.200s'] must be a str",
					     j->keys[i]);
				goto fail;
			}
			if (!(j->vals[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kv, 1), &vl)))
				goto fail;
			j->vlens[i] = (size_t)vl;
		}
	}
	Py_XDECREF(mitems);
	Py_XDECREF(seq);
	return 0;
fail:
	Py_XDECREF(mitems);
	Py_XDECREF(seq);
	sh_py_items_free(j);
	return -1;
}

void sh_py_items_free(sh_py_items *j)
{
	for (size_t i = 0; i < j->got; i++)
		PyBuffer_Release(&j->items[i].v);
	PyMem_Free(j->items);
	PyMem_Free(j->keys);
	PyMem_Free(j->vals);
	PyMem_Free(j->vlens);
	Py_CLEAR(j->keep);
	memset(j, 0, sizeof(*j));
}

static PyObject *client_put_tensor_dict(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"items",   "metadata", "name", "persist",
				 "replace", "timeout",	NULL};
	PyObject *items, *metadata = Py_None, *name = Py_None, *timeout = NULL;
	int persist = 0, replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOpp$O:put_tensor_dict", kwlist, &items,
					 &metadata, &name, &persist, &replace, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	char err[600] = "";
	put_dict_job j = {
		.flags = sh_py_flags_of(persist, replace), .err = err, .errlen = sizeof(err)};
	if (name != Py_None && !(j.name = sh_py_opt_name(name)))
		return NULL;
	if (sh_py_items_parse(items, metadata, &j.it) != 0)
		return NULL;
	PyObject *res = NULL;
	char e2[600];
	int rc = run(self, do_put_dict, &j, e2, sizeof(e2), tmo);
	if (rc == 0)
		res = PyLong_FromUnsignedLongLong(j.id);
	else if (rc != 1)
		sh_py_raise(rc, err[0] ? err : e2);
	sh_py_items_free(&j.it);
	return res;
}

typedef struct {
	shoal_id id;
	const char *name;
	shoal_object *o;
	unsigned flags;
} get_job;

static int do_get(ShClient *c, void *arg)
{
	get_job *j = arg;
	int rc = j->flags  ? shoal_get_with(c->c, j->name, j->name ? 0 : j->id, j->flags, &j->o)
		 : j->name ? shoal_get_by_name(c->c, j->name, &j->o)
			   : shoal_get(c->c, j->id, &j->o);
	if (rc == 0)
		c->nobjs++;
	return rc;
}

ShObject *sh_py_object_new(ShClient *client)
{
	ShObject *o = PyObject_GC_New(ShObject, &ShObject_Type);
	if (!o)
		return NULL;
	o->client = client ? (ShClient *)Py_NewRef(client) : NULL;
	o->o = NULL;
	o->id = 0;
	o->nbytes = 0;
	o->views = 0;
	o->release_asked = false;
	PyObject_GC_Track(o);
	return o;
}

static PyObject *get_with(ShClient *self, PyObject *const *args, Py_ssize_t nargs,
			  PyObject *kwnames, const char *fname, unsigned flags)
{
	get_job j = {.flags = flags};
	PyObject *key;
	int64_t tmo;
	if (key_and_timeout(fname, args, nargs, kwnames, &key, &tmo) != 0 ||
	    sh_py_parse_key(key, &j.id, &j.name) != 0)
		return NULL;
	/* made first: once the store's reference is ours nothing may fail */
	ShObject *o = sh_py_object_new(self);
	if (!o)
		return NULL;
	if (call(self, do_get, &j, tmo) != 0) {
		Py_DECREF(o);
		return NULL;
	}
	o->o = j.o;
	o->id = shoal_object_id(j.o);
	o->nbytes = shoal_object_bytes(j.o);
	return (PyObject *)o;
}

static PyObject *client_get(ShClient *self, PyObject *const *args, Py_ssize_t nargs,
			    PyObject *kwnames)
{
	return get_with(self, args, nargs, kwnames, "get", 0);
}

static PyObject *client_get_local(ShClient *self, PyObject *const *args, Py_ssize_t nargs,
				  PyObject *kwnames)
{
	return get_with(self, args, nargs, kwnames, "get_local", SHOAL_GET_LOCAL);
}

typedef struct {
	shoal_id id;
	const char *name;
	bool replace;
} name_job;

static int do_name(ShClient *c, void *arg)
{
	name_job *j = arg;
	return j->id ? shoal_name(c->c, j->id, j->name, j->replace) : shoal_unname(c->c, j->name);
}

static PyObject *client_name(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"id", "name", "replace", "timeout", NULL};
	unsigned long long id;
	PyObject *name, *timeout = NULL;
	int replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "KO|p$O:name", kwlist, &id, &name, &replace,
					 &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	name_job j = {.id = id, .replace = replace};
	if (!(j.name = sh_py_cstr(name, "name")))
		return NULL;
	if (id == 0)
		return sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "object id 0 names no object");
	if (call(self, do_name, &j, tmo) != 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *client_unname(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "timeout", NULL};
	PyObject *name, *timeout = NULL;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$O:unname", kwlist, &name, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	name_job j = {0};
	if (!(j.name = sh_py_cstr(name, "name")) || call(self, do_name, &j, tmo) != 0)
		return NULL;
	Py_RETURN_NONE;
}

typedef struct {
	shoal_object *base, *o;
} cow_job;

static int do_cow(ShClient *c, void *arg)
{
	cow_job *j = arg;
	int rc = shoal_object_cow(j->base, &j->o);
	if (rc == 0)
		c->nobjs++;
	return rc;
}

PyObject *sh_py_object_cow(ShObject *base)
{
	ShClient *self = base->client;
	ShObject *o = sh_py_object_new(self);
	if (!o)
		return NULL;
	o->id = base->id;
	o->nbytes = base->nbytes;
	cow_job j = {base->o, NULL};
	if (call(self, do_cow, &j, SH_PY_CONN_TIMEOUT) != 0) {
		Py_DECREF(o);
		return NULL;
	}
	o->o = j.o;
	return (PyObject *)o;
}

static int do_delete(ShClient *c, void *arg)
{
	get_job *j = arg;
	return j->name ? shoal_delete(c->c, j->name) : shoal_delete_id(c->c, j->id);
}

static PyObject *client_delete(ShClient *self, PyObject *const *args, Py_ssize_t nargs,
			       PyObject *kwnames)
{
	get_job j = {0};
	PyObject *key;
	int64_t tmo;
	if (key_and_timeout("delete", args, nargs, kwnames, &key, &tmo) != 0 ||
	    sh_py_parse_key(key, &j.id, &j.name) != 0 || call(self, do_delete, &j, tmo) != 0)
		return NULL;
	Py_RETURN_NONE;
}

static int do_persist(ShClient *c, void *arg)
{
	return shoal_persist(c->c, *(shoal_id *)arg);
}

static PyObject *client_persist(ShClient *self, PyObject *const *args, Py_ssize_t nargs,
				PyObject *kwnames)
{
	get_job j = {0};
	PyObject *key;
	int64_t tmo;
	if (key_and_timeout("persist", args, nargs, kwnames, &key, &tmo) != 0)
		return NULL;
	if (!PyLong_Check(key))
		return PyErr_Format(PyExc_TypeError, "persist takes an object id (int), not %.100s",
				    Py_TYPE(key)->tp_name);
	if (sh_py_parse_key(key, &j.id, &j.name) != 0 || call(self, do_persist, &j.id, tmo) != 0)
		return NULL;
	Py_RETURN_NONE;
}

typedef struct {
	const char *prefix;
	sh_py_names l;
} names_job;

int sh_py_names_add(const shoal_entry *e, void *ctx)
{
	sh_py_names *j = ctx;
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 64;
		sh_py_entry *ne = realloc(j->e, cap * sizeof(*ne));
		if (!ne)
			goto nomem;
		j->e = ne;
		j->cap = cap;
	}
	sh_py_entry *c = &j->e[j->n];
	c->name = strdup(e->name);
	c->type = strdup(e->type);
	c->id = e->id;
	c->bytes = e->bytes;
	if (!c->name || !c->type) {
		free(c->name);
		free(c->type);
		goto nomem;
	}
	j->n++;
	return 0;
nomem:
	j->nomem = true;
	return 1; /* stops the walk */
}

static int do_names(ShClient *c, void *arg)
{
	names_job *j = arg;
	int rc = shoal_list(c->c, j->prefix, sh_py_names_add, &j->l);
	return rc == 1 ? 0 : rc;
}

PyObject *sh_py_names_list(sh_py_names *j, bool ok)
{
	PyObject *res = NULL;
	if (ok) {
		if (j->nomem)
			PyErr_NoMemory();
		else if ((res = PyList_New((Py_ssize_t)j->n)))
			for (size_t i = 0; i < j->n; i++) {
				PyObject *t = Py_BuildValue(
					"(sKsK)", j->e[i].name, (unsigned long long)j->e[i].id,
					j->e[i].type, (unsigned long long)j->e[i].bytes);
				if (!t) {
					Py_CLEAR(res);
					break;
				}
				PyList_SET_ITEM(res, (Py_ssize_t)i, t);
			}
	}
	for (size_t i = 0; i < j->n; i++) {
		free(j->e[i].name);
		free(j->e[i].type);
	}
	free(j->e);
	return res;
}

static PyObject *client_names(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"prefix", "timeout", NULL};
	PyObject *prefix = NULL, *timeout = NULL;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$O:names", kwlist, &prefix, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	names_job j = {.prefix = ""};
	if (prefix && !(j.prefix = sh_py_cstr(prefix, "prefix")))
		return NULL;
	return sh_py_names_list(&j.l, call(self, do_names, &j, tmo) == 0);
}

static int do_stat(ShClient *c, void *arg)
{
	return shoal_store_stat_get(c->c, arg);
}

static PyObject *client_stat(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout", NULL};
	PyObject *timeout = NULL;
	int64_t tmo;
	shoal_store_stat st;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:stat", kwlist, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0 || call(self, do_stat, &st, tmo) != 0)
		return NULL;
	PyObject *d = Py_BuildValue(
		"{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKssss}", "capacity",
		(unsigned long long)st.capacity, "used", (unsigned long long)st.used, "objects",
		(unsigned long long)st.objects, "names", (unsigned long long)st.names, "clients",
		(unsigned long long)st.clients, "pending_frees",
		(unsigned long long)st.pending_frees, "sent", (unsigned long long)st.sent,
		"sent_bytes", (unsigned long long)st.sent_bytes, "fetched",
		(unsigned long long)st.fetched, "fetched_bytes",
		(unsigned long long)st.fetched_bytes, "migrating", (unsigned long long)st.migrating,
		"peers", (unsigned long long)st.peers, "registry", (unsigned long long)st.registry,
		"incoming_bytes", (unsigned long long)st.incoming_bytes, "incoming_total",
		(unsigned long long)st.incoming_total, "incoming_rate",
		(unsigned long long)st.incoming_rate, "spare_bytes",
		(unsigned long long)st.spare_bytes, "pages", shoal_pages_name(st.pages),
		"pages_why", st.pages_why);
	const struct {
		const char *k;
		uint64_t v;
	} spill[] = {{"spill_objects", st.spill_objects},	{"spill_bytes", st.spill_bytes},
		     {"spill_file_bytes", st.spill_file_bytes}, {"spilled", st.spilled},
		     {"spilled_bytes", st.spilled_bytes},	{"restored", st.restored},
		     {"restored_bytes", st.restored_bytes},	{"spill_rate", st.spill_rate},
		     {"restore_rate", st.restore_rate}};
	for (size_t i = 0; d && i < sizeof(spill) / sizeof(spill[0]); i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(spill[i].v);
		if (!v || PyDict_SetItemString(d, spill[i].k, v) != 0) {
			Py_XDECREF(v);
			Py_CLEAR(d);
			break;
		}
		Py_DECREF(v);
	}
	return d;
}

static int do_claim(ShClient *c, void *arg)
{
	return shoal_claim(c->c, arg);
}

static PyObject *client_claim(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout", NULL};
	PyObject *timeout = NULL;
	int64_t tmo;
	uint64_t token = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:claim", kwlist, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0 || call(self, do_claim, &token, tmo) != 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(token);
}

typedef struct {
	const char *path, *name;
	unsigned flags;
	shoal_id id;
} st_job;

static int do_import(ShClient *c, void *arg)
{
	st_job *j = arg;
	return shoal_import_safetensors(c->c, j->path, j->name, j->flags, &j->id);
}

static PyObject *client_import_safetensors(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"path", "name", "persist", "replace", "timeout", NULL};
	PyObject *path, *name = Py_None, *p = NULL, *timeout = NULL;
	int persist = 1, replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Opp$O:import_safetensors", kwlist, &path,
					 &name, &persist, &replace, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	st_job j = {.flags = sh_py_flags_of(persist, replace)};
	if ((name != Py_None && !(j.name = sh_py_opt_name(name))) || sh_py_fspath(path, &p) != 0)
		return NULL;
	j.path = PyBytes_AS_STRING(p);
	int rc = call(self, do_import, &j, tmo);
	Py_DECREF(p);
	return rc ? NULL : PyLong_FromUnsignedLongLong(j.id);
}

static int do_export(ShClient *c, void *arg)
{
	st_job *j = arg;
	return shoal_export_safetensors(c->c, j->name, j->path);
}

static PyObject *client_export_safetensors(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "path", "timeout", NULL};
	PyObject *name, *path, *p = NULL, *timeout = NULL;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$O:export_safetensors", kwlist, &name, &path,
					 &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	st_job j = {0};
	if (!(j.name = sh_py_cstr(name, "name")) || sh_py_fspath(path, &p) != 0)
		return NULL;
	j.path = PyBytes_AS_STRING(p);
	int rc = call(self, do_export, &j, tmo);
	Py_DECREF(p);
	if (rc)
		return NULL;
	Py_RETURN_NONE;
}

typedef struct mig_job {
	shoal_id id, out;
	const char *name;
	shoal_migrate_opts o;
	PyObject *progress;		/* a callable(received, total), or NULL */
	PyObject *etype, *evalue, *etb; /* what it raised first */
} mig_job;

/* Calls the Python progress callback from the migrating thread, which let
 * go of the GIL: it takes it for the call. What it raises ends nothing
 * here (the copy goes on); the first exception is raised by migrate. */
static void mig_progress(void *arg, uint64_t received, uint64_t total)
{
	mig_job *j = arg;
	PyGILState_STATE g = PyGILState_Ensure();
	if (!j->etype) {
		PyObject *r = PyObject_CallFunction(j->progress, "KK", (unsigned long long)received,
						    (unsigned long long)total);
		if (r)
			Py_DECREF(r);
		else
			PyErr_Fetch(&j->etype, &j->evalue, &j->etb);
	}
	PyGILState_Release(g);
}

static int do_migrate(ShClient *c, void *arg)
{
	mig_job *j = arg;
	return shoal_migrate(c->c, j->name, j->id, &j->o, &j->out);
}

static PyObject *client_migrate(ShClient *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "source", "streams", "progress", "timeout", NULL};
	PyObject *key, *source, *timeout = NULL, *progress = Py_None;
	unsigned int streams = 0;
	int64_t tmo;
	mig_job j = {0};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|I$OO:migrate", kwlist, &key, &source,
					 &streams, &progress, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0 || sh_py_parse_key(key, &j.id, &j.name) != 0 ||
	    !(j.o.from = sh_py_cstr(source, "source")))
		return NULL;
	if (streams > 16) {
		PyErr_Format(PyExc_ValueError, "streams=%u: expected 0 (the store's choice) to 16",
			     streams);
		return NULL;
	}
	j.o.streams = streams;
	if (progress != Py_None) {
		if (!PyCallable_Check(progress)) {
			PyErr_Format(PyExc_TypeError,
				     "progress: expected a callable(received, total), got %s",
				     Py_TYPE(progress)->tp_name);
			return NULL;
		}
		j.progress = progress;
		j.o.progress = mig_progress;
		j.o.progress_arg = &j;
	}
	int rc = call(self, do_migrate, &j, tmo);
	if (j.etype) {
		/* the callback's exception, over the copy's own outcome */
		if (rc)
			PyErr_Clear();
		PyErr_Restore(j.etype, j.evalue, j.etb);
		return NULL;
	}
	if (rc != 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(j.out);
}

static PyObject *client_repr(ShClient *self)
{
	return PyUnicode_FromFormat("<shoal._shoal.Client %R%s>", self->socket,
				    __atomic_load_n(&self->closed, __ATOMIC_RELAXED) ? " closed"
										     : "");
}

#define KW (PyCFunction)(void (*)(void))

static PyMethodDef client_methods[] = {
	{"put_bytes", KW client_put_bytes, METH_VARARGS | METH_KEYWORDS,
	 "put_bytes(data, name=None, persist=False, replace=False, *, timeout=) -> int\n\n"
	 "Stores the bytes of a C-contiguous buffer as a 'bytes' object; returns its id."},
	{"put_tensor", KW client_put_tensor, METH_VARARGS | METH_KEYWORDS,
	 "put_tensor(data, dtype, shape, name=None, persist=False, replace=False, *, timeout=) "
	 "-> int\n\n"
	 "Stores a tensor: data holds exactly prod(shape) * itemsize bytes, copied once."},
	{"put_tensor_dict", KW client_put_tensor_dict, METH_VARARGS | METH_KEYWORDS,
	 "put_tensor_dict(items, metadata=None, name=None, persist=False, replace=False, *, "
	 "timeout=) -> int\n\n"
	 "Stores a tensor_dict from [(name, data, dtype, shape), ...] and a dict[str, str]."},
	{"get", KW client_get, METH_FASTCALL | METH_KEYWORDS,
	 "get(key, *, timeout=) -> Object\n\nMaps the object with this id (int) or name (str)."},
	{"get_local", KW client_get_local, METH_FASTCALL | METH_KEYWORDS,
	 "get_local(key, *, timeout=) -> Object\n\nThe same, of this store's objects only: one "
	 "elsewhere in the cluster is not fetched (NotFound says where it is)."},
	{"name", KW client_name, METH_VARARGS | METH_KEYWORDS,
	 "name(id, name, replace=False, *, timeout=)\n\nBinds name to the object id (one name "
	 "an object); replace moves a taken name, whose object stays."},
	{"unname", KW client_unname, METH_VARARGS | METH_KEYWORDS,
	 "unname(name, *, timeout=)\n\nLets go of name; its object stays."},
	{"migrate", KW client_migrate, METH_VARARGS | METH_KEYWORDS,
	 "migrate(key, source, streams=0, *, progress=None, timeout=None): copies the object "
	 "of another host's store at source (HOST:PORT) into this one; its id here (the "
	 "same). progress(received, total) is called about every 100 ms while bytes come."},
	{"delete", KW client_delete, METH_FASTCALL | METH_KEYWORDS,
	 "delete(key, *, timeout=)\n\nDeletes the object with this id or name; readers keep "
	 "reading."},
	{"persist", KW client_persist, METH_FASTCALL | METH_KEYWORDS,
	 "persist(id, *, timeout=)\n\nMakes the object outlive this connection."},
	{"names", KW client_names, METH_VARARGS | METH_KEYWORDS,
	 "names(prefix='', *, timeout=) -> list[tuple[str, int, str, int]]\n\n(name, id, type, "
	 "bytes) of each "
	 "bound name starting with prefix, in name order."},
	{"stat", KW client_stat, METH_VARARGS | METH_KEYWORDS,
	 "stat(*, timeout=) -> dict[str, int]\n\nThe store's counters."},
	{"claim", KW client_claim, METH_VARARGS | METH_KEYWORDS,
	 "claim(*, timeout=) -> int\n\nThis connection's owner token (the same every time): "
	 "what a strict extension is granted to read (the objects this connection holds)."},
	{"import_safetensors", KW client_import_safetensors, METH_VARARGS | METH_KEYWORDS,
	 "import_safetensors(path, name=None, persist=True, replace=False, *, timeout=) -> int"},
	{"export_safetensors", KW client_export_safetensors, METH_VARARGS | METH_KEYWORDS,
	 "export_safetensors(name, path, *, timeout=)"},
	{"close", (PyCFunction)client_close, METH_NOARGS,
	 "close()\n\nNo more calls; the connection goes when its last Object does."},
	{"__enter__", client_enter, METH_NOARGS, NULL},
	{"__exit__", client_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
	{"closed", (getter)client_closed, NULL, "True after close() (or in a forked child).", NULL},
	{"socket", (getter)client_socket, NULL, "The store's socket path.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShClient_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Client",
	.tp_basicsize = sizeof(ShClient),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "Client(socket, timeout=30.0)\n\nA connection to a shoal store. Every call "
		  "blocks at most timeout seconds (None: no bound), or its own timeout= when "
		  "given; a call that times out, or that Ctrl-C interrupts, closes the "
		  "connection (the store's reply may still come): connect again.",
	.tp_new = client_new,
	.tp_dealloc = (destructor)client_dealloc,
	.tp_repr = (reprfunc)client_repr,
	.tp_methods = client_methods,
	.tp_getset = client_getset,
};

/* ---- Store ---- */

typedef struct {
	PyObject_HEAD shoal_store *s;
	unsigned long gen;
	PyObject *socket;
} ShStore;

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"size", "socket", "huge_pages", "reserve", NULL};
	unsigned long long size;
	PyObject *sock = Py_None, *path = NULL;
	int huge = 0, reserve = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "K|O$pp:Store", kwlist, &size, &sock, &huge,
					 &reserve))
		return NULL;
	if (size == 0 || size > SIZE_MAX / 2)
		return sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "size is %llu: expected > 0",
				    size);
	if (sock != Py_None && sh_py_fspath(sock, &path) != 0)
		return NULL;
	pthread_once(&atfork_once, register_atfork);
	ShStore *self = (ShStore *)type->tp_alloc(type, 0);
	if (!self) {
		Py_XDECREF(path);
		return NULL;
	}
	self->gen = fork_gen;
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.size = (size_t)size;
	o.socket_path = path ? PyBytes_AS_STRING(path) : NULL;
	o.huge_pages = huge;
	o.reserve = reserve;
	int rc;
	shoal_store *s = NULL;
	PyThreadState *ts_ = PyEval_SaveThread();
	rc = shoal_store_open_embedded(&s, &o);
	PyEval_RestoreThread(ts_);
	Py_XDECREF(path);
	if (rc != 0) {
		Py_DECREF(self);
		return sh_py_raisef(NULL, rc, "cannot start a store: %s", sh_py_strerror(rc));
	}
	self->s = s;
	if (!(self->socket = PyUnicode_DecodeFSDefault(shoal_store_socket(s)))) {
		Py_DECREF(self);
		return NULL;
	}
	return (PyObject *)self;
}

static void store_stop(ShStore *self)
{
	shoal_store *s = self->s;
	self->s = NULL;
	if (!s || self->gen != fork_gen)
		return; /* the parent's store: its thread is not in this process */
	PyThreadState *ts_ = PyEval_SaveThread();
	shoal_store_close(s);
	PyEval_RestoreThread(ts_);
}

static void store_dealloc(ShStore *self)
{
	store_stop(self);
	Py_CLEAR(self->socket);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *store_close(ShStore *self, PyObject *unused)
{
	store_stop(self);
	Py_RETURN_NONE;
}

static PyObject *store_enter(PyObject *self, PyObject *unused)
{
	return Py_NewRef(self);
}

static PyObject *store_exit(ShStore *self, PyObject *args)
{
	store_stop(self);
	Py_RETURN_FALSE;
}

static PyObject *store_socket(ShStore *self, void *unused)
{
	return Py_NewRef(self->socket);
}

static PyObject *store_closed(ShStore *self, void *unused)
{
	return PyBool_FromLong(self->s == NULL);
}

static PyObject *store_pages(ShStore *self, void *why)
{
	if (!self->s)
		return sh_py_raisef(ShClosed, SHOAL_ECLOSED, "the store is closed");
	const char *w;
	shoal_pages k = shoal_store_pages(self->s, &w);
	return PyUnicode_FromString(why ? w : shoal_pages_name(k));
}

static PyMethodDef store_methods[] = {
	{"close", (PyCFunction)store_close, METH_NOARGS,
	 "close()\n\nStops serving: clients see Closed, objects are freed, the socket goes."},
	{"__enter__", store_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)store_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef store_getset[] = {
	{"socket", (getter)store_socket, NULL, "The socket clients connect to.", NULL},
	{"closed", (getter)store_closed, NULL, "True after close().", NULL},
	{"pages", (getter)store_pages, NULL,
	 "What objects of 2 MiB and more live on: \"4k\", \"thp\" or \"hugetlb\".", NULL},
	{"pages_why", (getter)store_pages, NULL, "Why, and how to enable better pages.", (void *)1},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShStore_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Store",
	.tp_basicsize = sizeof(ShStore),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "Store(size, socket=None, *, huge_pages=False, reserve=False)\n\nA store "
		  "served by a thread of this process (size: bytes of all blobs; socket: None "
		  "for a fresh path; huge_pages, reserve: shoald's --huge-pages, --reserve).",
	.tp_new = store_new,
	.tp_dealloc = (destructor)store_dealloc,
	.tp_methods = store_methods,
	.tp_getset = store_getset,
};

/* shoal._shoal: Remote, a client of a store of another host over TCP (the
 * C library's shoal_remote: its peer port, the cluster's secret). Its gets
 * are Objects as a Client's are, whose bytes were received into this
 * process's memory (no Client behind them); its puts take the same
 * arguments as a Client's. One call at a time (a mutex, taken with the
 * GIL released), each bounded by its deadline. */
#include "module.h"

#include <shoal/remote.h>

#include <string.h>
#include <unistd.h>

typedef struct {
	PyObject_HEAD shoal_remote *r; /* NULL once closed */
	pthread_mutex_t mu;	       /* guards r and every call on it */
	pid_t pid;		       /* the process that connected: its TLS state is its own */
	int64_t timeout_ns;	       /* a call's bound by default; SHOAL_FOREVER: none */
	PyObject *address;	       /* str */
} ShRemote;

typedef int (*remote_fn)(shoal_remote *r, void *arg, int64_t deadline);

static int64_t deadline_of(int64_t ns)
{
	return ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(ns);
}

/* Runs fn under the mutex with the GIL released, until the call's
 * deadline (timeout_ns, or the client's); raises on failure. */
static int rcall(ShRemote *self, remote_fn fn, void *arg, int64_t timeout_ns)
{
	if (self->pid != getpid()) {
		sh_py_raisef(ShClosed, SHOAL_ECLOSED,
			     "this remote client was connected by process %ld before a fork: "
			     "connect again in the child",
			     (long)self->pid);
		return -1;
	}
	int64_t deadline =
		deadline_of(timeout_ns == SH_PY_CONN_TIMEOUT ? self->timeout_ns : timeout_ns);
	char err[700] = "";
	int rc;
	PyThreadState *ts = PyEval_SaveThread();
	pthread_mutex_lock(&self->mu);
	if (!self->r) {
		rc = SHOAL_ECLOSED;
		snprintf(err, sizeof(err), "the remote client is closed");
	} else if ((rc = fn(self->r, arg, deadline)) != 0) {
		snprintf(err, sizeof(err), "%s", shoal_remote_error(self->r));
	}
	pthread_mutex_unlock(&self->mu);
	PyEval_RestoreThread(ts);
	if (rc) {
		sh_py_raise(rc, err);
		return -1;
	}
	return 0;
}

typedef struct {
	const char *addr;
	int64_t deadline;
	shoal_remote *r;
	char why[600];
} connect_job;

static PyObject *remote_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"address", "timeout", NULL};
	PyObject *address, *timeout = NULL;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O:Remote", kwlist, &address, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	if (tmo == SH_PY_CONN_TIMEOUT)
		tmo = 30 * 1000000000LL;
	connect_job j = {.deadline = deadline_of(tmo)};
	if (!(j.addr = sh_py_cstr(address, "address")))
		return NULL;
	ShRemote *self = (ShRemote *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	pthread_mutex_init(&self->mu, NULL);
	self->pid = getpid();
	self->timeout_ns = tmo;
	self->address = Py_NewRef(address);
	int rc;
	Py_BEGIN_ALLOW_THREADS rc =
		shoal_remote_connect(&j.r, j.addr, j.deadline, j.why, sizeof(j.why));
	Py_END_ALLOW_THREADS if (rc)
	{
		Py_DECREF(self);
		return sh_py_raise(rc, j.why);
	}
	self->r = j.r;
	return (PyObject *)self;
}

static void remote_dealloc(ShRemote *self)
{
	/* a child after a fork leaves the parent's link alone */
	if (self->r && self->pid == getpid())
		shoal_remote_close(self->r);
	pthread_mutex_destroy(&self->mu);
	Py_CLEAR(self->address);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *remote_close(ShRemote *self, PyObject *unused)
{
	sh_py_lock(&self->mu);
	shoal_remote *r = self->r;
	self->r = NULL;
	pthread_mutex_unlock(&self->mu);
	if (r && self->pid == getpid()) {
		Py_BEGIN_ALLOW_THREADS shoal_remote_close(r);
		Py_END_ALLOW_THREADS
	}
	Py_RETURN_NONE;
}

/* ---- get ---- */

typedef struct {
	shoal_id id;
	const char *name;
	shoal_object *o;
} get_job;

static int do_get(shoal_remote *r, void *arg, int64_t deadline)
{
	get_job *j = arg;
	return shoal_remote_get(r, j->name, j->id, deadline, &j->o);
}

static PyObject *remote_get(ShRemote *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "timeout", NULL};
	PyObject *key, *timeout = NULL;
	int64_t tmo;
	get_job j = {0};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$O:get", kwlist, &key, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0 || sh_py_parse_key(key, &j.id, &j.name) != 0)
		return NULL;
	/* made first: once the object is got nothing may fail */
	ShObject *o = sh_py_object_new(NULL);
	if (!o)
		return NULL;
	if (rcall(self, do_get, &j, tmo) != 0) {
		Py_DECREF(o);
		return NULL;
	}
	o->o = j.o;
	o->id = shoal_object_id(j.o);
	o->nbytes = shoal_object_bytes(j.o);
	return (PyObject *)o;
}

/* ---- put ---- */

typedef struct {
	const char *name;
	unsigned flags;
	const void *data;
	size_t size;
	shoal_tensor t;
	const char **keys;
	shoal_tensor *ts;
	size_t n;
	const char **meta;
	size_t nmeta;
	shoal_id id;
} put_job;

static int do_put_bytes(shoal_remote *r, void *arg, int64_t deadline)
{
	put_job *j = arg;
	return shoal_remote_put_bytes(r, j->name, j->data, j->size, j->flags, deadline, &j->id);
}

static int do_put_tensor(shoal_remote *r, void *arg, int64_t deadline)
{
	put_job *j = arg;
	return shoal_remote_put_tensor(r, j->name, &j->t, j->flags, deadline, &j->id);
}

static int do_put_dict(shoal_remote *r, void *arg, int64_t deadline)
{
	put_job *j = arg;
	return shoal_remote_put_tensor_dict(r, j->name, j->keys, j->ts, j->n, j->meta, j->nmeta,
					    j->flags, deadline, &j->id);
}

static PyObject *remote_put_bytes(ShRemote *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "name", "persist", "replace", "timeout", NULL};
	PyObject *data, *name = Py_None, *timeout = NULL;
	int persist = 0, replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Opp$O:put_bytes", kwlist, &data, &name,
					 &persist, &replace, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	put_job j = {.flags = sh_py_flags_of(persist, replace)};
	if (name != Py_None && !(j.name = sh_py_opt_name(name)))
		return NULL;
	Py_buffer v;
	if (sh_py_get_buffer(data, &v, "data") != 0)
		return NULL;
	j.data = v.buf;
	j.size = (size_t)v.len;
	int rc = rcall(self, do_put_bytes, &j, tmo);
	PyBuffer_Release(&v);
	return rc ? NULL : PyLong_FromUnsignedLongLong(j.id);
}

static PyObject *remote_put_tensor(ShRemote *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data",    "dtype",   "shape",	  "name",
				 "persist", "replace", "timeout", NULL};
	PyObject *data, *dtype, *shape, *name = Py_None, *timeout = NULL;
	int persist = 0, replace = 0;
	int64_t tmo;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|Opp$O:put_tensor", kwlist, &data, &dtype,
					 &shape, &name, &persist, &replace, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0)
		return NULL;
	put_job j = {.flags = sh_py_flags_of(persist, replace)};
	size_t need;
	if ((name != Py_None && !(j.name = sh_py_opt_name(name))) ||
	    sh_py_parse_dtype(dtype, &j.t.dtype) != 0 ||
	    sh_py_parse_shape(shape, j.t.dtype, j.t.shape, &j.t.ndim, &need) != 0)
		return NULL;
	Py_buffer v;
	if (sh_py_get_buffer(data, &v, "data") != 0)
		return NULL;
	if ((size_t)v.len != need) {
		PyBuffer_Release(&v);
		return sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
				    "data has %zd bytes; a %s tensor of this shape needs %zu",
				    v.len, shoal_dtype_name(j.t.dtype), need);
	}
	j.t.data = v.buf;
	j.t.nbytes = need;
	int rc = rcall(self, do_put_tensor, &j, tmo);
	PyBuffer_Release(&v);
	return rc ? NULL : PyLong_FromUnsignedLongLong(j.id);
}

static PyObject *remote_put_tensor_dict(ShRemote *self, PyObject *args, PyObject *kw)
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
	put_job j = {.flags = sh_py_flags_of(persist, replace)};
	if (name != Py_None && !(j.name = sh_py_opt_name(name)))
		return NULL;
	sh_py_items it;
	if (sh_py_items_parse(items, metadata, &it) != 0)
		return NULL;
	PyObject *res = NULL;
	j.n = it.n;
	j.nmeta = it.nmeta;
	j.keys = PyMem_Calloc(it.n ? it.n : 1, sizeof(char *));
	j.ts = PyMem_Calloc(it.n ? it.n : 1, sizeof(shoal_tensor));
	j.meta = PyMem_Calloc(it.nmeta ? 2 * it.nmeta : 1, sizeof(char *));
	if (!j.keys || !j.ts || !j.meta) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < it.n; i++) {
		const sh_py_item *t = &it.items[i];
		j.keys[i] = t->name;
		j.ts[i] = (shoal_tensor){.dtype = t->dt,
					 .ndim = t->ndim,
					 .data = t->v.buf,
					 .nbytes = (size_t)t->v.len};
		memcpy(j.ts[i].shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
	}
	for (size_t i = 0; i < it.nmeta; i++) {
		/* the C call takes NUL-terminated values */
		if (strlen(it.vals[i]) != it.vlens[i]) {
			sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
				     "metadata['%.200s'] has a NUL character", it.keys[i]);
			goto out;
		}
		j.meta[2 * i] = it.keys[i];
		j.meta[2 * i + 1] = it.vals[i];
	}
	if (rcall(self, do_put_dict, &j, tmo) == 0)
		res = PyLong_FromUnsignedLongLong(j.id);
out:
	PyMem_Free(j.keys);
	PyMem_Free(j.ts);
	PyMem_Free(j.meta);
	sh_py_items_free(&it);
	return res;
}

/* ---- delete, names ---- */

static int do_delete(shoal_remote *r, void *arg, int64_t deadline)
{
	get_job *j = arg;
	return shoal_remote_delete(r, j->name, j->id, deadline);
}

static PyObject *remote_delete(ShRemote *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "timeout", NULL};
	PyObject *key, *timeout = NULL;
	int64_t tmo;
	get_job j = {0};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$O:delete", kwlist, &key, &timeout) ||
	    sh_py_parse_timeout(timeout, &tmo) != 0 || sh_py_parse_key(key, &j.id, &j.name) != 0 ||
	    rcall(self, do_delete, &j, tmo) != 0)
		return NULL;
	Py_RETURN_NONE;
}

typedef struct {
	const char *prefix;
	sh_py_names l;
} names_job;

static int do_names(shoal_remote *r, void *arg, int64_t deadline)
{
	names_job *j = arg;
	int rc = shoal_remote_list(r, j->prefix, sh_py_names_add, &j->l, deadline);
	return rc == 1 ? 0 : rc;
}

static PyObject *remote_names(ShRemote *self, PyObject *args, PyObject *kw)
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
	return sh_py_names_list(&j.l, rcall(self, do_names, &j, tmo) == 0);
}

static PyObject *remote_closed(ShRemote *self, void *unused)
{
	return PyBool_FromLong(self->r == NULL);
}

static PyObject *remote_address(ShRemote *self, void *unused)
{
	return Py_NewRef(self->address);
}

static PyObject *remote_repr(ShRemote *self)
{
	return PyUnicode_FromFormat("<shoal._shoal.Remote %U%s>", self->address,
				    self->r ? "" : " closed");
}

#define KW (PyCFunction)(void (*)(void))

static PyMethodDef remote_methods[] = {
	{"get", KW remote_get, METH_VARARGS | METH_KEYWORDS,
	 "get(key, *, timeout) -> Object: its bytes received into this process"},
	{"put_bytes", KW remote_put_bytes, METH_VARARGS | METH_KEYWORDS,
	 "put_bytes(data, name=None, persist=False, replace=False, *, timeout) -> id"},
	{"put_tensor", KW remote_put_tensor, METH_VARARGS | METH_KEYWORDS,
	 "put_tensor(data, dtype, shape, name=None, persist=False, replace=False, *, timeout) "
	 "-> id"},
	{"put_tensor_dict", KW remote_put_tensor_dict, METH_VARARGS | METH_KEYWORDS,
	 "put_tensor_dict(items, metadata=None, name=None, persist=False, replace=False, *, "
	 "timeout) -> id"},
	{"delete", KW remote_delete, METH_VARARGS | METH_KEYWORDS, "delete(key, *, timeout)"},
	{"names", KW remote_names, METH_VARARGS | METH_KEYWORDS,
	 "names(prefix='', *, timeout) -> [(name, id, type, bytes)]"},
	{"close", (PyCFunction)remote_close, METH_NOARGS,
	 "closes the link: what it put without persist goes"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef remote_getset[] = {
	{"closed", (getter)remote_closed, NULL, "whether close() was called", NULL},
	{"address", (getter)remote_address, NULL, "the store's HOST:PORT", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShRemote_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Remote",
	.tp_basicsize = sizeof(ShRemote),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Remote(address, timeout=30.0): a client of the store whose peer port is "
		  "address (HOST:PORT), proving the cluster's secret",
	.tp_new = remote_new,
	.tp_dealloc = (destructor)remote_dealloc,
	.tp_methods = remote_methods,
	.tp_getset = remote_getset,
	.tp_repr = (reprfunc)remote_repr,
};

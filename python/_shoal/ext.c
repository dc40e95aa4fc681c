/* shoal._shoal: the host side of isolated extensions (shoal.isolate): an
 * Extension is a shoal_ext whose runner is a python3 process (child.c), called
 * with Python values (value.c) with the GIL released while the call runs;
 * host services are Python callables the extensions call back, on the
 * thread that waits for the call that led to them. */
#include "module.h"

#include <shoal/ext.h>

#include <stdlib.h>
#include <string.h>

typedef struct {
	PyObject_HEAD shoal_ext *e; /* NULL once stopped */
	shoal_vbuf *in, *out;	    /* a call's arguments and result, reused */
	/* One Python caller at a time (nested calls of the same thread come
	 * back in): the vbufs are the extension's, not a call's. */
	pthread_mutex_t mu;
} ShExt;

static int opt_str(PyObject *d, const char *key, const char **out, PyObject **keep)
{
	PyObject *v = PyDict_GetItemString(d, key);
	*out = NULL;
	if (!v || v == Py_None)
		return 0;
	PyObject *b;
	if (sh_py_fspath(v, &b) != 0)
		return -1;
	if (PyList_Append(*keep, b) != 0) {
		Py_DECREF(b);
		return -1;
	}
	Py_DECREF(b);
	*out = PyBytes_AS_STRING(b);
	return 0;
}

static int opt_u64(PyObject *d, const char *key, uint64_t *out)
{
	PyObject *v = PyDict_GetItemString(d, key);
	if (!v || v == Py_None)
		return 0;
	unsigned long long x = PyLong_AsUnsignedLongLong(v);
	if (x == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = x;
	return 0;
}

static int opt_ns(PyObject *d, const char *key, int64_t *out)
{
	PyObject *v = PyDict_GetItemString(d, key);
	if (!v || v == Py_None)
		return 0;
	double s = PyFloat_AsDouble(v);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	if (!(s > 0)) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "%s is %g: expected seconds > 0", key,
			     s);
		return -1;
	}
	*out = (int64_t)(s * 1e9);
	return 0;
}

/* A list of str (or paths) under key: a NULL-terminated array (freed with
 * PyMem_Free) of strings that keep holds. */
static int opt_strv(PyObject *d, const char *key, char ***out, PyObject *keep)
{
	PyObject *l = PyDict_GetItemString(d, key);
	*out = NULL;
	if (!l || l == Py_None)
		return 0;
	Py_ssize_t n = PyList_Size(l);
	if (n < 0)
		return -1;
	char **v = PyMem_Calloc((size_t)n + 1, sizeof(char *));
	if (!v) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *b = NULL;
		if (sh_py_fspath(PyList_GET_ITEM(l, i), &b) != 0 || PyList_Append(keep, b) != 0) {
			Py_XDECREF(b);
			PyMem_Free(v);
			return -1;
		}
		Py_DECREF(b);
		v[i] = PyBytes_AS_STRING(b);
	}
	*out = v;
	return 0;
}

static bool opt_flag(PyObject *d, const char *key)
{
	PyObject *v = PyDict_GetItemString(d, key);
	return v && PyObject_IsTrue(v) == 1;
}

/* Extension(config: dict): starts it; returns when its module is loaded. */
static PyObject *ext_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *d;
	if (!PyArg_ParseTuple(args, "O!:Extension", &PyDict_Type, &d))
		return NULL;
	shoal_ext_config c;
	shoal_ext_config_init(&c);
	PyObject *keep = PyList_New(0);
	char **env = NULL, **rargs = NULL;
	ShExt *self = NULL;
	if (!keep || opt_str(d, "path", &c.path, &keep) || opt_str(d, "name", &c.name, &keep) ||
	    opt_str(d, "runner", &c.runner, &keep) || opt_str(d, "cwd", &c.cwd, &keep) ||
	    opt_str(d, "store_socket", &c.store_socket, &keep) ||
	    opt_u64(d, "store_grant", &c.store_grant) || opt_u64(d, "mem_max", &c.mem_max) ||
	    opt_u64(d, "mem_limit", &c.mem_limit) ||
	    opt_ns(d, "call_timeout", &c.call_timeout_ns) ||
	    opt_ns(d, "start_timeout", &c.start_timeout_ns))
		goto out;
	uint64_t cpu = 0, files = 0, sandbox = 0;
	if (opt_u64(d, "cpu_limit", &cpu) || opt_u64(d, "max_files", &files) ||
	    opt_u64(d, "sandbox", &sandbox))
		goto out;
	c.cpu_limit_s = (uint32_t)cpu;
	c.max_files = (uint32_t)files;
	c.sandbox = (shoal_sandbox)sandbox;
	c.allow_network = opt_flag(d, "allow_network");
	c.restart = opt_flag(d, "restart") ? SHOAL_RESTART_ON_CRASH : SHOAL_RESTART_NEVER;
	c.log_output = opt_flag(d, "log_output");
	c.payload = opt_flag(d, "shared") ? SHOAL_PAYLOAD_SHARED : SHOAL_PAYLOAD_COPY;
	if (opt_strv(d, "env", &env, keep) || opt_strv(d, "runner_args", &rargs, keep))
		goto out;
	c.env = env;
	c.runner_args = rargs;
	self = (ShExt *)type->tp_alloc(type, 0);
	if (!self)
		goto out;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&self->mu, &ma);
	pthread_mutexattr_destroy(&ma);
	if (shoal_vbuf_create(&self->in) != 0 || shoal_vbuf_create(&self->out) != 0) {
		PyErr_NoMemory();
		Py_CLEAR(self);
		goto out;
	}
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = shoal_ext_start(&self->e, &c);
	Py_END_ALLOW_THREADS if (rc)
	{
		char msg[1200];
		snprintf(msg, sizeof(msg), "%s",
			 self->e ? shoal_ext_error(self->e) : shoal_strerror(rc));
		if (self->e) {
			Py_BEGIN_ALLOW_THREADS shoal_ext_stop(self->e);
			Py_END_ALLOW_THREADS self->e = NULL;
		}
		sh_py_raise(rc, msg);
		Py_CLEAR(self);
	}
out:
	PyMem_Free(env);
	PyMem_Free(rargs);
	Py_XDECREF(keep);
	return (PyObject *)self;
}

static void ext_stop_now(ShExt *self)
{
	shoal_ext *e = self->e;
	self->e = NULL;
	if (e) {
		Py_BEGIN_ALLOW_THREADS shoal_ext_stop(e);
		Py_END_ALLOW_THREADS
	}
}

static void ext_dealloc(ShExt *self)
{
	ext_stop_now(self);
	shoal_vbuf_free(self->in);
	shoal_vbuf_free(self->out);
	pthread_mutex_destroy(&self->mu);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Takes the extension's turn with the GIL released when it must wait. */
static void ext_lock(ShExt *self)
{
	sh_py_lock(&self->mu);
}

/* call(fn, args, timeout=None, shared=False) -> the decoded result. The
 * result's tensors are copied out: nothing of the call outlives it. */
static PyObject *ext_call(ShExt *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"fn", "args", "timeout", "shared", NULL};
	const char *fn;
	PyObject *a, *timeout = Py_None, *shared = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|OO:call", kwlist, &fn, &a, &timeout,
					 &shared))
		return NULL;
	unsigned flags = shared == Py_None	   ? 0
			 : PyObject_IsTrue(shared) ? SHOAL_CALL_SHARED
						   : SHOAL_CALL_COPY;
	int64_t deadline = 0;
	if (timeout != Py_None) {
		double t = PyFloat_AsDouble(timeout);
		if (t == -1.0 && PyErr_Occurred())
			return NULL;
		if (!(t > 0))
			return sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
					    "timeout is %g: expected seconds > 0", t);
		deadline = shoal_deadline_in((int64_t)(t * 1e9));
	}
	/* On a thread with tasklets the call's ring waits switch to the
	 * thread's other tasklets (module.h: sh_tl_blocking_begin): they take
	 * turns at the extension, the holder keeping its mutex meanwhile. */
	sh_tl_turn turn;
	if (sh_tl_turn_take(&turn, self, "Extension.call") != 0)
		return NULL;
	ext_lock(self);
	if (!self->e) {
		pthread_mutex_unlock(&self->mu);
		sh_tl_turn_give(&turn);
		return sh_py_raisef(ShClosed, SHOAL_ECLOSED, "the extension was stopped");
	}
	/* nested calls (a host service calling back in) build their own */
	shoal_vbuf *in = self->in, *out = self->out;
	bool nested = !in;
	if (nested && (shoal_vbuf_create(&in) != 0 || shoal_vbuf_create(&out) != 0)) {
		shoal_vbuf_free(in);
		pthread_mutex_unlock(&self->mu);
		sh_tl_turn_give(&turn);
		return PyErr_NoMemory();
	}
	self->in = self->out = NULL;
	PyObject *keep = PyList_New(0), *res = NULL;
	shoal_value *v = keep ? sh_py_to_value(in, a, keep) : NULL;
	if (v) {
		const shoal_value *r = NULL;
		int rc;
		shoal_ext *e = self->e;
		/* Not cancelled by a kill: an extension call given up is a
		 * killed extension process; the kill waits for its end. */
		sh_tl_blocking b;
		sh_tl_blocking_begin(&b, false);
		rc = shoal_ext_call_ex(e, fn, v, out, &r, deadline, flags);
		sh_tl_blocking_end(&b, rc);
		if (rc)
			sh_py_raise(rc, shoal_ext_error(e));
		else
			res = sh_py_from_value(r);
	}
	Py_XDECREF(keep);
	shoal_vbuf_reset(in);
	shoal_vbuf_reset(out);
	if (nested) {
		shoal_vbuf_free(in);
		shoal_vbuf_free(out);
	} else {
		self->in = in;
		self->out = out;
	}
	pthread_mutex_unlock(&self->mu);
	sh_tl_turn_give(&turn);
	return res;
}

static PyObject *ext_stop(ShExt *self, PyObject *unused)
{
	ext_lock(self);
	ext_stop_now(self);
	pthread_mutex_unlock(&self->mu);
	Py_RETURN_NONE;
}

static PyObject *ext_get_pid(ShExt *self, void *unused)
{
	return PyLong_FromLong(self->e ? (long)shoal_ext_pid(self->e) : 0);
}

static PyObject *ext_get_starts(ShExt *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->e ? shoal_ext_starts(self->e) : 0);
}

static PyObject *ext_get_running(ShExt *self, void *unused)
{
	return PyBool_FromLong(self->e != NULL);
}

static PyMethodDef ext_methods[] = {
	{"call", (PyCFunction)(void (*)(void))ext_call, METH_VARARGS | METH_KEYWORDS,
	 "call(fn, args, timeout=None, shared=None) -> object\n\nCalls fn in the extension "
	 "(blocks: until it returns, at most timeout seconds, else the config's call "
	 "timeout); shared: this call's payload mode (None: the config's)."},
	{"stop", (PyCFunction)ext_stop, METH_NOARGS,
	 "stop()\n\nStops the extension and every process it started."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef ext_getset[] = {
	{"pid", (getter)ext_get_pid, NULL, "Its process id (0 when not running).", NULL},
	{"starts", (getter)ext_get_starts, NULL, "How many times it was started.", NULL},
	{"running", (getter)ext_get_running, NULL, "False once stopped.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShExt_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Extension",
	.tp_basicsize = sizeof(ShExt),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Extension(config: dict)\n\nAn extension process (blocks: until its module "
		  "is loaded, or its start fails).",
	.tp_new = ext_new,
	.tp_dealloc = (destructor)ext_dealloc,
	.tp_methods = ext_methods,
	.tp_getset = ext_getset,
};

/* ---- host services ---- */

/* What a service's result borrows until the host sends it, which happens
 * before this thread runs another service. */
static _Thread_local PyObject *service_keep;

static int service_tramp(void *self, const shoal_value *args, shoal_vbuf *out, shoal_value **result,
			 char *msg, size_t msglen)
{
	if (_Py_IsFinalizing()) {
		snprintf(msg, msglen, "the host is exiting");
		return SHOAL_ECLOSED;
	}
	PyGILState_STATE g = PyGILState_Ensure();
	sh_tl_blocking_python(); /* the calling tasklet's frames, not the last one's */
	int rc = 0;
	Py_CLEAR(service_keep);
	PyObject *a = sh_py_from_value(args), *r = NULL;
	if (a)
		r = PyObject_CallOneArg((PyObject *)self, a);
	if (r && (service_keep = PyList_New(0)))
		*result = sh_py_to_value(out, r, service_keep);
	if (!r || !*result) {
		/* the service wraps its own exceptions: this is a failure of ours */
		PyObject *t, *v, *tb;
		PyErr_Fetch(&t, &v, &tb);
		PyObject *s = v ? PyObject_Str(v) : NULL;
		snprintf(msg, msglen, "host service: %s",
			 s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : "failed");
		Py_XDECREF(s);
		Py_XDECREF(t);
		Py_XDECREF(v);
		Py_XDECREF(tb);
		PyErr_Clear();
		rc = SHOAL_EINVAL;
	}
	Py_XDECREF(a);
	Py_XDECREF(r);
	PyGILState_Release(g);
	return rc;
}

/* The callables registered, kept alive while registered. */
static PyObject *services;

PyObject *sh_py_register_service(PyObject *mod, PyObject *args)
{
	const char *method;
	PyObject *fn;
	if (!PyArg_ParseTuple(args, "sO:register_service", &method, &fn))
		return NULL;
	if (!services && !(services = PyDict_New()))
		return NULL;
	if (PyDict_SetItemString(services, method, fn) != 0)
		return NULL;
	shoal_service_unregister(method); /* a re-registration replaces */
	int rc = shoal_service_register(method, service_tramp, fn);
	if (rc) {
		PyDict_DelItemString(services, method);
		return sh_py_raise(rc, "registering a host service");
	}
	Py_RETURN_NONE;
}

PyObject *sh_py_unregister_service(PyObject *mod, PyObject *args)
{
	const char *method;
	if (!PyArg_ParseTuple(args, "s:unregister_service", &method))
		return NULL;
	shoal_service_unregister(method);
	if (services && PyDict_GetItemString(services, method))
		PyDict_DelItemString(services, method);
	Py_RETURN_NONE;
}

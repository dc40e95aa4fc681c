/* shoal._shoal: module init (the types of every part, the constants), the
 * exception classes and the helpers the other files raise them with
 * (sh_py_raise: a SHOAL_E code to its class) and check a str or a path
 * with (sh_py_cstr, sh_py_fspath), and the table of module-level
 * functions, whose bodies are with their parts (value.c, ext.c, child.c)
 * but default_socket's. The exceptions derive both from shoal's Error and
 * from the builtin a Python user already catches: NotFound a KeyError,
 * NameTaken and InvalidInput ValueErrors, StoreFull a MemoryError, Timeout
 * a TimeoutError, Closed a ConnectionError. */
#include "module.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PyObject *ShError, *ShNotFound, *ShNameTaken, *ShStoreFull, *ShTimeout, *ShInvalidInput, *ShClosed;

static PyObject *class_for(int rc)
{
	switch (rc) {
	case SHOAL_ENOENT:
		return ShNotFound;
	case SHOAL_EEXIST:
		return ShNameTaken;
	case SHOAL_ENOSPC:
	case SHOAL_ENOMEM:
		return ShStoreFull;
	case SHOAL_ETIMEDOUT:
		return ShTimeout;
	case SHOAL_EINVAL:
	case SHOAL_EBADMSG:
	case SHOAL_EMSGSIZE:
	case SHOAL_ENOTSUP:
		return ShInvalidInput;
	case SHOAL_ECLOSED:
	case SHOAL_EPIPE:
	case SHOAL_ECONNRESET: /* the store went away mid-call */
		return ShClosed;
	default:
		return ShError;
	}
}

static PyObject *raise_in(PyObject *cls, int rc, const char *msg)
{
	PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
	if (!m)
		return NULL;
	PyObject *e = PyObject_CallOneArg(cls, m);
	if (e) {
		PyObject *code = PyLong_FromLong(rc);
		if (!code || PyObject_SetAttrString(e, "code", code) != 0 ||
		    PyObject_SetAttrString(e, "message", m) != 0)
			Py_CLEAR(e);
		Py_XDECREF(code);
	}
	Py_DECREF(m);
	if (e) {
		PyErr_SetObject(cls, e);
		Py_DECREF(e);
	}
	return NULL;
}

const char *sh_py_strerror(int rc)
{
	const char *s = shoal_strerror(rc);
	/* shoal names its own codes; the rest are errnos */
	return strstr(s, "SHOAL_E?") && rc < 0 && rc > -4096 ? strerror(-rc) : s;
}

PyObject *sh_py_raise(int rc, const char *msg)
{
	return raise_in(class_for(rc), rc, msg && *msg ? msg : sh_py_strerror(rc));
}

PyObject *sh_py_raisef(PyObject *cls, int rc, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return raise_in(cls ? cls : class_for(rc), rc, buf);
}

int sh_py_fspath(PyObject *in, PyObject **out)
{
	*out = NULL;
	if (!PyUnicode_FSConverter(in, out)) {
		/* a str with a NUL: say it as every other invalid input */
		if (PyErr_ExceptionMatches(PyExc_ValueError)) {
			PyErr_Clear();
			sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "a path with a NUL byte");
		}
		return -1;
	}
	if (strlen(PyBytes_AS_STRING(*out)) != (size_t)PyBytes_GET_SIZE(*out)) {
		Py_CLEAR(*out);
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "a path with a NUL byte");
		return -1;
	}
	return 0;
}

const char *sh_py_cstr(PyObject *s, const char *what)
{
	if (!PyUnicode_Check(s)) {
		PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what,
			     Py_TYPE(s)->tp_name);
		return NULL;
	}
	Py_ssize_t n;
	const char *p = PyUnicode_AsUTF8AndSize(s, &n);
	if (p && strlen(p) != (size_t)n) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "%s contains a NUL byte", what);
		return NULL;
	}
	return p;
}

/* str(e) is the C message alone: KeyError's would quote it. */
static PyObject *error_str(PyObject *self, PyObject *unused)
{
	PyObject *m = PyObject_GetAttrString(self, "message");
	if (m && PyUnicode_Check(m))
		return m;
	Py_XDECREF(m);
	PyErr_Clear();
	return ((PyTypeObject *)PyExc_BaseException)->tp_str(self);
}

static PyMethodDef error_str_def = {"__str__", error_str, METH_NOARGS, NULL};

static PyObject *new_error(PyObject *mod, const char *name, PyObject *builtin, const char *doc)
{
	char full[64];
	snprintf(full, sizeof(full), "shoal._shoal.%s", name);
	PyObject *bases = builtin ? PyTuple_Pack(2, ShError, builtin) : NULL;
	if (builtin && !bases)
		return NULL;
	PyObject *cls =
		PyErr_NewExceptionWithDoc(full, doc, builtin ? bases : PyExc_Exception, NULL);
	Py_XDECREF(bases);
	if (!cls)
		return NULL;
	if (PyModule_AddObjectRef(mod, name, cls) != 0) {
		Py_DECREF(cls);
		return NULL;
	}
	return cls; /* the module keeps a reference as well: this one is ours */
}

static int add_errors(PyObject *mod)
{
	if (!(ShError = new_error(mod, "Error", NULL,
				  "A shoal call failed: code is the negative SHOAL_E* code, "
				  "message the C library's message.")))
		return -1;
	PyObject *descr = PyDescr_NewMethod((PyTypeObject *)ShError, &error_str_def);
	if (!descr)
		return -1;
	int rc = PyObject_SetAttrString(ShError, "__str__", descr);
	Py_DECREF(descr);
	if (rc != 0 || PyObject_SetAttrString(ShError, "code", Py_None) != 0 ||
	    PyObject_SetAttrString(ShError, "message", Py_None) != 0)
		return -1;
	if (!(ShNotFound = new_error(mod, "NotFound", PyExc_KeyError,
				     "No object has this id or name (SHOAL_ENOENT).")) ||
	    !(ShNameTaken = new_error(mod, "NameTaken", PyExc_ValueError,
				      "The name is bound already (SHOAL_EEXIST).")) ||
	    !(ShStoreFull = new_error(mod, "StoreFull", PyExc_MemoryError,
				      "The store has no room (SHOAL_ENOSPC, SHOAL_ENOMEM).")) ||
	    !(ShTimeout = new_error(mod, "Timeout", PyExc_TimeoutError,
				    "The store did not answer in time (SHOAL_ETIMEDOUT).")) ||
	    !(ShInvalidInput = new_error(mod, "InvalidInput", PyExc_ValueError,
					 "An argument or a file failed validation.")) ||
	    !(ShClosed = new_error(mod, "Closed", PyExc_ConnectionError,
				   "The connection or the object is closed, or was made by "
				   "another process before a fork.")))
		return -1;
	return 0;
}

static PyObject *default_socket(PyObject *mod, PyObject *unused)
{
	const char *env = getenv("SHOAL_SOCKET");
	if (env && *env)
		return PyUnicode_DecodeFSDefault(env);
	char dir[256], path[300];
	int rc = shoal_socket_dir(dir, sizeof(dir));
	if (rc != 0)
		return sh_py_raisef(ShError, rc,
				    "the default socket's directory is not safe to use (%s): set "
				    "$SHOAL_SOCKET or pass a socket",
				    shoal_strerror(rc));
	snprintf(path, sizeof(path), "%s/shoald.sock", dir);
	return PyUnicode_DecodeFSDefault(path);
}

static PyMethodDef module_methods[] = {
	{"_set_value_hooks", sh_py_set_value_hooks, METH_VARARGS,
	 "_set_value_hooks(encode, decode_tensor, decode_type)\n\nshoal.isolate's hooks for what "
	 "msgpack lacks (arrays, tensors, registered types)."},
	{"pack_value", sh_py_pack_value, METH_O,
	 "pack_value(obj) -> bytes\n\nA value shoal passes (plain Python values, tuples, sets, "
	 "arrays, registered types) as bytes to keep."},
	{"unpack_value", sh_py_unpack_value, METH_O,
	 "unpack_value(data) -> obj\n\nThe value back, checked as bytes from anyone are "
	 "(InvalidInput when they are not one)."},
	{"_roundtrip", sh_py_value_roundtrip, METH_O,
	 "_roundtrip(obj) -> obj\n\nEncodes obj as a call's value and decodes it (tests)."},
	{"register_service", sh_py_register_service, METH_VARARGS,
	 "register_service(method, fn)\n\nExposes fn(payload) -> envelope to extensions as "
	 "method."},
	{"unregister_service", sh_py_unregister_service, METH_VARARGS,
	 "unregister_service(method)"},
	{"_call_host", sh_py_call_host, METH_VARARGS,
	 "_call_host(method, payload) -> envelope\n\nIn an extension: calls a host service "
	 "(blocks: until it returns)."},
	{"_run_extension", sh_py_run_extension, METH_VARARGS,
	 "_run_extension(argv) -> int\n\nIn the process a host started for an extension: "
	 "shoal-ext's options; serves the host's calls until it closes (blocks), returns the "
	 "exit code."},
	{"_run_engine", sh_py_run_engine, METH_VARARGS,
	 "_run_engine(argv) -> int\n\npython3 -m shoal.engine: shoal-engine's options "
	 "(but --so); runs the controller's tasks until it goes (blocks), returns the exit "
	 "code."},
	{"_tasklets_alive", sh_py_tasklets_alive, METH_NOARGS,
	 "_tasklets_alive() -> list\n\nThe calling thread's tasklets that are alive, main "
	 "aside (what a Python engine kills when a task that left them ends)."},
	{"_cluster_supervise", sh_py_cluster_supervise, METH_VARARGS,
	 "_cluster_supervise(argv) -> int\n\nA cluster's supervisor (argv: the options "
	 "cluster_start gives the program it runs); blocks until the cluster is stopped, "
	 "returns the exit code."},
	{"cluster_start", (PyCFunction)(void (*)(void))sh_py_cluster_start,
	 METH_VARARGS | METH_KEYWORDS,
	 "cluster_start(engines, name=None, launcher='local', hosts=None, tcp=None, so=None, "
	 "ssh=None, python=None, pythonpath=None, scheme='leastload', timeout=0, stores=False, "
	 "store_size=None, store_args=None, supervisor=None) -> dict\n\nStarts a cluster "
	 "(shoal_cluster_start): blocks until every engine registered; what its supervisor "
	 "says of it (controller, tcp, secret_file, store, engines, asked, supervisor_pid, "
	 "text)."},
	{"cluster_status", (PyCFunction)(void (*)(void))sh_py_cluster_status,
	 METH_VARARGS | METH_KEYWORDS,
	 "cluster_status(name=None) -> dict\n\nWhat a cluster's supervisor says of it; "
	 "NotFound when none of that name runs."},
	{"cluster_add", (PyCFunction)(void (*)(void))sh_py_cluster_add,
	 METH_VARARGS | METH_KEYWORDS,
	 "cluster_add(engines, name=None, launcher='local', hosts=None, timeout=0) -> dict\n\n"
	 "More engines, through a launcher; blocks until they registered."},
	{"cluster_stop", (PyCFunction)(void (*)(void))sh_py_cluster_stop,
	 METH_VARARGS | METH_KEYWORDS,
	 "cluster_stop(name=None, timeout=0) -> None\n\nEnds every process of the cluster; "
	 "NotFound when none of that name runs."},
	{"getcurrent", sh_py_getcurrent, METH_NOARGS,
	 "getcurrent() -> tasklet\n\nThe running tasklet (the thread's main tasklet outside "
	 "tasklets)."},
	{"schedule", sh_py_schedule, METH_NOARGS,
	 "schedule()\n\nLets every other runnable tasklet run once, then continues."},
	{"sleep", sh_py_sleep, METH_O,
	 "sleep(seconds)\n\nSuspends the calling tasklet (the others run meanwhile)."},
	{"run", (PyCFunction)(void (*)(void))sh_py_run, METH_VARARGS | METH_KEYWORDS,
	 "run(timeout=None)\n\nFrom the main tasklet: runs tasklets until every one has "
	 "ended. RuntimeError naming the blocked tasklets when none can ever run again "
	 "(a deadlock), TimeoutError when the timeout passes first."},
	{"select", (PyCFunction)(void (*)(void))sh_py_select, METH_VARARGS | METH_KEYWORDS,
	 "select(cases, timeout=None) -> (index, value)\n\nGo's select over channel cases "
	 "(ch.receive_case(), ch.send_case(value), or a channel for a receive): runs one "
	 "ready case, chosen at random when several are, else waits for the first to become "
	 "ready. value is what a receive got (CLOSED from a closed, empty channel), None for "
	 "a send; a send chosen on a closed channel raises ValueError. TimeoutError when the "
	 "timeout passes first (timeout=0: none is ready now)."},
	{"wait_readable", (PyCFunction)(void (*)(void))sh_py_wait_readable,
	 METH_VARARGS | METH_KEYWORDS,
	 "wait_readable(fd, timeout=None)\n\nSuspends the calling tasklet until fd (an int or "
	 "an object with fileno()) is readable (or has an error or hang-up). TimeoutError when "
	 "the timeout passes first (timeout=0: not readable now)."},
	{"wait_writable", (PyCFunction)(void (*)(void))sh_py_wait_writable,
	 METH_VARARGS | METH_KEYWORDS,
	 "wait_writable(fd, timeout=None)\n\nAs wait_readable(), until fd is writable."},
	{"_worker_idle", sh_py_worker_idle, METH_O,
	 "_worker_idle(delta) -> int\n\nto_thread()'s pool: its idle workers, which deadlock "
	 "detection does not count as threads that could send on a channel."},
	{"default_socket", default_socket, METH_NOARGS,
	 "default_socket() -> str\n\nThe socket the shoal CLI uses: $SHOAL_SOCKET, else "
	 "shoald.sock in this user's socket directory."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "shoal._shoal",
	.m_doc = "The C layer of the shoal package: the object store client and its zero-copy "
		 "views, isolated extensions and their runner, the task farm.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__shoal(void);
PyMODINIT_FUNC PyInit__shoal(void)
{
	PyObject *m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	PyTypeObject *types[] = {&ShClient_Type, &ShStore_Type, &ShObject_Type, &ShTensor_Type,
				 &ShBlob_Type,	 &ShVal_Type,	&ShExt_Type,	&ShController_Type,
				 &ShFarm_Type,	 &ShRemote_Type};
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyModule_AddType(m, types[i]) != 0)
			goto fail;
			/* A module built with ASan loads only where the sanitizer's runtime
			 * came first: an extension's python3 must be started as this one was. */
#if defined(__SANITIZE_ADDRESS__)
	PyObject *san = Py_BuildValue("(sss)", "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS");
#else
	PyObject *san = PyTuple_New(0);
#endif
	int bad = !san || PyModule_AddObjectRef(m, "_SANITIZER_ENV", san) != 0;
	Py_XDECREF(san);
	if (bad || add_errors(m) != 0 || sh_py_tasklet_init(m) != 0 ||
	    PyModule_AddStringConstant(m, "__version__", SHOAL_VERSION_STRING) != 0 ||
	    PyModule_AddIntConstant(m, "ETIMEDOUT", SHOAL_ETIMEDOUT) != 0 ||
	    PyModule_AddIntConstant(m, "ECRASHED", SHOAL_ECRASHED) != 0 ||
	    PyModule_AddIntConstant(m, "EENGINE", SHOAL_EENGINE) != 0 ||
	    PyModule_AddIntConstant(m, "EDEPFAIL", SHOAL_EDEPFAIL) != 0 ||
	    PyModule_AddIntConstant(m, "ERAISED", SHOAL_ERAISED) != 0)
		goto fail;
	PyObject *dt = PyTuple_New(SHOAL_DT_COUNT - 1);
	if (!dt)
		goto fail;
	for (int i = 1; i < SHOAL_DT_COUNT; i++) {
		PyObject *s = PyUnicode_FromString(shoal_dtype_name((shoal_dtype)i));
		if (!s) {
			Py_DECREF(dt);
			goto fail;
		}
		PyTuple_SET_ITEM(dt, i - 1, s);
	}
	if (PyModule_AddObject(m, "DTYPES", dt) != 0) {
		Py_DECREF(dt);
		goto fail;
	}
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}

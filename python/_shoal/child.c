/* shoal-pyext.so: an extension (shoal/ext.h) that is a Python module. The
 * runner (shoal-ext) loads it like any extension, after its limits and
 * sandbox are in place; its init embeds CPython (the one shoal was built
 * with; the extension's own executable or venv gives sys.prefix and
 * site-packages), makes this library's copy of the _shoal module the
 * package's, and asks shoal.isolate's child side to load the extension
 * (SHOAL_PY_* in the environment, set by the host). One function, "call",
 * runs a method: [method, args, kwargs] in, an envelope [0, result] or
 * [1, error] out, so that an exception keeps its type name, message and
 * traceback. Built only into this library (SHOAL_PY_CHILD); the host's
 * _shoal module has none of it. */
#include "module.h"

#include <shoal/ext.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 130 /* the runner's depth, and then some */

static PyObject *dispatch;		 /* shoal.isolate._child's dispatcher */
static PyObject *envelope_for;		 /* exception -> [1, {...}] */
static _Thread_local shoal_ext_ctx *cur; /* the call this thread runs */
static _Thread_local int depth;
/* What each level's result borrows until the runner sends it (before the
 * next call at that level begins). */
static PyObject *keeps[MAX_NEST];

PyObject *sh_py_call_host(PyObject *mod, PyObject *args)
{
	const char *method;
	PyObject *payload;
	if (!PyArg_ParseTuple(args, "sO:_call_host", &method, &payload))
		return NULL;
	shoal_ext_ctx *ctx = cur;
	if (!ctx)
		return PyErr_Format(PyExc_RuntimeError,
				    "%s: a host service can be called only while the host calls "
				    "this extension, from the thread that runs the call",
				    method);
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b) != 0)
		return PyErr_NoMemory();
	PyObject *keep = PyList_New(0), *res = NULL;
	shoal_value *v = keep ? sh_py_to_value(b, payload, keep) : NULL;
	if (v) {
		const shoal_value *r = NULL;
		int rc;
		PyThreadState *ts = PyEval_SaveThread();
		rc = shoal_ext_call_host(ctx, method, v, &r);
		PyEval_RestoreThread(ts);
		if (rc)
			sh_py_raise(rc, shoal_ext_ctx_error(ctx));
		else
			res = sh_py_from_value(r);
	}
	Py_XDECREF(keep);
	shoal_vbuf_free(b);
	return res;
}

/* The envelope of the exception now set (the dispatcher makes its own;
 * this is for a result that cannot be sent). */
static PyObject *error_envelope(void)
{
	PyObject *t, *v, *tb;
	PyErr_Fetch(&t, &v, &tb);
	PyErr_NormalizeException(&t, &v, &tb);
	if (tb && v)
		PyException_SetTraceback(v, tb);
	PyObject *e = envelope_for && v ? PyObject_CallOneArg(envelope_for, v) : NULL;
	Py_XDECREF(t);
	Py_XDECREF(v);
	Py_XDECREF(tb);
	return e;
}

static int call(shoal_ext_ctx *ctx, const shoal_value *args, shoal_value **result)
{
	PyGILState_STATE g = PyGILState_Ensure();
	shoal_ext_ctx *prev = cur;
	cur = ctx;
	int d = depth++;
	int rc = 0;
	if (d >= MAX_NEST) {
		rc = shoal_ext_fail(ctx, SHOAL_ERANGE, "calls nested deeper than %d", MAX_NEST);
		goto out;
	}
	/* the last result at this level is let go once the arguments are
	 * decoded: a tensor passed again is still held, and viewed anew */
	PyObject *a = sh_py_from_value(args);
	Py_CLEAR(keeps[d]);
	if (!(keeps[d] = PyList_New(0))) {
		Py_XDECREF(a);
		rc = shoal_ext_fail(ctx, SHOAL_ENOMEM, "out of memory");
		goto out;
	}
	PyObject *r = a ? PyObject_CallOneArg(dispatch, a) : NULL;
	Py_XDECREF(a);
	if (!r)
		r = error_envelope();
	if (r && !(*result = sh_py_to_value(shoal_ext_vbuf(ctx), r, keeps[d]))) {
		Py_DECREF(r);
		r = error_envelope();
		if (r)
			*result = sh_py_to_value(shoal_ext_vbuf(ctx), r, keeps[d]);
	}
	if (!r || !*result) {
		PyErr_Clear();
		rc = shoal_ext_fail(ctx, SHOAL_EIO, "the extension's result could not be sent");
	}
	Py_XDECREF(r);
out:
	depth--;
	cur = prev;
	PyGILState_Release(g);
	return rc;
}

/* The traceback of the exception now set, as text; its last 900 bytes
 * when longer (the start's message has room for a kilobyte). */
static void failure_text(char *buf, size_t len)
{
	PyObject *t, *v, *tb;
	PyErr_Fetch(&t, &v, &tb);
	PyErr_NormalizeException(&t, &v, &tb);
	snprintf(buf, len, "the extension failed to load");
	PyObject *tbm = PyImport_ImportModule("traceback");
	PyObject *lines = tbm && t ? PyObject_CallMethod(tbm, "format_exception", "OOO", t,
							 v ? v : Py_None, tb ? tb : Py_None)
				   : NULL;
	PyObject *sep = lines ? PyUnicode_FromString("") : NULL;
	PyObject *text = sep ? PyUnicode_Join(sep, lines) : NULL;
	const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
	if (s) {
		size_t n = strlen(s), keep = len > 900 ? 900 : len - 1;
		snprintf(buf, len, "%s%s", n > keep ? "..." : "", n > keep ? s + n - keep : s);
	}
	PyErr_Clear();
	Py_XDECREF(text);
	Py_XDECREF(sep);
	Py_XDECREF(lines);
	Py_XDECREF(tbm);
	Py_XDECREF(t);
	Py_XDECREF(v);
	Py_XDECREF(tb);
}

PyMODINIT_FUNC PyInit__shoal(void);

SHOAL_API int shoal_ext_init(shoal_ext_registry *r)
{
	/* numpy's and torch's extension modules find CPython's symbols in the
	 * global scope, where a library the runner loaded privately is not */
	if (!dlopen(SHOAL_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
		return shoal_ext_init_fail(r, SHOAL_EBADMSG, "%s is not loaded: %s",
					   SHOAL_LIBPYTHON, dlerror());
	if (Py_IsInitialized())
		return shoal_ext_init_fail(r, SHOAL_EINVAL, "Python is running already");
	if (PyImport_AppendInittab("_shoal_child", PyInit__shoal) != 0)
		return shoal_ext_init_fail(r, SHOAL_ENOMEM, "out of memory");
	PyConfig config;
	PyConfig_InitPythonConfig(&config);
	config.install_signal_handlers = 0; /* the runner's own stay */
	config.parse_argv = 0;
	const char *exe = getenv("SHOAL_PY_EXECUTABLE");
	PyStatus st = exe && *exe ? PyConfig_SetBytesString(&config, &config.executable, exe)
				  : PyStatus_Ok();
	if (!PyStatus_Exception(st) && exe && *exe)
		st = PyConfig_SetBytesString(&config, &config.program_name, exe);
	if (!PyStatus_Exception(st))
		st = Py_InitializeFromConfig(&config);
	PyConfig_Clear(&config);
	if (PyStatus_Exception(st))
		return shoal_ext_init_fail(r, SHOAL_EINVAL, "starting Python: %s",
					   st.err_msg ? st.err_msg : "failed");
	char why[1000];
	int rc = 0;
	/* shoal/ itself: where the host's package is */
	const char *pkg = getenv("SHOAL_PY_PACKAGE_DIR");
	PyObject *sys_path = PySys_GetObject("path"); /* borrowed */
	PyObject *p = pkg ? PyUnicode_DecodeFSDefault(pkg) : NULL;
	PyObject *mod = NULL, *child = NULL;
	if ((pkg && (!p || PyList_Insert(sys_path, 0, p) != 0)) ||
	    !(mod = PyImport_ImportModule("_shoal_child")) ||
	    PyDict_SetItemString(PyImport_GetModuleDict(), "shoal._shoal", mod) != 0 ||
	    !(child = PyImport_ImportModule("shoal.isolate")) ||
	    !(envelope_for = PyObject_GetAttrString(child, "_envelope_for")) ||
	    !(dispatch = PyObject_CallMethod(child, "_child_start", NULL))) {
		failure_text(why, sizeof(why));
		rc = SHOAL_EINVAL;
	}
	Py_XDECREF(p);
	Py_XDECREF(mod);
	Py_XDECREF(child);
	if (rc == 0)
		rc = shoal_ext_register(r, "call", call);
	/* calls take the GIL when they run; threads of the module run between */
	PyEval_SaveThread();
	return rc ? shoal_ext_init_fail(r, rc, "%s", why) : 0;
}

/* The module's side in the python3 processes that shoal starts. An
 * isolated Python extension (shoal.isolate) is a python3 process that runs
 * shoal's extension runner (shoal-ext's own code: its command line
 * tools/lib/ext_runner.c, the runner src/rpc/ext_runner.c) with this
 * file's extension built in. The host starts it as `python3 -S -P -c BOOT
 * PKGDIR RUNNER-OPTIONS`: BOOT imports this module and calls
 * _run_extension, which applies the limits and the sandbox, then runs
 * py_init: site-packages (the venv's, from pyvenv.cfg) and the
 * extension's module are read only from there on, confined. Its one
 * function, "call", runs a method: [method, args, kwargs] in, an envelope
 * [0, result] or [1, error] out, so that an exception keeps its type name,
 * message and traceback; _call_host lets the method call a host service.
 * A python3 of its own rather than CPython embedded in shoal-ext: the
 * interpreter's pages are the host's (the same executable), so an idle
 * extension costs its heap alone, and it starts as fast.
 *
 * The same way, _run_engine is shoal-engine's code (tools/lib/engine.c)
 * with one function built in, "py", which runs a task through
 * shoal._engine: `python3 -m shoal.engine`; and _cluster_supervise is a
 * cluster's supervisor (shoal_cluster_supervise) in a python3 process, for
 * shoal.tasks.Cluster with a launcher. */
#include "module.h"
#include "lib/tools.h"
#include "tasklet_impl.h"

#include <shoal/cluster.h>
#include <shoal/ext.h>

#include <signal.h>
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
/* In an engine a task whose function raised fails (so that the tasks
 * depending on it fail too): its dispatcher answers [1, JSON] then. */
static bool engine_mode;

/* The runner's calls nest as a stack on one thread (host -> extension ->
 * host ...), each level's return sent before the one below it. Tasklets
 * would break that order: one whose host service calls back into the
 * extension may park inside that nested call, and then another could call
 * the host (a call the host takes as nested in the parked one's) or the
 * call below could return under it. So a tasklet calling the host holds
 * the runner's turn for the whole call, nested calls and all, and a call
 * returns only once no other tasklet holds it. */
static const char runner_turn;
static PyObject *call_host(const char *method, PyObject *payload);

PyObject *sh_py_call_host(PyObject *mod, PyObject *args)
{
	const char *method;
	PyObject *payload;
	if (!PyArg_ParseTuple(args, "sO:_call_host", &method, &payload))
		return NULL;
	sh_tl_turn turn;
	if (sh_tl_turn_take(&turn, &runner_turn, "a host service call") != 0)
		return NULL;
	PyObject *res = call_host(method, payload);
	sh_tl_turn_give(&turn);
	return res;
}

/* The host service call itself, with the runner's turn held. */
static PyObject *call_host(const char *method, PyObject *payload)
{
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
	if (engine_mode && r && PyList_Check(r) && PyList_GET_SIZE(r) == 2 &&
	    PyUnicode_Check(PyList_GET_ITEM(r, 1)) && PyLong_Check(PyList_GET_ITEM(r, 0)) &&
	    PyLong_AsLong(PyList_GET_ITEM(r, 0)) == 1) {
		const char *m = PyUnicode_AsUTF8(PyList_GET_ITEM(r, 1));
		rc = shoal_ext_fail(ctx, SHOAL_ERAISED, "%s", m ? m : "{}");
		PyErr_Clear();
		Py_DECREF(r);
		goto out;
	}
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
	/* Not while another tasklet's host service call, and the calls nested
	 * in it, are in flight: their returns go first (runner_turn). */
	if (sh_tl_turn_held(&runner_turn)) {
		sh_tl_turn turn;
		/* -1 only when the wait cannot end (a deadlock, a signal):
		 * the return goes anyway, and the host, out of step, ends
		 * the extension with an error rather than this call hanging */
		if (sh_tl_turn_take(&turn, &runner_turn, "a call's return") != 0)
			PyErr_Clear();
		sh_tl_turn_give(&turn);
	}
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

/* Runs in the runner after its limits and sandbox are in place, on the
 * thread that called _run_extension (which let go of the GIL). */
static int py_init(shoal_ext_registry *r)
{
	PyGILState_STATE g = PyGILState_Ensure();
	char why[1000];
	int rc = 0;
	PyObject *site = NULL, *done = NULL, *child = NULL;
	/* started with -S: site-packages only now, inside the sandbox */
	if (!(site = PyImport_ImportModule("site")) ||
	    !(done = PyObject_CallMethod(site, "main", NULL)) ||
	    !(child = PyImport_ImportModule("shoal.isolate")) ||
	    !(envelope_for = PyObject_GetAttrString(child, "_envelope_for")) ||
	    !(dispatch = PyObject_CallMethod(child, "_child_start", NULL))) {
		failure_text(why, sizeof(why));
		rc = SHOAL_EINVAL;
	}
	Py_XDECREF(site);
	Py_XDECREF(done);
	Py_XDECREF(child);
	PyGILState_Release(g);
	if (rc == 0)
		rc = shoal_ext_register(r, "call", call);
	return rc ? shoal_ext_init_fail(r, rc, "%s", why) : 0;
}

/* The engine's (python3 -m shoal.engine): its one function "py" runs a
 * task, [function, args, kwargs] in, an envelope out (shoal.tasks). */
static int py_engine_init(shoal_ext_registry *r)
{
	PyGILState_STATE g = PyGILState_Ensure();
	char why[1000];
	int rc = 0;
	PyObject *tasks = NULL;
	if (!(tasks = PyImport_ImportModule("shoal._engine")) ||
	    !(envelope_for = PyObject_GetAttrString(tasks, "_envelope_for")) ||
	    !(dispatch = PyObject_CallMethod(tasks, "_engine_start", NULL))) {
		failure_text(why, sizeof(why));
		rc = SHOAL_EINVAL;
	}
	Py_XDECREF(tasks);
	PyGILState_Release(g);
	engine_mode = true;
	if (rc == 0)
		rc = shoal_ext_register(r, "py", call);
	return rc ? shoal_ext_init_fail(r, rc, "%s", why) : 0;
}

/* argv (a list of str) after argv0, to cli with init, the GIL released:
 * its exit code. */
static PyObject *run_cli(PyObject *args, const char *what, const char *argv0,
			 int (*cli)(int, char **, shoal_ext_init_fn), shoal_ext_init_fn init)
{
	PyObject *list;
	if (!PyArg_ParseTuple(args, what, &PyList_Type, &list))
		return NULL;
	Py_ssize_t n = PyList_GET_SIZE(list);
	PyObject *keep = PyList_New(0);
	char **argv = keep ? PyMem_Calloc((size_t)n + 2, sizeof(char *)) : NULL;
	if (!argv) {
		Py_XDECREF(keep);
		return PyErr_NoMemory();
	}
	argv[0] = (char *)argv0;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *b = NULL;
		if (sh_py_fspath(PyList_GET_ITEM(list, i), &b) != 0 ||
		    PyList_Append(keep, b) != 0) {
			Py_XDECREF(b);
			PyMem_Free(argv);
			Py_DECREF(keep);
			return NULL;
		}
		Py_DECREF(b);
		argv[i + 1] = PyBytes_AS_STRING(b);
	}
	/* As shoal-ext and shoal-engine: SIGINT ends it (Python's handler
	 * would turn a Ctrl-C meant for the host into an exception inside
	 * some call). */
	signal(SIGINT, SIG_DFL);
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = cli((int)n + 1, argv, init);
	Py_END_ALLOW_THREADS PyMem_Free(argv);
	Py_DECREF(keep);
	return PyLong_FromLong(rc);
}

PyObject *sh_py_run_extension(PyObject *mod, PyObject *args)
{
	(void)mod;
	/* shoal's own side, before the sandbox: a strict extension runs as a
	 * uid of its own, which may not reach this package (a build under a
	 * 0700 home); the extension's module and site-packages are still
	 * read only once confined (py_init). The modules of the package an
	 * extension may import later (its tasklets) are imported now too. */
	static const char *const mods[] = {"shoal.isolate", "shoal.tasklets"};
	for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
		PyObject *m = PyImport_ImportModule(mods[i]);
		if (!m)
			return NULL;
		Py_DECREF(m);
	}
	return run_cli(args, "O!:_run_extension", "shoal-ext", sh_ext_runner_cli, py_init);
}

/* The tasklets of the calling thread that are alive (scheduled and not
 * finished; main is not one of them): a Python engine kills those a task
 * left when the task ends (shoal._engine), so that no task's tasklet runs
 * during, or stalls the run() of, the tasks after it. */
PyObject *sh_py_tasklets_alive(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	PyObject *l = PyList_New(0);
	if (!l || !sh_tl_active())
		return l;
	sh_tl *tl = sh_tl_get();
	if (!tl) {
		Py_DECREF(l);
		return NULL;
	}
	for (ShTasklet *t = tl->live; t; t = t->live_next)
		if (PyList_Append(l, (PyObject *)t) != 0) {
			Py_DECREF(l);
			return NULL;
		}
	return l;
}

PyObject *sh_py_run_engine(PyObject *mod, PyObject *args)
{
	(void)mod;
	return run_cli(args, "O!:_run_engine", "python3 -m shoal.engine", sh_engine_cli,
		       py_engine_init);
}

/* A cluster's supervisor in a python3 process (shoal_cluster_supervise:
 * the options shoal_cluster_start gives it), for shoal.tasks.Cluster with
 * a launcher: its Python engines are of the same interpreter. */
static int supervise_cli(int argc, char **argv, shoal_ext_init_fn init)
{
	(void)init;
	return shoal_cluster_supervise(argc - 1, argv + 1);
}

PyObject *sh_py_cluster_supervise(PyObject *mod, PyObject *args)
{
	(void)mod;
	return run_cli(args, "O!:_cluster_supervise", "cluster supervisor", supervise_cli, NULL);
}

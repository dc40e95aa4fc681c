/* Clusters of the task farm from Python (shoal/cluster.h): start, status,
 * add and stop, each the C call with the GIL released, and what the
 * supervisor says of its cluster as a dict. shoal.tasks.Cluster with a
 * launcher is these calls; its supervisor is a python3 of the caller's
 * running _cluster_supervise (child.c). */
#include "module.h"

#include <shoal/cluster.h>

#include <stdlib.h>
#include <string.h>

/* What a supervisor says of its cluster, as a dict. */
static PyObject *info_dict(const shoal_cluster_info *i)
{
	return Py_BuildValue("{s:s,s:s,s:s,s:s,s:I,s:I,s:i,s:s}", "controller", i->controller,
			     "tcp", i->tcp, "secret_file", i->secret_file, "store", i->store,
			     "engines", i->engines, "asked", i->asked, "supervisor_pid",
			     i->supervisor_pid, "text", i->text);
}

/* The launcher named, or -1 with ValueError set. */
static int launcher_of(const char *name)
{
	int l = shoal_launcher_parse(name);
	if (l < 0)
		PyErr_Format(PyExc_ValueError,
			     "launcher %R: expected 'local', 'mpi', 'ssh' or 'slurm'",
			     PyUnicode_FromString(name));
	return l;
}

/* A call's outcome: info as a dict, or the error it said. */
static PyObject *outcome(int rc, shoal_cluster_info *info, const char *why)
{
	PyObject *r = rc ? sh_py_raise(rc, why) : info ? info_dict(info) : Py_NewRef(Py_None);
	free(info);
	return r;
}

PyObject *sh_py_cluster_start(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	static char *kwl[] = {"engines",    "name",	  "launcher",	"hosts",
			      "tcp",	    "so",	  "ssh",	"python",
			      "pythonpath", "scheme",	  "timeout",	"stores",
			      "store_size", "store_args", "supervisor", NULL};
	shoal_cluster_opts o;
	shoal_cluster_opts_init(&o);
	unsigned int n = 0;
	const char *launcher = "local", *scheme = "leastload";
	int stores = 0;
	PyObject *sup = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "I|zszzzzzzsdpzzO:cluster_start", kwl, &n,
					 &o.name, &launcher, &o.hosts, &o.tcp, &o.so, &o.ssh,
					 &o.python, &o.pythonpath, &scheme, &o.timeout_s, &stores,
					 &o.store_size, &o.store_args, &sup))
		return NULL;
	o.engines = n;
	o.stores = stores;
	int l = launcher_of(launcher);
	if (l < 0)
		return NULL;
	o.launcher = (shoal_launcher)l;
	int sc = shoal_scheme_parse(scheme);
	if (sc < 0)
		return PyErr_Format(
			PyExc_ValueError,
			"scheme '%s': expected pure, lru, leastload, weighted or twobin", scheme);
	o.scheme = (shoal_scheme)sc;
	const char *words[16];
	if (sup != Py_None) {
		if (!PyList_Check(sup) || PyList_GET_SIZE(sup) < 1 || PyList_GET_SIZE(sup) > 8)
			return PyErr_Format(PyExc_TypeError,
					    "supervisor: a list of 1 to 8 str (its command line)");
		Py_ssize_t k = PyList_GET_SIZE(sup);
		for (Py_ssize_t i = 0; i < k; i++) {
			PyObject *w = PyList_GET_ITEM(sup, i);
			if (!(words[i] = PyUnicode_Check(w) ? PyUnicode_AsUTF8(w) : NULL))
				return PyErr_Format(PyExc_TypeError,
						    "supervisor: a list of str (its command line)");
		}
		words[k] = NULL;
		o.supervisor = words;
	}
	shoal_cluster_info *info = calloc(1, sizeof(*info));
	if (!info)
		return PyErr_NoMemory();
	char why[8192];
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = shoal_cluster_start(&o, info, why, sizeof(why));
	Py_END_ALLOW_THREADS return outcome(rc, info, why);
}

PyObject *sh_py_cluster_status(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	static char *kwl[] = {"name", NULL};
	const char *name = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:cluster_status", kwl, &name))
		return NULL;
	shoal_cluster_info *info = calloc(1, sizeof(*info));
	if (!info)
		return PyErr_NoMemory();
	char why[8192];
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = shoal_cluster_status(name, info, why, sizeof(why));
	Py_END_ALLOW_THREADS return outcome(rc, info, why);
}

PyObject *sh_py_cluster_add(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	static char *kwl[] = {"engines", "name", "launcher", "hosts", "timeout", NULL};
	unsigned int n = 0;
	const char *name = NULL, *launcher = "local", *hosts = NULL;
	double timeout = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "I|zszd:cluster_add", kwl, &n, &name, &launcher,
					 &hosts, &timeout))
		return NULL;
	int l = launcher_of(launcher);
	if (l < 0)
		return NULL;
	shoal_cluster_info *info = calloc(1, sizeof(*info));
	if (!info)
		return PyErr_NoMemory();
	char why[8192];
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = shoal_cluster_add(name, n, (shoal_launcher)l, hosts, timeout,
						      info, why, sizeof(why));
	Py_END_ALLOW_THREADS return outcome(rc, info, why);
}

PyObject *sh_py_cluster_stop(PyObject *mod, PyObject *args, PyObject *kw)
{
	(void)mod;
	static char *kwl[] = {"name", "timeout", NULL};
	const char *name = NULL;
	double timeout = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zd:cluster_stop", kwl, &name, &timeout))
		return NULL;
	char why[8192];
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = shoal_cluster_stop(name, timeout, why, sizeof(why));
	Py_END_ALLOW_THREADS return outcome(rc, NULL, why);
}

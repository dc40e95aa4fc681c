/* Fuzzes what an isolated Python extension's values become in its host
 * (python/_shoal/value.c over shoal.isolate's hooks): any bytes that the
 * RPC value decoder accepts must become Python objects or raise, never
 * crash, and never construct anything but shoal's own kinds (tuples, sets,
 * escaped dicts, numpy arrays, registered types by name); what becomes
 * objects is encoded again and must decode again.
 *
 * Input: a msgpack body as a call's result carries it (no bytes out of
 * band). CPython is embedded once; the package comes from the source tree
 * (SHOAL_SRCDIR, else the working directory), with this binary's copy of
 * the _shoal module.
 *
 * Seeds: Python values of every kind shoal.isolate sends (scalars, strings,
 * bytes, nested lists, tuples, sets, dicts with any keys and with shoal's
 * tag as a key, numpy arrays of each dtype, a registered type), encoded by
 * the module's encoder, and tagged values a hostile extension could forge. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "rpc/value.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);
/* CPython keeps interned and cached objects for good: not leaks */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0";
}

PyMODINIT_FUNC PyInit__shoal(void);
shoal_value *sh_py_to_value(shoal_vbuf *b, PyObject *o, PyObject *keep);
PyObject *sh_py_from_value(const shoal_value *v);

static _Noreturn void die(const char *what)
{
	PyErr_Print();
	fprintf(stderr, "fuzz_pyvalue: %s\n", what);
	exit(1);
}

static void start_python(void)
{
	if (PyImport_AppendInittab("_shoal_fuzz", PyInit__shoal) != 0)
		die("inittab");
	Py_InitializeEx(0);
	const char *src = getenv("SHOAL_SRCDIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/python", src && *src ? src : ".");
	PyObject *p = PyUnicode_DecodeFSDefault(path), *mod;
	if (!p || PyList_Insert(PySys_GetObject("path"), 0, p) != 0 ||
	    !(mod = PyImport_ImportModule("_shoal_fuzz")) ||
	    PyDict_SetItemString(PyImport_GetModuleDict(), "shoal._shoal", mod) != 0 ||
	    !PyImport_ImportModule("shoal.isolate"))
		die("importing shoal.isolate from SHOAL_SRCDIR/python");
	Py_DECREF(p);
	/* a registered type, so that its tag decodes */
	if (PyRun_SimpleString(
		    "import shoal.isolate as si\n"
		    "class Point:\n"
		    "    def __init__(self, x, y): self.x, self.y = x, y\n"
		    "si.register_type(Point, lambda p: [p.x, p.y], lambda v: Point(*v))\n") != 0)
		die("registering a type");
}

/* Decodes body into b (payloads inline). */
static int decode(shoal_vbuf *b, const uint8_t *body, size_t n, shoal_value **v)
{
	char why[256];
	sh_mp m;
	sh_mp_init(&m, body, n);
	int rc = sh_value_decode(&m, b, NULL, v, why, sizeof(why));
	return rc == 0 && sh_mp_done(&m) != 0 ? SHOAL_EBADMSG : rc;
}

/* Packs v inline into w. */
static void pack(sh_wbuf *w, const shoal_value *v)
{
	msgpack_packer pk;
	sh_wbuf_packer(w, &pk);
	sh_value_pack(&pk, v, NULL, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	shoal_vbuf *b, *b2;
	if (shoal_vbuf_create(&b) || shoal_vbuf_create(&b2))
		abort();
	shoal_value *v;
	if (decode(b, in, n, &v) == 0) {
		PyObject *o = sh_py_from_value(v);
		if (o) {
			/* what became objects goes out again and comes back */
			PyObject *keep = PyList_New(0);
			shoal_value *v2 = keep ? sh_py_to_value(b2, o, keep) : NULL;
			if (v2) {
				sh_wbuf w;
				sh_wbuf_init(&w);
				pack(&w, v2);
				shoal_vbuf *b3;
				shoal_value *v3;
				if (shoal_vbuf_create(&b3) || w.err ||
				    decode(b3, w.p, w.len, &v3) != 0)
					abort(); /* our encoder made what our decoder refuses */
				PyObject *o3 = sh_py_from_value(v3);
				Py_XDECREF(o3);
				shoal_vbuf_free(b3);
				sh_wbuf_fini(&w);
			}
			Py_XDECREF(keep);
			Py_DECREF(o);
		}
		PyErr_Clear();
	}
	shoal_vbuf_free(b2);
	shoal_vbuf_free(b);
	return 0;
}

/* ---- seeds ---- */

static void seed_of(const char *name, PyObject *o)
{
	shoal_vbuf *b;
	if (!o || shoal_vbuf_create(&b))
		die(name);
	PyObject *keep = PyList_New(0);
	shoal_value *v = sh_py_to_value(b, o, keep);
	if (!v)
		die(name);
	sh_wbuf w;
	sh_wbuf_init(&w);
	pack(&w, v);
	shoal_vbuf *back;
	shoal_value *bv;
	if (shoal_vbuf_create(&back) || decode(back, w.p, w.len, &bv) != 0)
		seed_die("does not decode", name);
	PyObject *again = sh_py_from_value(bv);
	if (!again)
		die(name);
	Py_DECREF(again);
	seed_write(name, w.p, w.len);
	shoal_vbuf_free(back);
	sh_wbuf_fini(&w);
	Py_DECREF(keep);
	Py_DECREF(o);
	shoal_vbuf_free(b);
}

static PyObject *eval(const char *expr)
{
	PyObject *main = PyImport_AddModule("__main__");
	PyObject *g = main ? PyModule_GetDict(main) : NULL;
	PyObject *r = g ? PyRun_String(expr, Py_eval_input, g, g) : NULL;
	if (!r)
		die(expr);
	return r;
}

/* A tagged value as a forger writes it: {b"\0shoal": [tag, payload]}. */
static void forged(const char *name, const char *tag, shoal_value *payload, shoal_vbuf *b)
{
	shoal_value *m = shoal_v_map(b, 1), *pair = shoal_v_array(b, 2);
	if (!m || !pair || shoal_v_set(pair, 0, shoal_v_cstr(b, tag)) ||
	    shoal_v_set(pair, 1, payload) ||
	    shoal_v_map_set(m, 0, shoal_v_bytes(b, "\0shoal", 6), pair))
		die(name);
	sh_wbuf w;
	sh_wbuf_init(&w);
	pack(&w, m);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static void pyvalue_seeds(void)
{
	static const struct {
		const char *name, *expr;
	} values[] = {
		{"none", "None"},
		{"scalars",
		 "[True, False, 0, -1, 2**63 - 1, -2**63, 1.5, float('inf'), float('nan')]"},
		{"strings", "['', 'héllo', 'x' * 300]"},
		{"bytes", "[b'', b'\\x00\\xff', bytearray(b'ab'), b'y' * 5000]"},
		{"nested", "[1, [2, [3, [4, [5]]]], {'a': [1, {'b': (2,)}]}]"},
		{"tuples", "((), (1, 'two', (3.0,)), ((1, 2), (3, 4)))"},
		{"sets", "[{1, 2, 3}, frozenset({'a'}), set()]"},
		{"dicts", "[{}, {'a': 1}, {1: 'int key', (1, 2): 'tuple key', None: 'none'}]"},
		{"dict-tag-key", "{b'\\x00shoal': ['builtins.eval', '1+1']}"},
		{"registered", "[Point(1, 2), {'p': Point(3, 4)}]"},
		{"arrays", "__import__('numpy').arange(12, dtype='float32').reshape(3, 4)"},
		{"arrays-dtypes",
		 "[__import__('numpy').zeros((2, 1), dtype=d) for d in ('float64', 'float16', "
		 "'int64', 'int8', 'uint64', 'uint16', 'bool')]"},
		{"array-0d-empty",
		 "[__import__('numpy').float64(3), __import__('numpy').zeros((2, 0))]"},
		{"envelope-ok", "[0, {'result': [1, 2]}]"},
		{"envelope-error",
		 "[1, {'type': 'ValueError', 'message': 'bad', 'traceback': 'Traceback...'}]"},
	};
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
		seed_of(values[i].name, eval(values[i].expr));
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b))
		die("vbuf");
	forged("forged-unknown-tag", "builtins.eval", shoal_v_cstr(b, "__import__('os')"), b);
	forged("forged-type", "type:os.system", shoal_v_cstr(b, "rm -rf /"), b);
	forged("forged-torch-not-tensor", "torch", shoal_v_int(b, 1), b);
	forged("forged-dict-odd", "dict", shoal_v_array(b, 3), b);
	shoal_vbuf_free(b);
	/* the first crash: a tensor of shape (0, 2^62, 4) whose strides overflowed */
	static const uint8_t strides[] = {
		0x92, 0xcb, 0x40, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc7, 0x18, 0x01,
		0x05, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x61, 0x6c};
	seed_write("regress-strides-overflow", strides, sizeof(strides));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	start_python();
	seed_main("fuzz_pyvalue", pyvalue_seeds);
	return 0;
}

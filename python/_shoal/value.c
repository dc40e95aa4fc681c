/* shoal._shoal: Python objects to RPC values and back, for isolated
 * extensions (shoal.isolate) and tasks (shoal.tasks): what a call's
 * arguments and result become on the wire, on both sides.
 *
 * msgpack's kinds map directly (None, bool, int, float, str, bytes, list,
 * dict); what msgpack lacks travels as a tagged value, a one-pair map whose
 * key is the bytes b"\0shoal" and whose value is [tag, payload]: tuples,
 * sets, torch tensors (numpy arrays are plain tensors), and the types a
 * program registers (shoal.isolate.register_type). Decoding constructs
 * only these: never an object whose type the other side names, so an
 * extension cannot make its host run code. Arrays and tensors go through
 * hooks of the Python package (shoal/_values.py), which knows numpy and
 * torch. A received tensor is a copy in a Value (ShVal) of its own, or,
 * shared through a store this side is connected to, a view of the store's
 * object. */
#include "module.h"

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <string.h>

#define MARKER "\0shoal"
#define MARKER_LEN 6
#define MAX_DEPTH 60 /* under the wire's 64, with room for the tags */

/* Set by shoal.isolate (_set_value_hooks). */
/* obj -> ("tensor", buf, dtype, shape, torch, store object id or 0) | ("type", name, v) */
static PyObject *hook_encode;
static PyObject *hook_tensor; /* (Value, torch: bool) -> numpy array or torch tensor */
static PyObject *hook_type;   /* (name, payload) -> the registered type's object */
static PyObject *hook_shared; /* (object id, torch) -> a view of a store object, or None */

/* ---- ShVal: a received tensor's memory, for numpy (buffer) and torch (DLPack) ---- */

typedef struct {
	PyObject_VAR_HEAD PyObject *keeper; /* owns the bytes: a bytearray */
	DLManagedTensor *dl;		    /* shoal_v_dlpack's view: dtype, shape, strides */
	const void *data;
	size_t nbytes;
	shoal_dtype dtype;
	int ndim;
	char fmt[2];
	Py_ssize_t dims[]; /* shape, then strides in bytes */
} ShVal;

/* A copy of tensor v's bytes, in a bytearray of its own: the receiver's, writable. */
static PyObject *val_new(const shoal_value *v)
{
	/* strides in bytes: a shape with a zero dimension can have huge others */
	Py_ssize_t strides[SHOAL_TENSOR_MAX_DIMS];
	Py_ssize_t stride = (Py_ssize_t)shoal_dtype_size(v->v.t.dtype);
	for (int i = v->v.t.ndim - 1; i >= 0; i--) {
		strides[i] = stride;
		int64_t d = v->v.t.shape[i] ? v->v.t.shape[i] : 1;
		if (d > PY_SSIZE_T_MAX || __builtin_mul_overflow(stride, (Py_ssize_t)d, &stride))
			return sh_py_raisef(
				ShInvalidInput, SHOAL_EOVERFLOW,
				"a tensor whose strides overflow (shape %lld in dimension %d)",
				(long long)v->v.t.shape[i], i);
	}
	PyObject *ba = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)v->v.t.nbytes);
	if (!ba)
		return NULL;
	if (v->v.t.nbytes)
		memcpy(PyByteArray_AS_STRING(ba), v->v.t.data, v->v.t.nbytes);
	ShVal *self = PyObject_GC_NewVar(ShVal, &ShVal_Type, 2 * v->v.t.ndim);
	if (!self) {
		Py_DECREF(ba);
		return NULL;
	}
	self->keeper = ba;
	self->data = PyByteArray_AS_STRING(ba);
	self->nbytes = v->v.t.nbytes;
	self->dtype = v->v.t.dtype;
	self->ndim = v->v.t.ndim;
	self->fmt[0] = sh_py_struct_format(v->v.t.dtype);
	self->fmt[1] = 0;
	self->dl = NULL;
	for (int i = 0; i < v->v.t.ndim; i++) {
		self->dims[i] = (Py_ssize_t)v->v.t.shape[i];
		self->dims[v->v.t.ndim + i] = strides[i];
	}
	/* 8-bit floats have no DLPack code: numpy's bytes are all they get */
	if (shoal_v_dlpack(v, &self->dl) != 0)
		self->dl = NULL;
	PyObject_GC_Track(self);
	return (PyObject *)self;
}

static int val_traverse(ShVal *self, visitproc visit, void *arg)
{
	Py_VISIT(self->keeper);
	return 0;
}

static void val_dealloc(ShVal *self)
{
	PyObject_GC_UnTrack(self);
	if (self->dl)
		self->dl->deleter(self->dl);
	Py_CLEAR(self->keeper);
	PyObject_GC_Del(self);
}

static int val_getbuffer(ShVal *self, Py_buffer *v, int flags)
{
	return sh_py_tensor_buffer(v, (PyObject *)self, self->data, self->nbytes, self->dtype,
				   self->ndim, self->dims, self->fmt, false, flags);
}

static PyBufferProcs val_as_buffer = {.bf_getbuffer = (getbufferproc)val_getbuffer};

/* A DLPack capsule's tensor: the view's fields, the data, and a reference
 * on the ShVal that the deleter (any thread) gives back under the GIL. */
typedef struct {
	DLManagedTensor m;
	ShVal *val;
} val_dl;

static void val_dl_delete(DLManagedTensor *m)
{
	val_dl *w = m->manager_ctx;
	if (_Py_IsFinalizing())
		return;
	PyGILState_STATE g = PyGILState_Ensure();
	Py_DECREF(w->val);
	PyMem_RawFree(w);
	PyGILState_Release(g);
}

static PyObject *val_dlpack(ShVal *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"stream", NULL};
	PyObject *stream = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:__dlpack__", kwlist, &stream))
		return NULL;
	if (!self->dl)
		return PyErr_Format(PyExc_TypeError, "DLPack 0.6 has no %s",
				    shoal_dtype_name(self->dtype));
	val_dl *w = PyMem_RawMalloc(sizeof(*w));
	if (!w)
		return PyErr_NoMemory();
	w->m.dl_tensor = self->dl->dl_tensor;
	w->m.dl_tensor.data = self->data ? (void *)self->data : sh_py_empty_buf;
	w->m.manager_ctx = w;
	w->m.deleter = val_dl_delete;
	w->val = (ShVal *)Py_NewRef(self);
	PyObject *cap = PyCapsule_New(&w->m, "dltensor", sh_py_capsule_gone);
	if (!cap)
		val_dl_delete(&w->m);
	return cap;
}

static PyObject *val_dlpack_device(ShVal *self, PyObject *unused)
{
	return Py_BuildValue("(ii)", (int)kDLCPU, 0);
}

static PyObject *val_get_dtype(ShVal *self, void *unused)
{
	return PyUnicode_FromString(shoal_dtype_name(self->dtype));
}

static PyMethodDef val_methods[] = {
	{"__dlpack__", (PyCFunction)(void (*)(void))val_dlpack, METH_VARARGS | METH_KEYWORDS,
	 "__dlpack__(stream=None) -> PyCapsule\n\nA DLPack 0.6 capsule of this memory."},
	{"__dlpack_device__", (PyCFunction)val_dlpack_device, METH_NOARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef val_getset[] = {
	{"dtype", (getter)val_get_dtype, NULL, "The store's dtype name.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShVal_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Value",
	.tp_basicsize = offsetof(ShVal, dims),
	.tp_itemsize = sizeof(Py_ssize_t),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "A tensor received from the other side of a call: the buffer protocol "
		  "(numpy) and DLPack (torch) over memory it keeps.",
	.tp_dealloc = (destructor)val_dealloc,
	.tp_traverse = (traverseproc)val_traverse,
	.tp_as_buffer = &val_as_buffer,
	.tp_methods = val_methods,
	.tp_getset = val_getset,
};

/* ---- encoding ---- */

static shoal_value *nomem(shoal_vbuf *b)
{
	(void)b;
	PyErr_NoMemory();
	return NULL;
}

static shoal_value *tagged(shoal_vbuf *b, const char *tag, shoal_value *payload)
{
	if (!payload)
		return NULL;
	shoal_value *m = shoal_v_map(b, 1), *pair = shoal_v_array(b, 2);
	shoal_value *k = shoal_v_bytes(b, MARKER, MARKER_LEN), *t = shoal_v_cstr(b, tag);
	if (!m || !pair || !k || !t || shoal_v_set(pair, 0, t) || shoal_v_set(pair, 1, payload) ||
	    shoal_v_map_set(m, 0, k, pair))
		return nomem(b);
	return m;
}

static shoal_value *to_value(shoal_vbuf *b, PyObject *o, PyObject *keep, int depth);

static shoal_value *seq_value(shoal_vbuf *b, PyObject *seq, PyObject *keep, int depth)
{
	PyObject *fast = PySequence_Fast(seq, "a sequence");
	if (!fast)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
	shoal_value *a = n <= UINT32_MAX ? shoal_v_array(b, (uint32_t)n) : NULL;
	for (Py_ssize_t i = 0; a && i < n; i++) {
		shoal_value *x = to_value(b, PySequence_Fast_GET_ITEM(fast, i), keep, depth + 1);
		if (!x || shoal_v_set(a, (uint32_t)i, x) != 0)
			a = NULL;
	}
	Py_DECREF(fast);
	if (!a && !PyErr_Occurred())
		PyErr_NoMemory();
	return a;
}

static bool is_marker(PyObject *k)
{
	return PyBytes_Check(k) && PyBytes_GET_SIZE(k) == MARKER_LEN &&
	       memcmp(PyBytes_AS_STRING(k), MARKER, MARKER_LEN) == 0;
}

static shoal_value *dict_value(shoal_vbuf *b, PyObject *d, PyObject *keep, int depth)
{
	Py_ssize_t n = PyDict_GET_SIZE(d), pos = 0, i = 0;
	PyObject *k, *v;
	bool escape = false;
	while (PyDict_Next(d, &pos, &k, &v))
		escape = escape || is_marker(k);
	if (escape) {
		/* a dict that would read as a tagged value: its pairs, tagged */
		PyObject *items = PyDict_Items(d);
		shoal_value *r = items ? tagged(b, "dict", seq_value(b, items, keep, depth)) : NULL;
		Py_XDECREF(items);
		return r;
	}
	shoal_value *m = n <= UINT32_MAX ? shoal_v_map(b, (uint32_t)n) : NULL;
	if (!m)
		return nomem(b);
	pos = 0;
	while (PyDict_Next(d, &pos, &k, &v)) {
		shoal_value *kv = to_value(b, k, keep, depth + 1);
		shoal_value *vv = kv ? to_value(b, v, keep, depth + 1) : NULL;
		if (!vv || shoal_v_map_set(m, (uint32_t)i++, kv, vv) != 0)
			return PyErr_Occurred() ? NULL : nomem(b);
	}
	return m;
}

/* ("tensor", buf, dtype, shape, torch, id) from the hook: the buffer is
 * borrowed until the call is sent (keep holds it); id, when not 0, is the
 * store object that holds exactly these bytes: in shared mode it goes by
 * reference, with no copy. */
static shoal_value *tensor_value(shoal_vbuf *b, PyObject *t, PyObject *keep)
{
	PyObject *kind, *buf, *dtype, *shape, *torch;
	unsigned long long id;
	if (!PyArg_ParseTuple(t, "OOOOOK", &kind, &buf, &dtype, &shape, &torch, &id))
		return NULL;
	const char *dn = sh_py_cstr(dtype, "dtype");
	if (!dn)
		return NULL;
	shoal_dtype dt = shoal_dtype_from_name(dn, strlen(dn));
	PyObject *sh = PySequence_Fast(shape, "shape");
	if (!sh)
		return NULL;
	Py_ssize_t nd = PySequence_Fast_GET_SIZE(sh);
	int64_t dims[SHOAL_TENSOR_MAX_DIMS];
	for (Py_ssize_t i = 0; i < nd && i < SHOAL_TENSOR_MAX_DIMS; i++)
		dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(sh, i));
	Py_DECREF(sh);
	if (PyErr_Occurred())
		return NULL;
	if (dt == SHOAL_DT_INVALID || nd > SHOAL_TENSOR_MAX_DIMS) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "a tensor of dtype %.40s and %zd dimensions cannot be sent", dn, nd);
		return NULL;
	}
	Py_buffer v;
	if (PyObject_GetBuffer(buf, &v, PyBUF_C_CONTIGUOUS) != 0)
		return NULL;
	const void *data = v.buf;
	size_t len = (size_t)v.len;
	PyBuffer_Release(&v); /* the object stays in keep: its memory stays put */
	if (PyList_Append(keep, buf) != 0)
		return NULL;
	shoal_value *x = shoal_v_tensor(b, dt, (int)nd, dims, data);
	if (!x)
		return nomem(b);
	if (x->v.t.nbytes != len) {
		sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
			     "a tensor's buffer has %zu bytes, its shape needs %zu", len,
			     x->v.t.nbytes);
		return NULL;
	}
	x->v.t.obj = (shoal_id)id;
	return PyObject_IsTrue(torch) ? tagged(b, "torch", x) : x;
}

static shoal_value *other_value(shoal_vbuf *b, PyObject *o, PyObject *keep, int depth)
{
	if (!hook_encode)
		return (shoal_value *)PyErr_Format(PyExc_TypeError,
						   "cannot send a %.100s: import shoal.isolate",
						   Py_TYPE(o)->tp_name);
	PyObject *t = PyObject_CallOneArg(hook_encode, o);
	if (!t)
		return NULL;
	shoal_value *r = NULL;
	const char *kind = PyTuple_Check(t) && PyTuple_GET_SIZE(t) >= 3 &&
					   PyUnicode_Check(PyTuple_GET_ITEM(t, 0))
				   ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0))
				   : NULL;
	if (kind && strcmp(kind, "tensor") == 0) {
		r = tensor_value(b, t, keep);
	} else if (kind && strcmp(kind, "type") == 0 && PyUnicode_Check(PyTuple_GET_ITEM(t, 1))) {
		char tag[300];
		snprintf(tag, sizeof(tag), "type:%s", PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 1)));
		r = tagged(b, tag, to_value(b, PyTuple_GET_ITEM(t, 2), keep, depth + 1));
	} else {
		PyErr_SetString(PyExc_TypeError, "the encode hook returned something else");
	}
	Py_DECREF(t);
	return r;
}

static shoal_value *to_value(shoal_vbuf *b, PyObject *o, PyObject *keep, int depth)
{
	if (depth > MAX_DEPTH)
		return (shoal_value *)PyErr_Format(
			PyExc_ValueError, "a value nested deeper than %d levels", MAX_DEPTH);
	shoal_value *r;
	if (o == Py_None) {
		r = shoal_v_nil(b);
	} else if (PyBool_Check(o)) {
		r = shoal_v_bool(b, o == Py_True);
	} else if (PyLong_Check(o)) {
		int over;
		long long x = PyLong_AsLongLongAndOverflow(o, &over);
		if (over)
			return (shoal_value *)PyErr_Format(
				PyExc_OverflowError, "an int beyond 64 bits cannot be sent: %R", o);
		if (x == -1 && PyErr_Occurred())
			return NULL;
		r = shoal_v_int(b, x);
	} else if (PyFloat_Check(o)) {
		r = shoal_v_float(b, PyFloat_AS_DOUBLE(o));
	} else if (PyUnicode_Check(o)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(o, &n);
		if (!s)
			return NULL;
		r = shoal_v_str(b, s, (size_t)n);
	} else if (PyBytes_Check(o) || PyByteArray_Check(o) || PyMemoryView_Check(o)) {
		/* a memoryview (a pickle's out-of-band buffer) arrives as bytes */
		const char *p;
		size_t n;
		if (PyMemoryView_Check(o)) {
			const Py_buffer *mv = PyMemoryView_GET_BUFFER(o);
			if (!PyBuffer_IsContiguous(mv, 'C')) {
				PyErr_SetString(PyExc_TypeError,
						"cannot send a memoryview that is not contiguous");
				return NULL;
			}
			p = mv->buf;
			n = (size_t)mv->len;
		} else {
			p = PyBytes_Check(o) ? PyBytes_AS_STRING(o) : PyByteArray_AS_STRING(o);
			n = (size_t)Py_SIZE(o);
		}
		if (n >= 4096) {
			/* borrowed until sent, then copied once: into the ring, or
			 * into the store in shared mode */
			if (PyList_Append(keep, o) != 0)
				return NULL;
			r = shoal_v_blob(b, p, n);
		} else {
			r = shoal_v_bytes(b, p, n);
		}
	} else if (PyList_Check(o)) {
		return seq_value(b, o, keep, depth);
	} else if (PyTuple_Check(o)) {
		return tagged(b, "tuple", seq_value(b, o, keep, depth));
	} else if (PyDict_Check(o)) {
		return dict_value(b, o, keep, depth);
	} else if (PyAnySet_Check(o)) {
		return tagged(b, PyFrozenSet_Check(o) ? "frozenset" : "set",
			      seq_value(b, o, keep, depth));
	} else {
		return other_value(b, o, keep, depth);
	}
	return r ? r : nomem(b);
}

shoal_value *sh_py_to_value(shoal_vbuf *b, PyObject *o, PyObject *keep)
{
	return to_value(b, o, keep, 0);
}

/* ---- decoding ---- */

static PyObject *from_value(const shoal_value *v, int depth);

static PyObject *list_of(const shoal_value *v, int depth)
{
	if (v->type != SHOAL_V_ARRAY)
		return PyErr_Format(PyExc_ValueError, "a tagged value without its items");
	PyObject *l = PyList_New((Py_ssize_t)v->n);
	for (uint32_t i = 0; l && i < v->n; i++) {
		PyObject *x = from_value(&v->v.items[i], depth + 1);
		if (!x)
			Py_CLEAR(l);
		else
			PyList_SET_ITEM(l, (Py_ssize_t)i, x);
	}
	return l;
}

static PyObject *tensor_of(const shoal_value *v, bool torch)
{
	if (!hook_tensor)
		return PyErr_Format(PyExc_TypeError, "a tensor arrived: import shoal.isolate");
	if (v->v.t.obj && hook_shared) {
		/* shared: a view of the store object through this side's own
		 * connection, which keeps it as long as the view lives (the
		 * call's reference goes with the call) */
		PyObject *r =
			PyObject_CallFunction(hook_shared, "KO", (unsigned long long)v->v.t.obj,
					      torch ? Py_True : Py_False);
		if (r != Py_None)
			return r;
		Py_DECREF(r); /* no connection here: copied, as in copy mode */
	}
	PyObject *val = val_new(v); /* copied: the bytes are ours */
	if (!val)
		return NULL;
	PyObject *r =
		PyObject_CallFunctionObjArgs(hook_tensor, val, torch ? Py_True : Py_False, NULL);
	Py_DECREF(val);
	return r;
}

static PyObject *tagged_of(const shoal_value *v, int depth)
{
	const shoal_value *pair = &v->v.items[1];
	if (pair->type != SHOAL_V_ARRAY || pair->n != 2 || pair->v.items[0].type != SHOAL_V_STR)
		return PyErr_Format(PyExc_ValueError, "a tagged value that is not [tag, payload]");
	const char *tag = pair->v.items[0].v.s;
	const shoal_value *p = &pair->v.items[1];
	if (strcmp(tag, "torch") == 0) {
		if (p->type != SHOAL_V_TENSOR)
			return PyErr_Format(PyExc_ValueError, "a torch value that is not a tensor");
		return tensor_of(p, true);
	}
	if (strncmp(tag, "type:", 5) == 0) {
		if (!hook_type)
			return PyErr_Format(PyExc_TypeError, "a registered type arrived: import "
							     "shoal.isolate");
		PyObject *payload = from_value(p, depth + 1);
		PyObject *r =
			payload ? PyObject_CallFunction(hook_type, "sO", tag + 5, payload) : NULL;
		Py_XDECREF(payload);
		return r;
	}
	PyObject *items = list_of(p, depth);
	if (!items)
		return NULL;
	PyObject *r = NULL;
	if (strcmp(tag, "tuple") == 0) {
		r = PyList_AsTuple(items);
	} else if (strcmp(tag, "set") == 0) {
		r = PySet_New(items);
	} else if (strcmp(tag, "frozenset") == 0) {
		r = PyFrozenSet_New(items);
	} else if (strcmp(tag, "dict") == 0) {
		r = PyDict_New();
		for (Py_ssize_t i = 0; r && i < PyList_GET_SIZE(items); i++) {
			PyObject *kv = PyList_GET_ITEM(items, i);
			if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2 ||
			    PyDict_SetItem(r, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1)) !=
				    0) {
				if (!PyErr_Occurred())
					PyErr_SetString(PyExc_ValueError,
							"a tagged dict whose items are not pairs");
				Py_CLEAR(r);
			}
		}
	} else {
		/* nothing else is constructed, whatever the other side says */
		PyErr_Format(PyExc_ValueError, "a value tagged '%.100s', which shoal does not know",
			     tag);
	}
	Py_DECREF(items);
	return r;
}

static PyObject *from_value(const shoal_value *v, int depth)
{
	if (depth > MAX_DEPTH + 4)
		return PyErr_Format(PyExc_ValueError, "a value nested too deep");
	switch (v->type) {
	case SHOAL_V_NIL:
		Py_RETURN_NONE;
	case SHOAL_V_BOOL:
		return PyBool_FromLong(v->v.b);
	case SHOAL_V_INT:
		return PyLong_FromLongLong(v->v.i);
	case SHOAL_V_FLOAT:
		return PyFloat_FromDouble(v->v.f);
	case SHOAL_V_STR:
		return PyUnicode_DecodeUTF8(v->v.s, (Py_ssize_t)v->n, "strict");
	case SHOAL_V_BYTES:
		return PyBytes_FromStringAndSize(v->v.bytes, (Py_ssize_t)v->n);
	case SHOAL_V_BLOB:
		return PyBytes_FromStringAndSize(v->v.t.data, (Py_ssize_t)v->v.t.nbytes);
	case SHOAL_V_TENSOR:
		return tensor_of(v, false);
	case SHOAL_V_ARRAY:
		return list_of(v, depth);
	case SHOAL_V_MAP: {
		if (v->n == 1 && v->v.items[0].type == SHOAL_V_BYTES &&
		    v->v.items[0].n == MARKER_LEN &&
		    memcmp(v->v.items[0].v.bytes, MARKER, MARKER_LEN) == 0)
			return tagged_of(v, depth);
		PyObject *d = PyDict_New();
		for (uint32_t i = 0; d && i < v->n; i++) {
			PyObject *k = from_value(&v->v.items[2 * i], depth + 1);
			PyObject *x = k ? from_value(&v->v.items[2 * i + 1], depth + 1) : NULL;
			if (!x || PyDict_SetItem(d, k, x) != 0)
				Py_CLEAR(d);
			Py_XDECREF(k);
			Py_XDECREF(x);
		}
		return d;
	}
	}
	return PyErr_Format(PyExc_ValueError, "a value of unknown kind %d", (int)v->type);
}

PyObject *sh_py_from_value(const shoal_value *v)
{
	return from_value(v, 0);
}

PyObject *sh_py_set_value_hooks(PyObject *mod, PyObject *args)
{
	PyObject *enc, *ten, *typ, *shr;
	if (!PyArg_ParseTuple(args, "OOOO:_set_value_hooks", &enc, &ten, &typ, &shr))
		return NULL;
	Py_XSETREF(hook_encode, Py_NewRef(enc));
	Py_XSETREF(hook_tensor, Py_NewRef(ten));
	Py_XSETREF(hook_type, Py_NewRef(typ));
	Py_XSETREF(hook_shared, Py_NewRef(shr));
	Py_RETURN_NONE;
}

/* _roundtrip(obj) -> obj: encodes and decodes in this process (tests). */
PyObject *sh_py_value_roundtrip(PyObject *mod, PyObject *o)
{
	shoal_vbuf *b;
	if (shoal_vbuf_create(&b) != 0)
		return PyErr_NoMemory();
	PyObject *keep = PyList_New(0), *r = NULL;
	shoal_value *v = keep ? sh_py_to_value(b, o, keep) : NULL;
	if (v)
		r = sh_py_from_value(v);
	Py_XDECREF(keep);
	shoal_vbuf_free(b);
	return r;
}

/* shoal._shoal: Object (a got object), Tensor and Blob (zero-copy views
 * of its memory). A view holds its Object, which holds its Client, so the
 * store's reference and the mapping outlive every array, buffer and DLPack
 * capsule made from them; Object.release() waits for the last view. */
#include "module.h"

#include <dlpack/dlpack.h>
#include <string.h>

typedef struct {
	PyObject_HEAD ShObject *obj;
	const shoal_node *node;
	shoal_tensor t;
	char fmt[2]; /* "" when the dtype has no struct format */
	Py_ssize_t shape[SHOAL_TENSOR_MAX_DIMS], strides[SHOAL_TENSOR_MAX_DIMS]; /* bytes */
} ShTensor;

typedef struct {
	PyObject_HEAD ShObject *obj;
	const void *data;
	size_t size;
} ShBlob;

/* What a zero-byte buffer points at: consumers want a non-NULL pointer. */
static char empty_buf[1];

/* ---- Object ---- */

static int live(ShObject *o)
{
	if (!o->o || o->release_asked) {
		sh_py_raisef(ShClosed, SHOAL_ECLOSED, "object %llu was released",
			     (unsigned long long)o->id);
		return -1;
	}
	return 0;
}

static void view_gone(ShObject *o)
{
	if (--o->views == 0 && o->release_asked)
		sh_py_object_drop(o);
}

static void object_dealloc(ShObject *self)
{
	PyObject_GC_UnTrack(self);
	sh_py_object_drop(self);
	Py_CLEAR(self->client);
	PyObject_GC_Del(self);
}

/* Traversed, never cleared: a cycle through an Object (a Client subclass
 * whose __dict__ keeps one) is broken at the other end, so an Object always
 * has its client, and a view its Object, until they go. */
static int object_traverse(ShObject *self, visitproc visit, void *arg)
{
	Py_VISIT(self->client);
	return 0;
}

static PyObject *object_release(ShObject *self, PyObject *unused)
{
	self->release_asked = true;
	if (self->views == 0)
		sh_py_object_drop(self);
	Py_RETURN_NONE;
}

static PyObject *object_enter(PyObject *self, PyObject *unused)
{
	if (live((ShObject *)self) != 0)
		return NULL;
	return Py_NewRef(self);
}

static PyObject *object_exit(ShObject *self, PyObject *args)
{
	PyObject *r = object_release(self, NULL);
	Py_XDECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *field_value(const shoal_node *n, const char *k)
{
	int64_t i;
	double d;
	bool b;
	const char *s;
	size_t len, count;
	if (shoal_node_get_int(n, k, &i) == 0)
		return PyLong_FromLongLong(i);
	if (shoal_node_get_float(n, k, &d) == 0)
		return PyFloat_FromDouble(d);
	if (shoal_node_get_bool(n, k, &b) == 0)
		return PyBool_FromLong(b);
	if (shoal_node_get_str(n, k, &s, &len) == 0)
		return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
	int rc = shoal_node_get_ints(n, k, NULL, 0, &count);
	if (rc != 0 && rc != SHOAL_ERANGE)
		return sh_py_raisef(ShError, rc, "field '%s' has a kind this module does not know",
				    k);
	int64_t *v = PyMem_Calloc(count ? count : 1, sizeof(int64_t));
	if (!v)
		return PyErr_NoMemory();
	PyObject *l = NULL;
	if ((rc = shoal_node_get_ints(n, k, v, count, &count)) != 0)
		sh_py_raise(rc, "");
	else if ((l = PyList_New((Py_ssize_t)count)))
		for (size_t j = 0; j < count; j++) {
			PyObject *x = PyLong_FromLongLong(v[j]);
			if (!x) {
				Py_CLEAR(l);
				break;
			}
			PyList_SET_ITEM(l, (Py_ssize_t)j, x);
		}
	PyMem_Free(v);
	return l;
}

static PyObject *object_fields(ShObject *self, PyObject *unused)
{
	if (live(self) != 0)
		return NULL;
	const shoal_node *r = shoal_object_root(self->o);
	PyObject *d = PyDict_New();
	for (size_t i = 0; d && i < shoal_node_nfields(r); i++) {
		const char *k = shoal_node_field_name(r, i);
		PyObject *v = field_value(r, k);
		if (!v || PyDict_SetItemString(d, k, v) != 0)
			Py_CLEAR(d);
		Py_XDECREF(v);
	}
	return d;
}

static int is_type(ShObject *self, const char *want)
{
	const char *t = shoal_node_type(shoal_object_root(self->o));
	if (strcmp(t, want) == 0)
		return 0;
	sh_py_raisef(ShInvalidInput, SHOAL_EINVAL, "object %llu is a %.200s, not a %s",
		     (unsigned long long)self->id, t, want);
	return -1;
}

static PyObject *object_tensor(ShObject *self, PyObject *unused)
{
	if (live(self) != 0 || is_type(self, "tensor") != 0)
		return NULL;
	return sh_py_tensor_new(self, shoal_object_root(self->o));
}

static PyObject *object_tensors(ShObject *self, PyObject *unused)
{
	if (live(self) != 0 || is_type(self, "tensor_dict") != 0)
		return NULL;
	const shoal_node *r = shoal_object_root(self->o);
	size_t n = shoal_node_nmembers(r);
	PyObject *l = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; l && i < n; i++) {
		const char *name;
		const shoal_node *m = shoal_node_member(r, i, &name);
		PyObject *t = sh_py_tensor_new(self, m);
		PyObject *pair = t ? Py_BuildValue("(sN)", name, t) : NULL;
		if (!pair) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, pair);
	}
	return l;
}

static PyObject *object_blob(ShObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"i", NULL};
	Py_ssize_t i = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:blob", kwlist, &i) || live(self) != 0)
		return NULL;
	const shoal_node *r = shoal_object_root(self->o);
	size_t n = shoal_node_nblobs(r);
	if (i < 0 || (size_t)i >= n)
		return PyErr_Format(PyExc_IndexError, "blob %zd of an object with %zu blobs", i, n);
	const void *p;
	size_t size;
	int rc = shoal_node_blob(r, (size_t)i, &p, &size);
	if (rc)
		return sh_py_raise(rc, "");
	return sh_py_blob_new(self, p, size);
}

static PyObject *object_get_id(ShObject *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(self->id);
}

static PyObject *object_get_type(ShObject *self, void *unused)
{
	if (live(self) != 0)
		return NULL;
	return PyUnicode_FromString(shoal_node_type(shoal_object_root(self->o)));
}

static PyObject *object_get_nbytes(ShObject *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(self->nbytes);
}

static PyObject *object_get_released(ShObject *self, void *unused)
{
	return PyBool_FromLong(!self->o || self->release_asked);
}

static PyObject *object_repr(ShObject *self)
{
	if (!self->o)
		return PyUnicode_FromFormat("<shoal._shoal.Object %llu released>",
					    (unsigned long long)self->id);
	return PyUnicode_FromFormat(
		"<shoal._shoal.Object %llu %s, %llu bytes>", (unsigned long long)self->id,
		shoal_node_type(shoal_object_root(self->o)), (unsigned long long)self->nbytes);
}

#define KW (PyCFunction)(void (*)(void))

static PyMethodDef object_methods[] = {
	{"fields", (PyCFunction)object_fields, METH_NOARGS,
	 "fields() -> dict\n\nThe root's fields: int, float, bool, str or list[int]."},
	{"tensor", (PyCFunction)object_tensor, METH_NOARGS,
	 "tensor() -> Tensor\n\nThe object, a tensor, as a zero-copy read-only view."},
	{"tensors", (PyCFunction)object_tensors, METH_NOARGS,
	 "tensors() -> list[tuple[str, Tensor]]\n\nThe members of a tensor_dict, in order."},
	{"blob", KW object_blob, METH_VARARGS | METH_KEYWORDS,
	 "blob(i=0) -> Blob\n\nThe root's i-th blob as read-only bytes."},
	{"release", (PyCFunction)object_release, METH_NOARGS,
	 "release()\n\nLets go of the store's reference once no Tensor or Blob of it lives."},
	{"__enter__", object_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)object_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef object_getset[] = {
	{"id", (getter)object_get_id, NULL, "The object's id.", NULL},
	{"type", (getter)object_get_type, NULL, "The root's type name.", NULL},
	{"nbytes", (getter)object_get_nbytes, NULL, "Bytes of all its blobs.", NULL},
	{"released", (getter)object_get_released, NULL, "True after release().", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShObject_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Object",
	.tp_basicsize = sizeof(ShObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "An object got from the store (Client.get); holds a reference on it.",
	.tp_dealloc = (destructor)object_dealloc,
	.tp_traverse = (traverseproc)object_traverse,
	.tp_repr = (reprfunc)object_repr,
	.tp_methods = object_methods,
	.tp_getset = object_getset,
};

/* ---- Tensor ---- */

static char struct_format(shoal_dtype dt)
{
	switch (dt) {
	case SHOAL_DT_F64:
		return 'd';
	case SHOAL_DT_F32:
		return 'f';
	case SHOAL_DT_F16:
		return 'e';
	case SHOAL_DT_I64:
		return 'q';
	case SHOAL_DT_I32:
		return 'i';
	case SHOAL_DT_I16:
		return 'h';
	case SHOAL_DT_I8:
		return 'b';
	case SHOAL_DT_U64:
		return 'Q';
	case SHOAL_DT_U32:
		return 'I';
	case SHOAL_DT_U16:
		return 'H';
	case SHOAL_DT_U8:
		return 'B';
	case SHOAL_DT_BOOL:
		return '?';
	default:
		return 0;
	}
}

PyObject *sh_py_tensor_new(ShObject *o, const shoal_node *n)
{
	shoal_tensor t;
	int rc = shoal_node_tensor(n, &t);
	if (rc)
		return sh_py_raisef(ShInvalidInput, rc, "object %llu: not a readable tensor (%s)",
				    (unsigned long long)o->id, sh_py_strerror(rc));
	size_t isz = shoal_dtype_size(t.dtype);
	ShTensor *self = PyObject_GC_New(ShTensor, &ShTensor_Type);
	if (!self)
		return NULL;
	self->obj = (ShObject *)Py_NewRef(o);
	PyObject_GC_Track(self);
	o->views++;
	self->node = n;
	self->t = t;
	self->fmt[0] = struct_format(t.dtype);
	self->fmt[1] = 0;
	for (int i = 0; i < t.ndim; i++) {
		int64_t s;
		/* a shape with a zero dimension can have huge others */
		if (__builtin_mul_overflow(t.strides[i], (int64_t)isz, &s) || t.shape[i] < 0) {
			Py_DECREF(self);
			return sh_py_raisef(ShInvalidInput, SHOAL_EOVERFLOW,
					    "object %llu: a tensor whose strides overflow",
					    (unsigned long long)o->id);
		}
		self->shape[i] = (Py_ssize_t)t.shape[i];
		self->strides[i] = (Py_ssize_t)s;
	}
	return (PyObject *)self;
}

/* A view (Tensor, Blob) lets go of its object: the object's release waits
 * for its last view. */
static void view_drop(ShObject **slot)
{
	ShObject *o = *slot;
	*slot = NULL;
	if (o) {
		view_gone(o);
		Py_DECREF(o);
	}
}

static int tensor_traverse(ShTensor *self, visitproc visit, void *arg)
{
	Py_VISIT(self->obj);
	return 0;
}

static void tensor_dealloc(ShTensor *self)
{
	PyObject_GC_UnTrack(self);
	view_drop(&self->obj);
	PyObject_GC_Del(self);
}

static int tensor_getbuffer(ShTensor *self, Py_buffer *v, int flags)
{
	if (!self->fmt[0]) {
		sh_py_raisef(ShInvalidInput, SHOAL_ENOTSUP,
			     "a %s tensor has no buffer format (numpy has no such dtype): read it "
			     "through torch (DLPack), or its raw bytes with Object.blob()",
			     shoal_dtype_name(self->t.dtype));
		v->obj = NULL;
		return -1;
	}
	if (flags & PyBUF_WRITABLE) {
		PyErr_SetString(PyExc_BufferError, "a shoal tensor is read-only");
		v->obj = NULL;
		return -1;
	}
	v->buf = self->t.data ? (void *)self->t.data : empty_buf;
	v->obj = Py_NewRef(self);
	v->len = (Py_ssize_t)self->t.nbytes;
	v->readonly = 1;
	v->itemsize = (Py_ssize_t)shoal_dtype_size(self->t.dtype);
	v->format = (flags & PyBUF_FORMAT) ? self->fmt : NULL;
	v->ndim = self->t.ndim;
	v->shape = (flags & PyBUF_ND) ? self->shape : NULL;
	v->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
	v->suboffsets = NULL;
	v->internal = NULL;
	return 0;
}

static PyBufferProcs tensor_as_buffer = {
	.bf_getbuffer = (getbufferproc)tensor_getbuffer,
};

/* DLPack: the consumer's DLManagedTensor wraps shoal_node_dlpack's (which
 * holds its own reference on the C object) and keeps the Tensor alive, so
 * the Python Object, its client and the mapping outlive the consumer's
 * array. The deleter may run on any thread: it takes the GIL, and the
 * client's mutex for the C release. */
typedef struct {
	DLManagedTensor m;
	DLManagedTensor *inner;
	ShTensor *tensor;
} dl_wrap;

static void dl_wrap_delete(DLManagedTensor *m)
{
	dl_wrap *w = m->manager_ctx;
	if (_Py_IsFinalizing())
		return; /* the interpreter is going: so is the process */
	PyGILState_STATE g = PyGILState_Ensure();
	PyObject *t, *v, *tb;
	PyErr_Fetch(&t, &v, &tb);
	ShClient *c = w->tensor->obj->client;
	if (!sh_py_client_foreign(c)) {
		sh_py_client_lock(c);
		w->inner->deleter(w->inner);
		pthread_mutex_unlock(&c->mu);
	}
	Py_DECREF(w->tensor);
	PyMem_RawFree(w);
	PyErr_Restore(t, v, tb);
	PyGILState_Release(g);
}

static void capsule_gone(PyObject *cap)
{
	/* renamed "used_dltensor" by a consumer that took it: theirs to free */
	if (PyCapsule_IsValid(cap, "dltensor")) {
		DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
		m->deleter(m);
	}
}

static PyObject *tensor_dlpack(ShTensor *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
	PyObject *stream = Py_None, *maxv = Py_None, *dev = Py_None, *copy = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream, &maxv,
					 &dev, &copy))
		return NULL;
	if (stream != Py_None)
		return sh_py_raisef(ShInvalidInput, SHOAL_EINVAL,
				    "stream must be None for a CPU tensor");
	if (copy == Py_True)
		return sh_py_raisef(ShInvalidInput, SHOAL_ENOTSUP,
				    "a shoal tensor is exported without a copy (copy=True asked)");
	ShObject *o = self->obj;
	ShClient *c = o->client;
	if (sh_py_client_foreign(c))
		return sh_py_raisef(
			ShClosed, SHOAL_ECLOSED,
			"this tensor's connection was made by process %ld before a fork: "
			"connect again in the child",
			(long)c->pid);
	if (!o->o)
		return sh_py_raisef(ShClosed, SHOAL_ECLOSED, "object %llu was released",
				    (unsigned long long)o->id);
	dl_wrap *w = PyMem_RawMalloc(sizeof(*w));
	if (!w)
		return PyErr_NoMemory();
	/* the C reference count is the connection's: change it under its mutex */
	sh_py_client_lock(c);
	int rc = shoal_node_dlpack(o->o, self->node, &w->inner);
	pthread_mutex_unlock(&c->mu);
	if (rc) {
		PyMem_RawFree(w);
		return sh_py_raisef(
			ShInvalidInput, rc, "a %s tensor cannot be exported by DLPack %s",
			shoal_dtype_name(self->t.dtype),
			rc == SHOAL_ENOTSUP ? "0.6 (it has no 8-bit float): use the raw "
					      "bytes with Object.blob()"
					    : sh_py_strerror(rc));
	}
	w->m.dl_tensor = w->inner->dl_tensor;
	if (!w->m.dl_tensor.data)
		w->m.dl_tensor.data = empty_buf;
	w->m.manager_ctx = w;
	w->m.deleter = dl_wrap_delete;
	w->tensor = (ShTensor *)Py_NewRef(self);
	PyObject *cap = PyCapsule_New(&w->m, "dltensor", capsule_gone);
	if (!cap)
		dl_wrap_delete(&w->m);
	return cap;
}

static PyObject *tensor_dlpack_device(ShTensor *self, PyObject *unused)
{
	return Py_BuildValue("(ii)", (int)kDLCPU, 0);
}

static PyObject *int_tuple(const int64_t *v, int n)
{
	PyObject *t = PyTuple_New(n);
	for (int i = 0; t && i < n; i++) {
		PyObject *x = PyLong_FromLongLong(v[i]);
		if (!x) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, i, x);
	}
	return t;
}

static PyObject *tensor_get_dtype(ShTensor *self, void *unused)
{
	return PyUnicode_FromString(shoal_dtype_name(self->t.dtype));
}

static PyObject *tensor_get_shape(ShTensor *self, void *unused)
{
	return int_tuple(self->t.shape, self->t.ndim);
}

static PyObject *tensor_get_strides(ShTensor *self, void *unused)
{
	return int_tuple(self->t.strides, self->t.ndim);
}

static PyObject *tensor_get_ndim(ShTensor *self, void *unused)
{
	return PyLong_FromLong(self->t.ndim);
}

static PyObject *tensor_get_nbytes(ShTensor *self, void *unused)
{
	return PyLong_FromSize_t(self->t.nbytes);
}

static PyObject *tensor_get_object(ShTensor *self, void *unused)
{
	return Py_NewRef(self->obj);
}

static PyObject *tensor_get_address(ShTensor *self, void *unused)
{
	return PyLong_FromVoidPtr((void *)self->t.data);
}

static PyObject *tensor_repr(ShTensor *self)
{
	PyObject *shape = tensor_get_shape(self, NULL);
	if (!shape)
		return NULL;
	PyObject *r = PyUnicode_FromFormat("<shoal._shoal.Tensor %s %R of object %llu>",
					   shoal_dtype_name(self->t.dtype), shape,
					   (unsigned long long)self->obj->id);
	Py_DECREF(shape);
	return r;
}

static PyMethodDef tensor_methods[] = {
	{"__dlpack__", KW tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
	 "__dlpack__(stream=None) -> PyCapsule\n\nA DLPack 0.6 capsule of this memory (no copy)."},
	{"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
	 "__dlpack_device__() -> (1, 0): the CPU."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef tensor_getset[] = {
	{"dtype", (getter)tensor_get_dtype, NULL, "The store's dtype name (F32, BF16, ...).", NULL},
	{"shape", (getter)tensor_get_shape, NULL, "The shape, a tuple of ints.", NULL},
	{"strides", (getter)tensor_get_strides, NULL, "The strides, in elements.", NULL},
	{"ndim", (getter)tensor_get_ndim, NULL, "The number of dimensions.", NULL},
	{"nbytes", (getter)tensor_get_nbytes, NULL, "Bytes of its data.", NULL},
	{"object", (getter)tensor_get_object, NULL, "The Object it is a view of.", NULL},
	{"_address", (getter)tensor_get_address, NULL, "Its data's address (for tests).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShTensor_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Tensor",
	.tp_basicsize = sizeof(ShTensor),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "A read-only, zero-copy view of a tensor in the store: the buffer protocol "
		  "(numpy) and DLPack (torch).",
	.tp_dealloc = (destructor)tensor_dealloc,
	.tp_traverse = (traverseproc)tensor_traverse,
	.tp_repr = (reprfunc)tensor_repr,
	.tp_as_buffer = &tensor_as_buffer,
	.tp_methods = tensor_methods,
	.tp_getset = tensor_getset,
};

/* ---- Blob ---- */

PyObject *sh_py_blob_new(ShObject *o, const void *data, size_t size)
{
	if (size > (size_t)PY_SSIZE_T_MAX)
		return sh_py_raisef(ShInvalidInput, SHOAL_EOVERFLOW, "a blob of %zu bytes", size);
	ShBlob *self = PyObject_GC_New(ShBlob, &ShBlob_Type);
	if (!self)
		return NULL;
	self->obj = (ShObject *)Py_NewRef(o);
	PyObject_GC_Track(self);
	o->views++;
	self->data = data;
	self->size = size;
	return (PyObject *)self;
}

static int blob_traverse(ShBlob *self, visitproc visit, void *arg)
{
	Py_VISIT(self->obj);
	return 0;
}

static void blob_dealloc(ShBlob *self)
{
	PyObject_GC_UnTrack(self);
	view_drop(&self->obj);
	PyObject_GC_Del(self);
}

static int blob_getbuffer(ShBlob *self, Py_buffer *v, int flags)
{
	return PyBuffer_FillInfo(v, (PyObject *)self, self->data ? (void *)self->data : empty_buf,
				 (Py_ssize_t)self->size, 1, flags);
}

static PyBufferProcs blob_as_buffer = {
	.bf_getbuffer = (getbufferproc)blob_getbuffer,
};

static PyObject *blob_get_nbytes(ShBlob *self, void *unused)
{
	return PyLong_FromSize_t(self->size);
}

static PyObject *blob_get_object(ShBlob *self, void *unused)
{
	return Py_NewRef(self->obj);
}

static PyObject *blob_get_address(ShBlob *self, void *unused)
{
	return PyLong_FromVoidPtr((void *)self->data);
}

static Py_ssize_t blob_len(ShBlob *self)
{
	return (Py_ssize_t)self->size;
}

static PySequenceMethods blob_as_sequence = {
	.sq_length = (lenfunc)blob_len,
};

static PyGetSetDef blob_getset[] = {
	{"nbytes", (getter)blob_get_nbytes, NULL, "Its size in bytes.", NULL},
	{"object", (getter)blob_get_object, NULL, "The Object it is a view of.", NULL},
	{"_address", (getter)blob_get_address, NULL, "Its data's address (for tests).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ShBlob_Type = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shoal._shoal.Blob",
	.tp_basicsize = sizeof(ShBlob),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "A read-only, zero-copy view of a blob's bytes (the buffer protocol).",
	.tp_dealloc = (destructor)blob_dealloc,
	.tp_traverse = (traverseproc)blob_traverse,
	.tp_as_buffer = &blob_as_buffer,
	.tp_as_sequence = &blob_as_sequence,
	.tp_getset = blob_getset,
};

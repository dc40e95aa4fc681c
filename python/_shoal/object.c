/* shoal._shoal: Object (a got object), Tensor and Blob (zero-copy views
 * of its memory). A view holds its Object, which holds its Client, so the
 * store's reference and the mapping outlive every array, buffer and DLPack
 * capsule made from them; Object.release() waits for the last view. */
#include "module.h"

#include <dlpack/dlpack.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

/* Sized to its dimensions: a dict of a thousand tensors makes a thousand
 * of these, and every fresh page of them is a fault (7-14 us on a VM). */
typedef struct {
	PyObject_VAR_HEAD ShObject *obj;
	const shoal_node *node;
	const void *data;
	size_t nbytes;
	shoal_dtype dtype;
	int ndim;
	char fmt[2];	   /* "" when the dtype has no struct format */
	Py_ssize_t dims[]; /* shape, then strides in bytes (the buffer protocol's) */
} ShTensor;

typedef struct {
	PyObject_HEAD ShObject *obj;
	const void *data;
	size_t size;
} ShBlob;

/* What a zero-byte buffer points at: consumers want a non-NULL pointer. */
char sh_py_empty_buf[1];

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

static PyObject *object_cow(ShObject *self, PyObject *unused)
{
	if (live(self) != 0)
		return NULL;
	if (!self->client) /* a remote store's: its bytes are this process's own */
		return Py_NewRef(self);
	return sh_py_object_cow(self);
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

static PyObject *object_dlpack_dict(ShObject *self, PyObject *args, PyObject *kw);

static PyMethodDef object_methods[] = {
	{"fields", (PyCFunction)object_fields, METH_NOARGS,
	 "fields() -> dict\n\nThe root's fields: int, float, bool, str or list[int]."},
	{"tensor", (PyCFunction)object_tensor, METH_NOARGS,
	 "tensor() -> Tensor\n\nThe object, a tensor, as a zero-copy read-only view."},
	{"tensors", (PyCFunction)object_tensors, METH_NOARGS,
	 "tensors() -> list[tuple[str, Tensor]]\n\nThe members of a tensor_dict, in order."},
	{"dlpack_dict", KW object_dlpack_dict, METH_VARARGS | METH_KEYWORDS,
	 "dlpack_dict(convert, convert_bool=None, refuse=None) -> dict\n\nThe members of a "
	 "tensor_dict as {name: convert(capsule)}, each capsule a zero-copy DLPack 0.6 view "
	 "(convert_bool for bool members, which DLPack 0.6 carries as uint8): "
	 "torch.utils.dlpack.from_dlpack makes a dict of torch tensors. refuse maps dtype "
	 "names the consumer cannot take to why (InvalidInput, before any is converted). The "
	 "views share one allocation and hold the object until the last goes."},
	{"blob", KW object_blob, METH_VARARGS | METH_KEYWORDS,
	 "blob(i=0) -> Blob\n\nThe root's i-th blob as read-only bytes."},
	{"cow", (PyCFunction)object_cow, METH_NOARGS,
	 "cow() -> Object\n\nA copy-on-write view of the object: the same bytes mapped again, "
	 "privately and writable. A write makes the pages it touches this view's own; the "
	 "object, its other views and other processes keep the sealed bytes. Release both."},
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

char sh_py_struct_format(shoal_dtype dt)
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
	Py_ssize_t strides[SHOAL_TENSOR_MAX_DIMS];
	for (int i = 0; i < t.ndim; i++) {
		int64_t b;
		/* a shape with a zero dimension can have huge others */
		if (__builtin_mul_overflow(t.strides[i], (int64_t)isz, &b) || t.shape[i] < 0)
			return sh_py_raisef(ShInvalidInput, SHOAL_EOVERFLOW,
					    "object %llu: a tensor whose strides overflow",
					    (unsigned long long)o->id);
		strides[i] = (Py_ssize_t)b;
	}
	ShTensor *self = PyObject_GC_NewVar(ShTensor, &ShTensor_Type, 2 * t.ndim);
	if (!self)
		return NULL;
	self->obj = (ShObject *)Py_NewRef(o);
	o->views++;
	self->node = n;
	self->data = t.data;
	self->nbytes = t.nbytes;
	self->dtype = t.dtype;
	self->ndim = t.ndim;
	self->fmt[0] = sh_py_struct_format(t.dtype);
	self->fmt[1] = 0;
	for (int i = 0; i < t.ndim; i++) {
		self->dims[i] = (Py_ssize_t)t.shape[i];
		self->dims[t.ndim + i] = strides[i];
	}
	PyObject_GC_Track(self);
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

int sh_py_tensor_buffer(Py_buffer *v, PyObject *owner, const void *data, size_t nbytes,
			shoal_dtype dt, int ndim, Py_ssize_t *dims, char *fmt, bool readonly,
			int flags)
{
	if (!fmt[0]) {
		sh_py_raisef(ShInvalidInput, SHOAL_ENOTSUP,
			     "a %s tensor has no buffer format (numpy has no such dtype): read it "
			     "through torch (DLPack), or its raw bytes with Object.blob()",
			     shoal_dtype_name(dt));
		v->obj = NULL;
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && readonly) {
		PyErr_SetString(PyExc_BufferError, "this tensor is read-only");
		v->obj = NULL;
		return -1;
	}
	v->buf = data ? (void *)data : sh_py_empty_buf;
	v->obj = Py_NewRef(owner);
	v->len = (Py_ssize_t)nbytes;
	v->readonly = readonly;
	v->itemsize = (Py_ssize_t)shoal_dtype_size(dt);
	v->format = (flags & PyBUF_FORMAT) ? fmt : NULL;
	v->ndim = ndim;
	v->shape = (flags & PyBUF_ND) ? dims : NULL;
	v->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims + ndim : NULL;
	v->suboffsets = NULL;
	v->internal = NULL;
	return 0;
}

static int tensor_getbuffer(ShTensor *self, Py_buffer *v, int flags)
{
	return sh_py_tensor_buffer(v, (PyObject *)self, self->data, self->nbytes, self->dtype,
				   self->ndim, self->dims, self->fmt, true, flags);
}

static PyBufferProcs tensor_as_buffer = {
	.bf_getbuffer = (getbufferproc)tensor_getbuffer,
};

/* ---- DLPack ----
 * A capsule's DLManagedTensor borrows the store's memory and holds a
 * Python reference that keeps the Object (hence its store reference and
 * mapping) alive until the consumer's deleter runs, on any thread: the
 * deleter takes the GIL for that reference and nothing else. */

/* One tensor's (Tensor.__dlpack__): holds the Tensor. */
typedef struct {
	DLManagedTensor m;
	ShTensor *tensor;
	int64_t dims[]; /* shape, strides */
} dl_one;

static void dl_one_delete(DLManagedTensor *m)
{
	dl_one *w = m->manager_ctx;
	if (_Py_IsFinalizing())
		return; /* the interpreter is going: so is the process */
	PyGILState_STATE g = PyGILState_Ensure();
	Py_DECREF(w->tensor);
	PyMem_RawFree(w);
	PyGILState_Release(g);
}

void sh_py_capsule_gone(PyObject *cap)
{
	/* renamed "used_dltensor" by a consumer that took it: theirs to free */
	if (PyCapsule_IsValid(cap, "dltensor")) {
		DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
		m->deleter(m);
	}
}

/* A DLPack refusal in the user's words. */
static PyObject *dl_refused(shoal_dtype dt, int rc)
{
	return sh_py_raisef(ShInvalidInput, rc, "a %s tensor cannot be exported by DLPack %s",
			    shoal_dtype_name(dt),
			    rc == SHOAL_ENOTSUP ? "0.6 (it has no 8-bit float): use the raw "
						  "bytes with Object.blob()"
						: sh_py_strerror(rc));
}

/* The capsule of m, whose deleter runs if no consumer takes it. */
static PyObject *dl_capsule(DLManagedTensor *m)
{
	if (!m->dl_tensor.data)
		m->dl_tensor.data = sh_py_empty_buf; /* consumers want a pointer */
	PyObject *cap = PyCapsule_New(m, "dltensor", sh_py_capsule_gone);
	if (!cap)
		m->deleter(m);
	return cap;
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
	if (sh_py_client_foreign(o->client))
		return sh_py_raisef(
			ShClosed, SHOAL_ECLOSED,
			"this tensor's connection was made by process %ld before a fork: "
			"connect again in the child",
			(long)o->client->pid);
	if (!o->o)
		return sh_py_raisef(ShClosed, SHOAL_ECLOSED, "object %llu was released",
				    (unsigned long long)o->id);
	dl_one *w = PyMem_RawMalloc(sizeof(*w) + 2 * (size_t)self->ndim * sizeof(int64_t));
	if (!w)
		return PyErr_NoMemory();
	int rc = shoal_node_dlpack_fill(self->node, &w->m, w->dims, w->dims + self->ndim);
	if (rc) {
		PyMem_RawFree(w);
		return dl_refused(self->dtype, rc);
	}
	w->m.manager_ctx = w;
	w->m.deleter = dl_one_delete;
	w->tensor = (ShTensor *)Py_NewRef(self);
	return dl_capsule(&w->m);
}

/* A tensor_dict's (Object.dlpack_dict): one allocation for all its
 * members, which holds the Object as one of its views until the last
 * member's deleter runs. */
typedef struct {
	ShObject *obj;
	atomic_size_t live; /* members not yet deleted, +1 while being made */
} dl_slab;

static void dl_slab_unref(dl_slab *s, size_t k)
{
	if (atomic_fetch_sub(&s->live, k) != k)
		return;
	if (_Py_IsFinalizing())
		return;
	PyGILState_STATE g = PyGILState_Ensure();
	view_drop(&s->obj);
	PyMem_RawFree(s);
	PyGILState_Release(g);
}

static void dl_slab_delete(DLManagedTensor *m)
{
	dl_slab_unref(m->manager_ctx, 1);
}

static PyObject *object_dlpack_dict(ShObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"convert", "convert_bool", "refuse", NULL};
	PyObject *convert, *convert_bool = Py_None, *refuse = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:dlpack_dict", kwlist, &convert,
					 &convert_bool, &refuse) ||
	    live(self) != 0 || is_type(self, "tensor_dict") != 0)
		return NULL;
	if (convert_bool == Py_None)
		convert_bool = convert;
	if (refuse != Py_None && !PyDict_Check(refuse))
		return PyErr_Format(PyExc_TypeError, "refuse: expected a dict, got %.100s",
				    Py_TYPE(refuse)->tp_name);
	const shoal_node *r = shoal_object_root(self->o);
	size_t n = shoal_node_nmembers(r), dims = 0;
	shoal_tensor t;
	for (size_t i = 0; i < n; i++) {
		const char *name;
		int rc = shoal_node_tensor(shoal_node_member(r, i, &name), &t);
		if (rc)
			return sh_py_raisef(ShInvalidInput, rc,
					    "object %llu: member '%.300s' is not a readable tensor",
					    (unsigned long long)self->id, name);
		PyObject *why = refuse != Py_None
					? PyDict_GetItemString(refuse, shoal_dtype_name(t.dtype))
					: NULL;
		const char *w = why && PyUnicode_Check(why) ? PyUnicode_AsUTF8(why) : NULL;
		if (why)
			return sh_py_raisef(ShInvalidInput, SHOAL_ENOTSUP,
					    "tensor '%.300s' (%s): %.300s", name,
					    shoal_dtype_name(t.dtype), w ? w : "refused");
		dims += (size_t)t.ndim;
	}
	size_t each = sizeof(DLManagedTensor);
	dl_slab *slab = PyMem_RawMalloc(sizeof(dl_slab) + n * each + 2 * dims * sizeof(int64_t));
	if (!slab)
		return PyErr_NoMemory();
	DLManagedTensor *ms = (DLManagedTensor *)(slab + 1);
	int64_t *d = (int64_t *)(ms + n);
	slab->obj = (ShObject *)Py_NewRef(self);
	self->views++;
	atomic_init(&slab->live, n + 1);
	/* at its final size at once: no table rebuilt (and faulted in) 11 times */
	PyObject *out = _PyDict_NewPresized((Py_ssize_t)n);
	size_t made = 0;
	for (; out && made < n; made++) {
		const char *name;
		const shoal_node *m = shoal_node_member(r, made, &name);
		shoal_node_tensor(m, &t);
		DLManagedTensor *x = &ms[made];
		int rc = shoal_node_dlpack_fill(m, x, d, d + t.ndim);
		if (rc) {
			dl_refused(t.dtype, rc);
			Py_CLEAR(out);
			break;
		}
		d += 2 * t.ndim;
		x->manager_ctx = slab;
		x->deleter = dl_slab_delete;
		PyObject *cap = dl_capsule(x);
		PyObject *v = cap ? PyObject_CallOneArg(
					    t.dtype == SHOAL_DT_BOOL ? convert_bool : convert, cap)
				  : NULL;
		Py_XDECREF(cap);
		if (!v || PyDict_SetItemString(out, name, v) != 0) {
			Py_XDECREF(v);
			Py_CLEAR(out);
			made++; /* its capsule ran or will run its deleter */
			break;
		}
		Py_DECREF(v);
	}
	/* the members never made, and the one held while making */
	dl_slab_unref(slab, n - made + 1);
	return out;
}

static PyObject *tensor_dlpack_device(ShTensor *self, PyObject *unused)
{
	return Py_BuildValue("(ii)", (int)kDLCPU, 0);
}

static PyObject *int_tuple(const Py_ssize_t *v, int n)
{
	PyObject *t = PyTuple_New(n);
	for (int i = 0; t && i < n; i++) {
		PyObject *x = PyLong_FromSsize_t(v[i]);
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
	return PyUnicode_FromString(shoal_dtype_name(self->dtype));
}

static PyObject *tensor_get_shape(ShTensor *self, void *unused)
{
	return int_tuple(self->dims, self->ndim);
}

static PyObject *tensor_get_strides(ShTensor *self, void *unused)
{
	Py_ssize_t isz = (Py_ssize_t)shoal_dtype_size(self->dtype), el[SHOAL_TENSOR_MAX_DIMS];
	for (int i = 0; i < self->ndim; i++)
		el[i] = self->dims[self->ndim + i] / isz;
	return int_tuple(el, self->ndim);
}

static PyObject *tensor_get_ndim(ShTensor *self, void *unused)
{
	return PyLong_FromLong(self->ndim);
}

static PyObject *tensor_get_nbytes(ShTensor *self, void *unused)
{
	return PyLong_FromSize_t(self->nbytes);
}

static PyObject *tensor_get_object(ShTensor *self, void *unused)
{
	return Py_NewRef(self->obj);
}

static PyObject *tensor_get_address(ShTensor *self, void *unused)
{
	return PyLong_FromVoidPtr((void *)self->data);
}

static PyObject *tensor_repr(ShTensor *self)
{
	PyObject *shape = tensor_get_shape(self, NULL);
	if (!shape)
		return NULL;
	PyObject *r = PyUnicode_FromFormat("<shoal._shoal.Tensor %s %R of object %llu>",
					   shoal_dtype_name(self->dtype), shape,
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
	.tp_basicsize = offsetof(ShTensor, dims),
	.tp_itemsize = sizeof(Py_ssize_t),
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
	return PyBuffer_FillInfo(v, (PyObject *)self,
				 self->data ? (void *)self->data : sh_py_empty_buf,
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

/* RPC values: constructors into a vbuf (a bump arena), a tensor's
 * DLPack view, and comparing and copying trees. Strings get a NUL after
 * their bytes, so C code can use them as they are. How values go on the
 * wire is value_wire.c; the vbuf and sharing, vbuf.c. */
#include "rpc/value.h"
#include "store/client.h"

#include <dlpack/dlpack.h>
#include <string.h>

/* Tensors and blobs: data that a shared call passes by reference. */
bool sh_value_by_ref(const shoal_value *v)
{
	return v->type == SHOAL_V_TENSOR || v->type == SHOAL_V_BLOB;
}

bool sh_value_needs_share(const shoal_value *v)
{
	if (sh_value_by_ref(v))
		return v->v.t.obj == 0;
	if (v->type != SHOAL_V_ARRAY && v->type != SHOAL_V_MAP)
		return false;
	size_t k = v->type == SHOAL_V_MAP ? 2 * (size_t)v->n : v->n;
	for (size_t i = 0; i < k; i++)
		if (sh_value_needs_share(&v->v.items[i]))
			return true;
	return false;
}

shoal_value *sh_value_clone(shoal_vbuf *b, const shoal_value *v)
{
	shoal_value *c = sh_bump_alloc(&b->a, sizeof(*c));
	if (!c)
		return NULL;
	*c = *v;
	if (v->type == SHOAL_V_ARRAY || v->type == SHOAL_V_MAP) {
		size_t k = v->type == SHOAL_V_MAP ? 2 * (size_t)v->n : v->n;
		c->v.items = k ? sh_bump_alloc(&b->a, k * sizeof(shoal_value)) : NULL;
		if (k && !c->v.items)
			return NULL;
		for (size_t i = 0; i < k; i++) {
			shoal_value *x = sh_value_clone(b, &v->v.items[i]);
			if (!x)
				return NULL;
			c->v.items[i] = *x;
		}
	}
	return c;
}

static shoal_value *node(shoal_vbuf *b, shoal_vtype t)
{
	shoal_value *v = sh_bump_alloc(&b->a, sizeof(*v));
	if (!v) {
		b->err = SHOAL_ENOMEM;
		return NULL;
	}
	v->type = t;
	return v;
}

shoal_value *shoal_v_nil(shoal_vbuf *b)
{
	return node(b, SHOAL_V_NIL);
}

shoal_value *shoal_v_bool(shoal_vbuf *b, bool x)
{
	shoal_value *v = node(b, SHOAL_V_BOOL);
	if (v)
		v->v.b = x;
	return v;
}

shoal_value *shoal_v_int(shoal_vbuf *b, int64_t x)
{
	shoal_value *v = node(b, SHOAL_V_INT);
	if (v)
		v->v.i = x;
	return v;
}

shoal_value *shoal_v_float(shoal_vbuf *b, double x)
{
	shoal_value *v = node(b, SHOAL_V_FLOAT);
	if (v)
		v->v.f = x;
	return v;
}

static shoal_value *blob(shoal_vbuf *b, shoal_vtype t, const void *p, size_t len)
{
	if (len > UINT32_MAX || (!p && len)) {
		b->err = SHOAL_EINVAL;
		return NULL;
	}
	shoal_value *v = node(b, t);
	char *copy = v ? sh_bump_alloc_raw(&b->a, len + 1) : NULL;
	if (!copy) {
		b->err = SHOAL_ENOMEM;
		return NULL;
	}
	if (len)
		memcpy(copy, p, len);
	copy[len] = 0;
	v->n = (uint32_t)len;
	v->v.s = copy;
	return v;
}

shoal_value *shoal_v_str(shoal_vbuf *b, const char *s, size_t len)
{
	return blob(b, SHOAL_V_STR, s, len);
}

shoal_value *shoal_v_cstr(shoal_vbuf *b, const char *s)
{
	return blob(b, SHOAL_V_STR, s, s ? strlen(s) : 0);
}

shoal_value *shoal_v_bytes(shoal_vbuf *b, const void *p, size_t len)
{
	return blob(b, SHOAL_V_BYTES, p, len);
}

static shoal_value *tensor(shoal_vbuf *b, shoal_vtype type, shoal_dtype dt, int ndim,
			   const int64_t *shape, const void *data)
{
	size_t bytes = shoal_dtype_size(dt);
	if (bytes == 0 || ndim < 0 || ndim > SHOAL_TENSOR_MAX_DIMS || (ndim && !shape)) {
		b->err = SHOAL_EINVAL;
		return NULL;
	}
	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0 || shoal_mul_size(bytes, (size_t)shape[i], &bytes) != 0) {
			b->err = SHOAL_EINVAL;
			return NULL;
		}
	if (bytes && !data) {
		b->err = SHOAL_EINVAL;
		return NULL;
	}
	shoal_value *v = node(b, type);
	int64_t *sh = v ? sh_bump_alloc(&b->a, (size_t)ndim * 8 + 8) : NULL;
	if (!sh) {
		b->err = SHOAL_ENOMEM;
		return NULL;
	}
	if (ndim)
		memcpy(sh, shape, (size_t)ndim * 8);
	v->v.t.dtype = dt;
	v->v.t.ndim = ndim;
	v->v.t.shape = sh;
	v->v.t.data = data;
	v->v.t.nbytes = bytes;
	return v;
}

shoal_value *shoal_v_tensor(shoal_vbuf *b, shoal_dtype dt, int ndim, const int64_t *shape,
			    const void *data)
{
	return tensor(b, SHOAL_V_TENSOR, dt, ndim, shape, data);
}

shoal_value *shoal_v_blob(shoal_vbuf *b, const void *data, size_t len)
{
	if (len > INT64_MAX) {
		b->err = SHOAL_EINVAL;
		return NULL;
	}
	int64_t n = (int64_t)len;
	return tensor(b, SHOAL_V_BLOB, SHOAL_DT_U8, 1, &n, data);
}

typedef struct v_dl {
	DLManagedTensor m;
	int64_t shape[SHOAL_TENSOR_MAX_DIMS], strides[SHOAL_TENSOR_MAX_DIMS];
} v_dl;

static void v_dl_delete(DLManagedTensor *m)
{
	SH_DELETE((v_dl *)m->manager_ctx);
}

int shoal_v_dlpack(const shoal_value *v, DLManagedTensor **out)
{
	if (!v || !out || !sh_value_by_ref(v))
		return SHOAL_EINVAL;
	v_dl *d = SH_NEW(v_dl);
	if (!d)
		return SHOAL_ENOMEM;
	int rc = sh_dlpack_dtype(v->v.t.dtype, &d->m.dl_tensor.dtype);
	if (rc) {
		SH_DELETE(d);
		return rc;
	}
	int64_t stride = 1;
	for (int i = v->v.t.ndim - 1; i >= 0; i--) {
		d->shape[i] = v->v.t.shape[i];
		d->strides[i] = stride;
		/* a shape with a zero dimension can have huge others */
		if (__builtin_mul_overflow(stride, d->shape[i] ? d->shape[i] : 1, &stride)) {
			SH_DELETE(d);
			return SHOAL_EOVERFLOW;
		}
	}
	d->m.manager_ctx = d;
	d->m.deleter = v_dl_delete;
	d->m.dl_tensor.data = (void *)v->v.t.data;
	d->m.dl_tensor.device = (DLDevice){kDLCPU, 0};
	d->m.dl_tensor.ndim = v->v.t.ndim;
	d->m.dl_tensor.shape = d->shape;
	d->m.dl_tensor.strides = d->strides;
	*out = &d->m;
	return 0;
}

static shoal_value *container(shoal_vbuf *b, shoal_vtype t, uint32_t n, size_t slots)
{
	shoal_value *v = node(b, t);
	if (!v)
		return NULL;
	v->n = n;
	if (slots && !(v->v.items = sh_bump_alloc(&b->a, slots * sizeof(shoal_value)))) {
		b->err = SHOAL_ENOMEM;
		return NULL;
	}
	return v; /* zeroed slots are nil */
}

shoal_value *shoal_v_array(shoal_vbuf *b, uint32_t n)
{
	return container(b, SHOAL_V_ARRAY, n, n);
}

shoal_value *shoal_v_map(shoal_vbuf *b, uint32_t n)
{
	return container(b, SHOAL_V_MAP, n, (size_t)n * 2);
}

int shoal_v_set(shoal_value *a, uint32_t i, const shoal_value *v)
{
	if (!a || !v || a->type != SHOAL_V_ARRAY || i >= a->n)
		return SHOAL_EINVAL;
	a->v.items[i] = *v;
	return 0;
}

int shoal_v_map_set(shoal_value *m, uint32_t i, const shoal_value *k, const shoal_value *v)
{
	if (!m || !k || !v || m->type != SHOAL_V_MAP || i >= m->n)
		return SHOAL_EINVAL;
	m->v.items[2 * i] = *k;
	m->v.items[2 * i + 1] = *v;
	return 0;
}

const shoal_value *shoal_v_map_get(const shoal_value *m, const char *key)
{
	if (!m || m->type != SHOAL_V_MAP || !key)
		return NULL;
	size_t kl = strlen(key);
	for (uint32_t i = 0; i < m->n; i++) {
		const shoal_value *k = &m->v.items[2 * i];
		if (k->type == SHOAL_V_STR && k->n == kl && memcmp(k->v.s, key, kl) == 0)
			return &m->v.items[2 * i + 1];
	}
	return NULL;
}

bool shoal_v_equal(const shoal_value *a, const shoal_value *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case SHOAL_V_NIL:
		return true;
	case SHOAL_V_BOOL:
		return a->v.b == b->v.b;
	case SHOAL_V_INT:
		return a->v.i == b->v.i;
	case SHOAL_V_FLOAT:
		return memcmp(&a->v.f, &b->v.f, sizeof(double)) == 0;
	case SHOAL_V_STR:
	case SHOAL_V_BYTES:
		return a->n == b->n && memcmp(a->v.s, b->v.s, a->n) == 0;
	case SHOAL_V_TENSOR:
	case SHOAL_V_BLOB:
		if (a->v.t.dtype != b->v.t.dtype || a->v.t.ndim != b->v.t.ndim ||
		    a->v.t.nbytes != b->v.t.nbytes)
			return false;
		for (int i = 0; i < a->v.t.ndim; i++)
			if (a->v.t.shape[i] != b->v.t.shape[i])
				return false;
		return a->v.t.nbytes == 0 || memcmp(a->v.t.data, b->v.t.data, a->v.t.nbytes) == 0;
	case SHOAL_V_ARRAY:
	case SHOAL_V_MAP: {
		if (a->n != b->n)
			return false;
		size_t k = a->type == SHOAL_V_MAP ? 2 * (size_t)a->n : a->n;
		for (size_t i = 0; i < k; i++)
			if (!shoal_v_equal(&a->v.items[i], &b->v.items[i]))
				return false;
		return true;
	}
	}
	return false;
}

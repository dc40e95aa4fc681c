/* Store clients: the read side of metadata trees (builders share the
 * accessors) and their DLPack views, each holding the object it views. */
#include "store/client.h"

#include <dlpack/dlpack.h>
#include <string.h>

/* ---- nodes (read side; builders share the accessors) ---- */

const char *shoal_node_type(const shoal_node *n)
{
	return n->type;
}

size_t shoal_node_nfields(const shoal_node *n)
{
	return n->nfields;
}

const char *shoal_node_field_name(const shoal_node *n, size_t i)
{
	return i < n->nfields ? n->fields[i].key : NULL;
}

static int field(const shoal_node *n, const char *key, int kind, const sh_field **f)
{
	if (!n || !key)
		return SHOAL_EINVAL;
	*f = sh_node_field(n, key);
	if (!*f)
		return SHOAL_ENOENT;
	return (*f)->kind == kind ? 0 : SHOAL_EINVAL;
}

int shoal_node_get_int(const shoal_node *n, const char *key, int64_t *v)
{
	const sh_field *f;
	int rc = field(n, key, SH_F_INT, &f);
	if (rc == 0)
		*v = f->v.i;
	return rc;
}

int shoal_node_get_float(const shoal_node *n, const char *key, double *v)
{
	const sh_field *f;
	int rc = field(n, key, SH_F_FLOAT, &f);
	if (rc == 0)
		*v = f->v.f;
	return rc;
}

int shoal_node_get_bool(const shoal_node *n, const char *key, bool *v)
{
	const sh_field *f;
	int rc = field(n, key, SH_F_BOOL, &f);
	if (rc == 0)
		*v = f->v.b;
	return rc;
}

int shoal_node_get_str(const shoal_node *n, const char *key, const char **v, size_t *len)
{
	const sh_field *f;
	int rc = field(n, key, SH_F_STR, &f);
	if (rc == 0) {
		*v = f->v.s;
		if (len)
			*len = f->n;
	}
	return rc;
}

int shoal_node_get_ints(const shoal_node *n, const char *key, int64_t *v, size_t max, size_t *count)
{
	const sh_field *f;
	int rc = field(n, key, SH_F_INTS, &f);
	if (rc)
		return rc;
	*count = f->n;
	if (f->n > max)
		return SHOAL_ERANGE;
	if (f->n) /* an empty list (a 0-d tensor's shape) into no buffer */
		memcpy(v, f->v.ints, f->n * sizeof(int64_t));
	return 0;
}

size_t shoal_node_nmembers(const shoal_node *n)
{
	return n->nmembers;
}

const shoal_node *shoal_node_member(const shoal_node *n, size_t i, const char **name)
{
	if (i >= n->nmembers)
		return NULL;
	if (name)
		*name = n->names[i];
	return n->members[i];
}

const shoal_node *shoal_node_find(const shoal_node *n, const char *name)
{
	if (n->order) {
		/* decoded trees keep their members sorted by name */
		size_t lo = 0, hi = n->nmembers;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			int c = strcmp(n->names[n->order[mid]], name);
			if (c == 0)
				return n->members[n->order[mid]];
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		return NULL;
	}
	for (uint32_t i = 0; i < n->nmembers; i++)
		if (strcmp(n->names[i], name) == 0)
			return n->members[i];
	return NULL;
}

size_t shoal_node_nblobs(const shoal_node *n)
{
	return n->nblobs;
}

int shoal_node_blob(const shoal_node *n, size_t i, const void **data, size_t *size)
{
	if (i >= n->nblobs)
		return SHOAL_ERANGE;
	*data = n->blobs[i].ptr ? n->blobs[i].ptr : n->blobs[i].inline_data;
	*size = n->blobs[i].size;
	return 0;
}

int shoal_node_tensor(const shoal_node *n, shoal_tensor *t)
{
	if (strcmp(n->type, "tensor") != 0)
		return SHOAL_EINVAL;
	char why[160];
	int rc = sh_node_check_types(n, why, sizeof(why));
	if (rc)
		return rc;
	const sh_field *dt = sh_node_field(n, "dtype"), *shape = sh_node_field(n, "shape");
	memset(t, 0, sizeof(*t));
	t->dtype = shoal_dtype_from_name(dt->v.s, dt->n);
	t->ndim = (int)shape->n;
	int64_t stride = 1;
	for (int i = t->ndim - 1; i >= 0; i--) {
		t->shape[i] = shape->v.ints[i];
		t->strides[i] = stride;
		/* a shape with a zero dimension can have huge others: a writer
		 * may seal one, and readers stride through it */
		if (__builtin_mul_overflow(stride, t->shape[i] ? t->shape[i] : 1, &stride))
			return SHOAL_EOVERFLOW;
	}
	t->data = n->blobs[0].ptr ? n->blobs[0].ptr : n->blobs[0].inline_data;
	t->nbytes = n->blobs[0].size;
	return 0;
}

/* ---- DLPack ---- */

typedef struct dl_view {
	DLManagedTensor m;
	shoal_object *o;
	int64_t shape[SHOAL_TENSOR_MAX_DIMS], strides[SHOAL_TENSOR_MAX_DIMS];
} dl_view;

static void dl_delete(DLManagedTensor *m)
{
	dl_view *v = m->manager_ctx;
	shoal_object_release(v->o);
	SH_DELETE(v);
}

int sh_dlpack_dtype(shoal_dtype dt, DLDataType *out)
{
	static const struct {
		uint8_t code, bits;
	} map[SHOAL_DT_COUNT] = {
		/* DLPack 0.6 has no bool code; frameworks of its time used uint8 */
		[SHOAL_DT_BOOL] = {kDLUInt, 8},	   [SHOAL_DT_U8] = {kDLUInt, 8},
		[SHOAL_DT_I8] = {kDLInt, 8},	   [SHOAL_DT_U16] = {kDLUInt, 16},
		[SHOAL_DT_I16] = {kDLInt, 16},	   [SHOAL_DT_F16] = {kDLFloat, 16},
		[SHOAL_DT_BF16] = {kDLBfloat, 16}, [SHOAL_DT_U32] = {kDLUInt, 32},
		[SHOAL_DT_I32] = {kDLInt, 32},	   [SHOAL_DT_F32] = {kDLFloat, 32},
		[SHOAL_DT_U64] = {kDLUInt, 64},	   [SHOAL_DT_I64] = {kDLInt, 64},
		[SHOAL_DT_F64] = {kDLFloat, 64},
	};
	if ((unsigned)dt >= SHOAL_DT_COUNT || map[dt].bits == 0)
		return SHOAL_ENOTSUP;
	out->code = map[dt].code;
	out->bits = map[dt].bits;
	out->lanes = 1;
	return 0;
}

int shoal_node_dlpack_fill(const shoal_node *n, DLManagedTensor *m, int64_t *shape,
			   int64_t *strides)
{
	shoal_tensor t;
	int rc = shoal_node_tensor(n, &t);
	if (rc)
		return rc;
	DLTensor *d = &m->dl_tensor;
	if ((rc = sh_dlpack_dtype(t.dtype, &d->dtype)) != 0)
		return rc;
	memcpy(shape, t.shape, (size_t)t.ndim * sizeof(int64_t));
	memcpy(strides, t.strides, (size_t)t.ndim * sizeof(int64_t));
	d->data = (void *)t.data;
	d->device = (DLDevice){kDLCPU, 0};
	d->ndim = t.ndim;
	d->shape = shape;
	d->strides = strides;
	d->byte_offset = 0;
	return 0;
}

int shoal_node_dlpack(shoal_object *o, const shoal_node *n, DLManagedTensor **out)
{
	dl_view *v = SH_NEW(dl_view);
	if (!v)
		return SHOAL_ENOMEM;
	int rc = shoal_node_dlpack_fill(n, &v->m, v->shape, v->strides);
	if (rc) {
		SH_DELETE(v);
		return rc;
	}
	v->o = o;
	o->refs++;
	v->m.manager_ctx = v;
	v->m.deleter = dl_delete;
	*out = &v->m;
	return 0;
}

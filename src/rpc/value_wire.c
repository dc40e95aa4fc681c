/* RPC values on the wire: the msgpack encoder and the strict decoder of
 * outside bytes (fuzz/fuzz_value.c). Strings are checked to be UTF-8 (a
 * Python binding must be able to make a str of every one). Large payloads
 * need not be copied into the body: they go out of band after the frame
 * (sh_oob), or by reference to a store object, which the receiver maps. */
#include "rpc/value.h"
#include "store/client.h"

#include <stdio.h>
#include <string.h>

/* The ext 3 header of a payload out of band, and the payload itself into
 * w's parts. */
static void pack_oob(msgpack_packer *pk, sh_wbuf *w, unsigned kind, const shoal_value *v,
		     const void *p, uint64_t n)
{
	unsigned char head[16 + 8 * SHOAL_TENSOR_MAX_DIMS] = {0};
	size_t hl = 16;
	head[0] = (unsigned char)kind;
	if (kind >= 2) {
		head[1] = (unsigned char)v->v.t.dtype;
		head[2] = (unsigned char)v->v.t.ndim;
		memcpy(head + 16, v->v.t.shape, 8 * (size_t)v->v.t.ndim);
		hl += 8 * (size_t)v->v.t.ndim;
	}
	memcpy(head + 8, &n, 8);
	msgpack_pack_ext(pk, hl, SH_EXT_OOB);
	msgpack_pack_ext_body(pk, head, hl);
	sh_wbuf_oob(w, p, n);
}

/* A payload's bytes in the body: copied, or (ref: the wbuf pk writes to)
 * by reference when large. */
static void pack_body(msgpack_packer *pk, sh_wbuf *ref, const void *p, size_t n)
{
	if (ref && n >= SH_VALUE_REF_MIN)
		sh_wbuf_ref(ref, p, n);
	else if (n)
		msgpack_pack_bin_body(pk, p, n);
}

static void pack(msgpack_packer *pk, const shoal_value *v, shoal_client *shared, sh_wbuf *oob,
		 sh_wbuf *ref)
{
	switch (v->type) {
	case SHOAL_V_NIL:
		msgpack_pack_nil(pk);
		return;
	case SHOAL_V_BOOL:
		v->v.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
		return;
	case SHOAL_V_INT:
		msgpack_pack_int64(pk, v->v.i);
		return;
	case SHOAL_V_FLOAT:
		msgpack_pack_double(pk, v->v.f);
		return;
	case SHOAL_V_STR:
		if (oob && v->n >= SH_VALUE_OOB_MIN) {
			pack_oob(pk, oob, 1, v, v->v.s, v->n);
			return;
		}
		msgpack_pack_str(pk, v->n);
		pack_body(pk, ref, v->v.s, v->n);
		return;
	case SHOAL_V_BYTES:
		if (oob && v->n >= SH_VALUE_OOB_MIN) {
			pack_oob(pk, oob, 0, v, v->v.bytes, v->n);
			return;
		}
		msgpack_pack_bin(pk, v->n);
		pack_body(pk, ref, v->v.bytes, v->n);
		return;
	case SHOAL_V_ARRAY:
		msgpack_pack_array(pk, v->n);
		for (uint32_t i = 0; i < v->n; i++)
			pack(pk, &v->v.items[i], shared, oob, ref);
		return;
	case SHOAL_V_MAP:
		msgpack_pack_map(pk, v->n);
		for (uint32_t i = 0; i < 2 * v->n; i++)
			pack(pk, &v->v.items[i], shared, oob, ref);
		return;
	case SHOAL_V_TENSOR:
	case SHOAL_V_BLOB: {
		/* ext 1: dtype u8, ndim u8, flags u8 (1: a blob), 5 bytes of
		 * padding, shape as int64 little-endian, then the bytes: 8-aligned
		 * within the body */
		unsigned char head[8 + 8 * SHOAL_TENSOR_MAX_DIMS] = {0};
		size_t hl = 8 + 8 * (size_t)v->v.t.ndim;
		head[0] = (unsigned char)v->v.t.dtype;
		head[1] = (unsigned char)v->v.t.ndim;
		head[2] = v->type == SHOAL_V_BLOB;
		memcpy(head + 8, v->v.t.shape, 8 * (size_t)v->v.t.ndim);
		if (shared && v->v.t.obj) {
			/* by reference: the header, the object's id, its blob */
			uint64_t obj[3] = {v->v.t.obj, 0, UINT64_MAX}; /* blob unknown */
			sh_client_blob_of(shared, v->v.t.obj, &obj[1], &obj[2]);
			msgpack_pack_ext(pk, hl + sizeof(obj), SH_EXT_TENSOR_REF);
			msgpack_pack_ext_body(pk, head, hl);
			msgpack_pack_ext_body(pk, obj, sizeof(obj));
			return;
		}
		if (oob && v->v.t.nbytes >= SH_VALUE_OOB_MIN) {
			pack_oob(pk, oob, v->type == SHOAL_V_BLOB ? 3 : 2, v, v->v.t.data,
				 v->v.t.nbytes);
			return;
		}
		msgpack_pack_ext(pk, hl + v->v.t.nbytes, SH_EXT_TENSOR);
		msgpack_pack_ext_body(pk, head, hl);
		pack_body(pk, ref, v->v.t.data, v->v.t.nbytes);
		return;
	}
	}
}

void sh_value_pack(msgpack_packer *pk, const shoal_value *v, shoal_client *shared, sh_wbuf *oob)
{
	pack(pk, v, shared, oob, NULL);
}

void sh_value_pack_ref(msgpack_packer *pk, const shoal_value *v, shoal_client *shared, sh_wbuf *w)
{
	pack(pk, v, shared, NULL, w);
}

/* Well-formed UTF-8: no overlong forms, no surrogates, nothing past
 * U+10FFFF. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		/* ASCII runs, the common case, 32 then 8 bytes at a time. */
		while (n - i >= 32) {
			uint64_t w[4];
			memcpy(w, s + i, 32);
			if ((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL)
				break;
			i += 32;
		}
		while (n - i >= 8) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (w & 0x8080808080808080ULL)
				break;
			i += 8;
		}
		if (i >= n)
			break;
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		unsigned min, cp;
		if ((c & 0xe0) == 0xc0)
			len = 2, min = 0x80, cp = c & 0x1f;
		else if ((c & 0xf0) == 0xe0)
			len = 3, min = 0x800, cp = c & 0x0f;
		else if ((c & 0xf8) == 0xf0)
			len = 4, min = 0x10000, cp = c & 0x07;
		else
			return false;
		if (n - i < len)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

typedef struct vdec {
	sh_mp *m;
	shoal_vbuf *b;
	sh_oob *oob;
	char *why;
	size_t whylen;
	bool borrow; /* bytes and blobs point into the input (sh_value_decode_borrowing) */
} vdec;

static int vfail(vdec *d, const char *what)
{
	snprintf(d->why, d->whylen, "value: %s", what);
	return SHOAL_EBADMSG;
}

/* A tensor's byte count from its dtype and shape, checked. */
static int tensor_bytes(vdec *d, shoal_dtype dt, int ndim, const int64_t *shape, size_t *out)
{
	size_t bytes = shoal_dtype_size(dt);
	if (bytes == 0)
		return vfail(d, "tensor of an unknown dtype");
	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0 || shoal_mul_size(bytes, (size_t)shape[i], &bytes) != 0)
			return vfail(d, "tensor shape negative or too large");
	*out = bytes;
	return 0;
}

/* ext 3: room in the vbuf for a payload that follows the frame. */
static int doob(vdec *d, shoal_value *v, const unsigned char *p, uint32_t n)
{
	sh_oob *o = d->oob;
	if (!o)
		return vfail(d, "a payload out of band where none can follow");
	if (n < 16 || p[0] > 3)
		return vfail(d, "out-of-band header truncated or of an unknown kind");
	uint64_t bytes;
	memcpy(&bytes, p + 8, 8);
	int ndim = p[2];
	int64_t *sh = NULL;
	if (p[0] == 3 && (p[1] != SHOAL_DT_U8 || ndim != 1))
		return vfail(d, "out-of-band blob that is not 1-D uint8");
	if (p[0] >= 2) {
		if (ndim > SHOAL_TENSOR_MAX_DIMS || n != 16 + 8u * (unsigned)ndim)
			return vfail(d,
				     "out-of-band tensor: too many dims or a header of the wrong "
				     "size");
		if (!(sh = sh_bump_alloc(&d->b->a, (size_t)ndim * 8 + 8)))
			return SHOAL_ENOMEM;
		memcpy(sh, p + 16, 8 * (size_t)ndim);
		size_t want;
		int rc = tensor_bytes(d, (shoal_dtype)p[1], ndim, sh, &want);
		if (rc)
			return rc;
		if (want != bytes)
			return vfail(d, "out-of-band tensor: byte count does not match dtype and "
					"shape");
	} else if (n != 16 || bytes > UINT32_MAX) {
		return vfail(d, "out-of-band string or bytes: header of the wrong size or longer "
				"than 4 GiB");
	}
	if (bytes > o->want - o->got)
		return vfail(d, "more bytes declared out of band than the frame carries");
	/* Tensors 64-aligned, as DLPack consumers like; strings get a NUL. */
	unsigned char *room = sh_bump_alloc_raw(&d->b->a, (size_t)bytes + (sh ? 64 : 1));
	if (!room)
		return SHOAL_ENOMEM;
	if (sh)
		room += (64 - ((uintptr_t)room & 63)) & 63;
	else
		room[bytes] = 0;
	if (sh_grow_array((void **)&o->v, &o->cap, o->n, sizeof(*o->v)) != 0 ||
	    (p[0] == 1 &&
	     sh_grow_array((void **)&o->strs, &o->cap_str, o->nstr, sizeof(*o->strs)) != 0))
		return SHOAL_ENOMEM;
	if (p[0] == 1)
		o->strs[o->nstr++] = o->n;
	o->v[o->n++] = (sh_msg_part){room, (size_t)bytes};
	o->got += bytes;
	if (sh) {
		v->type = p[0] == 3 ? SHOAL_V_BLOB : SHOAL_V_TENSOR;
		v->v.t.dtype = (shoal_dtype)p[1];
		v->v.t.ndim = ndim;
		v->v.t.shape = sh;
		v->v.t.data = room;
		v->v.t.nbytes = (size_t)bytes;
		v->v.t.obj = 0;
	} else {
		v->type = p[0] == 1 ? SHOAL_V_STR : SHOAL_V_BYTES;
		v->n = (uint32_t)bytes;
		v->v.s = (char *)room;
	}
	return 0;
}

static int dvalue(vdec *d, shoal_value *v, int depth)
{
	if (depth > SH_VALUE_MAX_DEPTH)
		return vfail(d, "nested deeper than 64");
	sh_mp *m = d->m;
	uint32_t n;
	switch (sh_mp_kind(m)) {
	case SH_MP_NIL:
		sh_mp_nil(m);
		v->type = SHOAL_V_NIL;
		return 0;
	case SH_MP_BOOL:
		v->type = SHOAL_V_BOOL;
		return sh_mp_bool(m, &v->v.b);
	case SH_MP_UINT:
	case SH_MP_INT:
		v->type = SHOAL_V_INT;
		return sh_mp_int(m, &v->v.i) ? vfail(d, "integer beyond int64") : 0;
	case SH_MP_FLOAT:
		v->type = SHOAL_V_FLOAT;
		return sh_mp_float(m, &v->v.f) ? vfail(d, "truncated float") : 0;
	case SH_MP_STR:
	case SH_MP_BIN: {
		bool str = sh_mp_kind(m) == SH_MP_STR;
		const void *p;
		if (str ? sh_mp_str(m, (const char **)&p, &n) : sh_mp_bin(m, &p, &n))
			return vfail(d, "truncated string or bytes");
		if (str && !utf8_ok(p, n))
			return vfail(d, "string is not UTF-8");
		if (d->borrow && !str) {
			v->type = SHOAL_V_BYTES;
			v->n = n;
			v->v.bytes = p;
			return 0;
		}
		char *copy = sh_bump_alloc_raw(&d->b->a, (size_t)n + 1);
		if (!copy)
			return SHOAL_ENOMEM;
		memcpy(copy, p, n);
		copy[n] = 0;
		v->type = str ? SHOAL_V_STR : SHOAL_V_BYTES;
		v->n = n;
		v->v.s = copy;
		return 0;
	}
	case SH_MP_EXT: {
		int8_t type;
		const unsigned char *p;
		if (sh_mp_ext(m, &type, (const void **)&p, &n))
			return vfail(d, "truncated ext");
		if (type == SH_EXT_OOB)
			return doob(d, v, p, n);
		if (type != SH_EXT_TENSOR && type != SH_EXT_TENSOR_REF)
			return vfail(d, "an ext type other than 1, 2 (tensor) or 3 (out of band)");
		if (n < 8 || p[1] > SHOAL_TENSOR_MAX_DIMS || n < 8 + 8u * p[1])
			return vfail(d, "tensor header truncated or too many dims");
		static const unsigned char zero[5];
		if (p[2] > 1 || memcmp(p + 3, zero, 5) != 0)
			return vfail(d, "tensor header: flags beyond 1 (a blob) or padding not 0");
		bool blob = p[2];
		if (blob && (p[0] != SHOAL_DT_U8 || p[1] != 1))
			return vfail(d, "a blob that is not 1-D uint8");
		shoal_dtype dt = (shoal_dtype)p[0];
		int ndim = p[1];
		int64_t shape[SHOAL_TENSOR_MAX_DIMS];
		memcpy(shape, p + 8, 8 * (size_t)ndim);
		size_t bytes;
		int trc = tensor_bytes(d, dt, ndim, shape, &bytes);
		if (trc)
			return trc;
		int64_t *sh = sh_bump_alloc(&d->b->a, (size_t)ndim * 8 + 8);
		if (!sh)
			return SHOAL_ENOMEM;
		memcpy(sh, shape, 8 * (size_t)ndim);
		const void *data;
		shoal_id obj = 0;
		if (type == SH_EXT_TENSOR_REF) {
			size_t mapped;
			uint64_t ref[3];
			if (n != 8 + 24u + 8u * (size_t)ndim)
				return vfail(d, "shared tensor reference of the wrong size");
			memcpy(ref, p + 8 + 8 * (size_t)ndim, sizeof(ref));
			obj = ref[0];
			shoal_vbuf *vb = d->b;
			int rc = SHOAL_ENOENT;
			/* The sender keeps the object alive for the call: if its
			 * segment is mapped here, point into it and hold no reference
			 * (the call's vbuf keeps the segment mapped). */
			if (vb->store && ref[2] != UINT64_MAX &&
			    (rc = sh_client_borrow(vb->store, ref[1], ref[2], bytes, &data)) == 0 &&
			    (ref[1] &
			     SH_CLIENT_SEG_MASK) && /* segment 0, the arena, is always mapped */
			    sh_vbuf_push((void **)&vb->borrowed, &vb->nborrowed, &vb->cap_borrowed,
					 8, &ref[1]) != 0) {
				sh_client_unborrow(vb->store, ref[1]);
				return SHOAL_ENOMEM;
			}
			if (rc == SHOAL_EPROTO)
				return vfail(d, "shared tensor outside its segment");
			if (rc) {
				if ((rc = sh_vbuf_map_tensor(vb, obj, &data, &mapped, d->why,
							     d->whylen)) != 0)
					return rc;
				if (mapped != bytes)
					return vfail(
						d,
						"shared tensor's object does not match its shape");
			}
		} else {
			if (bytes != n - 8 - 8u * (size_t)ndim)
				return vfail(d, "tensor data does not match its dtype and shape");
			if (d->borrow && blob) {
				data = p + 8 + 8 * (size_t)ndim; /* bytes: no alignment to keep */
			} else {
				void *copy = sh_bump_alloc_raw(&d->b->a, bytes ? bytes : 1);
				if (!copy)
					return SHOAL_ENOMEM;
				memcpy(copy, p + 8 + 8 * (size_t)ndim, bytes);
				data = copy;
			}
		}
		v->type = blob ? SHOAL_V_BLOB : SHOAL_V_TENSOR;
		v->v.t.dtype = dt;
		v->v.t.ndim = ndim;
		v->v.t.shape = sh;
		v->v.t.data = data;
		v->v.t.nbytes = bytes;
		v->v.t.obj = obj;
		return 0;
	}
	case SH_MP_ARRAY:
	case SH_MP_MAP: {
		bool map = sh_mp_kind(m) == SH_MP_MAP;
		if (map ? sh_mp_map(m, &n) : sh_mp_array(m, &n))
			return vfail(d, "container count beyond the bytes left");
		size_t slots = map ? 2 * (size_t)n : n;
		v->type = map ? SHOAL_V_MAP : SHOAL_V_ARRAY;
		v->n = n;
		v->v.items = NULL;
		if (slots && !(v->v.items = sh_bump_alloc(&d->b->a, slots * sizeof(shoal_value))))
			return SHOAL_ENOMEM;
		for (size_t i = 0; i < slots; i++) {
			int rc = dvalue(d, &v->v.items[i], depth + 1);
			if (rc)
				return rc;
		}
		return 0;
	}
	}
	return vfail(d, "not a value (0xc1)");
}

static int decode(sh_mp *m, shoal_vbuf *b, sh_oob *oob, shoal_value **out, char *why, size_t whylen,
		  bool borrow)
{
	vdec d = {m, b, oob, why, whylen, borrow};
	shoal_value *v = sh_bump_alloc(&b->a, sizeof(*v));
	if (!v)
		return SHOAL_ENOMEM;
	int rc = dvalue(&d, v, 0);
	if (rc == 0 && m->err)
		rc = vfail(&d, "malformed");
	if (rc == 0 && oob && oob->got != oob->want) {
		snprintf(why, whylen,
			 "value: %llu bytes declared out of band, but the frame carries %llu",
			 (unsigned long long)oob->got, (unsigned long long)oob->want);
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0)
		*out = v;
	return rc;
}

/* ---- payloads out of band ---- */

void sh_oob_reset(sh_oob *o, uint64_t want)
{
	o->n = o->nstr = 0;
	o->want = want;
	o->got = 0;
}

void sh_oob_fini(sh_oob *o)
{
	if (o->v)
		shoal_free(o->v, o->cap * sizeof(*o->v));
	if (o->strs)
		shoal_free(o->strs, o->cap_str * sizeof(*o->strs));
	memset(o, 0, sizeof(*o));
}

static int check_strs(const sh_oob *o, char *why, size_t whylen)
{
	for (uint32_t i = 0; i < o->nstr; i++)
		if (!utf8_ok(o->v[o->strs[i]].p, o->v[o->strs[i]].n)) {
			snprintf(why, whylen, "value: string is not UTF-8");
			return SHOAL_EBADMSG;
		}
	return 0;
}

int sh_oob_read(sh_oob *o, sh_ring *r, int64_t deadline, char *why, size_t whylen)
{
	int rc = sh_msg_read_parts(r, o->v, o->n, deadline);
	if (rc) {
		snprintf(why, whylen, "reading %llu bytes out of band: %s",
			 (unsigned long long)o->want, shoal_strerror(rc));
		return rc;
	}
	return check_strs(o, why, whylen);
}

int sh_oob_discard(sh_oob *o, sh_ring *r, int64_t deadline)
{
	sh_msg_part all = {NULL, (size_t)o->want};
	o->n = o->nstr = 0;
	return o->want ? sh_msg_read_parts(r, &all, 1, deadline) : 0;
}

int sh_oob_copy(sh_oob *o, const void *p, size_t n, char *why, size_t whylen)
{
	if (n != o->want) {
		snprintf(why, whylen, "value: %zu bytes out of band, expected %llu", n,
			 (unsigned long long)o->want);
		return SHOAL_EBADMSG;
	}
	const unsigned char *s = p;
	for (uint32_t i = 0; i < o->n; i++) {
		memcpy(o->v[i].p, s, o->v[i].n);
		s += o->v[i].n;
	}
	return check_strs(o, why, whylen);
}

int sh_value_decode(sh_mp *m, shoal_vbuf *b, sh_oob *oob, shoal_value **out, char *why,
		    size_t whylen)
{
	return decode(m, b, oob, out, why, whylen, false);
}

int sh_value_decode_borrowing(sh_mp *m, shoal_vbuf *b, shoal_value **out, char *why, size_t whylen)
{
	return decode(m, b, NULL, out, why, whylen, true);
}

int shoal_value_encode(shoal_vbuf *b, const shoal_value *v, const void **out, size_t *len)
{
	if (!b || !v || !out || !len)
		return SHOAL_EINVAL;
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	pack(&pk, v, NULL, NULL, NULL); /* no store, no parts aside: all inline */
	int rc = w.err;
	void *p = rc ? NULL : sh_bump_alloc_raw(&b->a, w.len ? w.len : 1);
	if (rc == 0 && !p)
		rc = SHOAL_ENOMEM;
	if (rc == 0) {
		memcpy(p, w.p, w.len);
		*out = p;
		*len = w.len;
	}
	sh_wbuf_fini(&w);
	return rc;
}

int shoal_value_decode(shoal_vbuf *b, const void *data, size_t len, shoal_value **out, char *why,
		       size_t whylen)
{
	if (!b || (!data && len) || !out || !why || !whylen)
		return SHOAL_EINVAL;
	why[0] = 0;
	sh_mp m;
	sh_mp_init(&m, data, len);
	shoal_client *store = b->store;
	b->store = NULL; /* kept bytes name no object by reference */
	int rc = decode(&m, b, NULL, out, why, whylen, false);
	b->store = store;
	if (rc == 0 && sh_mp_done(&m) != 0) {
		snprintf(why, whylen, "trailing bytes after the value");
		rc = SHOAL_EBADMSG;
	}
	return rc;
}

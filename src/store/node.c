/* Metadata trees: the bump allocator they live in, their one decoder with
 * every bound checked, the built-in type rules, and the encoder. */
#include "store/node.h"
#include "net/ossl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- decoding ---- */

typedef struct dec {
	sh_mp *m;
	sh_bump *a;
	char *why;
	size_t whylen;
} dec;

#define BAD(d, ...)                                           \
	do {                                                  \
		snprintf((d)->why, (d)->whylen, __VA_ARGS__); \
		return SHOAL_EBADMSG;                         \
	} while (0)

static int nomem(dec *d)
{
	snprintf(d->why, d->whylen, "out of memory decoding metadata");
	return SHOAL_ENOMEM;
}

/* A string of 1..max bytes without NUL, copied NUL-terminated. */
static int dstr(dec *d, const char *what, size_t max, const char **out, uint32_t *lenp)
{
	const char *s;
	uint32_t len;
	if (sh_mp_str(d->m, &s, &len))
		BAD(d, "%s: expected a string", what);
	if (len == 0 || len > max)
		BAD(d, "%s: %u bytes, expected 1 to %zu", what, len, max);
	if (memchr(s, 0, len))
		BAD(d, "%s: contains a NUL byte", what);
	if (!(*out = sh_bump_str(d->a, s, len)))
		return nomem(d);
	if (lenp)
		*lenp = len;
	return 0;
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(((const sh_field *)a)->key, ((const sh_field *)b)->key);
}

static int dfield(dec *d, sh_field *f)
{
	int rc = dstr(d, "field key", SH_NODE_MAX_KEY, &f->key, NULL);
	if (rc)
		return rc;
	uint32_t n;
	switch (sh_mp_kind(d->m)) {
	case SH_MP_NIL:
		sh_mp_nil(d->m);
		f->kind = SH_F_NIL;
		return 0;
	case SH_MP_BOOL:
		f->kind = SH_F_BOOL;
		return sh_mp_bool(d->m, &f->v.b);
	case SH_MP_UINT:
	case SH_MP_INT:
		f->kind = SH_F_INT;
		if (sh_mp_int(d->m, &f->v.i))
			BAD(d, "field %s: integer beyond int64", f->key);
		return 0;
	case SH_MP_FLOAT:
		f->kind = SH_F_FLOAT;
		return sh_mp_float(d->m, &f->v.f);
	case SH_MP_STR: {
		const char *s;
		if (sh_mp_str(d->m, &s, &n))
			return SHOAL_EBADMSG;
		f->kind = SH_F_STR;
		f->n = n;
		if (!(f->v.s = sh_bump_str(d->a, s, n)))
			return nomem(d);
		return 0;
	}
	case SH_MP_ARRAY:
		sh_mp_array(d->m, &n);
		if (n > SH_NODE_MAX_INTS)
			BAD(d, "field %s: %u integers, expected at most %d", f->key, n,
			    SH_NODE_MAX_INTS);
		f->kind = SH_F_INTS;
		f->n = n;
		if (!(f->v.ints = sh_bump_alloc(d->a, (size_t)n * 8 + 8)))
			return nomem(d);
		for (uint32_t i = 0; i < n; i++)
			if (sh_mp_int(d->m, &f->v.ints[i]))
				BAD(d, "field %s: element %u is not an int64", f->key, i);
		return 0;
	}
	BAD(d, "field %s: expected nil, bool, int, float, string or an array of ints", f->key);
}

static int dblob(dec *d, sh_blobref *b)
{
	if (sh_mp_kind(d->m) == SH_MP_BIN) {
		const void *p;
		uint32_t len;
		sh_mp_bin(d->m, &p, &len);
		b->inline_data = p; /* points into the caller's copy of the frame */
		b->size = len;
		return 0;
	}
	uint32_t n;
	if (sh_mp_array(d->m, &n) || n != 3)
		BAD(d, "blob: expected bytes or [segment, offset, size]");
	if (sh_mp_uint(d->m, &b->seg) || sh_mp_uint(d->m, &b->off) || sh_mp_uint(d->m, &b->size))
		BAD(d, "blob: segment, offset and size must be unsigned integers");
	uint64_t end;
	if (__builtin_add_overflow(b->off, b->size, &end))
		BAD(d, "blob: offset %" PRIu64 " + size %" PRIu64 " overflows", b->off, b->size);
	return 0;
}

static int cmp_order(const void *a, const void *b, void *names)
{
	const char **nm = names;
	return strcmp(nm[*(const uint32_t *)a], nm[*(const uint32_t *)b]);
}

static int dnode(dec *d, int depth, shoal_node **out)
{
	if (depth > SH_NODE_MAX_DEPTH)
		BAD(d, "metadata nested deeper than %d levels", SH_NODE_MAX_DEPTH);
	uint32_t n;
	if (sh_mp_array(d->m, &n) || n != 4)
		BAD(d, "node: expected [type, fields, blobs, members]");
	shoal_node *node = sh_bump_alloc(d->a, sizeof(*node));
	if (!node)
		return nomem(d);
	int rc = dstr(d, "type name", SH_NODE_MAX_KEY, &node->type, NULL);
	if (rc)
		return rc;

	if (sh_mp_map(d->m, &n))
		BAD(d, "node %s: fields must be a map", node->type);
	if (n > SH_NODE_MAX_FIELDS)
		BAD(d, "node %s: %u fields, expected at most %d", node->type, n,
		    SH_NODE_MAX_FIELDS);
	node->nfields = n;
	if (n && !(node->fields = sh_bump_alloc(d->a, (size_t)n * sizeof(sh_field))))
		return nomem(d);
	for (uint32_t i = 0; i < n; i++)
		if ((rc = dfield(d, &node->fields[i])) != 0)
			return rc;
	if (n > 1) {
		sh_field *tmp = shoal_alloc((size_t)n * sizeof(sh_field));
		if (!tmp)
			return nomem(d);
		memcpy(tmp, node->fields, (size_t)n * sizeof(sh_field));
		qsort(tmp, n, sizeof(sh_field), cmp_key);
		const char *dup = NULL;
		for (uint32_t i = 1; i < n && !dup; i++)
			if (strcmp(tmp[i - 1].key, tmp[i].key) == 0)
				dup = tmp[i].key;
		shoal_free(tmp, (size_t)n * sizeof(sh_field));
		if (dup)
			BAD(d, "node %s: field %s given twice", node->type, dup);
	}

	if (sh_mp_array(d->m, &n))
		BAD(d, "node %s: blobs must be an array", node->type);
	node->nblobs = n;
	if (n && !(node->blobs = sh_bump_alloc(d->a, (size_t)n * sizeof(sh_blobref))))
		return nomem(d);
	for (uint32_t i = 0; i < n; i++)
		if ((rc = dblob(d, &node->blobs[i])) != 0)
			return rc;

	if (sh_mp_array(d->m, &n))
		BAD(d, "node %s: members must be an array", node->type);
	node->nmembers = n;
	if (n) {
		node->names = sh_bump_alloc(d->a, (size_t)n * sizeof(char *));
		node->members = sh_bump_alloc(d->a, (size_t)n * sizeof(shoal_node *));
		node->order = sh_bump_alloc(d->a, (size_t)n * sizeof(uint32_t));
		if (!node->names || !node->members || !node->order)
			return nomem(d);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t two;
		if (sh_mp_array(d->m, &two) || two != 2)
			BAD(d, "node %s: member %u: expected [name, node]", node->type, i);
		if ((rc = dstr(d, "member name", SH_NODE_MAX_NAME, &node->names[i], NULL)) != 0)
			return rc;
		if ((rc = dnode(d, depth + 1, &node->members[i])) != 0)
			return rc;
		node->order[i] = i;
	}
	if (n > 1) {
		qsort_r(node->order, n, sizeof(uint32_t), cmp_order, (void *)node->names);
		for (uint32_t i = 1; i < n; i++)
			if (strcmp(node->names[node->order[i - 1]], node->names[node->order[i]]) ==
			    0)
				BAD(d, "node %s: member %s given twice", node->type,
				    node->names[node->order[i]]);
	}
	*out = node;
	return 0;
}

int sh_node_decode(sh_mp *m, sh_bump *a, shoal_node **out, char *why, size_t whylen)
{
	dec d = {m, a, why, whylen};
	int rc = dnode(&d, 0, out);
	if (rc == 0 && m->err)
		rc = SHOAL_EBADMSG; /* a cursor failure the checks above let through */
	if (rc == SHOAL_EBADMSG && !why[0])
		snprintf(why, whylen, "malformed metadata");
	return rc;
}

/* ---- built-in types ---- */

const sh_field *sh_node_field(const shoal_node *n, const char *key)
{
	for (uint32_t i = 0; i < n->nfields; i++)
		if (strcmp(n->fields[i].key, key) == 0)
			return &n->fields[i];
	return NULL;
}

static int check_tensor(const shoal_node *n, const char *path, char *why, size_t whylen)
{
	const sh_field *dt = sh_node_field(n, "dtype"), *shape = sh_node_field(n, "shape");
	shoal_dtype t = dt && dt->kind == SH_F_STR ? shoal_dtype_from_name(dt->v.s, dt->n)
						   : SHOAL_DT_INVALID;
	if (t == SHOAL_DT_INVALID) {
		snprintf(why, whylen, "tensor %s: dtype %s%s%s, expected one of BOOL, U8 .. F64",
			 path, dt && dt->kind == SH_F_STR ? "\"" : "",
			 dt ? (dt->kind == SH_F_STR ? dt->v.s : "(not a string)") : "missing",
			 dt && dt->kind == SH_F_STR ? "\"" : "");
		return SHOAL_EBADMSG;
	}
	if (!shape || shape->kind != SH_F_INTS || shape->n > SHOAL_TENSOR_MAX_DIMS) {
		snprintf(why, whylen, "tensor %s: shape must be an array of at most %d ints", path,
			 SHOAL_TENSOR_MAX_DIMS);
		return SHOAL_EBADMSG;
	}
	size_t bytes = shoal_dtype_size(t);
	for (uint32_t i = 0; i < shape->n; i++) {
		if (shape->v.ints[i] < 0 ||
		    shoal_mul_size(bytes, (size_t)shape->v.ints[i], &bytes) != 0) {
			snprintf(why, whylen,
				 "tensor %s: dimension %u is %" PRId64
				 ", expected non-negative and a size that fits",
				 path, i, shape->v.ints[i]);
			return SHOAL_EBADMSG;
		}
	}
	if (n->nblobs != 1 || n->blobs[0].size != bytes) {
		snprintf(why, whylen,
			 "tensor %s: %s %u dims needs one blob of %zu bytes, has %u "
			 "blob(s)%s%" PRIu64,
			 path, shoal_dtype_name(t), shape->n, bytes, n->nblobs,
			 n->nblobs ? " of " : "", n->nblobs ? n->blobs[0].size : 0);
		return SHOAL_EBADMSG;
	}
	return 0;
}

static int check(const shoal_node *n, const char *path, int depth, char *why, size_t whylen)
{
	if (strcmp(n->type, "tensor") == 0) {
		int rc = check_tensor(n, path, why, whylen);
		if (rc)
			return rc;
	}
	bool dict = strcmp(n->type, "tensor_dict") == 0;
	for (uint32_t i = 0; i < n->nmembers; i++) {
		if (dict && strcmp(n->members[i]->type, "tensor") != 0) {
			snprintf(why, whylen,
				 "tensor_dict %s: member %s is a %s, expected a tensor", path,
				 n->names[i], n->members[i]->type);
			return SHOAL_EBADMSG;
		}
		/* Only the first level's names go into messages: enough to find it. */
		int rc = check(n->members[i], depth == 0 ? n->names[i] : path, depth + 1, why,
			       whylen);
		if (rc)
			return rc;
	}
	return 0;
}

int sh_node_check_types(const shoal_node *n, char *why, size_t whylen)
{
	return check(n, "(root)", 0, why, whylen);
}

uint64_t sh_node_bytes(const shoal_node *n)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < n->nblobs; i++)
		sum += n->blobs[i].size;
	for (uint32_t i = 0; i < n->nmembers; i++)
		sum += sh_node_bytes(n->members[i]);
	return sum;
}

/* ---- encoding ---- */

void sh_node_pack(msgpack_packer *pk, const shoal_node *n)
{
	msgpack_pack_array(pk, 4);
	sh_mp_pack_cstr(pk, n->type);
	msgpack_pack_map(pk, n->nfields);
	for (uint32_t i = 0; i < n->nfields; i++) {
		const sh_field *f = &n->fields[i];
		sh_mp_pack_cstr(pk, f->key);
		switch (f->kind) {
		case SH_F_NIL:
			msgpack_pack_nil(pk);
			break;
		case SH_F_BOOL:
			f->v.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
			break;
		case SH_F_INT:
			msgpack_pack_int64(pk, f->v.i);
			break;
		case SH_F_FLOAT:
			msgpack_pack_double(pk, f->v.f);
			break;
		case SH_F_STR:
			msgpack_pack_str(pk, f->n);
			msgpack_pack_str_body(pk, f->v.s, f->n);
			break;
		case SH_F_INTS:
			msgpack_pack_array(pk, f->n);
			for (uint32_t j = 0; j < f->n; j++)
				msgpack_pack_int64(pk, f->v.ints[j]);
			break;
		}
	}
	msgpack_pack_array(pk, n->nblobs);
	for (uint32_t i = 0; i < n->nblobs; i++) {
		const sh_blobref *b = &n->blobs[i];
		if (b->inline_data) {
			msgpack_pack_bin(pk, b->size);
			msgpack_pack_bin_body(pk, b->inline_data, b->size);
		} else {
			msgpack_pack_array(pk, 3);
			msgpack_pack_uint64(pk, b->seg);
			msgpack_pack_uint64(pk, b->off);
			msgpack_pack_uint64(pk, b->size);
		}
	}
	msgpack_pack_array(pk, n->nmembers);
	for (uint32_t i = 0; i < n->nmembers; i++) {
		msgpack_pack_array(pk, 2);
		sh_mp_pack_cstr(pk, n->names[i]);
		sh_node_pack(pk, n->members[i]);
	}
}

/* ---- the digest ---- */

typedef struct canon {
	unsigned char *p;
	size_t len, cap;
	bool err;
} canon;

static void put(canon *c, const void *p, size_t n)
{
	if (c->err)
		return;
	if (c->len + n > c->cap) {
		size_t nc = c->cap ? c->cap : 4096;
		while (nc < c->len + n)
			nc *= 2;
		unsigned char *q = shoal_realloc(c->p, c->cap, nc);
		if (!q) {
			c->err = true;
			return;
		}
		c->p = q, c->cap = nc;
	}
	memcpy(c->p + c->len, p, n);
	c->len += n;
}

static void put_u64(canon *c, uint64_t v)
{
	unsigned char b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	put(c, b, 8);
}

static void put_str(canon *c, const char *s, size_t n)
{
	put_u64(c, n);
	put(c, s, n);
}

static void canon_node(canon *c, const shoal_node *n)
{
	put_str(c, n->type, strlen(n->type));
	put_u64(c, n->nfields);
	for (uint32_t i = 0; i < n->nfields; i++) {
		const sh_field *f = &n->fields[i];
		put_str(c, f->key, strlen(f->key));
		put_u64(c, (uint64_t)f->kind);
		switch (f->kind) {
		case SH_F_BOOL:
			put_u64(c, f->v.b);
			break;
		case SH_F_INT:
			put_u64(c, (uint64_t)f->v.i);
			break;
		case SH_F_FLOAT: {
			uint64_t bits;
			memcpy(&bits, &f->v.f, 8);
			put_u64(c, bits);
			break;
		}
		case SH_F_STR:
			put_str(c, f->v.s, f->n);
			break;
		case SH_F_INTS:
			put_u64(c, f->n);
			for (uint32_t k = 0; k < f->n; k++)
				put_u64(c, (uint64_t)f->v.ints[k]);
			break;
		default:
			break;
		}
	}
	put_u64(c, n->nblobs);
	for (uint32_t i = 0; i < n->nblobs; i++)
		put_u64(c, n->blobs[i].size);
	put_u64(c, n->nmembers);
	for (uint32_t i = 0; i < n->nmembers; i++) {
		put_str(c, n->names[i], strlen(n->names[i]));
		canon_node(c, n->members[i]);
	}
}

int sh_node_digest(const shoal_node *n, unsigned char out[32])
{
	canon c = {0};
	put(&c, "shoal-node-1", 12);
	canon_node(&c, n);
	int rc = c.err ? SHOAL_ENOMEM : sh_sha256(c.p, c.len, out);
	if (c.p)
		shoal_free(c.p, c.cap);
	return rc;
}

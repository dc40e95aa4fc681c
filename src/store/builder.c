/* Builders: an object's tree in the creator's memory, its blobs in
 * writable memory until the seal. Small blobs (up to SH_STORE_INLINE_MAX)
 * live in the builder and travel inside the seal request; larger ones are
 * carved from regions, memfds the store creates and we map writable, so
 * the bytes are written once, in place, or by the kernel through the
 * region's memfd (shoal_builder_write, for large writes: no page of it
 * faulted in here). The seal unmaps every region first: the store's seal
 * fails while a writable mapping exists. */
#include "store/client.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <string.h>
#include <unistd.h>

typedef struct region {
	uint64_t id;
	int fd;	    /* kept until the seal: importers write through it */
	bool ready; /* its pages existed and are mapped: copies go by memcpy */
	unsigned char *addr;
	size_t size, used;
} region;

struct shoal_builder {
	shoal_client *c;
	shoal_node *root;
	sh_bump a; /* strings, inline blob bytes */
	region *regions;
	uint32_t nregions, cap_regions;
	size_t inline_total;
	int failed; /* a sticky error of a setter, reported by the seal */
};

static void node_free(shoal_node *n)
{
	for (uint32_t i = 0; i < n->nmembers; i++)
		node_free(n->members[i]);
	if (n->fields)
		shoal_free(n->fields, n->cap_fields * sizeof(sh_field));
	if (n->blobs)
		shoal_free(n->blobs, n->cap_blobs * sizeof(sh_blobref));
	if (n->members) {
		shoal_free(n->members, n->cap_members * sizeof(shoal_node *));
		shoal_free(n->names, n->cap_members * sizeof(char *));
	}
	SH_DELETE(n);
}

static bool name_ok(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	return n >= 1 && n <= max;
}

static shoal_node *node_new(shoal_builder *b, const char *type)
{
	shoal_node *n = SH_NEW(shoal_node);
	if (!n)
		return NULL;
	n->type = sh_bump_str(&b->a, type, strlen(type));
	n->builder = b;
	if (!n->type) {
		SH_DELETE(n);
		return NULL;
	}
	return n;
}

int shoal_builder_create(shoal_client *c, const char *type, shoal_builder **out)
{
	if (!c || !out || !name_ok(type, SH_NODE_MAX_KEY))
		return SHOAL_EINVAL;
	shoal_builder *b = SH_NEW(shoal_builder);
	if (!b)
		return SHOAL_ENOMEM;
	b->c = c;
	if (!(b->root = node_new(b, type))) {
		sh_bump_fini(&b->a);
		SH_DELETE(b);
		return SHOAL_ENOMEM;
	}
	*out = b;
	return 0;
}

shoal_node *shoal_builder_root(shoal_builder *b)
{
	return b->root;
}

static int new_region(shoal_builder *b, size_t bytes)
{
	shoal_client *c = b->c;
	if (sh_grow_array((void **)&b->regions, &b->cap_regions, b->nregions, sizeof(region)))
		return SHOAL_ENOMEM;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, bytes);
	sh_mp m;
	int rc = sh_client_call(c, SH_OP_CREATE, false, &m);
	if (rc)
		return rc;
	uint32_t n;
	region *r = &b->regions[b->nregions];
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	if (sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &r->id) || r->id == 0) {
		c->broken = true;
		return sh_err_set(c, SHOAL_EPROTO, "CREATE reply: expected [segment]");
	}
	int fd;
	if ((rc = sh_client_recv_fds(c, &r->id, &fd, 1)) != 0)
		return rc;
	size_t mapped = bytes;
	r->ready = sh_fd_pages_exist(fd);
	rc = sh_shm_map_len(fd, &mapped, true, (void **)&r->addr);
	r->fd = fd;
	if (rc) {
		close(fd);
		sh_err_set(c, rc, "mapping a %zu-byte region: %s", bytes, shoal_strerror(rc));
		/* the store drops it with the builder's other regions */
		msgpack_packer pk2;
		sh_client_begin(c, &pk2);
		msgpack_pack_array(&pk2, 1);
		msgpack_pack_uint64(&pk2, r->id);
		sh_client_call(c, SH_OP_ABORT, true, &m);
		return rc;
	}
	r->size = mapped;
	b->nregions++;
	return 0;
}

int shoal_builder_reserve(shoal_builder *b, size_t bytes)
{
	if (!b || bytes == 0)
		return SHOAL_EINVAL;
	return new_region(b, bytes);
}

int sh_builder_region(shoal_builder *b, size_t bytes, uint32_t *idx, int *fd, void **addr)
{
	int rc = shoal_builder_reserve(b, bytes);
	if (rc)
		return rc;
	region *r = &b->regions[b->nregions - 1];
	r->used = bytes; /* the caller lays it out: no carving from it */
	*idx = b->nregions - 1;
	*fd = r->fd;
	*addr = r->addr;
	return 0;
}

int sh_builder_blob_at(shoal_node *n, uint32_t idx, uint64_t off, uint64_t size)
{
	shoal_builder *b = n ? n->builder : NULL;
	if (!b || idx >= b->nregions || off > b->regions[idx].size ||
	    size > b->regions[idx].size - off)
		return SHOAL_EINVAL;
	if (sh_grow_array((void **)&n->blobs, &n->cap_blobs, n->nblobs, sizeof(sh_blobref)))
		return b->failed = SHOAL_ENOMEM;
	sh_blobref *ref = &n->blobs[n->nblobs++];
	memset(ref, 0, sizeof(*ref));
	ref->seg = b->regions[idx].id;
	ref->off = off;
	ref->size = size;
	ref->ptr = b->regions[idx].addr + off;
	return 0;
}

/* ---- nodes ---- */

static int set_field(shoal_node *n, const char *key, sh_field *f)
{
	if (!n || !n->builder || !name_ok(key, SH_NODE_MAX_KEY))
		return SHOAL_EINVAL;
	shoal_builder *b = n->builder;
	sh_field *old = (sh_field *)sh_node_field(n, key);
	if (!old) {
		if (n->nfields >= SH_NODE_MAX_FIELDS)
			return SHOAL_ERANGE;
		if (sh_grow_array((void **)&n->fields, &n->cap_fields, n->nfields,
				  sizeof(sh_field)))
			return b->failed = SHOAL_ENOMEM;
		old = &n->fields[n->nfields++];
		if (!(old->key = sh_bump_str(&b->a, key, strlen(key)))) {
			n->nfields--;
			return b->failed = SHOAL_ENOMEM;
		}
	}
	f->key = old->key;
	*old = *f;
	return 0;
}

int shoal_node_set_int(shoal_node *n, const char *key, int64_t v)
{
	return set_field(n, key, &(sh_field){.kind = SH_F_INT, .v.i = v});
}

int shoal_node_set_float(shoal_node *n, const char *key, double v)
{
	return set_field(n, key, &(sh_field){.kind = SH_F_FLOAT, .v.f = v});
}

int shoal_node_set_bool(shoal_node *n, const char *key, bool v)
{
	return set_field(n, key, &(sh_field){.kind = SH_F_BOOL, .v.b = v});
}

int shoal_node_set_str(shoal_node *n, const char *key, const char *v, size_t len)
{
	if (!n || !n->builder || (!v && len) || len > UINT32_MAX || (v && memchr(v, 0, len)))
		return SHOAL_EINVAL;
	char *s = sh_bump_str(&n->builder->a, v ? v : "", len);
	if (!s)
		return SHOAL_ENOMEM;
	return set_field(n, key, &(sh_field){.kind = SH_F_STR, .n = (uint32_t)len, .v.s = s});
}

int shoal_node_set_ints(shoal_node *n, const char *key, const int64_t *v, size_t count)
{
	if (!n || !n->builder || count > SH_NODE_MAX_INTS || (!v && count))
		return SHOAL_EINVAL;
	int64_t *p = sh_bump_alloc(&n->builder->a, count * 8 + 8);
	if (!p)
		return SHOAL_ENOMEM;
	if (count)
		memcpy(p, v, count * 8);
	return set_field(n, key, &(sh_field){.kind = SH_F_INTS, .n = (uint32_t)count, .v.ints = p});
}

int shoal_node_add_member(shoal_node *n, const char *name, const char *type, shoal_node **child)
{
	if (!n || !n->builder || !child || !name_ok(name, SH_NODE_MAX_NAME) ||
	    !name_ok(type, SH_NODE_MAX_KEY))
		return SHOAL_EINVAL;
	shoal_builder *b = n->builder;
	/* Uniqueness is checked by the store at the seal (sorting once is
	 * cheaper than a lookup per add for thousands of members). */
	uint32_t cap = n->cap_members;
	if (n->nmembers == cap) {
		uint32_t nc = cap ? cap * 2 : 4;
		shoal_node **m = shoal_realloc(n->members, cap * sizeof(*m), nc * sizeof(*m));
		if (!m)
			return b->failed = SHOAL_ENOMEM;
		n->members = m;
		const char **nm = shoal_realloc(n->names, cap * sizeof(*nm), nc * sizeof(*nm));
		if (!nm) {
			/* keep members and names the same capacity */
			n->members = shoal_realloc(m, nc * sizeof(*m), cap * sizeof(*m));
			if (cap && !n->members)
				SH_PANIC("shrinking an allocation failed");
			return b->failed = SHOAL_ENOMEM;
		}
		n->names = nm;
		n->cap_members = nc;
	}
	shoal_node *c = node_new(b, type);
	const char *nm = c ? sh_bump_str(&b->a, name, strlen(name)) : NULL;
	if (!nm) {
		if (c)
			node_free(c);
		return b->failed = SHOAL_ENOMEM;
	}
	n->names[n->nmembers] = nm;
	n->members[n->nmembers++] = c;
	*child = c;
	return 0;
}

int shoal_node_add_blob(shoal_node *n, size_t size, void **data)
{
	if (!n || !n->builder || !data)
		return SHOAL_EINVAL;
	shoal_builder *b = n->builder;
	if (sh_grow_array((void **)&n->blobs, &n->cap_blobs, n->nblobs, sizeof(sh_blobref)))
		return b->failed = SHOAL_ENOMEM;
	sh_blobref *ref = &n->blobs[n->nblobs];
	memset(ref, 0, sizeof(*ref));
	/* Room in a region? Blobs start at SH_STORE_BLOB_ALIGN there. */
	for (uint32_t i = 0; i < b->nregions; i++) {
		region *r = &b->regions[i];
		size_t off =
			(r->used + SH_STORE_BLOB_ALIGN - 1) & ~(size_t)(SH_STORE_BLOB_ALIGN - 1);
		if (off <= r->size && size <= r->size - off) {
			ref->seg = r->id;
			ref->off = off;
			ref->size = size;
			ref->ptr = r->addr + off;
			r->used = off + size;
			goto done;
		}
	}
	if (size <= SH_STORE_INLINE_MAX && b->inline_total + size <= SH_STORE_INLINE_TOTAL) {
		void *p = sh_bump_alloc(&b->a, size ? size : 1);
		if (!p)
			return b->failed = SHOAL_ENOMEM;
		ref->inline_data = p;
		ref->ptr = p;
		ref->size = size;
		b->inline_total += size;
		goto done;
	}
	int rc = new_region(b, size);
	if (rc)
		return rc;
	region *r = &b->regions[b->nregions - 1];
	ref->seg = r->id;
	ref->size = size;
	ref->ptr = r->addr;
	r->used = size;
done:
	n->nblobs++;
	*data = ref->ptr;
	return 0;
}

int shoal_node_set_tensor(shoal_node *n, shoal_dtype dt, int ndim, const int64_t *shape,
			  void **data)
{
	if (!n || !n->builder || strcmp(n->type, "tensor") != 0 || n->nblobs != 0 ||
	    shoal_dtype_size(dt) == 0 || ndim < 0 || ndim > SHOAL_TENSOR_MAX_DIMS ||
	    (ndim && !shape))
		return SHOAL_EINVAL;
	size_t bytes = shoal_dtype_size(dt);
	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0 || shoal_mul_size(bytes, (size_t)shape[i], &bytes) != 0)
			return SHOAL_EINVAL;
	const char *name = shoal_dtype_name(dt);
	int rc = shoal_node_set_str(n, "dtype", name, strlen(name));
	if (rc == 0)
		rc = shoal_node_set_ints(n, "shape", shape, (size_t)ndim);
	if (rc == 0)
		rc = shoal_node_add_blob(n, bytes, data);
	return rc;
}

/* Below this, memcpy into the mapping: a syscall costs about a page fault. */
#define WRITE_THROUGH_FD (64u << 10)

int shoal_builder_write(shoal_builder *b, void *dst, const void *src, size_t n)
{
	if (!b || (n && (!dst || !src)))
		return SHOAL_EINVAL;
	if (n == 0)
		return 0;
	uintptr_t d = (uintptr_t)dst;
	for (uint32_t i = 0; i < b->nregions; i++) {
		region *r = &b->regions[i];
		uintptr_t a = (uintptr_t)r->addr;
		if (!r->addr || d < a || d - a > r->size || n > r->size - (d - a))
			continue;
		if (n < WRITE_THROUGH_FD || r->fd < 0 || r->ready) {
			memcpy(dst, src, n);
			return 0;
		}
		int rc = sh_fd_pwrite_all(r->fd, src, n, d - a);
		if (rc)
			sh_err_set(b->c, rc, "writing %zu bytes into a region: %s", n,
				   shoal_strerror(rc));
		return rc;
	}
	/* an inline blob: it lives in the builder's own memory */
	if (sh_bump_holds(&b->a, dst, n)) {
		memcpy(dst, src, n);
		return 0;
	}
	return SHOAL_EINVAL;
}

/* ---- sealing ---- */

static void builder_free(shoal_builder *b, bool abort_regions)
{
	shoal_client *c = b->c;
	for (uint32_t i = 0; i < b->nregions; i++) {
		region *r = &b->regions[i];
		if (r->addr)
			sh_shm_unmap(r->addr, r->size);
		if (r->fd >= 0)
			close(r->fd);
		if (abort_regions || r->used == 0) {
			msgpack_packer pk;
			sh_client_begin(c, &pk);
			msgpack_pack_array(&pk, 1);
			msgpack_pack_uint64(&pk, r->id);
			sh_mp m;
			sh_client_call(c, SH_OP_ABORT, true, &m);
		}
	}
	if (b->regions)
		shoal_free(b->regions, b->cap_regions * sizeof(region));
	node_free(b->root);
	sh_bump_fini(&b->a);
	SH_DELETE(b);
}

void shoal_builder_abort(shoal_builder *b)
{
	if (b)
		builder_free(b, true);
}

static int seal(shoal_builder *b, const char *name, unsigned flags, uint64_t owner, shoal_id *id)
{
	if (!b)
		return SHOAL_EINVAL;
	shoal_client *c = b->c;
	if (b->failed) {
		int rc = b->failed;
		builder_free(b, true);
		return sh_err_set(c, rc, "building the object failed earlier: %s",
				  shoal_strerror(rc));
	}
	if ((name && !name_ok(name, SH_NODE_MAX_NAME)) ||
	    (flags & ~(unsigned)(SHOAL_PERSIST | SHOAL_REPLACE))) {
		builder_free(b, true);
		return SHOAL_EINVAL;
	}
	/* Our writable mappings go first: the store's seal needs none left. */
	for (uint32_t i = 0; i < b->nregions; i++) {
		sh_shm_unmap(b->regions[i].addr, b->regions[i].size);
		b->regions[i].addr = NULL;
		close(b->regions[i].fd);
		b->regions[i].fd = -1;
	}
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, owner ? 4 : 3);
	sh_mp_pack_cstr(&pk, name);
	msgpack_pack_uint32(&pk, flags);
	sh_node_pack(&pk, b->root);
	if (owner)
		msgpack_pack_uint64(&pk, owner);
	sh_mp m;
	int rc = sh_client_call(c, SH_OP_SEAL, false, &m);
	uint32_t n;
	uint64_t got = 0, sig;
	if (rc == 0 && (sh_mp_array(&m, &n) || n != 2 || sh_mp_uint(&m, &got) ||
			sh_mp_uint(&m, &sig) || got == 0)) {
		c->broken = true;
		rc = sh_err_set(c, SHOAL_EPROTO, "SEAL reply: expected [id, signature]");
	}
	builder_free(b, rc != 0);
	if (rc == 0 && id)
		*id = got;
	return rc;
}

int shoal_builder_seal(shoal_builder *b, const char *name, unsigned flags, shoal_id *id)
{
	return seal(b, name, flags, 0, id);
}

int shoal_builder_seal_for(shoal_builder *b, uint64_t owner, shoal_id *id)
{
	if (!owner) {
		shoal_builder_abort(b);
		return SHOAL_EINVAL;
	}
	return seal(b, NULL, 0, owner, id);
}

int shoal_put_bytes(shoal_client *c, const char *name, const void *data, size_t size,
		    unsigned flags, shoal_id *id)
{
	if (!c || (!data && size))
		return SHOAL_EINVAL;
	shoal_builder *b;
	int rc = shoal_builder_create(c, "bytes", &b);
	if (rc)
		return rc;
	void *p;
	if ((rc = shoal_node_add_blob(b->root, size, &p)) != 0) {
		shoal_builder_abort(b);
		return rc;
	}
	if ((rc = shoal_builder_write(b, p, data, size)) != 0) {
		shoal_builder_abort(b);
		return rc;
	}
	return shoal_builder_seal(b, name, flags, id);
}

/* Store clients reading objects: a get maps the blobs' segments
 * read-only (each once while the connection uses it, and a few idle ones
 * kept mapped after, within bounds) and hands out pointers into them; no
 * byte is copied. A release lets go of them and tells the store which
 * segments we unmapped. Also what RPC values passed by reference borrow
 * of a mapped segment (rpc/value.c). */
#include "store/client.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reading objects ---- */

static void unmap_seg(shoal_client *c, sh_cseg *g, sh_wbuf *dropped)
{
	sh_map_del(&c->segs, g->id);
	sh_shm_unmap(g->addr, g->size);
	sh_cow_forget(c, g->id); /* they pin the pages as the mapping did */
	if (g->fd >= 0)
		close(g->fd);
	if (dropped)
		sh_wbuf_append(dropped, &g->id, 8); /* the store may send it again */
	SH_DELETE(g);
}

/* Evicts the oldest idle segment (one in use again just leaves the list). */
static void evict_idle(shoal_client *c, sh_wbuf *dropped)
{
	sh_cseg *old = sh_map_get(&c->segs, c->idle[0]);
	memmove(c->idle, c->idle + 1, (c->nidle - 1) * sizeof(c->idle[0]));
	c->nidle--;
	if (old) {
		c->idle_bytes -= old->size;
		if (old->users == 0)
			unmap_seg(c, old, dropped);
	}
}

static void put_segs(shoal_client *c, const uint64_t *ids, uint32_t n, sh_wbuf *dropped)
{
	for (uint32_t i = 0; i < n; i++) {
		sh_cseg *g = sh_map_get(&c->segs, ids[i]);
		if (!g || --g->users)
			continue;
		/* the store is short of memory: what is mapped idle could spill */
		if (g->size > SH_CLIENT_IDLE_MAX_BYTES || c->short_mem) {
			while (c->nidle)
				evict_idle(c, dropped);
			unmap_seg(c, g, dropped);
			continue;
		}
		/* Kept mapped, idle, within the bounds: the oldest go first. */
		bool listed = false;
		for (uint32_t k = 0; k < c->nidle && !listed; k++)
			listed = c->idle[k] == g->id;
		if (listed)
			continue;
		while (c->nidle && (c->nidle == SH_CLIENT_IDLE_SEGS ||
				    c->idle_bytes + g->size > SH_CLIENT_IDLE_MAX_BYTES))
			evict_idle(c, dropped);
		c->idle[c->nidle++] = g->id;
		c->idle_bytes += g->size;
	}
}

/* Points every blob of the tree at its mapped bytes, collecting the
 * segments it uses. */
static int resolve(shoal_object *o, shoal_node *n)
{
	shoal_client *c = o->c;
	for (uint32_t i = 0; i < n->nblobs; i++) {
		sh_blobref *b = &n->blobs[i];
		if (b->inline_data)
			return sh_err_set(c, SHOAL_EPROTO, "store replied with inline bytes");
		const unsigned char *base;
		size_t size;
		if (b->seg == 0) {
			base = c->arena;
			size = c->arena_size;
		} else {
			sh_cseg *g = sh_map_get(&c->segs, b->seg);
			if (!g)
				return sh_err_set(c, SHOAL_EPROTO,
						  "blob in segment %" PRIu64
						  ", which we do not have",
						  b->seg);
			base = g->addr;
			size = g->size;
			bool seen = false;
			for (uint32_t j = 0; j < o->nsegs && !seen; j++)
				seen = o->segs[j] == b->seg;
			if (!seen) {
				uint64_t *v = sh_bump_alloc(&o->a, (o->nsegs + 1) * 8);
				if (!v)
					return SHOAL_ENOMEM;
				if (o->nsegs)
					memcpy(v, o->segs, o->nsegs * 8);
				v[o->nsegs++] = b->seg;
				o->segs = v;
				g->users++;
			}
		}
		if (b->off > size || b->size > size - b->off)
			return sh_err_set(c, SHOAL_EPROTO,
					  "blob [%" PRIu64 ", +%" PRIu64
					  ") outside its %zu-byte segment",
					  b->off, b->size, size);
		b->ptr = (void *)(base + b->off);
	}
	for (uint32_t i = 0; i < n->nmembers; i++) {
		int rc = resolve(o, n->members[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* Releases object id (0: none) and tells the store which segments we
 * unmapped. */
static void send_release(shoal_client *c, shoal_id id, const sh_wbuf *dropped)
{
	if (!id && !dropped->len)
		return;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_array(&pk, id ? 1 : 0);
	if (id)
		msgpack_pack_uint64(&pk, id);
	size_t n = dropped->len / 8;
	msgpack_pack_array(&pk, n);
	for (size_t i = 0; i < n; i++) {
		uint64_t s;
		memcpy(&s, dropped->p + 8 * i, 8);
		msgpack_pack_uint64(&pk, s);
	}
	sh_mp m;
	if (sh_client_call(c, SH_OP_RELEASE, true, &m) != 0)
		sh_debug("store", "release of %016" PRIx64 ": %s", id, sh_err_get(c));
}

/* A request whose body is [name] or [id] (GET, DELETE, PERSIST). */
int sh_client_call_key(shoal_client *c, uint16_t op, const char *name, shoal_id id, sh_mp *m)
{
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 1);
	if (name)
		sh_mp_pack_cstr(&pk, name);
	else
		msgpack_pack_uint64(&pk, id);
	return sh_client_call(c, op, false, m);
}

/* Lets go of o: its segments (unmapped or kept idle), its reference at
 * the store, its memory. */
static void object_drop(shoal_object *o)
{
	if (o->base) {
		sh_cow_drop(o);
		return;
	}
	if (!o->c) { /* a remote store's: nothing of a store's to let go of here */
		if (o->own)
			munmap(o->own, o->own_len);
		sh_bump_fini(&o->a);
		SH_DELETE(o);
		return;
	}
	shoal_client *c = o->c;
	sh_wbuf dropped;
	sh_wbuf_init(&dropped);
	put_segs(c, o->segs, o->nsegs, &dropped);
	send_release(c, o->id, &dropped);
	sh_wbuf_fini(&dropped);
	sh_bump_fini(&o->a);
	SH_DELETE(o);
}

static int get(shoal_client *c, const char *name, shoal_id id, unsigned flags, shoal_object **out)
{
	if (!c || !out || (!name && !id))
		return SHOAL_EINVAL;
	/* An object this connection holds already: the same handle, one more
	 * reference, no round trip (the store's count stays one for us). */
	shoal_object *have = id ? sh_map_get(&c->objs, id) : NULL;
	if (have) {
		have->refs++;
		*out = have;
		return 0;
	}
	sh_mp m;
	int rc;
again:
	if (flags & SHOAL_GET_LOCAL) {
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		msgpack_pack_array(&pk, 2);
		if (name)
			sh_mp_pack_cstr(&pk, name);
		else
			msgpack_pack_uint64(&pk, id);
		msgpack_pack_uint64(&pk, SH_GET_LOCAL);
		rc = sh_client_call(c, SH_OP_GET, false, &m);
	} else {
		rc = sh_client_call_key(c, SH_OP_GET, name, id, &m);
	}
	if (rc == SHOAL_ENOSPC && c->nidle) {
		/* A spilled object with no room to come back, maybe for what we
		 * keep mapped idle: let go of it, and ask once more. */
		sh_wbuf dropped;
		sh_wbuf_init(&dropped);
		while (c->nidle)
			evict_idle(c, &dropped);
		c->short_mem = true;
		send_release(c, 0, &dropped);
		sh_wbuf_fini(&dropped);
		goto again;
	}
	if (rc)
		return rc;
	return sh_client_get_reply(c, &m, id, out);
}

/* A GET's reply in m: the object (of that id, unless 0), its new
 * segments' descriptors from the socket, mapped. */
int sh_client_get_reply(shoal_client *c, sh_mp *mp, shoal_id id, shoal_object **out)
{
	sh_mp m = *mp;
	int rc = 0;
	shoal_object *o = SH_NEW(shoal_object);
	if (!o)
		return SHOAL_ENOMEM; /* the store holds a reference until we disconnect */
	o->c = c;
	o->refs = 1;
	uint32_t n, nnew;
	if (sh_mp_array(&m, &n) || n != 5 || sh_mp_uint(&m, &o->id) || sh_mp_uint(&m, &o->sig) ||
	    sh_mp_array(&m, &nnew) || nnew > 1u << 20 || o->id == 0 || (id && o->id != id)) {
		c->broken = true;
		rc = sh_err_set(c, SHOAL_EPROTO,
				"GET reply: expected [id, sig, segments, flags, node] with the id "
				"asked for (or any id but 0 for a name)");
		SH_DELETE(o);
		return rc;
	}
	/* New segments: their descriptors are waiting on the socket. */
	uint64_t ids[64], sizes[64];
	int fds[64];
	for (uint32_t done = 0; done < nnew && rc == 0;) {
		uint32_t k = nnew - done < 64 ? nnew - done : 64;
		for (uint32_t i = 0; i < k && rc == 0; i++) {
			uint32_t two;
			if (sh_mp_array(&m, &two) || two != 2 || sh_mp_uint(&m, &ids[i]) ||
			    sh_mp_uint(&m, &sizes[i]) || ids[i] == 0 ||
			    sh_map_get(&c->segs, ids[i]))
				rc = SHOAL_EPROTO;
		}
		if (rc == 0)
			rc = sh_client_recv_fds(c, ids, fds, k);
		for (uint32_t i = 0; i < k && rc == 0; i++) {
			struct stat st;
			sh_cseg *g = SH_NEW(sh_cseg);
			/* Trust no size: the file must hold what we map. */
			if (!g || fstat(fds[i], &st) != 0 || (uint64_t)st.st_size < sizes[i] ||
			    !sh_memfd_is_sealed(fds[i]) ||
			    sh_shm_map(fds[i], sizes[i], false, &g->addr) != 0 ||
			    sh_map_put(&c->segs, ids[i], g) != 0) {
				rc = g ? SHOAL_EPROTO : SHOAL_ENOMEM;
				if (g && g->addr)
					sh_shm_unmap(g->addr, sizes[i]);
				if (g)
					SH_DELETE(g);
			} else {
				g->id = ids[i];
				g->size = sizes[i];
				/* kept for copy-on-write views while descriptors
				 * are plentiful; past that a view copies */
				g->fd = fds[i] < SH_CLIENT_KEEP_FD_MAX ? fds[i] : -1;
				if (g->fd >= 0)
					fds[i] = -1;
			}
		}
		for (uint32_t i = 0; i < k; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		done += k;
	}
	char why[256] = "";
	uint64_t gflags = 0;
	if (rc == 0 && sh_mp_uint(&m, &gflags) != 0)
		rc = SHOAL_EPROTO;
	c->short_mem = gflags & SH_GET_SHORT;
	if (rc == 0)
		rc = sh_node_decode(&m, &o->a, &o->root, why, sizeof(why));
	if (rc == 0 && sh_mp_done(&m) != 0)
		rc = SHOAL_EPROTO;
	if (rc == 0)
		rc = resolve(o, o->root);
	if (rc != 0) {
		if (!sh_err_get(c)[0])
			sh_err_set(c, rc, "GET reply: %s", why[0] ? why : shoal_strerror(rc));
		rc = sh_err_get(c)[0] ? rc : SHOAL_EPROTO;
		object_drop(o);
		return rc == SHOAL_EBADMSG ? SHOAL_EPROTO : rc;
	}
	o->bytes = sh_node_bytes(o->root);
	shoal_object *dup = sh_map_get(&c->objs, o->id);
	if (dup) {
		/* got by name while we held it by id: keep one handle */
		shoal_object_release(o);
		dup->refs++;
		*out = dup;
		return 0;
	}
	if (sh_map_put(&c->objs, o->id, o) != 0) {
		shoal_object_release(o);
		return SHOAL_ENOMEM;
	}
	*out = o;
	return 0;
}

int shoal_get(shoal_client *c, shoal_id id, shoal_object **out)
{
	return get(c, NULL, id, 0, out);
}

int shoal_get_by_name(shoal_client *c, const char *name, shoal_object **out)
{
	if (!name || !*name)
		return SHOAL_EINVAL;
	return get(c, name, 0, 0, out);
}

int shoal_get_with(shoal_client *c, const char *name, shoal_id id, unsigned flags,
		   shoal_object **out)
{
	if ((name && !*name) || (name && id) || (flags & ~(unsigned)SHOAL_GET_LOCAL))
		return SHOAL_EINVAL;
	return get(c, name, id, flags, out);
}

int shoal_object_release(shoal_object *o)
{
	if (!o || o->refs == 0)
		return SHOAL_EINVAL;
	if (--o->refs)
		return 0;
	shoal_client *c = o->c;
	if (c && sh_map_get(&c->objs, o->id) == o)
		sh_map_del(&c->objs, o->id);
	object_drop(o);
	return 0;
}

const shoal_node *shoal_object_root(const shoal_object *o)
{
	return o->root;
}

shoal_id shoal_object_id(const shoal_object *o)
{
	return o->id;
}

uint64_t shoal_object_signature(const shoal_object *o)
{
	return o->sig;
}

uint64_t shoal_object_bytes(const shoal_object *o)
{
	return o->bytes;
}

/* ---- borrowing: for RPC payloads that a caller keeps alive ---- */

int sh_client_blob_of(shoal_client *c, shoal_id id, uint64_t *seg, uint64_t *off)
{
	shoal_object *o = sh_map_get(&c->objs, id);
	if (!o || o->root->nblobs != 1)
		return SHOAL_ENOENT;
	/* tagged with the store's instance: a reference read by a client of
	 * another store (a task's result coming back from an engine on
	 * another host) must not be taken for one of its own segments */
	*seg = o->root->blobs[0].seg | c->instance;
	*off = o->root->blobs[0].off;
	return 0;
}

int sh_client_borrow(shoal_client *c, uint64_t seg, uint64_t off, uint64_t size, const void **p)
{
	if ((seg & ~SH_CLIENT_SEG_MASK) != c->instance)
		return SHOAL_ENOENT; /* another store's: get the object by id */
	seg &= SH_CLIENT_SEG_MASK;
	if (seg == 0) { /* the arena: mapped for as long as we are connected */
		if (off > c->arena_size || size > c->arena_size - off)
			return SHOAL_EPROTO;
		*p = c->arena + off;
		return 0;
	}
	sh_cseg *g = sh_map_get(&c->segs, seg);
	if (!g)
		return SHOAL_ENOENT;
	if (off > g->size || size > g->size - off)
		return SHOAL_EPROTO;
	g->users++;
	*p = (const char *)g->addr + off;
	return 0;
}

void sh_client_unborrow(shoal_client *c, uint64_t seg)
{
	seg &= SH_CLIENT_SEG_MASK;
	sh_wbuf dropped;
	sh_wbuf_init(&dropped);
	put_segs(c, &seg, 1, &dropped);
	send_release(c, 0, &dropped);
	sh_wbuf_fini(&dropped);
}

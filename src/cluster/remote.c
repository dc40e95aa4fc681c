/* Remote clients (shoal/remote.h): a process without a store here uses a
 * store of another host through the port where that store serves other
 * stores, with the same handshake and secret, speaking the peer protocol
 * (cluster.h): a get is a FETCH of one stream whose answer is checked as a
 * store checks one (sh_mig_parse_reply) and whose bytes are received
 * straight into a private region of this process (sh_peer_recv_blobs);
 * a put lays the value's blobs out as a FETCH's answer does, asks the
 * store for room (PUT), then sends them from where they lie
 * (sh_channel_send_bulk). One request at a time on the link, each of
 * sequence 1 as a store's fetch is. */
#include "cluster/cluster.h"
#include "store/client.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <shoal/remote.h>

/* No byte for this long mid-transfer: the store or the link is gone. */
#define REMOTE_STALL_NS (10 * 1000000000LL)

struct shoal_remote {
	int fd;
	sh_channel *ch;
	char addr[300];
	bool broken; /* out of step, timed out or gone: no more calls */
	unsigned char *in;
	size_t in_cap;
};

/* The link failed in the middle of op: it is over. */
static int broke(shoal_remote *r, int rc, const char *op)
{
	r->broken = true;
	const char *cause = r->ch ? sh_channel_error(r->ch) : "";
	if (rc == SHOAL_ECLOSED || rc == SHOAL_ECONNRESET)
		return sh_err_set(
			r, SHOAL_ECLOSED,
			"the store at %s closed the link at %s%s%s (a store of peer protocol "
			"1, which serves other stores' FETCH only, closes it at any other "
			"op: upgrade its shoald)",
			r->addr, op, cause[0] ? ": " : "", cause);
	return sh_err_set(r, rc, "the store at %s, at %s: %s%s%s (the link is over: connect again)",
			  r->addr, op, shoal_strerror(rc), cause[0] ? ": " : "", cause);
}

static int usable(shoal_remote *r)
{
	if (r->broken)
		return sh_err_set(
			r, SHOAL_ECLOSED,
			"the link to the store at %s is over (a call failed on it before): "
			"connect again",
			r->addr);
	sh_err_clear(r);
	return 0;
}

int shoal_remote_connect(shoal_remote **out, const char *hostport, int64_t deadline, char *why,
			 size_t whylen)
{
	char tmp[8];
	if (!why)
		why = tmp, whylen = sizeof(tmp);
	why[0] = 0;
	if (!out || !hostport || !*hostport) {
		snprintf(why, whylen, "expected a store's HOST:PORT");
		return SHOAL_EINVAL;
	}
	*out = NULL;
	shoal_remote *r = SH_NEW(shoal_remote);
	if (!r)
		return SHOAL_ENOMEM;
	snprintf(r->addr, sizeof(r->addr), "%s", hostport);
	int rc =
		sh_tcp_connect_auth(hostport, SH_PEER_PROTO, deadline, &r->fd, &r->ch, why, whylen);
	if (rc) {
		SH_DELETE(r);
		return rc;
	}
	sh_channel_set_stall(r->ch, REMOTE_STALL_NS);
	*out = r;
	return 0;
}

void shoal_remote_close(shoal_remote *r)
{
	if (!r)
		return;
	sh_channel_free(r->ch);
	if (r->fd >= 0)
		close(r->fd);
	if (r->in)
		shoal_free(r->in, r->in_cap);
	SH_DELETE(r);
}

const char *shoal_remote_error(const shoal_remote *r)
{
	return sh_err_get(r);
}

/* ---- requests ---- */

/* The whole frame in w to the store (rc: how its packing went). */
static int send_whole(shoal_remote *r, sh_wbuf *w, int rc, const char *what, int64_t deadline)
{
	if (rc)
		return sh_err_set(r, rc, "%s: packing the request: %s", what, shoal_strerror(rc));
	if ((rc = sh_channel_write(r->ch, w->p, w->len, false, deadline)) != 0)
		return broke(r, rc, what);
	return 0;
}

/* The frame begun in w, of op (sequence 1), to the store. */
static int send_frame(shoal_remote *r, sh_wbuf *w, uint16_t op, const char *what, int64_t deadline)
{
	sh_frame f = {.op = op, .seq = 1};
	return send_whole(r, w, w->err ? SHOAL_ENOMEM : sh_wbuf_frame_end(w, &f), what, deadline);
}

/* The answer to op, at most max bytes: its body at m, or the store's
 * failure (the link in step) with its message. */
static int answer(shoal_remote *r, uint16_t op, const char *what, size_t max, int64_t deadline,
		  sh_mp *m, size_t *len)
{
	int rc = sh_channel_read_frame(r->ch, &r->in, &r->in_cap, len, max, false, deadline);
	if (rc == SHOAL_EMSGSIZE) {
		r->broken = true;
		return sh_err_set(
			r, SHOAL_EPROTO,
			"the store at %s answered %s with a frame over %zu bytes: expected "
			"at most that",
			r->addr, what, max);
	}
	if (rc)
		return broke(r, rc, what);
	sh_frame f;
	char why[300] = "";
	if (sh_frame_decode(r->in, *len, &f, why, sizeof(why)) != 0 || f.op != op || f.seq != 1 ||
	    f.oob) {
		r->broken = true;
		return sh_err_set(
			r, SHOAL_EPROTO, "the store at %s answered %s out of step: %s", r->addr,
			what, why[0] ? why : "expected its op, sequence 1, no out-of-band bytes");
	}
	sh_mp_init(m, r->in + SH_FRAME_HDR, f.body_len);
	if (f.status == 0)
		return 0;
	rc = sh_peer_failure(f.status, m, why, sizeof(why));
	if (rc == SHOAL_EPROTO)
		r->broken = true;
	return sh_err_set(r, rc, "the store at %s: %s", r->addr, why);
}

static void pack_key(msgpack_packer *pk, const char *name, shoal_id id)
{
	if (name)
		sh_mp_pack_cstr(pk, name);
	else
		msgpack_pack_uint64(pk, id);
}

static int check_key(shoal_remote *r, const char *name, shoal_id id, const char *what)
{
	if (name ? !*name || strlen(name) > SH_NODE_MAX_NAME : id == 0)
		return sh_err_set(r, SHOAL_EINVAL, "%s: expected a name of 1 to %d bytes, or an id",
				  what, SH_NODE_MAX_NAME);
	return 0;
}

/* ---- get ---- */

static void point_blobs(shoal_node *n, unsigned char *base)
{
	for (uint32_t i = 0; i < n->nblobs; i++)
		n->blobs[i].ptr = base + n->blobs[i].off;
	for (uint32_t i = 0; i < n->nmembers; i++)
		point_blobs(n->members[i], base);
}

static int get(shoal_remote *r, const char *name, shoal_id id, int64_t deadline, shoal_object *o)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 2);
	pack_key(&pk, name, id);
	msgpack_pack_uint32(&pk, 1); /* one stream: this process receives it */
	int rc = send_frame(r, &w, SH_PEER_FETCH, "FETCH", deadline);
	sh_wbuf_fini(&w);
	size_t len;
	if (rc == 0 && (rc = sh_channel_read_frame(r->ch, &r->in, &r->in_cap, &len,
						   SH_PEER_META_MAX + 4096, false, deadline)) != 0)
		return broke(r, rc, "FETCH");
	if (rc)
		return rc;
	sh_mig_reply rep;
	char why[600];
	if ((rc = sh_mig_parse_reply(r->in, len, &rep, &o->a, why, sizeof(why))) != 0) {
		/* the store's own failure leaves the link in step */
		r->broken = rc == SHOAL_EPROTO || rc == SHOAL_EBADMSG;
		return sh_err_set(r, rc, "the store at %s: %s", r->addr, why);
	}
	if (rep.k != 1 || (id && rep.id != id) ||
	    (name && (!rep.name || strcmp(rep.name, name) != 0))) {
		r->broken = true;
		return sh_err_set(r, SHOAL_EPROTO,
				  "the store at %s answered FETCH of %s%s%s with object %016" PRIx64
				  " in %u streams: expected the object asked for, in one",
				  r->addr, name ? "\"" : "an id", name ? name : "",
				  name ? "\"" : "", rep.id, rep.k);
	}
	size_t maplen = ((size_t)(rep.region ? rep.region : 1) + 4095) & ~(size_t)4095;
	if ((o->own = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			   0)) == MAP_FAILED) {
		o->own = NULL;
		r->broken = true; /* its bytes are on their way: the link is out of step */
		return sh_err_set(r, SHOAL_ENOMEM,
				  "object %016" PRIx64 ": no memory here for its %" PRIu64 " bytes",
				  rep.id, rep.region);
	}
	o->own_len = maplen;
	/* fewer faults a byte where transparent huge pages are allowed */
	if (maplen >= (2u << 20))
		madvise(o->own, maplen, MADV_HUGEPAGE);
	sh_store_region dst = {.fd = -1, .map = o->own, .size = maplen};
	_Atomic uint64_t got = 0;
	if ((rc = sh_peer_recv_blobs(r->ch, rep.blobs, rep.nblobs, 0, rep.total, &dst, 0, deadline,
				     &got)) != 0) {
		char op[120];
		snprintf(op, sizeof(op),
			 "object %016" PRIx64 "'s bytes (%" PRIu64 " of %" PRIu64 ")", rep.id,
			 (uint64_t)got, rep.total);
		return broke(r, rc, op);
	}
	if (sh_channel_pending(r->ch)) {
		r->broken = true;
		return sh_err_set(r, SHOAL_EPROTO,
				  "the store at %s sent bytes after the %" PRIu64
				  " of object %016" PRIx64 ": expected the transfer to end there",
				  r->addr, rep.total, rep.id);
	}
	point_blobs(rep.root, o->own);
	o->id = rep.id;
	o->sig = rep.sig;
	o->bytes = rep.total;
	o->root = rep.root;
	return 0;
}

int shoal_remote_get(shoal_remote *r, const char *name, shoal_id id, int64_t deadline,
		     shoal_object **out)
{
	if (!r || !out)
		return SHOAL_EINVAL;
	*out = NULL;
	int rc = usable(r);
	if (rc == 0)
		rc = check_key(r, name, id, "get");
	if (rc)
		return rc;
	shoal_object *o = SH_NEW(shoal_object);
	if (!o)
		return sh_err_set(r, SHOAL_ENOMEM, "get: out of memory");
	o->refs = 1;
	if ((rc = get(r, name, id, deadline, o)) != 0) {
		shoal_object_release(o);
		return rc;
	}
	*out = o;
	return 0;
}

/* ---- put ---- */

/* A value's tree as a FETCH's answer lays it out: every blob at the next
 * 64-byte boundary of one region, in the tree's order; parts: where each
 * one's bytes are here. */
typedef struct put_tree {
	sh_bump a;
	shoal_node *root;
	sh_bulk_part *parts;
	size_t nparts, cap;
	uint64_t end;
} put_tree;

static shoal_node *node_new(put_tree *t, const char *type, uint32_t nfields, uint32_t nblobs,
			    uint32_t nmembers)
{
	shoal_node *n = sh_bump_alloc(&t->a, sizeof(*n));
	if (!n)
		return NULL;
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->fields = sh_bump_alloc(&t->a, (nfields ? nfields : 1) * sizeof(sh_field));
	n->blobs = sh_bump_alloc(&t->a, (nblobs ? nblobs : 1) * sizeof(sh_blobref));
	n->names = sh_bump_alloc(&t->a, (nmembers ? nmembers : 1) * sizeof(char *));
	n->members = sh_bump_alloc(&t->a, (nmembers ? nmembers : 1) * sizeof(shoal_node *));
	return n->fields && n->blobs && n->names && n->members ? n : NULL;
}

static int add_blob(put_tree *t, shoal_node *n, const void *data, uint64_t size)
{
	t->end = (t->end + SH_STORE_BLOB_ALIGN - 1) & ~(uint64_t)(SH_STORE_BLOB_ALIGN - 1);
	n->blobs[n->nblobs++] = (sh_blobref){.seg = 1, .off = t->end, .size = size};
	t->end += size;
	if (size == 0) /* a record never carries none: nothing to send */
		return 0;
	if (t->nparts == t->cap) {
		size_t nc = t->cap ? t->cap * 2 : 16;
		sh_bulk_part *q = shoal_realloc(t->parts, t->cap * sizeof(*q), nc * sizeof(*q));
		if (!q)
			return SHOAL_ENOMEM;
		t->parts = q;
		t->cap = nc;
	}
	t->parts[t->nparts++] = (sh_bulk_part){.p = data, .fd = -1, .len = size};
	return 0;
}

static void put_tree_fini(put_tree *t)
{
	if (t->parts)
		shoal_free(t->parts, t->cap * sizeof(*t->parts));
	sh_bump_fini(&t->a);
}

/* A tensor node for t, checked here first: the store would refuse it. */
static int tensor_node(shoal_remote *r, put_tree *pt, const shoal_tensor *t, const char *what,
		       shoal_node **out)
{
	size_t bytes = shoal_dtype_size(t->dtype);
	if (bytes == 0 || t->ndim < 0 || t->ndim > SHOAL_TENSOR_MAX_DIMS)
		return sh_err_set(
			r, SHOAL_EINVAL,
			"%s: dtype %d and %d dims: expected a known dtype and 0 to %d dims", what,
			(int)t->dtype, t->ndim, SHOAL_TENSOR_MAX_DIMS);
	for (int i = 0; i < t->ndim; i++)
		if (t->shape[i] < 0 || shoal_mul_size(bytes, (size_t)t->shape[i], &bytes) != 0)
			return sh_err_set(r, SHOAL_EINVAL,
					  "%s: dimension %d is %" PRId64
					  ": expected non-negative and a size that fits",
					  what, i, t->shape[i]);
	if (bytes != t->nbytes || (bytes && !t->data))
		return sh_err_set(r, SHOAL_EINVAL,
				  "%s: %s of %d dims is %zu bytes, and nbytes says %zu%s", what,
				  shoal_dtype_name(t->dtype), t->ndim, bytes, t->nbytes,
				  bytes && !t->data ? " (and data is NULL)" : "");
	shoal_node *n = node_new(pt, "tensor", 2, 1, 0);
	int64_t *shape = sh_bump_alloc(&pt->a, (t->ndim ? (size_t)t->ndim : 1) * sizeof(int64_t));
	if (!n || !shape)
		return sh_err_set(r, SHOAL_ENOMEM, "%s: out of memory", what);
	if (t->ndim)
		memcpy(shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
	const char *dn = shoal_dtype_name(t->dtype);
	n->fields[n->nfields++] =
		(sh_field){.key = "dtype", .kind = SH_F_STR, .n = (uint32_t)strlen(dn), .v.s = dn};
	n->fields[n->nfields++] = (sh_field){
		.key = "shape", .kind = SH_F_INTS, .n = (uint32_t)t->ndim, .v.ints = shape};
	if (add_blob(pt, n, t->data, bytes))
		return sh_err_set(r, SHOAL_ENOMEM, "%s: out of memory", what);
	*out = n;
	return 0;
}

/* PUT of pt's tree: the request, the store's go, the bytes, its id. */
static int put(shoal_remote *r, put_tree *pt, const char *name, unsigned flags, int64_t deadline,
	       shoal_id *id)
{
	if (flags & ~(unsigned)(SHOAL_PERSIST | SHOAL_REPLACE))
		return sh_err_set(r, SHOAL_EINVAL,
				  "put: flags %#x: expected SHOAL_PERSIST|SHOAL_REPLACE", flags);
	if (name && (!*name || strlen(name) > SH_NODE_MAX_NAME))
		return sh_err_set(r, SHOAL_EINVAL, "put: a name of 1 to %d bytes, or NULL",
				  SH_NODE_MAX_NAME);
	sh_wbuf w;
	sh_wbuf_init(&w);
	int rc = send_whole(r, &w, sh_peer_pack_put(&w, name, flags, pt->end, pt->root), "PUT",
			    deadline);
	sh_wbuf_fini(&w);
	sh_mp m;
	size_t len;
	uint32_t n;
	if (rc == 0)
		rc = answer(r, SH_PEER_PUT, "PUT", 64u << 10, deadline, &m, &len);
	if (rc)
		return rc;
	if (sh_mp_array(&m, &n) || n != 0 || sh_mp_done(&m)) {
		r->broken = true;
		return sh_err_set(r, SHOAL_EPROTO,
				  "the store at %s answered PUT with something else "
				  "than [] (go)",
				  r->addr);
	}
	if ((rc = sh_channel_send_bulk(r->ch, pt->parts, pt->nparts, deadline)) != 0)
		return broke(r, rc, "PUT's bytes");
	uint64_t oid, sig;
	if ((rc = answer(r, SH_PEER_PUT, "PUT", 64u << 10, deadline, &m, &len)) != 0)
		return rc;
	if (sh_mp_array(&m, &n) || n != 2 || sh_mp_uint(&m, &oid) || sh_mp_uint(&m, &sig) ||
	    sh_mp_done(&m) || oid == 0) {
		r->broken = true;
		return sh_err_set(r, SHOAL_EPROTO,
				  "the store at %s answered PUT's bytes with something else than "
				  "[id, signature]",
				  r->addr);
	}
	if (id)
		*id = oid;
	return 0;
}

int shoal_remote_put_bytes(shoal_remote *r, const char *name, const void *data, size_t size,
			   unsigned flags, int64_t deadline, shoal_id *id)
{
	if (!r || (size && !data))
		return SHOAL_EINVAL;
	int rc = usable(r);
	if (rc)
		return rc;
	put_tree pt = {0};
	if (!(pt.root = node_new(&pt, "bytes", 0, 1, 0)) || add_blob(&pt, pt.root, data, size))
		rc = sh_err_set(r, SHOAL_ENOMEM, "put: out of memory");
	if (rc == 0)
		rc = put(r, &pt, name, flags, deadline, id);
	put_tree_fini(&pt);
	return rc;
}

int shoal_remote_put_tensor(shoal_remote *r, const char *name, const shoal_tensor *t,
			    unsigned flags, int64_t deadline, shoal_id *id)
{
	if (!r || !t)
		return SHOAL_EINVAL;
	int rc = usable(r);
	if (rc)
		return rc;
	put_tree pt = {0};
	if ((rc = tensor_node(r, &pt, t, "put: the tensor", &pt.root)) == 0)
		rc = put(r, &pt, name, flags, deadline, id);
	put_tree_fini(&pt);
	return rc;
}

int shoal_remote_put_tensor_dict(shoal_remote *r, const char *name, const char *const *keys,
				 const shoal_tensor *t, size_t n, const char *const *meta,
				 size_t nmeta, unsigned flags, int64_t deadline, shoal_id *id)
{
	if (!r || (n && (!keys || !t)) || (nmeta && !meta))
		return SHOAL_EINVAL;
	int rc = usable(r);
	if (rc)
		return rc;
	if (n > UINT32_MAX || nmeta > SH_NODE_MAX_FIELDS)
		return sh_err_set(
			r, SHOAL_EINVAL,
			"put: %zu tensors and %zu fields of metadata: expected at most %u and "
			"%d",
			n, nmeta, UINT32_MAX, SH_NODE_MAX_FIELDS);
	put_tree pt = {0};
	if (!(pt.root = node_new(&pt, "tensor_dict", (uint32_t)nmeta, 0, (uint32_t)n)))
		rc = sh_err_set(r, SHOAL_ENOMEM, "put: out of memory");
	for (size_t j = 0; rc == 0 && j < nmeta; j++) {
		const char *k = meta[2 * j], *v = meta[2 * j + 1];
		if (!k || !*k || strlen(k) > SH_NODE_MAX_KEY || !v)
			rc = sh_err_set(
				r, SHOAL_EINVAL,
				"put: metadata %zu: expected a key of 1 to %d bytes and a value", j,
				SH_NODE_MAX_KEY);
		else
			pt.root->fields[pt.root->nfields++] = (sh_field){
				.key = k, .kind = SH_F_STR, .n = (uint32_t)strlen(v), .v.s = v};
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char what[300];
		snprintf(what, sizeof(what), "put: tensor \"%.200s\"", keys[i] ? keys[i] : "");
		if (!keys[i] || !*keys[i] || strlen(keys[i]) > SH_NODE_MAX_NAME) {
			rc = sh_err_set(r, SHOAL_EINVAL, "%s: expected a name of 1 to %d bytes",
					what, SH_NODE_MAX_NAME);
			break;
		}
		shoal_node *m;
		if ((rc = tensor_node(r, &pt, &t[i], what, &m)) == 0) {
			pt.root->names[pt.root->nmembers] = keys[i];
			pt.root->members[pt.root->nmembers++] = m;
		}
	}
	if (rc == 0)
		rc = put(r, &pt, name, flags, deadline, id);
	put_tree_fini(&pt);
	return rc;
}

/* ---- delete, names ---- */

int shoal_remote_delete(shoal_remote *r, const char *name, shoal_id id, int64_t deadline)
{
	if (!r)
		return SHOAL_EINVAL;
	int rc = usable(r);
	if (rc == 0)
		rc = check_key(r, name, id, "delete");
	if (rc)
		return rc;
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 1);
	pack_key(&pk, name, id);
	rc = send_frame(r, &w, SH_PEER_DELETE, "DELETE", deadline);
	sh_wbuf_fini(&w);
	sh_mp m;
	size_t len;
	uint32_t n;
	if (rc == 0 &&
	    (rc = answer(r, SH_PEER_DELETE, "DELETE", 64u << 10, deadline, &m, &len)) == 0 &&
	    (sh_mp_array(&m, &n) || n != 0 || sh_mp_done(&m))) {
		r->broken = true;
		rc = sh_err_set(r, SHOAL_EPROTO,
				"the store at %s answered DELETE with something else "
				"than []",
				r->addr);
	}
	return rc;
}

int sh_remote_parse_names(sh_mp *m, sh_bump *a, shoal_entry **out, uint32_t *count, bool *more,
			  char *why, size_t whylen)
{
	uint32_t n, k;
	*out = NULL;
	*count = 0;
	/* each entry takes at least 6 bytes of the answer: a count beyond
	 * them is a lie, never an allocation */
	if (sh_mp_array(m, &n) || n != 2 || sh_mp_array(m, &k) ||
	    (size_t)k > (size_t)(m->end - m->p) / 5) {
		snprintf(why, whylen, "something else than [[name, id, type, bytes]..., more]");
		return SHOAL_EPROTO;
	}
	shoal_entry *v = sh_bump_alloc(a, (k ? k : 1) * sizeof(*v));
	if (!v) {
		snprintf(why, whylen, "%u entries: out of memory here", k);
		return SHOAL_ENOMEM;
	}
	for (uint32_t i = 0; i < k; i++) {
		uint32_t four, nl, tl;
		const char *nm, *ty;
		char *nc, *tc;
		if (sh_mp_array(m, &four) || four != 4 || sh_mp_str(m, &nm, &nl) || nl == 0 ||
		    nl > SH_NODE_MAX_NAME || memchr(nm, 0, nl) || sh_mp_uint(m, &v[i].id) ||
		    sh_mp_str(m, &ty, &tl) || tl > SH_NODE_MAX_KEY || memchr(ty, 0, tl) ||
		    sh_mp_uint(m, &v[i].bytes)) {
			snprintf(why, whylen,
				 "entry %u not [name (1 to %d bytes, no NUL), id, type, bytes]", i,
				 SH_NODE_MAX_NAME);
			return SHOAL_EPROTO;
		}
		/* NUL-terminated copies: the answer's strings are not */
		if (!(nc = sh_bump_alloc(a, nl + 1)) || !(tc = sh_bump_alloc(a, tl + 1))) {
			snprintf(why, whylen, "entry %u: out of memory here", i);
			return SHOAL_ENOMEM;
		}
		memcpy(nc, nm, nl);
		nc[nl] = 0;
		memcpy(tc, ty, tl);
		tc[tl] = 0;
		v[i].name = nc;
		v[i].type = tc;
	}
	if (sh_mp_bool(m, more) || sh_mp_done(m)) {
		snprintf(why, whylen, "bytes after its entries: expected [entries, more]");
		return SHOAL_EPROTO;
	}
	*out = v;
	*count = k;
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const shoal_entry *)a)->name, ((const shoal_entry *)b)->name);
}

int shoal_remote_list(shoal_remote *r, const char *prefix,
		      int (*fn)(const shoal_entry *e, void *ctx), void *ctx, int64_t deadline)
{
	if (!r || !fn)
		return SHOAL_EINVAL;
	int rc = usable(r);
	if (rc)
		return rc;
	if (!prefix)
		prefix = "";
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 1);
	sh_mp_pack_cstr(&pk, prefix);
	rc = send_frame(r, &w, SH_PEER_NAMES, "NAMES", deadline);
	sh_wbuf_fini(&w);
	sh_mp m;
	size_t len;
	if (rc == 0)
		rc = answer(r, SH_PEER_NAMES, "NAMES", SH_PEER_META_MAX + 4096, deadline, &m, &len);
	if (rc)
		return rc;
	shoal_entry *v = NULL;
	uint32_t k = 0;
	bool more;
	sh_bump a = {0};
	char why[300];
	if ((rc = sh_remote_parse_names(&m, &a, &v, &k, &more, why, sizeof(why))) != 0) {
		r->broken = rc == SHOAL_EPROTO;
		rc = sh_err_set(r, rc, "the store at %s answered NAMES with %s", r->addr, why);
	}
	if (rc == 0) {
		qsort(v, k, sizeof(*v), cmp_entry);
		for (uint32_t i = 0; rc == 0 && i < k; i++)
			rc = fn(&v[i], ctx);
	}
	sh_bump_fini(&a);
	return rc;
}

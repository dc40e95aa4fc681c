/* Store clients: connecting (a link, with the set-up of proto.h), requests
 * over the rings, and reading objects: a get maps the blobs' segments
 * read-only (each once while the connection uses it, and a few idle ones
 * kept mapped after, within bounds) and hands out pointers into them; no
 * byte is copied. Also the read side of metadata trees and their DLPack
 * views, the other requests (delete, persist, list, stat, claim,
 * migrate), and what RPC values passed by reference borrow of a mapped
 * segment (rpc/value.c). A client is one thread's: it sleeps on the reply
 * ring's futex, in slices, looking at the socket between them to notice a
 * dead store. */
#include "store/client.h"
#include "ring/msg.h"
#include "shm/shm.h"

#include <dlpack/dlpack.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define REPLY_SPIN_NS 30000	    /* a store round trip is a few us when both spin */
#define LIVENESS_SLICE_NS 100000000 /* how often a sleeping client checks the socket */

const char *shoal_client_error(const shoal_client *c)
{
	return sh_err_get(c);
}

static void client_free(shoal_client *c)
{
	sh_cow_forget(c, UINT64_MAX);
	size_t it = 0;
	uint64_t k;
	void *v;
	while (sh_map_next(&c->segs, &it, &k, &v)) {
		sh_cseg *g = v;
		sh_shm_unmap(g->addr, g->size);
		if (g->fd >= 0)
			close(g->fd);
		SH_DELETE(g);
	}
	sh_map_fini(&c->segs);
	sh_map_fini(&c->objs);
	if (c->arena)
		sh_shm_unmap((void *)c->arena, c->arena_size);
	if (c->arena_fd >= 0)
		close(c->arena_fd);
	sh_link_fini(&c->l);
	sh_wbuf_fini(&c->out);
	if (c->in)
		shoal_free(c->in, c->in_cap);
	SH_DELETE(c);
}

#define DEFAULT_TIMEOUT_NS (30 * 1000000000LL)

int shoal_socket_dir(char *buf, size_t len)
{
	char why[256];
	int rc = sh_link_private_dir(buf, len, why, sizeof(why));
	if (rc)
		sh_error("store", "%s", why);
	return rc;
}

void shoal_connect_opts_init(shoal_connect_opts *o)
{
	o->server_uid = (uid_t)-1;
	o->timeout_ns = DEFAULT_TIMEOUT_NS;
}

int shoal_connect(shoal_client **out, const char *path)
{
	return shoal_connect_with(out, path, NULL);
}

int shoal_connect_with(shoal_client **out, const char *path, const shoal_connect_opts *opts)
{
	if (!out || !path || (opts && opts->timeout_ns < 0 && opts->timeout_ns != SHOAL_FOREVER))
		return SHOAL_EINVAL;
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	if (opts) {
		o = *opts;
		if (o.timeout_ns == 0)
			o.timeout_ns = DEFAULT_TIMEOUT_NS;
	}
	shoal_client *c = SH_NEW(shoal_client);
	if (!c)
		return SHOAL_ENOMEM;
	c->arena_fd = -1;
	sh_link_init(&c->l, -1);
	sh_wbuf_init(&c->out);
	c->timeout_ns = o.timeout_ns;
	uint64_t info[4];
	int arena = -1;
	char why[320];
	int rc = sh_link_connect_to(&c->l, path, SH_STORE_PROTO, SH_STORE_VERSION,
				    SH_STORE_RING_CAP, info, 4, &arena, 1, o.server_uid,
				    shoal_deadline_in(o.timeout_ns), why, sizeof(why));
	if (rc) {
		sh_err_set(c, rc, "store: %s", why);
		goto fail;
	}
	if (info[0] != SH_STORE_VERSION || info[1] == 0 || info[1] > SH_STORE_ARENA_MAX) {
		rc = SHOAL_EPROTO;
		sh_err_set(c, rc,
			   "store set-up: version %" PRIu64 ", arena of %" PRIu64
			   " bytes; expected version %d, an arena of at most %llu",
			   info[0], info[1], SH_STORE_VERSION,
			   (unsigned long long)SH_STORE_ARENA_MAX);
		goto fail;
	}
	c->arena_size = info[1];
	c->id = (uint32_t)info[2];
	c->instance = info[3];
	struct stat st;
	if (fstat(arena, &st) != 0 || (uint64_t)st.st_size < c->arena_size) {
		rc = SHOAL_EPROTO;
		sh_err_set(c, rc, "store set-up: the arena is smaller than it says");
		goto fail;
	}
	if ((rc = sh_shm_map(arena, c->arena_size, false, (void **)&c->arena)) != 0) {
		c->arena = NULL;
		goto fail;
	}
	c->arena_fd = arena;
	arena = -1;
	/* Descriptors come ahead of replies on the socket: bounded as well. */
	if ((rc = sh_link_sock_timeouts(c->l.sock, shoal_deadline_in(c->timeout_ns))) != 0)
		goto fail;
	c->l.down.spin_ns = REPLY_SPIN_NS;
	/* A request from a fiber waits on the doorbell the store made for us,
	 * in the fiber's poller, so the thread's other fibers run meanwhile; a
	 * thread's still sleeps on the futex. One request at a time, so one
	 * doorbell serves both rings. */
	c->l.up.fiber_efd = c->l.down.fiber_efd = c->l.efd_conn;
	*out = c;
	return 0;
fail:
	if (arena >= 0)
		close(arena);
	if (!sh_err_get(c)[0])
		sh_err_set(c, rc, "connecting to %s: %s", path, shoal_strerror(rc));
	if (rc == SHOAL_EACCES) /* someone else serves the socket: say so */
		sh_warn("store", "%s", sh_err_get(c));
	else
		sh_debug("store", "%s", sh_err_get(c));
	client_free(c);
	return rc;
}

int shoal_disconnect(shoal_client *c)
{
	if (!c)
		return SHOAL_EINVAL;
	client_free(c);
	return 0;
}

/* ---- requests ---- */

static void drain(shoal_client *c);

void sh_client_begin(shoal_client *c, msgpack_packer *pk)
{
	if (sh_unlikely(c->pending))
		drain(c); /* before c->out is ours: undoing may send a request */
	sh_wbuf_frame_begin(&c->out);
	sh_wbuf_packer(&c->out, pk);
}

/* Between sleeps: is the store still there? */
static int check_live(shoal_client *c)
{
	struct pollfd p = {.fd = c->l.sock, .events = POLLRDHUP};
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
		c->broken = true;
		return sh_err_set(c, SHOAL_ECONNRESET, "the store closed the connection");
	}
	return 0;
}

/* A request that outlived the connection's timeout, or that its caller
 * interrupted: its reply may still come, so the rings are out of step and
 * the connection is done. */
static int check_deadline(shoal_client *c, int64_t deadline, uint16_t op)
{
	if (c->interrupt && c->interrupt(c->interrupt_arg)) {
		c->broken = true;
		return sh_err_set(c, SHOAL_EINTR,
				  "request op %u interrupted; the connection is closed", op);
	}
	if (deadline == SHOAL_FOREVER || shoal_now_ns() < deadline)
		return 0;
	c->broken = true;
	return sh_err_set(c, SHOAL_ETIMEDOUT,
			  "the store did not answer request op %u within %lld ms (the "
			  "connection's timeout); the connection is closed",
			  op, (long long)(c->timeout_ns / 1000000));
}

int64_t shoal_client_set_timeout(shoal_client *c, int64_t timeout_ns)
{
	if (!c || (timeout_ns < 0 && timeout_ns != SHOAL_FOREVER))
		return SHOAL_EINVAL;
	int64_t old = c->timeout_ns;
	c->timeout_ns = timeout_ns ? timeout_ns : DEFAULT_TIMEOUT_NS;
	return old;
}

void shoal_client_set_interrupt(shoal_client *c, shoal_interrupt_fn fn, void *arg)
{
	if (c) {
		c->interrupt = fn;
		c->interrupt_arg = arg;
	}
}

/* Reads the reply to request seq (op) into c->in, *got and *len carrying
 * the progress (sh_msg_read_part), in slices looking at the store, until
 * deadline, and checks its frame. SHOAL_ECANCELED leaves the connection
 * as it is (the caller keeps the progress); any other failure breaks it. */
static int read_reply(shoal_client *c, uint16_t op, uint32_t seq, size_t *got, size_t *len,
		      int64_t deadline, sh_frame *r)
{
	int rc;
	while ((rc = sh_msg_read_part(&c->l.down, &c->in, &c->in_cap, got, len,
				      SH_STORE_REPLY_MAX + 4096,
				      shoal_deadline_in(LIVENESS_SLICE_NS))) == SHOAL_ETIMEDOUT)
		if ((rc = check_live(c)) != 0 || (rc = check_deadline(c, deadline, op)) != 0)
			return rc;
	if (rc == SHOAL_ECANCELED)
		return rc;
	if (rc) {
		c->broken = true;
		return sh_err_set(c, rc == SHOAL_ECLOSED ? SHOAL_ECONNRESET : rc,
				  "waiting for the store: %s", shoal_strerror(rc));
	}
	c->in_len = *len;
	char why[160] = "";
	if (sh_frame_decode(c->in, *len, r, why, sizeof(why)) != 0 || r->seq != seq ||
	    r->op != op || r->oob) {
		c->broken = true;
		return sh_err_set(c, SHOAL_EPROTO, "reply to request %u (op %u): %s", seq, op,
				  why[0] ? why
					 : "wrong sequence number or op, or out-of-band bytes");
	}
	return 0;
}

int sh_client_call(shoal_client *c, uint16_t op, bool noreply, sh_mp *m)
{
	if (!noreply) /* fire-and-forget requests keep the last failure's message */
		sh_err_clear(c);
	if (c->broken)
		return sh_err_set(c, SHOAL_ECONNRESET, "the connection to the store is broken");
	if (c->pending) /* drain() was cancelled too */
		return sh_err_set(c, SHOAL_ECANCELED,
				  "cancelled while the reply to an earlier cancelled request "
				  "was read");
	sh_frame f = {.op = op, .seq = ++c->seq, .flags = noreply ? SH_FRAME_NOREPLY : 0};
	int rc = sh_wbuf_frame_end(&c->out, &f);
	if (rc)
		return sh_err_set(c, rc, "request: %s", shoal_strerror(rc));
	if (c->out.len > SH_STORE_REPLY_MAX)
		return sh_err_set(c, SHOAL_EMSGSIZE,
				  "request of %zu bytes, the most a request can have is %u",
				  c->out.len, SH_STORE_REPLY_MAX);
	/* In slices, looking at the store between them, until the request's
	 * deadline. */
	int64_t deadline = shoal_deadline_in(c->timeout_ns);
	size_t done = 0;
	while ((rc = sh_msg_write_part(&c->l.up, c->out.p, c->out.len, &done,
				       shoal_deadline_in(LIVENESS_SLICE_NS))) == SHOAL_ETIMEDOUT)
		if ((rc = check_live(c)) != 0 || (rc = check_deadline(c, deadline, op)) != 0)
			return rc;
	if (c->out.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&c->out);
	if (rc == SHOAL_ECANCELED && done == 0) /* nothing of it went */
		return sh_err_set(c, rc, "request op %u cancelled before it was sent", op);
	if (rc) {
		c->broken = true;
		return sh_err_set(c, rc == SHOAL_ECLOSED ? SHOAL_ECONNRESET : rc,
				  "sending a request: %s", shoal_strerror(rc));
	}
	if (noreply)
		return 0;
	size_t got = 0, len = 0;
	sh_frame r;
	if ((rc = read_reply(c, op, f.seq, &got, &len, deadline, &r)) == SHOAL_ECANCELED) {
		/* The reply still comes: the next request reads it first. */
		c->pending = true;
		c->pend_op = op;
		c->pend_seq = f.seq;
		c->pend_got = got;
		c->pend_len = len;
		return sh_err_set(c, rc,
				  "request op %u cancelled; its reply is read and undone before "
				  "the next request",
				  op);
	}
	if (rc)
		return rc;
	sh_mp_init(m, c->in + SH_FRAME_HDR, r.body_len);
	if (r.status != 0) {
		const char *msg = "";
		uint32_t n, ml = 0;
		if (sh_mp_array(m, &n) || n != 1 || sh_mp_str(m, &msg, &ml))
			msg = "(no message)", ml = 12;
		return sh_err_set(c, r.status, "%.*s", (int)ml, msg);
	}
	return 0;
}

int sh_client_recv_fds(shoal_client *c, const uint64_t *ids, int *fds, size_t n)
{
	size_t have = 0;
	while (have < n) {
		uint64_t msg[1 + SH_FD_MAX];
		size_t got;
		int k = 0, rc = sh_fd_recv(c->l.sock, msg, sizeof(msg), &got, fds + have,
					   (int)(n - have < SH_FD_MAX ? n - have : SH_FD_MAX), &k);
		if (rc == 0 && got == 0)
			rc = SHOAL_ECONNRESET;
		if (rc == SHOAL_EAGAIN) /* SO_RCVTIMEO: the connection's timeout */
			rc = SHOAL_ETIMEDOUT;
		bool ok = rc == 0 && got >= 8 && msg[0] == (uint64_t)k && got == 8 + 8 * (size_t)k;
		for (int j = 0; ok && j < k; j++)
			ok = msg[1 + j] == ids[have + (size_t)j];
		if (!ok) {
			for (int j = 0; j < k; j++)
				close(fds[have + (size_t)j]);
			for (size_t j = 0; j < have; j++)
				close(fds[j]);
			c->broken = true;
			return sh_err_set(c, rc ? rc : SHOAL_EPROTO,
					  "receiving %zu segment descriptors: %s", n,
					  rc ? shoal_strerror(rc) : "ids out of step");
		}
		have += (size_t)k;
	}
	return 0;
}

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
		if (g->size > SH_CLIENT_IDLE_MAX_BYTES) {
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
static int call_key(shoal_client *c, uint16_t op, const char *name, shoal_id id, sh_mp *m)
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

static int get_reply(shoal_client *c, sh_mp *mp, shoal_id id, shoal_object **out);

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
		rc = call_key(c, SH_OP_GET, name, id, &m);
	}
	if (rc)
		return rc;
	return get_reply(c, &m, id, out);
}

/* A GET's reply in m: the object (of that id, unless 0), its new
 * segments' descriptors from the socket, mapped. */
static int get_reply(shoal_client *c, sh_mp *mp, shoal_id id, shoal_object **out)
{
	sh_mp m = *mp;
	int rc = 0;
	shoal_object *o = SH_NEW(shoal_object);
	if (!o)
		return SHOAL_ENOMEM; /* the store holds a reference until we disconnect */
	o->c = c;
	o->refs = 1;
	uint32_t n, nnew;
	if (sh_mp_array(&m, &n) || n != 4 || sh_mp_uint(&m, &o->id) || sh_mp_uint(&m, &o->sig) ||
	    sh_mp_array(&m, &nnew) || nnew > 1u << 20 || o->id == 0 || (id && o->id != id)) {
		c->broken = true;
		rc = sh_err_set(c, SHOAL_EPROTO,
				"GET reply: expected [id, sig, segments, node] with the id "
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

/* Reads the reply of the request whose caller was cancelled and undoes
 * what the store did for it: a GET's object is taken (its segments'
 * descriptors are on the socket, ahead of the next reply's) and released,
 * a CREATE's region received and aborted; other replies change nothing of
 * ours and are dropped. Cancelled again, it is left for the next request. */
static void drain(shoal_client *c)
{
	c->pending = false;
	size_t got = c->pend_got, len = c->pend_len;
	uint16_t op = c->pend_op;
	sh_frame r;
	int rc = read_reply(c, op, c->pend_seq, &got, &len, shoal_deadline_in(c->timeout_ns), &r);
	if (rc == SHOAL_ECANCELED) {
		c->pending = true;
		c->pend_got = got;
		c->pend_len = len;
		return;
	}
	if (rc || r.status != 0)
		return; /* broken, or the store did nothing */
	sh_mp m;
	sh_mp_init(&m, c->in + SH_FRAME_HDR, r.body_len);
	if (op == SH_OP_GET) {
		shoal_object *o;
		if (get_reply(c, &m, 0, &o) == 0)
			shoal_object_release(o);
	} else if (op == SH_OP_CREATE) {
		uint32_t n;
		uint64_t seg;
		int fd;
		if (sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &seg) || seg == 0) {
			c->broken = true;
			sh_err_set(c, SHOAL_EPROTO, "CREATE reply: expected [segment]");
			return;
		}
		if (sh_client_recv_fds(c, &seg, &fd, 1) != 0)
			return;
		close(fd);
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		msgpack_pack_array(&pk, 1);
		msgpack_pack_uint64(&pk, seg);
		sh_client_call(c, SH_OP_ABORT, true, &m);
	}
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

/* ---- names and the store ---- */

static int simple(shoal_client *c, uint16_t op, const char *name, shoal_id id)
{
	if (!c || (!name && !id))
		return SHOAL_EINVAL;
	sh_mp m;
	return call_key(c, op, name, id, &m);
}

static int name_op(shoal_client *c, const char *key, shoal_id id, const char *name, bool replace)
{
	if (!c || (!key && !id) || (key && !*key) || (name && !*name))
		return SHOAL_EINVAL;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 3);
	if (key)
		sh_mp_pack_cstr(&pk, key);
	else
		msgpack_pack_uint64(&pk, id);
	if (name)
		sh_mp_pack_cstr(&pk, name);
	else
		msgpack_pack_nil(&pk);
	replace ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
	sh_mp m;
	return sh_client_call(c, SH_OP_NAME, false, &m);
}

int shoal_name(shoal_client *c, shoal_id id, const char *name, bool replace)
{
	if (!name)
		return SHOAL_EINVAL;
	return name_op(c, NULL, id, name, replace);
}

int shoal_unname(shoal_client *c, const char *name)
{
	if (!name)
		return SHOAL_EINVAL;
	return name_op(c, name, 0, NULL, false);
}

int shoal_delete(shoal_client *c, const char *name)
{
	return name ? simple(c, SH_OP_DELETE, name, 0) : SHOAL_EINVAL;
}

int shoal_delete_id(shoal_client *c, shoal_id id)
{
	return simple(c, SH_OP_DELETE, NULL, id);
}

int shoal_persist(shoal_client *c, shoal_id id)
{
	return simple(c, SH_OP_PERSIST, NULL, id);
}

int shoal_claim(shoal_client *c, uint64_t *token)
{
	if (!c || !token)
		return SHOAL_EINVAL;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 0);
	sh_mp m;
	uint32_t n;
	int rc = sh_client_call(c, SH_OP_CLAIM, false, &m);
	if (rc == 0 && (sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, token) || *token == 0))
		rc = sh_err_set(c, SHOAL_EPROTO, "CLAIM reply: expected [token]");
	return rc;
}

int shoal_restrict(shoal_client *c, uint64_t grant)
{
	if (!c)
		return SHOAL_EINVAL;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, grant);
	sh_mp m;
	uint32_t n;
	int rc = sh_client_call(c, SH_OP_RESTRICT, false, &m);
	if (rc == 0 && (sh_mp_array(&m, &n) || n != 0 || sh_mp_done(&m)))
		rc = sh_err_set(c, SHOAL_EPROTO, "RESTRICT reply: expected []");
	return rc;
}

/* One ask at a time, each answered within wait_ms: the whole wait is the
 * connection's timeout, and a progress callback hears between asks. */
int shoal_migrate(shoal_client *c, const char *name, shoal_id id, const shoal_migrate_opts *opts,
		  shoal_id *out)
{
	if (!c || !out || (!name && !id) || (name && !*name) ||
	    (opts && opts->streams > SH_STORE_MIGRATE_STREAMS_MAX))
		return SHOAL_EINVAL;
	shoal_migrate_opts none = {0};
	if (!opts)
		opts = &none;
	int64_t deadline =
		c->timeout_ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(c->timeout_ns);
	uint64_t ticket = 0;
	for (;;) {
		/* each ask well within the connection's timeout */
		int64_t left = deadline == SHOAL_FOREVER ? INT64_MAX : deadline - shoal_now_ns();
		uint64_t wait_ms = opts->progress ? 100 : 1000;
		if (left / 2000000 < (int64_t)wait_ms)
			wait_ms = left > 0 ? (uint64_t)(left / 2000000) : 0;
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		if (ticket) {
			msgpack_pack_array(&pk, 2);
			msgpack_pack_uint64(&pk, ticket);
		} else {
			msgpack_pack_array(&pk, 4);
			if (name)
				sh_mp_pack_cstr(&pk, name);
			else
				msgpack_pack_uint64(&pk, id);
			if (opts->from)
				sh_mp_pack_cstr(&pk, opts->from);
			else
				msgpack_pack_nil(&pk);
			msgpack_pack_uint32(&pk, opts->streams);
		}
		msgpack_pack_uint64(&pk, wait_ms);
		sh_mp m;
		int rc = sh_client_call(c, ticket ? SH_OP_MIGWAIT : SH_OP_MIGRATE, false, &m);
		if (rc)
			return rc;
		uint32_t n;
		bool done;
		uint64_t got, total;
		if (sh_mp_array(&m, &n) || sh_mp_bool(&m, &done) ||
		    (done ? n != 2 || sh_mp_uint(&m, out) || *out == 0
			  : n != 4 || sh_mp_uint(&m, &ticket) || ticket == 0 ||
				     sh_mp_uint(&m, &got) || sh_mp_uint(&m, &total)))
			return sh_err_set(c, SHOAL_EPROTO,
					  "MIGRATE reply: expected [true, id] or [false, "
					  "ticket, received, total]");
		if (done)
			return 0;
		if (opts->progress)
			opts->progress(opts->progress_arg, got, total);
		if (deadline != SHOAL_FOREVER && shoal_now_ns() >= deadline)
			return sh_err_set(c, SHOAL_ETIMEDOUT,
					  "the migration did not finish within %lld ms (the "
					  "connection's timeout): %" PRIu64 " of %" PRIu64
					  " bytes came; it goes on in the store",
					  (long long)(c->timeout_ns / 1000000), got, total);
	}
}

int shoal_store_stat_get(shoal_client *c, shoal_store_stat *st)
{
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 0);
	sh_mp m;
	int rc = sh_client_call(c, SH_OP_STAT, false, &m);
	if (rc)
		return rc;
	uint32_t n;
	uint64_t kind;
	const char *why;
	uint32_t wl;
	if (sh_mp_array(&m, &n) || n != 19 || sh_mp_uint(&m, &st->capacity) ||
	    sh_mp_uint(&m, &st->used) || sh_mp_uint(&m, &st->objects) ||
	    sh_mp_uint(&m, &st->names) || sh_mp_uint(&m, &st->clients) ||
	    sh_mp_uint(&m, &st->pending_frees) || sh_mp_uint(&m, &st->sent) ||
	    sh_mp_uint(&m, &st->sent_bytes) || sh_mp_uint(&m, &st->fetched) ||
	    sh_mp_uint(&m, &st->fetched_bytes) || sh_mp_uint(&m, &st->migrating) ||
	    sh_mp_uint(&m, &st->peers) || sh_mp_uint(&m, &st->registry) ||
	    sh_mp_uint(&m, &st->incoming_bytes) || sh_mp_uint(&m, &st->incoming_total) ||
	    sh_mp_uint(&m, &st->incoming_rate) || sh_mp_uint(&m, &st->spare_bytes) ||
	    sh_mp_uint(&m, &kind) || kind > SHOAL_PAGES_HUGETLB || sh_mp_str(&m, &why, &wl) ||
	    wl >= sizeof(st->pages_why))
		return sh_err_set(c, SHOAL_EPROTO,
				  "STAT reply: expected 17 counters, a page kind and its reason");
	st->pages = (shoal_pages)kind;
	memcpy(st->pages_why, why, wl);
	st->pages_why[wl] = 0;
	return 0;
}

int shoal_list(shoal_client *c, const char *prefix, int (*fn)(const shoal_entry *e, void *ctx),
	       void *ctx)
{
	if (!c || !fn)
		return SHOAL_EINVAL;
	char after[SH_NODE_MAX_NAME + 1];
	bool have_after = false;
	for (;;) {
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		msgpack_pack_array(&pk, 3);
		sh_mp_pack_cstr(&pk, prefix ? prefix : "");
		sh_mp_pack_cstr(&pk, have_after ? after : NULL);
		msgpack_pack_uint64(&pk, SH_STORE_LIST_MAX);
		sh_mp m;
		int rc = sh_client_call(c, SH_OP_LIST, false, &m);
		if (rc)
			return rc;
		uint32_t n, k;
		if (sh_mp_array(&m, &n) || n != 2 || sh_mp_array(&m, &k))
			return sh_err_set(c, SHOAL_EPROTO, "LIST reply: malformed");
		/* Entries point into c->in, which the next call reuses: hand
		 * each out before asking again. */
		for (uint32_t i = 0; i < k; i++) {
			const char *name, *type;
			uint32_t nl, tl, four;
			shoal_entry e;
			if (sh_mp_array(&m, &four) || four != 4 || sh_mp_str(&m, &name, &nl) ||
			    nl > SH_NODE_MAX_NAME || sh_mp_uint(&m, &e.id) ||
			    sh_mp_str(&m, &type, &tl) || tl > SH_NODE_MAX_KEY ||
			    sh_mp_uint(&m, &e.bytes))
				return sh_err_set(c, SHOAL_EPROTO, "LIST reply: malformed entry");
			char tbuf[SH_NODE_MAX_KEY + 1];
			memcpy(after, name, nl);
			after[nl] = 0;
			memcpy(tbuf, type, tl);
			tbuf[tl] = 0;
			have_after = true;
			e.name = after;
			e.type = tbuf;
			if ((rc = fn(&e, ctx)) != 0)
				return rc;
		}
		bool more;
		if (sh_mp_bool(&m, &more))
			return sh_err_set(c, SHOAL_EPROTO, "LIST reply: malformed");
		if (!more)
			return 0;
	}
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

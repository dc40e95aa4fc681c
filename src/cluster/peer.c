/* The source side of migrations, and a store's side of remote clients:
 * other stores and shoal_remote clients connect on opts.peer (TCP), prove
 * they know the cluster's secret, and FETCH objects; a remote client also
 * PUTs, DELETEs and lists NAMES (cluster.h). The store's
 * thread runs the handshake and the requests (fibers); the bytes go from a
 * thread per share (the FETCH's link sends the first, each link that JOINs
 * the transfer one more), read where they lie (the object's segments
 * mapped read-only by that thread), while the store goes on serving its
 * clients. The
 * object is held (a read reference) until its last byte is in the socket:
 * a delete meanwhile only unbinds its name. A PUT's bytes come the other
 * way, into a region charged against the store's room as a copy's is
 * (extend.h), received by a thread; they become an object only once every
 * byte came, and a link that ends first leaves nothing. What a link put
 * without persist goes when the link does. */
#include "cluster/cluster.h"
#include "net/listener.h"
#include "shm/shm.h"
#include "store/proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Strangers may not crowd out anyone: at most this many handshakes at once
 * (5 s each at most), this many from one address, and a silent one gives
 * its place up to a newcomer when all are taken (sh_hellos); a peer link
 * counts against the descriptors. */
#define PEER_HELLOS 32
#define PEER_HELLOS_PER_SOURCE 8
/* A peer that takes nothing for this long, in the middle of a transfer,
 * is gone. */
#define PEER_STALL_NS (10 * 1000000000LL)
/* The least bytes a share is worth another link for. */
#define SHARE_MIN (32ull << 20)
/* Where a blob's bytes are here: in the store's memory (mem), or in
 * segment seg of the object's, at off. */
typedef struct piece {
	const unsigned char *mem;
	uint32_t seg;
	uint64_t off, len;
} piece;

/* One object on its way to a peer, in shares over one link or several. */
typedef struct xfer {
	st_obj *o;
	piece *pieces; /* its blobs, in the tree's order */
	size_t npieces, cap;
	uint64_t total, token;
	uint32_t k, joined; /* shares; links that joined besides the first */
	uint32_t holds;	    /* links sending it, and the first while it waits */
	shoal_chan *all_in; /* closed when every share has its link, or at a stop */
	bool in_closed;
} xfer;

typedef struct peer_conn peer_conn;

struct sh_peers {
	int lsock;
	char bound[64];
	/* accepts the links (their handshakes' slots, the refusals' log);
	 * their fibers are its group's */
	sh_listener listener;
	uint32_t nconns;
	peer_conn *conns; /* their sockets are shut at the stop */
	sh_map xfers;	  /* token -> xfer waiting for its other links */
	uint64_t next_token;
};

struct peer_conn {
	sh_cluster *cl;
	peer_conn *prev, *next;
	int fd;
	int hello; /* its handshake's slot, until it is over */
	sh_channel *ch;
	char addr[96]; /* "HOST:PORT" (sh_accepted.who) */
	/* a share in flight or a PUT's bytes coming: its thread, its
	 * transfer, how it ended */
	pthread_t thread;
	bool busy;
	xfer *x;
	uint32_t share;
	const sh_peer_put *put;
	const sh_store_region *dst;
	/* the transient objects this link put: they go with it */
	uint64_t *puts;
	size_t nputs, cap_puts;
	shoal_chan *done;
	sh_st_mail mail;
	int rc;
	unsigned char *in;
	size_t in_cap;
	sh_wbuf out;
};

/* ---- transfers ---- */

/* Rewrites the blobs of o's tree for the copy's one region, in the order
 * of the tree, noting where each one's bytes are here. */
static int layout(shoal_store *s, shoal_node *n, xfer *x, uint64_t *end)
{
	for (uint32_t i = 0; i < n->nblobs; i++) {
		sh_blobref *b = &n->blobs[i];
		sh_store_place at;
		sh_store_blob_place(s, x->o, b, &at);
		if (x->npieces == x->cap) {
			size_t nc = x->cap ? x->cap * 2 : 16;
			piece *q = shoal_realloc(x->pieces, x->cap * sizeof(piece),
						 nc * sizeof(piece));
			if (!q)
				return SHOAL_ENOMEM;
			x->pieces = q;
			x->cap = nc;
		}
		x->pieces[x->npieces++] = (piece){at.mem, at.seg, at.off, b->size};
		x->total += b->size;
		*end = (*end + SH_STORE_BLOB_ALIGN - 1) & ~(uint64_t)(SH_STORE_BLOB_ALIGN - 1);
		b->seg = 1;
		b->off = *end;
		b->inline_data = NULL;
		*end += b->size;
	}
	for (uint32_t i = 0; i < n->nmembers; i++) {
		int rc = layout(s, n->members[i], x, end);
		if (rc)
			return rc;
	}
	return 0;
}

/* Lets go of x once no link sends it: the object with it. */
static void xfer_drop(sh_cluster *cl, xfer *x)
{
	if (--x->holds)
		return;
	if (x->token)
		sh_map_del(&cl->peers->xfers, x->token);
	if (x->all_in)
		shoal_chan_destroy(x->all_in);
	if (x->pieces)
		shoal_free(x->pieces, x->cap * sizeof(piece));
	sh_store_unhold(cl->s, x->o);
	SH_DELETE(x);
}

static int send_error(peer_conn *pc, const sh_frame *req, int code, const char *fmt, ...)
	SHOAL_PRINTF(4, 5);
static int send_error(peer_conn *pc, const sh_frame *req, int code, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sh_wbuf_reset(&pc->out);
	sh_wbuf_frame_begin(&pc->out);
	msgpack_packer pk;
	sh_wbuf_packer(&pc->out, &pk);
	msgpack_pack_array(&pk, 1);
	sh_mp_pack_cstr(&pk, msg);
	sh_frame f = {.op = req->op, .seq = req->seq, .status = code};
	int rc = sh_wbuf_frame_end(&pc->out, &f);
	return rc ? rc
		  : sh_channel_write(pc->ch, pc->out.p, pc->out.len, true,
				     shoal_deadline_in(PEER_STALL_NS));
}

/* The share's bytes: [lo, hi) of the blobs' bytes laid end to end: from
 * the memory the store has mapped (its arena's small blobs), from segments
 * of huge pages mapped here (populated over what is sent), from the
 * others' files (a mapping would fault 4 KiB pages in one by one: see
 * sh_channel_send_bulk). */
static void *send_main(void *arg)
{
	peer_conn *pc = arg;
	xfer *x = pc->x;
	uint64_t lo, hi, at = 0;
	sh_peer_share(x->total, x->k, pc->share, &lo, &hi);
	uint32_t nsegs = sh_store_nsegs(x->o);
	size_t np = x->npieces ? x->npieces : 1, ns = nsegs ? nsegs : 1;
	sh_bulk_part *v = shoal_alloc(np * sizeof(*v));
	void **maps = shoal_alloc(ns * sizeof(*maps));
	size_t *lens = shoal_alloc(ns * sizeof(*lens));
	int *fds = shoal_alloc(ns * sizeof(*fds));
	size_t n = 0;
	int rc = v && maps && lens && fds ? 0 : SHOAL_ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < nsegs; i++)
		maps[i] = NULL;
	for (uint32_t i = 0; rc == 0 && i < nsegs; i++) {
		uint64_t size;
		bool huge;
		sh_store_seg(pc->cl->s, x->o, i, &fds[i], &size, &huge);
		lens[i] = size;
		if (huge && size)
			rc = sh_shm_map_len(fds[i], &lens[i], false, &maps[i]);
	}
	for (size_t i = 0; rc == 0 && i < x->npieces && at < hi; i++) {
		const piece *q = &x->pieces[i];
		uint64_t a = lo > at ? lo : at, b = at + q->len < hi ? at + q->len : hi;
		at += q->len;
		if (a >= b)
			continue;
		uint64_t off = q->off + (a - (at - q->len));
		if (q->mem) {
			v[n++] = (sh_bulk_part){.p = q->mem + (a - (at - q->len)), .len = b - a};
		} else if (maps[q->seg]) {
			sh_shm_populate_read(maps[q->seg], lens[q->seg], off, b - a);
			v[n++] = (sh_bulk_part){.p = (unsigned char *)maps[q->seg] + off,
						.len = b - a};
		} else {
			v[n++] = (sh_bulk_part){.fd = fds[q->seg], .off = off, .len = b - a};
		}
	}
	/* bounded by the stall */
	if (rc == 0)
		rc = sh_channel_send_bulk(pc->ch, v, n, SHOAL_FOREVER);
	pc->rc = rc;
	for (uint32_t i = 0; maps && lens && i < nsegs; i++)
		sh_shm_unmap(maps[i], lens[i]);
	if (v)
		shoal_free(v, np * sizeof(*v));
	if (maps)
		shoal_free(maps, ns * sizeof(*maps));
	if (lens)
		shoal_free(lens, ns * sizeof(*lens));
	if (fds)
		shoal_free(fds, ns * sizeof(*fds));
	sh_store_post(pc->cl->s, &pc->mail);
	return NULL;
}

static void thread_over(shoal_store *s, sh_st_mail *m)
{
	(void)s;
	peer_conn *pc = (peer_conn *)((char *)m - offsetof(peer_conn, mail));
	pthread_join(pc->thread, NULL);
	pc->busy = false;
	shoal_chan_close(pc->done);
}

/* Runs fn (which sets pc->rc and posts pc->mail last) on a thread of its
 * own, the link's bytes being a thread's work, and waits for it here
 * while the store's thread serves others. */
static int in_thread(peer_conn *pc, void *(*fn)(void *))
{
	int rc = shoal_chan_create(&pc->done, 1, 0);
	if (rc == 0) {
		pc->busy = true;
		pc->mail.fn = thread_over;
		if ((rc = -pthread_create(&pc->thread, NULL, fn, pc)) != 0)
			pc->busy = false;
	}
	char c;
	/* closed when the thread is over (a stop ends it through the socket) */
	while (pc->busy && shoal_chan_recv(pc->done, &c, SHOAL_FOREVER) == SHOAL_ECANCELED)
		shutdown(pc->fd, SHUT_RDWR);
	if (pc->done) {
		shoal_chan_destroy(pc->done);
		pc->done = NULL;
	}
	return rc ? rc : pc->rc;
}

/* Sends share pc->share of pc->x from a thread, waiting for it here. */
static int send_share(peer_conn *pc)
{
	xfer *x = pc->x;
	uint64_t lo, hi;
	sh_peer_share(x->total, x->k, pc->share, &lo, &hi);
	if (lo == hi)
		return 0;
	int rc = in_thread(pc, send_main);
	if (rc)
		sh_warn("store",
			"peer %s: sending share %u of %u of object %016" PRIx64 " failed: %s%s%s",
			pc->addr, pc->share, x->k, sh_store_info(x->o).id, shoal_strerror(rc),
			sh_channel_error(pc->ch)[0] ? ": " : "", sh_channel_error(pc->ch));
	return rc;
}

static int fetch(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	sh_cluster *cl = pc->cl;
	shoal_store *s = cl->s;
	sh_peers *p = cl->peers;
	uint32_t n;
	uint64_t k;
	st_obj *o = NULL;
	const char *name = NULL;
	uint32_t len = 0;
	uint64_t id = 0;
	if (sh_mp_array(m, &n) || n != 2 ||
	    (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &len) : sh_mp_uint(m, &id)) ||
	    sh_mp_uint(m, &k) || k == 0 || k > SH_PEER_STREAMS_MAX || sh_mp_done(m))
		return send_error(pc, req, SHOAL_EBADMSG,
				  "FETCH: expected [id or name, streams (1 to %d)]",
				  SH_PEER_STREAMS_MAX);
	if (!(o = sh_store_find(s, name, len, id)))
		return name ? send_error(pc, req, SHOAL_ENOENT, "no object named \"%.*s\" at %s",
					 (int)(len > 200 ? 200 : len), name, p->bound)
			    : send_error(pc, req, SHOAL_ENOENT, "no object %016" PRIx64 " at %s",
					 id, p->bound);
	sh_store_objinfo oi = sh_store_info(o);
	xfer *x = SH_NEW(xfer);
	if (!x)
		return send_error(pc, req, SHOAL_ENOMEM, "FETCH: out of memory");
	x->o = o;
	x->holds = 1;
	sh_store_hold(s, o); /* until its last byte left: the pieces name its segments */
	sh_bump a = {0};
	shoal_node *root;
	char why[256];
	uint64_t end = 0;
	int rc = sh_store_tree(o, &a, &root, why, sizeof(why));
	if (rc == 0)
		rc = layout(s, root, x, &end);
	/* as many links as asked, each with a share worth a link's set-up */
	x->k = (uint32_t)(x->total / SHARE_MIN < k ? x->total / SHARE_MIN : k);
	x->k = x->k ? x->k : 1;
	if (rc == 0 && x->k > 1) {
		x->token = ++p->next_token;
		if ((rc = shoal_chan_create(&x->all_in, 1, 0)) == 0 &&
		    sh_map_put(&p->xfers, x->token, x) != 0)
			rc = SHOAL_ENOMEM;
	}
	if (rc == 0) {
		sh_wbuf_reset(&pc->out);
		sh_peer_fetch_reply r = {.id = oi.id,
					 .sig = oi.sig,
					 .region = end,
					 .name = oi.name,
					 .root = root,
					 .token = x->token,
					 .k = x->k};
		rc = sh_peer_pack_reply(&pc->out, req->seq, &r);
	}
	sh_bump_fini(&a);
	if (rc) {
		xfer_drop(cl, x);
		return send_error(pc, req, rc, "FETCH: %s", shoal_strerror(rc));
	}
	rc = sh_channel_write(pc->ch, pc->out.p, pc->out.len, true,
			      shoal_deadline_in(PEER_STALL_NS));
	if (rc == 0) {
		pc->x = x;
		pc->share = 0;
		rc = send_share(pc);
		pc->x = NULL;
	}
	/* the other shares' links may still be on their way: the object
	 * stays for them a while, then no more may join */
	if (x->all_in && x->joined + 1 < x->k && rc == 0) {
		char c;
		shoal_chan_recv(x->all_in, &c, shoal_deadline_in(PEER_STALL_NS));
	}
	if (x->token) {
		sh_map_del(&p->xfers, x->token);
		x->token = 0;
	}
	if (rc == 0 && x->joined + 1 == x->k) {
		cl->sent++;
		cl->sent_bytes += oi.bytes;
		sh_debug("store",
			 "peer %s: sent object %016" PRIx64 ", %" PRIu64 " bytes in %u "
			 "shares",
			 pc->addr, oi.id, oi.bytes, x->k);
	}
	xfer_drop(cl, x);
	return rc;
}

static int join(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	sh_cluster *cl = pc->cl;
	uint32_t n;
	uint64_t token, i;
	if (sh_mp_array(m, &n) || n != 2 || sh_mp_uint(m, &token) || sh_mp_uint(m, &i) ||
	    sh_mp_done(m))
		return send_error(pc, req, SHOAL_EBADMSG, "JOIN: expected [token, share]");
	xfer *x = token ? sh_map_get(&cl->peers->xfers, token) : NULL;
	if (!x || i == 0 || i >= x->k || x->joined + 1 >= x->k)
		return send_error(pc, req, SHOAL_ENOENT,
				  "JOIN: no transfer %" PRIu64 " waiting for share %" PRIu64, token,
				  i);
	x->holds++;
	if (++x->joined + 1 == x->k && !x->in_closed) {
		x->in_closed = true;
		shoal_chan_close(x->all_in);
	}
	sh_wbuf_reset(&pc->out);
	sh_wbuf_frame_begin(&pc->out);
	msgpack_packer pk;
	sh_wbuf_packer(&pc->out, &pk);
	msgpack_pack_array(&pk, 0);
	sh_frame f = {.op = req->op, .seq = req->seq};
	int rc = sh_wbuf_frame_end(&pc->out, &f);
	if (rc == 0)
		rc = sh_channel_write(pc->ch, pc->out.p, pc->out.len, true,
				      shoal_deadline_in(PEER_STALL_NS));
	if (rc == 0) {
		pc->x = x;
		pc->share = (uint32_t)i;
		rc = send_share(pc);
		pc->x = NULL;
	}
	xfer_drop(cl, x);
	return rc;
}

/* ---- a remote client's requests ---- */

static int send_ok(peer_conn *pc, const sh_frame *req, sh_wbuf *body)
{
	sh_wbuf_reset(&pc->out);
	sh_wbuf_frame_begin(&pc->out);
	if (body && body->len)
		sh_wbuf_append(&pc->out, body->p, body->len);
	else {
		msgpack_packer pk;
		sh_wbuf_packer(&pc->out, &pk);
		msgpack_pack_array(&pk, 0);
	}
	sh_frame f = {.op = req->op, .seq = req->seq};
	int rc = pc->out.err ? SHOAL_ENOMEM : sh_wbuf_frame_end(&pc->out, &f);
	return rc ? rc
		  : sh_channel_write(pc->ch, pc->out.p, pc->out.len, true,
				     shoal_deadline_in(PEER_STALL_NS));
}

static void *recv_main(void *arg)
{
	peer_conn *pc = arg;
	_Atomic uint64_t got = 0;
	pc->rc = sh_peer_recv_blobs(pc->ch, pc->put->blobs, pc->put->nblobs, 0, pc->put->total,
				    pc->dst, pc->cl->opts->peer_min_rate, SHOAL_FOREVER, &got);
	sh_store_post(pc->cl->s, &pc->mail);
	return NULL;
}

/* A PUT: checked, room taken, "go" ([]), the bytes into a region of their
 * own, then the object: [id, signature]. A failure before the bytes is
 * answered and the link goes on; one while they come ends the link (it is
 * out of step), and the region and its room go with it. */
static int put(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	sh_cluster *cl = pc->cl;
	shoal_store *s = cl->s;
	sh_bump a = {0};
	sh_peer_put p;
	char why[400];
	sh_store_room room = {.spare_fd = -1};
	sh_store_region dst = {.fd = -1};
	int rc = sh_peer_parse_put(m, &p, &a, why, sizeof(why));
	size_t nl = p.name ? strlen(p.name) : 0;
	if (rc == 0)
		rc = sh_store_put_allowed(s, p.name, nl, p.flags, why, sizeof(why));
	if (rc == 0 && pc->nputs == pc->cap_puts) {
		size_t nc = pc->cap_puts ? pc->cap_puts * 2 : 8;
		uint64_t *q = shoal_realloc(pc->puts, pc->cap_puts * 8, nc * 8);
		if (q)
			pc->puts = q, pc->cap_puts = nc;
		else
			rc = SHOAL_ENOMEM, snprintf(why, sizeof(why), "out of memory");
	}
	if (rc == 0)
		rc = sh_store_room_for_copy(s, p.region, &room, why, sizeof(why));
	if (rc == 0 && (rc = sh_store_copy_region(s, p.region, &room, &dst)) != 0)
		snprintf(why, sizeof(why), "a region of %" PRIu64 " bytes: %s", p.region,
			 shoal_strerror(rc));
	bool answered = rc != 0;
	if (rc)
		rc = send_error(pc, req, rc, "PUT: %s", why);
	else if ((rc = send_ok(pc, req, NULL)) == 0) {
		pc->put = &p;
		pc->dst = &dst;
		if ((rc = in_thread(pc, recv_main)) != 0)
			sh_warn("store", "peer %s: a PUT's bytes broke off: %s%s%s", pc->addr,
				shoal_strerror(rc), sh_channel_error(pc->ch)[0] ? ": " : "",
				sh_channel_error(pc->ch));
		pc->put = NULL;
		pc->dst = NULL;
	}
	if (dst.fd >= 0)
		sh_store_copy_region_done(&dst, rc != 0);
	if (rc == 0 && !answered && (rc = sh_memfd_seal(dst.fd)) != 0) {
		snprintf(why, sizeof(why), "sealing its region: %s", shoal_strerror(rc));
		rc = send_error(pc, req, rc, "PUT: %s", why);
		answered = true;
	}
	/* the room a copy holds goes back; adopt counts the region itself */
	sh_store_room_release(s, room.charged);
	if (room.spare_fd >= 0)
		close(room.spare_fd);
	st_obj *o = NULL;
	if (rc == 0 && !answered) {
		int arc = sh_store_adopt_put(s, p.root, &dst.fd, dst.size, p.name, nl, p.flags, &o,
					     why, sizeof(why));
		if (arc)
			rc = send_error(pc, req, arc, "PUT: %s", why);
	}
	if (dst.fd >= 0)
		close(dst.fd);
	sh_bump_fini(&a);
	if (!o)
		return rc;
	sh_store_objinfo oi = sh_store_info(o);
	if (!(p.flags & SHOAL_PERSIST))
		pc->puts[pc->nputs++] = oi.id;
	sh_debug("store", "peer %s: put object %016" PRIx64 ", %" PRIu64 " bytes", pc->addr, oi.id,
		 oi.bytes);
	sh_wbuf body;
	sh_wbuf_init(&body);
	msgpack_packer pk;
	sh_wbuf_packer(&body, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, oi.id);
	msgpack_pack_uint64(&pk, oi.sig);
	rc = send_ok(pc, req, &body);
	sh_wbuf_fini(&body);
	return rc;
}

/* [id | name], as FETCH names an object: it, or an answer saying why
 * not (*o NULL then). */
static int find_key(peer_conn *pc, const sh_frame *req, sh_mp *m, const char *op, st_obj **o)
{
	uint32_t n, len = 0;
	const char *name = NULL;
	uint64_t id = 0;
	*o = NULL;
	if (sh_mp_array(m, &n) || n != 1 ||
	    (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &len) : sh_mp_uint(m, &id)) ||
	    sh_mp_done(m) || (name ? len == 0 || len > SH_NODE_MAX_NAME : id == 0))
		return send_error(pc, req, SHOAL_EBADMSG,
				  "%s: expected [id or name (1 to %d bytes)]", op,
				  SH_NODE_MAX_NAME);
	if ((*o = sh_store_find(pc->cl->s, name, len, id)) != NULL)
		return 0;
	return name ? send_error(pc, req, SHOAL_ENOENT, "no object named \"%.*s\" at %s",
				 (int)(len > 200 ? 200 : len), name, pc->cl->peers->bound)
		    : send_error(pc, req, SHOAL_ENOENT, "no object %016" PRIx64 " at %s", id,
				 pc->cl->peers->bound);
}

static int del(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	st_obj *o;
	int rc = find_key(pc, req, m, "DELETE", &o);
	if (!o)
		return rc;
	char why[400];
	if ((rc = sh_store_delete_obj(pc->cl->s, o, why, sizeof(why))) != 0)
		return send_error(pc, req, rc, "DELETE: %s", why);
	return send_ok(pc, req, NULL);
}

typedef struct names_walk {
	msgpack_packer pk;
	sh_wbuf items;
	uint64_t n;
	bool more;
} names_walk;

static bool name_one(void *arg, const sh_store_objinfo *i)
{
	names_walk *w = arg;
	/* as many as fit one answer (names are up to 4 KiB each) */
	if (w->items.len + strlen(i->name) + strlen(i->type) + 64 > SH_PEER_META_MAX) {
		w->more = true;
		return false;
	}
	msgpack_pack_array(&w->pk, 4);
	sh_mp_pack_cstr(&w->pk, i->name);
	msgpack_pack_uint64(&w->pk, i->id);
	sh_mp_pack_cstr(&w->pk, i->type);
	msgpack_pack_uint64(&w->pk, i->bytes);
	w->n++;
	return true;
}

static int names(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	uint32_t n, plen;
	const char *prefix;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_str(m, &prefix, &plen) || sh_mp_done(m) ||
	    plen > SH_NODE_MAX_NAME)
		return send_error(pc, req, SHOAL_EBADMSG, "NAMES: expected [prefix]");
	names_walk w = {.n = 0};
	sh_wbuf_init(&w.items);
	sh_wbuf_packer(&w.items, &w.pk);
	sh_store_each_name(pc->cl->s, prefix, plen, name_one, &w);
	sh_wbuf body;
	sh_wbuf_init(&body);
	msgpack_packer pk;
	sh_wbuf_packer(&body, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_array(&pk, (uint32_t)w.n);
	sh_wbuf_append(&body, w.items.p, w.items.len);
	w.more ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
	int rc = w.items.err || body.err ? send_error(pc, req, SHOAL_ENOMEM, "NAMES: out of memory")
					 : send_ok(pc, req, &body);
	sh_wbuf_fini(&w.items);
	sh_wbuf_fini(&body);
	return rc;
}

/* ---- a peer's link ---- */

static void *peer_main(void *arg)
{
	peer_conn *pc = arg;
	sh_cluster *cl = pc->cl;
	sh_peers *p = cl->peers;
	char why[160];
	uint32_t proto = 0;
	int rc = sh_auth_server(pc->fd, cl->key, cl->klen, cl->opts->peer_no_encrypt, &proto,
				&pc->ch, why, sizeof(why));
	sh_listener_hello_done(&p->listener, pc->hello);
	if (rc)
		sh_listener_refused(&p->listener, pc->addr, why);
	else if (proto != SH_PEER_PROTO) {
		sh_listener_refused(&p->listener, pc->addr,
				    "not a store (it said it is something else)");
		rc = SHOAL_EPROTO;
	} else {
		sh_channel_set_stall(pc->ch, PEER_STALL_NS);
		sh_debug("store", "peer %s: in", pc->addr);
	}
	while (rc == 0) {
		size_t len;
		rc = sh_channel_read_frame(pc->ch, &pc->in, &pc->in_cap, &len, SH_PEER_REQ_MAX,
					   true, SHOAL_FOREVER);
		if (rc)
			break;
		sh_frame f;
		why[0] = 0;
		if (sh_frame_decode(pc->in, len, &f, why, sizeof(why)) != 0 || f.status || f.oob) {
			sh_warn("store", "peer %s: a request that is not one (%s); closing",
				pc->addr, why[0] ? why : "a status or out-of-band bytes");
			rc = SHOAL_EPROTO;
			break;
		}
		sh_mp m;
		sh_mp_init(&m, pc->in + SH_FRAME_HDR, f.body_len);
		switch (f.op) {
		case SH_PEER_FETCH:
			rc = fetch(pc, &f, &m);
			break;
		case SH_PEER_JOIN:
			rc = join(pc, &f, &m);
			break;
		case SH_PEER_PUT:
			rc = put(pc, &f, &m);
			break;
		case SH_PEER_DELETE:
			rc = del(pc, &f, &m);
			break;
		case SH_PEER_NAMES:
			rc = names(pc, &f, &m);
			break;
		default: /* a newer client's: it hears what this store speaks */
			rc = send_error(pc, &f, SHOAL_ENOTSUP,
					"op %u is not one this store knows (peer protocol %d: "
					"FETCH, JOIN, PUT, DELETE, NAMES)",
					f.op, SH_PEER_VERSION);
		}
	}
	/* what this link put without persist goes with it */
	for (size_t i = 0; i < pc->nputs; i++)
		sh_store_drop_transient(cl->s, pc->puts[i]);
	if (pc->puts)
		shoal_free(pc->puts, pc->cap_puts * 8);
	if (rc && rc != SHOAL_ECLOSED && rc != SHOAL_ECANCELED && rc != SHOAL_EACCES &&
	    rc != SHOAL_EPROTO)
		sh_warn("store", "peer %s: link ends: %s%s%s", pc->addr, shoal_strerror(rc),
			pc->ch && sh_channel_error(pc->ch)[0] ? ": " : "",
			pc->ch ? sh_channel_error(pc->ch) : "");
	shoal_fd_forget(pc->fd);
	close(pc->fd);
	sh_channel_free(pc->ch);
	if (pc->in)
		shoal_free(pc->in, pc->in_cap);
	sh_wbuf_fini(&pc->out);
	if (pc->prev)
		pc->prev->next = pc->next;
	else
		p->conns = pc->next;
	if (pc->next)
		pc->next->prev = pc->prev;
	p->nconns--;
	SH_DELETE(pc);
	return NULL;
}

/* A link holds its socket: room is kept for local clients (the
 * listener's room). */
static bool peer_room(void *arg, char *why, size_t whylen)
{
	sh_cluster *cl = arg;
	if (sh_store_fd_room(cl->s, cl->peers->nconns))
		return true;
	snprintf(why, whylen, "out of descriptors");
	return false;
}

/* A stranger the listener took (it holds a handshake's slot): its link,
 * served by a fiber of the listener's group. */
static int peer_take(void *arg, sh_accepted *a, char *why, size_t whylen)
{
	(void)why, (void)whylen; /* out of memory: the stranger goes unlogged */
	sh_cluster *cl = arg;
	sh_peers *p = cl->peers;
	peer_conn *pc = SH_NEW(peer_conn);
	if (!pc)
		return SHOAL_ENOMEM;
	pc->cl = cl;
	pc->fd = a->fd;
	pc->hello = a->hello;
	snprintf(pc->addr, sizeof(pc->addr), "%s", a->who);
	sh_wbuf_init(&pc->out);
	pc->next = p->conns;
	if (p->conns)
		p->conns->prev = pc;
	p->conns = pc;
	p->nconns++;
	int rc = sh_listener_spawn(&p->listener, peer_main, pc, "store-peer");
	if (rc) {
		p->conns = pc->next;
		if (pc->next)
			pc->next->prev = NULL;
		p->nconns--;
		sh_wbuf_fini(&pc->out);
		SH_DELETE(pc);
	}
	return rc;
}

/* ---- start and stop ---- */

int sh_peers_start(sh_cluster *cl)
{
	char why[256];
	int rc = sh_secret_load(cl->key, &cl->klen, why, sizeof(why));
	if (rc && rc != SHOAL_ENOENT) {
		sh_error("store", "the cluster's secret: %s", why);
		return rc;
	}
	if (rc) /* no secret: this store neither serves peers nor fetches */
		cl->klen = 0;
	const char *peer = cl->opts->peer;
	if (!peer)
		return 0;
	if (!cl->klen) {
		sh_error(
			"store",
			"--peer %s: other stores must prove they know a shared secret, and none "
			"is set: put one (16 bytes or more) in a file named by $SHOAL_SECRET_FILE, "
			"or in $SHOAL_SECRET",
			peer);
		return SHOAL_EACCES;
	}
	sh_peers *p = SH_NEW(sh_peers);
	if (!p)
		return SHOAL_ENOMEM;
	p->lsock = -1;
	cl->peers = p;
	if ((rc = sh_tcp_listen(peer, &p->lsock, p->bound, sizeof(p->bound), why, sizeof(why))) !=
	    0)
		sh_error("store", "--peer %s: %s", peer, why);
	return rc;
}

int sh_peers_serve(sh_cluster *cl)
{
	sh_peers *p = cl->peers;
	if (!p)
		return 0;
	sh_listener_opts lo = {.area = "store",
			       .lsock = p->lsock,
			       .tcp = true,
			       .label = "peer",
			       .hellos = PEER_HELLOS,
			       .hellos_per_source = PEER_HELLOS_PER_SOURCE,
			       .room = peer_room,
			       .take = peer_take,
			       .arg = cl,
			       .fiber_name = "store-peers"};
	return sh_listener_start(&p->listener, &lo);
}

void sh_peers_stop(sh_cluster *cl)
{
	sh_peers *p = cl->peers;
	if (!p)
		return;
	sh_listener_close(&p->listener);
	/* ending a link's socket ends its fiber (and a transfer's thread) */
	for (peer_conn *pc = p->conns; pc; pc = pc->next)
		shutdown(pc->fd, SHUT_RDWR);
	size_t it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&p->xfers, &it, &key, &val)) {
		xfer *x = val;
		if (!x->in_closed) {
			x->in_closed = true;
			shoal_chan_close(x->all_in);
		}
	}
	/* the listener's group is done when the last link's fiber is */
	sh_listener_stop(&p->listener, false, SHOAL_FOREVER);
	shoal_fd_forget(p->lsock);
}

void sh_peers_free(sh_cluster *cl)
{
	if (!cl->peers)
		return;
	if (cl->peers->lsock >= 0)
		close(cl->peers->lsock);
	sh_map_fini(&cl->peers->xfers);
	SH_DELETE(cl->peers);
	cl->peers = NULL;
}

const char *shoal_store_peer(const shoal_store *s)
{
	sh_cluster *cl = s ? sh_cluster_of(s) : NULL;
	return cl && cl->peers ? cl->peers->bound : NULL;
}

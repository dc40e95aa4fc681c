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
 * without persist goes when the link does.
 *
 * This file is the links (accepting, the handshake, reading requests,
 * start and stop); FETCH and JOIN are peer_send.c, PUT, DELETE and NAMES
 * peer_remote.c, the messages' packing and checks peer_wire.c. */
#include "cluster/peer_impl.h"

#include <stdarg.h>
#include <stddef.h>
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

int sh_peer_send_error(peer_conn *pc, const sh_frame *req, int code, const char *fmt, ...)
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
int sh_peer_in_thread(peer_conn *pc, void *(*fn)(void *))
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

int sh_peer_send_ok(peer_conn *pc, const sh_frame *req, sh_wbuf *body)
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
			rc = sh_peer_op_fetch(pc, &f, &m);
			break;
		case SH_PEER_JOIN:
			rc = sh_peer_op_join(pc, &f, &m);
			break;
		case SH_PEER_PUT:
			rc = sh_peer_op_put(pc, &f, &m);
			break;
		case SH_PEER_DELETE:
			rc = sh_peer_op_delete(pc, &f, &m);
			break;
		case SH_PEER_NAMES:
			rc = sh_peer_op_names(pc, &f, &m);
			break;
		default: /* a newer client's: it hears what this store speaks */
			rc = sh_peer_send_error(
				pc, &f, SHOAL_ENOTSUP,
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

/* The peer port's insides, shared by peer.c (the links: accepting,
 * the handshake, reading requests, start and stop), peer_send.c (FETCH
 * and JOIN: objects sent in shares) and peer_remote.c (a remote client's
 * PUT, DELETE and NAMES). */
#ifndef SHOAL_CLUSTER_PEER_IMPL_H
#define SHOAL_CLUSTER_PEER_IMPL_H

#include "cluster/cluster.h"
#include "net/listener.h"

#include <pthread.h>

/* A peer that takes nothing for this long, in the middle of a transfer,
 * is gone. */
#define PEER_STALL_NS (10 * 1000000000LL)
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

/* peer.c: a failure's answer ([message]) to req; an answer of body (NULL:
 * []) to req; fn (which sets pc->rc and posts pc->mail last) run on a
 * thread of its own while the link's fiber waits. */
int sh_peer_send_error(peer_conn *pc, const sh_frame *req, int code, const char *fmt, ...)
	SHOAL_PRINTF(4, 5);
int sh_peer_send_ok(peer_conn *pc, const sh_frame *req, sh_wbuf *body);
int sh_peer_in_thread(peer_conn *pc, void *(*fn)(void *));
/* peer_send.c: FETCH [id | name, streams] and JOIN [token, i]. */
int sh_peer_op_fetch(peer_conn *pc, const sh_frame *req, sh_mp *m);
int sh_peer_op_join(peer_conn *pc, const sh_frame *req, sh_mp *m);
/* peer_remote.c: PUT, DELETE and NAMES. */
int sh_peer_op_put(peer_conn *pc, const sh_frame *req, sh_mp *m);
int sh_peer_op_delete(peer_conn *pc, const sh_frame *req, sh_mp *m);
int sh_peer_op_names(peer_conn *pc, const sh_frame *req, sh_mp *m);

#endif

/* The cluster layer: what links a store to other stores, above the store
 * (which knows nothing of it: store/extend.h). peer.c serves other stores
 * that fetch objects from this one (opts.peer, TCP; peer_send.c,
 * peer_remote.c); migrate.c fetches objects from others into this one
 * (MIGRATE, MIGWAIT, and a get of what is not here; mig_thread.c);
 * peer_wire.c packs and checks their messages; registry.c keeps the
 * cluster's registry in etcd (opts.meta: stores, names unique in the
 * cluster); cluster.c ties them to the store through its hooks. One
 * sh_cluster a store, its state. */
#ifndef SHOAL_CLUSTER_CLUSTER_H
#define SHOAL_CLUSTER_CLUSTER_H

#include "net/net.h"
#include "store/extend.h"
#include "store/proto.h"

#include <pthread.h>
#include <shoal/fiber.h>

/* Stores speak to each other over TCP (SH_PEER_PROTO, after the handshake
 * of net.h, in its channel), in frames of the same layout:
 *   FETCH   [id | name, streams]  -> [id, signature, region_bytes, meta: bin, token, streams]
 *                                    then share 0 of the blobs' bytes
 *   JOIN    [token, i]            -> []  then share i (1 <= i < streams)
 * meta is [name | nil, node] with every blob [1, offset, size] in one
 * region of region_bytes (the copy's layout: one segment, blobs 64-byte
 * aligned, in order). The blobs' bytes, one after another in the tree's
 * order, are cut into shares (sh_peer_share), as many as the reply says:
 * those asked for at most, each worth a link's set-up. The first travels
 * on the FETCH's link, each other one on a link of its own that JOINs the
 * transfer by its token (0 for one stream). The bytes go as the channel's
 * records, which the fetcher writes at their offsets as they come.
 *
 * Version 2 adds what a remote client (remote.c, shoal_remote_*) asks of
 * a store it reaches on the same port with the same secret:
 *   PUT     [name | nil, flags, region_bytes, meta: bin(node)]  -> []
 *           then the client's blobs' bytes (the node's blobs laid out as
 *           FETCH's are, sent as bulk records cut at each blob's end)
 *                                    -> [id, signature]
 *   DELETE  [id | name]           -> []
 *   NAMES   [prefix]              -> [[name, id, type, bytes]..., more: bool]
 * A store of version 1 closes the link at an op it does not know; one of
 * version 2 answers an unknown op with SHOAL_ENOTSUP and its message, and
 * goes on. */
#define SH_PEER_PROTO 0x52454550u /* "PEER": a store's link to another */
#define SH_PEER_VERSION 2
enum { SH_PEER_FETCH = 1, SH_PEER_JOIN, SH_PEER_PUT, SH_PEER_DELETE, SH_PEER_NAMES };
/* The largest region a PUT may ask for (256 TiB): beyond any store. */
#define SH_PEER_REGION_MAX (1ull << 48)
/* The largest request a peer link reads: a PUT's tree. */
#define SH_PEER_REQ_MAX (SH_STORE_REPLY_MAX + 4096)
#define SH_PEER_STREAMS_MAX 16
_Static_assert(SH_PEER_STREAMS_MAX >= SH_STORE_MIGRATE_STREAMS_MAX,
	       "a MIGRATE's links must fit a transfer's");
/* Share i of total bytes cut into k: [*lo, *hi). */
static inline void sh_peer_share(uint64_t total, uint32_t k, uint32_t i, uint64_t *lo, uint64_t *hi)
{
	*lo = total / k * i;
	*hi = i + 1 == k ? total : total / k * (i + 1);
}
/* The largest FETCH reply's metadata (one object's tree). */
#define SH_PEER_META_MAX SH_STORE_REPLY_MAX

typedef struct sh_peers sh_peers;
typedef struct sh_migs sh_migs;
typedef struct sh_registry sh_registry;

typedef struct sh_cluster {
	shoal_store *s;
	const shoal_store_opts *opts; /* the store's */
	/* the cluster's secret (klen 0: none): peers prove it both ways */
	unsigned char key[4096];
	size_t klen;
	sh_peers *peers;  /* serving other stores (opts.peer), or NULL */
	sh_migs *migs;	  /* copies coming here */
	sh_registry *reg; /* opts.meta etcd, or NULL */
	/* STAT's: objects sent to other stores and copied from them, and
	 * their bytes, since the start; copies on their way here */
	uint64_t sent, sent_bytes, fetched, fetched_bytes, migrating;
} sh_cluster;

/* The cluster of store s (its hooks' context). Any thread. */
sh_cluster *sh_cluster_of(const shoal_store *s);

/* peer.c: serving other stores on opts.peer (when set). start: at open,
 * the secret and the listening socket; serve: in the store's thread, the
 * fibers; stop: there, at the end (every transfer ends); free: after. */
int sh_peers_start(sh_cluster *cl);
int sh_peers_serve(sh_cluster *cl);
void sh_peers_stop(sh_cluster *cl);
void sh_peers_free(sh_cluster *cl);
/* A FETCH's answer as the source packs it (the tree's blobs laid out in
 * the copy's region already): a whole frame into w. */
typedef struct sh_peer_fetch_reply {
	uint64_t id, sig, region, token;
	uint32_t k;
	const char *name;
	const shoal_node *root;
} sh_peer_fetch_reply;
int sh_peer_pack_reply(sh_wbuf *w, uint32_t seq, const sh_peer_fetch_reply *r);

/* migrate.c: this store's fetches from others, in the same steps. */
typedef struct sh_mig_blob {
	uint64_t off, size;
} sh_mig_blob;
/* A source's answer to FETCH, checked: the object's tree (its blobs in
 * the one region), their places in the tree's order, the shares. */
typedef struct sh_mig_reply {
	uint64_t id, sig, region, token, total, nblobs;
	uint32_t k;
	shoal_node *root;
	sh_mig_blob *blobs;
	char *name; /* or NULL */
} sh_mig_reply;
/* The blobs of a tree whose every blob lies in one region of region
 * bytes (a FETCH's answer, a PUT's request: outside bytes), checked to lie
 * inside it: their places in the tree's order (allocated from a), their
 * count and bytes. SHOAL_EBADMSG with why when one does not. */
int sh_peer_blobs(const shoal_node *root, uint64_t region, sh_bump *a, sh_mig_blob **blobs,
		  uint64_t *nblobs, uint64_t *total, char *why, size_t whylen);
/* Receives [lo, hi) of the blobs' bytes laid end to end (as
 * sh_channel_send_bulk sent them, cut at each blob's end) into their
 * places in dst, the peer held to min_rate bytes a second meanwhile (0:
 * 1 MB/s), until deadline at most. A thread. */
int sh_peer_recv_blobs(sh_channel *ch, const sh_mig_blob *blobs, uint64_t nblobs, uint64_t lo,
		       uint64_t hi, const sh_store_region *dst, uint64_t min_rate, int64_t deadline,
		       _Atomic uint64_t *got);
/* A PUT's request, checked (from a peer or a remote client: hostile): the
 * name (NUL-terminated, from a) or NULL, flags (SHOAL_PERSIST,
 * SHOAL_REPLACE), the region's bytes, the tree and its blobs. */
typedef struct sh_peer_put {
	char *name;
	unsigned flags;
	uint64_t region, total, nblobs;
	shoal_node *root;
	sh_mig_blob *blobs;
} sh_peer_put;
int sh_peer_parse_put(sh_mp *m, sh_peer_put *out, sh_bump *a, char *why, size_t whylen);
/* A NAMES answer's body at m (from a store: outside bytes), read by a
 * remote client: its entries, NUL-terminated copies allocated from a, and
 * whether the store had more than it sent. SHOAL_EPROTO (or
 * SHOAL_ENOMEM) with why. */
int sh_remote_parse_names(sh_mp *m, sh_bump *a, shoal_entry **out, uint32_t *count, bool *more,
			  char *why, size_t whylen);
/* A PUT's request as a remote client packs it: a whole frame into w. */
int sh_peer_pack_put(sh_wbuf *w, const char *name, unsigned flags, uint64_t region,
		     const shoal_node *root);
/* A failure's answer (a frame of status < 0, its body at m: [message]),
 * from a peer (hostile): its code (its own codes only, else
 * SHOAL_EPROTO) and its message in why. */
int sh_peer_failure(int status, sh_mp *m, char *why, size_t whylen);
/* Decodes the frame at buf (from a peer: hostile) into *out, allocating
 * from a. A negative code, and why: the source's own failure (its
 * status), SHOAL_EPROTO or SHOAL_EBADMSG. */
int sh_mig_parse_reply(const void *buf, size_t len, sh_mig_reply *out, sh_bump *a, char *why,
		       size_t whylen);
/* The copies whose bytes are on their way here: bytes received of their
 * total, and the sum of their rates since their bytes began (bytes/s). */
void sh_migs_progress(sh_cluster *cl, uint64_t *received, uint64_t *total, uint64_t *rate);
int sh_migs_start(sh_cluster *cl);
void sh_migs_stop(sh_cluster *cl);
void sh_migs_free(sh_cluster *cl);
/* Room for a local put, taken back from copies on their way here (the
 * newest first, each ended): true once bytes are free. */
bool sh_migs_yield_room(sh_cluster *cl, uint64_t bytes);
/* MIGRATE and MIGWAIT, a client's requests. */
int sh_migs_request(sh_cluster *cl, st_conn *c, const sh_frame *req, sh_mp *m);

/* What a fetch by id expects to come, from the registry's signed record:
 * the name it looked up (which the copy is bound to), the id, signature,
 * type, bytes and the tree's digest. */
typedef struct sh_mig_expect {
	const char *name;
	size_t nl;
	uint64_t id, sig, bytes;
	const char *type;
	unsigned char meta[32];
} sh_mig_expect;
/* A copy of the object name (or id) from the store at from, started or
 * joined, waited for until it is here (a get that missed); x (may be
 * NULL): what the registry says must come, checked before a byte of it is
 * taken. From a fiber of the store's thread. */
int sh_migs_fetch(sh_cluster *cl, const char *name, size_t nl, uint64_t id, const char *from,
		  const sh_mig_expect *x, char *why, size_t whylen);

/* registry*.c: the cluster's registry in etcd (opts.meta "etcd://..."),
 * in the same steps as the peers; note: a persistent named object read
 * back at start, registered with the rest once etcd answers. */
int sh_reg_start(sh_cluster *cl);
void sh_reg_note(sh_cluster *cl, const char *name, uint64_t id, uint64_t sig, const char *type,
		 uint64_t bytes, const unsigned char meta[32]);
int sh_reg_serve(sh_cluster *cl);
void sh_reg_stop(sh_cluster *cl);
void sh_reg_free(sh_cluster *cl);
/* Live stores in the cluster as the watch sees them, and whether etcd
 * answers. */
void sh_reg_stat(sh_cluster *cl, uint64_t *peers, bool *up);
/* Where the store that made object id is, as the watch last saw it
 * (without a call to etcd): false when unknown, or when it is this one. */
bool sh_reg_peer_of(sh_cluster *cl, uint64_t id, char *out, size_t len);

enum { SH_REG_NAME = 1, SH_REG_UNNAME, SH_REG_LOOKUP };
/* One call of the registry's, from a request's fiber (sh_reg_run waits
 * for it without holding the store's thread). */
typedef struct sh_reg_job {
	struct sh_reg_job *next;
	int kind;
	const char *name; /* or NULL (LOOKUP by id) */
	size_t nl;
	uint64_t id, sig, bytes;
	char type[SH_NODE_MAX_KEY + 1];
	unsigned char meta[32]; /* NAME: the tree's digest (sh_node_digest) */
	bool replace;
	/* the outcome: rc and why; a LOOKUP's owner and id, and what its
	 * signed record says the object is */
	int rc;
	char why[600];
	char peer[64];
	uint64_t got_id, got_sig, got_bytes;
	char got_type[SH_NODE_MAX_KEY + 1];
	unsigned char got_meta[32];
	bool got_record; /* a name's record (signed), not only a store's address */
	sh_st_mail mail;
	shoal_chan *done;
} sh_reg_job;
int sh_reg_run(sh_cluster *cl, sh_reg_job *j);
/* A name's record as etcd keeps it (JSON) for j (name, id, sig, type,
 * bytes, meta) at peer, signed under key: malloc'd, or NULL. */
char *sh_reg_record(const unsigned char *key, size_t klen, const sh_reg_job *j, const char *peer);
/* Reads a name's record (what etcd gave back: outside bytes): its peer and
 * id into j, and, when it is signed under key, what it says the object is
 * (j->got_*). A record not signed so, or not of name (NULL: any), is
 * refused (SHOAL_EPERM), one that is not a name's record at all is
 * SHOAL_EPROTO; why says which. */
int sh_reg_parse_record(const unsigned char *key, size_t klen, const char *rec, const char *name,
			size_t nl, sh_reg_job *j, char *why, size_t whylen);

#endif

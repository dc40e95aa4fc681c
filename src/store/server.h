/* The store server's state, shared by the files that serve it: server.c
 * (local clients, objects, memory), peer.c (other stores fetching objects
 * from this one over TCP), migrate.c (this store fetching objects from
 * others) and registry.c (the cluster's registry in etcd). Everything here
 * belongs to the store's thread; other threads reach it only through
 * sh_store_post. */
#ifndef SHOAL_STORE_SERVER_H
#define SHOAL_STORE_SERVER_H

#include "ring/link.h"
#include "store/node.h"
#include "store/pages.h"
#include "wire/wire.h"

#include <pthread.h>
#include <shoal/fiber.h>
#include <shoal/store.h>

#define ARENA_MIN_CLASS 6 /* 64 bytes */
#define ARENA_CLASSES 9	  /* 64 B .. 16 KiB */
#define PAGE 4096u
#define ID_COUNTER ((1ull << 40) - 1) /* the low bits of an id; the rest: the instance */

typedef struct st_conn st_conn;
typedef struct st_obj st_obj;

typedef struct st_seg {
	uint64_t id;
	int fd;
	uint64_t size;
	uint64_t charged; /* what counts against the capacity: size in pages */
	st_conn *creator; /* while unsealed */
	st_obj *owner;
} st_seg;

struct st_obj {
	uint64_t id, sig;
	char *name; /* NULL when unbound */
	char *type;
	unsigned char *meta; /* the stored node encoding */
	size_t meta_len, meta_cap;
	uint64_t bytes;
	st_seg **segs;
	uint32_t nsegs, narena, cap_segs, cap_arena;
	uint64_t *arena; /* offset << 8 | size class, per arena blob */
	uint64_t refs;
	bool deleted, persistent;
	bool global;	   /* its name is registered in the cluster (etcd) */
	bool copy;	   /* fetched from another store: evicted when room is short */
	uint64_t last_get; /* when a client last got it (ns) */
	uint64_t gen;	   /* with a state directory: when its file was written */
	st_conn *creator;  /* NULL once persistent or the creator is gone */
	st_obj *name_next; /* objects whose names share a hash */
};

struct st_conn {
	struct shoal_store *srv;
	st_conn *prev, *next;
	sh_link l; /* up: requests, down: replies */
	uint32_t id;
	pid_t pid;
	sh_map refs;	/* object id -> references held (as a pointer-sized count) */
	sh_map sent;	/* segment ids whose descriptor the client has */
	sh_map regions; /* unsealed segments it created: id -> st_seg */
	sh_map created; /* its transient objects: id -> st_obj */
	uint64_t claim; /* the owner token it claimed (shoal_claim), or 0 */
	/* A connection restricted (RESTRICT) to what another grants: it reads
	 * only its own objects and what the connection that claimed grant
	 * holds or made, makes objects of its own, deletes only those, and
	 * may not list, name over, persist, migrate or seal for others (a
	 * strict extension's). */
	bool restricted;
	uint64_t grant;
	sh_wbuf out;
	unsigned char *in;
	size_t in_cap;
	bool watcher_done;
	shoal_fiber *watcher;
	char why[640];
};

/* Work another thread hands to the store's thread: fn(s, m) runs there. */
typedef struct sh_st_mail {
	struct sh_st_mail *next;
	void (*fn)(struct shoal_store *s, struct sh_st_mail *m);
} sh_st_mail;

typedef struct sh_peers sh_peers;
typedef struct sh_migs sh_migs;
typedef struct sh_registry sh_registry;

struct shoal_store {
	shoal_store_opts opts;
	char path[108];
	int lsock, stop_efd;
	pthread_t thread;
	uint64_t instance; /* the top 24 bits of every id */
	uint64_t next_id, next_seg;
	uint32_t next_client;
	sh_map objs, names, segs;
	sh_map claims;	    /* owner token -> the st_conn that claimed it */
	size_t req_used;    /* bytes of requests over REQ_FREE_MAX being read */
	uint64_t fd_budget; /* descriptors connections and segments may hold */
	int arena_fd, arena_ro_fd;
	unsigned char *arena;
	size_t arena_size, arena_bump;
	sh_ptrstack arena_free[ARENA_CLASSES];
	uint64_t capacity, used, nobjs, nnames, nclients, pending;
	uint64_t sent, sent_bytes, fetched, fetched_bytes, migrating; /* STAT's */
	uint64_t incoming; /* room held by copies on their way here (within used) */
	st_conn *conns;
	struct sh_state *state;	  /* the state directory, or NULL */
	struct sh_spares *spares; /* NULL: none */
	sh_pages pages;		  /* what large segments live on */
	bool stopping;
	/* the mailbox of other threads (sh_store_post) */
	pthread_mutex_t mail_mu;
	sh_st_mail *mail_head, *mail_tail;
	int mail_efd;
	/* the cluster: the secret (klen 0: none), the peer listener, the
	 * migrations under way */
	unsigned char key[4096];
	size_t klen;
	sh_peers *peers;
	sh_migs *migs;
	sh_registry *reg; /* --meta etcd, or NULL */
};

/* Whether bytes more fit --size, evicting copies no one reads if need be;
 * local (a client's put, not a copy coming): then also taking room back
 * from copies on their way here. */
bool sh_store_make_room(shoal_store *s, uint64_t bytes, bool local);
/* migrate.c: room for a local put, taken back from copies on their way
 * here (the newest first, each ended): true once bytes are free. */
bool sh_migs_yield_room(shoal_store *s, uint64_t bytes);
/* Any thread: runs m->fn in the store's thread, soon. */
void sh_store_post(shoal_store *s, sh_st_mail *m);

st_obj *sh_st_name_find(shoal_store *s, const char *name, size_t n);
int sh_st_name_bind(shoal_store *s, st_obj *o, const char *name, size_t n);
void sh_st_obj_delete(shoal_store *s, st_obj *o);
void sh_st_obj_unref(shoal_store *s, st_obj *o, uint64_t n);
/* Replies (a request's handler): begin, pack the body, then reply_ok. */
void sh_st_begin_reply(st_conn *c, msgpack_packer *pk);
int sh_st_reply_ok(st_conn *c, const sh_frame *req, msgpack_packer *pk_unused);
SHOAL_PRINTF(4, 5)
int sh_st_reply_err(st_conn *c, const sh_frame *req, int code, const char *fmt, ...);
/* An object by [id | name] (GET, DELETE, ...): *out, or an error reply. */
int sh_st_lookup(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, st_obj **out);
int sh_store_adopt(shoal_store *s, uint64_t id, uint64_t sig, shoal_node *root, uint32_t nsegs,
		   const int *fds, const uint64_t *sizes, st_obj **out, char *why, size_t whylen);

/* peer.c: serving other stores on opts.peer (when set). start: at open,
 * the secret and the listening socket; serve: in the store's thread, the
 * fibers; stop: there, at the end (every transfer ends); free: after. */
int sh_peers_start(shoal_store *s);
int sh_peers_serve(shoal_store *s);
void sh_peers_stop(shoal_store *s);
void sh_peers_free(shoal_store *s);
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
/* Decodes the frame at buf (from a peer: hostile) into *out, allocating
 * from a. A negative code, and why: the source's own failure (its
 * status), SHOAL_EPROTO or SHOAL_EBADMSG. */
int sh_mig_parse_reply(const void *buf, size_t len, sh_mig_reply *out, sh_bump *a, char *why,
		       size_t whylen);
/* The copies whose bytes are on their way here: bytes received of their
 * total, and the sum of their rates since their bytes began (bytes/s). */
void sh_migs_progress(shoal_store *s, uint64_t *received, uint64_t *total, uint64_t *rate);
int sh_migs_start(shoal_store *s);
void sh_migs_stop(shoal_store *s);
void sh_migs_free(shoal_store *s);
int sh_st_op_migrate(st_conn *c, const sh_frame *req, sh_mp *m);
int sh_st_op_migwait(st_conn *c, const sh_frame *req, sh_mp *m);

/* registry.c: the cluster's registry in etcd (opts.meta "etcd://..."),
 * in the same steps as the peers; note: a persistent named object read
 * back at start, registered with the rest once etcd answers. */
int sh_reg_start(shoal_store *s);
void sh_reg_note(shoal_store *s, const char *name, uint64_t id, uint64_t sig, const char *type,
		 uint64_t bytes, const unsigned char meta[32]);
int sh_reg_serve(shoal_store *s);
void sh_reg_stop(shoal_store *s);
void sh_reg_free(shoal_store *s);
/* Live stores in the cluster as the watch sees them, and whether etcd
 * answers. */
void sh_reg_stat(shoal_store *s, uint64_t *peers, bool *up);
/* Where the store that made object id is, as the watch last saw it
 * (without a call to etcd): false when unknown, or when it is this one. */
bool sh_reg_peer_of(shoal_store *s, uint64_t id, char *out, size_t len);

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
int sh_reg_run(shoal_store *s, sh_reg_job *j);
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

/* migrate.c: a copy of the object name (or id) from the store at from,
 * started or joined, waited for until it is here (a get that missed); x
 * (may be NULL): what the registry says must come, checked before a byte
 * of it is taken. */
int sh_st_fetch(st_conn *c, const char *name, size_t nl, uint64_t id, const char *from,
		const sh_mig_expect *x, char *why, size_t whylen);

#endif

/* The store server's state, shared by the files that serve it: server.c
 * (the loop: connections, opening, closing, persistence), ops.c (requests),
 * arena.c (small objects), segments.c (segments, seals, objects), names.c,
 * state.c (the state directory) and extend.c (what a layer above reaches:
 * store/extend.h). Everything here belongs to the store's thread; other
 * threads reach it only through sh_store_post. */
#ifndef SHOAL_STORE_SERVER_H
#define SHOAL_STORE_SERVER_H

#include "net/listener.h"
#include "ring/link.h"
#include "store/extend.h"
#include "store/node.h"
#include "store/pages.h"
#include "store/spill.h"
#include "wire/wire.h"
#include "fiber/waitq.h"

#include <pthread.h>
#include <shoal/fiber.h>
#include <shoal/store.h>

#define ARENA_MIN_CLASS 6 /* 64 bytes */
#define ARENA_CLASSES 9	  /* 64 B .. 16 KiB */
#define PAGE 4096u
#define ID_COUNTER SH_STORE_ID_COUNTER

/* Every connection holds FDS_PER_CONN descriptors (its socket, two
 * doorbells' two ends, the write end of the client's fiber doorbell) and
 * every segment one, all within RLIMIT_NOFILE: a
 * client that made segments or connections until none was left would stop
 * the store from accepting anyone. Connections may use the whole budget,
 * segments all but what keeps FD_SPARE_CONNS connections possible. */
#define FDS_PER_CONN 6
#define FD_SPARE_CONNS 32

typedef struct st_seg {
	uint64_t id;
	int fd;
	uint64_t size;
	uint64_t charged; /* what counts against the capacity: size in pages */
	st_conn *creator; /* while unsealed */
	st_obj *owner;
	uint32_t mapped; /* connections that have its descriptor (their sent) */
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
	bool global; /* its name is registered in the cluster (etcd) */
	bool copy;   /* fetched from another store: evicted when room is short */
	/* a copy whose name came from the cluster's registry: the registry
	 * says at each get by that name whether it still names this object */
	bool name_cached;
	uint64_t last_get; /* when a client last got it (ns) */
	uint64_t gen;	   /* with a state directory: when its file was written */
	st_conn *creator;  /* NULL once persistent or the creator is gone */
	st_obj *name_next; /* objects whose names share a hash */
	/* With a spill directory (spilling.c): its record there (spill.len 0:
	 * none; a persistent object's is its state file), and whether its
	 * bytes are there only (segs and arena then empty; meta kept, its
	 * blobs' places stale). busy: being spilled or restored. */
	sh_spill_loc spill;
	uint32_t spill_nsegs;  /* segments in that record */
	uint64_t *spill_sizes; /* and their sizes (for the spares a restore takes) */
	bool spilled, busy, in_state;
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
	 * may not list, name over, NAME, persist, migrate or seal for others (a
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
	sh_waitq req_room;  /* requests waiting for req_used to go down */
	uint64_t fd_budget; /* descriptors connections and segments may hold */
	int arena_fd, arena_ro_fd;
	unsigned char *arena;
	size_t arena_size, arena_bump;
	sh_ptrstack arena_free[ARENA_CLASSES];
	uint64_t capacity, used, nobjs, nnames, nclients, pending;
	uint64_t incoming;	    /* room held by copies on their way here (within used) */
	st_conn *conns;		    /* their links are shut at the stop */
	shoal_fiber *mail;	    /* runs what other threads post (sh_store_post) */
	sh_listener listener;	    /* accepts them; their fibers are its group's */
	struct sh_state *state;	    /* the state directory, or NULL */
	struct sh_spares *spares;   /* NULL: none */
	sh_pages pages;		    /* what large segments live on */
	struct sh_spiller *spiller; /* spilling.c, or NULL: no spill directory */
	bool stopping;
	/* the mailbox of other threads (sh_store_post) */
	pthread_mutex_t mail_mu;
	sh_st_mail *mail_head, *mail_tail;
	int mail_efd;
	sh_store_hooks hooks; /* what a layer above adds (extend.h), or all NULL */
};

/* Whether bytes more fit --size, evicting copies no one reads if need be;
 * local (a client's put, not a copy coming): then also taking room back
 * from copies on their way here (the hooks' yield_room). */
bool sh_store_make_room(shoal_store *s, uint64_t bytes, bool local);

st_obj *sh_st_name_find(shoal_store *s, const char *name, size_t n);
int sh_st_name_bind(shoal_store *s, st_obj *o, const char *name, size_t n);
void sh_st_name_unbind(shoal_store *s, st_obj *o);
void sh_st_obj_delete(shoal_store *s, st_obj *o);
void sh_st_obj_unref(shoal_store *s, st_obj *o, uint64_t n);
/* An object by [id | name] (GET, DELETE, ...): *out, or an error reply. */
int sh_st_lookup(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, st_obj **out);
/* The same by [id | name, flags] too, when flags is not NULL (0 if absent). */
int sh_st_lookup_flags(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, uint64_t *flags,
		       st_obj **out);
/* Writes persistent o, named name (or not), into the state directory. */
int sh_st_persist_obj(shoal_store *s, st_obj *o, const char *name, size_t name_len, char *why,
		      size_t whylen);
/* Names o name in the cluster (replace: whatever the name named there
 * before), or with drop lets go of the name there; o is held meanwhile.
 * From a fiber: waits. */
int sh_st_name_global(shoal_store *s, st_obj *o, const char *name, size_t nl, bool drop,
		      bool replace, char *why, size_t whylen);
/* NAME (names.c). */
int sh_st_op_name(st_conn *c, const sh_frame *req, sh_mp *m);
int sh_store_adopt(shoal_store *s, uint64_t id, uint64_t sig, shoal_node *root, uint32_t nsegs,
		   const int *fds, const uint64_t *sizes, st_obj **out, char *why, size_t whylen);

/* Serves o's tree and segments (fds, sizes: nsegs sealed files, blobs
 * named [index + 1, offset, size]; inline ones copied into the arena) as
 * o's bytes, o already known to the store but holding none (spilled):
 * checked as a seal is, within --size. On failure the descriptors stay the
 * caller's. */
int sh_st_obj_load(shoal_store *s, st_obj *o, shoal_node *root, uint32_t nsegs, const int *fds,
		   const uint64_t *sizes, char *why, size_t whylen);
/* o's record (record.h) for a file: meta [name | nil, node] in *w with the
 * arena's blobs inline and segments numbered in the order of o->segs;
 * fds and sizes (o->nsegs each) its segments'. */
int sh_st_obj_record(shoal_store *s, st_obj *o, const char *name, size_t name_len, sh_wbuf *w,
		     int *fds, uint64_t *sizes, char *why, size_t whylen);
/* Frees the bytes of o (segments, arena slots), keeping the object; asks
 * for no spare of its segments' sizes (the spiller asks, for a restore). */
void sh_st_obj_unload(shoal_store *s, st_obj *o);

/* ---- spilling (spilling.c) ---- */

/* Opens the spill directory (opts.spill_dir); the spiller fiber starts
 * with the server's thread and stops with it. */
int sh_st_spill_open(shoal_store *s);
int sh_st_spill_start(shoal_store *s);
void sh_st_spill_stop(shoal_store *s);
void sh_st_spill_close(shoal_store *s);
/* Spills cold objects until bytes more fit --size: true when they do.
 * From a fiber: waits for the spiller (other fibers run meanwhile, so the
 * caller looks at what it holds again after). */
bool sh_st_spill_room(shoal_store *s, uint64_t bytes);
/* Whether memory is short: use past the high mark, objects on disk that a
 * get would bring back, or a last spill that found nothing it could write.
 * Clients are told then to keep nothing mapped idle, which would pin it. */
bool sh_st_spill_short(const shoal_store *s);
/* After use grew: starts the spiller when use is past the high mark. */
void sh_st_spill_check(shoal_store *s);
/* Brings spilled o, which the caller holds, back into memory. From a
 * fiber: waits (the disk's time). A record that fails its checks is never
 * served: SHOAL_EBADMSG, and the caller deletes o. */
int sh_st_restore(shoal_store *s, st_obj *o, char *why, size_t whylen);
/* A persistent object read back from the state directory, header and
 * metadata only (sh_state_load lazy): known by its id, name and type, its
 * bytes read from its file at its first get. */
int sh_st_spill_adopt(shoal_store *s, const sh_state_rec *r, shoal_node *root, st_obj **out,
		      char *why, size_t whylen);
/* o is being freed: its record is dropped. */
void sh_st_spill_forget(shoal_store *s, st_obj *o);
/* The spill's figures for STAT. */
void sh_st_spill_stat(shoal_store *s, shoal_store_stat *st);

/* ---- the loop (server.c) ---- */

/* Descriptors connections, segments and spares hold now. */
uint64_t sh_st_fds_held(const shoal_store *s);

/* ---- requests (ops.c) ---- */

/* Handles one request record in c->in. A nonzero return ends the
 * connection. */
int sh_st_handle(st_conn *c, size_t len);
/* Sends the descriptors of n segments to c's client. */
int sh_st_send_fds(st_conn *c, st_seg **g, size_t n);

/* ---- the arena (arena.c) ---- */

/* The size class of a blob of size bytes. */
int sh_st_arena_class(uint64_t size);
/* A slot for size bytes: *off, within --size; SHOAL_ENOSPC else. */
int sh_st_arena_alloc(shoal_store *s, uint64_t size, uint64_t *off);
void sh_st_arena_free(shoal_store *s, uint64_t off, int c);
/* The arena's memfd, mapped here, and its read-only descriptor. */
int sh_st_arena_make(shoal_store *s);

/* ---- segments and objects (segments.c) ---- */

void sh_st_seg_free(shoal_store *s, st_seg *g);
/* Frees o now, whatever holds it (its name, segments, arena slots). */
void sh_st_obj_free(shoal_store *s, st_obj *o);
/* Drops an unsealed segment c created. */
void sh_st_region_drop(st_conn *c, st_seg *g);
/* Whether segments of these sizes fit --size and the descriptor budget
 * (a state file's, before its segments are read). */
int sh_st_restore_fits(void *arg, uint32_t nsegs, const uint64_t *sizes, char *why, size_t whylen);
/* CREATE, ABORT, SEAL. */
int sh_st_op_create(st_conn *c, const sh_frame *req, sh_mp *m);
int sh_st_op_abort(st_conn *c, const sh_frame *req, sh_mp *m);
int sh_st_op_seal(st_conn *c, const sh_frame *req, sh_mp *m);

#endif

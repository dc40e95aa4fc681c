/* Extending a store: what a layer above it (the cluster, src/cluster)
 * reaches of a store, and the hooks through which the store calls that
 * layer without knowing what it is. The store knows nothing of peers,
 * registries or transfers: it has objects, names, references and room,
 * and it asks its hooks, when it has them, for what it cannot do itself
 * (a request it does not know, an object it does not have, room that
 * copies on their way hold, a name the cluster must agree to).
 *
 * Unless said otherwise, a function here is for the store's own thread
 * (its fibers: request handlers, mail); other threads reach it only
 * through sh_store_post. */
#ifndef SHOAL_STORE_EXTEND_H
#define SHOAL_STORE_EXTEND_H

#include "store/node.h"
#include "wire/wire.h"

#include <shoal/store.h>

typedef struct st_obj st_obj;	/* an object of the store */
typedef struct st_conn st_conn; /* a client's connection */

/* ---- opening: a store, then what extends it, then serving ---- */

/* Makes the store (its memory, its state directory read back) without
 * serving yet: hooks may be set between this and sh_store_serve. */
int sh_store_create(shoal_store **out, const shoal_store_opts *opts);
/* Its socket and its thread: clients are served from here on. */
int sh_store_serve(shoal_store *s);
/* A store made and not served (a failure on the way). */
void sh_store_destroy(shoal_store *s);

/* What a layer above hooks into a store (all may be NULL but ctx). */
typedef struct sh_store_hooks {
	void *ctx;
	/* In the store's thread, once it runs and before its clients are
	 * served (its fibers); and at the end, before its connections go
	 * (every transfer ends). */
	int (*serve)(void *ctx);
	void (*stop)(void *ctx);
	/* After the thread ended, when the store is freed. */
	void (*free)(void *ctx);
	/* A request of an op the store does not handle itself (MIGRATE,
	 * MIGWAIT): its reply, as a handler's. */
	int (*request)(void *ctx, st_conn *c, const sh_frame *req, sh_mp *m);
	/* A get of what is not here (fetch_missing set): have it here, or
	 * say why not (from a fiber: waits). */
	bool fetch_missing;
	int (*fetch)(void *ctx, st_conn *c, const char *name, size_t nl, uint64_t id, char *why,
		     size_t whylen);
	/* Where an object that is not here is (a GET with SH_GET_LOCAL, which
	 * fetches nothing): 0 with the id the cluster knows it by and the
	 * peer address of a store that has it; SHOAL_ENOENT when the cluster
	 * has no such object; else why it could not be asked (from a fiber:
	 * waits). NULL: the layer above cannot say. */
	int (*locate)(void *ctx, const char *name, size_t nl, uint64_t id, uint64_t *got_id,
		      char *where, size_t wherelen, char *why, size_t whylen);
	/* Room for a local put that copies on their way hold: those give it
	 * back (sh_store_room_release) until bytes are free; false if they
	 * cannot. */
	bool (*yield_room)(void *ctx, uint64_t bytes);
	/* STAT's figures of the layer above. */
	void (*stat)(void *ctx, shoal_store_stat *st);
	/* Persistent names are the cluster's (global_names set): name (or,
	 * with drop, let go of) a persistent named object there before the
	 * store does here; root: its tree (NULL with drop). From a fiber:
	 * waits. */
	bool global_names;
	int (*name)(void *ctx, bool drop, const char *name, size_t nl, uint64_t id,
		    const shoal_node *root, bool replace, char *why, size_t whylen);
} sh_store_hooks;

/* Set once, before sh_store_serve. */
void sh_store_set_hooks(shoal_store *s, const sh_store_hooks *h);
/* The ctx the hooks were set with, or NULL. Any thread. */
void *sh_store_hooks_ctx(const shoal_store *s);

/* ---- what any thread may do ---- */

/* Work another thread hands to the store's thread: fn(s, m) runs there. */
typedef struct sh_st_mail {
	struct sh_st_mail *next;
	void (*fn)(shoal_store *s, struct sh_st_mail *m);
} sh_st_mail;
/* Runs m->fn in the store's thread, soon. */
void sh_store_post(shoal_store *s, sh_st_mail *m);
/* The options it was opened with; the top 24 bits of its ids. */
const shoal_store_opts *sh_store_opts(const shoal_store *s);
uint64_t sh_store_instance(const shoal_store *s);
/* An id's low bits count; the rest are the instance of the store that
 * made it. */
#define SH_STORE_ID_COUNTER ((1ull << 40) - 1)

/* ---- objects ---- */

/* The object of that name (name non-NULL) or id, or NULL when there is
 * none (or it is deleted). */
st_obj *sh_store_find(shoal_store *s, const char *name, size_t nl, uint64_t id);
/* A copy of the object here already: the same id, or the same
 * signature (a copy is as good as the original); or NULL. */
st_obj *sh_store_find_copy(shoal_store *s, uint64_t id, uint64_t sig);
/* A reference that keeps o and its memory while held (a delete
 * meanwhile only unbinds its name). */
void sh_store_hold(shoal_store *s, st_obj *o);
void sh_store_unhold(shoal_store *s, st_obj *o);
/* Brings held o back into memory if it was spilled (spill.h), before its
 * tree's places or segments are read: waits (from a fiber). A spill record
 * that fails its checks is never served: SHOAL_EBADMSG, and o is deleted. */
int sh_store_resident(shoal_store *s, st_obj *o, char *why, size_t whylen);

typedef struct sh_store_objinfo {
	uint64_t id, sig, bytes;
	const char *name; /* or NULL */
	const char *type;
} sh_store_objinfo;
sh_store_objinfo sh_store_info(const st_obj *o);
/* o's tree, decoded into a (sh_bump_fini frees it). */
int sh_store_tree(const st_obj *o, sh_bump *a, shoal_node **root, char *why, size_t whylen);

/* Where the bytes of a blob of o's tree (as sh_store_tree gave it) lie:
 * in memory the store has mapped (mem: the arena's small blobs), or in
 * segment seg of o's, at off. */
typedef struct sh_store_place {
	const unsigned char *mem;
	uint32_t seg;
	uint64_t off;
} sh_store_place;
void sh_store_blob_place(shoal_store *s, const st_obj *o, const sh_blobref *b, sh_store_place *out);
/* o's segments: a file each (read it, map it read-only), its size, and
 * whether its pages are huge (a mapping of it costs a fault for 512 of
 * them; a file of 4 KiB pages is better read by the kernel). Any thread,
 * while o is held. */
uint32_t sh_store_nsegs(const st_obj *o);
void sh_store_seg(const shoal_store *s, const st_obj *o, uint32_t i, int *fd, uint64_t *size,
		  bool *huge);

/* Binds name to o unless o has a name or another object has this one:
 * false only when memory ran out. */
bool sh_store_name_if_free(shoal_store *s, st_obj *o, const char *name, size_t nl);
/* Binds name, as the cluster's registry names o now, to o (a copy): taken
 * from a copy it named before (the name was bound again elsewhere), never
 * from an object of this store's own. A get by that name asks the registry
 * again (the hooks' fetch) whether it still names o. false only when
 * memory ran out. */
bool sh_store_name_from_registry(shoal_store *s, st_obj *o, const char *name, size_t nl);

/* ---- copies coming from elsewhere ---- */

/* Room for a copy of region bytes: charged against the capacity (and the
 * room copies on their way may hold, opts.peer_room), evicting copies no
 * one reads if need be; with a spare of its size when one is ready.
 * SHOAL_ENOSPC with why when it does not fit. */
typedef struct sh_store_room {
	uint64_t charged; /* to give back with sh_store_room_release */
	int spare_fd;	  /* a spare of size bytes, or -1 */
	uint64_t size;	  /* the region's file: whole huge pages on hugetlb */
} sh_store_room;
int sh_store_room_for_copy(shoal_store *s, uint64_t region, sh_store_room *r, char *why,
			   size_t whylen);
void sh_store_room_release(shoal_store *s, uint64_t charged);
/* The bytes of the capacity free now. */
uint64_t sh_store_free_bytes(const shoal_store *s);

/* The region a copy's bytes come into (any thread): the room's spare, or
 * a fresh segment on the store's pages, mapped writable when its pages
 * are or will be there (huge pages, allocated ahead of the writer by a
 * thread of their own: sh_pages_segment_ahead), else written by pwrite.
 * done: every page the copy needs exists and the mapping is gone (before
 * the seal); failed: the allocation ahead may stop where it is. */
typedef struct sh_store_region {
	int fd;
	uint64_t size;
	unsigned char *map; /* or NULL */
	size_t maplen;
	struct sh_pages_ahead *ahead;
} sh_store_region;
int sh_store_copy_region(shoal_store *s, uint64_t region, sh_store_room *r, sh_store_region *out);
void sh_store_copy_region_done(sh_store_region *g, bool failed);
/* Serves the sealed region fd (size bytes) as object id with signature sig
 * and tree root, a copy (evicted first when room is short): *out, or a
 * failure with why (SHOAL_EEXIST: it is here already). The region is the
 * store's on success. */
int sh_store_adopt_copy(shoal_store *s, uint64_t id, uint64_t sig, shoal_node *root, int fd,
			uint64_t size, st_obj **out, char *why, size_t whylen);

/* ---- objects a remote client puts, deletes, lists ---- */

/* Serves the sealed region fd (size bytes) as a new object of this
 * store's, as a put's seal would (a fresh id, its own signature, never
 * evicted), of tree root; bound to name (NULL: none) unless another object
 * has it and flags lacks SHOAL_REPLACE (SHOAL_EEXIST); SHOAL_PERSIST (its
 * file written in the state directory, its name taken in the cluster's
 * registry where names are the cluster's: from a fiber, a wait), or else
 * transient: it goes when its maker says (sh_store_drop_transient), as a
 * local client's goes with its connection. Once the region is adopted
 * (*fd set to -1) it is the store's, also when what follows fails (the
 * object is deleted then, its region with it). why says what failed. */
int sh_store_adopt_put(shoal_store *s, shoal_node *root, int *fd, uint64_t size, const char *name,
		       size_t nl, unsigned flags, st_obj **out, char *why, size_t whylen);
/* Whether a put of name with flags may go ahead (before its bytes come):
 * the name free here, or SHOAL_REPLACE. why says which object has it. */
int sh_store_put_allowed(shoal_store *s, const char *name, size_t nl, unsigned flags, char *why,
			 size_t whylen);
/* Deletes object id if it is there and still transient (the link that put
 * it is gone). */
void sh_store_drop_transient(shoal_store *s, uint64_t id);
/* Deletes o as a client's DELETE would; SHOAL_EPERM (why) for an object
 * whose name is the cluster registry's, which a local client deletes. */
int sh_store_delete_obj(shoal_store *s, st_obj *o, char *why, size_t whylen);
/* Calls fn for each bound name starting with the plen bytes of prefix, in
 * no order, until fn returns false. */
void sh_store_each_name(shoal_store *s, const char *prefix, size_t plen,
			bool (*fn)(void *arg, const sh_store_objinfo *i), void *arg);

/* ---- the links that serve other stores ---- */

/* Whether more descriptors than the store's clients and segments hold may
 * be taken (a link held open): it keeps room for local clients. */
bool sh_store_fd_room(const shoal_store *s, uint64_t more);
/* Whether the store is stopping (asks no longer start anything). */
bool sh_store_stopping(const shoal_store *s);

/* Calls fn for each persistent named object (those the state directory
 * gave back: at open, before serving): fn's true marks it the cluster's. */
void sh_store_each_persistent_named(shoal_store *s,
				    bool (*fn)(void *arg, const sh_store_objinfo *i,
					       const shoal_node *root),
				    void *arg);

/* ---- replies to the requests of a hook ---- */

shoal_store *sh_st_conn_store(const st_conn *c);
/* Replies (a request's handler): begin, pack the body, then reply_ok. */
void sh_st_begin_reply(st_conn *c, msgpack_packer *pk);
int sh_st_reply_ok(st_conn *c, const sh_frame *req, msgpack_packer *pk_unused);
SHOAL_PRINTF(4, 5)
int sh_st_reply_err(st_conn *c, const sh_frame *req, int code, const char *fmt, ...);

#endif

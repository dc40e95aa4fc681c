/* shoal object store: immutable objects in shared memory that many
 * processes on a host map read-only, with no copy.
 *
 * A blob is a sealed byte region; an object is a typed metadata tree (a
 * type name, scalar fields, named member nodes, blobs) with a 64-bit id,
 * and a name may point at it. `tensor` and `tensor_dict` are the built-in
 * types. A store is served by shoald or embedded in a process
 * (shoal_store_open_embedded); clients speak the same protocol to both. */
#ifndef SHOAL_STORE_H
#define SHOAL_STORE_H

#include <stdbool.h>
#include <sys/types.h>

#include <shoal/base.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Object ids are unique across hosts: the top 24 bits are drawn at random
 * when a store starts, the low 40 count up. 0 is never an id. */
typedef uint64_t shoal_id;

/* ---- element types ---------------------------------------------------- */

/* Element types of tensors: safetensors' set (names as safetensors spells
 * them), mapped onto DLPack where DLPack has a code. */
typedef enum shoal_dtype {
	SHOAL_DT_INVALID = 0,
	SHOAL_DT_BOOL,
	SHOAL_DT_U8,
	SHOAL_DT_I8,
	SHOAL_DT_U16,
	SHOAL_DT_I16,
	SHOAL_DT_F16,
	SHOAL_DT_BF16,
	SHOAL_DT_U32,
	SHOAL_DT_I32,
	SHOAL_DT_F32,
	SHOAL_DT_U64,
	SHOAL_DT_I64,
	SHOAL_DT_F64,
	SHOAL_DT_F8_E4M3,
	SHOAL_DT_F8_E5M2,
	SHOAL_DT_COUNT
} shoal_dtype;

/* Bytes per element (0 for SHOAL_DT_INVALID or out of range). */
SHOAL_API size_t shoal_dtype_size(shoal_dtype dt);
/* "F32", "BF16", ...; "?" when out of range. */
SHOAL_API const char *shoal_dtype_name(shoal_dtype dt);
/* The dtype spelled by the len bytes at name, or SHOAL_DT_INVALID. */
SHOAL_API shoal_dtype shoal_dtype_from_name(const char *name, size_t len);

#define SHOAL_TENSOR_MAX_DIMS 32

/* ---- the store (a daemon, or embedded in this process) ------------------ */

typedef struct shoal_store shoal_store;

/* The directory of this user's default sockets, written to buf (len bytes):
 * $XDG_RUNTIME_DIR/shoal, else /run/shoal for root, else /tmp/shoal-UID.
 * It is made (mode 0700) if missing. SHOAL_EACCES, with a message in the
 * log, unless it is a directory (not a symlink) that this user owns and no
 * one else may enter: a directory made first by another user could serve
 * or squat this user's sockets. */
SHOAL_API int shoal_socket_dir(char *buf, size_t len);

/* The pages a store's segments of 2 MiB and more live on. */
typedef enum shoal_pages {
	SHOAL_PAGES_4K = 0,	 /* the default: shmem's 4 KiB pages */
	SHOAL_PAGES_THP = 1,	 /* transparent huge pages of shmem */
	SHOAL_PAGES_HUGETLB = 2, /* 2 MiB pages of the kernel's hugetlb pool */
} shoal_pages;
/* "4k", "thp" or "hugetlb". */
SHOAL_API const char *shoal_pages_name(shoal_pages p);

typedef struct shoal_store_opts {
	const char *socket_path; /* NULL: a fresh path in shoal_socket_dir() */
	size_t size;		 /* hard limit on the bytes of all blobs; 0: 1 GiB */
	/* At start, before serving: fault the small-object arena in, and
	 * touch size bytes of the pages large segments will take (on huge
	 * pages with huge_pages) and give them back, so that no put or copy
	 * from another store meets memory the VM never touched (on a VM its
	 * first touch costs seconds a GiB: the host backs it then). The start
	 * takes 0.1-0.7 s a GiB, seconds a GiB the first time. */
	bool reserve;
	gid_t group; /* also admit peers of this group ((gid_t)-1: none) */
	/* NULL: objects live as long as the store. Else persistent objects
	 * (SHOAL_PERSIST, shoal_persist) are also written to files in this
	 * directory when they become persistent, removed when deleted, and
	 * served again, under the same ids and names, by the next store
	 * opened on it. It is made (0700) if missing and refused (SHOAL_EACCES)
	 * unless it is a directory, not a symlink, of this uid that no one else
	 * may enter; one store at a time (SHOAL_EBUSY). Put it on tmpfs
	 * (/dev/shm, /run) to keep a store's objects across restarts of its
	 * process, at the cost of a second copy of their bytes there; on a disk
	 * to keep them across reboots. At start every file is checked (size,
	 * checksums, the metadata as strictly as a client's); a bad one is
	 * logged and moved into aside/, and what does not fit size is too. */
	const char *state_dir;
	/* The most bytes of free capacity kept allocated ahead of creates and
	 * restores, in spare segments the size of recent puts, or of objects
	 * just spilled (1 MiB and up), whose pages a thread of the store
	 * allocates (and, for a restore, touches): a put into one skips the
	 * allocation of its pages, about half its time; a restore also the
	 * first touch of memory the VM took back, several times the read.
	 * Never more than the free capacity (a
	 * create that needs it gives spares up first), so what they cost is
	 * resident memory, not room. 0: none;
	 * SHOAL_STORE_SPARES_AUTO (the default): half the capacity, at most
	 * 1 GiB (a store of 2 GiB keeps one for a put of 1 GiB); with reserve,
	 * half the capacity whatever it is. */
	size_t spares;
	/* Segments of 2 MiB and more on huge pages: from the hugetlb pool
	 * (vm.nr_hugepages) while it has free pages, else shmem's transparent
	 * huge pages where shmem_enabled allows them (advise, always,
	 * within_size), else 4 KiB pages; the store's log and
	 * shoal_store_stat.pages_why say which and why. A huge segment's pages
	 * are allocated when it is created, so a put or a copy from another
	 * store only copies: on a VM, faulting fresh 4 KiB pages in costs
	 * several times the copy. Seals hold on every kind. The store never
	 * changes the system's settings itself. */
	bool huge_pages;
	/* Also serve other stores on TCP here ("HOST:PORT"; port 0: any; NULL:
	 * not): they fetch objects from this one (shoal_migrate). Each must
	 * prove it knows the cluster's shared secret first ($SHOAL_SECRET_FILE,
	 * else $SHOAL_SECRET, as for the task farm); the store will not listen
	 * without one. The same secret lets this store fetch from others. */
	const char *peer;
	/* Every byte between stores is encrypted and authenticated (TLS 1.3,
	 * AES-128-GCM) unless both ends set this: then it goes in clear, still
	 * authenticated. For a trusted network only. */
	bool peer_no_encrypt;
	/* The least rate, in bytes a second over each 5 s, of a copy coming
	 * from another store: one slower is ended and gives back its room;
	 * 0: 1 MB/s. */
	uint64_t peer_min_rate;
	/* The most room copies coming from other stores may hold at once; 0:
	 * all of size (a store that takes one copy as large as itself). A local
	 * put that needs room they hold ends the newest of them first: local
	 * puts come first, whatever this is. */
	uint64_t peer_room;
	/* Where the cluster's names live. NULL or "local": this store's only;
	 * an object of another host is reached by naming its store
	 * (shoal_migrate_opts.from). "etcd://HOST:PORT[,HOST:PORT...]": in
	 * etcd (3.4, through its HTTP/JSON gateway), needing peer: this store
	 * registers itself there under a lease it keeps alive, a persistent
	 * named object's name is unique in the cluster, and a get of a name or
	 * id that lives on another host migrates it here first. */
	const char *meta;
	const char *cluster; /* the cluster's name in etcd; NULL: "default" */
	/* Seconds a store's entries outlive it in etcd; 0: 10. */
	uint32_t lease_ttl_s;
	/* With meta "local": other stores ("HOST:PORT,HOST:PORT...") that a get
	 * of an object not here asks in turn, fetching it from the first that
	 * has it; NULL: none. */
	const char *peers;
	/* NULL: nothing spills, and a create that does not fit size fails.
	 * Else a directory on a disk (made 0700 if missing, checked as
	 * state_dir is; tmpfs and ramfs refused, SHOAL_EINVAL, unless
	 * spill_any_fs) that cold objects are written to when memory runs
	 * short: when use passes spill_high of size, or a create, a seal or a
	 * copy from another store needs room that is not free. Objects no
	 * client holds or has mapped go first, least recently got first, down
	 * to spill_low of size; written and synced before their memory is
	 * freed. A get of a spilled object brings it back within the get,
	 * the same object (id, name, type, signature, bytes) as before. What
	 * is in the directory is removed at the next start: persistent
	 * objects outlive the store through state_dir, whose files are their
	 * spill. */
	const char *spill_dir;
	/* The most bytes of spill files; 0: as many as the disk holds. A
	 * spill past it fails (logged) and the objects stay in memory. */
	uint64_t spill_limit;
	/* Fractions of size: spilling starts past spill_high (0: 0.8) and goes
	 * down to spill_low (0: spill_high - 0.1). */
	double spill_high, spill_low;
	/* Accept a spill_dir on tmpfs or ramfs (tests, or a tmpfs backed by
	 * swap). */
	bool spill_any_fs;
} shoal_store_opts;

#define SHOAL_STORE_SPARES_AUTO ((size_t)-1)

/* Default options: fresh socket path, 1 GiB, no reserve, no extra group,
 * no state directory, automatic spares. */
SHOAL_API void shoal_store_opts_init(shoal_store_opts *o);

/* Starts a store served by a thread of this process on a unix socket
 * (mode 0600) that any process may connect to, as to shoald. */
SHOAL_API int shoal_store_open_embedded(shoal_store **out, const shoal_store_opts *opts);
/* The socket path clients connect to. */
SHOAL_API const char *shoal_store_socket(const shoal_store *s);
/* Where other stores reach this one ("HOST:PORT" as bound), or NULL
 * without opts.peer. */
SHOAL_API const char *shoal_store_peer(const shoal_store *s);
/* What its segments of 2 MiB and more live on, and in *why (when not
 * NULL) why, and how the system would allow a better kind. */
SHOAL_API shoal_pages shoal_store_pages(const shoal_store *s, const char **why);
/* Stops serving: every client sees SHOAL_ECLOSED, every object is freed
 * and the socket is removed. */
SHOAL_API int shoal_store_close(shoal_store *s);

/* ---- clients ------------------------------------------------------------ */

typedef struct shoal_client shoal_client;

typedef struct shoal_connect_opts {
	/* Besides a store of this process's uid or root, one of this uid may
	 * serve the socket ((uid_t)-1: no other). The server's uid is checked
	 * (SO_PEERCRED) before a byte is sent: SHOAL_EACCES otherwise. */
	uid_t server_uid;
	/* How long the set-up, and then each request, may block before it
	 * fails with SHOAL_ETIMEDOUT (a store that stopped answering); the
	 * connection is then broken. 0: 30 s; SHOAL_FOREVER: no bound. */
	int64_t timeout_ns;
} shoal_connect_opts;

/* Defaults: no other server uid, a 30 s timeout. */
SHOAL_API void shoal_connect_opts_init(shoal_connect_opts *o);

/* Connects to the store at socket_path (blocks: up to the timeout). One
 * connection is for one thread at a time. Every call on it that talks to
 * the store blocks its thread, each at most the timeout. */
SHOAL_API int shoal_connect_with(shoal_client **out, const char *socket_path,
				 const shoal_connect_opts *opts);
/* shoal_connect_with with the defaults. */
SHOAL_API int shoal_connect(shoal_client **out, const char *socket_path);
/* Closes the connection: the store drops every reference it held and
 * discards its unsealed creations and transient objects. Objects got
 * through it must be released first. */
SHOAL_API int shoal_disconnect(shoal_client *c);
/* The message of this thread's last failed call on c ("" after a
 * success): what was asked and what the store had, e.g. "store full:
 * asked 2097152 bytes, 1048576 of 2097152 free". Each thread sees its
 * own, like errno (base.h says more). */
SHOAL_API const char *shoal_client_error(const shoal_client *c);
/* The timeout of c's requests from now on, as shoal_connect_opts'
 * timeout_ns (0: 30 s; SHOAL_FOREVER: no bound); returns the one it
 * replaces, or SHOAL_EINVAL for a negative one. */
SHOAL_API int64_t shoal_client_set_timeout(shoal_client *c, int64_t timeout_ns);
/* A function c's requests call at least every 100 ms while they wait for
 * the store: when it returns nonzero the request ends with SHOAL_EINTR and,
 * as after a timeout, the connection is broken (its reply may still come).
 * For a caller that must answer its user's interrupt at once (the Python
 * module checks for Ctrl-C). NULL: none. */
typedef int (*shoal_interrupt_fn)(void *arg);
SHOAL_API void shoal_client_set_interrupt(shoal_client *c, shoal_interrupt_fn fn, void *arg);

typedef struct shoal_store_stat {
	uint64_t capacity;	/* the store's --size */
	uint64_t used;		/* bytes of blobs, sealed or being written */
	uint64_t objects;	/* sealed objects, including deleted ones still mapped */
	uint64_t names;		/* names bound */
	uint64_t clients;	/* open connections */
	uint64_t pending_frees; /* deleted objects waiting for their last reader */
	/* objects copied to other stores (shoal_migrate there) and from them,
	 * and their blobs' bytes, since the store started */
	uint64_t sent, sent_bytes, fetched, fetched_bytes;
	uint64_t migrating; /* copies from other stores on their way here */
	/* with --meta etcd: the stores in the cluster (this one included) as
	 * its watch sees them, and 1 while etcd answers, 2 while it does not;
	 * 0 and 0 without */
	uint64_t peers, registry;
	/* the copies on their way here (migrating): bytes received so far of
	 * their total, and their rate (bytes a second, since their bytes began) */
	uint64_t incoming_bytes, incoming_total, incoming_rate;
	/* bytes of spare segments ready, their pages allocated ahead
	 * (shoal_store_opts.spares): the next puts or copies of their sizes */
	uint64_t spare_bytes;
	shoal_pages pages;   /* what segments of 2 MiB and more live on */
	char pages_why[256]; /* why, and how to enable a better kind */
	/* With a spill directory: objects whose bytes are on disk only now,
	 * and those bytes; the bytes of the spill files (objects brought back
	 * keep their copy there, so a second spill writes nothing) */
	uint64_t spill_objects, spill_bytes, spill_file_bytes;
	/* objects written to disk and brought back since the start, their
	 * bytes, and the rates of each (bytes a second of the time spent
	 * writing, syncing and reading) */
	uint64_t spilled, spilled_bytes, restored, restored_bytes;
	uint64_t spill_rate, restore_rate;
} shoal_store_stat;
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_store_stat_get(shoal_client *c, shoal_store_stat *st);

/* ---- creating objects --------------------------------------------------- */

typedef struct shoal_builder shoal_builder;
typedef struct shoal_node shoal_node;

/* Starts an object of the given type name. Nothing exists in the store
 * until shoal_builder_seal; a builder that is aborted, or whose client
 * dies, leaves nothing behind. */
SHOAL_API int shoal_builder_create(shoal_client *c, const char *type, shoal_builder **out);
/* The root node, which becomes the object. */
SHOAL_API shoal_node *shoal_builder_root(shoal_builder *b);
/* Reserves one shared region of bytes that the next blobs are carved
 * from: one mapping (and one descriptor for every reader) instead of one
 * per blob. Fails with SHOAL_ENOSPC beyond the store's capacity. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_builder_reserve(shoal_builder *b, size_t bytes);

SHOAL_API int shoal_node_set_int(shoal_node *n, const char *key, int64_t v);
SHOAL_API int shoal_node_set_float(shoal_node *n, const char *key, double v);
SHOAL_API int shoal_node_set_bool(shoal_node *n, const char *key, bool v);
SHOAL_API int shoal_node_set_str(shoal_node *n, const char *key, const char *v, size_t len);
SHOAL_API int shoal_node_set_ints(shoal_node *n, const char *key, const int64_t *v, size_t count);
/* A member node, in order; names are unique within a node. */
SHOAL_API int shoal_node_add_member(shoal_node *n, const char *name, const char *type,
				    shoal_node **child);
/* A blob of size bytes, writable at *data until the object is sealed. */
/* Blocks when the blob is over 16 KiB and no reserved region has room: a
 * round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_node_add_blob(shoal_node *n, size_t size, void **data);
/* Makes n a tensor (its type must be "tensor"): dtype and shape fields,
 * C-contiguous, and one blob of the product of shape times the element
 * size, writable at *data until the seal. */
/* Blocks when the blob is over 16 KiB and no reserved region has room: a
 * round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_node_set_tensor(shoal_node *n, shoal_dtype dt, int ndim, const int64_t *shape,
				    void **data);

/* Copies n bytes from src into this builder's blobs at dst (an address
 * that shoal_node_add_blob or shoal_node_set_tensor gave, or inside one).
 * For data that already exists elsewhere: large copies go through the
 * region's file, so the kernel writes the shared pages without faulting
 * them into this process one by one (on a VM that costs 7-14 us a page,
 * more than the copy). SHOAL_EINVAL when [dst, dst+n) is not inside one
 * blob region or inline blob of b. */
SHOAL_API int shoal_builder_write(shoal_builder *b, void *dst, const void *src, size_t n);

enum {
	SHOAL_PERSIST = 1, /* outlive the creating connection (and, with a state
			    * directory, the store process: state_dir) */
	SHOAL_REPLACE = 2, /* rebind name if it is taken (else SHOAL_EEXIST) */
};
/* Seals the object and all its blobs in one request: from now on no one,
 * its creator included, can change them. Binds name if not NULL. The
 * builder is consumed whatever the result. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_builder_seal(shoal_builder *b, const char *name, unsigned flags, shoal_id *id);
/* Seals the object for another connection, the one that claimed owner
 * (shoal_claim): it owns the object from now on, which goes when that
 * connection does (unless deleted first), not when this one does. For an
 * object made for someone else, as a task's result is for its client.
 * SHOAL_ENOENT when no connection claims owner (any more). Unbound and
 * transient; the builder is consumed whatever the result. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_builder_seal_for(shoal_builder *b, uint64_t owner, shoal_id *id);
/* Drops an unsealed builder and its regions. */
SHOAL_API void shoal_builder_abort(shoal_builder *b);

/* One blob of bytes as an object of type "bytes". */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_put_bytes(shoal_client *c, const char *name, const void *data, size_t size,
			      unsigned flags, shoal_id *id);

/* ---- reading objects ---------------------------------------------------- */

typedef struct shoal_object shoal_object;

/* Maps an object read-only, in one round trip, and holds a reference on
 * it until shoal_object_release: a delete meanwhile unbinds the name but
 * frees nothing until the last reader lets go. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_get(shoal_client *c, shoal_id id, shoal_object **out);
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_get_by_name(shoal_client *c, const char *name, shoal_object **out);
/* Where the store is one of a cluster (shoald --meta, --peers-file), a
 * get of an object that is elsewhere fetches it into this store first (a
 * migration); with SHOAL_GET_LOCAL it does not: the object must be here,
 * and the error (SHOAL_ENOENT) says in which store it is. */
enum { SHOAL_GET_LOCAL = 1 };
/* By name, or by id when name is NULL. Blocks: a round trip to the
 * store, and without SHOAL_GET_LOCAL maybe a copy from another host, at
 * most the connection's timeout. */
SHOAL_API int shoal_get_with(shoal_client *c, const char *name, shoal_id id, unsigned flags,
			     shoal_object **out);
SHOAL_API int shoal_object_release(shoal_object *o);
/* A copy-on-write view of o, for readers that may write (torch has no
 * read-only tensors): the same bytes mapped again, privately and
 * writable. A write makes the pages it touches the view's own: o, other
 * views and other processes keep reading the sealed bytes, and a view
 * never written costs no copy. Where no private mapping can be made (on
 * hugetlb pages, a private mapping reserves its pages in the pool; a
 * client holding hundreds of segments keeps no descriptor for more), the
 * view's bytes are copied once. The view holds o; release both with
 * shoal_object_release, in any order. Does not block. */
SHOAL_API int shoal_object_cow(shoal_object *o, shoal_object **out);

/* ---- objects of other hosts --------------------------------------------- */

typedef struct shoal_migrate_opts {
	/* The store that has the object: "HOST:PORT", where it serves other
	 * stores (shoald --peer). */
	const char *from;
	/* Called about every 100 ms while bytes come: received of total. */
	void (*progress)(void *arg, uint64_t received, uint64_t total);
	void *progress_arg;
	/* TCP links the bytes may travel on at once, 1 to 16 (the source uses
	 * fewer for a small object); 0: SHOAL_MIGRATE_STREAMS. */
	uint32_t streams;
} shoal_migrate_opts;
/* Links per migration by default: shoal bench cluster found no gain from
 * more on a 2-core host, where a link's four threads (read, send, receive,
 * write) already keep both cores busy; more links pay off where one TCP
 * stream cannot fill the network. */
#define SHOAL_MIGRATE_STREAMS 1

/* Copies the object id, or the one named name when name is not NULL, from
 * another host's store into this one: the store pulls it into its own
 * shared memory (one region, every blob written in place as it comes)
 * and serves it under the same id and signature, persistent, bound to name
 * when that is free here; *out gets its id. Later gets on this host are
 * local. Many asks for one object while it travels share one transfer; an
 * object that is here already costs nothing. The source holds the object
 * for the whole transfer (a delete there frees nothing until it ends). A
 * peer that dies or a link that breaks fails the call with a message that
 * names the peer and the bytes received; nothing of the copy stays. */
/* Blocks: until the copy is here, at most the connection's timeout. */
SHOAL_API int shoal_migrate(shoal_client *c, const char *name, shoal_id id,
			    const shoal_migrate_opts *opts, shoal_id *out);

/* The root of a got object, as a node tree. */
SHOAL_API const shoal_node *shoal_object_root(const shoal_object *o);
SHOAL_API shoal_id shoal_object_id(const shoal_object *o);
/* Identifies the content across hosts: set on creation, kept by a copy. */
SHOAL_API uint64_t shoal_object_signature(const shoal_object *o);
/* Bytes of all its blobs. */
SHOAL_API uint64_t shoal_object_bytes(const shoal_object *o);

SHOAL_API const char *shoal_node_type(const shoal_node *n);
/* Fields in the order they were set; get each by its name. */
SHOAL_API size_t shoal_node_nfields(const shoal_node *n);
SHOAL_API const char *shoal_node_field_name(const shoal_node *n, size_t i);
/* A field, or SHOAL_ENOENT; SHOAL_EINVAL if it has another kind. */
SHOAL_API int shoal_node_get_int(const shoal_node *n, const char *key, int64_t *v);
SHOAL_API int shoal_node_get_float(const shoal_node *n, const char *key, double *v);
SHOAL_API int shoal_node_get_bool(const shoal_node *n, const char *key, bool *v);
SHOAL_API int shoal_node_get_str(const shoal_node *n, const char *key, const char **v, size_t *len);
/* Copies up to max elements; *count gets the field's length (SHOAL_ERANGE
 * when it is more than max). */
SHOAL_API int shoal_node_get_ints(const shoal_node *n, const char *key, int64_t *v, size_t max,
				  size_t *count);
SHOAL_API size_t shoal_node_nmembers(const shoal_node *n);
SHOAL_API const shoal_node *shoal_node_member(const shoal_node *n, size_t i, const char **name);
SHOAL_API const shoal_node *shoal_node_find(const shoal_node *n, const char *name);
SHOAL_API size_t shoal_node_nblobs(const shoal_node *n);
/* A blob of a got object: read-only memory, valid until the release. */
SHOAL_API int shoal_node_blob(const shoal_node *n, size_t i, const void **data, size_t *size);

/* A tensor node's view: strides in elements (C-contiguous as built). */
typedef struct shoal_tensor {
	shoal_dtype dtype;
	int ndim;
	int64_t shape[SHOAL_TENSOR_MAX_DIMS];
	int64_t strides[SHOAL_TENSOR_MAX_DIMS];
	const void *data;
	size_t nbytes;
} shoal_tensor;
SHOAL_API int shoal_node_tensor(const shoal_node *n, shoal_tensor *t);

/* A DLPack view of a tensor node (struct DLManagedTensor from
 * <dlpack/dlpack.h>, version 0.6). It holds its own reference on the
 * object: calling its deleter releases that, in any order with
 * shoal_object_release. DLPack 0.6 has no 8-bit float: those dtypes fail
 * with SHOAL_ENOTSUP. */
struct DLManagedTensor;
SHOAL_API int shoal_node_dlpack(shoal_object *o, const shoal_node *n, struct DLManagedTensor **out);
/* The same without an allocation or a reference, for a caller that makes
 * many (a dict of a thousand tensors) and manages their lifetime itself:
 * fills m->dl_tensor, with shape and strides (in elements) in the caller's
 * arrays of at least the tensor's ndim elements (shoal_node_tensor). It
 * borrows the object's memory; the caller sets manager_ctx and deleter. */
SHOAL_API int shoal_node_dlpack_fill(const shoal_node *n, struct DLManagedTensor *m, int64_t *shape,
				     int64_t *strides);

/* ---- safetensors files --------------------------------------------------- */

/* Imports a .safetensors file as a tensor_dict: the header is validated
 * (offsets in range and tiling the data, dtypes known, sizes consistent,
 * header bounded), then the data is read once, by the kernel, straight into
 * the store's shared memory. "__metadata__" becomes the root's string
 * fields. flags as for shoal_builder_seal. SHOAL_EBADMSG for an invalid
 * file; shoal_client_error says what is wrong with it. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_import_safetensors(shoal_client *c, const char *path, const char *name,
				       unsigned flags, shoal_id *id);
/* Writes the tensor_dict bound to name as a .safetensors file, as the
 * reference writer would: a file it wrote comes back byte for byte. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_export_safetensors(shoal_client *c, const char *name, const char *path);

/* ---- names -------------------------------------------------------------- */

/* Unbinds name and deletes its object: readers that hold it keep reading;
 * the memory is freed when the last lets go. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_delete(shoal_client *c, const char *name);
/* Binds name to object id, which stays as it was otherwise. An object has
 * one name in a store: SHOAL_EEXIST if it has another, or if name names
 * another object and not replace (with replace the name moves, and that
 * object stays, unnamed). A persistent object's name is the cluster's
 * where the store has a registry, as at its put. */
/* Blocks: a round trip to the store (and the registry's), at most the
 * connection's timeout. */
SHOAL_API int shoal_name(shoal_client *c, shoal_id id, const char *name, bool replace);
/* Lets go of name; its object stays (shoal_delete deletes it). */
/* Blocks: a round trip to the store (and the registry's), at most the
 * connection's timeout. */
SHOAL_API int shoal_unname(shoal_client *c, const char *name);
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_delete_id(shoal_client *c, shoal_id id);
/* Makes an object outlive the connection that created it. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_persist(shoal_client *c, shoal_id id);
/* The owner token of this connection (the same one every time): others
 * seal objects for it with shoal_builder_seal_for. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_claim(shoal_client *c, uint64_t *token);
/* Restricts this connection for good, before it is handed to code that is
 * not trusted (a strict extension's runner does so with its host's
 * token): from then on it reads only objects it made and what the
 * connection whose shoal_claim gave grant (not 0) holds or made,
 * makes objects of its own (a name only when it is free), deletes only
 * those, and every other request (listing names, replacing one, persist,
 * migrate, sealing for another owner, restricting again) fails with
 * SHOAL_EPERM. */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_restrict(shoal_client *c, uint64_t grant);

typedef struct shoal_entry {
	const char *name;
	shoal_id id;
	const char *type;
	uint64_t bytes;
} shoal_entry;
/* Calls fn for each bound name starting with prefix ("" for all), in
 * name order; a nonzero return from fn stops the walk and is returned.
 * fn must not use c (the walk is still reading its replies). */
/* Blocks: a round trip to the store, at most the connection's timeout. */
SHOAL_API int shoal_list(shoal_client *c, const char *prefix,
			 int (*fn)(const shoal_entry *e, void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif

#endif

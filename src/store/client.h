/* The client side of the store protocol, shared by client.c (connection,
 * requests), client_get.c (reading objects), client_node.c (their trees),
 * client_ops.c (the other requests), builder.c (creating objects), cow.c
 * (copy-on-write views), st_io.c (safetensors files in and out) and
 * rpc/value.c (payloads passed by reference, borrowed from segments the
 * client has mapped). */
#ifndef SHOAL_STORE_CLIENT_H
#define SHOAL_STORE_CLIENT_H

#include "ring/link.h"
#include "store/node.h"
#include "store/proto.h"

#include <dlpack/dlpack.h>

/* How many unused segments a client keeps mapped, and how many bytes of
 * them: a kept mapping pins the segment's pages after a delete, until it
 * is evicted, so both are bounded. */
#define SH_CLIENT_IDLE_SEGS 8
#define SH_CLIENT_IDLE_MAX_BYTES (1ull << 30)
/* A segment's descriptor is kept (for copy-on-write views) only when its
 * number is below this: a client holding many segments must not exhaust
 * a soft limit of 1024 descriptors; a view of one not kept copies. */
#define SH_CLIENT_KEEP_FD_MAX 512

typedef struct sh_cseg {
	uint64_t id;
	void *addr;
	size_t size;
	uint32_t users; /* objects of ours that have blobs in it */
	int fd;		/* kept for copy-on-write views (cow.c); -1: not kept */
} sh_cseg;

/* A copy-on-write view (cow.c) maps the object's pages privately: where,
 * from which segment and offset. */
typedef struct sh_cow_map {
	void *addr;
	size_t len;
	uint64_t seg, off;
	bool copied; /* anonymous memory holding a copy, not a mapping of the file */
	bool huge;   /* of hugetlbfs: its reservation holds pool pages, never kept */
} sh_cow_map;

/* Private mappings whose views went without writing to them, kept for the
 * next view of the same bytes: a fresh mapping costs a fault a page (on a
 * VM, ~2 us a page: 150 ms for 256 MiB), a kept one none. Bounded as the
 * idle segments are. */
#define SH_COW_KEEP 8
#define SH_COW_KEEP_BYTES (1ull << 30)

struct shoal_object {
	shoal_client *c;
	shoal_id id;
	uint64_t sig, bytes;
	shoal_node *root;
	sh_bump a;
	uint64_t *segs; /* distinct segments its blobs are in */
	uint32_t nsegs;
	uint32_t refs; /* the caller's, plus one per live DLPack view */
	/* A copy-on-write view: the object it views (held), its mappings. */
	struct shoal_object *base;
	sh_cow_map *maps;
	uint32_t nmaps;
	/* An object got from a remote store (c NULL): its bytes in memory of
	 * this process's own, mapped here, freed at the last release. */
	void *own;
	size_t own_len;
};

struct shoal_client {
	sh_link l; /* up: requests, down: replies */
	const unsigned char *arena;
	size_t arena_size;
	int arena_fd; /* kept, as the segments' (sh_cseg.fd) */
	uint64_t instance;
	uint32_t id, seq;
	sh_wbuf out;
	unsigned char *in; /* the last reply, copied out of the ring */
	size_t in_cap, in_len;
	sh_map segs; /* segment id -> sh_cseg, mapped read-only */
	sh_map objs; /* object id -> the shoal_object we hold of it */
	/* Segments no object of ours uses any more, still mapped: the next get
	 * of them needs no descriptor and no mmap (a get of an object another
	 * process keeps handing us, as an extension's arguments are). */
	uint64_t idle[SH_CLIENT_IDLE_SEGS];
	uint32_t nidle;
	uint64_t idle_bytes;
	sh_cow_map cow_kept[SH_COW_KEEP]; /* cow.c: oldest first */
	uint32_t ncow_kept;
	uint64_t cow_kept_bytes;
	int64_t timeout_ns; /* per request; SHOAL_FOREVER: none */
	shoal_interrupt_fn interrupt;
	void *interrupt_arg;
	bool broken;	/* the store is gone, spoke garbage or stopped answering */
	bool short_mem; /* the last GET said the store spills: nothing kept idle */
	/* A request whose caller was cancelled (shoal_cancel of its fiber)
	 * while the reply was on its way: the reply is read and undone (a GET's
	 * object released, a CREATE's region aborted) before the next request,
	 * so the rings stay in step and the connection stays usable. pend_got
	 * and pend_len: the reply's bytes read so far, as sh_msg_read_part. */
	bool pending;
	uint16_t pend_op;
	uint32_t pend_seq;
	size_t pend_got, pend_len;
};

/* Frees a copy-on-write view (cow.c), releasing what it views. */
void sh_cow_drop(shoal_object *o);
/* Unmaps the kept private mappings of segment seg (all: seg UINT64_MAX). */
void sh_cow_forget(shoal_client *c, uint64_t seg);

/* Starts a request: packs into c->out after the frame header. */
void sh_client_begin(shoal_client *c, msgpack_packer *pk);
/* Sends it and, unless noreply, waits for the reply; on success m reads
 * its body. A failure leaves its message for shoal_client_error (sh_err_set). */
int sh_client_call(shoal_client *c, uint16_t op, bool noreply, sh_mp *m);
/* Receives the descriptors the store sends ahead of a reply, for the n
 * segment ids listed. */
int sh_client_recv_fds(shoal_client *c, const uint64_t *ids, int *fds, size_t n);
/* A request whose body is [name] or [id] (GET, DELETE, PERSIST), name
 * NULL for an id; its reply's body in m (client_get.c). */
int sh_client_call_key(shoal_client *c, uint16_t op, const char *name, shoal_id id, sh_mp *m);
/* Takes a GET's reply in mp: the object (of id, unless 0) into *out, its
 * new segments' descriptors from the socket, mapped (client_get.c); a
 * reply its cancelled caller left is taken and released (client.c). */
int sh_client_get_reply(shoal_client *c, sh_mp *mp, shoal_id id, shoal_object **out);
/* For importers: a region of bytes that the caller lays out itself
 * (*fd to write through, *addr mapped writable until the seal) ... */
int sh_builder_region(shoal_builder *b, size_t bytes, uint32_t *idx, int *fd, void **addr);
/* ... and a blob of n at [off, off + size) of region idx. */
int sh_builder_blob_at(shoal_node *n, uint32_t idx, uint64_t off, uint64_t size);

/* RPC payloads: where the one blob of object id (which we hold) lies; and
 * a pointer into a segment we have mapped, for a payload whose object the
 * other side keeps alive for the call (no round trip), until unborrow. */
/* Segments in references are tagged with their store's instance (its
 * ids' top 24 bits): the segment itself is the low 40 bits. */
#define SH_CLIENT_SEG_MASK ((1ull << 40) - 1)
int sh_client_blob_of(shoal_client *c, shoal_id id, uint64_t *seg, uint64_t *off);
int sh_client_borrow(shoal_client *c, uint64_t seg, uint64_t off, uint64_t size, const void **p);
void sh_client_unborrow(shoal_client *c, uint64_t seg);

/* The DLPack (0.6) type of dt; SHOAL_ENOTSUP for the 8-bit floats. */
int sh_dlpack_dtype(shoal_dtype dt, DLDataType *out);

#endif

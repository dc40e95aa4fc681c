/* The store protocol, shared by the server (server.c) and the client
 * (client.c).
 *
 * Connection set-up on the unix socket: the client sends HELLO (one
 * message, its version); the store answers with one message carrying
 * [version, ring_bytes, arena_bytes, client_id, instance] and three
 * descriptors: the memfd holding both rings (request ring first), the
 * store's doorbell eventfd, and the small-object arena opened read-only.
 * After that the socket carries only descriptors from the store (new
 * segments, each message [count] and up to SH_FD_MAX of them) and tells
 * each side when the other is gone.
 *
 * Requests and replies are frames (wire.h) on the rings; bodies:
 *   CREATE  [size]                          -> [segment]      + the fd first
 *   SEAL    [name|nil, flags, node]          -> [id, signature]
 *   ABORT   [segment]                        (no reply)
 *   GET     [id | name]                      -> [id, signature, [[segment, size]...], node]
 *                                              + descriptors of the new segments first
 *   RELEASE [[id...], [segment...]]          (no reply)
 *   DELETE  [id | name]                      -> []
 *   PERSIST [id]                             -> []
 *   LIST    [prefix, after|nil, max]         -> [[[name, id, type, bytes]...], more]
 *   STAT    []                               -> [capacity, used, objects, names, clients, pending]
 * A failed request gets a frame with a negative status and body [message]. */
#ifndef SHOAL_STORE_PROTO_H
#define SHOAL_STORE_PROTO_H

#include "wire/wire.h"

#define SH_STORE_PROTO 0x45524f54u /* "TORE": the store's links */
#define SH_STORE_VERSION 1

enum {
	SH_OP_CREATE = 1,
	SH_OP_SEAL,
	SH_OP_ABORT,
	SH_OP_GET,
	SH_OP_RELEASE,
	SH_OP_DELETE,
	SH_OP_PERSIST,
	SH_OP_LIST,
	SH_OP_STAT,
	SH_OP_CLAIM,
	SH_OP_MAX_
};

#define SH_STORE_RING_CAP (1u << 20) /* data bytes per direction */
/* Blobs up to this size travel inside the seal request and are copied
 * into the arena: cheaper than a memfd, a mapping and its page faults. */
#define SH_STORE_INLINE_MAX (16u << 10)
/* ... as long as the inline bytes of one request stay under this. */
#define SH_STORE_INLINE_TOTAL (256u << 10)
#define SH_STORE_ARENA_MAX (256u << 20)
#define SH_STORE_BLOB_ALIGN 64
#define SH_STORE_LIST_MAX 1000 /* entries per LIST reply */
/* The largest reply the store builds (a message may span ring records):
 * bounds the metadata of one object and a page of a listing. */
#define SH_STORE_REPLY_MAX (64u << 20)

#endif

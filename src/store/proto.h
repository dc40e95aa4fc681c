/* The store protocol, shared by the server (server.c) and the client
 * (client.c).
 *
 * Connection set-up is a link's (ring/link.h, protocol SH_STORE_PROTO):
 * the store's words are [version, arena_bytes, client_id, instance] and
 * its one descriptor of its own the small-object arena, opened read-only.
 * After that the socket carries only descriptors from the store (new
 * segments: each message the count and the segments' ids, as 64-bit words,
 * with up to SH_FD_MAX descriptors) and tells each side when the other is
 * gone.
 *
 * Requests and replies are frames (wire.h) on the rings; bodies:
 *   CREATE  [size]                      -> [segment]  + the fd first
 *   SEAL    [name|nil, flags, node]     -> [id, signature]
 *           [name|nil, flags, node, owner]  (sealed for the connection whose
 *                                            CLAIM gave owner, which owns it)
 *   ABORT   [segment]                   (no reply)
 *   GET     [id | name]                 -> [id, signature, [[segment, size]...], reply
 *                                              flags, node]
 *                                          the segments new to this connection,
 *                                          their descriptors after the reply;
 *                                          SH_GET_SHORT: memory is short (the
 *                                          store spills), keep no segment mapped
 *                                          idle: it pins what could spill
 *           [id | name, flags]             flags SH_GET_LOCAL: only this store's
 *                                          objects; of one elsewhere in the
 *                                          cluster the error says where
 *   RELEASE [[id...], [segment...]]     (no reply)
 *   DELETE  [id | name]                 -> []
 *   PERSIST [id]                        -> []
 *   NAME    [id | name, name|nil, replace]  -> []  binds name to the object (one
 *                                          name an object), or with nil lets go of
 *                                          its name; the object stays either way
 *   LIST    [prefix, after|nil, max]    -> [[[name, id, type, bytes]...], more]
 *   STAT    []                          -> [capacity, used, objects, names, clients,
 *                                           pending, sent, sent_bytes, fetched,
 *                                           fetched_bytes, migrating, peers, registry]
 *   CLAIM   []                          -> [token]  (this connection's owner token)
 *   RESTRICT [grant]                    -> []  (for good: this connection may from
 *                                           now on read only its own objects and
 *                                           what the one whose CLAIM gave grant
 *                                           holds; server.h says what else)
 *   MIGRATE [id | name, from|nil, streams, wait_ms]
 *                                       -> [true, id] | [false, ticket, received, total]
 *   MIGWAIT [ticket, wait_ms]           -> the same
 * A failed request gets a frame with a negative status and body [message].
 *
 * MIGRATE copies an object of another store (the one whose peer address is
 * from) into this one, over at most streams links (0:
 * SHOAL_MIGRATE_STREAMS); it answers when the copy is here (its id), or
 * after wait_ms with a ticket to wait on with MIGWAIT and the bytes so
 * far. Asks for one object while it is on its way wait for the same
 * transfer. The store itself copies nothing: MIGRATE and MIGWAIT go to the
 * layer above it that links stores (src/cluster), through its hooks
 * (store/extend.h). */
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
	SH_OP_MIGRATE,
	SH_OP_MIGWAIT,
	SH_OP_RESTRICT,
	SH_OP_NAME,
	SH_OP_MAX_
};

enum { SH_GET_LOCAL = 1 };
enum { SH_GET_SHORT = 1 }; /* a GET reply's flags */

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

/* The most links a MIGRATE may ask for. */
#define SH_STORE_MIGRATE_STREAMS_MAX 16

#endif

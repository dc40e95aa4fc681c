/* Remote clients: a store of another host used from this process over
 * TCP, without a store here (vineyard's RPC client). The client connects
 * where the store serves other stores (shoald --peer HOST:PORT), proves
 * the cluster's secret as a store does ($SHOAL_SECRET_FILE, else
 * $SHOAL_SECRET; TLS 1.3), and then gets objects, their tree and their
 * bytes copied once into memory of this process, and puts values, which
 * the store seals as objects of its own.
 *
 * One client is for one thread at a time. Every call that talks to the
 * store blocks until its deadline (an absolute time of shoal_now_ns, or
 * SHOAL_FOREVER) and then fails with SHOAL_ETIMEDOUT; a link that broke,
 * timed out or went out of step mid-transfer is over (SHOAL_ECLOSED from
 * then on: connect again). A failed call leaves its message in
 * shoal_remote_error: what was asked, and what the store or the link did. */
#ifndef SHOAL_REMOTE_H
#define SHOAL_REMOTE_H

#include <shoal/base.h>
#include <shoal/store.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shoal_remote shoal_remote;

/* Blocks until deadline: connects to the store at "HOST:PORT" (its --peer)
 * and proves the secret. "HOST:PORT?encrypt=false" goes in clear, still
 * authenticated, if the store was told so too (--peer-no-encrypt).
 * SHOAL_EACCES when the store does not know the same secret (or none is
 * set here); why (may be NULL) says what failed. */
SHOAL_API int shoal_remote_connect(shoal_remote **out, const char *hostport, int64_t deadline,
				   char *why, size_t whylen);
/* Closes the link: what this client put without SHOAL_PERSIST is deleted
 * in the store. Objects got through it stay valid (they are this
 * process's memory). Does not block beyond closing a socket. */
SHOAL_API void shoal_remote_close(shoal_remote *r);
/* The message of this thread's last failed call on r ("" after a
 * success): each thread sees its own, like errno (base.h says more). */
SHOAL_API const char *shoal_remote_error(const shoal_remote *r);

/* Blocks until deadline: the object named name (when not NULL) or of id,
 * its tree and every blob's bytes received straight into one region of
 * this process's memory (one copy: the kernel's, out of the socket), at
 * *out. Read it as any got object (shoal_object_root, shoal_node_blob,
 * shoal_node_tensor, shoal_node_dlpack); the memory is private to this
 * process and writable, so shoal_object_cow gives the object itself (one
 * more reference). Release it with shoal_object_release. SHOAL_ENOENT:
 * no such object there. */
SHOAL_API int shoal_remote_get(shoal_remote *r, const char *name, shoal_id id, int64_t deadline,
			       shoal_object **out);

/* Blocks until deadline: puts a value into the store, which seals it as
 * an object of its own once every byte came (a link that breaks first
 * leaves nothing there) and binds it to name when not NULL. flags:
 * SHOAL_PERSIST (else the object goes when this client closes, as a
 * local client's transient objects go with its connection), SHOAL_REPLACE
 * (rebind a taken name, else SHOAL_EEXIST). The store's room bounds it
 * (SHOAL_ENOSPC). *id (may be NULL) gets its id. The bytes are sent from
 * where they lie (no copy here). */
/* One blob of bytes, an object of type "bytes". */
SHOAL_API int shoal_remote_put_bytes(shoal_remote *r, const char *name, const void *data,
				     size_t size, unsigned flags, int64_t deadline, shoal_id *id);
/* A tensor: t's dtype, ndim, shape and data (C-contiguous, nbytes the
 * shape's bytes; strides are not read). */
SHOAL_API int shoal_remote_put_tensor(shoal_remote *r, const char *name, const shoal_tensor *t,
				      unsigned flags, int64_t deadline, shoal_id *id);
/* A tensor_dict of n tensors named keys[i] (unique), with nmeta string
 * fields of metadata on its root: meta[2 * j] = meta[2 * j + 1]. */
SHOAL_API int shoal_remote_put_tensor_dict(shoal_remote *r, const char *name,
					   const char *const *keys, const shoal_tensor *t, size_t n,
					   const char *const *meta, size_t nmeta, unsigned flags,
					   int64_t deadline, shoal_id *id);

/* Blocks until deadline: deletes the object named name (when not NULL) or
 * of id there, as shoal_delete does. */
SHOAL_API int shoal_remote_delete(shoal_remote *r, const char *name, shoal_id id, int64_t deadline);
/* Blocks until deadline: calls fn for each name bound there that starts
 * with prefix, in name order (as many as one answer of the store's holds:
 * 64 MiB of them); a nonzero return of fn stops the walk and is returned. */
SHOAL_API int shoal_remote_list(shoal_remote *r, const char *prefix,
				int (*fn)(const shoal_entry *e, void *ctx), void *ctx,
				int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif

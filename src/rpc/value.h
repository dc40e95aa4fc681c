/* RPC values on the wire: msgpack, one value per argument list or result,
 * decoded by the strict cursor of the wire layer into a vbuf. */
#ifndef SHOAL_RPC_VALUE_H
#define SHOAL_RPC_VALUE_H

#include "wire/wire.h"

#include <shoal/rpc.h>

#define SH_VALUE_MAX_DEPTH 64
#define SH_EXT_TENSOR 1 /* the msgpack ext type of a tensor in copy mode */

struct shoal_vbuf {
	sh_bump a;
	int err; /* a constructor ran out of memory */
	/* Shared payloads: the store client of this side, the objects this
	 * vbuf's values map (released on reset) and those it created for
	 * them (deleted on reset: readers keep theirs until they let go). */
	shoal_client *store;
	shoal_object **held;
	shoal_id *made;
	uint64_t *borrowed; /* segments our values point into without a reference */
	uint32_t nheld, cap_held, nmade, cap_made, nborrowed, cap_borrowed;
};

/* ... and in shared mode: dtype, shape, object id, and where its blob lies
 * (segment, offset: 0, 0 when unknown), so a receiver that has the
 * segment mapped reads it with no round trip to the store */
#define SH_EXT_TENSOR_REF 2

/* shared (not NULL: this side's store client): tensors that live in store
 * objects go by reference. */
void sh_value_pack(msgpack_packer *pk, const shoal_value *v, shoal_client *shared);
/* Puts every tensor of v that is not in the store yet into a new store
 * object (through b->store), which b then owns, and points the value at
 * the object's read-only mapping. */
int sh_value_share(shoal_vbuf *b, shoal_value *v, char *why, size_t whylen);
/* Whether v holds a tensor that is not in the store yet. */
bool sh_value_needs_share(const shoal_value *v);
/* A copy of v's tree (not of strings, bytes or tensor data) in b. */
shoal_value *sh_value_clone(shoal_vbuf *b, const shoal_value *v);
/* One value at m into b. SHOAL_EBADMSG with why for anything else: other
 * ext types, invalid UTF-8 in strings, nesting beyond SH_VALUE_MAX_DEPTH.
 * A tensor by reference is mapped through b->store (which must be set). */
int sh_value_decode(sh_mp *m, shoal_vbuf *b, shoal_value **out, char *why, size_t whylen);

#endif

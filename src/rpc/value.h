/* RPC values (value.c; the vbuf they live in, vbuf.c) on the wire
 * (value_wire.c): msgpack, one value per argument list or result, decoded
 * by the strict cursor of the wire layer into a vbuf. Large payloads go
 * out of band after the frame (copy mode) or by reference to store
 * objects (shared mode); a vbuf holds what its values map. */
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
	/* not 0: objects it makes are sealed for this owner token (the
	 * connection that claimed it owns them: shoal_builder_seal_for) */
	uint64_t owner;
	/* what the values before the last sh_vbuf_reset_keep held, until
	 * sh_vbuf_let_go */
	shoal_object **held_prev;
	uint64_t *borrowed_prev;
	uint32_t nheld_prev, cap_held_prev, nborrowed_prev, cap_borrowed_prev;
};

/* shoal_vbuf_reset, but the store objects and segments of the old values
 * are let go only at sh_vbuf_let_go: a receiver that decodes the next
 * value in between keeps mapped what both share (a segment too large to
 * stay mapped idle would otherwise be unmapped and mapped again each call). */
void sh_vbuf_reset_keep(shoal_vbuf *b);
void sh_vbuf_let_go(shoal_vbuf *b);

/* ... and in shared mode: dtype, shape, object id, and where its blob lies
 * (segment, offset: 0, 0 when unknown), so a receiver that has the
 * segment mapped reads it with no round trip to the store */
#define SH_EXT_TENSOR_REF 2

/* Copy mode: strings, bytes and tensor data of at least this many bytes
 * go out of band (SH_FRAME_OOB): written into the ring from where they lie
 * and read from it straight into the receiver's vbuf, one copy each side,
 * where packing them into the body would cost two more. */
#define SH_VALUE_OOB_MIN 4096
/* ext 3: a payload out of band: kind u8 (0 bytes, 1 string, 2 tensor, 3 blob),
 * dtype u8, ndim u8, 5 bytes of padding, the byte count u64, then a
 * tensor's shape as int64; the bytes follow the frame, in the order the
 * values appear */
#define SH_EXT_OOB 3

/* The out-of-band parts of one frame, as its body declares them: where
 * each goes in the receiver's vbuf. Kept by a connection and reused. */
typedef struct sh_oob {
	sh_msg_part *v;
	uint32_t n, cap;
	uint32_t *strs; /* parts that must be UTF-8 once they are in */
	uint32_t nstr, cap_str;
	uint64_t want, got; /* what the frame says follows; what the body declared */
} sh_oob;
/* Starts reading a frame whose header says want bytes follow it. */
void sh_oob_reset(sh_oob *o, uint64_t want);
void sh_oob_fini(sh_oob *o);
/* After sh_value_decode: reads the declared bytes from r into their
 * values (then checks the strings). */
int sh_oob_read(sh_oob *o, sh_ring *r, int64_t deadline, char *why, size_t whylen);
/* Reads the frame's out-of-band bytes and drops them: after a body that
 * failed to decode, to stay in step. */
int sh_oob_discard(sh_oob *o, sh_ring *r, int64_t deadline);
/* The same from n bytes in memory (tests, fuzzing). */
int sh_oob_copy(sh_oob *o, const void *p, size_t n, char *why, size_t whylen);

/* shared (not NULL: this side's store client): tensors that live in store
 * objects go by reference. oob (not NULL: the wbuf pk writes to): large
 * payloads go out of band. */
void sh_value_pack(msgpack_packer *pk, const shoal_value *v, shoal_client *shared, sh_wbuf *oob);
/* The same bytes on the wire as sh_value_pack without oob, but payloads of
 * at least SH_VALUE_REF_MIN are left where they lie (sh_wbuf_ref into w,
 * the wbuf pk writes to) until the frame is written: for a frame that
 * goes out before the value changes, as a task with a buffer. */
#define SH_VALUE_REF_MIN (16u << 10)
void sh_value_pack_ref(msgpack_packer *pk, const shoal_value *v, shoal_client *shared, sh_wbuf *w);
/* Puts every tensor of v that is not in the store yet into a new store
 * object (through b->store), which b then owns, and points the value at
 * the object's read-only mapping. */
int sh_value_share(shoal_vbuf *b, shoal_value *v, char *why, size_t whylen);
/* The same for the tensors and blobs of at least min bytes only. */
int sh_value_share_min(shoal_vbuf *b, shoal_value *v, size_t min, char *why, size_t whylen);
/* Whether v holds a tensor that is not in the store yet. */
bool sh_value_needs_share(const shoal_value *v);
/* Moves what src owns (memory, store objects) into dst and empties src:
 * values decoded into src stay valid as long as dst. Both must use the
 * same store client (or none). */
int sh_vbuf_adopt(shoal_vbuf *dst, shoal_vbuf *src);
/* vbuf.c's, for the decoder and sharing: appends the elem bytes at v to
 * the array *arr; maps object id and holds it in b (the tensor's bytes). */
int sh_vbuf_push(void **arr, uint32_t *n, uint32_t *cap, size_t elem, const void *v);
int sh_vbuf_map_tensor(shoal_vbuf *b, shoal_id id, const void **data, size_t *bytes, char *why,
		       size_t whylen);
/* Tensors and blobs: data that a shared call passes by reference. */
bool sh_value_by_ref(const shoal_value *v);
/* A copy of v's tree (not of strings, bytes or tensor data) in b. */
shoal_value *sh_value_clone(shoal_vbuf *b, const shoal_value *v);
/* One value at m into b. SHOAL_EBADMSG with why for anything else: other
 * ext types, invalid UTF-8 in strings, nesting beyond SH_VALUE_MAX_DEPTH,
 * payloads out of band beyond what oob->want allows (all of it must be
 * declared; oob NULL: none may be). A tensor by reference is mapped
 * through b->store (which must be set). Out-of-band payloads get their
 * room in b, filled by sh_oob_read or sh_oob_copy afterwards. */
int sh_value_decode(sh_mp *m, shoal_vbuf *b, sh_oob *oob, shoal_value **out, char *why,
		    size_t whylen);
/* The same, but bytes and blobs point into the input, which must outlive
 * the value (a task engine's batch buffer, while the task runs): one copy
 * fewer. Strings are still copied (they get a NUL). */
int sh_value_decode_borrowing(sh_mp *m, shoal_vbuf *b, shoal_value **out, char *why, size_t whylen);

#endif

/* shoal RPC values: what crosses a call between a host and an extension.
 * nil, bool, int, float, string, bytes, array and map, as in msgpack, which
 * encodes them on the wire, and tensors (a msgpack ext of type 1: dtype,
 * shape, bytes). Tensors by reference to shared memory come with the shared
 * payload mode.
 *
 * A value tree lives in a shoal_vbuf, an arena that owns every node and
 * every byte of it: build into one, read from one, free it whole. */
#ifndef SHOAL_RPC_H
#define SHOAL_RPC_H

#include <stdbool.h>

#include <shoal/base.h>
#include <shoal/store.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum shoal_vtype {
	SHOAL_V_NIL = 0,
	SHOAL_V_BOOL,
	SHOAL_V_INT,
	SHOAL_V_FLOAT,
	SHOAL_V_STR,
	SHOAL_V_BYTES,
	SHOAL_V_ARRAY,
	SHOAL_V_MAP,
	SHOAL_V_TENSOR, /* dtype, C-contiguous shape, data */
	/* bytes by reference: a read-only byte range that a call in shared
	 * mode passes through the store like a tensor (in copy mode it is
	 * copied like bytes); in v.t as a 1-D U8 tensor of nbytes */
	SHOAL_V_BLOB,
} shoal_vtype;

typedef struct shoal_value shoal_value;
struct shoal_value {
	shoal_vtype type;
	uint32_t n; /* STR, BYTES: bytes; ARRAY: items; MAP: pairs */
	union {
		bool b;
		int64_t i;
		double f;
		const char *s;	    /* STR: UTF-8, NUL-terminated after n bytes */
		const void *bytes;  /* BYTES */
		shoal_value *items; /* ARRAY: n items; MAP: key, value, key, value ... */
		struct {
			shoal_dtype dtype;
			int ndim;
			const int64_t *shape;
			const void *data; /* C-contiguous, nbytes long */
			size_t nbytes;
			shoal_id obj; /* the store object holding data, or 0 */
		} t;		      /* TENSOR, BLOB */
	} v;
};

typedef struct shoal_vbuf shoal_vbuf;
SHOAL_API int shoal_vbuf_create(shoal_vbuf **out);
/* Frees every value built in or decoded into b. */
SHOAL_API void shoal_vbuf_free(shoal_vbuf *b);
/* Forgets every value of b, keeping its memory for the next ones: its
 * largest chunk, whatever its size, so that a payload received call after
 * call lands in memory that is faulted in already (freeing b gives it
 * back). */
SHOAL_API void shoal_vbuf_reset(shoal_vbuf *b);

/* Constructors: NULL when out of memory (and the vbuf remembers it, so a
 * call that sends it fails with SHOAL_ENOMEM rather than sending part). */
SHOAL_API shoal_value *shoal_v_nil(shoal_vbuf *b);
SHOAL_API shoal_value *shoal_v_bool(shoal_vbuf *b, bool v);
SHOAL_API shoal_value *shoal_v_int(shoal_vbuf *b, int64_t v);
SHOAL_API shoal_value *shoal_v_float(shoal_vbuf *b, double v);
SHOAL_API shoal_value *shoal_v_str(shoal_vbuf *b, const char *s, size_t len);
SHOAL_API shoal_value *shoal_v_cstr(shoal_vbuf *b, const char *s);
SHOAL_API shoal_value *shoal_v_bytes(shoal_vbuf *b, const void *p, size_t len);
/* A tensor over data, which is not copied: it must stay valid until the
 * value is sent (a call returns). Decoded tensors own their bytes, in the
 * vbuf, aligned for their dtype. */
SHOAL_API shoal_value *shoal_v_tensor(shoal_vbuf *b, shoal_dtype dt, int ndim, const int64_t *shape,
				      const void *data);
/* A blob over len bytes at data, which is not copied (as a tensor's). */
SHOAL_API shoal_value *shoal_v_blob(shoal_vbuf *b, const void *data, size_t len);
/* A DLPack (0.6) view of a tensor value (a blob: 1-D uint8), for numpy or torch: it borrows
 * the bytes, which stay valid until the value's vbuf is reset or freed;
 * its deleter frees only the view. SHOAL_ENOTSUP for 8-bit floats. */
struct DLManagedTensor;
SHOAL_API int shoal_v_dlpack(const shoal_value *v, struct DLManagedTensor **out);
/* An array of n items / a map of n pairs, every slot nil; fill them with
 * shoal_v_set / shoal_v_map_set. */
SHOAL_API shoal_value *shoal_v_array(shoal_vbuf *b, uint32_t n);
SHOAL_API shoal_value *shoal_v_map(shoal_vbuf *b, uint32_t n);
/* Copies v into slot i (the copy is shallow: v's items stay shared). */
SHOAL_API int shoal_v_set(shoal_value *array, uint32_t i, const shoal_value *v);
SHOAL_API int shoal_v_map_set(shoal_value *map, uint32_t i, const shoal_value *key,
			      const shoal_value *v);
/* The value of key (a string) in a map, or NULL. */
SHOAL_API const shoal_value *shoal_v_map_get(const shoal_value *map, const char *key);

/* Deep equality (floats bitwise, maps in order). */
SHOAL_API bool shoal_v_equal(const shoal_value *a, const shoal_value *b);

/* A value as bytes, to keep (a store object of plain values, a file): the
 * encoding calls carry, every payload inline, tensors by value (one shared
 * through a store too). *out points into b until it is reset or freed.
 * Does not block. */
SHOAL_API int shoal_value_encode(shoal_vbuf *b, const shoal_value *v, const void **out,
				 size_t *len);
/* Bytes from shoal_value_encode, or from anyone: checked as a value from
 * outside is (SHOAL_EBADMSG with why: other ext types, invalid UTF-8,
 * nesting too deep, trailing bytes); bytes and tensor data are copied into
 * b. Does not block. */
SHOAL_API int shoal_value_decode(shoal_vbuf *b, const void *data, size_t len, shoal_value **out,
				 char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif

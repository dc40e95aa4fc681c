/* The wire layer: how requests and replies look in bytes. A frame is a
 * fixed 24-byte header and a msgpack body, and, with SH_FRAME_OOB, bytes
 * out of band after it (large payloads, written from where they lie).
 * Bodies are written with libmsgpack's packer into an sh_wbuf; they are
 * read with sh_mp, a strict cursor that allocates nothing and checks every
 * count against the bytes left before trusting it (libmsgpack's unpacker
 * allocates what a hostile count claims), so one decoder path handles
 * hostile input from any peer. */
#ifndef SHOAL_WIRE_H
#define SHOAL_WIRE_H

#include "ring/msg.h"
#include "shoal_impl.h"

#include <msgpack.h>

#define SH_WIRE_MAGIC 0x31574853u /* "SHW1" little-endian */
#define SH_WIRE_VERSION 1
#define SH_FRAME_HDR 24

enum {
	SH_FRAME_NOREPLY = 1, /* the sender does not wait for a reply */
	SH_FRAME_SHARED = 2,  /* payloads by reference to store objects (rpc) */
	/* bytes follow the frame out of band (rpc: large payloads, written
	 * from where they lie); their count is the last 8 bytes of the body,
	 * which the header's body_len includes and sh_frame_decode strips */
	SH_FRAME_OOB = 4,
};

typedef struct sh_frame {
	uint16_t op;
	uint16_t flags;
	uint32_t seq;
	int32_t status;	   /* replies: 0 or a SHOAL_E* code; requests: 0 */
	uint32_t body_len; /* msgpack bytes after the header */
	uint64_t oob;	   /* bytes out of band after the frame (SH_FRAME_OOB) */
} sh_frame;

/* Writes the header of f into out (SH_FRAME_HDR bytes). */
void sh_frame_encode(const sh_frame *f, void *out);
/* Reads and checks a header from len bytes: magic, version, the reserved
 * field, a status that is 0 or negative, and body_len == len - header.
 * With SH_FRAME_OOB, takes the out-of-band count off the body's end into
 * f->oob (body_len is then the msgpack alone). Fills why with what was
 * expected and what came. */
int sh_frame_decode(const void *buf, size_t len, sh_frame *f, char *why, size_t whylen);

/* ---- writing: a growable buffer that a msgpack_packer writes into ---- */

typedef struct sh_wbuf {
	unsigned char *p;
	size_t len, cap;
	int err; /* sticky: SHOAL_ENOMEM or SHOAL_EOVERFLOW */
	/* out-of-band parts, by reference: they must stay put until sent */
	sh_msg_part *oob;
	uint32_t noob, cap_oob;
	uint64_t oob_bytes;
	/* bytes inside the body by reference (sh_wbuf_ref), each at offset
	 * at of p: they must stay put until sent; the body counts them */
	struct sh_wref {
		size_t at;
		const void *p;
		size_t n;
	} * refs;
	uint32_t nrefs, cap_refs;
	uint64_t ref_bytes;
	sh_msg_part *gather; /* sh_wbuf_gather's */
	uint32_t cap_gather;
} sh_wbuf;

void sh_wbuf_init(sh_wbuf *w);
void sh_wbuf_fini(sh_wbuf *w);
void sh_wbuf_reset(sh_wbuf *w);
int sh_wbuf_append(sh_wbuf *w, const void *p, size_t n);
/* Adds n bytes at p (left where they are) to go after the frame. */
int sh_wbuf_oob(sh_wbuf *w, const void *p, size_t n);
/* Puts n bytes at p (left where they are) into the body at its current
 * end, as if appended: they cost no copy until the frame is written. */
int sh_wbuf_ref(sh_wbuf *w, const void *p, size_t n);
/* w's bytes with its references in their places, as parts for
 * sh_msg_write_parts or sh_stream_writev (valid until w changes). */
int sh_wbuf_gather(sh_wbuf *w, const sh_msg_part **parts, uint32_t *n);
/* Sends the frame in w, then its out-of-band parts. */
int sh_frame_send(sh_ring *r, const sh_wbuf *w, int64_t deadline);
/* A packer appending to w. */
void sh_wbuf_packer(sh_wbuf *w, msgpack_packer *pk);
/* Starts a frame in w: reserves the header, which sh_wbuf_frame_end fills
 * in once the body is packed after it. */
void sh_wbuf_frame_begin(sh_wbuf *w);
int sh_wbuf_frame_end(sh_wbuf *w, sh_frame *f);

/* Packs a C string (NUL: nil). */
void sh_mp_pack_cstr(msgpack_packer *pk, const char *s);

/* ---- reading: a strict cursor over msgpack bytes ---- */

enum {
	SH_MP_NONE = 0, /* at the end, or an invalid / unsupported byte */
	SH_MP_NIL,
	SH_MP_BOOL,
	SH_MP_UINT, /* a non-negative integer */
	SH_MP_INT,  /* a negative integer */
	SH_MP_FLOAT,
	SH_MP_STR,
	SH_MP_BIN,
	SH_MP_ARRAY,
	SH_MP_MAP,
	SH_MP_EXT, /* only where a decoder says so (RPC tensors) */
};

#define SH_MP_MAX_DEPTH 32

typedef struct sh_mp {
	const unsigned char *p, *end;
	int err; /* sticky: 0 or SHOAL_EBADMSG */
} sh_mp;

static inline void sh_mp_init(sh_mp *m, const void *buf, size_t len)
{
	m->p = buf;
	m->end = m->p + len;
	m->err = 0;
}
static inline size_t sh_mp_left(const sh_mp *m)
{
	return (size_t)(m->end - m->p);
}

/* The kind of the next value, without consuming it. */
int sh_mp_kind(const sh_mp *m);
/* Each consumes one value of its kind or fails with SHOAL_EBADMSG (and
 * leaves the cursor failed). Container counts are checked against the
 * bytes left, one byte per element at least. */
int sh_mp_array(sh_mp *m, uint32_t *n);
int sh_mp_map(sh_mp *m, uint32_t *n);
int sh_mp_nil(sh_mp *m);
int sh_mp_bool(sh_mp *m, bool *v);
int sh_mp_uint(sh_mp *m, uint64_t *v);
int sh_mp_int(sh_mp *m, int64_t *v); /* any integer that fits int64 */
int sh_mp_float(sh_mp *m, double *v);
int sh_mp_str(sh_mp *m, const char **s, uint32_t *len);
int sh_mp_bin(sh_mp *m, const void **b, uint32_t *len);
int sh_mp_ext(sh_mp *m, int8_t *type, const void **b, uint32_t *len);
/* Skips one value of any kind, nesting at most SH_MP_MAX_DEPTH. */
int sh_mp_skip(sh_mp *m);
/* Consumes a nil and returns true when the next value is nil. */
bool sh_mp_take_nil(sh_mp *m);
/* Fails unless the whole input was consumed. */
int sh_mp_done(sh_mp *m);

#endif

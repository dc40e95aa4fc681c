/* The safetensors header: the 8-byte length prefix and the JSON that maps
 * tensor names to dtype, shape and byte range in the data area after it.
 * Reading validates everything the reference implementation (the Rust
 * `safetensors` crate) does, and a little more it leaves to luck; writing
 * produces the bytes that crate's serialize writes. The data area itself
 * is never touched here. */
#ifndef SHOAL_STORE_SAFETENSORS_H
#define SHOAL_STORE_SAFETENSORS_H

#include "shoal_impl.h"

#include <shoal/store.h>

/* The reference's MAX_HEADER_SIZE: 100_000_000 bytes, decimal. */
#define SH_ST_MAX_HEADER 100000000u
/* The longest run of whitespace a header may hold, its end padding
 * included. The format has a header begin with '{' and allows spaces
 * after the object; the reference writer pads with fewer than 8, a writer
 * that aligns the data area to a page with fewer than 4096. The reference
 * reader takes any amount (serde_json skips it), so a 100 MB header of
 * spaces around "{}" would pass there: whitespace is layout, not filler. */
#define SH_ST_MAX_WS 4095u

typedef struct sh_st_tensor {
	char *name; /* NUL-terminated; may contain any UTF-8 except NUL */
	size_t name_len;
	shoal_dtype dtype;
	int ndim;
	int64_t shape[SHOAL_TENSOR_MAX_DIMS];
	uint64_t begin, end; /* byte offsets in the data area, begin <= end */
} sh_st_tensor;

/* One "__metadata__" entry: string -> string, both NUL-terminated. */
typedef struct sh_st_meta {
	char *key, *val;
} sh_st_meta;

typedef struct sh_st_file {
	uint64_t header_len; /* N of the 8-byte little-endian prefix */
	uint64_t data_start; /* 8 + N */
	uint64_t data_len;   /* file size - data_start */
	size_t n;
	sh_st_tensor *t; /* sorted by begin (data order) */
	size_t nmeta;
	sh_st_meta *meta; /* in file order */
} sh_st_file;

/* Reads the 8-byte prefix of a file of file_size bytes into *header_len:
 * at most SH_ST_MAX_HEADER, and at most file_size - 8. SHOAL_EBADMSG
 * otherwise, with the reason in err (errlen bytes, may be 0). */
int sh_st_prefix(const unsigned char first8[8], uint64_t file_size, uint64_t *header_len, char *err,
		 size_t errlen);

/* Parses and validates the JSON header: len bytes at json (not
 * NUL-terminated) describing a data area of data_len bytes. On success
 * *out is a new sh_st_file for sh_st_free, its tensors tiling the data area
 * exactly, in data order (ties between empty tensors broken as the
 * reference writer orders them). Fails with SHOAL_EBADMSG for any invalid
 * header (a tensor whose element or byte count does not fit in 64 bits is
 * one), SHOAL_ENOMEM; err then says what was expected and what came.
 * Beyond the reference reader it rejects: a header not starting with '{'
 * (the format's rule, which that reader does not enforce), anything but
 * spaces after the object, whitespace runs longer than SH_ST_MAX_WS,
 * duplicate keys anywhere, empty names, "\u0000" in strings (names are C
 * strings), integers at or above 2^53 and integers written as 2.0 or 2e0. */
int sh_st_parse(const char *json, size_t len, uint64_t data_len, sh_st_file **out, char *err,
		size_t errlen);
void sh_st_free(sh_st_file *f);

/* Writes the header the reference writer would for these tensors and
 * metadata: the prefix, the compact JSON ("__metadata__" first, in the
 * given order, if nmeta > 0; then the tensors in data order, keeping each
 * t[i].begin/end as given) and spaces up to a multiple of 8. *buf comes
 * from shoal_alloc, *len bytes: free it with shoal_free(*buf, *len). Names
 * must be distinct (not checked). SHOAL_EINVAL for a tensor no header can
 * describe (bad dtype, ndim or dim, begin > end, empty name, not UTF-8),
 * SHOAL_EMSGSIZE beyond SH_ST_MAX_HEADER, SHOAL_ENOMEM. */
int sh_st_header_write(const sh_st_tensor *t, size_t n, const sh_st_meta *meta, size_t nmeta,
		       unsigned char **buf, size_t *len);

/* ---- shared by the reader's files (safetensors.c, st_lex.c) and the
 * writer (st_write.c) ---- */

/* JSON integers from here up may have been rounded by cJSON's double. */
#define SH_ST_EXACT_LIMIT 9007199254740992.0 /* 2^53 */

/* What the lexical pass learnt for the later ones. */
typedef struct sh_st_lexed {
	size_t nonint_at; /* the first number written with a fraction or
			     exponent (2.0, 2e0), or SIZE_MAX */
	size_t nonint_len;
} sh_st_lexed;

/* The reader's first pass (st_lex.c) over the len bytes of a header at
 * s: 0, or SHOAL_EBADMSG with the reason in err. */
int sh_st_lex(const unsigned char *s, size_t len, sh_st_lexed *lx, char *err, size_t errlen);
/* JSON whitespace (st_lex.c). */
bool sh_st_is_ws(unsigned char c);
/* Whether n bytes at p are UTF-8 as the reader takes it (st_lex.c). */
bool sh_st_utf8_valid(const char *p, size_t n);
/* A byte as a message shows it: 'x', or byte 0xNN (safetensors.c). */
const char *sh_st_show_byte(unsigned char c, char buf[16]);
/* Data order, with ties broken as the reference writer orders tensors
 * (safetensors.c): how the reader sorts and the writer lays out. */
int sh_st_cmp_data(const sh_st_tensor *a, const sh_st_tensor *b);

#endif

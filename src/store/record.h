/* One object's bytes in a file, as the state directory (a record a file,
 * state.c) and the spill directory (many records a file, spill.c) keep
 * them:
 *   header   64 bytes: "SHOALST1", version, nsegs, id, signature,
 *            generation, meta_len, hash of the rest, hash of the header
 *   table    nsegs sizes (u64, little-endian as every field)
 *   meta     msgpack [name | nil, node]; the node's small blobs inline
 *            (bin), its large ones [segment index (1..nsegs), offset, size]
 *   segments each at the next 4096-byte boundary of the file
 * A record with segments starts at a boundary and is padded to one, so its
 * segments are read with large aligned reads straight into their pages. A
 * record without may be tight (a spill file's small objects one after
 * another: 100 000 of 4 KiB take 400 MB, not 800).
 *
 * The hash covers the table, the metadata and every segment, chained; a
 * reader computes it as the bytes come in and serves nothing that fails
 * it. */
#ifndef SHOAL_STORE_RECORD_H
#define SHOAL_STORE_RECORD_H

#include "shoal_impl.h"

#define SH_REC_HDR 64
#define SH_REC_SEGS_MAX (1u << 20)

/* An object as it is written, or as it was read back. */
typedef struct sh_state_rec {
	uint64_t id, sig;
	/* CLOCK_REALTIME ns at the write: of two files naming one object, the
	 * newer wins (a replace that stopped between its two steps) */
	uint64_t gen;
	const unsigned char *meta;
	size_t meta_len;
	uint32_t nsegs;
	int *seg_fds; /* sealed memfds; read back: the callback takes them */
	uint64_t *seg_sizes;
	uint32_t seg_room; /* read back: what seg_fds and seg_sizes hold */
	uint64_t len;	   /* read back: the record's length in its file */
	char file[40];	   /* its name in the directory */
} sh_state_rec;

/* The bytes r takes in a file; tight: unpadded when it has no segment. */
uint64_t sh_rec_len(const sh_state_rec *r, bool tight);
/* Writes r at off of fd (a 4096-byte boundary when r has segments),
 * sh_rec_len(r, tight) bytes, its header last. Blocks on the copy of every
 * segment; syncs nothing. */
int sh_rec_write(int fd, uint64_t off, const sh_state_rec *r, bool tight);

/* A record without segments, whole, into out (sh_rec_len(r, true)
 * bytes): for a writer that gathers many into one write. */
void sh_rec_encode(const sh_state_rec *r, unsigned char *out);

/* The number of segments the header h says, 0 if it says nonsense (read
 * before sh_rec_read, to size r's arrays). */
uint32_t sh_rec_nsegs(const unsigned char h[SH_REC_HDR]);

/* Where a record's segments are read into: a sealable memfd of at least
 * size bytes, *map_len of it to map (whole huge pages on hugetlbfs). */
typedef int (*sh_rec_seg_fn)(void *ctx, uint64_t size, int *fd, uint64_t *map_len);
/* Refuses (a negative code, and why) segments there is no room for,
 * asked before a byte of them is read. */
typedef int (*sh_rec_fit_fn)(void *ctx, uint32_t nsegs, const uint64_t *sizes, char *why,
			     size_t whylen);

typedef struct sh_rec_reader {
	sh_rec_seg_fn make;
	sh_rec_fit_fn fit; /* or NULL */
	void *ctx;
	/* only the header, table and metadata, checked but for the hash (which
	 * covers the segments): r->nsegs and seg_sizes say what a later full
	 * read will find, no segment is made (make and fit unused) */
	bool head_only;
	unsigned char *buf; /* the table and metadata of the last record read */
	size_t cap;
} sh_rec_reader;
void sh_rec_reader_fini(sh_rec_reader *x);

/* Reads the record at off of fd, which avail bytes of the file from off
 * on must hold (exactly: a state file's), into r (seg_fds and seg_sizes
 * with room for sh_rec_nsegs of its header): r->meta points into x->buf,
 * each segment into a file from x->make, read with large reads, hashed as
 * it comes and sealed. Everything is checked: the header, the sizes
 * against avail, the hash. SHOAL_EBADMSG with why when the record is not a
 * whole, sound one; r->nsegs says how many descriptors were made (the
 * caller closes them on failure). Blocks on the reads. */
int sh_rec_read(sh_rec_reader *x, int fd, uint64_t off, uint64_t avail, bool exact, sh_state_rec *r,
		char *why, size_t whylen);

/* The tree of a record read back: its metadata [name | nil, node]
 * decoded into a (sh_bump_fini frees it) as strictly as a seal request,
 * *name (not NUL-terminated, *name_len bytes) NULL when nil. */
typedef struct shoal_node shoal_node;
int sh_rec_tree(const sh_state_rec *r, sh_bump *a, shoal_node **root, const char **name,
		uint32_t *name_len, char *why, size_t whylen);

#endif

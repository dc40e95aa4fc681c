/* A store's state directory (shoal_store_opts.state_dir, shoald
 * --state-dir): one file per persistent object, so that persistent objects
 * outlive the store process. The store keeps serving memfds (sealed, as
 * without a state directory); each file is a copy written when the object
 * becomes persistent, removed when it is deleted, and read back at start.
 *
 * A file, ID.obj (the id in 16 hex digits):
 *   header   64 bytes: "SHOALST1", version, nsegs, id, signature,
 *            generation, meta_len, hash of the rest, hash of the header
 *   table    nsegs sizes (u64, little-endian as every field)
 *   meta     msgpack [name | nil, node]; the node's small blobs inline
 *            (bin), its large ones [segment index (1..nsegs), offset, size]
 *   segments each at the next 4096-byte boundary, nsegs of them
 * It is written to .ID.obj.tmp, synced, and renamed: whole or absent.
 * The directory is as hostile as a client: every file is checked (owner,
 * kind, size, hashes), and its metadata goes through the decoder of seal
 * requests; what fails is moved into aside/ with a log line. */
#ifndef SHOAL_STORE_STATE_H
#define SHOAL_STORE_STATE_H

#include "shoal_impl.h"

typedef struct sh_state sh_state;

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
	char file[40]; /* its name in the directory */
} sh_state_rec;

/* Opens the state directory dir, making it (0700) if missing, and locks it
 * against a second store. SHOAL_EACCES unless it is a directory (not a
 * symlink) of this uid that no one else may enter; SHOAL_EBUSY when
 * another store holds it. why says which. */
int sh_state_open(const char *dir, sh_state **out, char *why, size_t whylen);
void sh_state_close(sh_state *st);
const char *sh_state_dir(const sh_state *st);

/* Writes r (r->gen is set here) as its file, replacing nothing: whole or
 * not at all. Blocks on the copy of every segment and on fsync. */
int sh_state_write(sh_state *st, sh_state_rec *r, char *why, size_t whylen);
/* Removes the file of object id (logged when that fails). */
void sh_state_remove(sh_state *st, uint64_t id);

/* What a load callback returns besides 0 (kept; it owns the descriptors). */
#define SH_STATE_SUPERSEDED 1 /* an older copy of a replaced object: removed */
/* Reads every file back, each checked, and hands it to fn. A file that fails
 * the checks, or that fn refuses (a negative code, and why), is moved into
 * aside/ with a warning; fn may also return SH_STATE_SUPERSEDED. Returns
 * how many files were kept. */
typedef int (*sh_state_fn)(void *arg, sh_state_rec *r, char *why, size_t whylen);
/* fit, called once a file's segment sizes are known and before a byte of
 * them is copied, refuses (a negative code, and why) what the store has no
 * room for: a file cannot make the store allocate what it would refuse. */
typedef int (*sh_state_fit_fn)(void *arg, uint32_t nsegs, const uint64_t *sizes, char *why,
			       size_t whylen);
int sh_state_load(sh_state *st, sh_state_fit_fn fit, sh_state_fn fn, void *arg);
/* Moves the file named file into aside/, logging why. */
void sh_state_set_aside(sh_state *st, const char *file, const char *why);

#endif

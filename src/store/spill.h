/* A store's spill directory (shoal_store_opts.spill_dir, shoald
 * --spill-dir): the files cold objects are written to when memory runs
 * short, and read back from at their next get (the policy is the server's:
 * spilling.c). Objects are appended, one record each (record.h), to
 * numbered files of about SH_SPILL_FILE_BYTES: small objects one after
 * another, so 100 000 of them are one long sequential write and one sync,
 * not 100 000 files; a large one's segments at 4096-byte boundaries, so
 * they come back with large aligned reads. A file goes when the last object
 * in it does.
 *
 * Nothing here outlives the store: the spill of transient objects is
 * removed at the next start (persistent objects are kept by the state
 * directory, whose files are their spill). The directory is checked as the
 * state directory is, and refused on tmpfs and ramfs (spilling memory into
 * memory frees nothing) unless allowed.
 *
 * sh_spill_write and sh_spill_read block on the disk: the server runs them
 * on a thread of their own (sh_run_aside). Every function may be called
 * from any thread. */
#ifndef SHOAL_STORE_SPILL_H
#define SHOAL_STORE_SPILL_H

#include "store/record.h"

#define SH_SPILL_FILE_BYTES ((uint64_t)256 << 20)

typedef struct sh_spill sh_spill;

/* Opens dir (made 0700 if missing), removing what an earlier store left
 * there; limit: the most bytes of files (0: the disk's). SHOAL_EACCES
 * unless it is a directory of this uid no one else may enter, SHOAL_EBUSY
 * when another store uses it, SHOAL_EINVAL on tmpfs or ramfs unless
 * any_fs; why says which. */
int sh_spill_open(const char *dir, uint64_t limit, bool any_fs, sh_spill **out, char *why,
		  size_t whylen);
void sh_spill_close(sh_spill *sp);
const char *sh_spill_dir(const sh_spill *sp);

/* Where a record is. */
typedef struct sh_spill_loc {
	uint32_t file;
	uint64_t off, len;
} sh_spill_loc;

/* Appends the n records recs (gen set here) and syncs them: loc[i] says
 * where record i went. Returns how many, from the first, are on disk and
 * synced; when fewer than n, *rc and why say what stopped the rest (the
 * disk or the limit full: SHOAL_ENOSPC). Blocks. */
size_t sh_spill_write(sh_spill *sp, sh_state_rec *recs, size_t n, sh_spill_loc *loc, int *rc,
		      char *why, size_t whylen);
/* Reads the record at loc, of object id, into r (sh_rec_read). Blocks. */
int sh_spill_read(sh_spill *sp, const sh_spill_loc *loc, uint64_t id, sh_rec_reader *x,
		  sh_state_rec *r, char *why, size_t whylen);
/* The record at loc is no longer wanted (its object is gone): its file
 * goes with the last of its records. */
void sh_spill_drop(sh_spill *sp, const sh_spill_loc *loc);

/* Bytes of the directory's files now. */
uint64_t sh_spill_file_bytes(sh_spill *sp);

#endif

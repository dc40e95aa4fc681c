/* A store's state directory (shoal_store_opts.state_dir, shoald
 * --state-dir): one file per persistent object, so that persistent objects
 * outlive the store process. The store keeps serving memfds (sealed, as
 * without a state directory); each file is a copy written when the object
 * becomes persistent, removed when it is deleted, and read back at start.
 *
 * A file, ID.obj (the id in 16 hex digits), is one record (record.h).
 * It is written to .ID.obj.tmp, synced, and renamed: whole or absent.
 * The directory is as hostile as a client: every file is checked (owner,
 * kind, size, hashes), and its metadata goes through the decoder of seal
 * requests; what fails is moved into aside/ with a log line. */
#ifndef SHOAL_STORE_STATE_H
#define SHOAL_STORE_STATE_H

#include "store/record.h"

typedef struct sh_state sh_state;

/* Opens the state directory dir, making it (0700) if missing, and locks it
 * against a second store. SHOAL_EACCES unless it is a directory (not a
 * symlink) of this uid that no one else may enter; SHOAL_EBUSY when
 * another store holds it. why says which. */
int sh_state_open(const char *dir, sh_state **out, char *why, size_t whylen);
void sh_state_close(sh_state *st);
/* The checks and the lock of sh_state_open for any directory of a store's
 * files (what names it in why: "spill directory"): *dfd opened on it. */
int sh_state_dir_open(const char *dir, const char *what, int *dfd, char *why, size_t whylen);
const char *sh_state_dir(const sh_state *st);

/* Writes r (r->gen is set here) as its file, replacing nothing: whole or
 * not at all. Blocks on the copy of every segment and on fsync. */
int sh_state_write(sh_state *st, sh_state_rec *r, char *why, size_t whylen);
/* Reads the file of object id back into r (its arrays with room for the
 * segments the object had when it was written), every byte checked as at start; x makes the
 * segments. Blocks on the reads. */
int sh_state_read(sh_state *st, uint64_t id, sh_rec_reader *x, sh_state_rec *r, char *why,
		  size_t whylen);
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
/* lazy: each file's header, table and metadata only (no segment is made:
 * r->seg_fds unused), for a store that brings objects back at their first
 * get (spilling.c); the rest is checked then. */
int sh_state_load(sh_state *st, bool lazy, sh_state_fit_fn fit, sh_state_fn fn, void *arg);
/* Moves the file named file into aside/, logging why. */
void sh_state_set_aside(sh_state *st, const char *file, const char *why);

#endif

/* Spare segments: memfds of the store's free capacity whose pages a worker
 * thread allocated before any create or restore asked for them. A creator
 * writing into fresh shared memory pays for each page's allocation on its
 * own critical path, about as much as the copy itself; into a spare it
 * pays only the copy. Spares are made after a create, of the size it asked
 * (puts come in runs of one size: batches, checkpoints, a model's
 * weights), and after a spill, of the size of what went to disk: those
 * are kept for its restore, which a put's guess does not push out, and
 * their pages are touched (zeroed) too, since on a VM the first touch of
 * a page the host took back costs several times the read. A spare is
 * never handed out twice: it has only ever held zeros.
 *
 * The store's server thread calls these, and a restore's thread takes
 * (sh_spares_take_wait); the worker shares nothing else with them. */
#ifndef SHOAL_STORE_SPARE_H
#define SHOAL_STORE_SPARE_H

#include "shoal_impl.h"

/* Creates smaller than this get no spare: their pages cost less than the
 * round trips of the put. */
#define SH_SPARE_MIN ((uint64_t)1 << 20)

typedef struct sh_spares sh_spares;

typedef struct sh_pages sh_pages;
/* Starts the worker; budget: the most bytes held in spares at once; pages:
 * what they are made on (the store's, read only, outliving the worker). */
int sh_spares_start(sh_spares **out, uint64_t budget, const sh_pages *pages);
/* Stops it and frees every spare. NULL is a no-op. */
void sh_spares_stop(sh_spares *sp);

/* A memfd (sealable, not yet size-sealed) of exactly size bytes whose pages
 * exist, or -1 when no spare fits. Never waits for the worker. */
int sh_spares_take(sh_spares *sp, uint64_t size);
/* The same, but when the spare being made, or the next to be made, would
 * serve, waits until it is made (blocks, up to the worker's touch of its
 * pages: what the caller would pay on fresh pages, less what is done
 * already): for a thread off the store's. */
int sh_spares_take_wait(sh_spares *sp, uint64_t size);
/* After a create of size bytes, or a spill of a segment of size (restore):
 * asks for a spare like it, made only while spares stay within the budget
 * and within room (the free capacity now). */
void sh_spares_want(sh_spares *sp, uint64_t size, uint64_t room, bool restore);
/* Gives up spares until they hold at most room bytes (a create or restore
 * needs the capacity they hold): guesses first, then restores' spares, the
 * largest first, but not one that serves keep (the size about to take it;
 * 0: none). Their memory is freed by the worker, at once. */
void sh_spares_fit(sh_spares *sp, uint64_t room, uint64_t keep);
/* Closes fd in the worker: the last close of a large memfd frees its pages,
 * which takes tens of ms for a GiB, not for the server thread to wait. */
void sh_spares_dispose(sh_spares *sp, int fd);
/* Bytes of the spares ready to be taken. */
uint64_t sh_spares_ready_bytes(sh_spares *sp);
/* Descriptors held: spares, the one being made, those to close. */
uint32_t sh_spares_fds(sh_spares *sp);

#endif

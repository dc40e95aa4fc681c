/* Spare segments: memfds of the store's free capacity whose pages a worker
 * thread allocated (and the kernel zeroed) before any create asked for
 * them. A creator writing into fresh shared memory pays for each page's
 * allocation and zeroing on its own critical path, about as much as the
 * copy itself; into a spare it pays only the copy. Spares are made after a
 * create, of the size it asked (puts come in runs of one size: batches,
 * checkpoints, a model's weights), and are never handed out twice: a spare
 * has only ever held zeros.
 *
 * Only the store's server thread calls these; the worker shares nothing
 * else with it. */
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
/* After a create of size bytes: asks for a spare like it, made only while
 * spares stay within the budget and within room (the free capacity now). */
void sh_spares_want(sh_spares *sp, uint64_t size, uint64_t room);
/* Gives up spares until they hold at most room bytes (a create needs the
 * capacity they hold). Their memory is freed by the worker, at once. */
void sh_spares_fit(sh_spares *sp, uint64_t room);
/* Closes fd in the worker: the last close of a large memfd frees its pages,
 * which takes tens of ms for a GiB, not for the server thread to wait. */
void sh_spares_dispose(sh_spares *sp, int fd);
/* Bytes of the spares ready to be taken. */
uint64_t sh_spares_ready_bytes(sh_spares *sp);
/* Descriptors held: spares, the one being made, those to close. */
uint32_t sh_spares_fds(sh_spares *sp);

#endif

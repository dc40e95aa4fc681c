/* shoal fibers: stackful coroutines on a per-thread scheduler, Go-style
 * channels with select, timers, and an epoll poller so that blocking code
 * blocks only its fiber.
 *
 * Model. A thread becomes a scheduler with shoal_sched_create(); from then on
 * the thread's own code is the scheduler's root fiber ("main"). Fibers run
 * one at a time on that thread and switch only at blocking points (channel
 * operations, select, sleep, join, fd waits, yield), so data touched by one
 * scheduler's fibers needs no locks. Every blocking call takes an absolute
 * deadline in CLOCK_MONOTONIC nanoseconds (shoal_deadline_in(),
 * SHOAL_FOREVER, or SHOAL_NOWAIT to try without blocking).
 *
 * Structure. A fiber is owned by the fiber that spawned it. When a fiber's
 * function returns, its children that are still running are cancelled and
 * joined before it counts as finished, so nothing outlives its owner unless
 * shoal_detach() hands it to the scheduler. shoal_sched_destroy() cancels and
 * joins whatever is left.
 *
 * Cancellation. shoal_cancel() makes the fiber's current blocking call, and
 * every later one, return SHOAL_ECANCELED; the fiber is expected to unwind
 * and return. Cancellation is never forced at other points.
 *
 * Threads. Every call here is for fibers of the calling thread's scheduler,
 * except shoal_chan_send() and shoal_chan_close(), which any thread may call
 * on any channel (a thread without a scheduler blocks on a futex, a fiber of
 * another scheduler blocks only itself). */
#ifndef SHOAL_FIBER_H
#define SHOAL_FIBER_H

#include <shoal/base.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shoal_sched shoal_sched;
typedef struct shoal_fiber shoal_fiber;
typedef struct shoal_chan shoal_chan;

/* How stack overflows are caught. AUTO picks MADVISE where the kernel has
 * guard regions (Linux 6.13+, no extra mapping per stack), else MPROTECT
 * while the process stays well under vm.max_map_count (each mprotect guard
 * costs two mappings), and beyond that NONE with one warning in the log. */
typedef enum {
	SHOAL_GUARD_AUTO = 0,
	SHOAL_GUARD_MADVISE = 1,
	SHOAL_GUARD_MPROTECT = 2,
	SHOAL_GUARD_NONE = 3,
} shoal_guard_mode;

typedef struct shoal_sched_opts {
	/* Default stack size of a fiber (rounded up to pages; 0 = 64 KiB).
	 * Stacks are reserved, not committed: a fiber costs the pages it
	 * touches, usually one. */
	size_t stack_size;
	shoal_guard_mode guard;
	/* Free stacks kept committed for reuse beyond which the scheduler
	 * returns memory to the kernel when it next goes idle (0 = 4096). */
	size_t stack_cache;
} shoal_sched_opts;

/* Makes the calling thread a scheduler. opts may be NULL for defaults.
 * Returns SHOAL_EBUSY if the thread already has one, SHOAL_EINVAL for bad
 * options, SHOAL_ENOMEM, or an errno from epoll/eventfd. */
SHOAL_API int shoal_sched_create(shoal_sched **out, const shoal_sched_opts *opts);

/* Cancels and joins every fiber still alive, then frees the scheduler. Call
 * from the root fiber of the owning thread. Channels are not freed: they
 * are closed (threads blocked sending into them get SHOAL_ECLOSED), and
 * shoal_chan_destroy() may free them afterwards from any thread. Other
 * threads must have stopped using the channels by the time this returns.
 * Returns SHOAL_EINVAL from any other context. */
SHOAL_API int shoal_sched_destroy(shoal_sched *s);

/* The calling thread's scheduler, or NULL. */
SHOAL_API shoal_sched *shoal_sched_current(void);

/* Returns cached free stacks to the kernel and recycled channel memory to
 * the allocator now, instead of keeping them for reuse. */
SHOAL_API void shoal_sched_trim(shoal_sched *s);

typedef struct shoal_sched_stats {
	uint64_t switches;    /* context switches so far */
	uint64_t spawned;     /* fibers created */
	size_t live;	      /* fibers not yet freed, root excluded */
	size_t stacks_mapped; /* stacks reserved in the pool */
	size_t stacks_free;   /* of which free for reuse */
	size_t guarded;	      /* stacks with a guard page */
} shoal_sched_stats;
SHOAL_API void shoal_sched_stats_get(const shoal_sched *s, shoal_sched_stats *st);

/* ---- fibers ----------------------------------------------------------- */

typedef void *(*shoal_fiber_fn)(void *arg);

typedef struct shoal_fiber_opts {
	const char *name;  /* copied, up to 31 bytes; NULL = "fiber-ID" */
	size_t stack_size; /* 0 = the scheduler's default */
	int detached;	   /* nonzero: owned by the scheduler, never joined */
} shoal_fiber_opts;

/* Creates a fiber that will run fn(arg) on the calling thread's scheduler.
 * It starts at the caller's next blocking point; the caller keeps running.
 * *out may be NULL for detached fibers. Returns SHOAL_EINVAL without a
 * scheduler or with bad options, SHOAL_ENOMEM, SHOAL_ECANCELED if the caller
 * is cancelled (a cancelled fiber may not start new work). */
SHOAL_API int shoal_spawn(shoal_fiber **out, shoal_fiber_fn fn, void *arg,
			  const shoal_fiber_opts *opts);

/* Waits until f has returned, stores its return value in *result (may be
 * NULL) and frees f. Blocks. Returns SHOAL_ECANCELED if the caller is
 * cancelled (f keeps running and can still be joined), SHOAL_EINVAL if f is
 * detached, already being joined, the caller itself, or belongs to another
 * scheduler. */
SHOAL_API int shoal_join(shoal_fiber *f, void **result);

/* Like shoal_join with a deadline; SHOAL_ETIMEDOUT leaves f joinable. */
SHOAL_API int shoal_join_until(shoal_fiber *f, void **result, int64_t deadline);

/* Hands f to the scheduler: it is freed when it returns and is cancelled
 * by shoal_sched_destroy(). f must not be used afterwards. */
SHOAL_API int shoal_detach(shoal_fiber *f);

/* Requests cancellation of f (see the top of this file). Idempotent; a
 * finished fiber is left alone. Never blocks. A fiber may cancel itself. */
SHOAL_API int shoal_cancel(shoal_fiber *f);

/* Lets every other runnable fiber run once. Returns SHOAL_ECANCELED if the
 * caller is cancelled. */
SHOAL_API int shoal_yield(void);

/* Blocks until the deadline. Returns SHOAL_ETIMEDOUT when it passed (the
 * normal outcome) or SHOAL_ECANCELED. */
SHOAL_API int shoal_sleep_until(int64_t deadline);

/* The running fiber (the root fiber on a scheduler thread), or NULL. */
SHOAL_API shoal_fiber *shoal_self(void);

/* Nonzero once f has been asked to cancel. */
SHOAL_API int shoal_is_cancelled(const shoal_fiber *f);

SHOAL_API const char *shoal_fiber_name(const shoal_fiber *f);
SHOAL_API int shoal_fiber_set_name(shoal_fiber *f, const char *name);
/* Unique within the process, never reused; the root fiber is 0. */
SHOAL_API uint64_t shoal_fiber_id(const shoal_fiber *f);

/* ---- fiber-local data ------------------------------------------------- */

/* Up to SHOAL_FLS_MAX keys per process. The destructor (may be NULL) runs
 * on the fiber's stack when a fiber returns with a non-NULL value. The root
 * fiber's values are destroyed by shoal_sched_destroy(). */
#define SHOAL_FLS_MAX 64
typedef unsigned shoal_fls_key;
SHOAL_API int shoal_fls_key_create(shoal_fls_key *key, void (*dtor)(void *));
SHOAL_API void *shoal_fls_get(shoal_fls_key key);
SHOAL_API int shoal_fls_set(shoal_fls_key key, void *value);

/* ---- channels --------------------------------------------------------- */

/* A channel carries elements of elem_size bytes (copied in and out).
 * capacity 0 is a rendezvous: a send completes when a receiver takes the
 * element. The channel belongs to the calling thread's scheduler: only its
 * fibers receive or select on it; any thread may send or close. elem_size
 * (at least 1) and capacity are each at most UINT32_MAX, else SHOAL_EINVAL. */
SHOAL_API int shoal_chan_create(shoal_chan **out, size_t elem_size, size_t capacity);

/* Frees the channel. Returns SHOAL_EBUSY while fibers or threads wait on
 * it. Call from the owning scheduler's thread, or from anywhere once that
 * scheduler has been destroyed. */
SHOAL_API int shoal_chan_destroy(shoal_chan *c);

/* Returns 0 once the element is taken (rendezvous) or buffered;
 * SHOAL_ECLOSED if the channel is or becomes closed (the element was not
 * delivered); SHOAL_ETIMEDOUT; SHOAL_ECANCELED. From another thread the
 * element is copied, so the deadline holds even while the owning thread is
 * busy outside shoal; after SHOAL_ETIMEDOUT the element is never received. */
SHOAL_API int shoal_chan_send(shoal_chan *c, const void *elem, int64_t deadline);

/* Returns 0 with an element in *elem; after close, buffered elements are
 * still received, then SHOAL_ECLOSED. Also SHOAL_ETIMEDOUT, SHOAL_ECANCELED,
 * SHOAL_EINVAL from a thread that does not own the channel. */
SHOAL_API int shoal_chan_recv(shoal_chan *c, void *elem, int64_t deadline);

/* Closes the channel: blocked receivers and senders are woken with
 * SHOAL_ECLOSED, buffered elements stay receivable. Returns SHOAL_ECLOSED
 * if it was already closed. Any thread; from a thread that does not own the
 * channel it never blocks: later sends from other threads fail at once, and
 * the owner's fibers see the close when their scheduler next runs. */
SHOAL_API int shoal_chan_close(shoal_chan *c);

/* Elements buffered now (owning thread). */
SHOAL_API size_t shoal_chan_len(const shoal_chan *c);

enum { SHOAL_SELECT_RECV = 1, SHOAL_SELECT_SEND = 2 };

typedef struct shoal_select_case {
	shoal_chan *chan; /* NULL: the case is never ready (like Go's nil) */
	int op;		  /* SHOAL_SELECT_RECV or SHOAL_SELECT_SEND */
	void *elem;	  /* where to receive into, or what to send */
} shoal_select_case;

/* Waits until one case can proceed, performs it and stores its index in
 * *chosen. If several are ready one is picked at random (no case starves).
 * Returns 0, or SHOAL_ECLOSED when case *chosen found its channel closed (a
 * closed channel counts as ready, so select over closed channels returns at
 * once); SHOAL_ETIMEDOUT and SHOAL_ECANCELED leave *chosen unchanged. Every
 * channel must belong to the caller's scheduler. */
SHOAL_API int shoal_select(shoal_select_case *cases, size_t n, int64_t deadline, size_t *chosen);

/* ---- file descriptors --------------------------------------------------- */

enum { SHOAL_FD_IN = 0x1, SHOAL_FD_OUT = 0x4, SHOAL_FD_ERR = 0x8, SHOAL_FD_HUP = 0x10 };

/* Blocks the calling fiber until fd is readable (SHOAL_FD_IN) or writable
 * (SHOAL_FD_OUT). fd must be non-blocking; the first wait registers it with
 * the poller (edge-triggered, no system call on later waits). A return of 0
 * may be spurious: retry the operation and wait again on EAGAIN. *revents
 * (may be NULL) gets the readiness seen, including SHOAL_FD_ERR and
 * SHOAL_FD_HUP. One fiber may wait for each direction at a time
 * (SHOAL_EBUSY otherwise). Also SHOAL_ETIMEDOUT, SHOAL_ECANCELED,
 * SHOAL_ECLOSED if shoal_fd_forget() is called meanwhile. */
SHOAL_API int shoal_fd_wait(int fd, unsigned events, int64_t deadline, unsigned *revents);

/* Removes fd from the poller and wakes its waiters with SHOAL_ECLOSED.
 * Call before close(fd). Returns SHOAL_ENOENT if fd was never waited on. */
SHOAL_API int shoal_fd_forget(int fd);

#ifdef __cplusplus
}
#endif
#endif

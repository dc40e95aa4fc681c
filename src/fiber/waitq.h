/* A wait queue: fibers of one scheduler that wait until another fiber of
 * the same scheduler says that what they wait for may have come (room freed,
 * the last connection gone). A condition variable without its mutex (fibers
 * switch only where they block): the waiter looks at its condition again
 * after every wake, so a wake too many costs a look, never a wrong answer.
 * What it replaces is a sleep-and-poll loop, which looked every millisecond
 * whether anything had changed.
 *
 * A queue and its waiters belong to one scheduler's thread; a queue needs
 * no set-up (all zero is empty) and no tear-down once no one waits. */
#ifndef SHOAL_FIBER_WAITQ_H
#define SHOAL_FIBER_WAITQ_H

#include <shoal/fiber.h>

typedef struct sh_waitq_node sh_waitq_node;
typedef struct sh_waitq {
	sh_waitq_node *head;
} sh_waitq;

/* Blocks the calling fiber until sh_waitq_wake_all(q): 0, SHOAL_ETIMEDOUT
 * at the deadline, SHOAL_ECANCELED. No allocation: its place in the queue
 * is on its own stack. */
int sh_waitq_wait(sh_waitq *q, int64_t deadline);
/* Makes every fiber waiting on q now runnable (each returns 0). Never
 * blocks; no-op on an empty queue. */
void sh_waitq_wake_all(sh_waitq *q);

/* Waits in the poller until the eventfd efd (non-blocking) has a count,
 * and takes it: 0, SHOAL_ETIMEDOUT, SHOAL_ECANCELED, or the poller's
 * error. For what another thread says through an eventfd (stop, mail). */
int sh_efd_wait(int efd, int64_t deadline);

/* Runs fn(arg) on a thread aside (a pool's, named name while it runs)
 * while the calling fiber waits: for work that blocks in the kernel for long (a GiB of huge
 * pages zeroed, a file written and synced, read back), which must not stop
 * the thread's other fibers. Outside a fiber, or when no thread can be
 * started, fn runs here. 0 once fn has returned; SHOAL_ECANCELED when the
 * fiber was cancelled meanwhile, also only once fn has returned (its
 * arguments are the caller's), blocking the thread for the rest. */
int sh_run_aside(const char *name, void (*fn)(void *), void *arg);

/* Closes fd (nothing for -1), which a fiber of this thread may have waited
 * on: forgotten by this thread's poller first, since a number the poller
 * still held would be taken for the next descriptor to get it, and a wait
 * on that one would never wake. */
void sh_fd_close(int fd);

#endif

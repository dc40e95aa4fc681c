/* What the tasklet files share (tasklet.c: the thread's state, switching,
 * the tasklet type and module functions; channel.c: channels): the
 * structures and the few switch points every wait goes through. Internal
 * to the Python module. */
#ifndef SHOAL_PY_TASKLET_IMPL_H
#define SHOAL_PY_TASKLET_IMPL_H

#include "module.h"

#include "fiber/fiber_impl.h"
#include "fiber/switch.h"

typedef struct sh_tl sh_tl;
typedef struct ShTasklet ShTasklet;

/* A park's wake codes beyond the scheduler's. */
#define RC_KILLED (-20001)
#define RC_RAISED (-20002) /* a signal handler raised: the exception is set */
#define RC_FATAL (-20003)  /* a tasklet ended with KeyboardInterrupt, SystemExit... */

/* A context waiting on a channel, a join, run(), select, an fd or
 * another thread, on its own stack. Another thread may end a wait: every
 * field is then read and written with the GIL held, which is the lock of
 * cross-thread channel state (no channel operation lets go of the GIL
 * between looking at a channel and changing it). */
typedef struct sh_wait {
	struct sh_wait *prev, *next;
	ShTasklet *who;
	/* who's fiber, which its waker switches to: read from here, the
	 * waiter's cache line, not through the tasklet object, a cold miss
	 * one after the other when thousands are parked */
	shoal_fiber *fiber;
	PyObject *value; /* a send's value (owned), or what a receive got */
	const char *what;
	union {
		/* is_case: a select's case, pointing at the select's own wait */
		struct sh_wait *master;
		/* interruptible: a wait that is not a park (an fd wait) ends
		 * early (a kill, a signal) through this */
		void (*interrupt)(struct sh_wait *w, int rc);
	} u;
	struct sh_wait *xnext; /* while xposted */
	int xrc;
	int8_t dir; /* channels: 1 send, -1 receive */
	bool done : 1, linked : 1, forever : 1;
	/* Not a deadlock while parked for ever: ended from outside the
	 * thread's tasklets (a worker thread, an fd). */
	bool external : 1;
	/* Another thread's tasklet or code may end it (a channel wait): parked
	 * for ever, a deadlock only while no other Python thread runs. */
	bool shared : 1;
	/* posted to the waiter's thread by another thread (sh_tl_xwake) */
	bool xposted : 1;
	bool is_case : 1, interruptible : 1;
} sh_wait;

/* Cleared in a few stores: every channel wait makes one on its stack (a
 * `rep stos` of 104 bytes cost a hop 4 ns; the waker's fiber pointer took
 * it past one cache line, 72 bytes). */
_Static_assert(sizeof(sh_wait) <= 80, "sh_wait is cleared in a few stores");

struct ShTasklet {
	PyObject_HEAD sh_tl *tl; /* set when scheduled */
	PyObject *fn, *args, *kwargs;
	PyObject *context; /* a copy of the spawner's, until it starts */
	PyObject *result;  /* the return value, or the exception (failed) */
	PyObject *name;
	shoal_fiber *fiber; /* while alive */
	sh_wait *wait;	    /* while parked in a wait of ours */
	sh_wait *joiners;   /* a list of waiters */
	ShTasklet *live_next, *live_prev;
	uint64_t id;
	bool is_main, scheduled, done, failed, retrieved, kill_pending;
	sh_tl_blocking *call; /* inside sh_tl_blocking_begin/end (module.h) */
};

struct sh_tl {
	PyThreadState *ts;
	shoal_sched *sched;
	ShTasklet *main;    /* strong */
	ShTasklet *current; /* borrowed */
	ShTasklet *live;    /* scheduled, not finished; their fibers hold them */
	ShTasklet *zombies; /* finished, their fibers' references to drop */
	size_t nlive;
	size_t nforever; /* contexts parked for ever in our waits */
	/* Waits of this thread's contexts that other threads ended, to be
	 * woken here (GIL held on both sides; the scheduler's doorbell rang
	 * when the list became non-empty). */
	sh_wait *xhead;
	sh_wait *run_wait;
	PyThreadState *released; /* while the idle thread let go of the GIL */
	bool own_sched;
	/* A BaseException that is not an Exception ended a tasklet: the main
	 * tasklet raises it at its next switch point, as asyncio's loop does,
	 * so Ctrl-C or sys.exit() in a tasklet is not swallowed. */
	PyObject *fatal;
	uint8_t tracing;
	_PyCFrame park_cf;
};

/* The calling thread's tasklet state, made at its first use (NULL with an
 * exception when this thread cannot have one). */
sh_tl *sh_tl_get(void);
/* The calling thread's state, or NULL with an exception when owner (a
 * tasklet's or channel's thread) is another thread's. */
sh_tl *sh_tl_own(sh_tl *owner);
/* Drops the references finished tasklets' fibers held (may run Python
 * code; keeps a pending exception). Inline, as the check_kill below:
 * every channel operation asks, and there is seldom anything to do. */
void sh_tl_reap_zombies(sh_tl *tl);
static inline void sh_tl_reap(sh_tl *tl)
{
	if (tl->zombies)
		sh_tl_reap_zombies(tl);
}
/* -1 with TaskletExit (a kill) or what ended a tasklet fatally (in the
 * main tasklet) set, else 0: every switch point checks it. */
int sh_tl_check_kill_slow(sh_tl *tl);
static inline int sh_tl_check_kill(sh_tl *tl)
{
	if (sh_likely(!tl->fatal && !tl->current->kill_pending))
		return 0;
	return sh_tl_check_kill_slow(tl);
}

/* The only ways a Python context leaves the CPU: each saves and restores
 * the per-tasklet fields of the thread state around the fiber switch. */
int sh_tl_park(sh_tl *tl, int64_t deadline);
void sh_tl_yield(sh_tl *tl);
/* Wakes w's context with rc, which runs at once when `now` (the caller
 * right behind it), else after those already runnable. tl is the calling
 * thread's state (NULL for a thread without one): a waiter of another
 * thread is posted to its thread (sh_tl_xwake) whatever `now` says. */
void sh_tl_wake(sh_tl *tl, sh_wait *w, int rc, bool now);
/* Posts w's wake with rc to its thread and rings its scheduler (GIL
 * held): its idle hook or next switch point unparks it. */
void sh_tl_xwake(sh_wait *w, int rc);
/* Ends t's current wait early with rc (a kill, a signal, a fatal
 * exception): unparks it, or calls the wait's interrupt. */
void sh_tl_interrupt(ShTasklet *t, int rc);
/* The calling thread's state if it has one, never making it. */
sh_tl *sh_tl_peek(void);
/* Idle worker threads of to_thread()'s pool (GIL held to change): they
 * cannot end a channel wait, so deadlock detection does not count them. */
extern Py_ssize_t sh_tl_idle_workers;
/* Parks the current context in w (linked by the caller where its waker
 * finds it) until done, the deadline, a kill or a deadlock. */
int sh_tl_wait(sh_tl *tl, sh_wait *w, int64_t deadline);
/* NULL with the exception a failed wait's rc means (what: the call). */
PyObject *sh_tl_wait_error(sh_tl *tl, int rc, const char *what);

/* What select() gives for a receive on a closed, empty channel. */
extern PyObject *ShChanClosed;
/* Adds CLOSED and channel to the module (channel.c). */
int sh_py_channel_init(PyObject *mod);

/* A waiter is on its context's stack, among the frames the context
 * returns through when it is woken: with many tasklets parked those are
 * cold, and the first touch of the waiter (unlinking it) missed alone,
 * then each frame after another. Asked for together, before the waiter
 * is touched, the misses overlap. */
static inline void sh_tl_prefetch_waiter(const sh_tl *tl, const sh_wait *w)
{
	if (tl->sched->live < SH_COLD_FIBERS)
		return;
	for (const char *a = (const char *)w - 768; a < (const char *)w + 1024; a += 64)
		sh_prefetch(a);
}

/* Wait queues: tail NULL links at the head (a list without order). */
void sh_tl_link(sh_wait **head, sh_wait **tail, sh_wait *w);
void sh_tl_unlink(sh_wait **head, sh_wait **tail, sh_wait *w);

#endif

/* Internals shared by the fiber layer's files: the fiber and scheduler
 * structures, waiters, the stack pool and the cross-thread operations. */
#ifndef SHOAL_FIBER_IMPL_H
#define SHOAL_FIBER_IMPL_H

#include "shoal_impl.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- context switch (ctx_*.S) ---- */
void sh_ctx_switch(void **from_sp, void *to_sp);
/* Saves the current context like sh_ctx_switch, then calls fn(arg) on a
 * fresh stack whose top is `top` (16-byte aligned); fn never returns. */
void sh_ctx_start(void **from_sp, void *top, void *arg, void (*fn)(void *));

/* ---- stacks (stack.c) ---- */

/* A stack is [base, base + size) usable, with a guard page just below base
 * when guarded. Nothing writes to it before its fiber first runs. */
typedef struct sh_stack_pool sh_stack_pool;
typedef struct sh_stack {
	char *base;
	uint32_t size; /* bytes; stacks are limited to SH_STACK_MAX */
	bool guarded;
	/* a fiber's, not the pool's: bytes / 16 kept free between the top and
	 * its first frame (sh_fiber_spawn_late_stack), in the padding */
	uint16_t reserve16;
} sh_stack;

#define SH_STACK_MAX ((size_t)1 << 30)

/* Stacks end on page boundaries, so without an offset every fiber's hot
 * frames would share the same few L1 sets (the set comes from the page
 * offset) and a channel hop would evict the previous fiber's frames. A
 * fiber's first frame goes 0-31 cache lines below its stack's end. The
 * offset belongs to the stack, not to the fiber: each fiber that gets the
 * stack from the pool runs on the same lines as the one before it, which
 * are still in the caches, where a new offset would write lines that had
 * not been touched since the page was faulted in (a sacker's first run,
 * 56 against 70 ns a fiber). It is a hash of the end address, so any stack size
 * spreads, and a parked fiber's top follows from its stack pointer alone. */
static inline unsigned sh_stack_color(uintptr_t end)
{
	return (unsigned)(((uint32_t)(end >> 12) * 0x9E3779B1u) >> 27);
}

static inline char *sh_stack_top(const sh_stack *st)
{
	char *end = st->base + st->size;
	return end - (size_t)sh_stack_color((uintptr_t)end) * 64;
}

/* Where a fiber with a reserve of reserve16 * 16 bytes at its stack's top
 * starts (its reserve from there up): the middle of a page, give or take
 * the stack's colour (half a line a step), whatever the reserve. Such a
 * fiber (a tasklet) uses a little of its reserve upwards (its Python
 * frames) and goes 1-2 KiB down (the interpreter's C frames): both stay
 * in one page, where starting at the colour's line put them in two for
 * most colours, each a TLB miss when thousands of fibers take turns. */
static inline char *sh_stack_reserved(const sh_stack *st, unsigned reserve16)
{
	char *end = st->base + st->size;
	return end - (size_t)reserve16 * 16 - 2048 + (size_t)sh_stack_color((uintptr_t)end) * 32;
}

int sh_stack_pools_init(void **pools);
void sh_stack_pools_fini(void *pools);
int sh_stack_get(void *pools, size_t size, shoal_guard_mode mode, sh_stack *out);
void sh_stack_put(void *pools, const sh_stack *st);
/* A stack promised for later (sh_stack_take, which then cannot fail): a
 * free one is set aside, or one more carved and freed. Free stacks are
 * taken warmest first when they are taken, not when they are promised. */
int sh_stack_reserve(void *pools, size_t size, shoal_guard_mode mode);
void sh_stack_take(void *pools, size_t size, sh_stack *out);
/* The free stack of that size the next take or get would return, or NULL
 * (for prefetching: nothing is reserved or taken). */
const sh_stack *sh_stack_next(void *pools, size_t size);
void sh_stack_trim(void *pools, size_t keep);
void sh_stack_stats(void *pools, size_t *mapped, size_t *nfree, size_t *guarded);
/* The guard page containing addr, if any stack of this thread's pools has
 * one there (async-signal-safe: reads only). */
bool sh_stack_is_guard(void *pools, const void *addr);

/* ---- parking: for schedulers built on fibers ---- */

/* The Python module's tasklets are fibers of the thread's scheduler with
 * Stackless's channels on top (balance, preference), which shoal_chan has
 * not; these are what they need of the scheduler beyond the public API,
 * kept internal because their callers must keep their own wait queues. */

/* Blocks the calling fiber until sh_fiber_unpark() (its rc is returned),
 * the deadline (SHOAL_ETIMEDOUT) or shoal_cancel() (SHOAL_ECANCELED). */
int sh_fiber_park(int64_t deadline);
/* Makes parked fiber f runnable with code rc, at the tail of the run
 * queue. Returns SHOAL_EINVAL when f is not parked (so not woken). */
int sh_fiber_unpark(shoal_fiber *f, int rc);
/* Like sh_fiber_unpark, but f runs at once and the caller is queued
 * right behind it, ahead of every other runnable fiber (Stackless's
 * channel preference). */
int sh_fiber_handoff(shoal_fiber *f, int rc);

/* shoal_spawn, but the fiber's stack is taken when it first runs (one is
 * reserved now, so spawning still fails when none can be had): the
 * warmest free one then, often the stack of the fiber that just ended.
 * Spawning many that each run briefly (tasklets) touches a few stacks
 * instead of one cold stack a fiber; nothing is prefetched for such a
 * fiber before it starts. Its first frame starts top_reserve bytes (16 KiB
 * at most, rounded up to 16) and about 2 KiB below its stack's end
 * (sh_stack_reserved): the fiber's own memory above, from
 * sh_fiber_reserved(), is beside its frames (the tasklets' frame data
 * stack). */
int sh_fiber_spawn_late_stack(shoal_fiber **out, shoal_fiber_fn fn, void *arg,
			      const shoal_fiber_opts *opts, size_t top_reserve);
/* Fiber f's top_reserve bytes, below its stack's top (after its struct). */
static inline char *sh_fiber_reserved(const shoal_fiber *f);

/* Ends the calling fiber (not the root) as if its function had returned
 * result, without returning through its first frames, at its stack's top
 * and cold by then in a fiber whose life was deep below them. */
__attribute__((noreturn)) void sh_fiber_exit(void *result);

/* Called by the idle path: SH_IDLE_CHECK before it sleeps (returning
 * true when the hook made a fiber runnable: no sleep then), SH_IDLE_SLEEP
 * and SH_IDLE_WAKE around a sleep that may block (timeout_ns != 0). The
 * tasklets detect deadlocks at the check and let go of the GIL around
 * the sleep. */
enum { SH_IDLE_CHECK = 0, SH_IDLE_SLEEP, SH_IDLE_WAKE };
typedef bool (*sh_idle_hook)(void *arg, int phase, int64_t timeout_ns);
void sh_sched_set_idle_hook(shoal_sched *s, sh_idle_hook fn, void *arg);

/* ---- waiting ---- */

typedef struct sh_xop sh_xop;

/* One party waiting on a channel: a fiber of the owning scheduler (in a
 * send, recv or select), or, when fiber is NULL, the cross-thread operation
 * (sh_xop) that embeds this waiter. 56 bytes, so that a fiber's own waiter
 * shares its first cache lines with the rest of its hot state. */
typedef struct sh_waiter {
	struct sh_waiter *prev, *next;
	void *elem;
	shoal_fiber *fiber;
	struct sh_waiter *group; /* select: the array of this fiber's waiters */
	shoal_chan *chan;
	uint32_t index; /* case index inside a select, | SH_W_SEND for senders */
	uint16_t ngroup;
	bool linked;
} sh_waiter;

#define SH_W_SEND 0x80000000u
#define SH_SELECT_MAX 65535

typedef struct sh_wq {
	sh_waiter *head, *tail;
} sh_wq;

/* Why a blocked fiber is waiting, so a timer or cancel can undo the wait. */
enum sh_wait_kind {
	SH_WAIT_NONE = 0,
	SH_WAIT_CHAN, /* waiters in wait_waiters[0..wait_n) */
	SH_WAIT_SLEEP,
	SH_WAIT_JOIN, /* wait_obj: the fiber being joined */
	SH_WAIT_FD,   /* wait_fd, wait_dir */
	SH_WAIT_XOP,  /* wait_obj: the sh_xop in another scheduler */
	SH_WAIT_HARD, /* cannot be interrupted */
	SH_WAIT_PARK, /* sh_fiber_park: whoever parked it keeps its own queues */
};

enum sh_fiber_state { SH_RUNNABLE = 1, SH_RUNNING, SH_BLOCKED, SH_DEAD };

/* Fiber structures live in dense per-scheduler chunks, not on their
 * stacks: waking, joining and spawning then touch packed memory, and a
 * fiber's stack page is first touched when the fiber first runs. Fields are
 * grouped by cache line and by when they are touched: lines 0-1 by a channel
 * hop (waiter, state, wake code, small-element buffer), line 2 by a fiber's
 * exit and its join, line 3 by timers and spawning, the rest rarely. */
#define SH_NO_TIMER UINT32_MAX

/* A fiber that has not run yet keeps its stack's top + SH_SP_FRESH as its
 * stack pointer (saved ones are 16-aligned): starting it, or fetching where
 * its first frames go, then reads line 0 only, not the stack in line 2. */
#define SH_SP_FRESH 1

struct shoal_fiber {
	/* line 0 */
	void *sp;		      /* saved stack pointer, or top + SH_SP_FRESH */
	struct shoal_fiber *run_next; /* run queue, or the free list */
	sh_waiter w1;		      /* the waiter of a plain send or recv */
	/* line 1 (from offset 72) */
	uint8_t state;
	uint8_t wait_kind;
	bool cancelled, detached, is_root, joining;
	bool has_fls;  /* fls is allocated: an exit need not read line 3 */
	bool has_name; /* name[] holds one; else a spawn has not touched line 4 */
	int wake_rc;
	uint32_t wake_index;
	uint32_t wait_n;
	uint32_t heap_idx; /* SH_NO_TIMER when not in the timer heap */
	uint64_t xbuf[2];  /* small elements in flight to or from this fiber */
	shoal_sched *sched;
	sh_waiter *wait_waiters;
	/* line 2: exit and join */
	struct shoal_fiber *child_head;
	struct shoal_fiber *parent;
	struct shoal_fiber *sib_prev, *sib_next;
	struct shoal_fiber *joiner;
	sh_stack stack;
	void *result;
	/* line 3 */
	void **fls;
	shoal_fiber_fn fn;
	void *arg;
	int64_t deadline;
	uint64_t timer_seq;
	void *wait_obj;
	int wait_fd;
	int wait_dir;
	uint64_t id;
	/* line 4 */
	char name[32];
#if defined(SH_ASAN)
	void *asan_fake;
	const void *asan_bottom;
	size_t asan_size;
#endif
#if defined(SH_TSAN)
	void *tsan_fiber;
#endif
} __attribute__((aligned(64)));

_Static_assert(offsetof(struct shoal_fiber, child_head) == 128, "exit fields start line 2");
_Static_assert(offsetof(struct shoal_fiber, fls) == 192, "line 3");

static inline char *sh_fiber_reserved(const shoal_fiber *f)
{
	return sh_stack_reserved(&f->stack, f->stack.reserve16);
}

/* Cross-thread operation: a send or close issued by a thread that does not
 * own the channel. It is heap-allocated and shared by the issuer and the
 * owner (two references), and a send carries a copy of its element, so the
 * issuer can give up at its deadline without waiting for the owner, which
 * may be busy outside shoal for as long as it likes: the owner claims an
 * operation (PENDING -> CLAIMED) before it delivers, the issuer abandons it
 * (PENDING -> ABANDONED) when it stops waiting, and exactly one wins. */
enum sh_xop_kind { SH_XOP_SEND = 1, SH_XOP_CLOSE, SH_XOP_WAKE };
enum sh_xop_state { SH_XOP_PENDING = 0, SH_XOP_CLAIMED, SH_XOP_DONE, SH_XOP_ABANDONED };

struct sh_xop {
	sh_xop *next; /* inbox link (owner's inbox, then the issuer's for WAKE) */
	uint8_t kind;
	bool woken; /* fiber issuers: the WAKE reached the issuer's thread */
	shoal_chan *chan;
	sh_waiter w; /* the send waiter while queued on the channel */
	int rc;
	_Atomic uint32_t state; /* also the futex word for thread issuers */
	_Atomic uint32_t refs;
	size_t bytes; /* allocation size, for the sized free */
	/* set when the issuer is a fiber of another scheduler */
	shoal_fiber *fiber;
	shoal_sched *fiber_sched;
	_Alignas(16) unsigned char elem[]; /* the element being sent */
};

/* Channels up to SH_CHAN_CLASSES * 64 bytes are recycled per scheduler. */
#define SH_CHAN_CLASSES 4

typedef struct sh_fdslot {
	shoal_fiber *waiter[2]; /* 0: in, 1: out */
	uint32_t ready;		/* readiness seen and not consumed yet */
	bool registered;
} sh_fdslot;

struct shoal_sched {
	shoal_fiber *cur;
	void *raw; /* what shoal_alloc returned, before alignment */
	shoal_fiber *runq_head, *runq_tail;
	shoal_fiber root;
	size_t stack_size, page_size;
	shoal_guard_mode guard;
	size_t stack_cache;
	void *pools;
	/* timers: binary min-heap on (deadline, timer_seq) */
	shoal_fiber **heap;
	size_t heap_len, heap_cap;
	uint64_t timer_seq;
	/* poller */
	int epfd;
	int evfd;
	sh_fdslot *fds;
	size_t nfds_cap;
	size_t nfds_registered;
	/* cross-thread inbox */
	pthread_mutex_t inbox_lock;
	sh_xop *inbox_head, *inbox_tail;
	_Atomic int inbox_pending;
	/* detached fibers */
	shoal_fiber *detached_head;
	shoal_fiber *dead;	/* died; its stack is released after the next switch */
	sh_ptrstack fiber_free; /* free fiber structures */
	size_t fibers_total;	/* structures in all chunks */
	void *fiber_chunks;
	uint64_t rng;
	uint64_t switches, spawned;
	uint64_t id_next, id_end;
	/* freed channels by size class, reused without malloc */
	shoal_chan *chans; /* live channels, orphaned when we are destroyed */
	sh_ptrstack chan_cache[SH_CHAN_CLASSES];
	size_t live;
	uint32_t tick;
	bool destroying;
	/* a fiber was spawned with a top reserve (tasklets): a cold switch
	 * then reads the line of the fiber that says so (sh_prefetch_deep),
	 * which plain fibers' switches never pay for */
	bool reserves;
	void *altstack;
	size_t altstack_size;
	sh_idle_hook idle_hook; /* sh_sched_set_idle_hook */
	void *idle_arg;
};

/* The scheduler of the calling thread. initial-exec: every channel call
 * reads it, and the default model for a shared library makes that a call
 * to __tls_get_addr. One pointer fits glibc's static TLS reserve even when
 * libshoal.so is dlopen'ed (as the Python module will be). */
extern _Thread_local shoal_sched *sh_tls_sched __attribute__((tls_model("initial-exec")));

/* ---- scheduler primitives used by chan.c ---- */

static inline void sh_runq_push(shoal_sched *s, shoal_fiber *f)
{
	f->run_next = NULL;
	if (s->runq_tail)
		s->runq_tail->run_next = f;
	else
		s->runq_head = f;
	s->runq_tail = f;
}

/* Makes a blocked fiber runnable with result rc. */
static inline void sh_wake(shoal_fiber *f, int rc)
{
	if (f->state != SH_BLOCKED)
		return;
	f->wake_rc = rc;
	f->state = SH_RUNNABLE;
	sh_runq_push(f->sched, f);
}
/* Checks the current fiber's cancellation: SHOAL_ECANCELED or 0. */
static inline int sh_check_cancel(shoal_sched *s)
{
	return sh_unlikely(s->cur->cancelled) ? SHOAL_ECANCELED : 0;
}
uint64_t sh_rand(shoal_sched *s);

/* Posts an xop into s's inbox and rings its doorbell when it was empty. */
void sh_inbox_post(shoal_sched *s, sh_xop *op);
/* Drains the inbox (owner thread). */
void sh_inbox_drain(shoal_sched *s);
/* Channel side of the inbox (chan.c). */
void sh_chan_xop(shoal_sched *s, sh_xop *op);
void sh_chan_unlink_waiters(shoal_fiber *f);
void sh_chan_cache_fini(shoal_sched *s);
void sh_chan_orphan_all(shoal_sched *s);
/* Completes a claimed xop towards its issuer and drops the owner's
 * reference; drops an abandoned one. */
void sh_xop_complete(sh_xop *op, int rc);
bool sh_xop_claim(sh_xop *op);
void sh_xop_unref(sh_xop *op);

/* Futex helpers. */

/* Signal handling for stack overflow reports (signal.c). */
int sh_overflow_thread_init(shoal_sched *s);
void sh_overflow_thread_fini(shoal_sched *s);

#endif

/* The per-thread scheduler: fiber creation and teardown, the run queue,
 * blocking and waking, timers, cancellation, structured ownership, and the
 * idle path (epoll + eventfd inbox). There is no scheduler context: a fiber
 * that blocks switches straight to the next runnable one, so a channel hop
 * costs one context switch, and only a fiber with nothing to hand over to
 * runs the poller, on its own stack. */
#include "switch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Thread_local shoal_sched *sh_tls_sched __attribute__((tls_model("initial-exec")));

static _Atomic uint64_t next_fiber_id = 1;

#define DEFAULT_STACK (64 * 1024)
#define MIN_STACK (16 * 1024)
#define DEFAULT_CACHE 4096

/* ---- run queue ---------------------------------------------------------- */

uint64_t sh_rand(shoal_sched *s)
{
	/* xorshift64*: select fairness needs cheap, not strong. */
	uint64_t x = s->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	s->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* ---- timer heap ----------------------------------------------------------- */

static inline bool timer_less(const shoal_fiber *a, const shoal_fiber *b)
{
	/* Equal deadlines fire in the order they were armed. */
	return a->deadline < b->deadline ||
	       (a->deadline == b->deadline && a->timer_seq < b->timer_seq);
}

static void heap_set(shoal_sched *s, size_t i, shoal_fiber *f)
{
	s->heap[i] = f;
	f->heap_idx = (uint32_t)i;
}

static void heap_up(shoal_sched *s, size_t i)
{
	shoal_fiber *f = s->heap[i];
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!timer_less(f, s->heap[p]))
			break;
		heap_set(s, i, s->heap[p]);
		i = p;
	}
	heap_set(s, i, f);
}

static void heap_down(shoal_sched *s, size_t i)
{
	shoal_fiber *f = s->heap[i];
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		shoal_fiber *best = f;
		if (l < s->heap_len && timer_less(s->heap[l], best)) {
			m = l;
			best = s->heap[l];
		}
		if (l + 1 < s->heap_len && timer_less(s->heap[l + 1], best))
			m = l + 1;
		if (m == i)
			break;
		heap_set(s, i, s->heap[m]);
		i = m;
	}
	heap_set(s, i, f);
}

static int heap_add(shoal_sched *s, shoal_fiber *f)
{
	if (s->heap_len >= SH_NO_TIMER - 1)
		return SHOAL_ENOMEM;
	if (s->heap_len == s->heap_cap) {
		size_t nc = s->heap_cap ? s->heap_cap * 2 : 64;
		shoal_fiber **nh =
			shoal_realloc(s->heap, s->heap_cap * sizeof(*nh), nc * sizeof(*nh));
		if (!nh)
			return SHOAL_ENOMEM;
		s->heap = nh;
		s->heap_cap = nc;
	}
	f->timer_seq = s->timer_seq++;
	heap_set(s, s->heap_len++, f);
	heap_up(s, s->heap_len - 1);
	return 0;
}

static void heap_remove(shoal_sched *s, shoal_fiber *f)
{
	size_t i = f->heap_idx;
	f->heap_idx = SH_NO_TIMER;
	shoal_fiber *last = s->heap[--s->heap_len];
	if (i == s->heap_len)
		return;
	heap_set(s, i, last);
	heap_up(s, i);
	heap_down(s, last->heap_idx);
}

/* ---- blocking and waking ------------------------------------------------- */

/* Takes a blocked fiber out of whatever it waits on, so that a timer or a
 * cancel can wake it. Returns false for waits that must finish first. */
static bool undo_wait(shoal_fiber *f)
{
	shoal_sched *s = f->sched;
	switch (f->wait_kind) {
	case SH_WAIT_CHAN:
		sh_chan_unlink_waiters(f);
		return true;
	case SH_WAIT_JOIN: {
		shoal_fiber *t = f->wait_obj;
		t->joiner = NULL;
		t->joining = false;
		return true;
	}
	case SH_WAIT_FD: {
		sh_fdslot *sl = &s->fds[f->wait_fd];
		if (f->wait_dir & 1)
			sl->waiter[0] = NULL;
		if (f->wait_dir & 2)
			sl->waiter[1] = NULL;
		return true;
	}
	case SH_WAIT_SLEEP:
	case SH_WAIT_PARK:
	case SH_WAIT_XOP: /* the caller abandons its operation itself */
		return true;
	case SH_WAIT_HARD:
	default:
		return false;
	}
}

static void fire_timers(shoal_sched *s, int64_t now)
{
	while (s->heap_len && s->heap[0]->deadline <= now) {
		shoal_fiber *f = s->heap[0];
		heap_remove(s, f);
		if (f->state == SH_BLOCKED && undo_wait(f))
			sh_wake(f, SHOAL_ETIMEDOUT);
	}
}

static void poll_once(shoal_sched *s, int64_t timeout_ns);

static void fiber_struct_free(shoal_sched *s, shoal_fiber *f)
{
#if defined(SH_TSAN)
	__tsan_destroy_fiber(f->tsan_fiber);
#endif
	s->live--;
	/* Cannot fail: the array was sized for every structure when their
	 * chunk was allocated. */
	sh_ptrstack_push(&s->fiber_free, f);
}

void sh_release_dead(shoal_sched *s)
{
	shoal_fiber *d = s->dead;
	s->dead = NULL;
	sh_stack_put(s->pools, &d->stack);
	if (d->detached)
		fiber_struct_free(s, d);
}

int sh_timer_arm(shoal_sched *s, shoal_fiber *f, int64_t deadline)
{
	f->deadline = deadline;
	if (heap_add(s, f) != 0) {
		undo_wait(f);
		f->wait_kind = SH_WAIT_NONE;
		return SHOAL_ENOMEM;
	}
	return 0;
}

void sh_timer_disarm(shoal_sched *s, shoal_fiber *f)
{
	heap_remove(s, f);
}

void sh_housekeeping(shoal_sched *s)
{
	if (s->heap_len && s->heap[0]->deadline <= shoal_now_ns())
		fire_timers(s, shoal_now_ns());
	if (atomic_load_explicit(&s->inbox_pending, memory_order_acquire))
		sh_inbox_drain(s);
	if (s->nfds_registered && (s->tick & 255) == 0)
		poll_once(s, 0);
}

/* Nothing is runnable: sleep in epoll until a timer, an fd or the inbox. */
void sh_idle_wait(shoal_sched *s)
{
	int64_t now = shoal_now_ns();
	fire_timers(s, now);
	if (s->runq_head)
		return;
	if (atomic_load_explicit(&s->inbox_pending, memory_order_acquire)) {
		sh_inbox_drain(s);
		if (s->runq_head)
			return;
	}
	sh_stack_trim(s->pools, s->stack_cache);
	int64_t timeout = -1;
	if (s->heap_len)
		timeout = s->heap[0]->deadline > now ? s->heap[0]->deadline - now : 0;
	if (s->idle_hook) {
		if (s->idle_hook(s->idle_arg, SH_IDLE_CHECK, timeout))
			return;
		if (timeout != 0) {
			s->idle_hook(s->idle_arg, SH_IDLE_SLEEP, timeout);
			poll_once(s, timeout);
			s->idle_hook(s->idle_arg, SH_IDLE_WAKE, timeout);
		} else {
			poll_once(s, 0);
		}
	} else {
		poll_once(s, timeout);
	}
	fire_timers(s, shoal_now_ns());
}

void sh_sched_set_idle_hook(shoal_sched *s, sh_idle_hook fn, void *arg)
{
	s->idle_hook = fn;
	s->idle_arg = arg;
}

/* Blocks the current fiber in a wait of this kind whose waker (a timer,
 * unpark) knows it without any list of ours: a sleep or a park. */
static int block_bare(enum sh_wait_kind kind, int64_t deadline)
{
	shoal_sched *s = sh_tls_sched;
	if (!s)
		return SHOAL_EINVAL;
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	if (deadline != SHOAL_FOREVER && deadline <= shoal_now_ns())
		return SHOAL_ETIMEDOUT;
	s->cur->wait_kind = kind;
	return sh_block(s, deadline);
}

int sh_fiber_park(int64_t deadline)
{
	return block_bare(SH_WAIT_PARK, deadline);
}

static bool parked(shoal_sched *s, shoal_fiber *f)
{
	return s && f && f->sched == s && f->state == SH_BLOCKED && f->wait_kind == SH_WAIT_PARK;
}

int sh_fiber_unpark(shoal_fiber *f, int rc)
{
	if (!parked(sh_tls_sched, f))
		return SHOAL_EINVAL;
	sh_wake(f, rc);
	return 0;
}

static void runq_push_front(shoal_sched *s, shoal_fiber *f)
{
	f->run_next = s->runq_head;
	s->runq_head = f;
	if (!s->runq_tail)
		s->runq_tail = f;
}

int sh_fiber_handoff(shoal_fiber *f, int rc)
{
	shoal_sched *s = sh_tls_sched;
	if (!parked(s, f))
		return SHOAL_EINVAL;
	shoal_fiber *cur = s->cur;
	f->wake_rc = rc;
	f->state = SH_RUNNABLE;
	cur->state = SH_RUNNABLE;
	runq_push_front(s, cur);
	runq_push_front(s, f);
	sh_schedule(s);
	return 0;
}

/* ---- fibers ------------------------------------------------------------ */

static void child_link(shoal_fiber **head, shoal_fiber *f)
{
	f->sib_prev = NULL;
	f->sib_next = *head;
	if (*head)
		(*head)->sib_prev = f;
	*head = f;
}

static void child_unlink(shoal_fiber **head, shoal_fiber *f)
{
	if (f->sib_prev)
		f->sib_prev->sib_next = f->sib_next;
	else
		*head = f->sib_next;
	if (f->sib_next)
		f->sib_next->sib_prev = f->sib_prev;
	f->sib_prev = f->sib_next = NULL;
}

#define FIBERS_PER_CHUNK 256
/* A chunk: a pointer to the previous chunk, then 64-byte aligned fibers. */
#define CHUNK_BYTES (sizeof(shoal_fiber) * FIBERS_PER_CHUNK + 128)

static shoal_fiber *fiber_struct_alloc(shoal_sched *s)
{
	if (!s->fiber_free.n) {
		if (sh_ptrstack_reserve(&s->fiber_free, s->fibers_total + FIBERS_PER_CHUNK) != 0)
			return NULL;
		void **raw = shoal_alloc(CHUNK_BYTES);
		if (!raw)
			return NULL;
		raw[0] = s->fiber_chunks;
		s->fiber_chunks = raw;
		s->fibers_total += FIBERS_PER_CHUNK;
		shoal_fiber *f =
			(shoal_fiber *)(((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63);
		for (size_t i = FIBERS_PER_CHUNK; i-- > 0;)
			sh_ptrstack_push(&s->fiber_free, &f[i]);
	}
	shoal_fiber *f = sh_ptrstack_pop(&s->fiber_free);
	if (s->fiber_free.n) {
		/* Spawning many in a row: a spawn's stores to a structure that
		 * left the caches (it was freed a wave of fibers ago) wait for
		 * its lines one by one; fetch the next one's meanwhile. */
		const char *nx = s->fiber_free.v[s->fiber_free.n - 1];
		for (size_t off = 0; off < offsetof(shoal_fiber, name); off += 64)
			sh_prefetchw(nx + off);
	}
	return f;
}

static void fiber_chunks_free(shoal_sched *s)
{
	void **c = s->fiber_chunks;
	while (c) {
		void **n = c[0];
		shoal_free(c, CHUNK_BYTES);
		c = n;
	}
}

static void fls_destroy(shoal_fiber *f);

static int join_impl(shoal_sched *s, shoal_fiber *f, void **result, int64_t deadline, bool hard);

static __attribute__((noreturn)) void fiber_finish(shoal_sched *s, shoal_fiber *f)
{
	/* Structured concurrency: children never outlive their parent. */
	while (f->child_head) {
		shoal_fiber *c = f->child_head;
		shoal_cancel(c);
		join_impl(s, c, NULL, SHOAL_FOREVER, true);
	}
	if (f->has_fls)
		fls_destroy(f);
	f->state = SH_DEAD;
	s->dead = f;
	if (f->detached) {
		child_unlink(&s->detached_head, f);
		if (s->destroying && !s->detached_head)
			sh_wake(&s->root, 0);
	} else if (f->joiner) {
		sh_wake(f->joiner, 0);
	}
	sh_schedule(s);
	SH_PANIC("dead fiber %" PRIu64 " was resumed", f->id);
}

void sh_fiber_main(void *arg)
{
	shoal_fiber *f = arg;
	shoal_sched *s = f->sched;
#if defined(SH_ASAN)
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	if (s->dead)
		sh_release_dead(s);
	f->result = f->fn(f->arg);
	fiber_finish(s, f);
}

void sh_fiber_exit(void *result)
{
	shoal_sched *s = sh_tls_sched;
	shoal_fiber *f = s->cur;
	SH_ASSERT(!f->is_root);
	f->result = result;
	fiber_finish(s, f);
}

char *sh_fiber_take_stack(shoal_sched *s, shoal_fiber *f)
{
	uint16_t reserve16 = f->stack.reserve16;
	sh_stack_take(s->pools, f->stack.size, &f->stack);
	f->stack.reserve16 = reserve16;
	const sh_stack *nx;
	if (reserve16 && s->live >= SH_COLD_FIBERS &&
	    (nx = sh_stack_next(s->pools, f->stack.size))) {
		/* Many tasklets starting one after another (each runs until it
		 * blocks) take stacks in this order, cold ones: the lines the
		 * next will write its first frames and Python frames to are
		 * asked for while this one runs. */
		const char *t = sh_stack_reserved(nx, reserve16);
		for (const char *a = t - 1536; a < t + 256; a += 64)
			sh_prefetchw(a);
	}
#if defined(SH_ASAN)
	f->asan_bottom = f->stack.base;
	f->asan_size = f->stack.size;
#endif
	return sh_fiber_reserved(f);
}

static int spawn_impl(shoal_fiber **out, shoal_fiber_fn fn, void *arg, const shoal_fiber_opts *opts,
		      bool late_stack, size_t top_reserve)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || !fn || (!out && !(opts && opts->detached)))
		return SHOAL_EINVAL;
	if (s->cur->cancelled)
		return SHOAL_ECANCELED;
	size_t size = opts && opts->stack_size ? opts->stack_size : s->stack_size;
	if (size < MIN_STACK)
		size = MIN_STACK;
	if (size > SH_STACK_MAX || shoal_align_size(size, s->page_size, &size) != 0)
		return SHOAL_EINVAL;
	shoal_fiber *f = fiber_struct_alloc(s);
	if (!f)
		return SHOAL_ENOMEM;
	if (top_reserve > 16 * 1024 || top_reserve > size / 4)
		return SHOAL_EINVAL;
	sh_stack st = {.size = (uint32_t)size, .reserve16 = (uint16_t)((top_reserve + 15) / 16)};
	s->reserves |= top_reserve > 0;
	int rc = late_stack ? sh_stack_reserve(s->pools, size, s->guard)
			    : sh_stack_get(s->pools, size, s->guard, &st);
	if (rc) {
		sh_ptrstack_push(&s->fiber_free, f);
		return rc;
	}
	sh_zero(f, offsetof(shoal_fiber, name));
	f->sched = s;
	f->stack = st;
	f->fn = fn;
	f->arg = arg;
	f->heap_idx = SH_NO_TIMER;
	f->wait_fd = -1;
	f->w1.fiber = f; /* constant: block_on relies on it */
	/* a late stack's top is NULL until it starts (sh_switch_to) */
	f->sp = (void *)((late_stack ? 0 : (uintptr_t)sh_stack_top(&st)) + SH_SP_FRESH);
	if (sh_unlikely(s->id_next == s->id_end)) {
		/* Ids come in blocks so spawning takes no atomic per fiber. */
		s->id_next = atomic_fetch_add_explicit(&next_fiber_id, 1024, memory_order_relaxed);
		s->id_end = s->id_next + 1024;
	}
	f->id = s->id_next++;
	if (opts && opts->name)
		shoal_fiber_set_name(f, opts->name);
#if defined(SH_ASAN)
	f->asan_bottom = st.base;
	f->asan_size = st.size;
#endif
#if defined(SH_TSAN)
	f->tsan_fiber = __tsan_create_fiber(0);
#endif
	if (opts && opts->detached) {
		f->detached = true;
		child_link(&s->detached_head, f);
	} else {
		f->parent = s->cur;
		child_link(&s->cur->child_head, f);
	}
	f->state = SH_RUNNABLE;
	sh_runq_push(s, f);
	s->spawned++;
	s->live++;
	if (out)
		*out = f;
	return 0;
}

int shoal_spawn(shoal_fiber **out, shoal_fiber_fn fn, void *arg, const shoal_fiber_opts *opts)
{
	return spawn_impl(out, fn, arg, opts, false, 0);
}

int sh_fiber_spawn_late_stack(shoal_fiber **out, shoal_fiber_fn fn, void *arg,
			      const shoal_fiber_opts *opts, size_t top_reserve)
{
	return spawn_impl(out, fn, arg, opts, true, top_reserve);
}

static int join_impl(shoal_sched *s, shoal_fiber *f, void **result, int64_t deadline, bool hard)
{
	shoal_fiber *cur = s->cur;
	if (f->state != SH_DEAD) {
		if (!hard && deadline == SHOAL_NOWAIT)
			return SHOAL_ETIMEDOUT;
		f->joining = true;
		f->joiner = cur;
		cur->wait_kind = hard ? SH_WAIT_HARD : SH_WAIT_JOIN;
		cur->wait_obj = f;
		int rc = sh_block(s, hard ? SHOAL_FOREVER : deadline);
		if (rc)
			return rc; /* undo_wait cleared joiner/joining */
	}
	if (result)
		*result = f->result;
	child_unlink(&f->parent->child_head, f);
	fiber_struct_free(s, f);
	return 0;
}

int shoal_join_until(shoal_fiber *f, void **result, int64_t deadline)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || !f || f->sched != s || f->is_root || f == s->cur || f->detached || f->joining)
		return SHOAL_EINVAL;
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	return join_impl(s, f, result, deadline, false);
}

int shoal_join(shoal_fiber *f, void **result)
{
	return shoal_join_until(f, result, SHOAL_FOREVER);
}

int shoal_detach(shoal_fiber *f)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || !f || f->sched != s || f->is_root || f->detached || f->joining)
		return SHOAL_EINVAL;
	child_unlink(&f->parent->child_head, f);
	f->parent = NULL;
	if (f->state == SH_DEAD) {
		fiber_struct_free(s, f);
		return 0;
	}
	f->detached = true;
	child_link(&s->detached_head, f);
	return 0;
}

int shoal_cancel(shoal_fiber *f)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || !f || f->sched != s)
		return SHOAL_EINVAL;
	if (f->state == SH_DEAD || f->cancelled)
		return 0;
	f->cancelled = true;
	if (f->state == SH_BLOCKED && undo_wait(f)) {
		if (f->heap_idx != SH_NO_TIMER)
			heap_remove(s, f);
		sh_wake(f, SHOAL_ECANCELED);
	}
	return 0;
}

int shoal_yield(void)
{
	shoal_sched *s = sh_tls_sched;
	if (!s)
		return SHOAL_EINVAL;
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	shoal_fiber *cur = s->cur;
	cur->state = SH_RUNNABLE;
	sh_runq_push(s, cur);
	sh_schedule(s);
	return sh_check_cancel(s);
}

int shoal_sleep_until(int64_t deadline)
{
	return block_bare(SH_WAIT_SLEEP, deadline);
}

shoal_fiber *shoal_self(void)
{
	shoal_sched *s = sh_tls_sched;
	return s ? s->cur : NULL;
}

int shoal_is_cancelled(const shoal_fiber *f)
{
	return f && f->cancelled;
}

const char *shoal_fiber_name(const shoal_fiber *f)
{
	if (!f)
		return "";
	if (!f->has_name) {
		/* Named lazily: spawning 100 000 fibers need not format 100 000
		 * strings nobody reads. The cast is safe: fibers are never const
		 * objects, only const views of mutable ones. */
		shoal_fiber *m = (shoal_fiber *)(uintptr_t)f;
		snprintf(m->name, sizeof(m->name), "fiber-%" PRIu64, f->id);
		atomic_signal_fence(memory_order_release); /* for the overflow handler */
		m->has_name = true;
	}
	return f->name;
}

int shoal_fiber_set_name(shoal_fiber *f, const char *name)
{
	if (!f || !name)
		return SHOAL_EINVAL;
	size_t n = strnlen(name, sizeof(f->name) - 1);
	memcpy(f->name, name, n);
	f->name[n] = '\0';
	atomic_signal_fence(memory_order_release); /* for the overflow handler */
	f->has_name = true;
	return 0;
}

uint64_t shoal_fiber_id(const shoal_fiber *f)
{
	return f ? f->id : 0;
}

/* ---- fiber-local data ---------------------------------------------------- */

static _Atomic unsigned fls_next;
static void (*fls_dtors[SHOAL_FLS_MAX])(void *);

int shoal_fls_key_create(shoal_fls_key *key, void (*dtor)(void *))
{
	if (!key)
		return SHOAL_EINVAL;
	unsigned k = atomic_fetch_add(&fls_next, 1);
	if (k >= SHOAL_FLS_MAX) {
		atomic_store(&fls_next, SHOAL_FLS_MAX);
		return SHOAL_ENOSPC;
	}
	fls_dtors[k] = dtor;
	*key = k;
	return 0;
}

void *shoal_fls_get(shoal_fls_key key)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || key >= SHOAL_FLS_MAX || !s->cur->fls)
		return NULL;
	return s->cur->fls[key];
}

int shoal_fls_set(shoal_fls_key key, void *value)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || key >= SHOAL_FLS_MAX || key >= atomic_load(&fls_next))
		return SHOAL_EINVAL;
	shoal_fiber *f = s->cur;
	if (!f->fls) {
		if (!value)
			return 0;
		f->fls = shoal_calloc(SHOAL_FLS_MAX, sizeof(void *));
		if (!f->fls)
			return SHOAL_ENOMEM;
		f->has_fls = true;
	}
	f->fls[key] = value;
	return 0;
}

static void fls_destroy(shoal_fiber *f)
{
	if (!f->fls)
		return;
	/* A destructor may set values again; a few rounds, as pthread does. */
	for (int round = 0; round < 4; round++) {
		bool any = false;
		for (unsigned k = 0; k < SHOAL_FLS_MAX; k++) {
			void *v = f->fls[k];
			if (v && fls_dtors[k]) {
				f->fls[k] = NULL;
				fls_dtors[k](v);
				any = true;
			}
		}
		if (!any)
			break;
	}
	shoal_free(f->fls, SHOAL_FLS_MAX * sizeof(void *));
	f->fls = NULL;
	f->has_fls = false;
}

/* ---- poller ---------------------------------------------------------------- */

static unsigned to_shoal_events(uint32_t ev)
{
	unsigned r = 0;
	if (ev & (EPOLLIN | EPOLLRDHUP))
		r |= SHOAL_FD_IN;
	if (ev & EPOLLOUT)
		r |= SHOAL_FD_OUT;
	if (ev & EPOLLERR)
		r |= SHOAL_FD_ERR;
	if (ev & (EPOLLHUP | EPOLLRDHUP))
		r |= SHOAL_FD_HUP;
	return r;
}

static void fd_deliver(shoal_sched *s, int fd)
{
	sh_fdslot *sl = &s->fds[fd];
	const unsigned sticky = SHOAL_FD_ERR | SHOAL_FD_HUP;
	for (int d = 0; d < 2; d++) {
		shoal_fiber *f = sl->waiter[d];
		if (!f)
			continue;
		unsigned want = (unsigned)(f->wait_dir & 1 ? SHOAL_FD_IN : 0) |
				(unsigned)(f->wait_dir & 2 ? SHOAL_FD_OUT : 0);
		unsigned got = sl->ready & (want | sticky);
		if (!got)
			continue;
		sl->ready &= ~(got & ~sticky);
		if (f->wait_dir & 1)
			sl->waiter[0] = NULL;
		if (f->wait_dir & 2)
			sl->waiter[1] = NULL;
		f->wake_index = got;
		sh_wake(f, 0);
	}
}

static void poll_once(shoal_sched *s, int64_t timeout_ns)
{
	struct epoll_event evs[64];
	struct timespec ts, *tsp = NULL;
	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	int n = epoll_pwait2(s->epfd, evs, (int)SH_ARRAY_LEN(evs), tsp, NULL);
	if (n < 0 && errno == ENOSYS) {
		int ms = timeout_ns < 0 ? -1
					: (int)((timeout_ns + 999999) / 1000000 > INT_MAX
							? INT_MAX
							: (timeout_ns + 999999) / 1000000);
		n = epoll_wait(s->epfd, evs, (int)SH_ARRAY_LEN(evs), ms);
	}
	for (int i = 0; i < n; i++) {
		int fd = evs[i].data.fd;
		if (fd == s->evfd) {
			sh_eventfd_drain(s->evfd);
			sh_inbox_drain(s);
			continue;
		}
		if (fd < 0 || (size_t)fd >= s->nfds_cap || !s->fds[fd].registered)
			continue;
		s->fds[fd].ready |= to_shoal_events(evs[i].events);
		fd_deliver(s, fd);
	}
}

int shoal_fd_wait(int fd, unsigned events, int64_t deadline, unsigned *revents)
{
	shoal_sched *s = sh_tls_sched;
	if (!s)
		return SHOAL_EINVAL;
	if (fd < 0 || fd == s->epfd || fd == s->evfd)
		return SHOAL_EBADF;
	int dir = (events & SHOAL_FD_IN ? 1 : 0) | (events & SHOAL_FD_OUT ? 2 : 0);
	if (!dir || (events & ~(unsigned)(SHOAL_FD_IN | SHOAL_FD_OUT)))
		return SHOAL_EINVAL;
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	if ((size_t)fd >= s->nfds_cap) {
		size_t nc = s->nfds_cap ? s->nfds_cap : 64;
		while (nc <= (size_t)fd)
			nc *= 2;
		sh_fdslot *nf = shoal_realloc(s->fds, s->nfds_cap * sizeof(*nf), nc * sizeof(*nf));
		if (!nf)
			return SHOAL_ENOMEM;
		memset(nf + s->nfds_cap, 0, (nc - s->nfds_cap) * sizeof(*nf));
		s->fds = nf;
		s->nfds_cap = nc;
	}
	sh_fdslot *sl = &s->fds[fd];
	if (!sl->registered) {
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					 .data.fd = fd};
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
			return shoal_errno();
		sl->registered = true;
		sl->ready = 0;
		s->nfds_registered++;
	}
	unsigned want = events & (SHOAL_FD_IN | SHOAL_FD_OUT);
	const unsigned sticky = SHOAL_FD_ERR | SHOAL_FD_HUP;
	unsigned got = sl->ready & (want | sticky);
	if (got) {
		sl->ready &= ~(got & ~sticky);
		if (revents)
			*revents = got;
		return 0;
	}
	if (deadline == SHOAL_NOWAIT)
		return SHOAL_ETIMEDOUT;
	if (((dir & 1) && sl->waiter[0]) || ((dir & 2) && sl->waiter[1]))
		return SHOAL_EBUSY;
	shoal_fiber *cur = s->cur;
	if (dir & 1)
		sl->waiter[0] = cur;
	if (dir & 2)
		sl->waiter[1] = cur;
	cur->wait_kind = SH_WAIT_FD;
	cur->wait_fd = fd;
	cur->wait_dir = dir;
	rc = sh_block(s, deadline);
	if (rc == 0 && revents)
		*revents = cur->wake_index;
	return rc;
}

int shoal_fd_forget(int fd)
{
	shoal_sched *s = sh_tls_sched;
	if (!s)
		return SHOAL_EINVAL;
	if (fd < 0 || (size_t)fd >= s->nfds_cap || !s->fds[fd].registered)
		return SHOAL_ENOENT;
	sh_fdslot *sl = &s->fds[fd];
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
	sl->registered = false;
	sl->ready = 0;
	s->nfds_registered--;
	for (int d = 0; d < 2; d++) {
		shoal_fiber *f = sl->waiter[d];
		if (!f)
			continue;
		sl->waiter[0] = sl->waiter[0] == f ? NULL : sl->waiter[0];
		sl->waiter[1] = sl->waiter[1] == f ? NULL : sl->waiter[1];
		sh_wake(f, SHOAL_ECLOSED);
	}
	return 0;
}

/* ---- cross-thread inbox ---------------------------------------------------- */

void sh_inbox_post(shoal_sched *s, sh_xop *op)
{
	op->next = NULL;
	pthread_mutex_lock(&s->inbox_lock);
	bool was_empty = s->inbox_head == NULL;
	if (s->inbox_tail)
		s->inbox_tail->next = op;
	else
		s->inbox_head = op;
	s->inbox_tail = op;
	atomic_store_explicit(&s->inbox_pending, 1, memory_order_release);
	/* Ring while still holding the lock: once we unlock, the owner may
	 * drain, and the issuer's wake could free the scheduler. */
	if (was_empty)
		sh_eventfd_signal(s->evfd);
	pthread_mutex_unlock(&s->inbox_lock);
}

void sh_inbox_drain(shoal_sched *s)
{
	atomic_store_explicit(&s->inbox_pending, 0, memory_order_relaxed);
	pthread_mutex_lock(&s->inbox_lock);
	sh_xop *op = s->inbox_head;
	s->inbox_head = s->inbox_tail = NULL;
	pthread_mutex_unlock(&s->inbox_lock);
	while (op) {
		sh_xop *next = op->next;
		if (op->kind == SH_XOP_WAKE) {
			op->woken = true;
			shoal_fiber *f = op->fiber;
			if (f->state == SH_BLOCKED &&
			    (f->wait_kind == SH_WAIT_XOP || f->wait_kind == SH_WAIT_HARD))
				sh_wake(f, op->rc);
		} else if (s->destroying) {
			if (op->kind == SH_XOP_SEND && sh_xop_claim(op))
				sh_xop_complete(op, SHOAL_ECLOSED);
			else
				sh_xop_unref(op);
		} else {
			sh_chan_xop(s, op);
		}
		op = next;
	}
}

/* ---- scheduler lifetime ------------------------------------------------------- */

shoal_sched *shoal_sched_current(void)
{
	return sh_tls_sched;
}

int shoal_sched_create(shoal_sched **out, const shoal_sched_opts *opts)
{
	if (!out)
		return SHOAL_EINVAL;
	if (sh_tls_sched)
		return SHOAL_EBUSY;
	shoal_sched_opts o = {0};
	if (opts)
		o = *opts;
	if ((unsigned)o.guard > SHOAL_GUARD_NONE)
		return SHOAL_EINVAL;
	size_t stack = o.stack_size ? o.stack_size : DEFAULT_STACK;
	if (stack < MIN_STACK)
		stack = MIN_STACK;
	if (shoal_align_size(stack, (size_t)sysconf(_SC_PAGESIZE), &stack) != 0 ||
	    stack > SH_STACK_MAX)
		return SHOAL_EINVAL;
	/* The root fiber inside is cache-line aligned; the allocator only
	 * promises malloc's alignment. */
	void *raw = shoal_alloc(sizeof(shoal_sched) + 64);
	if (!raw)
		return SHOAL_ENOMEM;
	shoal_sched *s = (shoal_sched *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
	memset(s, 0, sizeof(*s));
	s->raw = raw;
	int rc = SHOAL_ENOMEM;
	s->epfd = s->evfd = -1;
	s->stack_size = stack;
	s->page_size = (size_t)sysconf(_SC_PAGESIZE);
	s->guard = o.guard;
	s->stack_cache = o.stack_cache ? o.stack_cache : DEFAULT_CACHE;
	s->rng = (uint64_t)shoal_now_ns() ^ (uint64_t)(uintptr_t)s ^ 0x9E3779B97F4A7C15ULL;
	if (!s->rng)
		s->rng = 1;
	if (pthread_mutex_init(&s->inbox_lock, NULL) != 0)
		goto fail_free;
	if ((rc = sh_stack_pools_init(&s->pools)) != 0)
		goto fail_mutex;
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epfd < 0) {
		rc = shoal_errno();
		goto fail_pools;
	}
	s->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->evfd < 0) {
		rc = shoal_errno();
		goto fail_ep;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = s->evfd};
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &ev) != 0) {
		rc = shoal_errno();
		goto fail_ev;
	}
	if ((rc = sh_overflow_thread_init(s)) != 0)
		goto fail_ev;
	shoal_fiber *r = &s->root;
	r->sched = s;
	r->is_root = true;
	r->state = SH_RUNNING;
	r->heap_idx = SH_NO_TIMER;
	r->wait_fd = -1;
	r->w1.fiber = r;
	r->id = 0;
	strcpy(r->name, "main");
	r->has_name = true;
#if defined(SH_ASAN)
	{
		pthread_attr_t a;
		if (pthread_getattr_np(pthread_self(), &a) == 0) {
			void *addr;
			size_t sz;
			pthread_attr_getstack(&a, &addr, &sz);
			r->asan_bottom = addr;
			r->asan_size = sz;
			pthread_attr_destroy(&a);
		}
	}
#endif
#if defined(SH_TSAN)
	r->tsan_fiber = __tsan_get_current_fiber();
#endif
	s->cur = r;
	sh_tls_sched = s;
	*out = s;
	return 0;
fail_ev:
	close(s->evfd);
fail_ep:
	close(s->epfd);
fail_pools:
	sh_stack_pools_fini(s->pools);
fail_mutex:
	pthread_mutex_destroy(&s->inbox_lock);
fail_free:
	shoal_free(raw, sizeof(shoal_sched) + 64);
	return rc;
}

int shoal_sched_destroy(shoal_sched *s)
{
	if (!s || s != sh_tls_sched || s->cur != &s->root)
		return SHOAL_EINVAL;
	shoal_fiber *r = &s->root;
	bool was_cancelled = r->cancelled;
	s->destroying = true;
	while (r->child_head) {
		shoal_fiber *c = r->child_head;
		shoal_cancel(c);
		join_impl(s, c, NULL, SHOAL_FOREVER, true);
	}
	if (s->detached_head) {
		for (shoal_fiber *f = s->detached_head; f; f = f->sib_next)
			shoal_cancel(f);
		r->wait_kind = SH_WAIT_HARD;
		sh_block(s, SHOAL_FOREVER);
	}
	/* The last detached fiber died just before we resumed. */
	if (s->dead)
		sh_release_dead(s);
	sh_inbox_drain(s);
	fls_destroy(r);
	r->cancelled = was_cancelled;
	sh_overflow_thread_fini(s);
	close(s->evfd);
	close(s->epfd);
	shoal_free(s->fds, s->nfds_cap * sizeof(sh_fdslot));
	shoal_free(s->heap, s->heap_cap * sizeof(shoal_fiber *));
	sh_stack_pools_fini(s->pools);
	fiber_chunks_free(s);
	sh_ptrstack_fini(&s->fiber_free);
	sh_chan_orphan_all(s);
	sh_chan_cache_fini(s);
	pthread_mutex_destroy(&s->inbox_lock);
	sh_tls_sched = NULL;
	shoal_free(s->raw, sizeof(shoal_sched) + 64);
	return 0;
}

void shoal_sched_trim(shoal_sched *s)
{
	if (s) {
		sh_stack_trim(s->pools, 0);
		sh_chan_cache_fini(s);
	}
}

void shoal_sched_stats_get(const shoal_sched *s, shoal_sched_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!s)
		return;
	st->switches = s->switches;
	st->spawned = s->spawned;
	st->live = s->live;
	sh_stack_stats(s->pools, &st->stacks_mapped, &st->stacks_free, &st->guarded);
}

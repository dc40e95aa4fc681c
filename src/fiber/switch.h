/* The scheduler's hot path, inlined into every blocking call: pick the next
 * runnable fiber and switch straight to it. Keeping it in one frame with
 * the caller matters: each C frame between a fiber's code and the switch
 * saves and restores registers and is one more cold cache line to touch
 * when a fiber resumes after thousands of others ran. Slow paths (timers,
 * the poller, releasing dead fibers) live out of line in sched.c. */
#ifndef SHOAL_FIBER_SWITCH_H
#define SHOAL_FIBER_SWITCH_H

#include "fiber_impl.h"

#if defined(SH_ASAN)
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
				     size_t *size_old);
#endif
#if defined(SH_TSAN)
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif

/* Out of line, in sched.c. */
void sh_fiber_main(void *arg);
void sh_release_dead(shoal_sched *s);
void sh_housekeeping(shoal_sched *s);
void sh_idle_wait(shoal_sched *s);
int sh_timer_arm(shoal_sched *s, shoal_fiber *f, int64_t deadline);
void sh_timer_disarm(shoal_sched *s, shoal_fiber *f);
char *sh_fiber_take_stack(shoal_sched *s, shoal_fiber *f);

static inline shoal_fiber *sh_runq_pop(shoal_sched *s)
{
	shoal_fiber *f = s->runq_head;
	if (f) {
		s->runq_head = f->run_next;
		if (!s->runq_head)
			s->runq_tail = NULL;
	}
	return f;
}

/* Beyond this many fibers their stacks no longer fit in the caches. */
#define SH_COLD_FIBERS 1024

/* A parked fiber's frames: from sp + from up to its stack's top, at most
 * 384 bytes. While sp is in its stack's last page, that page's end gives
 * the top (sh_stack_top). Each line beyond the top would be one more fetch
 * from memory: a hackysack sacker parks 192 bytes deep, 3 lines, where a
 * fixed 384 bytes asked for 7. Deeper, the frames run at least to the end
 * of sp's page, and past it may be another stack's guard page, whose
 * failed walk costs what it was to save. */
static inline __attribute__((always_inline)) void sh_prefetch_frames(const char *sp, int from)
{
	uintptr_t p = (uintptr_t)sp;
	uintptr_t end = (p | 4095) + 1;
	uintptr_t top = end - (uintptr_t)sh_stack_color(end) * 64;
	if (top > p)
		end = top;
	if (end > p + 384)
		end = p + 384;
	for (uintptr_t a = p + (uintptr_t)from; a < end; a += 64)
		sh_prefetch((const void *)a);
}

/* Where a fiber that has not run yet will put its first frames: the 4 lines
 * below its stack's top (3 measured slower: the first run goes deeper
 * than where it parks). */
static inline __attribute__((always_inline)) void sh_prefetch_first_frames(const char *top)
{
	for (int i = 64; i <= 256; i += 64)
		sh_prefetch(top - i);
}

/* Where fiber f will run: its parked frames, or where its first frames go
 * (below its top) if it has not run yet. */
static inline __attribute__((always_inline)) void sh_prefetch_fiber(const shoal_fiber *f)
{
	uintptr_t sp = (uintptr_t)f->sp;
	if (sh_unlikely(sp & SH_SP_FRESH)) {
		if (sp != SH_SP_FRESH) /* else its stack is taken as it starts */
			sh_prefetch_first_frames((const char *)(sp - SH_SP_FRESH));
	} else if (sp) {
		sh_prefetch_frames(f->sp, 0);
	}
}

/* With thousands of fibers, every SH_AHEAD switches: the frames of the
 * SH_AHEAD fibers that run after the next one (nn), and the structures of
 * the SH_AHEAD after those, whose frames the next round asks for. Asked
 * for together, the misses overlap (one ahead at each switch, they came
 * one after another: 141 against 111 ns a fiber's exit, hackysack
 * 10000x1000 3.70 against 3.28 ms). */
#define SH_AHEAD 8

static inline __attribute__((always_inline)) void sh_prefetch_ahead(shoal_sched *s,
								    const shoal_fiber *nn)
{
	if ((s->tick & (SH_AHEAD - 1)) != 0)
		return;
	const shoal_fiber *f = nn->run_next;
	for (int k = 0; k < SH_AHEAD && f; k++, f = f->run_next)
		sh_prefetch_fiber(f);
	for (int k = 0; k < SH_AHEAD && f; k++, f = f->run_next)
		sh_prefetch(f);
}

/* A fiber with a reserve at its stack's top (a tasklet: its Python
 * frames live there) parks 1-2 KiB below it, through the interpreter's C
 * frames, all of which it returns through when it resumes: beyond the
 * first 384 bytes sh_prefetch_frames asks for, the rest up to the
 * reserve's first lines, at most 4 KiB, asked for at once rather than
 * missed one frame after another. */
static inline __attribute__((always_inline)) void sh_prefetch_deep(const shoal_fiber *f)
{
	if (!f->stack.reserve16)
		return;
	const char *sp = f->sp;
	const char *end = sh_fiber_reserved(f) + 256;
	if (end > sp + 4096)
		end = sp + 4096;
	for (const char *a = sp + 384; a < end; a += 64)
		sh_prefetch(a);
}

static inline __attribute__((always_inline)) void sh_switch_to(shoal_sched *s, shoal_fiber *from,
							       shoal_fiber *to)
{
	if (sh_unlikely((uintptr_t)to->sp == SH_SP_FRESH)) /* sh_fiber_spawn_late_stack's */
		to->sp = sh_fiber_take_stack(s, to) + SH_SP_FRESH;
	s->cur = to;
	to->state = SH_RUNNING;
	s->switches++;
#if defined(SH_ASAN)
	__sanitizer_start_switch_fiber(from->state == SH_DEAD ? NULL : &from->asan_fake,
				       to->asan_bottom, to->asan_size);
#endif
#if defined(SH_TSAN)
	__tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
	if (sh_likely(!((uintptr_t)to->sp & SH_SP_FRESH))) {
		if (s->live >= SH_COLD_FIBERS) {
			/* Resuming pops through four or five frames on cold
			 * lines: ask for all of them at once instead of one
			 * after another. */
			sh_prefetch_frames(to->sp, 64);
			if (s->reserves)
				sh_prefetch_deep(to);
		}
		sh_ctx_switch(&from->sp, to->sp);
	} else
		sh_ctx_start(&from->sp, (char *)to->sp - SH_SP_FRESH, to, sh_fiber_main);
#if defined(SH_ASAN)
	__sanitizer_finish_switch_fiber(from->asan_fake, NULL, NULL);
#endif
	/* A fiber's stack can only be released once we are off it. */
	if (sh_unlikely(s->dead != NULL))
		sh_release_dead(s);
}

/* Runs other fibers until the current one is runnable again. The current
 * fiber has already been marked blocked (or queued, if it only yields). */
static inline __attribute__((always_inline)) void sh_schedule(shoal_sched *s)
{
	shoal_fiber *cur = s->cur;
	for (;;) {
		if (sh_unlikely((++s->tick & 63) == 0))
			sh_housekeeping(s);
		shoal_fiber *next = sh_runq_pop(s);
		if (sh_likely(next != NULL)) {
			if (s->live >= SH_COLD_FIBERS && s->runq_head)
				sh_prefetch_ahead(s, s->runq_head);
			if (next != cur)
				sh_switch_to(s, cur, next);
			else
				cur->state = SH_RUNNING;
			return;
		}
		sh_idle_wait(s);
	}
}

/* Blocks the current fiber until woken or the deadline passes (the caller
 * has set wait_kind and linked its waiters). Returns the wake code. */
static inline __attribute__((always_inline)) int sh_block(shoal_sched *s, int64_t deadline)
{
	shoal_fiber *cur = s->cur;
	if (deadline != SHOAL_FOREVER) {
		int rc = sh_timer_arm(s, cur, deadline);
		if (rc)
			return rc;
	}
	cur->state = SH_BLOCKED;
	sh_schedule(s);
	if (sh_unlikely(cur->heap_idx != SH_NO_TIMER))
		sh_timer_disarm(s, cur);
	cur->wait_kind = SH_WAIT_NONE;
	return cur->wake_rc;
}

#endif

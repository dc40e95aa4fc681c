/* Tests for the fiber layer's internal parking API (fiber_impl.h), what the
 * Python tasklets build on: park and unpark with a code, handoff order
 * (the woken fiber first, the caller right behind it, ahead of the run
 * queue), deadlines and cancel on a parked fiber, unpark refusing a fiber
 * that is not parked, the idle hook waking a fiber instead of sleeping,
 * and late stacks (taken as a fiber starts, with a reserve above its
 * first frame) with sh_fiber_exit. */
#include "test.h"

#include "fiber/fiber_impl.h"

static char order[64];
static size_t norder;
static shoal_fiber *parked_f;

static void mark(char c)
{
	order[norder++] = c;
	order[norder] = '\0';
}

static void *parker(void *arg)
{
	(void)arg;
	mark('p');
	int rc = sh_fiber_park(SHOAL_FOREVER);
	mark('P');
	return (void *)(intptr_t)rc;
}

static void *runner(void *arg)
{
	mark(*(const char *)arg);
	return NULL;
}

SH_TEST(unpark_delivers_its_code_at_the_tail)
{
	shoal_sched *s = sh_test_sched_new();
	norder = 0;
	shoal_fiber *p, *r;
	CHECK_OK(shoal_spawn(&p, parker, NULL, NULL));
	CHECK_OK(shoal_yield()); /* p parks */
	CHECK_EQ(shoal_spawn(&r, runner, "r", NULL), 0);
	CHECK_OK(sh_fiber_unpark(p, 42));
	CHECK_EQ(sh_fiber_unpark(p, 1), SHOAL_EINVAL); /* runnable, not parked */
	void *res;
	CHECK_OK(shoal_join(p, &res));
	CHECK_EQ((intptr_t)res, 42);
	CHECK_OK(shoal_join(r, NULL));
	CHECK(strcmp(order, "prP") == 0); /* r was queued before p woke */
	CHECK_EQ(sh_fiber_unpark(r, 0), SHOAL_EINVAL);
	CHECK_OK(shoal_sched_destroy(s));
}

static void *hander(void *arg)
{
	(void)arg;
	mark('h');
	CHECK_OK(sh_fiber_handoff(parked_f, 7));
	mark('H');
	return NULL;
}

SH_TEST(handoff_runs_the_parked_fiber_then_the_caller_first)
{
	shoal_sched *s = sh_test_sched_new();
	norder = 0;
	shoal_fiber *p, *h, *r;
	CHECK_OK(shoal_spawn(&p, parker, NULL, NULL));
	CHECK_OK(shoal_yield());
	parked_f = p;
	CHECK_OK(shoal_spawn(&h, hander, NULL, NULL));
	CHECK_OK(shoal_spawn(&r, runner, "r", NULL));
	void *res;
	CHECK_OK(shoal_join(p, &res));
	CHECK_OK(shoal_join(h, NULL));
	CHECK_OK(shoal_join(r, NULL));
	/* h hands to p at once, then h goes on before r, queued earlier */
	CHECK(strcmp(order, "phPHr") == 0);
	CHECK_EQ((intptr_t)res, 7);
	CHECK_OK(shoal_sched_destroy(s));
}

static void *park_until(void *arg)
{
	return (void *)(intptr_t)sh_fiber_park(shoal_deadline_in(*(int64_t *)arg));
}

SH_TEST(park_deadline_and_cancel)
{
	shoal_sched *s = sh_test_sched_new();
	int64_t ms20 = 20 * 1000000, long_ = (int64_t)60 * 1000000000;
	shoal_fiber *a, *b;
	CHECK_OK(shoal_spawn(&a, park_until, &ms20, NULL));
	CHECK_OK(shoal_spawn(&b, park_until, &long_, NULL));
	CHECK_OK(shoal_yield());
	CHECK_OK(shoal_cancel(b));
	void *ra, *rb;
	CHECK_OK(shoal_join(a, &ra));
	CHECK_OK(shoal_join(b, &rb));
	CHECK_EQ((intptr_t)ra, SHOAL_ETIMEDOUT);
	CHECK_EQ((intptr_t)rb, SHOAL_ECANCELED);
	CHECK_OK(shoal_sched_destroy(s));
}

static int checks, sleeps;

static bool hook(void *arg, int phase, int64_t timeout)
{
	(void)timeout;
	shoal_fiber *root = arg;
	if (phase == SH_IDLE_CHECK) {
		checks++;
		return sh_fiber_unpark(root, 99) == 0;
	}
	if (phase == SH_IDLE_SLEEP)
		sleeps++;
	return false;
}

SH_TEST(idle_hook_wakes_instead_of_sleeping)
{
	shoal_sched *s = sh_test_sched_new();
	sh_sched_set_idle_hook(s, hook, shoal_self());
	/* nothing else runs and no timer is set: without the hook this
	 * would sleep for ever */
	CHECK_EQ(sh_fiber_park(SHOAL_FOREVER), 99);
	CHECK_EQ(checks, 1);
	CHECK_EQ(sleeps, 0);
	sh_sched_set_idle_hook(s, NULL, NULL);
	CHECK_OK(shoal_sched_destroy(s));
}

/* A late-stack fiber: its reserve lies inside its stack, above its first
 * frame, 16-aligned, and is its own to write; it ends by sh_fiber_exit. */
static char *late_base[8];

static void *late(void *arg)
{
	intptr_t i = (intptr_t)arg;
	shoal_fiber *f = shoal_self();
	char *r = sh_fiber_reserved(f), *end = f->stack.base + f->stack.size;
	char here;
	if (r < f->stack.base || r + 4096 > end || ((uintptr_t)r & 15) || &here >= r)
		return (void *)-1;
	memset(r, (int)i, 4096);
	late_base[i] = f->stack.base;
	sh_fiber_exit((void *)(i + 100));
}

SH_TEST(late_stacks_are_taken_warmest_first_with_their_reserve)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f[8];
	shoal_fiber_opts o = {.stack_size = 64 * 1024};
	/* reserves above 16 KiB, or above a quarter of the stack, are refused */
	CHECK_EQ(sh_fiber_spawn_late_stack(&f[0], late, NULL, &o, 16 * 1024 + 16), SHOAL_EINVAL);
	o.stack_size = 32 * 1024;
	CHECK_EQ(sh_fiber_spawn_late_stack(&f[0], late, NULL, &o, 16 * 1024), SHOAL_EINVAL);
	o.stack_size = 64 * 1024;
	for (intptr_t i = 0; i < 8; i++)
		CHECK_OK(sh_fiber_spawn_late_stack(&f[i], late, (void *)i, &o, 4096));
	/* spawned, not run: no stack taken yet */
	for (int i = 0; i < 8; i++)
		CHECK(f[i]->stack.base == NULL);
	for (int i = 0; i < 8; i++) {
		void *res;
		CHECK_OK(shoal_join(f[i], &res));
		CHECK_EQ((intptr_t)res, i + 100);
	}
	/* each ran after the one before had ended and its stack was back in
	 * the pool: they took turns on few stacks, not one each */
	int distinct = 0;
	for (int i = 0; i < 8; i++) {
		bool seen = false;
		for (int k = 0; k < i; k++)
			seen |= late_base[k] == late_base[i];
		distinct += !seen;
	}
	CHECK(distinct <= 2);
	CHECK_OK(shoal_sched_destroy(s));
}

/* Tests for fibers on one scheduler: spawn/join, run order, names and ids,
 * fiber-local data, structured ownership (children die with their parent,
 * detached fibers with the scheduler), 100 000 live fibers with guard
 * pages, stack sizes, cancellation in every kind of blocking call, and the
 * error paths of join, spawn and scheduler creation. */
#include "test.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static shoal_sched_stats stats(shoal_sched *s)
{
	shoal_sched_stats st;
	memset(&st, 0xff, sizeof st);
	shoal_sched_stats_get(s, &st);
	return st;
}

static void *ret_arg(void *arg)
{
	return arg;
}

/* Blocks in a receive on the channel passed as arg; returns the value + 1,
 * or the error code (negative) if the receive failed. */
static void *recv_plus_one(void *arg)
{
	int v = 0;
	int rc = shoal_chan_recv(arg, &v, SHOAL_FOREVER);
	return (void *)(intptr_t)(rc ? rc : v + 1);
}

/* ---- spawn, join, order ------------------------------------------------ */

SH_TEST(spawn_join_results)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_sched_stats st0 = stats(s);
	CHECK_EQ(st0.live, 0);
	shoal_fiber *f[10];
	for (int i = 0; i < 10; i++)
		CHECK_OK(shoal_spawn(&f[i], ret_arg, (void *)(intptr_t)(i * 7 + 1), NULL));
	shoal_sched_stats st = stats(s);
	CHECK_EQ(st.live, 10);
	CHECK_EQ(st.spawned, st0.spawned + 10);
	/* join in reverse order: results belong to their fiber, not the order */
	for (int i = 9; i >= 1; i--) {
		void *r = NULL;
		CHECK_OK(shoal_join(f[i], &r));
		CHECK_EQ((intptr_t)r, i * 7 + 1);
	}
	CHECK_OK(shoal_join(f[0], NULL));
	st = stats(s);
	CHECK_EQ(st.live, 0);
	CHECK(st.switches > st0.switches);
	CHECK(st.stacks_free <= st.stacks_mapped);
	CHECK(st.guarded <= st.stacks_mapped);
	CHECK_OK(shoal_sched_destroy(s));
	CHECK(shoal_sched_current() == NULL);
	CHECK(shoal_self() == NULL);
}

static int order_log[256];
static int order_n;

static void *log_once(void *arg)
{
	order_log[order_n++] = (int)(intptr_t)arg;
	return NULL;
}

static void *spawner_checks_lazy_start(void *arg)
{
	shoal_fiber *child;
	CHECK_OK(shoal_spawn(&child, log_once, (void *)(intptr_t)100, NULL));
	/* the child starts at this fiber's next blocking point, not before */
	for (volatile int i = 0; i < 1000; i++)
		;
	CHECK_EQ(order_n, 0);
	CHECK_OK(shoal_yield());
	CHECK_EQ(order_n, 1);
	CHECK_EQ(order_log[0], 100);
	CHECK_OK(shoal_join(child, NULL));
	return NULL;
}

SH_TEST(spawn_starts_at_next_blocking_point)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f[3];
	for (int i = 0; i < 3; i++) {
		CHECK_OK(shoal_spawn(&f[i], log_once, (void *)(intptr_t)(i + 1), NULL));
		CHECK_EQ(order_n, 0); /* the caller keeps running */
	}
	CHECK_OK(shoal_yield());
	/* one yield let every runnable fiber run once, in spawn order */
	CHECK_EQ(order_n, 3);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(order_log[i], i + 1);
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_join(f[i], NULL));

	order_n = 0;
	shoal_fiber *p;
	CHECK_OK(shoal_spawn(&p, spawner_checks_lazy_start, NULL, NULL));
	CHECK_OK(shoal_join(p, NULL));
	CHECK_OK(shoal_sched_destroy(s));
}

#define RR_FIBERS 4
#define RR_ROUNDS 6

static void *rr_fn(void *arg)
{
	for (int r = 0; r < RR_ROUNDS; r++) {
		order_log[order_n++] = (int)(intptr_t)arg;
		CHECK_OK(shoal_yield());
	}
	return NULL;
}

SH_TEST(yield_round_robin)
{
	shoal_sched *s = sh_test_sched_new();
	CHECK_OK(shoal_yield()); /* alone: returns at once */
	shoal_fiber *f[RR_FIBERS];
	for (int i = 0; i < RR_FIBERS; i++)
		CHECK_OK(shoal_spawn(&f[i], rr_fn, (void *)(intptr_t)i, NULL));
	for (int i = 0; i < RR_FIBERS; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	CHECK_EQ(order_n, RR_FIBERS * RR_ROUNDS);
	for (int k = 0; k < order_n; k++)
		if (order_log[k] != k % RR_FIBERS)
			sh_test_fail(__FILE__, __LINE__,
				     "run %d was fiber %d, want %d (round robin)", k, order_log[k],
				     k % RR_FIBERS);
	CHECK_OK(shoal_sched_destroy(s));
}

/* The root also takes its turn: yields from root and fibers interleave. */
SH_TEST(yield_root_interleaves)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f[2];
	for (int i = 0; i < 2; i++)
		CHECK_OK(shoal_spawn(&f[i], rr_fn, (void *)(intptr_t)i, NULL));
	for (int r = 0; r < RR_ROUNDS; r++) {
		int before = order_n;
		CHECK_OK(shoal_yield());
		CHECK_EQ(order_n, before + 2);
	}
	for (int i = 0; i < 2; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(stack_reuse_and_trim)
{
	shoal_sched *s = sh_test_sched_new();
	size_t mapped_early = 0;
	for (int i = 0; i < 2000; i++) {
		shoal_fiber *f;
		CHECK_OK(shoal_spawn(&f, ret_arg, NULL, NULL));
		CHECK_OK(shoal_join(f, NULL));
		if (i == 10)
			mapped_early = stats(s).stacks_mapped;
	}
	/* sequential fibers reuse stacks instead of mapping new ones */
	shoal_sched_stats st = stats(s);
	CHECK(mapped_early >= 1);
	CHECK_EQ(st.stacks_mapped, mapped_early);
	CHECK_EQ(st.live, 0);
	/* 64 fibers alive at once need 64 stacks */
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *f[64];
	for (int i = 0; i < 64; i++)
		CHECK_OK(shoal_spawn(&f[i], recv_plus_one, c, NULL));
	CHECK_OK(shoal_yield());
	st = stats(s);
	CHECK(st.stacks_mapped >= 64);
	CHECK_EQ(st.live, 64);
	for (int i = 0; i < 64; i++) {
		int v = i;
		CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
	}
	long sum = 0;
	for (int i = 0; i < 64; i++) {
		void *r;
		CHECK_OK(shoal_join(f[i], &r));
		sum += (intptr_t)r;
	}
	CHECK_EQ(sum, 64 * 65 / 2);
	st = stats(s);
	CHECK(st.stacks_free <= st.stacks_mapped);
	CHECK_EQ(st.live, 0);
	shoal_sched_trim(s);
	st = stats(s);
	CHECK(st.stacks_free <= st.stacks_mapped);
	/* still works after trimming */
	for (int i = 0; i < 64; i++)
		CHECK_OK(shoal_spawn(&f[i], recv_plus_one, c, NULL));
	CHECK_OK(shoal_chan_close(c));
	for (int i = 0; i < 64; i++) {
		void *r;
		CHECK_OK(shoal_join(f[i], &r));
		CHECK_RC((int)(intptr_t)r, SHOAL_ECLOSED);
	}
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- names and ids ------------------------------------------------------ */

static void *name_self(void *arg)
{
	char *out = arg;
	snprintf(out, 64, "%s", shoal_fiber_name(shoal_self()));
	return NULL;
}

SH_TEST(names_and_ids)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *root = shoal_self();
	CHECK(root != NULL);
	CHECK_EQ(shoal_fiber_id(root), 0);
	CHECK_STR(shoal_fiber_name(root), "main");

	/* default name, before and after it runs */
	char seen[64] = "";
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, name_self, seen, NULL));
	char want[64];
	snprintf(want, sizeof want, "fiber-%" PRIu64, shoal_fiber_id(f));
	CHECK(shoal_fiber_id(f) != 0);
	CHECK_STR(shoal_fiber_name(f), want);
	CHECK_OK(shoal_yield());
	CHECK_STR(seen, want);
	CHECK_OK(shoal_join(f, NULL));

	/* the name is copied at spawn */
	char buf[32] = "worker-a";
	shoal_fiber_opts o = {.name = buf};
	CHECK_OK(shoal_spawn(&f, name_self, seen, &o));
	strcpy(buf, "clobbered");
	CHECK_STR(shoal_fiber_name(f), "worker-a");
	CHECK_OK(shoal_fiber_set_name(f, "renamed"));
	CHECK_STR(shoal_fiber_name(f), "renamed");
	CHECK_OK(shoal_join(f, NULL));
	CHECK_STR(seen, "renamed");

	/* truncation to 31 bytes, at spawn and on rename */
	const char *longname = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"; /* 43 */
	o.name = longname;
	CHECK_OK(shoal_spawn(&f, name_self, seen, &o));
	CHECK_EQ(strlen(shoal_fiber_name(f)), 31);
	CHECK(strncmp(shoal_fiber_name(f), longname, 31) == 0);
	CHECK_OK(shoal_fiber_set_name(f, "short"));
	CHECK_STR(shoal_fiber_name(f), "short");
	CHECK_OK(shoal_fiber_set_name(f, longname + 1));
	CHECK_EQ(strlen(shoal_fiber_name(f)), 31);
	CHECK(strncmp(shoal_fiber_name(f), longname + 1, 31) == 0);
	CHECK_OK(shoal_join(f, NULL));
	CHECK(strncmp(seen, longname + 1, 31) == 0 && strlen(seen) == 31);

	/* exactly 31 bytes fits */
	o.name = "abcdefghijklmnopqrstuvwxyz01234";
	CHECK_OK(shoal_spawn(&f, ret_arg, NULL, &o));
	CHECK_STR(shoal_fiber_name(f), "abcdefghijklmnopqrstuvwxyz01234");
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(ids_unique_never_reused)
{
	enum { N = 300 };
	static uint64_t ids[2 * N];
	int n = 0;
	for (int round = 0; round < 2; round++) {
		shoal_sched *s = sh_test_sched_new();
		CHECK_EQ(shoal_fiber_id(shoal_self()), 0);
		shoal_fiber *f[N];
		for (int i = 0; i < N; i++) {
			CHECK_OK(shoal_spawn(&f[i], ret_arg, NULL, NULL));
			ids[n++] = shoal_fiber_id(f[i]);
		}
		/* joined ones free their ids, which must still never come back */
		for (int i = 0; i < N; i++)
			CHECK_OK(shoal_join(f[i], NULL));
		CHECK_OK(shoal_sched_destroy(s));
	}
	for (int i = 0; i < n; i++) {
		CHECK(ids[i] != 0);
		for (int j = i + 1; j < n; j++)
			if (ids[i] == ids[j])
				sh_test_fail(__FILE__, __LINE__,
					     "fibers %d and %d share id %" PRIu64, i, j, ids[i]);
	}
}

/* ---- fiber-local data ---------------------------------------------------- */

static shoal_fls_key key_a, key_b;
static int dtor_n;
static uintptr_t dtor_val[16];
static uint64_t dtor_on[16];

static void dtor_a(void *v)
{
	dtor_val[dtor_n] = (uintptr_t)v;
	/* runs on the exiting fiber, so it still is shoal_self() */
	dtor_on[dtor_n] = shoal_self() ? shoal_fiber_id(shoal_self()) : UINT64_MAX;
	dtor_n++;
}

static void *fls_user(void *arg)
{
	uintptr_t v = (uintptr_t)arg;
	CHECK(shoal_fls_get(key_a) == NULL);
	CHECK(shoal_fls_get(key_b) == NULL);
	if (v == 0)
		return NULL; /* never set: no destructor */
	CHECK_OK(shoal_fls_set(key_a, (void *)v));
	CHECK_OK(shoal_fls_set(key_b, (void *)(v * 3)));
	CHECK_OK(shoal_yield()); /* others set their own values meanwhile */
	CHECK(shoal_fls_get(key_a) == (void *)v);
	CHECK(shoal_fls_get(key_b) == (void *)(v * 3));
	if (v == 99) /* set back to NULL: no destructor */
		CHECK_OK(shoal_fls_set(key_a, NULL));
	return NULL;
}

SH_TEST(fls_values_and_destructors)
{
	shoal_sched *s = sh_test_sched_new();
	CHECK_OK(shoal_fls_key_create(&key_a, dtor_a));
	CHECK_OK(shoal_fls_key_create(&key_b, NULL));
	CHECK(key_a != key_b);
	CHECK_OK(shoal_fls_set(key_a, (void *)(uintptr_t)7777)); /* the root's own */

	/* alone first: the destructor has run by the time join returns */
	shoal_fiber *f[5];
	CHECK_OK(shoal_spawn(&f[0], fls_user, (void *)(uintptr_t)5, NULL));
	uint64_t id0 = shoal_fiber_id(f[0]);
	CHECK_OK(shoal_join(f[0], NULL));
	CHECK_EQ(dtor_n, 1);
	CHECK_EQ(dtor_val[0], 5);
	CHECK_EQ(dtor_on[0], id0);

	/* several at once: each sees only its own values */
	static const uintptr_t vals[] = {11, 22, 0, 99, 33};
	uint64_t id[5];
	for (int i = 0; i < 5; i++) {
		CHECK_OK(shoal_spawn(&f[i], fls_user, (void *)vals[i], NULL));
		id[i] = shoal_fiber_id(f[i]);
	}
	for (int i = 0; i < 5; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	/* 0 was never set and 99 was reset to NULL: three destructor calls */
	CHECK_EQ(dtor_n, 4);
	int seen = 0;
	for (int k = 1; k < 4; k++) {
		int i = dtor_val[k] == 11 ? 0 : dtor_val[k] == 22 ? 1 : dtor_val[k] == 33 ? 4 : -1;
		if (i < 0)
			sh_test_fail(__FILE__, __LINE__, "destructor got %#lx",
				     (unsigned long)dtor_val[k]);
		CHECK_EQ(dtor_on[k], id[i]);
		seen |= 1 << i;
	}
	CHECK_EQ(seen, 1 | 2 | 16);
	CHECK(shoal_fls_get(key_a) == (void *)(uintptr_t)7777);
	CHECK(shoal_fls_get(key_b) == NULL);
	CHECK_OK(shoal_sched_destroy(s));
	/* the root's value is destroyed with the scheduler */
	CHECK_EQ(dtor_n, 5);
	CHECK_EQ(dtor_val[4], 7777);
	sh_test_leak_check();
}

SH_TEST(fls_key_limit)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fls_key keys[SHOAL_FLS_MAX + 1];
	int n = 0, rc = 0;
	while (n <= SHOAL_FLS_MAX && (rc = shoal_fls_key_create(&keys[n], NULL)) == 0)
		n++;
	CHECK_EQ(n, SHOAL_FLS_MAX);
	CHECK(rc < 0);
	CHECK(rc != SHOAL_EINVAL); /* the request was valid, the table is full */
	for (int i = 0; i < n; i++) {
		CHECK_OK(shoal_fls_set(keys[i], (void *)(intptr_t)(i + 1)));
		for (int j = i + 1; j < n; j++)
			CHECK(keys[i] != keys[j]);
	}
	for (int i = 0; i < n; i++)
		CHECK(shoal_fls_get(keys[i]) == (void *)(intptr_t)(i + 1));
	/* still full */
	shoal_fls_key k;
	CHECK(shoal_fls_key_create(&k, NULL) < 0);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- structured concurrency -------------------------------------------- */

static shoal_chan *never; /* nobody ever sends on it */
static int child_rc[16];
static int children_done;

static void *blocked_child(void *arg)
{
	int v;
	int i = (int)(intptr_t)arg;
	child_rc[i] = shoal_chan_recv(never, &v, SHOAL_FOREVER);
	children_done++;
	return NULL;
}

static void *blocked_child_with_grandchild(void *arg)
{
	int i = (int)(intptr_t)arg;
	shoal_fiber *g;
	CHECK_OK(shoal_spawn(&g, blocked_child, (void *)(intptr_t)(i + 8), NULL));
	return blocked_child(arg);
}

static void *structured_parent(void *arg)
{
	shoal_fiber *c[4];
	CHECK_OK(shoal_spawn(&c[0], blocked_child, (void *)(intptr_t)0, NULL));
	CHECK_OK(shoal_spawn(&c[1], blocked_child, (void *)(intptr_t)1, NULL));
	CHECK_OK(shoal_spawn(&c[2], blocked_child_with_grandchild, (void *)(intptr_t)2, NULL));
	CHECK_OK(shoal_spawn(&c[3], ret_arg, NULL, NULL)); /* finishes, never joined */
	CHECK_OK(shoal_yield());
	CHECK_OK(shoal_yield());
	CHECK_EQ(children_done, 0);
	/* an explicitly joined child must not be joined again at exit */
	CHECK_OK(shoal_cancel(c[0]));
	CHECK_OK(shoal_join(c[0], NULL));
	CHECK_EQ(children_done, 1);
	CHECK_RC(child_rc[0], SHOAL_ECANCELED);
	return (void *)(intptr_t)0x77;
}

SH_TEST(structured_children_cancelled_with_parent)
{
	shoal_sched *s = sh_test_sched_new();
	never = sh_test_chan_new(sizeof(int), 0);
	for (int i = 0; i < 16; i++)
		child_rc[i] = 1;
	shoal_fiber *p;
	CHECK_OK(shoal_spawn(&p, structured_parent, NULL, NULL));
	void *r = NULL;
	CHECK_OK(shoal_join(p, &r));
	CHECK_EQ((intptr_t)r, 0x77);
	/* children and the grandchild finished before join(parent) returned */
	CHECK_EQ(children_done, 4);
	CHECK_RC(child_rc[1], SHOAL_ECANCELED);
	CHECK_RC(child_rc[2], SHOAL_ECANCELED);
	CHECK_RC(child_rc[10], SHOAL_ECANCELED);
	CHECK_EQ(stats(s).live, 0);
	CHECK_OK(shoal_chan_destroy(never));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

static int detached_rc = 1, detached_val;
static shoal_chan *det_chan;

static void *detached_fn(void *arg)
{
	int v = 0;
	detached_rc = shoal_chan_recv(det_chan, &v, SHOAL_FOREVER);
	detached_val = v;
	return NULL;
}

static void *detaching_parent(void *arg)
{
	shoal_fiber_opts o = {.name = "detached-kid", .detached = 1};
	CHECK_OK(shoal_spawn(NULL, detached_fn, NULL, &o));
	CHECK_OK(shoal_yield());
	return NULL;
}

SH_TEST(detached_outlives_parent)
{
	shoal_sched *s = sh_test_sched_new();
	det_chan = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *p;
	CHECK_OK(shoal_spawn(&p, detaching_parent, NULL, NULL));
	CHECK_OK(shoal_join(p, NULL));
	/* the parent is gone; its detached child is still blocked */
	CHECK_EQ(detached_rc, 1);
	CHECK_EQ(stats(s).live, 1);
	int v = 4242;
	CHECK_OK(shoal_chan_send(det_chan, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_yield());
	CHECK_OK(detached_rc);
	CHECK_EQ(detached_val, 4242);
	/* a detached fiber is freed when it returns */
	CHECK_EQ(stats(s).live, 0);

	/* shoal_detach on a running fiber hands it over the same way */
	shoal_fiber *f;
	detached_rc = 1;
	CHECK_OK(shoal_spawn(&f, detached_fn, NULL, NULL));
	CHECK_OK(shoal_detach(f));
	v = 5;
	CHECK_OK(shoal_chan_send(det_chan, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_yield());
	CHECK_EQ(detached_val, 5);
	CHECK_EQ(stats(s).live, 0);
	CHECK_OK(shoal_chan_destroy(det_chan));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

static int owned_rc = 1;
static void *owned_fn(void *arg)
{
	int v;
	owned_rc = shoal_chan_recv(det_chan, &v, SHOAL_FOREVER);
	return NULL;
}

SH_TEST(sched_destroy_cancels_leftovers)
{
	shoal_sched *s = sh_test_sched_new();
	det_chan = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber_opts o = {.detached = 1};
	CHECK_OK(shoal_spawn(NULL, detached_fn, NULL, &o));
	shoal_fiber *f; /* owned by root, never joined */
	CHECK_OK(shoal_spawn(&f, owned_fn, NULL, NULL));
	shoal_fiber *g; /* never even started */
	CHECK_OK(shoal_spawn(&g, ret_arg, NULL, NULL));
	(void)g;
	CHECK_OK(shoal_yield());
	CHECK_EQ(detached_rc, 1);
	CHECK_EQ(owned_rc, 1);
	CHECK_OK(shoal_sched_destroy(s));
	CHECK_RC(detached_rc, SHOAL_ECANCELED);
	CHECK_RC(owned_rc, SHOAL_ECANCELED);
	CHECK(shoal_sched_current() == NULL);
	/* and the thread can become a scheduler again */
	s = sh_test_sched_new();
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* sched_destroy does not free channels, so the caller must be able to free
 * them afterwards: before it, cancelled waiters may still hold them
 * (SHOAL_EBUSY), and no other moment exists. */
SH_TEST(chan_destroy_after_sched_destroy)
{
	shoal_sched *s = sh_test_sched_new();
	det_chan = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, owned_fn, NULL, NULL));
	CHECK_OK(shoal_yield());
	CHECK_RC(shoal_chan_destroy(det_chan), SHOAL_EBUSY);
	CHECK_OK(shoal_sched_destroy(s));
	CHECK_RC(owned_rc, SHOAL_ECANCELED);
	/* the scheduler closed it on the way out */
	int v = 1;
	CHECK_RC(shoal_chan_send(det_chan, &v, SHOAL_NOWAIT), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_send(det_chan, &v, SHOAL_FOREVER), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_close(det_chan), SHOAL_ECLOSED);
	CHECK_OK(shoal_chan_destroy(det_chan));
	sh_test_leak_check();
}

static void *destroy_from_fiber(void *arg)
{
	return (void *)(intptr_t)shoal_sched_destroy(shoal_sched_current());
}

SH_TEST(sched_destroy_only_from_root)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, destroy_from_fiber, NULL, NULL));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_RC((int)(intptr_t)r, SHOAL_EINVAL);
	CHECK(shoal_sched_current() == s);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- many fibers ---------------------------------------------------------- */

static int many_closed;
static void *many_wait(void *arg)
{
	int v;
	if (shoal_chan_recv(arg, &v, SHOAL_FOREVER) == SHOAL_ECLOSED)
		many_closed++;
	return NULL;
}

SH_TEST_T(hundred_thousand_fibers, 120)
{
	const int n = 100000;
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber **f = malloc(sizeof *f * (size_t)n);
	CHECK(f != NULL);
	for (int i = 0; i < n; i++) {
		int rc = shoal_spawn(&f[i], many_wait, c, NULL);
		if (rc != 0)
			sh_test_fail(__FILE__, __LINE__, "spawn %d of %d: %s", i, n,
				     shoal_strerror(rc));
	}
	CHECK_OK(shoal_yield()); /* every fiber runs into its receive */
	shoal_sched_stats st = stats(s);
	CHECK_EQ(st.live, n);
	CHECK(st.stacks_mapped >= (size_t)n);
	/* AUTO on a kernel with MADV_GUARD_INSTALL guards every stack without
	 * spending mappings, so vm.max_map_count is no limit */
	CHECK_EQ(st.guarded, n);
	CHECK_EQ(many_closed, 0);
	CHECK_OK(shoal_chan_close(c));
	for (int i = 0; i < n; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	CHECK_EQ(many_closed, n);
	CHECK_EQ(stats(s).live, 0);
	free(f);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- stacks --------------------------------------------------------------- */

static void *big_frame(void *arg)
{
	volatile unsigned char buf[200 * 1024];
	for (size_t i = 0; i < sizeof buf; i += 64)
		buf[i] = (unsigned char)i;
	unsigned long sum = 0;
	for (size_t i = 0; i < sizeof buf; i += 64)
		sum += buf[i];
	return (void *)(uintptr_t)sum;
}

static uintptr_t big_frame_sum(void)
{
	unsigned long sum = 0;
	for (size_t i = 0; i < 200 * 1024; i += 64)
		sum += (unsigned char)i;
	return sum;
}

SH_TEST(custom_stack_size)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber_opts o = {.name = "big-stack", .stack_size = 512 * 1024};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, big_frame, NULL, &o));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((uintptr_t)r, big_frame_sum());
	/* an odd size is rounded up to pages, not rejected */
	o.stack_size = 300 * 1024 + 123;
	CHECK_OK(shoal_spawn(&f, big_frame, NULL, &o));
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((uintptr_t)r, big_frame_sum());
	CHECK_OK(shoal_sched_destroy(s));

	/* the scheduler-wide default */
	shoal_sched_opts so = {.stack_size = 512 * 1024};
	CHECK_OK(shoal_sched_create(&s, &so));
	CHECK_OK(shoal_spawn(&f, big_frame, NULL, NULL));
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((uintptr_t)r, big_frame_sum());
	CHECK_OK(shoal_sched_destroy(s));
}

/* Stack sizes are a per-fiber option with no documented limit on how many
 * different ones a scheduler sees. */
SH_TEST(many_distinct_stack_sizes)
{
	enum { N = 20 };
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *f[N];
	for (int i = 0; i < N; i++) {
		shoal_fiber_opts o = {.stack_size = (size_t)(64 + 8 * i) * 1024};
		int rc = shoal_spawn(&f[i], recv_plus_one, c, &o);
		if (rc != 0)
			sh_test_fail(__FILE__, __LINE__, "spawn with stack size #%d (%zu KiB): %s",
				     i, o.stack_size / 1024, shoal_strerror(rc));
	}
	CHECK_OK(shoal_chan_close(c));
	for (int i = 0; i < N; i++) {
		void *r;
		CHECK_OK(shoal_join(f[i], &r));
		CHECK_RC((int)(intptr_t)r, SHOAL_ECLOSED);
	}
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(guard_modes_run_fibers)
{
	static const shoal_guard_mode modes[] = {SHOAL_GUARD_AUTO, SHOAL_GUARD_MADVISE,
						 SHOAL_GUARD_MPROTECT, SHOAL_GUARD_NONE};
	for (size_t m = 0; m < 4; m++) {
		shoal_sched_opts so = {.guard = modes[m]};
		shoal_sched *s = NULL;
		CHECK_OK(shoal_sched_create(&s, &so));
		shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
		shoal_fiber *f[20];
		for (int i = 0; i < 20; i++)
			CHECK_OK(shoal_spawn(&f[i], recv_plus_one, c, NULL));
		CHECK_OK(shoal_yield()); /* all 20 alive, each on its own stack */
		shoal_sched_stats st = stats(s);
		CHECK_EQ(st.live, 20);
		if (modes[m] == SHOAL_GUARD_NONE)
			CHECK_EQ(st.guarded, 0);
		else
			CHECK(st.guarded >= 20);
		for (int i = 0; i < 20; i++) {
			int v = i;
			CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
		}
		for (int i = 0; i < 20; i++) {
			void *r;
			CHECK_OK(shoal_join(f[i], &r));
			CHECK_EQ((intptr_t)r, i + 1);
		}
		CHECK_OK(shoal_chan_destroy(c));
		CHECK_OK(shoal_sched_destroy(s));
	}
}

SH_TEST(bad_options)
{
	shoal_sched *s = NULL;
	shoal_sched_opts so = {.guard = (shoal_guard_mode)42};
	CHECK_RC(shoal_sched_create(&s, &so), SHOAL_EINVAL);
	CHECK(shoal_sched_current() == NULL);
	s = sh_test_sched_new();
	shoal_fiber *f = NULL;
	CHECK_RC(shoal_spawn(&f, NULL, NULL, NULL), SHOAL_EINVAL);
	shoal_fiber_opts o = {.stack_size = SIZE_MAX};
	int rc = shoal_spawn(&f, ret_arg, NULL, &o);
	CHECK(rc == SHOAL_EINVAL || rc == SHOAL_ENOMEM);
	/* a joinable fiber needs somewhere to put its handle */
	CHECK_RC(shoal_spawn(NULL, ret_arg, NULL, NULL), SHOAL_EINVAL);
	CHECK_EQ(stats(s).live, 0);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- cancellation --------------------------------------------------------- */

enum { W_RECV, W_SEND, W_SELECT, W_SLEEP, W_JOIN, W_FD, W_YIELD, W_NKINDS };
static const char *const wait_names[] = {"recv", "send", "select", "sleep", "join", "fd", "yield"};

struct wctx {
	int kind;
	shoal_chan *c;
	int fd;
	shoal_fiber *target;
	int reached;
	long spins;
	int rc, rc_yield, rc_sleep, rc_spawn;
};

#define PENDING 12345

static void *waiter(void *arg)
{
	struct wctx *w = arg;
	int v = 7;
	w->reached = 1;
	switch (w->kind) {
	case W_RECV:
		w->rc = shoal_chan_recv(w->c, &v, SHOAL_FOREVER);
		break;
	case W_SEND:
		w->rc = shoal_chan_send(w->c, &v, SHOAL_FOREVER);
		break;
	case W_SELECT: {
		shoal_select_case cs[2] = {{w->c, SHOAL_SELECT_RECV, &v},
					   {NULL, SHOAL_SELECT_SEND, &v}};
		size_t chosen = 99;
		w->rc = shoal_select(cs, 2, SHOAL_FOREVER, &chosen);
		CHECK_EQ(chosen, 99);
		break;
	}
	case W_SLEEP:
		w->rc = shoal_sleep_until(shoal_deadline_in(60 * 1000000000LL));
		break;
	case W_JOIN:
		w->rc = shoal_join(w->target, NULL);
		break;
	case W_FD: {
		unsigned rev;
		do
			w->rc = shoal_fd_wait(w->fd, SHOAL_FD_IN, SHOAL_FOREVER, &rev);
		while (w->rc == 0); /* 0 may be spurious */
		break;
	}
	case W_YIELD: {
		int rc;
		while ((rc = shoal_yield()) == 0)
			w->spins++;
		w->rc = rc;
		break;
	}
	}
	/* every later blocking call fails at once too */
	int64_t t0 = shoal_now_ns();
	w->rc_yield = shoal_yield();
	w->rc_sleep = shoal_sleep_until(shoal_deadline_in(30 * 1000000000LL));
	CHECK(shoal_now_ns() - t0 < 10 * 1000000000LL);
	shoal_fiber *x = NULL;
	w->rc_spawn = shoal_spawn(&x, ret_arg, NULL, NULL);
	return (void *)(intptr_t)0x1234;
}

SH_TEST_T(cancel_each_kind_of_wait, 30)
{
	shoal_sched *s = sh_test_sched_new();
	for (int kind = 0; kind < W_NKINDS; kind++) {
		struct wctx w = {.kind = kind, .rc = PENDING, .fd = -1};
		int p[2] = {-1, -1};
		shoal_fiber *target = NULL;
		shoal_chan *tc = NULL;
		w.c = sh_test_chan_new(sizeof(int), 0);
		if (kind == W_FD) {
			CHECK(pipe2(p, O_NONBLOCK) == 0);
			w.fd = p[0];
		}
		if (kind == W_JOIN) {
			tc = sh_test_chan_new(sizeof(int), 0);
			CHECK_OK(shoal_spawn(&target, recv_plus_one, tc, NULL));
			w.target = target;
		}
		shoal_fiber *f;
		CHECK_OK(shoal_spawn(&f, waiter, &w, NULL));
		for (int i = 0; i < 3; i++)
			CHECK_OK(shoal_yield());
		CHECK(w.reached);
		if (w.rc != PENDING)
			sh_test_fail(__FILE__, __LINE__, "%s: returned %s before cancel",
				     wait_names[kind], shoal_strerror(w.rc));
		CHECK(!shoal_is_cancelled(f));
		CHECK_OK(shoal_cancel(f));
		CHECK(shoal_is_cancelled(f));
		CHECK_OK(shoal_cancel(f)); /* idempotent */
		void *r = NULL;
		CHECK_OK(shoal_join(f, &r));
		CHECK_EQ((intptr_t)r, 0x1234);
		if (w.rc != SHOAL_ECANCELED)
			sh_test_fail(__FILE__, __LINE__, "%s: got %s, want SHOAL_ECANCELED",
				     wait_names[kind], shoal_strerror(w.rc));
		CHECK_RC(w.rc_yield, SHOAL_ECANCELED);
		CHECK_RC(w.rc_sleep, SHOAL_ECANCELED);
		CHECK_RC(w.rc_spawn, SHOAL_ECANCELED);
		if (kind == W_SEND || kind == W_SELECT) {
			/* the cancelled send delivered nothing */
			int v;
			CHECK_RC(shoal_chan_recv(w.c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
		}
		if (kind == W_YIELD)
			CHECK(w.spins >= 1);
		if (kind == W_JOIN) {
			/* the join target was not affected and is still joinable */
			CHECK(!shoal_is_cancelled(target));
			int v = 9;
			CHECK_OK(shoal_chan_send(tc, &v, SHOAL_FOREVER));
			CHECK_OK(shoal_join(target, &r));
			CHECK_EQ((intptr_t)r, 10);
			CHECK_OK(shoal_chan_destroy(tc));
		}
		if (kind == W_FD) {
			CHECK_OK(shoal_fd_forget(p[0]));
			close(p[0]);
			close(p[1]);
		}
		CHECK_OK(shoal_chan_destroy(w.c));
		CHECK_EQ(stats(s).live, 0);
	}
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

SH_TEST(cancel_before_start)
{
	shoal_sched *s = sh_test_sched_new();
	struct wctx w = {.kind = W_RECV, .rc = PENDING};
	w.c = sh_test_chan_new(sizeof(int), 1);
	int v = 1;
	CHECK_OK(shoal_chan_send(w.c, &v, SHOAL_NOWAIT)); /* recv could succeed... */
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, waiter, &w, NULL));
	CHECK_OK(shoal_cancel(f));
	CHECK_OK(shoal_join(f, NULL));
	CHECK(w.reached); /* it still runs, so it can unwind */
	/* whether a receive that need not block sees the cancel is not
	 * specified; the calls after it must */
	CHECK(w.rc == 0 || w.rc == SHOAL_ECANCELED);
	CHECK_RC(w.rc_yield, SHOAL_ECANCELED);
	CHECK_RC(w.rc_sleep, SHOAL_ECANCELED);
	CHECK_RC(w.rc_spawn, SHOAL_ECANCELED);
	CHECK_OK(shoal_chan_destroy(w.c));
	CHECK_OK(shoal_sched_destroy(s));
}

static void *cancel_self(void *arg)
{
	CHECK(!shoal_is_cancelled(shoal_self()));
	CHECK_OK(shoal_cancel(shoal_self()));
	CHECK(shoal_is_cancelled(shoal_self()));
	int64_t t0 = shoal_now_ns();
	int rc = shoal_sleep_until(shoal_deadline_in(20 * 1000000000LL));
	CHECK(shoal_now_ns() - t0 < 10 * 1000000000LL);
	return (void *)(intptr_t)rc;
}

SH_TEST(cancel_self)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, cancel_self, NULL, NULL));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_RC((int)(intptr_t)r, SHOAL_ECANCELED);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(cancel_finished_fiber_is_harmless)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, ret_arg, (void *)(intptr_t)55, NULL));
	CHECK_OK(shoal_yield()); /* it has returned, not yet joined */
	CHECK_OK(shoal_cancel(f));
	CHECK_OK(shoal_cancel(f));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((intptr_t)r, 55);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- join ------------------------------------------------------------------ */

SH_TEST(join_until_timeout_leaves_joinable)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, recv_plus_one, c, NULL));
	void *r = (void *)(intptr_t)-5;
	CHECK_RC(shoal_join_until(f, &r, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	/* each time out never early, the best of three on time */
	int64_t best = INT64_MAX;
	for (int rep = 0; rep < 3; rep++) {
		int64_t d = shoal_deadline_in(30 * MS);
		CHECK_RC(shoal_join_until(f, &r, d), SHOAL_ETIMEDOUT);
		int64_t late = shoal_now_ns() - d;
		CHECK(late >= 0);
		best = late < best ? late : best;
	}
	CHECK_ON_TIME(best, 30 * MS);
	CHECK_EQ((intptr_t)r, -5); /* untouched */
	CHECK(!shoal_is_cancelled(f));
	int v = 1;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_join_until(f, &r, shoal_deadline_in(5000000000LL)));
	CHECK_EQ((intptr_t)r, 2);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

static void *join_self(void *arg)
{
	return (void *)(intptr_t)shoal_join(shoal_self(), NULL);
}

static void *join_target(void *arg)
{
	void *r = NULL;
	int rc = shoal_join(arg, &r);
	return (void *)(intptr_t)(rc ? rc : (intptr_t)r * 100);
}

SH_TEST(join_errors)
{
	shoal_sched *s = sh_test_sched_new();
	/* self */
	CHECK_RC(shoal_join(shoal_self(), NULL), SHOAL_EINVAL);
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, join_self, NULL, NULL));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_RC((int)(intptr_t)r, SHOAL_EINVAL);

	/* two joiners: the second is refused, the first gets the result */
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *t, *j1, *j2;
	CHECK_OK(shoal_spawn(&t, recv_plus_one, c, NULL));
	CHECK_OK(shoal_spawn(&j1, join_target, t, NULL));
	CHECK_OK(shoal_yield());
	CHECK_OK(shoal_spawn(&j2, join_target, t, NULL));
	CHECK_OK(shoal_join(j2, &r));
	CHECK_RC((int)(intptr_t)r, SHOAL_EINVAL);
	CHECK_RC(shoal_join_until(t, NULL, SHOAL_NOWAIT), SHOAL_EINVAL); /* root too */
	int v = 4;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_join(j1, &r));
	CHECK_EQ((intptr_t)r, 500);

	/* a detached fiber cannot be joined */
	shoal_fiber_opts o = {.detached = 1};
	shoal_fiber *d = NULL;
	CHECK_OK(shoal_spawn(&d, recv_plus_one, c, &o));
	CHECK(d != NULL);
	CHECK_OK(shoal_yield());
	CHECK_RC(shoal_join(d, NULL), SHOAL_EINVAL);
	CHECK_RC(shoal_join_until(d, NULL, SHOAL_NOWAIT), SHOAL_EINVAL);
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER)); /* lets d finish */
	CHECK_OK(shoal_yield());
	CHECK_EQ(stats(s).live, 0);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* ---- scheduler lifecycle ---------------------------------------------------- */

SH_TEST(no_scheduler)
{
	CHECK(shoal_sched_current() == NULL);
	CHECK(shoal_self() == NULL);
	shoal_fiber *f = NULL;
	CHECK_RC(shoal_spawn(&f, ret_arg, NULL, NULL), SHOAL_EINVAL);
	shoal_fiber_opts o = {.detached = 1};
	CHECK_RC(shoal_spawn(NULL, ret_arg, NULL, &o), SHOAL_EINVAL);
	shoal_sched *s = sh_test_sched_new();
	CHECK_OK(shoal_sched_destroy(s));
	CHECK_RC(shoal_spawn(&f, ret_arg, NULL, NULL), SHOAL_EINVAL);
}

SH_TEST(sched_create_twice_busy)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_sched *s2 = NULL;
	CHECK_RC(shoal_sched_create(&s2, NULL), SHOAL_EBUSY);
	CHECK(shoal_sched_current() == s);
	/* the first one is unharmed */
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, ret_arg, (void *)(intptr_t)3, NULL));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((intptr_t)r, 3);
	CHECK_OK(shoal_sched_destroy(s));
	s = sh_test_sched_new();
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- more teardown paths ------------------------------------------------------ */

/* A chain of nested fibers, each blocked joining its own child: cancelling
 * the top unwinds the whole chain through structured cleanup. */
static int chain_unwound;
static shoal_chan *chain_chan;

static void *chain_link(void *arg)
{
	int depth = (int)(intptr_t)arg;
	int rc;
	if (depth == 0) {
		int v;
		rc = shoal_chan_recv(chain_chan, &v, SHOAL_FOREVER);
	} else {
		shoal_fiber *child;
		CHECK_OK(shoal_spawn(&child, chain_link, (void *)(intptr_t)(depth - 1), NULL));
		rc = shoal_join(child, NULL);
	}
	/* the top sees the cancel itself; the rest via their parent's exit */
	CHECK_RC(rc, SHOAL_ECANCELED);
	chain_unwound++;
	return NULL;
}

SH_TEST(nested_chain_unwinds)
{
	shoal_sched *s = sh_test_sched_new();
	chain_chan = sh_test_chan_new(sizeof(int), 0);
	const int depth = 200;
	shoal_fiber *top;
	CHECK_OK(shoal_spawn(&top, chain_link, (void *)(intptr_t)depth, NULL));
	/* each link starts at its parent's join: let the chain grow */
	for (int i = 0; i < 10 * depth && stats(s).live < (size_t)depth + 1; i++)
		CHECK_OK(shoal_yield());
	CHECK_EQ(stats(s).live, depth + 1);
	CHECK_EQ(chain_unwound, 0);
	CHECK_OK(shoal_cancel(top));
	CHECK_OK(shoal_join(top, NULL));
	CHECK_EQ(chain_unwound, depth + 1);
	CHECK_EQ(stats(s).live, 0);
	CHECK_OK(shoal_chan_destroy(chain_chan));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* shoal_sched_destroy with fibers parked in every kind of wait. */
SH_TEST(sched_destroy_with_every_wait)
{
	shoal_sched *s = sh_test_sched_new();
	static struct wctx w[W_NKINDS];
	int p[2];
	CHECK(pipe2(p, O_NONBLOCK) == 0);
	shoal_chan *tc = sh_test_chan_new(sizeof(int), 0);
	shoal_fiber *target;
	CHECK_OK(shoal_spawn(&target, recv_plus_one, tc, NULL));
	for (int kind = 0; kind < W_NKINDS; kind++) {
		w[kind] = (struct wctx){.kind = kind, .rc = PENDING, .fd = p[0], .target = target};
		w[kind].c = sh_test_chan_new(sizeof(int), 0);
		shoal_fiber_opts o = {.detached = kind % 2};
		shoal_fiber *f;
		CHECK_OK(shoal_spawn(&f, waiter, &w[kind], &o));
	}
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_yield());
	for (int kind = 0; kind < W_NKINDS; kind++)
		CHECK(w[kind].reached);
	CHECK_OK(shoal_sched_destroy(s));
	for (int kind = 0; kind < W_NKINDS; kind++) {
		if (w[kind].rc != SHOAL_ECANCELED)
			sh_test_fail(__FILE__, __LINE__, "%s: got %s, want SHOAL_ECANCELED",
				     wait_names[kind], shoal_strerror(w[kind].rc));
		CHECK_OK(shoal_chan_destroy(w[kind].c));
	}
	CHECK_OK(shoal_chan_destroy(tc));
	close(p[0]);
	close(p[1]);
	sh_test_leak_check();
}

SH_TEST(join_until_finished_fiber)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, ret_arg, (void *)(intptr_t)31, NULL));
	CHECK_OK(shoal_yield()); /* it has returned */
	void *r = NULL;
	CHECK_OK(shoal_join_until(f, &r, SHOAL_NOWAIT));
	CHECK_EQ((intptr_t)r, 31);
	CHECK_EQ(stats(s).live, 0);
	CHECK_OK(shoal_sched_destroy(s));
}

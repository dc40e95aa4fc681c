/* Tests for timers: sleeping fibers wake in deadline order (ties in the
 * order they began to wait), never early and on time (within a bound
 * relative to the wait, sh_test_late_bound), past deadlines return at
 * once, deadlines bound receive, send, join and select, and a wait that
 * finished early leaves no timer behind to fire later. */
#include "test.h"

/* Generous, for what should take no time at all: the machine is a loaded
 * 2-core VM and sanitizers slow us. */
static int64_t slack(void)
{
	return (sh_test_sanitized() ? 6000 : 2000) * MS;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t min_of(const int64_t *late, int n)
{
	int64_t m = late[0];
	for (int i = 1; i < n; i++)
		m = late[i] < m ? late[i] : m;
	return m;
}

/* The median of n lateness figures (reordered). */
static int64_t median(int64_t *late, int n)
{
	qsort(late, (size_t)n, sizeof(late[0]), cmp_i64);
	return late[n / 2];
}

enum { NSLEEP = 200 };
static struct sleeper {
	int64_t deadline;
	int start_seq; /* order in which it began to sleep */
	int wake_seq;
	int64_t started_at, woke_at;
	int rc;
} sl[NSLEEP];
static int start_counter, wake_counter;

static void *sleeper_fn(void *arg)
{
	struct sleeper *p = arg;
	p->start_seq = start_counter++;
	p->started_at = shoal_now_ns();
	p->rc = shoal_sleep_until(p->deadline);
	p->woke_at = shoal_now_ns();
	p->wake_seq = wake_counter++;
	return NULL;
}

SH_TEST(timers_fire_in_deadline_order)
{
	shoal_sched *s = sh_test_sched_new();
	/* 50 distinct deadlines, 4 sleepers each, spawned in shuffled order;
	 * the base leaves time for all of them to start sleeping first */
	int64_t lead = (sh_test_sanitized() ? 300 : 200) * MS;
	int64_t base;
	int perm[NSLEEP];
	for (int i = 0; i < NSLEEP; i++)
		perm[i] = i;
	unsigned rnd = 2024;
	for (int i = NSLEEP - 1; i > 0; i--) {
		rnd = rnd * 1103515245 + 12345;
		int j = (int)((rnd >> 16) % (unsigned)(i + 1));
		int t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	shoal_fiber *f[NSLEEP];
	for (int i = 0; i < NSLEEP; i++)
		CHECK_OK(shoal_spawn(&f[i], sleeper_fn, &sl[i], NULL));
	/* Children first run at our join below, so deadlines set now count
	 * from after the (under sanitizers, slow) spawning. */
	base = shoal_deadline_in(lead);
	for (int i = 0; i < NSLEEP; i++)
		sl[i].deadline = base + (perm[i] % 50) * MS;
	for (int i = 0; i < NSLEEP; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	CHECK(start_counter == NSLEEP && wake_counter == NSLEEP);
	int by_wake[NSLEEP], n = 0;
	int64_t late[NSLEEP];
	for (int i = 0; i < NSLEEP; i++) {
		CHECK_RC(sl[i].rc, SHOAL_ETIMEDOUT);
		CHECK(sl[i].woke_at >= sl[i].deadline); /* never early */
	}
	/* Those that began to sleep before their deadline (all of them, but
	 * for a stall of the machine as long as the lead), in wake order:
	 * each was in the heap when any earlier deadline came. */
	for (int seq = 0; seq < NSLEEP; seq++)
		for (int i = 0; i < NSLEEP; i++)
			if (sl[i].wake_seq == seq && sl[i].started_at < sl[i].deadline) {
				late[n] = sl[i].woke_at - sl[i].deadline;
				by_wake[n++] = i;
			}
	CHECK(n >= NSLEEP / 2);
	/* on time: each waited lead to lead + 50 ms (a stall of the machine
	 * makes a few late together, not most of them) */
	CHECK_ON_TIME(median(late, n), lead);
	for (int k = 1; k < n; k++) {
		struct sleeper *a = &sl[by_wake[k - 1]], *b = &sl[by_wake[k]];
		if (a->deadline > b->deadline ||
		    (a->deadline == b->deadline && a->start_seq > b->start_seq))
			sh_test_fail(__FILE__, __LINE__,
				     "wake %d: deadline +%lld start %d woke before deadline +%lld "
				     "start %d",
				     k, (long long)((a->deadline - base) / MS), a->start_seq,
				     (long long)((b->deadline - base) / MS), b->start_seq);
	}
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(sleep_never_early)
{
	shoal_sched *s = sh_test_sched_new();
	static const int64_t waits[] = {1 * MS, 5 * MS, 20 * MS, 50 * MS};
	for (size_t i = 0; i < 4; i++) {
		int64_t late[5];
		for (int rep = 0; rep < 5; rep++) {
			int64_t t0 = shoal_now_ns();
			int64_t d = t0 + waits[i];
			CHECK_RC(shoal_sleep_until(d), SHOAL_ETIMEDOUT);
			int64_t t1 = shoal_now_ns();
			CHECK(t1 >= d);
			late[rep] = t1 - d;
		}
		/* the best: all five late is a late timer, not a busy machine
		 * (which has made three of five 5 ms waits 14 ms late) */
		CHECK_ON_TIME(min_of(late, 5), waits[i]);
	}
	/* sub-millisecond deadlines are not rounded down to "now" either */
	for (int rep = 0; rep < 20; rep++) {
		int64_t d = shoal_now_ns() + 300000;
		CHECK_RC(shoal_sleep_until(d), SHOAL_ETIMEDOUT);
		CHECK(shoal_now_ns() >= d);
	}
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST_T(past_deadlines_return_at_once, 20)
{
	shoal_sched *s = sh_test_sched_new();
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_sleep_until(SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_sleep_until(1), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_sleep_until(shoal_now_ns() - 1 * MS), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_sleep_until(shoal_now_ns()), SHOAL_ETIMEDOUT);
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	int v = 0;
	CHECK_RC(shoal_chan_recv(c, &v, shoal_now_ns() - 5 * MS), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_chan_send(c, &v, 1), SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 < slack());
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

static void *sleep_arg_ms(void *arg)
{
	return (void *)(intptr_t)shoal_sleep_until(shoal_deadline_in((intptr_t)arg * MS));
}

/* The best of three timed-out waits of op, each of wait_ns: never early,
 * and the best on time. */
static void wait_on_time(int (*op)(void *, int64_t), void *arg, int64_t wait_ns)
{
	int64_t best = INT64_MAX;
	for (int rep = 0; rep < 3; rep++) {
		int64_t d = shoal_deadline_in(wait_ns);
		CHECK_RC(op(arg, d), SHOAL_ETIMEDOUT);
		int64_t late = shoal_now_ns() - d;
		CHECK(late >= 0);
		best = late < best ? late : best;
	}
	CHECK_ON_TIME(best, wait_ns);
}

static int recv_until(void *c, int64_t deadline)
{
	int v;
	return shoal_chan_recv(c, &v, deadline);
}

static int send_until(void *c, int64_t deadline)
{
	int v = 1;
	return shoal_chan_send(c, &v, deadline);
}

static int join_until(void *f, int64_t deadline)
{
	void *r;
	return shoal_join_until(f, &r, deadline);
}

static void *recv_fn(void *arg)
{
	int v = 0;
	int rc = shoal_chan_recv(arg, &v, SHOAL_FOREVER);
	return (void *)(intptr_t)(rc ? rc : v);
}

SH_TEST(deadlines_on_recv_send_join)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 1);
	int v = 1;
	int64_t t0;

	wait_on_time(recv_until, c, 30 * MS);
	wait_on_time(send_until, c, 30 * MS);
	/* the timed-out sends were withdrawn: a later receiver finds nothing */
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, recv_fn, c, NULL));
	CHECK_OK(shoal_yield());
	CHECK_RC(shoal_join_until(f, NULL, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	v = 66;
	CHECK_OK(shoal_chan_send(c, &v, shoal_deadline_in(5000 * MS)));
	void *r;
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((intptr_t)r, 66);

	/* a full buffered channel: send times out, the buffer is unchanged */
	v = 7;
	CHECK_OK(shoal_chan_send(b, &v, SHOAL_NOWAIT));
	wait_on_time(send_until, b, 20 * MS);
	CHECK_EQ(shoal_chan_len(b), 1);
	CHECK_OK(shoal_chan_recv(b, &v, SHOAL_NOWAIT));
	CHECK_EQ(v, 7);
	CHECK_RC(shoal_chan_recv(b, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);

	/* join: times out while the target sleeps, then succeeds */
	t0 = shoal_now_ns();
	CHECK_OK(shoal_spawn(&f, sleep_arg_ms, (void *)(intptr_t)300, NULL));
	wait_on_time(join_until, f, 30 * MS);
	CHECK_OK(shoal_join_until(f, &r, shoal_deadline_in(5000 * MS)));
	CHECK_RC((int)(intptr_t)r, SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 >= 300 * MS); /* it really waited for the sleeper */
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
}

/* A wait with a deadline that is satisfied early must cancel its timer:
 * otherwise it fires later into whatever the fiber waits on next. */
struct stale {
	shoal_chan *a, *b;
	int first_rc, second_rc, second_val;
	int in_second;
	int64_t second_at;
};

static void *stale_fn(void *arg)
{
	struct stale *st = arg;
	int v;
	st->first_rc = shoal_chan_recv(st->a, &v, shoal_deadline_in(30 * MS));
	st->in_second = 1;
	st->second_rc = shoal_chan_recv(st->b, &st->second_val, SHOAL_FOREVER);
	st->second_at = shoal_now_ns();
	return NULL;
}

SH_TEST(early_wakeup_leaves_no_stale_timer)
{
	shoal_sched *s = sh_test_sched_new();
	struct stale st = {.a = sh_test_chan_new(sizeof(int), 0),
			   .b = sh_test_chan_new(sizeof(int), 0),
			   .second_rc = 12345};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, stale_fn, &st, NULL));
	CHECK_OK(shoal_yield());
	int v = 1;
	CHECK_OK(shoal_chan_send(st.a, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_yield());
	CHECK_OK(st.first_rc);
	CHECK(st.in_second);
	/* sleep well past the first deadline: the fiber must stay blocked */
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(100 * MS)), SHOAL_ETIMEDOUT);
	CHECK_EQ(st.second_rc, 12345);
	v = 2;
	int64_t t_send = shoal_now_ns();
	CHECK_OK(shoal_chan_send(st.b, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(st.second_rc);
	CHECK_EQ(st.second_val, 2);
	CHECK(st.second_at >= t_send);
	CHECK_OK(shoal_chan_destroy(st.a));
	CHECK_OK(shoal_chan_destroy(st.b));
	CHECK_OK(shoal_sched_destroy(s));
}

/* Timers of fibers that were cancelled or joined must not fire into
 * recycled fibers or stacks. */
SH_TEST(cancelled_sleepers_and_reuse)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f[50];
	for (int i = 0; i < 50; i++)
		CHECK_OK(shoal_spawn(&f[i], sleep_arg_ms, (void *)(intptr_t)(20 + i), NULL));
	CHECK_OK(shoal_yield());
	for (int i = 0; i < 50; i++)
		CHECK_OK(shoal_cancel(f[i]));
	for (int i = 0; i < 50; i++) {
		void *r;
		CHECK_OK(shoal_join(f[i], &r));
		CHECK_RC((int)(intptr_t)r, SHOAL_ECANCELED);
	}
	/* new fibers (likely on the same stacks) sleep longer than the old
	 * deadlines: they must wake at their own time, not the old ones */
	shoal_fiber *g[50];
	int64_t t0 = shoal_now_ns();
	for (int i = 0; i < 50; i++)
		CHECK_OK(shoal_spawn(&g[i], sleep_arg_ms, (void *)(intptr_t)120, NULL));
	for (int i = 0; i < 50; i++) {
		void *r;
		CHECK_OK(shoal_join(g[i], &r));
		CHECK_RC((int)(intptr_t)r, SHOAL_ETIMEDOUT);
	}
	CHECK(shoal_now_ns() - t0 >= 120 * MS);
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* Sleeping fibers do not stop the others: while one sleeps, a busy pair
 * keeps exchanging messages, and the root's own sleep ends on time. */
/* The longest the busy fibers went without running (ns): how long the OS
 * kept this CPU-bound process off the CPU, which a timer among them may
 * be late by, on top of sh_test_late_bound. */
static int64_t busy_gap;

static void note_gap(int64_t *last)
{
	int64_t now = shoal_now_ns();
	if (*last && now - *last > busy_gap)
		busy_gap = now - *last;
	*last = now;
}

/* best (the least late of a few timed waits of wait_ns among busy fibers)
 * is on time, allowing for the gaps they saw. */
static void check_busy_on_time(int64_t best, int64_t wait_ns)
{
	int64_t bound = sh_test_late_bound(wait_ns) + busy_gap;
	if (best < 0 || best > bound)
		sh_test_fail(__FILE__, __LINE__,
			     "a wait of %.1f ms among busy fibers ended %.2f ms late (on time: 0 "
			     "to %.2f ms, of which %.2f ms the longest the busy fibers were off "
			     "the CPU)",
			     (double)wait_ns / 1e6, (double)best / 1e6, (double)bound / 1e6,
			     (double)busy_gap / 1e6);
}

static void *busy_pinger(void *arg)
{
	shoal_chan **c = arg;
	int n = 0;
	int64_t last = 0;
	for (;;) {
		note_gap(&last);
		int v = n;
		if (shoal_chan_send(c[0], &v, SHOAL_FOREVER) != 0)
			return (void *)(intptr_t)n;
		if (shoal_chan_recv(c[1], &v, SHOAL_FOREVER) != 0)
			return (void *)(intptr_t)n;
		n++;
	}
}

static void *busy_ponger(void *arg)
{
	shoal_chan **c = arg;
	int v;
	while (shoal_chan_recv(c[0], &v, SHOAL_FOREVER) == 0)
		if (shoal_chan_send(c[1], &v, SHOAL_FOREVER) != 0)
			break;
	return NULL;
}

SH_TEST(timers_fire_while_others_run)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c[2] = {sh_test_chan_new(sizeof(int), 0), sh_test_chan_new(sizeof(int), 0)};
	shoal_fiber *a, *b, *z;
	CHECK_OK(shoal_spawn(&a, busy_pinger, c, NULL));
	CHECK_OK(shoal_spawn(&b, busy_ponger, c, NULL));
	CHECK_OK(shoal_spawn(&z, sleep_arg_ms, (void *)(intptr_t)20, NULL));
	int64_t best = INT64_MAX;
	for (int rep = 0; rep < 3; rep++) {
		int64_t d = shoal_deadline_in(60 * MS);
		CHECK_RC(shoal_sleep_until(d), SHOAL_ETIMEDOUT);
		int64_t late = shoal_now_ns() - d;
		CHECK(late >= 0);
		best = late < best ? late : best;
	}
	check_busy_on_time(best, 60 * MS);
	void *r;
	/* the 20 ms sleeper finished while the pair was busy */
	CHECK_OK(shoal_join_until(z, &r, SHOAL_NOWAIT));
	CHECK_RC((int)(intptr_t)r, SHOAL_ETIMEDOUT);
	CHECK_OK(shoal_chan_close(c[0]));
	CHECK_OK(shoal_chan_close(c[1]));
	CHECK_OK(shoal_join(a, &r));
	CHECK((intptr_t)r > 10); /* and the pair made progress meanwhile */
	CHECK_OK(shoal_join(b, NULL));
	CHECK_OK(shoal_chan_destroy(c[0]));
	CHECK_OK(shoal_chan_destroy(c[1]));
	CHECK_OK(shoal_sched_destroy(s));
}

/* A fiber that keeps yielding never leaves the run queue empty; due timers
 * must still fire while it runs, not only once it stops. */
static int sleeper_done;
static int64_t sleeper_late = INT64_MAX; /* the best of its three sleeps */

static void *short_sleeper(void *arg)
{
	for (int rep = 0; rep < 3; rep++) {
		int64_t d = shoal_deadline_in(20 * MS);
		CHECK_RC(shoal_sleep_until(d), SHOAL_ETIMEDOUT);
		int64_t late = shoal_now_ns() - d;
		sleeper_late = late < sleeper_late ? late : sleeper_late;
	}
	sleeper_done = 1;
	return NULL;
}

static void *yield_until_sleeper_done(void *arg)
{
	int64_t give_up = shoal_deadline_in(2000 * MS), last = 0;
	while (!sleeper_done && shoal_now_ns() < give_up) {
		note_gap(&last);
		CHECK_OK(shoal_yield());
	}
	return (void *)(intptr_t)sleeper_done;
}

SH_TEST(timers_not_starved_by_yielders)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *a, *b;
	CHECK_OK(shoal_spawn(&a, short_sleeper, NULL, NULL));
	CHECK_OK(shoal_spawn(&b, yield_until_sleeper_done, NULL, NULL));
	void *r;
	CHECK_OK(shoal_join(b, &r));
	if (!(intptr_t)r)
		sh_test_fail(__FILE__, __LINE__, "a 20 ms sleeper did not wake in 2 s of yields");
	CHECK_OK(shoal_join(a, NULL));
	check_busy_on_time(sleeper_late, 20 * MS); /* and it woke on time among them */
	CHECK_OK(shoal_sched_destroy(s));
}

/* Timers removed from the middle of the heap (cancelled sleepers, waits
 * satisfied early) must leave the rest in order. */
enum { NHEAP = 600 };
static struct hs {
	int64_t deadline;
	int kind; /* 0 sleeps, 1 is cancelled, 2 receives early */
	int rc;
	int wake_seq;
	int64_t woke_at;
} hs[NHEAP];
static int heap_wakes;
static shoal_chan *heap_chan;

static void *heap_fiber(void *arg)
{
	struct hs *h = arg;
	if (h->kind == 2) {
		int v;
		h->rc = shoal_chan_recv(heap_chan, &v, h->deadline);
	} else {
		h->rc = shoal_sleep_until(h->deadline);
	}
	h->woke_at = shoal_now_ns();
	h->wake_seq = heap_wakes++;
	return NULL;
}

SH_TEST(timer_heap_removals_keep_order)
{
	shoal_sched *s = sh_test_sched_new();
	heap_chan = sh_test_chan_new(sizeof(int), 0);
	unsigned rnd = 77;
	shoal_fiber *f[NHEAP];
	int early = 0;
	for (int i = 0; i < NHEAP; i++) {
		hs[i].kind = i % 3;
		early += hs[i].kind == 2;
		CHECK_OK(shoal_spawn(&f[i], heap_fiber, &hs[i], NULL));
	}
	/* Deadlines count from after the spawning, which sanitizers slow
	 * down; the children read them when they first run, in the yield.
	 * They should not pass before we cancel and send (starting the 600
	 * fibers takes 10-15 ms, but a loaded machine, TSan or qemu-user has
	 * stalled it past 80 ms); where one did, it is a timer that fired.
	 * The lead also leaves the median room for a stall of 100 ms. */
	int64_t lead = (sh_test_sanitized() ? 300 : 200) * MS;
	int64_t base = shoal_deadline_in(lead);
	for (int i = 0; i < NHEAP; i++) {
		rnd = rnd * 1103515245 + 12345;
		hs[i].deadline = base + (int64_t)((rnd >> 8) % 100000) * 1000; /* 0..100 ms */
	}
	CHECK_OK(shoal_yield()); /* all waiting now */
	for (int i = 0; i < NHEAP; i++)
		if (hs[i].kind == 1)
			CHECK_OK(shoal_cancel(f[i]));
	/* to each receiver still waiting */
	int sent = 0;
	for (int k = 0; k < early; k++) {
		int v = k, rc = shoal_chan_send(heap_chan, &v, SHOAL_NOWAIT);
		if (rc == 0)
			sent++;
		else
			CHECK_RC(rc, SHOAL_ETIMEDOUT);
	}
	for (int i = 0; i < NHEAP; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	int64_t prev_deadline = INT64_MIN;
	int order[NHEAP], n = 0, cancelled = 0, received = 0;
	for (int i = 0; i < NHEAP; i++) {
		if (hs[i].kind == 1 && hs[i].rc == SHOAL_ECANCELED)
			cancelled++;
		else if (hs[i].kind == 2 && hs[i].rc == 0)
			received++;
		else
			CHECK_RC(hs[i].rc, SHOAL_ETIMEDOUT);
	}
	CHECK_EQ(received, sent);
	/* timers removed from the heap: all of them unless the machine
	 * stalled for the whole lead */
	CHECK(cancelled + received >= NHEAP / 3);
	/* the fibers that ran to their deadline, in wake order */
	for (int seq = 0; seq < NHEAP; seq++)
		for (int i = 0; i < NHEAP; i++)
			if (hs[i].wake_seq == seq && hs[i].rc == SHOAL_ETIMEDOUT)
				order[n++] = i;
	CHECK_EQ(n, NHEAP - cancelled - received);
	int64_t late[NHEAP];
	for (int k = 0; k < n; k++) {
		struct hs *h = &hs[order[k]];
		CHECK(h->woke_at >= h->deadline);
		late[k] = h->woke_at - h->deadline;
		if (h->deadline < prev_deadline)
			sh_test_fail(__FILE__, __LINE__, "sleeper woke out of deadline order at %d",
				     k);
		prev_deadline = h->deadline;
	}
	CHECK_ON_TIME(median(late, n), lead); /* each waited lead to lead + 100 ms */
	CHECK_OK(shoal_chan_destroy(heap_chan));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

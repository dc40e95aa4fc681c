/* shoal-test: threaded */
/* Tests for the thread-safe corner of the fiber layer: plain threads and
 * fibers of other schedulers sending into and closing a scheduler's
 * channels. Every message must arrive exactly once, a send that times out
 * or is cancelled must never be delivered later, and a fiber blocked in a
 * cross-thread send blocks only itself. Runs under ThreadSanitizer too. */
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

const char *__tsan_default_options(void);
__attribute__((used)) const char *__tsan_default_options(void)
{
	return "halt_on_error=1";
}

static int64_t slack(void)
{
	return (sh_test_sanitized() ? 8000 : 2000) * MS;
}

static void thread_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* Waits on the root fiber until *flag reaches want, keeping the scheduler
 * running (blocking the thread could starve work the test depends on). */
static void fiber_wait_flag(atomic_int *flag, int want)
{
	int64_t give_up = shoal_deadline_in(20000 * MS);
	while (atomic_load(flag) < want) {
		CHECK(shoal_now_ns() < give_up);
		CHECK_RC(shoal_sleep_until(shoal_deadline_in(MS / 4)), SHOAL_ETIMEDOUT);
	}
}

static void start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	CHECK(pthread_create(t, NULL, fn, arg) == 0);
}

/* ---- many producer threads, fiber consumers ------------------------------------ */

enum { NPROD = 4, NCONS = 3 };
static struct {
	shoal_chan *c;
	int per;
	atomic_int finished;
	unsigned char *seen;
	long count;
	long long sum;
} pc;

static void *producer_thread(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int k = 0; k < pc.per; k++) {
		int v = id * pc.per + k;
		CHECK_OK(shoal_chan_send(pc.c, &v, SHOAL_FOREVER));
	}
	/* the last producer out closes, from its own thread */
	if (atomic_fetch_add(&pc.finished, 1) + 1 == NPROD)
		CHECK_OK(shoal_chan_close(pc.c));
	return NULL;
}

static void *consumer_fiber(void *arg)
{
	for (;;) {
		int v;
		int rc = shoal_chan_recv(pc.c, &v, SHOAL_FOREVER);
		if (rc == SHOAL_ECLOSED)
			return NULL;
		CHECK_OK(rc);
		CHECK(v >= 0 && v < NPROD * pc.per);
		if (pc.seen[v])
			sh_test_fail(__FILE__, __LINE__, "message %d received twice", v);
		pc.seen[v] = 1;
		pc.count++;
		pc.sum += v;
		if (v % 64 == 0)
			CHECK_OK(shoal_yield());
	}
}

static void producers_run(size_t cap)
{
	shoal_sched *s = sh_test_sched_new();
	pc.per = sh_test_sanitized() ? 400 : 5000;
	pc.c = sh_test_chan_new(sizeof(int), cap);
	pc.seen = calloc((size_t)(NPROD * pc.per), 1);
	CHECK(pc.seen != NULL);
	shoal_fiber *f[NCONS];
	for (int i = 0; i < NCONS; i++)
		CHECK_OK(shoal_spawn(&f[i], consumer_fiber, NULL, NULL));
	pthread_t t[NPROD];
	for (int i = 0; i < NPROD; i++)
		start(&t[i], producer_thread, (void *)(intptr_t)i);
	for (int i = 0; i < NCONS; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	for (int i = 0; i < NPROD; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	long n = (long)NPROD * pc.per;
	CHECK_EQ(pc.count, n);
	CHECK_EQ(pc.sum, (long long)n * (n - 1) / 2);
	for (long v = 0; v < n; v++)
		CHECK(pc.seen[v]);
	CHECK_OK(shoal_chan_destroy(pc.c));
	free(pc.seen);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(foreign_producers_unbuffered)
{
	producers_run(0);
	sh_test_leak_check();
}

SH_TEST(foreign_producers_buffered)
{
	producers_run(16);
}

/* ---- a foreign send wakes an idle scheduler ------------------------------------ */

static void *late_sender(void *arg)
{
	thread_sleep_ms(30);
	int v = 4711;
	CHECK_OK(shoal_chan_send(arg, &v, SHOAL_FOREVER));
	return NULL;
}

SH_TEST(foreign_send_wakes_idle_scheduler)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 4);
	shoal_chan *cs[2] = {c, b};
	for (int k = 0; k < 2; k++) {
		/* the root is the only fiber and blocks: the scheduler sleeps in
		 * epoll until the other thread's send wakes it */
		pthread_t t;
		start(&t, late_sender, cs[k]);
		int v = 0;
		int64_t t0 = shoal_now_ns();
		CHECK_OK(shoal_chan_recv(cs[k], &v, shoal_deadline_in(20000 * MS)));
		CHECK_EQ(v, 4711);
		CHECK(shoal_now_ns() - t0 < slack());
		CHECK(pthread_join(t, NULL) == 0);
	}
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- a foreign send that times out is withdrawn --------------------------------- */

static struct {
	shoal_chan *c;
	int rc;
	int64_t waited;
	atomic_int done;
} ts;

static void *timed_sender(void *arg)
{
	int v = 999;
	int64_t t0 = shoal_now_ns(), d = t0 + 50 * MS;
	ts.rc = shoal_chan_send(ts.c, &v, d);
	ts.waited = shoal_now_ns() - d;
	atomic_store(&ts.done, 1);
	return NULL;
}

SH_TEST(foreign_send_deadline_retracted)
{
	shoal_sched *s = sh_test_sched_new();
	for (int cap = 0; cap < 2; cap++) {
		ts.c = sh_test_chan_new(sizeof(int), (size_t)cap);
		int v = 1;
		if (cap == 1)
			CHECK_OK(shoal_chan_send(ts.c, &v, SHOAL_NOWAIT)); /* full */
		atomic_store(&ts.done, 0);
		pthread_t t;
		start(&t, timed_sender, NULL);
		fiber_wait_flag(&ts.done, 1);
		CHECK(pthread_join(t, NULL) == 0);
		CHECK_RC(ts.rc, SHOAL_ETIMEDOUT);
		CHECK(ts.waited >= 0 && ts.waited < slack());
		if (cap == 1) {
			CHECK_EQ(shoal_chan_len(ts.c), 1);
			CHECK_OK(shoal_chan_recv(ts.c, &v, SHOAL_NOWAIT));
			CHECK_EQ(v, 1);
		}
		/* the element is gone for good */
		CHECK_RC(shoal_chan_recv(ts.c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
		CHECK_RC(shoal_chan_recv(ts.c, &v, shoal_deadline_in(30 * MS)), SHOAL_ETIMEDOUT);
		CHECK_OK(shoal_chan_destroy(ts.c));
	}
	CHECK_OK(shoal_sched_destroy(s));
}

/* A deadline is a promise to the caller: it must hold even while the
 * owning thread is busy outside shoal (here: blocked in pthread_join) and
 * cannot run its scheduler. */
static struct {
	shoal_chan *unbuf, *room;
	int rc_unbuf, rc_room;
	int64_t late_unbuf, late_room;
} bo;

static void *busy_owner_sender(void *arg)
{
	int v = 1;
	int64_t d = shoal_deadline_in(50 * MS);
	bo.rc_unbuf = shoal_chan_send(bo.unbuf, &v, d);
	bo.late_unbuf = shoal_now_ns() - d;
	d = shoal_deadline_in(50 * MS);
	bo.rc_room = shoal_chan_send(bo.room, &v, d);
	bo.late_room = shoal_now_ns() - d;
	return NULL;
}

SH_TEST_T(foreign_send_deadline_with_busy_owner, 20)
{
	shoal_sched *s = sh_test_sched_new();
	bo.unbuf = sh_test_chan_new(sizeof(int), 0);
	bo.room = sh_test_chan_new(sizeof(int), 4);
	pthread_t t;
	start(&t, busy_owner_sender, NULL);
	/* blocks this thread, not just the root fiber; give up after a few
	 * seconds with a message rather than the harness timeout */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += sh_test_sanitized() ? 6 : 3;
	int jr = pthread_timedjoin_np(t, NULL, &until);
	if (jr != 0)
		sh_test_fail(__FILE__, __LINE__,
			     "foreign sends with 50 ms deadlines still blocked after seconds "
			     "while the owner thread was busy");
	/* nobody received: the rendezvous send timed out on time */
	CHECK_RC(bo.rc_unbuf, SHOAL_ETIMEDOUT);
	CHECK(bo.late_unbuf < slack());
	/* a buffered send with room may complete or time out, but on time */
	CHECK(bo.rc_room == 0 || bo.rc_room == SHOAL_ETIMEDOUT);
	CHECK(bo.late_room < slack());
	int v;
	CHECK_RC(shoal_chan_recv(bo.unbuf, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_chan_recv(bo.room, &v, SHOAL_NOWAIT), bo.rc_room == 0 ? 0 : SHOAL_ETIMEDOUT);
	CHECK_OK(shoal_chan_destroy(bo.unbuf));
	CHECK_OK(shoal_chan_destroy(bo.room));
	CHECK_OK(shoal_sched_destroy(s));
}

/* The deadline of a foreign send races a receiver: either the send
 * succeeded and the receiver has the element, or it timed out and nobody
 * has it; never both, never neither. */
static struct {
	shoal_chan *c;
	atomic_int go, done;
	atomic_llong deadline;
	int rc;
	int rounds;
} race;

static void *race_sender(void *arg)
{
	for (int i = 1; i <= race.rounds; i++) {
		while (atomic_load(&race.go) < i)
			sched_yield();
		int v = i;
		race.rc = shoal_chan_send(race.c, &v, atomic_load(&race.deadline));
		atomic_store(&race.done, i);
	}
	return NULL;
}

SH_TEST_T(foreign_send_deadline_races_receiver, 120)
{
	shoal_sched *s = sh_test_sched_new();
	race.rounds = sh_test_sanitized() ? 60 : 300;
	race.c = sh_test_chan_new(sizeof(int), 0);
	pthread_t t;
	start(&t, race_sender, NULL);
	int delivered = 0, expired = 0;
	for (int i = 1; i <= race.rounds; i++) {
		int64_t now = shoal_now_ns();
		int64_t d = now + (i % 5) * 100000; /* 0..400 us */
		atomic_store(&race.deadline, d);
		atomic_store(&race.go, i);
		int v = -1;
		/* the receiver's own deadline lands around the sender's */
		int rc = shoal_chan_recv(race.c, &v, d + ((i % 3) - 1) * 100000);
		fiber_wait_flag(&race.done, i);
		if (race.rc == 0) {
			if (rc != 0)
				sh_test_fail(__FILE__, __LINE__, "round %d: send ok, recv %s", i,
					     shoal_strerror(rc));
			CHECK_EQ(v, i);
			delivered++;
		} else {
			CHECK_RC(race.rc, SHOAL_ETIMEDOUT);
			if (rc == 0)
				sh_test_fail(__FILE__, __LINE__,
					     "round %d: send timed out but %d was received", i, v);
			CHECK_RC(rc, SHOAL_ETIMEDOUT);
			expired++;
		}
		/* and nothing lingers for the next round */
		CHECK_RC(shoal_chan_recv(race.c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	}
	CHECK(pthread_join(t, NULL) == 0);
	CHECK_EQ(delivered + expired, race.rounds);
	CHECK_OK(shoal_chan_destroy(race.c));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* ---- foreign close ------------------------------------------------------------- */

static atomic_int closer_done;

static void *closer_thread(void *arg)
{
	shoal_chan **cs = arg;
	thread_sleep_ms(20);
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_chan_close(cs[i]));
	for (int i = 0; i < 3; i++)
		CHECK_RC(shoal_chan_close(cs[i]), SHOAL_ECLOSED);
	int v = 1;
	CHECK_RC(shoal_chan_send(cs[0], &v, SHOAL_FOREVER), SHOAL_ECLOSED);
	atomic_store(&closer_done, 1);
	return NULL;
}

struct op {
	shoal_chan *c;
	int kind; /* 0 recv, 1 send, 2 select */
	int rc;
};

static void *op_fiber(void *arg)
{
	struct op *o = arg;
	int v = 5;
	if (o->kind == 0) {
		o->rc = shoal_chan_recv(o->c, &v, SHOAL_FOREVER);
	} else if (o->kind == 1) {
		o->rc = shoal_chan_send(o->c, &v, SHOAL_FOREVER);
	} else {
		shoal_select_case cs[1] = {{o->c, SHOAL_SELECT_RECV, &v}};
		size_t chosen = 99;
		o->rc = shoal_select(cs, 1, SHOAL_FOREVER, &chosen);
		if (o->rc == SHOAL_ECLOSED)
			CHECK_EQ(chosen, 0);
	}
	return NULL;
}

SH_TEST(foreign_close_wakes_fibers)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *cs[3] = {sh_test_chan_new(sizeof(int), 0), sh_test_chan_new(sizeof(int), 0),
			     sh_test_chan_new(sizeof(int), 2)};
	struct op o[6] = {{cs[0], 0, 1}, {cs[0], 0, 1}, {cs[0], 0, 1},
			  {cs[1], 1, 1}, {cs[1], 1, 1}, {cs[2], 2, 1}};
	shoal_fiber *f[6];
	for (int i = 0; i < 6; i++)
		CHECK_OK(shoal_spawn(&f[i], op_fiber, &o[i], NULL));
	CHECK_OK(shoal_yield());
	pthread_t t;
	start(&t, closer_thread, cs);
	int64_t t0 = shoal_now_ns();
	for (int i = 0; i < 6; i++) {
		CHECK_OK(shoal_join(f[i], NULL));
		CHECK_RC(o[i].rc, SHOAL_ECLOSED);
	}
	CHECK(shoal_now_ns() - t0 < slack());
	/* foreign closes and sends are carried out by this scheduler: keep
	 * it running until the thread is done with them */
	fiber_wait_flag(&closer_done, 1);
	CHECK(pthread_join(t, NULL) == 0);
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_chan_destroy(cs[i]));
	CHECK_OK(shoal_sched_destroy(s));
}

/* Several threads race to close one channel: exactly one wins. */
static struct {
	shoal_chan *c;
	atomic_int go;
	atomic_int wins, losses;
} cc;

static void *racing_closer(void *arg)
{
	while (!atomic_load(&cc.go))
		sched_yield();
	int rc = shoal_chan_close(cc.c);
	if (rc == 0)
		atomic_fetch_add(&cc.wins, 1);
	else if (rc == SHOAL_ECLOSED)
		atomic_fetch_add(&cc.losses, 1);
	else
		sh_test_fail(__FILE__, __LINE__, "close: %s", shoal_strerror(rc));
	return NULL;
}

SH_TEST(concurrent_closes_one_wins)
{
	shoal_sched *s = sh_test_sched_new();
	enum { NT = 4 };
	int rounds = sh_test_sanitized() ? 10 : 50;
	for (int r = 0; r < rounds; r++) {
		cc.c = sh_test_chan_new(sizeof(int), (size_t)(r % 2));
		atomic_store(&cc.go, 0);
		atomic_store(&cc.wins, 0);
		atomic_store(&cc.losses, 0);
		/* a blocked receiver, so close has someone to wake */
		struct op o = {cc.c, 0, 1};
		shoal_fiber *f;
		CHECK_OK(shoal_spawn(&f, op_fiber, &o, NULL));
		CHECK_OK(shoal_yield());
		pthread_t t[NT];
		for (int i = 0; i < NT; i++)
			start(&t[i], racing_closer, NULL);
		atomic_store(&cc.go, 1);
		/* the owner also closes, from its root fiber */
		int rc = shoal_chan_close(cc.c);
		CHECK(rc == 0 || rc == SHOAL_ECLOSED);
		if (rc == 0)
			atomic_fetch_add(&cc.wins, 1);
		else
			atomic_fetch_add(&cc.losses, 1);
		CHECK_OK(shoal_join(f, NULL));
		CHECK_RC(o.rc, SHOAL_ECLOSED);
		while (atomic_load(&cc.wins) + atomic_load(&cc.losses) < NT + 1)
			CHECK_RC(shoal_sleep_until(shoal_deadline_in(MS / 4)), SHOAL_ETIMEDOUT);
		for (int i = 0; i < NT; i++)
			CHECK(pthread_join(t[i], NULL) == 0);
		CHECK_EQ(atomic_load(&cc.wins), 1);
		CHECK_EQ(atomic_load(&cc.losses), NT);
		CHECK_OK(shoal_chan_destroy(cc.c));
	}
	CHECK_OK(shoal_sched_destroy(s));
}

static void *foreign_recv(void *arg)
{
	int v;
	/* only the owner's fibers may receive */
	return (void *)(intptr_t)shoal_chan_recv(arg, &v, SHOAL_NOWAIT);
}

SH_TEST(foreign_recv_rejected)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 2);
	int v = 3;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_NOWAIT));
	pthread_t t;
	void *r;
	start(&t, foreign_recv, c);
	CHECK(pthread_join(t, &r) == 0);
	CHECK_RC((int)(intptr_t)r, SHOAL_EINVAL);
	/* the element is still there for the owner */
	CHECK_OK(shoal_chan_recv(c, &v, SHOAL_NOWAIT));
	CHECK_EQ(v, 3);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- two schedulers ----------------------------------------------------------------- */

/* Thread A is the test's own thread, thread B a pthread; each has a
 * scheduler and an inbound channel the other's fibers send into. */
static struct {
	shoal_chan *in_a, *in_b;
	pthread_barrier_t bar;
	int rounds;
	int delay_first_ms; /* B waits this long before its first receive */
	atomic_int ticks;
	shoal_fiber *b_fiber; /* a fiber of B, for the wrong-scheduler checks */
	atomic_int phase;
} x;

static void *ponger(void *arg)
{
	if (x.delay_first_ms)
		CHECK_RC(shoal_sleep_until(shoal_deadline_in(x.delay_first_ms * MS)),
			 SHOAL_ETIMEDOUT);
	for (;;) {
		int v;
		int rc = shoal_chan_recv(x.in_b, &v, SHOAL_FOREVER);
		if (rc == SHOAL_ECLOSED)
			return NULL;
		CHECK_OK(rc);
		v += 1000000;
		CHECK_OK(shoal_chan_send(x.in_a, &v, SHOAL_FOREVER));
	}
}

static void *thread_b(void *arg)
{
	shoal_sched *s = sh_test_sched_new();
	x.in_b = sh_test_chan_new(sizeof(int), (size_t)(intptr_t)arg);
	pthread_barrier_wait(&x.bar); /* channels published */
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, ponger, NULL, NULL));
	CHECK_OK(shoal_join(f, NULL));
	pthread_barrier_wait(&x.bar); /* nobody sends any more */
	CHECK_OK(shoal_chan_destroy(x.in_b));
	CHECK_OK(shoal_sched_destroy(s));
	return NULL;
}

static void *ticker(void *arg)
{
	while (shoal_sleep_until(shoal_deadline_in(MS)) == SHOAL_ETIMEDOUT)
		atomic_fetch_add(&x.ticks, 1);
	return NULL;
}

static void *pinger(void *arg)
{
	int ticks_during_first = 0;
	for (int i = 0; i < x.rounds; i++) {
		int t0 = atomic_load(&x.ticks);
		CHECK_OK(shoal_chan_send(x.in_b, &i, SHOAL_FOREVER));
		if (i == 0)
			ticks_during_first = atomic_load(&x.ticks) - t0;
		int v;
		CHECK_OK(shoal_chan_recv(x.in_a, &v, SHOAL_FOREVER));
		CHECK_EQ(v, i + 1000000);
	}
	CHECK_OK(shoal_chan_close(x.in_b)); /* a foreign close ends the ponger */
	return (void *)(intptr_t)ticks_during_first;
}

static void two_schedulers(size_t cap)
{
	shoal_sched *s = sh_test_sched_new();
	x.rounds = sh_test_sanitized() ? 300 : 3000;
	x.delay_first_ms = 100;
	atomic_store(&x.ticks, 0);
	CHECK(pthread_barrier_init(&x.bar, NULL, 2) == 0);
	x.in_a = sh_test_chan_new(sizeof(int), cap);
	pthread_t tb;
	start(&tb, thread_b, (void *)(intptr_t)cap);
	pthread_barrier_wait(&x.bar);
	shoal_fiber *p, *t;
	CHECK_OK(shoal_spawn(&t, ticker, NULL, NULL));
	CHECK_OK(shoal_spawn(&p, pinger, NULL, NULL));
	void *r;
	CHECK_OK(shoal_join(p, &r));
	/* while the pinger was stuck in its first cross-thread send (B slept
	 * 100 ms), the ticker kept running on this scheduler */
	if (cap == 0 && (intptr_t)r < 5)
		sh_test_fail(__FILE__, __LINE__,
			     "only %d ticks while a fiber waited 100 ms in a cross-thread send",
			     (int)(intptr_t)r);
	CHECK_OK(shoal_cancel(t));
	CHECK_OK(shoal_join(t, NULL));
	pthread_barrier_wait(&x.bar);
	CHECK(pthread_join(tb, NULL) == 0);
	CHECK_OK(shoal_chan_destroy(x.in_a));
	pthread_barrier_destroy(&x.bar);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(two_schedulers_ping_pong_unbuffered)
{
	two_schedulers(0);
	sh_test_leak_check();
}

SH_TEST(two_schedulers_ping_pong_buffered)
{
	two_schedulers(4);
}

/* ---- cancelling a cross-thread send ------------------------------------------------- */

static struct {
	shoal_chan *in_b;
	pthread_barrier_t bar;
	atomic_int step;
	int b_rc, b_val;
	int prefill;
} cx;

static void *cancel_thread_b(void *arg)
{
	shoal_sched *s = sh_test_sched_new();
	cx.in_b = sh_test_chan_new(sizeof(int), cx.prefill ? 1 : 0);
	if (cx.prefill) {
		int v = 1;
		CHECK_OK(shoal_chan_send(cx.in_b, &v, SHOAL_NOWAIT));
	}
	pthread_barrier_wait(&cx.bar);
	/* wait until A has cancelled its sender, then look for the element */
	fiber_wait_flag(&cx.step, 1);
	int v = 0;
	if (cx.prefill) {
		CHECK_OK(shoal_chan_recv(cx.in_b, &v, SHOAL_NOWAIT));
		CHECK_EQ(v, 1);
	}
	cx.b_rc = shoal_chan_recv(cx.in_b, &v, shoal_deadline_in(50 * MS));
	cx.b_val = v;
	pthread_barrier_wait(&cx.bar);
	CHECK_OK(shoal_chan_destroy(cx.in_b));
	CHECK_OK(shoal_sched_destroy(s));
	return NULL;
}

static void *cross_sender(void *arg)
{
	int v = 777;
	return (void *)(intptr_t)shoal_chan_send(cx.in_b, &v, SHOAL_FOREVER);
}

SH_TEST(cancel_cross_thread_send)
{
	for (int prefill = 0; prefill < 2; prefill++) {
		shoal_sched *s = sh_test_sched_new();
		cx.prefill = prefill;
		atomic_store(&cx.step, 0);
		CHECK(pthread_barrier_init(&cx.bar, NULL, 2) == 0);
		pthread_t tb;
		start(&tb, cancel_thread_b, NULL);
		pthread_barrier_wait(&cx.bar);
		shoal_fiber *f;
		CHECK_OK(shoal_spawn(&f, cross_sender, NULL, NULL));
		CHECK_RC(shoal_sleep_until(shoal_deadline_in(20 * MS)), SHOAL_ETIMEDOUT);
		CHECK_RC(shoal_join_until(f, NULL, SHOAL_NOWAIT), SHOAL_ETIMEDOUT); /* blocked */
		CHECK_OK(shoal_cancel(f));
		void *r;
		int64_t t0 = shoal_now_ns();
		CHECK_OK(shoal_join(f, &r));
		CHECK(shoal_now_ns() - t0 < slack());
		CHECK_RC((int)(intptr_t)r, SHOAL_ECANCELED);
		atomic_store(&cx.step, 1);
		pthread_barrier_wait(&cx.bar);
		CHECK(pthread_join(tb, NULL) == 0);
		if (cx.b_rc == 0)
			sh_test_fail(__FILE__, __LINE__, "cancelled send delivered %d", cx.b_val);
		CHECK_RC(cx.b_rc, SHOAL_ETIMEDOUT);
		pthread_barrier_destroy(&cx.bar);
		CHECK_OK(shoal_sched_destroy(s));
	}
}

/* Cancelling a cross-thread send while the owner receives: the outcome of
 * the send and of the receive must agree in every round. */
static struct {
	shoal_chan *in_b;
	atomic_int go, done;
	int recv_rc, recv_val;
	int rounds;
	pthread_barrier_t bar;
} cr;

static void *cancel_race_b(void *arg)
{
	shoal_sched *s = sh_test_sched_new();
	cr.in_b = sh_test_chan_new(sizeof(int), 0);
	pthread_barrier_wait(&cr.bar);
	for (int i = 1; i <= cr.rounds; i++) {
		fiber_wait_flag(&cr.go, i);
		int v = -1;
		/* receive around the time A cancels */
		cr.recv_rc = shoal_chan_recv(cr.in_b, &v, shoal_deadline_in((i % 4) * 100000));
		cr.recv_val = v;
		atomic_store(&cr.done, i);
	}
	pthread_barrier_wait(&cr.bar);
	CHECK_OK(shoal_chan_destroy(cr.in_b));
	CHECK_OK(shoal_sched_destroy(s));
	return NULL;
}

static void *race_cross_sender(void *arg)
{
	int v = (int)(intptr_t)arg;
	return (void *)(intptr_t)shoal_chan_send(cr.in_b, &v, SHOAL_FOREVER);
}

SH_TEST_T(cancel_cross_thread_send_races_receiver, 120)
{
	shoal_sched *s = sh_test_sched_new();
	cr.rounds = sh_test_sanitized() ? 50 : 300;
	CHECK(pthread_barrier_init(&cr.bar, NULL, 2) == 0);
	pthread_t tb;
	start(&tb, cancel_race_b, NULL);
	pthread_barrier_wait(&cr.bar);
	int delivered = 0, cancelled = 0;
	for (int i = 1; i <= cr.rounds; i++) {
		shoal_fiber *f;
		CHECK_OK(shoal_spawn(&f, race_cross_sender, (void *)(intptr_t)i, NULL));
		CHECK_OK(shoal_yield()); /* it is now blocked in the send */
		atomic_store(&cr.go, i);
		for (int k = 0; k < i % 3; k++)
			CHECK_OK(shoal_yield());
		CHECK_OK(shoal_cancel(f));
		void *r;
		CHECK_OK(shoal_join(f, &r));
		int send_rc = (int)(intptr_t)r;
		fiber_wait_flag(&cr.done, i);
		if (send_rc == 0) {
			if (cr.recv_rc != 0 || cr.recv_val != i)
				sh_test_fail(__FILE__, __LINE__, "round %d: send ok, recv %s (%d)",
					     i, shoal_strerror(cr.recv_rc), cr.recv_val);
			delivered++;
		} else {
			CHECK_RC(send_rc, SHOAL_ECANCELED);
			if (cr.recv_rc == 0)
				sh_test_fail(__FILE__, __LINE__,
					     "round %d: send cancelled, yet %d received", i,
					     cr.recv_val);
			cancelled++;
		}
	}
	pthread_barrier_wait(&cr.bar);
	CHECK(pthread_join(tb, NULL) == 0);
	CHECK_EQ(delivered + cancelled, cr.rounds);
	pthread_barrier_destroy(&cr.bar);
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* ---- handles of another scheduler ---------------------------------------------- */

static struct {
	shoal_fiber *fb;
	shoal_chan *cb;
	atomic_int step;
} fx;

static void *b_blocked(void *arg)
{
	int v;
	return (void *)(intptr_t)shoal_chan_recv(fx.cb, &v, SHOAL_FOREVER);
}

static void *foreign_owner(void *arg)
{
	shoal_sched *s = sh_test_sched_new();
	fx.cb = sh_test_chan_new(sizeof(int), 0);
	CHECK_OK(shoal_spawn(&fx.fb, b_blocked, NULL, NULL));
	CHECK_OK(shoal_yield());
	atomic_store(&fx.step, 1);
	fiber_wait_flag(&fx.step, 2);
	void *r;
	CHECK_OK(shoal_join(fx.fb, &r));
	CHECK_RC((int)(intptr_t)r, SHOAL_ECLOSED);
	CHECK_OK(shoal_chan_destroy(fx.cb));
	CHECK_OK(shoal_sched_destroy(s));
	return NULL;
}

SH_TEST(foreign_handles_rejected)
{
	shoal_sched *s = sh_test_sched_new();
	pthread_t t;
	start(&t, foreign_owner, NULL);
	fiber_wait_flag(&fx.step, 1);
	/* a fiber of another scheduler cannot be joined from here */
	CHECK_RC(shoal_join(fx.fb, NULL), SHOAL_EINVAL);
	CHECK_RC(shoal_join_until(fx.fb, NULL, SHOAL_NOWAIT), SHOAL_EINVAL);
	/* nor its channel received from */
	int v;
	CHECK_RC(shoal_chan_recv(fx.cb, &v, SHOAL_NOWAIT), SHOAL_EINVAL);
	/* but it may be closed from here */
	CHECK_OK(shoal_chan_close(fx.cb));
	atomic_store(&fx.step, 2);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK_OK(shoal_sched_destroy(s));
}

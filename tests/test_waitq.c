/* shoal-test: threaded */
/* Tests for the fiber layer's wait queues (fiber/waitq.h), what the store's
 * waits for room and for its connections' end block on: a wake makes every
 * waiter runnable with 0, a waiter leaves the queue at its deadline or a
 * cancel, a wake and a deadline together wake it once, the root fiber
 * waits too, and an empty queue's wake does nothing; and a fiber's wait on
 * an eventfd another thread rings. */
#include "test.h"

#include "fiber/waitq.h"
#include "shoal_impl.h"

#include <errno.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static sh_waitq q;
static int woken;

static void *waiter(void *arg)
{
	int64_t deadline = *(const int64_t *)arg;
	int rc = sh_waitq_wait(&q, deadline);
	if (rc == 0)
		woken++;
	return (void *)(intptr_t)rc;
}

static void *waker(void *arg)
{
	(void)arg;
	sh_waitq_wake_all(&q);
	return NULL;
}

SH_TEST(wake_all_wakes_every_waiter)
{
	shoal_sched *s = sh_test_sched_new();
	woken = 0;
	int64_t forever = SHOAL_FOREVER;
	shoal_fiber *f[5];
	for (int i = 0; i < 5; i++)
		CHECK_OK(shoal_spawn(&f[i], waiter, &forever, NULL));
	CHECK_OK(shoal_yield()); /* all wait */
	CHECK(q.head != NULL);
	CHECK_EQ(woken, 0);
	sh_waitq_wake_all(&q);
	CHECK(q.head == NULL);
	for (int i = 0; i < 5; i++) {
		void *res;
		CHECK_OK(shoal_join(f[i], &res));
		CHECK_EQ((intptr_t)res, 0);
	}
	CHECK_EQ(woken, 5);
	sh_waitq_wake_all(&q); /* empty: nothing */
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(deadline_and_cancel_leave_the_queue)
{
	shoal_sched *s = sh_test_sched_new();
	woken = 0;
	int64_t soon = shoal_deadline_in(20 * 1000000LL), forever = SHOAL_FOREVER;
	shoal_fiber *late, *gone, *stays;
	CHECK_OK(shoal_spawn(&late, waiter, &soon, NULL));
	CHECK_OK(shoal_spawn(&gone, waiter, &forever, NULL));
	CHECK_OK(shoal_spawn(&stays, waiter, &forever, NULL));
	CHECK_OK(shoal_yield());
	void *res;
	CHECK_OK(shoal_join(late, &res));
	CHECK_EQ((intptr_t)res, SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() >= soon);
	CHECK_OK(shoal_cancel(gone));
	CHECK_OK(shoal_join(gone, &res));
	CHECK_EQ((intptr_t)res, SHOAL_ECANCELED);
	/* the two that left unlinked themselves: one waiter is left */
	CHECK(q.head != NULL);
	sh_waitq_wake_all(&q);
	CHECK_OK(shoal_join(stays, &res));
	CHECK_EQ((intptr_t)res, 0);
	CHECK_EQ(woken, 1);
	/* an expired deadline returns at once, queueing nothing */
	CHECK_EQ(sh_waitq_wait(&q, shoal_now_ns() - 1), SHOAL_ETIMEDOUT);
	CHECK(q.head == NULL);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(a_wake_and_a_deadline_together_wake_once)
{
	shoal_sched *s = sh_test_sched_new();
	woken = 0;
	int64_t soon = shoal_deadline_in(5 * 1000000LL);
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, waiter, &soon, NULL));
	CHECK_OK(shoal_yield());
	/* the root spins past the waiter's deadline without letting it run,
	 * then a wake comes: whichever the scheduler sees first, its timer
	 * or the wake, the waiter returns once and the queue is left empty */
	while (shoal_now_ns() < soon + 2 * 1000000LL)
		;
	shoal_fiber *w;
	CHECK_OK(shoal_spawn(&w, waker, NULL, NULL));
	CHECK_OK(shoal_join(w, NULL));
	void *res;
	CHECK_OK(shoal_join(f, &res));
	CHECK(q.head == NULL);
	CHECK((intptr_t)res == 0 || (intptr_t)res == SHOAL_ETIMEDOUT);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(the_root_fiber_waits)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *w;
	CHECK_OK(shoal_spawn(&w, waker, NULL, NULL));
	CHECK_OK(sh_waitq_wait(&q, shoal_deadline_in(5 * 1000000000LL)));
	CHECK_OK(shoal_join(w, NULL));
	CHECK(q.head == NULL);
	CHECK_OK(shoal_sched_destroy(s));
}

/* A fiber's wait on an eventfd another thread rings (sh_efd_wait): it
 * takes the count, times out at its deadline, and a cancel ends it. */
static void *ring_later(void *arg)
{
	int efd = *(int *)arg;
	struct timespec ts = {0, 20 * 1000000};
	nanosleep(&ts, NULL);
	sh_eventfd_signal(efd);
	return NULL;
}

SH_TEST(a_fiber_waits_on_an_eventfd_another_thread_rings)
{
	shoal_sched *s = sh_test_sched_new();
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	CHECK(efd >= 0);
	CHECK_RC(sh_efd_wait(efd, shoal_deadline_in(10 * MS)), SHOAL_ETIMEDOUT);
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, ring_later, &efd));
	CHECK_OK(sh_efd_wait(efd, shoal_deadline_in(10000 * MS)));
	CHECK_OK(pthread_join(t, NULL));
	uint64_t v;
	CHECK(read(efd, &v, sizeof(v)) < 0 && errno == EAGAIN); /* the count was taken */
	shoal_fd_forget(efd);
	close(efd);
	CHECK_OK(shoal_sched_destroy(s));
}

/* Wait queues (waitq.h), on the scheduler's parking (fiber_impl.h): a
 * waiter parks with its node on its own stack, linked in the queue; a wake
 * unlinks every node and unparks its fiber. And a fiber's wait on an
 * eventfd another thread rings, and the run of blocking work on a thread
 * of its own while a fiber waits for it. */
#include "fiber/waitq.h"
#include "fiber/fiber_impl.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct sh_waitq_node {
	shoal_fiber *f;
	sh_waitq_node *next, **pprev; /* pprev NULL: out of the queue */
};

int sh_waitq_wait(sh_waitq *q, int64_t deadline)
{
	sh_waitq_node n = {.f = shoal_self(), .next = q->head, .pprev = &q->head};
	if (!n.f)
		return SHOAL_EINVAL;
	if (q->head)
		q->head->pprev = &n.next;
	q->head = &n;
	int rc = sh_fiber_park(deadline);
	if (n.pprev) { /* not woken by the queue: the deadline, a cancel */
		*n.pprev = n.next;
		if (n.next)
			n.next->pprev = n.pprev;
	}
	return rc;
}

void sh_waitq_wake_all(sh_waitq *q)
{
	sh_waitq_node *n = q->head;
	q->head = NULL;
	while (n) {
		sh_waitq_node *next = n->next;
		n->pprev = NULL;
		/* EINVAL: its deadline or a cancel woke it already; it runs and
		 * finds itself out of the queue */
		sh_fiber_unpark(n->f, 0);
		n = next;
	}
}

int sh_efd_wait(int efd, int64_t deadline)
{
	for (;;) {
		uint64_t v;
		if (read(efd, &v, sizeof(v)) == (ssize_t)sizeof(v))
			return 0;
		int rc = shoal_fd_wait(efd, SHOAL_FD_IN, deadline, NULL);
		if (rc)
			return rc;
	}
}

void sh_fd_close(int fd)
{
	if (fd < 0)
		return;
	shoal_fd_forget(fd); /* SHOAL_EINVAL without a scheduler, ENOENT if never waited on */
	close(fd);
}

/* The threads that run work aside: started as jobs come (at most
 * ASIDE_THREADS), kept for the process's life, so a job costs a queue and
 * a wake, not a thread's start (which a restore of a 4 KiB object would
 * pay a hundred times over). */
#define ASIDE_THREADS 4

typedef struct aside_job {
	const char *name;
	void (*fn)(void *);
	void *arg;
	int efd;
	struct aside_job *next;
} aside_job;

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	aside_job *head, *tail;
	int threads, idle;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0};

static void *aside_main(void *p)
{
	(void)p;
	for (;;) {
		pthread_mutex_lock(&pool.mu);
		while (!pool.head) {
			pool.idle++;
			pthread_cond_wait(&pool.cv, &pool.mu);
			pool.idle--;
		}
		aside_job *j = pool.head;
		if (!(pool.head = j->next))
			pool.tail = NULL;
		pthread_mutex_unlock(&pool.mu);
		pthread_setname_np(pthread_self(), j->name);
		j->fn(j->arg);
		int efd = j->efd; /* j is the waiter's: gone once it reads */
		uint64_t one = 1;
		while (write(efd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
	}
	return NULL;
}

/* Queues j: false when no thread runs it nor can be started. */
static bool aside_queue(aside_job *j)
{
	pthread_mutex_lock(&pool.mu);
	if (pool.idle == 0 && pool.threads < ASIDE_THREADS) {
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &at, aside_main, NULL) == 0)
			pool.threads++;
		pthread_attr_destroy(&at);
	}
	bool ok = pool.threads > 0;
	if (ok) {
		j->next = NULL;
		if (pool.tail)
			pool.tail->next = j;
		else
			pool.head = j;
		pool.tail = j;
		pthread_cond_signal(&pool.cv);
	}
	pthread_mutex_unlock(&pool.mu);
	return ok;
}

int sh_run_aside(const char *name, void (*fn)(void *), void *arg)
{
	aside_job j = {.name = name, .fn = fn, .arg = arg};
	if (!shoal_self() || (j.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    !aside_queue(&j)) {
		if (shoal_self() && j.efd >= 0)
			close(j.efd);
		fn(arg); /* here, then */
		return 0;
	}
	int w = sh_efd_wait(j.efd, SHOAL_FOREVER);
	if (w != 0) {
		/* cancelled: fn's arguments are the caller's, so its end is
		 * waited for all the same, blocking the thread */
		struct pollfd pf = {.fd = j.efd, .events = POLLIN};
		while (poll(&pf, 1, -1) < 0 && errno == EINTR)
			;
	}
	sh_fd_close(j.efd);
	return w;
}

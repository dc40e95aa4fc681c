/* Wait queues (waitq.h), on the scheduler's parking (fiber_impl.h): a
 * waiter parks with its node on its own stack, linked in the queue; a wake
 * unlinks every node and unparks its fiber. And a fiber's wait on an
 * eventfd another thread rings, and the run of blocking work on a thread
 * of its own while a fiber waits for it. */
#include "fiber/waitq.h"
#include "fiber/fiber_impl.h"

#include <errno.h>
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

typedef struct aside_job {
	const char *name;
	void (*fn)(void *);
	void *arg;
	int efd;
} aside_job;

static void *aside_main(void *p)
{
	aside_job *j = p;
	pthread_setname_np(pthread_self(), j->name);
	j->fn(j->arg);
	uint64_t one = 1;
	while (write(j->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	return NULL;
}

int sh_run_aside(const char *name, void (*fn)(void *), void *arg)
{
	aside_job j = {.name = name, .fn = fn, .arg = arg};
	pthread_t th;
	if (!shoal_self() || (j.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    pthread_create(&th, NULL, aside_main, &j) != 0) {
		if (shoal_self() && j.efd >= 0)
			close(j.efd);
		fn(arg); /* here, then */
		return 0;
	}
	int w = sh_efd_wait(j.efd, SHOAL_FOREVER);
	/* at once, but for a cancel: fn's arguments are the caller's */
	pthread_join(th, NULL);
	sh_fd_close(j.efd);
	return w;
}

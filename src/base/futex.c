/* Waking a sleeper: futexes, eventfds and doorbells. Private futexes serve
 * threads of one process (the fiber layer's cross-thread operations);
 * shared ones serve words in shared memory that another process wakes (a
 * ring's wait flags). An eventfd no other process holds wakes whoever
 * waits in epoll (a scheduler's inbox, a server's stop). A doorbell that
 * another process rings is a pipe whose read end only its maker holds
 * (sh_bell_*): on a shared eventfd the peer could clear O_NONBLOCK, or
 * fill it, and make our next read or write block a whole thread. Deadlines
 * are absolute CLOCK_MONOTONIC nanoseconds. */
#include "shoal_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int sh_futex_wait(_Atomic uint32_t *addr, uint32_t val, int64_t deadline, bool shared)
{
	struct timespec ts, *tsp = NULL;
	if (deadline != SHOAL_FOREVER) {
		if (deadline < 0)
			deadline = 0;
		ts.tv_sec = deadline / 1000000000;
		ts.tv_nsec = deadline % 1000000000;
		tsp = &ts;
	}
	int op = FUTEX_WAIT_BITSET | (shared ? 0 : FUTEX_PRIVATE_FLAG);
	if (syscall(SYS_futex, addr, op, val, tsp, NULL, FUTEX_BITSET_MATCH_ANY) == 0)
		return 0;
	if (errno == ETIMEDOUT)
		return SHOAL_ETIMEDOUT;
	return 0; /* EAGAIN (the word changed) and EINTR: the caller re-checks */
}

void sh_futex_wake(_Atomic uint32_t *addr, bool shared)
{
	int op = FUTEX_WAKE | (shared ? 0 : FUTEX_PRIVATE_FLAG);
	syscall(SYS_futex, addr, op, INT_MAX, NULL, NULL, 0);
}

void sh_eventfd_signal(int fd)
{
	uint64_t one = 1;
	ssize_t n;
	do
		n = write(fd, &one, sizeof(one));
	while (n < 0 && errno == EINTR);
}

void sh_eventfd_drain(int fd)
{
	uint64_t v;
	ssize_t n;
	do
		n = read(fd, &v, sizeof(v));
	while (n < 0 && errno == EINTR);
}

int sh_bell_pair(int *wait_fd, int *ring_fd)
{
	int p[2];
	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
		return -errno;
	*wait_fd = p[0];
	*ring_fd = p[1];
	return 0;
}

void sh_bell_ring(int fd)
{
	/* A full pipe already wakes its reader: EAGAIN is a ring too. */
	static const char one = 1;
	struct iovec v = {.iov_base = (void *)(uintptr_t)&one, .iov_len = 1};
	ssize_t n;
	while ((n = vmsplice(fd, &v, 1, SPLICE_F_NONBLOCK)) < 0 && errno == EINTR)
		;
	if (n < 0 && errno == EBADF) /* not a pipe: an eventfd of our own */
		sh_eventfd_signal(fd);
}

void sh_bell_drain(int fd)
{
	char buf[256];
	ssize_t n;
	do
		n = read(fd, buf, sizeof(buf));
	while (n == (ssize_t)sizeof(buf) || (n < 0 && errno == EINTR));
}

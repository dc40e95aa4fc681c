/* Tests for fd waits through the scheduler's epoll poller: readable and
 * writable waits on socketpairs and pipes, hundreds of concurrent echo
 * pairs, hang-up and error reporting, one waiter per direction,
 * shoal_fd_forget, deadlines, readiness that arrives between waits, the
 * interplay with timers, and that busy fibers cannot starve fd waiters. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

static void sockpair(int sv[2])
{
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
}

static void nbpipe(int p[2])
{
	CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
}

static int64_t slack(void)
{
	return (sh_test_sanitized() ? 6000 : 2000) * MS;
}

/* Waits for one direction; a 0 return may be spurious, so callers retry
 * their operation. A generous deadline turns a lost wakeup into a failure
 * with a message instead of a hang. */
static void wait_fd(int fd, unsigned ev)
{
	int rc = shoal_fd_wait(fd, ev, shoal_deadline_in(10000 * MS), NULL);
	if (rc != 0)
		sh_test_fail(__FILE__, __LINE__, "fd_wait(%d, %#x): %s", fd, ev,
			     shoal_strerror(rc));
}

static void write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EAGAIN) {
			wait_fd(fd, SHOAL_FD_OUT);
		} else {
			sh_test_fail(__FILE__, __LINE__, "write(%d): %s", fd, strerror(errno));
		}
	}
}

/* Reads up to n bytes, waiting while none are there; 0 at end of file. */
static size_t read_some(int fd, void *buf, size_t n)
{
	for (;;) {
		ssize_t r = read(fd, buf, n);
		if (r >= 0)
			return (size_t)r;
		if (errno != EAGAIN)
			sh_test_fail(__FILE__, __LINE__, "read(%d): %s", fd, strerror(errno));
		wait_fd(fd, SHOAL_FD_IN);
	}
}

static void read_all(int fd, void *buf, size_t n)
{
	char *p = buf;
	while (n > 0) {
		size_t r = read_some(fd, p, n);
		CHECK(r > 0); /* no early EOF */
		p += r;
		n -= r;
	}
}

static void forget_close(int fd)
{
	int rc = shoal_fd_forget(fd);
	CHECK(rc == 0 || rc == SHOAL_ENOENT);
	close(fd);
}

/* ---- basic readiness -------------------------------------------------------- */

struct rd {
	int fd;
	int rc;
	unsigned rev;
	char buf[64];
	size_t n;
	int done;
	int64_t at;
};

static void *reader_fn(void *arg)
{
	struct rd *r = arg;
	r->n = read_some(r->fd, r->buf, sizeof r->buf);
	r->at = shoal_now_ns();
	r->done = 1;
	return NULL;
}

SH_TEST(readable_after_peer_writes)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	struct rd r = {.fd = sv[0]};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, reader_fn, &r, NULL));
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_yield());
	CHECK_EQ(r.done, 0);
	CHECK(write(sv[1], "hello", 5) == 5);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_EQ(r.n, 5);
	CHECK(memcmp(r.buf, "hello", 5) == 0);

	/* again on the now-registered fd (the path without a system call) */
	r = (struct rd){.fd = sv[0]};
	CHECK_OK(shoal_spawn(&f, reader_fn, &r, NULL));
	CHECK_OK(shoal_yield());
	CHECK_EQ(r.done, 0);
	CHECK(write(sv[1], "again!", 6) == 6);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_EQ(r.n, 6);
	CHECK(memcmp(r.buf, "again!", 6) == 0);

	/* a pipe, with the root itself waiting (the scheduler idles in epoll) */
	int p[2];
	nbpipe(p);
	unsigned rev = 0;
	CHECK(write(p[1], "x", 1) == 1);
	int64_t t0 = shoal_now_ns();
	int rc = shoal_fd_wait(p[0], SHOAL_FD_IN, shoal_deadline_in(5000 * MS), &rev);
	CHECK_OK(rc);
	CHECK(rev & SHOAL_FD_IN);
	CHECK(shoal_now_ns() - t0 < slack()); /* already readable: no wait */
	char c;
	CHECK(read(p[0], &c, 1) == 1 && c == 'x');
	forget_close(p[0]);
	forget_close(p[1]);
	forget_close(sv[0]);
	forget_close(sv[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(writable_when_buffer_drains)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	unsigned rev = 0;
	/* a fresh socket is writable */
	CHECK_OK(shoal_fd_wait(sv[0], SHOAL_FD_OUT, shoal_deadline_in(5000 * MS), &rev));
	CHECK(rev & SHOAL_FD_OUT);
	/* fill it */
	static char junk[65536];
	size_t filled = 0;
	for (;;) {
		ssize_t w = write(sv[0], junk, sizeof junk);
		if (w < 0) {
			CHECK(errno == EAGAIN);
			break;
		}
		filled += (size_t)w;
	}
	CHECK(filled > 0);
	/* full: OUT waits time out (any 0 must be spurious: still full) */
	int rc;
	int64_t d = shoal_deadline_in(30 * MS);
	while ((rc = shoal_fd_wait(sv[0], SHOAL_FD_OUT, d, &rev)) == 0)
		CHECK(write(sv[0], junk, 1) < 0 && errno == EAGAIN);
	CHECK_RC(rc, SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() >= d);
	/* drain from another fiber: the writer wakes */
	struct rd r = {.fd = sv[1]};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, reader_fn, &r, NULL)); /* reads 64 bytes */
	CHECK_OK(shoal_join(f, NULL));
	size_t drained = r.n;
	char big[65536];
	while (drained < filled) {
		ssize_t n = read(sv[1], big, sizeof big);
		if (n <= 0)
			break;
		drained += (size_t)n;
	}
	CHECK_EQ(drained, filled);
	rev = 0;
	CHECK_OK(shoal_fd_wait(sv[0], SHOAL_FD_OUT, shoal_deadline_in(5000 * MS), &rev));
	CHECK(write(sv[0], "y", 1) == 1);
	forget_close(sv[0]);
	forget_close(sv[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- echo pairs --------------------------------------------------------------- */

enum { NPAIRS = 200, MSG = 64 };
static int echo_rounds;
static int echo_ok;

static void *echo_server(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[256];
	for (;;) {
		size_t n = read_some(fd, buf, sizeof buf);
		if (n == 0)
			break;
		write_all(fd, buf, n);
	}
	forget_close(fd);
	return NULL;
}

static void *echo_client(void *arg)
{
	int fd = (int)((intptr_t)arg & 0xffff);
	int id = (int)((intptr_t)arg >> 16);
	unsigned char out[MSG], in[MSG];
	for (int r = 0; r < echo_rounds; r++) {
		for (int i = 0; i < MSG; i++)
			out[i] = (unsigned char)(id * 131 + r * 17 + i);
		write_all(fd, out, MSG);
		read_all(fd, in, MSG);
		if (memcmp(in, out, MSG) != 0)
			sh_test_fail(__FILE__, __LINE__, "pair %d round %d: echo differs", id, r);
	}
	echo_ok++;
	forget_close(fd); /* the server sees EOF */
	return NULL;
}

SH_TEST(many_echo_pairs)
{
	shoal_sched *s = sh_test_sched_new();
	echo_rounds = sh_test_sanitized() ? 10 : 50;
	shoal_fiber *srv[NPAIRS], *cli[NPAIRS];
	for (int i = 0; i < NPAIRS; i++) {
		int sv[2];
		sockpair(sv);
		CHECK(sv[0] < 0xffff);
		CHECK_OK(shoal_spawn(&srv[i], echo_server, (void *)(intptr_t)sv[1], NULL));
		CHECK_OK(shoal_spawn(&cli[i], echo_client,
				     (void *)(intptr_t)(((intptr_t)i << 16) | sv[0]), NULL));
	}
	for (int i = 0; i < NPAIRS; i++) {
		CHECK_OK(shoal_join(cli[i], NULL));
		CHECK_OK(shoal_join(srv[i], NULL));
	}
	CHECK_EQ(echo_ok, NPAIRS);
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

struct bulk {
	int fd;
	size_t len;
	uint64_t sum;
};

static void *bulk_writer(void *arg)
{
	struct bulk *b = arg;
	static unsigned char chunk[100000];
	size_t sent = 0;
	while (sent < b->len) {
		size_t n = b->len - sent < sizeof chunk ? b->len - sent : sizeof chunk;
		for (size_t i = 0; i < n; i++)
			chunk[i] = (unsigned char)((sent + i) * 2654435761u >> 13);
		write_all(b->fd, chunk, n);
		sent += n;
	}
	CHECK(shutdown(b->fd, SHUT_WR) == 0);
	return NULL;
}

static void *bulk_reader(void *arg)
{
	struct bulk *b = arg;
	static unsigned char buf[70000];
	size_t got = 0;
	for (;;) {
		size_t n = read_some(b->fd, buf, sizeof buf);
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			if (buf[i] != (unsigned char)((got + i) * 2654435761u >> 13))
				sh_test_fail(__FILE__, __LINE__, "byte %zu differs", got + i);
		got += n;
	}
	b->len = got;
	return NULL;
}

SH_TEST(bulk_transfer_partial_writes)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	size_t len = (size_t)(sh_test_sanitized() ? 2 : 16) << 20;
	struct bulk w = {.fd = sv[0], .len = len}, r = {.fd = sv[1]};
	shoal_fiber *fw, *fr;
	CHECK_OK(shoal_spawn(&fw, bulk_writer, &w, NULL));
	CHECK_OK(shoal_spawn(&fr, bulk_reader, &r, NULL));
	CHECK_OK(shoal_join(fw, NULL));
	CHECK_OK(shoal_join(fr, NULL));
	CHECK_EQ(r.len, len);
	forget_close(sv[0]);
	forget_close(sv[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- hang-up and errors --------------------------------------------------------- */

struct hup {
	int fd;
	unsigned ev;
	unsigned seen;
	int rc;
};

static void *hup_waiter(void *arg)
{
	struct hup *h = arg;
	for (int i = 0; i < 100; i++) {
		unsigned rev = 0;
		h->rc = shoal_fd_wait(h->fd, h->ev, shoal_deadline_in(5000 * MS), &rev);
		if (h->rc != 0)
			break;
		h->seen |= rev;
		if (rev & (SHOAL_FD_HUP | SHOAL_FD_ERR))
			break;
	}
	return NULL;
}

SH_TEST(hup_and_err_reported)
{
	shoal_sched *s = sh_test_sched_new();
	/* socket peer closed: HUP (and readable, for the EOF) */
	int sv[2];
	sockpair(sv);
	struct hup h = {.fd = sv[0], .ev = SHOAL_FD_IN};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, hup_waiter, &h, NULL));
	CHECK_OK(shoal_yield());
	close(sv[1]);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(h.rc);
	CHECK(h.seen & SHOAL_FD_HUP);
	char c;
	CHECK(read(sv[0], &c, 1) == 0);
	forget_close(sv[0]);

	/* pipe writer closed: the reader sees HUP */
	int p[2];
	nbpipe(p);
	h = (struct hup){.fd = p[0], .ev = SHOAL_FD_IN};
	CHECK_OK(shoal_spawn(&f, hup_waiter, &h, NULL));
	CHECK_OK(shoal_yield());
	close(p[1]);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(h.rc);
	CHECK(h.seen & SHOAL_FD_HUP);
	forget_close(p[0]);

	/* pipe reader closed under a blocked writer: ERR */
	nbpipe(p);
	static char junk[65536];
	while (write(p[1], junk, sizeof junk) > 0)
		;
	CHECK(errno == EAGAIN);
	h = (struct hup){.fd = p[1], .ev = SHOAL_FD_OUT};
	CHECK_OK(shoal_spawn(&f, hup_waiter, &h, NULL));
	CHECK_OK(shoal_yield());
	close(p[0]);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(h.rc);
	CHECK(h.seen & SHOAL_FD_ERR);
	forget_close(p[1]);
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* ---- one waiter per direction ---------------------------------------------------- */

struct dirw {
	int fd;
	int rc;
	int done;
};

static void *wait_in_once(void *arg)
{
	struct dirw *w = arg;
	w->rc = shoal_fd_wait(w->fd, SHOAL_FD_IN, shoal_deadline_in(10000 * MS), NULL);
	w->done = 1;
	return NULL;
}

static void *read_one(void *arg)
{
	struct dirw *w = arg;
	char c;
	CHECK_EQ(read_some(w->fd, &c, 1), 1);
	w->done = 1;
	return NULL;
}

static void *write_one(void *arg)
{
	struct dirw *w = arg;
	write_all(w->fd, "z", 1);
	w->done = 1;
	return NULL;
}

SH_TEST(one_waiter_per_direction)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	/* fill sv[0]'s send path so a writer must wait */
	static char junk[65536];
	while (write(sv[0], junk, sizeof junk) > 0)
		;
	CHECK(errno == EAGAIN);
	struct dirw a = {.fd = sv[0]}, b = {.fd = sv[0]}, w = {.fd = sv[0]};
	shoal_fiber *fa, *fb, *fw;
	CHECK_OK(shoal_spawn(&fa, read_one, &a, NULL));
	CHECK_OK(shoal_spawn(&fw, write_one, &w, NULL)); /* the other direction is fine */
	CHECK_OK(shoal_yield());
	CHECK_OK(shoal_spawn(&fb, wait_in_once, &b, NULL));
	CHECK_OK(shoal_yield());
	CHECK_EQ(b.done, 1);
	CHECK_RC(b.rc, SHOAL_EBUSY);
	/* the root is a fiber like any other, and is refused at once */
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_fd_wait(sv[0], SHOAL_FD_IN, shoal_deadline_in(3000 * MS), NULL),
		 SHOAL_EBUSY);
	CHECK(shoal_now_ns() - t0 < 1000 * MS);
	CHECK_EQ(a.done, 0);
	CHECK_EQ(w.done, 0);
	/* readable: the reader wakes, the writer stays blocked */
	CHECK(write(sv[1], "r", 1) == 1);
	CHECK_OK(shoal_join(fa, NULL));
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_yield());
	CHECK_EQ(w.done, 0);
	/* drain: the writer wakes */
	static char big[1 << 16];
	while (read(sv[1], big, sizeof big) > 0)
		;
	CHECK_OK(shoal_join(fw, NULL));
	CHECK_EQ(w.done, 1);
	CHECK_OK(shoal_join(fb, NULL));
	forget_close(sv[0]);
	forget_close(sv[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- forget ------------------------------------------------------------------------- */

SH_TEST(forget_wakes_waiter_and_unknown_fd)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	struct dirw w = {.fd = sv[0], .rc = 12345};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, wait_in_once, &w, NULL));
	CHECK_OK(shoal_yield());
	CHECK_EQ(w.done, 0);
	CHECK_OK(shoal_fd_forget(sv[0]));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_RC(w.rc, SHOAL_ECLOSED);
	close(sv[0]);

	/* never waited on */
	CHECK_RC(shoal_fd_forget(sv[1]), SHOAL_ENOENT);
	int p[2];
	nbpipe(p);
	CHECK_RC(shoal_fd_forget(p[0]), SHOAL_ENOENT);
	CHECK_RC(shoal_fd_forget(p[1]), SHOAL_ENOENT);
	CHECK_RC(shoal_fd_forget(9999), SHOAL_ENOENT);
	close(p[0]);
	close(p[1]);
	close(sv[1]);

	/* the fd number comes back for a new socket: no stale registration */
	for (int round = 0; round < 5; round++) {
		sockpair(sv);
		struct rd r = {.fd = sv[0]};
		CHECK_OK(shoal_spawn(&f, reader_fn, &r, NULL));
		CHECK_OK(shoal_yield());
		CHECK(write(sv[1], "new", 3) == 3);
		CHECK_OK(shoal_join(f, NULL));
		CHECK_EQ(r.n, 3);
		CHECK_OK(shoal_fd_forget(sv[0]));
		close(sv[0]);
		close(sv[1]);
	}
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

SH_TEST(fd_wait_deadline)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	int rc;
	int64_t d = shoal_deadline_in(30 * MS);
	char c;
	while ((rc = shoal_fd_wait(sv[0], SHOAL_FD_IN, d, NULL)) == 0)
		CHECK(read(sv[0], &c, 1) < 0 && errno == EAGAIN); /* spurious */
	CHECK_RC(rc, SHOAL_ETIMEDOUT);
	int64_t late = shoal_now_ns() - d;
	CHECK(late >= 0 && late < slack());
	/* NOWAIT on a registered, idle fd */
	while ((rc = shoal_fd_wait(sv[0], SHOAL_FD_IN, SHOAL_NOWAIT, NULL)) == 0)
		CHECK(read(sv[0], &c, 1) < 0 && errno == EAGAIN);
	CHECK_RC(rc, SHOAL_ETIMEDOUT);
	/* and the fd still works afterwards */
	struct rd r = {.fd = sv[0]};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, reader_fn, &r, NULL));
	CHECK_OK(shoal_yield());
	CHECK(write(sv[1], "ok", 2) == 2);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_EQ(r.n, 2);
	forget_close(sv[0]);
	forget_close(sv[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* Edge-triggered registration: readiness that arrives while nobody waits
 * (after a read hit EAGAIN, before the next wait) must not be lost. */
struct between {
	int fd;
	int phase;
	int rc;
	char got;
};

static void *between_fn(void *arg)
{
	struct between *b = arg;
	char c;
	CHECK_EQ(read_some(b->fd, &c, 1), 1); /* registers and waits once */
	CHECK(read(b->fd, &c, 1) < 0 && errno == EAGAIN);
	b->phase = 1;
	/* not waiting on the fd while the root writes and the poller runs */
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(60 * MS)), SHOAL_ETIMEDOUT);
	b->phase = 2;
	int64_t d = shoal_deadline_in(3000 * MS);
	for (;;) {
		ssize_t r = read(b->fd, &c, 1);
		if (r == 1)
			break;
		CHECK(r < 0 && errno == EAGAIN);
		b->rc = shoal_fd_wait(b->fd, SHOAL_FD_IN, d, NULL);
		if (b->rc != 0)
			return NULL;
	}
	b->got = c;
	return NULL;
}

SH_TEST(readiness_between_waits_not_lost)
{
	shoal_sched *s = sh_test_sched_new();
	int sv[2];
	sockpair(sv);
	struct between b = {.fd = sv[0]};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, between_fn, &b, NULL));
	CHECK_OK(shoal_yield());
	CHECK(write(sv[1], "1", 1) == 1);
	while (b.phase < 1)
		CHECK_RC(shoal_sleep_until(shoal_deadline_in(1 * MS)), SHOAL_ETIMEDOUT);
	CHECK(write(sv[1], "2", 1) == 1);
	/* idle in the poller while the fiber sleeps: the edge is consumed now */
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(20 * MS)), SHOAL_ETIMEDOUT);
	CHECK_EQ(b.phase, 1);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(b.rc);
	CHECK_EQ(b.got, '2');
	forget_close(sv[0]);
	forget_close(sv[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- timers and the poller together ------------------------------------------------- */

static int64_t sleeper_woke, reader_woke;

static void *sleeper_30(void *arg)
{
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(30 * MS)), SHOAL_ETIMEDOUT);
	sleeper_woke = shoal_now_ns();
	return NULL;
}

static void *pipe_reader(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char c;
	CHECK_EQ(read_some(fd, &c, 1), 1);
	CHECK_EQ(c, 'w');
	reader_woke = shoal_now_ns();
	return NULL;
}

static void *delayed_writer(void *arg)
{
	int fd = (int)(intptr_t)arg;
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(80 * MS)), SHOAL_ETIMEDOUT);
	CHECK(write(fd, "w", 1) == 1);
	return (void *)(intptr_t)shoal_now_ns();
}

SH_TEST(timers_and_fd_waits_coexist)
{
	shoal_sched *s = sh_test_sched_new();
	int p[2];
	nbpipe(p);
	int64_t t0 = shoal_now_ns();
	shoal_fiber *a, *b, *c;
	CHECK_OK(shoal_spawn(&a, pipe_reader, (void *)(intptr_t)p[0], NULL));
	CHECK_OK(shoal_spawn(&b, sleeper_30, NULL, NULL));
	CHECK_OK(shoal_spawn(&c, delayed_writer, (void *)(intptr_t)p[1], NULL));
	void *wrote;
	CHECK_OK(shoal_join(c, &wrote));
	CHECK_OK(shoal_join(a, NULL));
	CHECK_OK(shoal_join(b, NULL));
	/* the sleeper woke while the reader was parked in the poller, and the
	 * reader woke after the write, not at a timer's whim */
	CHECK(sleeper_woke - t0 >= 30 * MS);
	CHECK(sleeper_woke < reader_woke);
	CHECK(reader_woke >= (int64_t)(intptr_t)wrote);
	CHECK(reader_woke - t0 >= 80 * MS);
	CHECK(reader_woke - t0 < 80 * MS + slack());
	forget_close(p[0]);
	forget_close(p[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* A fiber that never blocks but keeps yielding must not keep the poller
 * from running: the fd waiter has to be woken long before it stops. */
static int yields_total;
static int woke_at_yield = -1;
static int waiter_done;
static int yield_fd_w;

static void *busy_yielder(void *arg)
{
	for (int i = 0; i < yields_total; i++) {
		if (i == 10)
			CHECK(write(yield_fd_w, "!", 1) == 1);
		if (waiter_done && woke_at_yield < 0)
			woke_at_yield = i;
		CHECK_OK(shoal_yield());
	}
	return NULL;
}

static void *starved_waiter(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char c;
	/* wait before reading, so the wakeup has to come from the poller */
	int rc;
	while ((rc = shoal_fd_wait(fd, SHOAL_FD_IN, shoal_deadline_in(20000 * MS), NULL)) == 0) {
		if (read(fd, &c, 1) == 1)
			break;
		CHECK(errno == EAGAIN);
	}
	CHECK_OK(rc);
	waiter_done = 1;
	return NULL;
}

SH_TEST(poller_not_starved_by_yielders)
{
	shoal_sched *s = sh_test_sched_new();
	yields_total = sh_test_sanitized() ? 20000 : 100000;
	int p[2];
	nbpipe(p);
	yield_fd_w = p[1];
	shoal_fiber *w, *y;
	CHECK_OK(shoal_spawn(&w, starved_waiter, (void *)(intptr_t)p[0], NULL));
	CHECK_OK(shoal_spawn(&y, busy_yielder, NULL, NULL));
	CHECK_OK(shoal_join(y, NULL));
	CHECK_OK(shoal_join(w, NULL));
	if (woke_at_yield < 0)
		sh_test_fail(__FILE__, __LINE__, "fd waiter woke only after %d yields ended",
			     yields_total);
	/* a poll every scheduler round or every few dozen switches is fine;
	 * waiting for the run queue to empty is not */
	CHECK(woke_at_yield < yields_total / 2);
	forget_close(p[0]);
	forget_close(p[1]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* Descriptors epoll cannot watch must give an answer, not a hang. */
SH_TEST_T(unpollable_fds_answer_promptly, 20)
{
	shoal_sched *s = sh_test_sched_new();
	int64_t t0 = shoal_now_ns();
	int rc = shoal_fd_wait(-1, SHOAL_FD_IN, shoal_deadline_in(5000 * MS), NULL);
	CHECK(rc < 0 && rc != SHOAL_ETIMEDOUT);
	int p[2];
	nbpipe(p);
	close(p[1]);
	int closed_fd = p[1];
	rc = shoal_fd_wait(closed_fd, SHOAL_FD_IN, shoal_deadline_in(5000 * MS), NULL);
	CHECK(rc < 0 && rc != SHOAL_ETIMEDOUT);
	/* a regular file: always ready, or refused, but never a wait */
	int fd = open("/proc/self/exe", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	CHECK(fd >= 0);
	rc = shoal_fd_wait(fd, SHOAL_FD_IN, shoal_deadline_in(5000 * MS), NULL);
	CHECK(rc != SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 < slack());
	forget_close(fd);
	forget_close(p[0]);
	CHECK_OK(shoal_sched_destroy(s));
}

/* shoal-test: threaded */
/* Tests for the shm and ring layers: records cross threads and processes
 * intact and in order through wrap-around, a side with nothing to do
 * sleeps and is woken (futex between threads and processes, a doorbell for a
 * fiber), full rings block and time out, close drains then reports
 * SHOAL_ECLOSED, and a hostile peer's indices and record headers are
 * rejected. Also memfd seals and descriptor passing. Runs under TSan too. */
#include "test.h"

#include "ring/ring.h"
#include "shm/shm.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *__tsan_default_options(void);
__attribute__((used)) const char *__tsan_default_options(void)
{
	return "halt_on_error=1";
}

static void thread_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	CHECK(d != NULL);
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static pid_t my_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Waits until thread tid of this process is asleep in the kernel (state
 * S) and stays so for a few ms (not a moment's wait on a lock of a
 * sanitizer's): a side of a ring that blocks in nothing else, asleep, has
 * set its wait flag and sleeps on it, so the other side's next step must
 * wake it. Seen from /proc, not from the ring, whose counters are its own. */
static void wait_asleep(pid_t tid, const char *who)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	int64_t give_up = shoal_deadline_in(20000 * MS);
	for (int asleep = 0; asleep < 3;) {
		FILE *f = fopen(path, "re");
		CHECK(f != NULL);
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		const char *state = strrchr(buf, ')'); /* "pid (comm) S ..." */
		CHECK(state != NULL && state[1] == ' ');
		asleep = state[2] == 'S' ? asleep + 1 : 0;
		if (!asleep && shoal_now_ns() > give_up)
			sh_test_fail(__FILE__, __LINE__, "the %s never slept (state %c)", who,
				     state[2]);
		thread_sleep_ms(1);
	}
}

/* A ring of cap data bytes in a fresh memfd mapping, formatted. */
struct region {
	int fd;
	void *mem;
	size_t bytes;
};

static struct region region_new(size_t cap)
{
	struct region g = {-1, NULL, 0};
	CHECK_OK(sh_ring_bytes(cap, &g.bytes));
	CHECK_OK(sh_memfd_create("test-ring", g.bytes, false, &g.fd));
	CHECK_OK(sh_shm_map(g.fd, g.bytes, true, &g.mem));
	CHECK_OK(sh_ring_format(g.mem, g.bytes));
	return g;
}

static void region_free(struct region *g)
{
	sh_shm_unmap(g->mem, g->bytes);
	close(g->fd);
}

/* Record i: its length and contents follow from i alone. */
static size_t rec_len(uint64_t i)
{
	return (size_t)((i * 7919) % 700);
}

static void rec_fill(unsigned char *p, uint64_t i, size_t n)
{
	for (size_t k = 0; k < n; k++)
		p[k] = (unsigned char)(i * 31 + k);
}

static int rec_check(const unsigned char *p, uint64_t i, size_t n)
{
	if (n != rec_len(i))
		return 0;
	for (size_t k = 0; k < n; k++)
		if (p[k] != (unsigned char)(i * 31 + k))
			return 0;
	return 1;
}

struct prod_arg {
	void *mem;
	size_t bytes;
	uint64_t n;
	uint32_t spin_ns;
	int rc;
	uint64_t wakes, sleeps; /* the producer's ring's counters, at the end */
	uint64_t pause_at;	/* before record pause_at, wait for ... */
	pid_t consumer;		/* ... this thread to be asleep (0: no pause) */
	_Atomic pid_t tid;	/* the producer's thread, once it runs */
};

static void *producer_main(void *a)
{
	struct prod_arg *pa = a;
	atomic_store(&pa->tid, my_tid());
	sh_ring r;
	pa->rc = sh_ring_attach(&r, pa->mem, pa->bytes, true);
	if (pa->rc)
		return NULL;
	r.spin_ns = pa->spin_ns;
	for (uint64_t i = 0; i < pa->n; i++) {
		void *p;
		size_t n = rec_len(i);
		if (pa->consumer && i == pa->pause_at)
			wait_asleep(pa->consumer, "consumer");
		pa->rc = sh_ring_reserve(&r, n, &p, SHOAL_FOREVER);
		if (pa->rc)
			return NULL;
		rec_fill(p, i, n);
		sh_ring_commit(&r, n);
	}
	pa->wakes = r.wakes;
	pa->sleeps = r.sleeps;
	return NULL;
}

/* n records from a producer thread to us. Twice the stream stops until
 * one side is surely asleep, so both sleep paths run whatever the timing:
 * at n / 4 we wait for the producer to sleep on the full ring; at n / 2
 * it waits for us to sleep on the empty one. */
static void stream_between_threads(uint64_t n, uint32_t spin_ns)
{
	struct region g = region_new(4096);
	struct prod_arg pa = {
		.mem = g.mem, .bytes = g.bytes, .n = n, .spin_ns = spin_ns, .pause_at = n / 2};
	pa.consumer = my_tid();
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, producer_main, &pa), 0);
	sh_ring c;
	CHECK_OK(sh_ring_attach(&c, g.mem, g.bytes, false));
	c.spin_ns = spin_ns;
	for (uint64_t i = 0; i < n; i++) {
		const void *p;
		size_t len;
		if (i == n / 4) {
			while (!atomic_load(&pa.tid))
				thread_sleep_ms(1);
			wait_asleep(atomic_load(&pa.tid), "producer");
		}
		CHECK_OK(sh_ring_peek(&c, &p, &len, SHOAL_FOREVER));
		if (!rec_check(p, i, len))
			sh_test_fail(__FILE__, __LINE__,
				     "record %" PRIu64 ": %zu bytes, expected %zu", i, len,
				     rec_len(i));
		sh_ring_release(&c);
	}
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_OK(pa.rc);
	const void *p;
	size_t len;
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EAGAIN);
	/* each side slept (at least where the other waited for it to), and
	 * the other woke it: it went on, with no deadline to end its sleep */
	if (c.sleeps < 1 || pa.wakes < 1 || pa.sleeps < 1 || c.wakes < 1)
		sh_test_fail(__FILE__, __LINE__,
			     "consumer slept %" PRIu64 " times, woken %" PRIu64
			     " times by the producer; producer slept %" PRIu64 ", woken %" PRIu64,
			     c.sleeps, pa.wakes, pa.sleeps, c.wakes);
	region_free(&g);
}

/* Records of 0 to 699 bytes through a 4 KiB ring: it wraps every few
 * records, with pads, while both sides spin. */
SH_TEST(ring_stream_threads_spinning)
{
	stream_between_threads(sh_test_sanitized() ? 20000 : 200000, 10000);
}

/* The same with no spinning: every empty or full ring is a futex sleep. */
SH_TEST(ring_stream_threads_sleeping)
{
	stream_between_threads(sh_test_sanitized() ? 5000 : 50000, 0);
}

/* A consumer with nothing to read sleeps (not spins) and the producer's
 * commit wakes it; with no producer it times out at its deadline. */
SH_TEST(ring_idle_consumer_sleeps_and_wakes)
{
	struct region g = region_new(4096);
	sh_ring c;
	CHECK_OK(sh_ring_attach(&c, g.mem, g.bytes, false));
	const void *p;
	size_t len;
	/* three times: never early, the best on time, asleep each time */
	int64_t best = INT64_MAX;
	for (int rep = 0; rep < 3; rep++) {
		uint64_t sleeps0 = c.sleeps;
		int64_t d = shoal_deadline_in(50 * MS);
		CHECK_RC(sh_ring_peek(&c, &p, &len, d), SHOAL_ETIMEDOUT);
		int64_t late = shoal_now_ns() - d;
		CHECK(late >= 0);
		best = late < best ? late : best;
		CHECK(c.sleeps > sleeps0);
	}
	CHECK_ON_TIME(best, 50 * MS);

	/* The producer commits only once the consumer is asleep: it must
	 * ring, and the consumer wake (long before a deadline 30 s away, and
	 * past the 20 s the producer gives it to fall asleep). */
	struct prod_arg pa = {.mem = g.mem, .bytes = g.bytes, .n = 1, .pause_at = 0};
	pa.consumer = my_tid();
	pthread_t t;
	c.spin_ns = 0;
	uint64_t sleeps0 = c.sleeps;
	CHECK_EQ(pthread_create(&t, NULL, producer_main, &pa), 0);
	int64_t t0 = shoal_now_ns();
	CHECK_OK(sh_ring_peek(&c, &p, &len, shoal_deadline_in(30000 * MS)));
	int64_t waited = shoal_now_ns() - t0;
	CHECK(rec_check(p, 0, len));
	sh_ring_release(&c);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_OK(pa.rc);
	CHECK(c.sleeps > sleeps0);
	CHECK_EQ(pa.wakes, 1);
	CHECK(waited < 5000 * MS); /* woken, not timed out near the deadline */
	region_free(&g);
}

SH_TEST(ring_full_blocks_then_frees)
{
	struct region g = region_new(4096);
	sh_ring pr, c;
	CHECK_OK(sh_ring_attach(&pr, g.mem, g.bytes, true));
	CHECK_OK(sh_ring_attach(&c, g.mem, g.bytes, false));
	pr.spin_ns = 0;
	unsigned char buf[1000];
	memset(buf, 7, sizeof(buf));
	/* 1000 bytes + 8 of header: four fit in 4096. */
	for (int i = 0; i < 4; i++)
		CHECK_OK(sh_ring_write(&pr, buf, sizeof(buf), SHOAL_NOWAIT));
	CHECK_RC(sh_ring_write(&pr, buf, sizeof(buf), SHOAL_NOWAIT), SHOAL_EAGAIN);
	int64_t t0 = shoal_now_ns();
	CHECK_RC(sh_ring_write(&pr, buf, sizeof(buf), shoal_deadline_in(30 * MS)), SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 >= 30 * MS);
	CHECK_RC(sh_ring_write(&pr, buf, sh_ring_max_payload(&pr) + 1, SHOAL_NOWAIT),
		 SHOAL_EMSGSIZE);
	const void *p;
	size_t len;
	CHECK_OK(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT));
	CHECK_EQ(len, sizeof(buf));
	sh_ring_release(&c);
	CHECK_OK(sh_ring_write(&pr, buf, sizeof(buf), SHOAL_NOWAIT));
	/* The largest record fills the whole ring. The indices are now off
	 * offset 0, so the producer publishes a pad to the end and must wait
	 * until the consumer has skipped it. */
	for (int i = 0; i < 4; i++) {
		CHECK_OK(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT));
		sh_ring_release(&c);
	}
	size_t max = sh_ring_max_payload(&pr);
	void *w;
	CHECK_RC(sh_ring_reserve(&pr, max, &w, SHOAL_NOWAIT), SHOAL_EAGAIN);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EAGAIN); /* skips the pad */
	CHECK_OK(sh_ring_reserve(&pr, max, &w, SHOAL_NOWAIT));
	memset(w, 9, max);
	sh_ring_commit(&pr, max);
	CHECK_OK(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT));
	CHECK_EQ(len, max);
	CHECK_EQ(((const unsigned char *)p)[max - 1], 9);
	sh_ring_release(&c);
	region_free(&g);
}

/* A record as large as the ring after the indices moved off offset 0: the
 * producer publishes a pad, waits for the consumer to skip it, then writes
 * at the start. */
static void *big_consumer(void *a)
{
	struct prod_arg *pa = a;
	sh_ring c;
	pa->rc = sh_ring_attach(&c, pa->mem, pa->bytes, false);
	for (uint64_t i = 0; i < pa->n && !pa->rc; i++) {
		const void *p;
		size_t len;
		pa->rc = sh_ring_peek(&c, &p, &len, SHOAL_FOREVER);
		if (!pa->rc)
			sh_ring_release(&c);
	}
	return NULL;
}

SH_TEST(ring_record_as_large_as_the_ring)
{
	struct region g = region_new(4096);
	sh_ring pr;
	CHECK_OK(sh_ring_attach(&pr, g.mem, g.bytes, true));
	struct prod_arg pa = {.mem = g.mem, .bytes = g.bytes, .n = 3};
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, big_consumer, &pa), 0);
	unsigned char small[24] = {1};
	CHECK_OK(sh_ring_write(&pr, small, sizeof(small), SHOAL_FOREVER));
	size_t max = sh_ring_max_payload(&pr);
	void *w;
	for (int i = 0; i < 2; i++) {
		CHECK_OK(sh_ring_reserve(&pr, max, &w, shoal_deadline_in(10000 * MS)));
		memset(w, i, max);
		sh_ring_commit(&pr, max);
	}
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_OK(pa.rc);
	region_free(&g);
}

static void *close_after(void *a)
{
	sh_ring *pr = a;
	thread_sleep_ms(20);
	sh_ring_close(pr);
	return NULL;
}

/* Close wakes a consumer blocked forever; it drains what was published,
 * then sees SHOAL_ECLOSED; the producer can write no more. */
SH_TEST(ring_close_drains_then_reports_closed)
{
	struct region g = region_new(4096);
	sh_ring pr, c;
	CHECK_OK(sh_ring_attach(&pr, g.mem, g.bytes, true));
	CHECK_OK(sh_ring_attach(&c, g.mem, g.bytes, false));
	c.spin_ns = 0;
	CHECK_OK(sh_ring_write(&pr, "abc", 3, SHOAL_NOWAIT));
	const void *p;
	size_t len;
	CHECK_OK(sh_ring_peek(&c, &p, &len, SHOAL_FOREVER));
	CHECK_EQ(len, 3);
	sh_ring_release(&c);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, close_after, &pr), 0);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_FOREVER), SHOAL_ECLOSED);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_RC(sh_ring_write(&pr, "x", 1, SHOAL_NOWAIT), SHOAL_ECLOSED);
	region_free(&g);
}

/* What a hostile peer can write into the shared header and records. */
SH_TEST(ring_rejects_corrupt_indices_and_records)
{
	struct region g = region_new(4096);
	sh_ring pr, c;
	CHECK_OK(sh_ring_attach(&pr, g.mem, g.bytes, true));
	CHECK_OK(sh_ring_attach(&c, g.mem, g.bytes, false));
	_Atomic uint64_t *tail = (_Atomic uint64_t *)g.mem;
	_Atomic uint64_t *head = (_Atomic uint64_t *)((char *)g.mem + 64);
	unsigned char *data = (unsigned char *)g.mem + SH_RING_HDR_BYTES;
	const void *p;
	size_t len;
	/* A tail beyond the capacity, unaligned, or behind the head. */
	atomic_store(tail, 8192);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EPROTO);
	atomic_store(tail, 12);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EPROTO);
	/* A record longer than what was published, or of an unknown kind. */
	uint32_t hdr[2] = {100, 1};
	memcpy(data, hdr, 8);
	atomic_store(tail, 16);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EPROTO);
	hdr[0] = 8;
	hdr[1] = 77;
	memcpy(data, hdr, 8);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EPROTO);
	/* A pad that does not reach the end of the data area. */
	hdr[0] = 8;
	hdr[1] = 2;
	memcpy(data, hdr, 8);
	CHECK_RC(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT), SHOAL_EPROTO);
	/* A sane record is still read. */
	hdr[1] = 1;
	memcpy(data, hdr, 8);
	CHECK_OK(sh_ring_peek(&c, &p, &len, SHOAL_NOWAIT));
	CHECK_EQ(len, 8);

	/* The producer checks the consumer's index: ahead of its own tail. */
	atomic_store(tail, 0);
	sh_ring pr2;
	CHECK_OK(sh_ring_attach(&pr2, g.mem, g.bytes, true));
	unsigned char big[3000] = {0};
	CHECK_OK(sh_ring_write(&pr2, big, sizeof(big), SHOAL_NOWAIT));
	atomic_store(head, 1u << 20);
	CHECK_RC(sh_ring_write(&pr2, big, sizeof(big), SHOAL_NOWAIT), SHOAL_EPROTO);

	/* Attach checks the header against the size the caller mapped. */
	sh_ring x;
	CHECK_RC(sh_ring_attach(&x, g.mem, g.bytes - 64, false), SHOAL_EPROTO);
	((uint32_t *)((char *)g.mem + 256))[0] ^= 1; /* magic */
	CHECK_RC(sh_ring_attach(&x, g.mem, g.bytes, false), SHOAL_EPROTO);
	(void)pr;
	region_free(&g);
}

/* ---- across processes ------------------------------------------------------ */

/* The child: receives the region's descriptor over the socket, maps it,
 * and answers each 8-byte request with the value plus one until closed. */
static int echo_child(int sock)
{
	char tag;
	size_t got;
	int fd, nfds;
	if (sh_fd_recv(sock, &tag, 1, &got, &fd, 1, &nfds) != 0 || nfds != 1)
		return 10;
	size_t one;
	if (sh_ring_bytes(4096, &one) != 0)
		return 11;
	void *mem;
	if (sh_shm_map(fd, 2 * one, true, &mem) != 0)
		return 12;
	sh_ring req, rep;
	if (sh_ring_attach(&req, mem, one, false) ||
	    sh_ring_attach(&rep, (char *)mem + one, one, true))
		return 13;
	for (;;) {
		const void *p;
		size_t len;
		int rc = sh_ring_peek(&req, &p, &len, SHOAL_FOREVER);
		if (rc == SHOAL_ECLOSED)
			return 0;
		if (rc || len != 8)
			return 14;
		uint64_t v;
		memcpy(&v, p, 8);
		sh_ring_release(&req);
		v++;
		if (sh_ring_write(&rep, &v, 8, SHOAL_FOREVER) != 0)
			return 15;
	}
}

SH_TEST(ring_round_trips_between_processes)
{
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(echo_child(sv[1]));
	}
	close(sv[1]);
	size_t one;
	CHECK_OK(sh_ring_bytes(4096, &one));
	int fd;
	CHECK_OK(sh_memfd_create("test-rpc", 2 * one, false, &fd));
	void *mem;
	CHECK_OK(sh_shm_map(fd, 2 * one, true, &mem));
	CHECK_OK(sh_ring_format(mem, one));
	CHECK_OK(sh_ring_format((char *)mem + one, one));
	pid_t ppid;
	uid_t uid;
	CHECK_OK(sh_peer_cred(sv[0], &ppid, &uid, NULL));
	/* A socketpair's credentials are its creator's, taken at creation. */
	CHECK_EQ(ppid, getpid());
	CHECK_EQ(uid, getuid());
	CHECK_OK(sh_fd_send(sv[0], "r", 1, &fd, 1));
	close(fd);
	sh_ring req, rep;
	CHECK_OK(sh_ring_attach(&req, mem, one, true));
	CHECK_OK(sh_ring_attach(&rep, (char *)mem + one, one, false));
	int n = sh_test_sanitized() ? 2000 : 20000;
	for (int i = 0; i < n; i++) {
		uint64_t v = (uint64_t)i * 3;
		CHECK_OK(sh_ring_write(&req, &v, 8, shoal_deadline_in(10000 * MS)));
		const void *p;
		size_t len;
		CHECK_OK(sh_ring_peek(&rep, &p, &len, shoal_deadline_in(10000 * MS)));
		CHECK_EQ(len, 8);
		uint64_t w;
		memcpy(&w, p, 8);
		sh_ring_release(&rep);
		CHECK_EQ(w, v + 1);
	}
	/* An idle child sleeps; the close wakes it and it exits 0. */
	thread_sleep_ms(20);
	sh_ring_close(&req);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);
	sh_shm_unmap(mem, 2 * one);
	close(sv[0]);
}

/* ---- a fiber consumer on a doorbell ---------------------------------------- */

struct efd_ctx {
	sh_ring *c;
	int got;
	int ticks;
	bool done;
};

static void *efd_consumer(void *a)
{
	struct efd_ctx *x = a;
	for (;;) {
		const void *p;
		size_t len;
		int rc = sh_ring_peek(x->c, &p, &len, shoal_deadline_in(10000 * MS));
		if (rc == SHOAL_ECLOSED)
			break;
		if (rc)
			return (void *)(intptr_t)rc;
		x->got++;
		sh_ring_release(x->c);
	}
	x->done = true;
	return NULL;
}

static void *efd_ticker(void *a)
{
	struct efd_ctx *x = a;
	while (!x->done) {
		x->ticks++;
		shoal_sleep_until(shoal_deadline_in(1 * MS));
	}
	return NULL;
}

struct efd_prod {
	void *mem;
	size_t bytes;
	int efd;
	int n;
};

static void *efd_producer(void *a)
{
	struct efd_prod *e = a;
	sh_ring pr;
	if (sh_ring_attach(&pr, e->mem, e->bytes, true) != 0)
		return NULL;
	pr.wake_efd = e->efd;
	for (int i = 0; i < e->n; i++) {
		thread_sleep_ms(5);
		sh_ring_write(&pr, &i, sizeof(i), SHOAL_FOREVER);
	}
	sh_ring_close(&pr);
	return NULL;
}

/* A fiber waiting on a ring blocks only itself: the other fiber of its
 * scheduler keeps running, and the producer rings the doorbell's pipe. */
SH_TEST(ring_fiber_waits_on_doorbell)
{
	shoal_sched *s = sh_test_sched_new();
	struct region g = region_new(4096);
	int efd, wfd;
	CHECK_OK(sh_bell_pair(&efd, &wfd));
	sh_ring c;
	CHECK_OK(sh_ring_attach(&c, g.mem, g.bytes, false));
	c.spin_ns = 0;
	c.wait_efd = efd;
	struct efd_ctx x = {&c, 0, 0, false};
	struct efd_prod e = {g.mem, g.bytes, wfd, 10};
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, efd_producer, &e), 0);
	shoal_fiber *fc, *ft;
	CHECK_OK(shoal_spawn(&fc, efd_consumer, &x, NULL));
	CHECK_OK(shoal_spawn(&ft, efd_ticker, &x, NULL));
	void *res;
	CHECK_OK(shoal_join(fc, &res));
	CHECK(res == NULL);
	CHECK_OK(shoal_join(ft, NULL));
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(x.got, 10);
	CHECK(c.sleeps >= 1);
	CHECK(x.ticks >= 10); /* ~50 ms of producer sleeps, 1 ms ticks */
	close(efd);
	close(wfd);
	region_free(&g);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- shm ----------------------------------------------------------------------- */

SH_TEST(shm_sealed_memfd_cannot_change)
{
	int fd;
	CHECK_OK(sh_memfd_create("test-seal", 4096, true, &fd));
	void *w;
	CHECK_OK(sh_shm_map(fd, 4096, true, &w));
	memcpy(w, "hello", 6);
	/* Not while a writable mapping exists. */
	CHECK_RC(sh_memfd_seal(fd), SHOAL_EBUSY);
	sh_shm_unmap(w, 4096);
	CHECK(!sh_memfd_is_sealed(fd));
	CHECK_OK(sh_memfd_seal(fd));
	CHECK(sh_memfd_is_sealed(fd));
	void *r;
	CHECK_OK(sh_shm_map(fd, 4096, false, &r));
	CHECK_STR((const char *)r, "hello");
	CHECK_RC(sh_shm_map(fd, 4096, true, &w), SHOAL_EPERM);
	CHECK(mprotect(r, 4096, PROT_READ | PROT_WRITE) != 0);
	CHECK(pwrite(fd, "x", 1, 0) < 0);
	CHECK(ftruncate(fd, 8192) != 0);
	CHECK_STR((const char *)r, "hello");
	sh_shm_unmap(r, 4096);
	close(fd);
}

SH_TEST(shm_fd_passing_limits)
{
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int before = count_fds();
	int fds[3];
	for (int i = 0; i < 3; i++)
		CHECK_OK(sh_memfd_create("test-pass", 4096, false, &fds[i]));
	CHECK_OK(sh_fd_send(sv[0], "abc", 3, fds, 3));
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	/* Three descriptors where at most two are expected: all are closed. */
	char buf[8];
	size_t got;
	int in[2], nin = 0;
	CHECK_RC(sh_fd_recv(sv[1], buf, sizeof(buf), &got, in, 2, &nin), SHOAL_EBADMSG);
	CHECK_EQ(count_fds(), before);
	/* A plain message with none. */
	CHECK_OK(sh_fd_send(sv[0], "hi", 2, NULL, 0));
	CHECK_OK(sh_fd_recv(sv[1], buf, sizeof(buf), &got, in, 2, &nin));
	CHECK_EQ(got, 2);
	CHECK_EQ(nin, 0);
	close(sv[0]);
	CHECK_OK(sh_fd_recv(sv[1], buf, sizeof(buf), &got, in, 2, &nin));
	CHECK_EQ(got, 0);
	close(sv[1]);
}

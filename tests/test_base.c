/* Tests for the base layer: error names, errno mapping, the SHOAL_LOG
 * threshold and log sinks, checked arithmetic, the replaceable allocator
 * (sized frees, byte accounting, out-of-memory paths of the fiber layer's
 * constructors) and monotonic deadlines. */
#include "test.h"

#include "shoal_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- error names ------------------------------------------------------ */

static const struct {
	int code;
	const char *name;
} codes[] = {
	{SHOAL_OK, "SHOAL_OK"},
	{SHOAL_EPERM, "SHOAL_EPERM"},
	{SHOAL_ENOENT, "SHOAL_ENOENT"},
	{SHOAL_EINTR, "SHOAL_EINTR"},
	{SHOAL_EIO, "SHOAL_EIO"},
	{SHOAL_EBADF, "SHOAL_EBADF"},
	{SHOAL_EAGAIN, "SHOAL_EAGAIN"},
	{SHOAL_ENOMEM, "SHOAL_ENOMEM"},
	{SHOAL_EACCES, "SHOAL_EACCES"},
	{SHOAL_EBUSY, "SHOAL_EBUSY"},
	{SHOAL_EEXIST, "SHOAL_EEXIST"},
	{SHOAL_EINVAL, "SHOAL_EINVAL"},
	{SHOAL_EMFILE, "SHOAL_EMFILE"},
	{SHOAL_ENOSPC, "SHOAL_ENOSPC"},
	{SHOAL_EPIPE, "SHOAL_EPIPE"},
	{SHOAL_ERANGE, "SHOAL_ERANGE"},
	{SHOAL_EDEADLK, "SHOAL_EDEADLK"},
	{SHOAL_ENOSYS, "SHOAL_ENOSYS"},
	{SHOAL_EOVERFLOW, "SHOAL_EOVERFLOW"},
	{SHOAL_EPROTO, "SHOAL_EPROTO"},
	{SHOAL_EMSGSIZE, "SHOAL_EMSGSIZE"},
	{SHOAL_ENOTSUP, "SHOAL_ENOTSUP"},
	{SHOAL_ECONNRESET, "SHOAL_ECONNRESET"},
	{SHOAL_ETIMEDOUT, "SHOAL_ETIMEDOUT"},
	{SHOAL_ECONNREFUSED, "SHOAL_ECONNREFUSED"},
	{SHOAL_ECANCELED, "SHOAL_ECANCELED"},
	{SHOAL_ECLOSED, "SHOAL_ECLOSED"},
	{SHOAL_ECRASHED, "SHOAL_ECRASHED"},
	{SHOAL_EBADMSG, "SHOAL_EBADMSG"},
	{SHOAL_ESEALED, "SHOAL_ESEALED"},
};
#define NCODES (sizeof codes / sizeof codes[0])

/* True when s names exactly `name`: "SHOAL_EPERM" must not match
 * "SHOAL_EPERMX", so the next character may not extend the identifier. */
static int names(const char *s, const char *name)
{
	size_t n = strlen(name);
	if (strncmp(s, name, n) != 0)
		return 0;
	return !(isalnum((unsigned char)s[n]) || s[n] == '_');
}

SH_TEST(strerror_names_every_code)
{
	for (size_t i = 0; i < NCODES; i++) {
		const char *s = shoal_strerror(codes[i].code);
		CHECK(s != NULL);
		if (!names(s, codes[i].name))
			sh_test_fail(__FILE__, __LINE__,
				     "shoal_strerror(%d) = \"%s\", want \"%s...\"", codes[i].code,
				     s, codes[i].name);
		/* the same static string every time */
		CHECK(shoal_strerror(codes[i].code) == s);
	}
	/* distinct codes have distinct texts */
	for (size_t i = 0; i < NCODES; i++)
		for (size_t j = i + 1; j < NCODES; j++)
			CHECK(strcmp(shoal_strerror(codes[i].code),
				     shoal_strerror(codes[j].code)) != 0);
}

SH_TEST(strerror_unknown_is_generic)
{
	const int unknown[] = {-3, -9999, -10000, -10005, -20000, 1, 12345, INT_MIN, INT_MAX};
	for (size_t u = 0; u < sizeof unknown / sizeof unknown[0]; u++) {
		const char *s = shoal_strerror(unknown[u]);
		CHECK(s != NULL);
		CHECK(s[0] != '\0');
		for (size_t i = 0; i < NCODES; i++) {
			if (strcmp(s, shoal_strerror(codes[i].code)) == 0 ||
			    names(s, codes[i].name))
				sh_test_fail(__FILE__, __LINE__, "unknown code %d reads as \"%s\"",
					     unknown[u], s);
		}
	}
}

SH_TEST(errno_conversion)
{
	errno = ENOENT;
	CHECK_RC(shoal_errno(), SHOAL_ENOENT);
	errno = ETIMEDOUT;
	CHECK_RC(shoal_errno(), SHOAL_ETIMEDOUT);
	errno = EAGAIN;
	CHECK_RC(shoal_errno(), SHOAL_EAGAIN);
	/* errno 0 must not read as success */
	errno = 0;
	CHECK_RC(shoal_errno(), SHOAL_EIO);
	/* a real failed system call */
	CHECK(open("/nonexistent/shoal-test", O_RDONLY) < 0);
	CHECK_RC(shoal_errno(), SHOAL_ENOENT);
	CHECK(close(-1) < 0);
	CHECK_RC(shoal_errno(), SHOAL_EBADF);
}

/* ---- logging ---------------------------------------------------------- */

#define MAX_LINES 16
static struct {
	int n;
	shoal_log_level level[MAX_LINES];
	char component[MAX_LINES][32];
	char line[MAX_LINES][256];
	void *ctx[MAX_LINES];
} captured;

static void capture_sink(shoal_log_level level, const char *component, const char *line, void *ctx)
{
	if (captured.n >= MAX_LINES)
		return;
	int i = captured.n++;
	captured.level[i] = level;
	snprintf(captured.component[i], sizeof captured.component[i], "%s",
		 component ? component : "(null)");
	snprintf(captured.line[i], sizeof captured.line[i], "%s", line ? line : "(null)");
	captured.ctx[i] = ctx;
}

/* Runs in a fresh child: the threshold is read from the environment once,
 * on the first log, so each value needs its own process. Exit status:
 * bits 0-2 the level read back, bits 3-6 how many of five messages (one
 * per level) reached the sink. */
static int log_child(const char *env_value)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (env_value)
			setenv("SHOAL_LOG", env_value, 1);
		else
			unsetenv("SHOAL_LOG");
		shoal_log_set_sink(capture_sink, NULL);
		for (int l = SHOAL_LOG_ERROR; l <= SHOAL_LOG_TRACE; l++)
			shoal_log((shoal_log_level)l, "envtest", "message at %d", l);
		int level = (int)shoal_log_get_level();
		_exit((level & 7) | (captured.n << 3));
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

SH_TEST(log_env_levels)
{
	static const struct {
		const char *env;
		int level;
	} cases[] = {
		{NULL, SHOAL_LOG_WARN}, /* default */
		{"error", SHOAL_LOG_ERROR}, {"warn", SHOAL_LOG_WARN},	{"info", SHOAL_LOG_INFO},
		{"debug", SHOAL_LOG_DEBUG}, {"trace", SHOAL_LOG_TRACE}, {"0", SHOAL_LOG_ERROR},
		{"1", SHOAL_LOG_WARN},	    {"2", SHOAL_LOG_INFO},	{"3", SHOAL_LOG_DEBUG},
		{"4", SHOAL_LOG_TRACE},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int st = log_child(cases[i].env);
		int level = st & 7, lines = st >> 3;
		if (level != cases[i].level || lines != cases[i].level + 1)
			sh_test_fail(__FILE__, __LINE__,
				     "SHOAL_LOG=%s: level %d (want %d), %d lines passed (want %d)",
				     cases[i].env ? cases[i].env : "(unset)", level, cases[i].level,
				     lines, cases[i].level + 1);
	}
}

SH_TEST(log_sink_captures_lines)
{
	int ctx_token;
	shoal_log_set_sink(capture_sink, &ctx_token);
	shoal_log(SHOAL_LOG_ERROR, "comp-a", "hello %d %s", 42, "world");
	shoal_log_set_level(SHOAL_LOG_DEBUG);
	CHECK_EQ(shoal_log_get_level(), SHOAL_LOG_DEBUG);
	shoal_log(SHOAL_LOG_DEBUG, "comp-b", "debug %s", "visible");
	shoal_log(SHOAL_LOG_TRACE, "comp-c", "trace hidden");
	shoal_log_set_level(SHOAL_LOG_ERROR);
	shoal_log(SHOAL_LOG_WARN, "comp-d", "warn hidden");
	shoal_log(SHOAL_LOG_ERROR, "comp-e", "error visible");

	CHECK_EQ(captured.n, 3);
	CHECK_EQ(captured.level[0], SHOAL_LOG_ERROR);
	CHECK_STR(captured.component[0], "comp-a");
	CHECK(strstr(captured.line[0], "hello 42 world") != NULL);
	CHECK(captured.ctx[0] == &ctx_token);
	CHECK_EQ(captured.level[1], SHOAL_LOG_DEBUG);
	CHECK_STR(captured.component[1], "comp-b");
	CHECK(strstr(captured.line[1], "debug visible") != NULL);
	CHECK_EQ(captured.level[2], SHOAL_LOG_ERROR);
	CHECK_STR(captured.component[2], "comp-e");
	CHECK(strstr(captured.line[2], "error visible") != NULL);
	for (int i = 0; i < captured.n; i++) {
		size_t n = strlen(captured.line[i]);
		CHECK(n > 0 && captured.line[i][n - 1] != '\n');
	}
}

static void vlog_wrapper(shoal_log_level level, const char *component, const char *fmt, ...)
	SHOAL_PRINTF(3, 4);
static void vlog_wrapper(shoal_log_level level, const char *component, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	shoal_vlog(level, component, fmt, ap);
	va_end(ap);
}

SH_TEST(log_vlog_and_long_lines)
{
	shoal_log_set_sink(capture_sink, NULL);
	vlog_wrapper(SHOAL_LOG_WARN, "vl", "via %s %u", "vlog", 7u);
	CHECK_EQ(captured.n, 1);
	CHECK_EQ(captured.level[0], SHOAL_LOG_WARN);
	CHECK_STR(captured.component[0], "vl");
	CHECK(strstr(captured.line[0], "via vlog 7") != NULL);

	/* a line far longer than any fixed buffer: may be truncated, must not
	 * overflow (ASan) and must still arrive */
	static char big[20000];
	memset(big, 'q', sizeof big - 1);
	shoal_log(SHOAL_LOG_ERROR, "big", "start-%s", big);
	CHECK_EQ(captured.n, 2);
	CHECK(strstr(captured.line[1], "start-qqqq") != NULL);
}

SH_TEST(log_default_sink_writes_stderr)
{
	int p[2];
	CHECK(pipe(p) == 0);
	int saved = dup(2);
	CHECK(saved >= 0);
	shoal_log_set_sink(capture_sink, NULL);
	shoal_log_set_sink(NULL, NULL); /* NULL restores the default */
	fflush(stderr);
	CHECK(dup2(p[1], 2) == 2);
	shoal_log(SHOAL_LOG_WARN, "stderrtest", "to stderr %d", 99);
	CHECK(dup2(saved, 2) == 2);
	close(saved);
	close(p[1]);
	char buf[512];
	ssize_t n = 0, r;
	while ((r = read(p[0], buf + n, sizeof buf - 1 - (size_t)n)) > 0)
		n += r;
	close(p[0]);
	buf[n] = '\0';
	CHECK_EQ(captured.n, 0);
	CHECK(n > 0);
	CHECK(strncmp(buf, "shoal ", 6) == 0);
	CHECK(strcasestr(buf, "warn") != NULL);
	CHECK(strstr(buf, "[stderrtest]") != NULL);
	CHECK(strstr(buf, "to stderr 99") != NULL);
	/* exactly one line, newline-terminated */
	CHECK(buf[n - 1] == '\n');
	CHECK(strchr(buf, '\n') == buf + n - 1);
}

/* ---- checked arithmetic ----------------------------------------------- */

SH_TEST(checked_arithmetic)
{
	size_t out = 7;
	CHECK_OK(shoal_add_size(1, 2, &out));
	CHECK_EQ(out, 3);
	CHECK_OK(shoal_add_size(SIZE_MAX - 1, 1, &out));
	CHECK(out == SIZE_MAX);
	out = 7;
	CHECK_RC(shoal_add_size(SIZE_MAX, 1, &out), SHOAL_EOVERFLOW);
	CHECK_RC(shoal_add_size(SIZE_MAX / 2 + 1, SIZE_MAX / 2 + 1, &out), SHOAL_EOVERFLOW);
	CHECK_EQ(out, 7); /* unchanged on failure */

	CHECK_OK(shoal_mul_size(0, SIZE_MAX, &out));
	CHECK_EQ(out, 0);
	CHECK_OK(shoal_mul_size(SIZE_MAX, 1, &out));
	CHECK(out == SIZE_MAX);
	out = 7;
	CHECK_RC(shoal_mul_size(SIZE_MAX / 2 + 1, 2, &out), SHOAL_EOVERFLOW);
	CHECK_RC(shoal_mul_size((size_t)1 << (sizeof(size_t) * 4),
				(size_t)1 << (sizeof(size_t) * 4), &out),
		 SHOAL_EOVERFLOW);
	CHECK_EQ(out, 7);

	CHECK_OK(shoal_align_size(0, 16, &out));
	CHECK_EQ(out, 0);
	CHECK_OK(shoal_align_size(1, 16, &out));
	CHECK_EQ(out, 16);
	CHECK_OK(shoal_align_size(16, 16, &out));
	CHECK_EQ(out, 16);
	CHECK_OK(shoal_align_size(17, 4096, &out));
	CHECK_EQ(out, 4096);
	CHECK_OK(shoal_align_size(5, 1, &out));
	CHECK_EQ(out, 5);
	CHECK_OK(shoal_align_size(SIZE_MAX - 15, 16, &out));
	CHECK(out == SIZE_MAX - 15);
	out = 7;
	CHECK_RC(shoal_align_size(SIZE_MAX - 14, 16, &out), SHOAL_EOVERFLOW);
	CHECK_RC(shoal_align_size(SIZE_MAX, 2, &out), SHOAL_EOVERFLOW);
	CHECK_RC(shoal_align_size(10, 0, &out), SHOAL_EINVAL);
	CHECK_RC(shoal_align_size(10, 24, &out), SHOAL_EINVAL);
	CHECK_EQ(out, 7);
}

/* ---- the allocator ---------------------------------------------------- */

/* A counting allocator. Each block carries a header with its size so the
 * sized free can be verified: a wrong size is a bug in shoal's accounting
 * that a header-less allocator would turn into corruption. */
#define HDR 16
#define MAGIC 0x5ea1b10cUL
static struct counting {
	size_t live_bytes, live_blocks;
	unsigned long allocs, frees, reallocs;
	long calls;   /* allocation attempts since arm() */
	long fail_at; /* fail attempt number fail_at once; -1 = never */
	int failed;   /* an injected failure happened since arm() */
} cnt = {.fail_at = -1};

static void arm(long n)
{
	cnt.calls = 0;
	cnt.fail_at = n;
	cnt.failed = 0;
}

static int inject(void)
{
	long call = cnt.calls++;
	if (cnt.fail_at >= 0 && call == cnt.fail_at) {
		cnt.failed = 1;
		return 1;
	}
	return 0;
}

static void *c_alloc(size_t size, void *ctx)
{
	CHECK(ctx == &cnt);
	if (inject() || size > SIZE_MAX - HDR)
		return NULL;
	unsigned char *p = malloc(size + HDR);
	if (!p)
		return NULL;
	((size_t *)p)[0] = size;
	((size_t *)p)[1] = MAGIC;
	/* garbage, so callers that need zeroed memory must zero it */
	memset(p + HDR, 0xa5, size);
	cnt.live_bytes += size;
	cnt.live_blocks++;
	cnt.allocs++;
	return p + HDR;
}

static void check_block(void *p, size_t size)
{
	size_t *h = (size_t *)((unsigned char *)p - HDR);
	if (h[1] != MAGIC)
		sh_test_fail(__FILE__, __LINE__, "free of %p: not from this allocator", p);
	if (h[0] != size)
		sh_test_fail(__FILE__, __LINE__, "sized free of %p: size %zu, allocated %zu", p,
			     size, h[0]);
}

static void c_free(void *p, size_t size, void *ctx)
{
	CHECK(ctx == &cnt);
	if (!p)
		return;
	check_block(p, size);
	((size_t *)((unsigned char *)p - HDR))[1] = 0;
	cnt.live_bytes -= size;
	cnt.live_blocks--;
	cnt.frees++;
	free((unsigned char *)p - HDR);
}

static void *c_realloc(void *p, size_t old_size, size_t new_size, void *ctx)
{
	CHECK(ctx == &cnt);
	if (!p)
		return c_alloc(new_size, ctx);
	check_block(p, old_size);
	if (inject() || new_size > SIZE_MAX - HDR)
		return NULL;
	unsigned char *q = realloc((unsigned char *)p - HDR, new_size + HDR);
	if (!q)
		return NULL;
	((size_t *)q)[0] = new_size;
	cnt.live_bytes += new_size - old_size;
	cnt.reallocs++;
	return q + HDR;
}

static const shoal_allocator counting = {c_alloc, c_realloc, c_free, &cnt};
static const shoal_allocator counting_norealloc = {c_alloc, NULL, c_free, &cnt};

SH_TEST(alloc_default_libc)
{
	size_t b0 = shoal_alloc_bytes();
	unsigned char *p = shoal_alloc(100);
	CHECK(p != NULL);
	CHECK_EQ(shoal_alloc_bytes(), b0 + 100);
	memset(p, 1, 100);
	p = shoal_realloc(p, 100, 5000);
	CHECK(p != NULL);
	CHECK_EQ(p[99], 1);
	CHECK_EQ(shoal_alloc_bytes(), b0 + 5000);
	shoal_free(p, 5000);
	CHECK_EQ(shoal_alloc_bytes(), b0);

	void *z1 = shoal_alloc(0), *z2 = shoal_alloc(0);
	CHECK(z1 != NULL && z2 != NULL && z1 != z2);
	shoal_free(z1, 0);
	shoal_free(z2, 0);

	unsigned char *c = shoal_calloc(10, 100);
	CHECK(c != NULL);
	for (int i = 0; i < 1000; i++)
		CHECK_EQ(c[i], 0);
	shoal_free(c, 1000);
	CHECK_EQ(shoal_alloc_bytes(), b0);

	/* n * size overflows: NULL, never a short block */
	CHECK(shoal_calloc(SIZE_MAX / 2 + 1, 2) == NULL);
	CHECK(shoal_calloc(2, SIZE_MAX / 2 + 1) == NULL);
	if (!sh_test_sanitized()) /* ASan reports huge requests as errors */
		CHECK(shoal_alloc(SIZE_MAX) == NULL);
	CHECK_EQ(shoal_alloc_bytes(), b0);
}

SH_TEST(alloc_counting_hooks)
{
	shoal_set_allocator(&counting);
	size_t b0 = shoal_alloc_bytes();
	unsigned long a0 = cnt.allocs;

	unsigned char *p = shoal_alloc(123);
	CHECK(p != NULL);
	CHECK_EQ(cnt.allocs, a0 + 1);
	CHECK(cnt.live_bytes >= 123);
	CHECK_EQ(shoal_alloc_bytes(), b0 + 123);
	memset(p, 7, 123);
	p = shoal_realloc(p, 123, 9000);
	CHECK(p != NULL);
	CHECK_EQ(p[0], 7);
	CHECK_EQ(p[122], 7);
	CHECK_EQ(shoal_alloc_bytes(), b0 + 9000);
	p = shoal_realloc(p, 9000, 10);
	CHECK(p != NULL);
	CHECK_EQ(p[9], 7);
	CHECK_EQ(shoal_alloc_bytes(), b0 + 10);
	shoal_free(p, 10);

	/* calloc through a hook that returns garbage still yields zeros */
	unsigned char *c = shoal_calloc(64, 8);
	CHECK(c != NULL);
	for (int i = 0; i < 512; i++)
		CHECK_EQ(c[i], 0);
	shoal_free(c, 512);
	CHECK(shoal_calloc(SIZE_MAX / 4, 8) == NULL);

	/* a failing hook: NULL out, accounting untouched, old block intact */
	p = shoal_alloc(32);
	CHECK(p != NULL);
	memset(p, 3, 32);
	arm(0);
	CHECK(shoal_alloc(64) == NULL);
	CHECK(cnt.failed);
	arm(0);
	CHECK(shoal_realloc(p, 32, 64) == NULL);
	CHECK(cnt.failed);
	arm(-1);
	CHECK_EQ(p[31], 3);
	CHECK_EQ(shoal_alloc_bytes(), b0 + 32);
	shoal_free(p, 32);

	CHECK_EQ(shoal_alloc_bytes(), b0);
	CHECK_EQ(cnt.live_blocks, 0);
	CHECK_EQ(cnt.live_bytes, 0);
	shoal_set_allocator(NULL);
	p = shoal_alloc(8); /* libc again: the hook must not see it */
	unsigned long a1 = cnt.allocs;
	shoal_free(p, 8);
	CHECK_EQ(cnt.allocs, a1);
	CHECK_EQ(cnt.live_blocks, 0);
}

SH_TEST(alloc_without_realloc_hook)
{
	shoal_set_allocator(&counting_norealloc);
	unsigned char *p = shoal_alloc(50);
	CHECK(p != NULL);
	for (int i = 0; i < 50; i++)
		p[i] = (unsigned char)i;
	unsigned long a0 = cnt.allocs, f0 = cnt.frees;
	p = shoal_realloc(p, 50, 3000); /* alloc + copy + free */
	CHECK(p != NULL);
	CHECK_EQ(cnt.allocs, a0 + 1);
	CHECK_EQ(cnt.frees, f0 + 1);
	for (int i = 0; i < 50; i++)
		CHECK_EQ(p[i], i);
	p = shoal_realloc(p, 3000, 20);
	CHECK(p != NULL);
	for (int i = 0; i < 20; i++)
		CHECK_EQ(p[i], i);
	arm(0);
	CHECK(shoal_realloc(p, 20, 4000) == NULL);
	arm(-1);
	CHECK_EQ(p[19], 19);
	shoal_free(p, 20);
	CHECK_EQ(cnt.live_blocks, 0);
	CHECK_EQ(shoal_alloc_bytes(), 0);
	shoal_set_allocator(NULL);
}

static void *ret_arg(void *arg)
{
	return arg;
}

static void *chan_echo(void *arg)
{
	shoal_chan *c = arg;
	int v;
	CHECK_OK(shoal_chan_recv(c, &v, SHOAL_FOREVER));
	return (void *)(intptr_t)(v + 1);
}

/* Exercises a scheduler end to end (spawn, channel, join): run after the
 * OOM loops to prove a failure left nothing half-built behind. */
static void exercise_sched(void)
{
	shoal_chan *c = NULL;
	shoal_fiber *f = NULL;
	void *r = NULL;
	CHECK_OK(shoal_chan_create(&c, sizeof(int), 0));
	CHECK_OK(shoal_spawn(&f, chan_echo, c, NULL));
	int v = 41;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_join(f, &r));
	CHECK_EQ((intptr_t)r, 42);
	CHECK_OK(shoal_chan_destroy(c));
}

SH_TEST(alloc_bytes_balanced_after_sched)
{
	size_t b0 = shoal_alloc_bytes();
	for (int round = 0; round < 3; round++) {
		shoal_sched *s = NULL;
		CHECK_OK(shoal_sched_create(&s, NULL));
		CHECK(shoal_alloc_bytes() > b0);
		exercise_sched();
		shoal_fiber *f[50];
		for (int i = 0; i < 50; i++)
			CHECK_OK(shoal_spawn(&f[i], ret_arg, NULL, NULL));
		for (int i = 0; i < 25; i++)
			CHECK_OK(shoal_join(f[i], NULL));
		/* the other 25 are joined by destroy */
		CHECK_OK(shoal_sched_destroy(s));
		CHECK_EQ(shoal_alloc_bytes(), b0);
	}
}

/* The libuv test-loop-oom pattern: fail the first, second, third...
 * allocation of an operation until it succeeds without a failure. Every
 * failure must be SHOAL_ENOMEM and leave nothing allocated or alive. */
SH_TEST(oom_sched_create)
{
	shoal_set_allocator(&counting);
	size_t live0 = cnt.live_bytes;
	size_t b0 = shoal_alloc_bytes();
	int done = 0;
	for (long n = 0; n < 10000 && !done; n++) {
		shoal_sched *s = NULL;
		arm(n);
		int rc = shoal_sched_create(&s, NULL);
		int failed = cnt.failed;
		arm(-1);
		if (rc == 0) {
			CHECK(s != NULL);
			CHECK(shoal_sched_current() == s);
			exercise_sched();
			CHECK_OK(shoal_sched_destroy(s));
			done = !failed;
		} else {
			CHECK_RC(rc, SHOAL_ENOMEM);
			CHECK(failed);
			CHECK(shoal_sched_current() == NULL);
		}
		CHECK_EQ(cnt.live_bytes, live0);
		CHECK_EQ(shoal_alloc_bytes(), b0);
	}
	CHECK(done);
	shoal_set_allocator(NULL);
}

static int oom_runs;
static void *count_run(void *arg)
{
	oom_runs++;
	return arg;
}

SH_TEST(oom_spawn)
{
	shoal_set_allocator(&counting);
	size_t live0 = cnt.live_bytes;
	shoal_sched *s = NULL;
	CHECK_OK(shoal_sched_create(&s, NULL));
	int done = 0, spawned = 0;
	for (long n = 0; n < 10000 && !done; n++) {
		shoal_fiber *f = NULL;
		arm(n);
		int rc = shoal_spawn(&f, count_run, (void *)(intptr_t)n, NULL);
		int failed = cnt.failed;
		arm(-1);
		if (rc == 0) {
			void *r = NULL;
			spawned++;
			CHECK_OK(shoal_join(f, &r));
			CHECK_EQ((intptr_t)r, n);
			done = !failed;
		} else {
			CHECK_RC(rc, SHOAL_ENOMEM);
			CHECK(failed);
		}
		shoal_sched_stats st;
		shoal_sched_stats_get(s, &st);
		CHECK_EQ(st.live, 0);
		CHECK_EQ(oom_runs, spawned); /* a failed spawn never runs fn */
	}
	CHECK(done);
	/* the same for a named, detached fiber */
	done = 0;
	for (long n = 0; n < 10000 && !done; n++) {
		shoal_fiber_opts o = {.name = "oom-detached", .detached = 1};
		arm(n);
		int rc = shoal_spawn(NULL, count_run, NULL, &o);
		int failed = cnt.failed;
		arm(-1);
		if (rc == 0) {
			spawned++;
			CHECK_OK(shoal_yield());
			done = !failed;
		} else {
			CHECK_RC(rc, SHOAL_ENOMEM);
			CHECK(failed);
		}
		CHECK_EQ(oom_runs, spawned);
	}
	CHECK(done);
	exercise_sched();
	CHECK_OK(shoal_sched_destroy(s));
	CHECK_EQ(cnt.live_bytes, live0);
	shoal_set_allocator(NULL);
}

SH_TEST(oom_chan_create)
{
	shoal_set_allocator(&counting);
	size_t live0 = cnt.live_bytes;
	static const size_t caps[] = {0, 1, 100};
	for (size_t k = 0; k < 3; k++) {
		int done = 0, failures = 0;
		for (long n = 0; n < 10000 && !done; n++) {
			/* a fresh scheduler each time: it may recycle channel
			 * memory, and a recycled block needs no allocation */
			shoal_sched *s = NULL;
			CHECK_OK(shoal_sched_create(&s, NULL));
			shoal_chan *c = NULL;
			arm(n);
			int rc = shoal_chan_create(&c, 24, caps[k]);
			int failed = cnt.failed;
			arm(-1);
			if (rc == 0) {
				char in[24] = "twenty-three bytes+NUL", out[24];
				if (caps[k] > 0) {
					CHECK_OK(shoal_chan_send(c, in, SHOAL_NOWAIT));
					CHECK_OK(shoal_chan_recv(c, out, SHOAL_NOWAIT));
					CHECK(memcmp(in, out, 24) == 0);
				}
				CHECK_OK(shoal_chan_destroy(c));
				done = !failed;
			} else {
				CHECK_RC(rc, SHOAL_ENOMEM);
				failures++;
			}
			exercise_sched();
			CHECK_OK(shoal_sched_destroy(s));
			CHECK_EQ(cnt.live_bytes, live0);
		}
		CHECK(done);
		CHECK(failures > 0);
	}
	shoal_set_allocator(NULL);
}

/* ---- time ------------------------------------------------------------- */

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

SH_TEST(now_is_monotonic_clock)
{
	int64_t prev = shoal_now_ns();
	CHECK(prev > 0);
	for (int i = 0; i < 100000; i++) {
		int64_t t = shoal_now_ns();
		CHECK(t >= prev);
		prev = t;
	}
	/* CLOCK_MONOTONIC itself, not a coarse or realtime clock */
	for (int i = 0; i < 100; i++) {
		int64_t a = mono_ns(), t = shoal_now_ns(), b = mono_ns();
		CHECK(a <= t && t <= b);
	}
	/* it advances */
	int64_t t0 = shoal_now_ns();
	struct timespec ts = {0, 5000000};
	nanosleep(&ts, NULL);
	CHECK(shoal_now_ns() - t0 >= 5000000);
}

SH_TEST(deadline_in_saturates)
{
	int64_t a = shoal_now_ns();
	int64_t d = shoal_deadline_in(1000000000);
	int64_t b = shoal_now_ns();
	CHECK(d >= a + 1000000000 && d <= b + 1000000000);
	a = shoal_now_ns();
	d = shoal_deadline_in(0);
	b = shoal_now_ns();
	CHECK(d >= a && d <= b);
	CHECK(shoal_deadline_in(INT64_MAX) == INT64_MAX);
	CHECK(shoal_deadline_in(INT64_MAX - 1) == INT64_MAX);
	CHECK(shoal_deadline_in(INT64_MAX - shoal_now_ns() + 1000) == INT64_MAX);
	CHECK(shoal_deadline_in(-1) == SHOAL_FOREVER);
	CHECK(shoal_deadline_in(-1000000000) == SHOAL_FOREVER);
	CHECK(shoal_deadline_in(INT64_MIN) == SHOAL_FOREVER);
}

/* The handles' failure messages (sh_err_*): one slot a thread, read for
 * the handle that failed last, cleared by that handle's next call, and a
 * message may quote the slot's own text (a farm's quoting its store
 * client's) without being garbled. */
SH_TEST(a_failure_message_is_the_threads_and_the_handles)
{
	int a = 0, b = 0; /* two handles: only their addresses count */
	CHECK_STR(sh_err_get(&a), "");
	CHECK_EQ(sh_err_set(&a, SHOAL_ENOENT, "no object named %s", "x"), SHOAL_ENOENT);
	CHECK_STR(sh_err_get(&a), "no object named x");
	CHECK_STR(sh_err_get(&b), ""); /* another handle's */
	CHECK_STR(sh_err_get(NULL), "");
	sh_err_clear(&b); /* another handle's call leaves a's */
	CHECK_STR(sh_err_get(&a), "no object named x");
	CHECK_EQ(sh_err_set(&b, SHOAL_EIO, "the store: %s", sh_err_get(&a)), SHOAL_EIO);
	CHECK_STR(sh_err_get(&b), "the store: no object named x");
	CHECK_STR(sh_err_get(&a), ""); /* the slot is b's now */
	char big[SH_ERR_MAX * 2];
	memset(big, 'y', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	sh_err_set(&a, SHOAL_EINVAL, "%s", big);
	CHECK_EQ(strlen(sh_err_get(&a)), (size_t)SH_ERR_MAX - 1); /* cut to fit */
	sh_err_clear(&a);
	CHECK_STR(sh_err_get(&a), "");
	char why[16];
	CHECK_EQ(sh_say(why, sizeof(why), SHOAL_EBUSY, "%s", "a longer message than fits"),
		 SHOAL_EBUSY);
	CHECK_STR(why, "a longer messag");
	CHECK_EQ(sh_say(NULL, 0, SHOAL_EBUSY, "nowhere"), SHOAL_EBUSY);
}

/* Libraries loaded when first used (sh_dl_load): a table filled from a
 * library, and what is missing named. */
SH_TEST(a_library_table_is_filled_or_what_is_missing_is_said)
{
	size_t (*my_strlen)(const char *) = NULL;
	void *nothing = NULL;
	sh_dl_sym ok[] = {{"strlen", (void **)&my_strlen}};
	char why[256] = "";
	CHECK_OK(sh_dl_load("libc.so.6", ok, 1, NULL, why, sizeof(why)));
	CHECK(my_strlen != NULL);
	CHECK_EQ(my_strlen("four"), 4u);
	sh_dl_sym lacking[] = {{"strlen", (void **)&my_strlen},
			       {"no_such_function_in_libc", &nothing}};
	CHECK_RC(sh_dl_load("libc.so.6", lacking, 2, "a newer libc is needed", why, sizeof(why)),
		 SHOAL_ENOSYS);
	CHECK_STR(why, "libc.so.6 lacks no_such_function_in_libc (a newer libc is needed)");
	CHECK_RC(sh_dl_load("libno-such-library.so.9", ok, 1, NULL, why, sizeof(why)),
		 SHOAL_ENOSYS);
	CHECK_HAS(why, "libno-such-library.so.9");
}

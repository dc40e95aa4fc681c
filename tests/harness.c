/* Runner for SH_TEST cases: one child process per case (so a crash or a
 * hang fails that case only), a per-case timeout, a summary line that ctest
 * and CI read: skipped cases are counted there, and do not fail the run. */
#include "test.h"

#include <signal.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 256

static struct {
	const char *name;
	sh_test_fn fn;
	int timeout_s;
} tests[MAX_TESTS];
static int ntests;

/* The exit status of a case that skipped (the automake convention). */
#define SKIP_STATUS 77

/* The case running in this process, and (SHOAL_TEST_NOFORK) where a
 * skip returns to. */
static int current = -1;
static int nofork_mode;
static jmp_buf nofork_skip;

void sh_test_register(const char *name, sh_test_fn fn, int timeout_s)
{
	if (ntests == MAX_TESTS) {
		fprintf(stderr, "too many tests (max %d)\n", MAX_TESTS);
		abort();
	}
	tests[ntests].name = name;
	tests[ntests].fn = fn;
	tests[ntests].timeout_s = timeout_s;
	ntests++;
}

void sh_test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s:%d: FAILED: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	abort();
}

void sh_test_skip(const char *fmt, ...)
{
	va_list ap;
	printf("  %s: skipped: ", current >= 0 ? tests[current].name : "?");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(NULL);
	if (nofork_mode)
		longjmp(nofork_skip, 1);
	/* _exit: what the case made before it skipped is not its leak */
	_exit(SKIP_STATUS);
}

int sh_test_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
	return 1;
#else
	return 0;
#endif
#else
	return 0;
#endif
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

int64_t sh_test_late_bound(int64_t wait_ns)
{
	static int64_t machine; /* per case: each runs in a process of its own */
	if (!machine) {
		int64_t late[5];
		for (int i = 0; i < 5; i++) {
			struct timespec t0, t1, d = {0, 1000000};
			clock_gettime(CLOCK_MONOTONIC, &t0);
			while (nanosleep(&d, &d) != 0 && errno == EINTR)
				;
			clock_gettime(CLOCK_MONOTONIC, &t1);
			late[i] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + t1.tv_nsec - t0.tv_nsec -
				  1000000;
		}
		qsort(late, 5, sizeof(late[0]), cmp_i64);
		machine = 4 * late[2] > 3 * MS ? 4 * late[2] : 3 * MS;
		if (sh_test_sanitized())
			machine *= 2;
	}
	return wait_ns / 2 + machine;
}

shoal_sched *sh_test_sched_new(void)
{
	shoal_sched *s = NULL;
	CHECK_OK(shoal_sched_create(&s, NULL));
	CHECK(s != NULL);
	CHECK(shoal_sched_current() == s);
	return s;
}

shoal_chan *sh_test_chan_new(size_t elem, size_t cap)
{
	shoal_chan *c = NULL;
	CHECK_OK(shoal_chan_create(&c, elem, cap));
	CHECK(c != NULL);
	return c;
}

void sh_test_leak_check(void)
{
#if defined(__SANITIZE_ADDRESS__)
	__lsan_do_leak_check();
#endif
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The case running now, whose group an interrupt of the harness takes
 * down with it (the case is in its own group, out of the terminal's). */
static volatile sig_atomic_t running_case;

static void on_interrupt(int sig)
{
	if (running_case > 0)
		kill(-(pid_t)running_case, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* 0: passed, 1: skipped, -1: failed. */
static int run_one(int i, int nofork)
{
	current = i;
	if (nofork) {
		if (setjmp(nofork_skip))
			return 1;
		tests[i].fn();
		return 0;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return -1;
	}
	if (pid == 0) {
		/* Its own process group, so whatever it started and left
		 * behind is killed with it below. */
		setpgid(0, 0);
		alarm((unsigned)tests[i].timeout_s * (sh_test_sanitized() ? 3 : 1));
		tests[i].fn();
		/* exit, not _exit: LeakSanitizer and ThreadSanitizer report
		 * from exit handlers, and a leak or race must fail the case. */
		exit(0);
	}
	setpgid(pid, pid); /* also from here: either may run first */
	running_case = pid;
	/* A failed case can leave a child it forked waiting forever (on a
	 * peer that died): it would keep ctest's output pipe open until
	 * ctest's timeout, and outlive the run. Kill the group while the
	 * case is still a zombie, so its id cannot have been reused. */
	siginfo_t si;
	while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
		;
	kill(-pid, SIGKILL);
	int st;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			perror("waitpid");
			running_case = 0;
			return -1;
		}
	}
	running_case = 0;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP_STATUS)
		return 1;
	if (WIFSIGNALED(st))
		fprintf(stderr, "  %s: killed by signal %d%s\n", tests[i].name, WTERMSIG(st),
			WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
	else
		fprintf(stderr, "  %s: exit status %d\n", tests[i].name, WEXITSTATUS(st));
	return -1;
}

int main(int argc, char **argv)
{
	int nofork = getenv("SHOAL_TEST_NOFORK") && atoi(getenv("SHOAL_TEST_NOFORK"));
	nofork_mode = nofork;
	signal(SIGINT, on_interrupt);
	signal(SIGTERM, on_interrupt);
	int passed = 0, skipped = 0, failed = 0;
	for (int i = 0; i < ntests; i++) {
		if (argc > 1) {
			int want = 0;
			for (int a = 1; a < argc; a++)
				want |= strcmp(argv[a], tests[i].name) == 0;
			if (!want)
				continue;
		}
		double t0 = now_ms();
		int rc = run_one(i, nofork);
		printf("%s %s (%.1f ms)\n",
		       rc == 0	? "ok  "
		       : rc > 0 ? "skip"
				: "FAIL",
		       tests[i].name, now_ms() - t0);
		fflush(stdout);
		if (rc == 0)
			passed++;
		else if (rc > 0)
			skipped++;
		else
			failed++;
	}
	printf("%d passed, %d skipped, %d failed\n", passed, skipped, failed);
	/* (a run of nothing at all, a misspelt case name, fails) */
	return failed ? 1 : (passed + skipped ? 0 : 1);
}

int sh_test_run(char *const argv[], char *const env[], char *out, size_t outlen)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		for (size_t i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	size_t got = 0;
	for (;;) {
		ssize_t n = read(fds[0], out + got, outlen - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == outlen - 1)
			break;
	}
	out[got] = '\0';
	close(fds[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		CHECK(errno == EINTR);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void sh_test_bin(char *buf, size_t len, const char *rel)
{
	const char *d = getenv("SHOAL_TEST_BINDIR");
	CHECK(d != NULL);
	snprintf(buf, len, "%s/%s", d, rel);
	CHECK(access(buf, X_OK) == 0);
}

void sh_test_drop_to(uid_t uid, gid_t gid, const gid_t *groups, int ngroups)
{
	if (setgroups((size_t)ngroups, groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
		fprintf(stderr, "dropping to uid %u: %s\n", (unsigned)uid, strerror(errno));
		_exit(99);
	}
	/* no way back: the attack runs with nothing of root's */
	if (setuid(0) == 0 || geteuid() != uid)
		_exit(98);
}

int sh_test_run_as(uid_t uid, const gid_t *groups, int ngroups, void (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (uid != 0)
			sh_test_drop_to(uid, uid, groups, ngroups);
		fn(arg);
		_exit(0);
	}
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

/* Runner for SH_TEST cases: one child process per case (so a crash or a
 * hang fails that case only), a per-case timeout, a summary line that ctest
 * and CI read: skipped cases are counted there, and do not fail the run. */
#include "test.h"

#include <signal.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
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

/* ---- the build's programs for another uid ------------------------------ */

/* Attacks run as uid 65534 execute programs, load extensions and run
 * scripts of this tree; a tree cloned under a 0700 directory (root's home,
 * mktemp -d) is out of that uid's reach. The runner (as root) then links
 * them, or copies them where another file system keeps it from linking,
 * into a fresh 0755 directory under /tmp for the whole run, removed at its
 * end: ROOT/bin/REL for the build's (SHOAL_TEST_BINDIR), ROOT/src/REL for
 * the sources' (SHOAL_SRCDIR), announced as SHOAL_TEST_OTHERS_DIR. The
 * files stay root's and writable by nobody else: a dropped process runs
 * the same code with nothing of root's. */
#define OTHERS_UID 65534
static const struct {
	const char *env, *top, *dir, *suffix; /* suffix NULL: executables */
} others_sets[] = {
	{"SHOAL_TEST_BINDIR", "bin", "tools", NULL},
	{"SHOAL_TEST_BINDIR", "bin", "tests", ".so"},
	{"SHOAL_TEST_BINDIR", "bin", "bench", ".so"},
	{"SHOAL_SRCDIR", "src", "tests", ".py"},
};
#define NSETS (sizeof(others_sets) / sizeof(others_sets[0]))
static char others_root[64];
static pid_t others_owner;

/* Whether uid can search dir: asked of a child that became uid. */
static bool uid_reaches(uid_t uid, const char *dir)
{
	pid_t p = fork();
	if (p < 0)
		return false;
	if (p == 0) {
		if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0)
			_exit(2);
		_exit(access(dir, X_OK) == 0 ? 0 : 1);
	}
	int st;
	while (waitpid(p, &st, 0) < 0)
		if (errno != EINTR)
			return false;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
	if (link(from, to) == 0)
		return 0;
	int in = open(from, O_RDONLY | O_CLOEXEC), rc = -1;
	int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0755);
	struct stat st;
	if (out >= 0 && fstat(in, &st) == 0) {
		off_t left = st.st_size;
		ssize_t n = 1;
		while (left > 0 && (n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0)) > 0)
			left -= n;
		rc = left == 0 ? 0 : -1;
	}
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) != 0)
		rc = -1;
	return rc;
}

/* Empties and removes ROOT/top/dir, then ROOT/top and ROOT when empty. */
static void others_remove(void)
{
	if (!others_root[0] || getpid() != others_owner)
		return;
	char path[4096];
	for (size_t i = 0; i < NSETS; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s", others_root, others_sets[i].top,
			 others_sets[i].dir);
		DIR *d = opendir(path);
		struct dirent *e;
		while (d && (e = readdir(d)))
			if (e->d_name[0] != '.') {
				snprintf(path, sizeof(path), "%s/%s/%s/%s", others_root,
					 others_sets[i].top, others_sets[i].dir, e->d_name);
				unlink(path);
			}
		if (d)
			closedir(d);
		snprintf(path, sizeof(path), "%s/%s/%s", others_root, others_sets[i].top,
			 others_sets[i].dir);
		rmdir(path);
		snprintf(path, sizeof(path), "%s/%s", others_root, others_sets[i].top);
		rmdir(path);
	}
	rmdir(others_root);
	others_root[0] = '\0';
}

/* One set into ROOT/top/dir: 0, or -1 with errno. */
static int others_copy(size_t i, char *from, char *to, size_t len)
{
	const char *base = getenv(others_sets[i].env), *sfx = others_sets[i].suffix;
	if (!base)
		return 0;
	snprintf(to, len, "%s/%s", others_root, others_sets[i].top);
	if (mkdir(to, 0755) != 0 && errno != EEXIST)
		return -1;
	snprintf(to, len, "%s/%s/%s", others_root, others_sets[i].top, others_sets[i].dir);
	if (mkdir(to, 0755) != 0 || chmod(to, 0755) != 0)
		return -1;
	snprintf(from, len, "%s/%s", base, others_sets[i].dir);
	DIR *d = opendir(from);
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && d && (e = readdir(d))) {
		struct stat st;
		size_t n = strlen(e->d_name), k = sfx ? strlen(sfx) : 0;
		snprintf(from, len, "%s/%s/%s", base, others_sets[i].dir, e->d_name);
		snprintf(to, len, "%s/%s/%s/%s", others_root, others_sets[i].top,
			 others_sets[i].dir, e->d_name);
		if (e->d_name[0] == '.' || stat(from, &st) != 0 || !S_ISREG(st.st_mode) ||
		    (sfx ? n <= k || strcmp(e->d_name + n - k, sfx) != 0 : !(st.st_mode & S_IXOTH)))
			continue;
		rc = copy_file(from, to, st.st_mode);
	}
	if (d)
		closedir(d);
	return rc;
}

/* In the runner, before any case: the copy, when root runs a tree that
 * uid 65534 cannot reach; otherwise nothing. A copy that cannot be made
 * fails the run: the attacks would fail later with less clear words. */
static int others_prepare(void)
{
	const char *bindir = getenv("SHOAL_TEST_BINDIR"), *src = getenv("SHOAL_SRCDIR");
	if (geteuid() != 0 || !bindir ||
	    (uid_reaches(OTHERS_UID, bindir) && (!src || uid_reaches(OTHERS_UID, src))))
		return 0;
	snprintf(others_root, sizeof(others_root), "/tmp/shoal-test-others-XXXXXX");
	if (!mkdtemp(others_root) || chmod(others_root, 0755) != 0) {
		fprintf(stderr, "harness: a directory for uid %d's copies of %s: %s\n", OTHERS_UID,
			bindir, strerror(errno));
		return -1;
	}
	others_owner = getpid();
	char from[4096], to[4096];
	for (size_t i = 0; i < NSETS; i++)
		if (others_copy(i, from, to, sizeof(from)) != 0) {
			fprintf(stderr, "harness: copying %s to %s for uid %d: %s\n", from, to,
				OTHERS_UID, strerror(errno));
			others_remove();
			return -1;
		}
	setenv("SHOAL_TEST_OTHERS_DIR", others_root, 1);
	return 0;
}

/* A file of the tree at ENV/rel that the calling uid can access (mode),
 * else its copy in ROOT/top/rel: the path, or the case fails. */
static void tree_file(char *buf, size_t len, const char *env, const char *top, const char *rel,
		      int mode)
{
	const char *d = getenv(env), *others = getenv("SHOAL_TEST_OTHERS_DIR");
	if (!d)
		sh_test_fail(__FILE__, __LINE__, "%s is not set (ctest sets it)", env);
	snprintf(buf, len, "%s/%s", d, rel);
	if (access(buf, mode) == 0)
		return;
	int err = errno;
	if (err == EACCES && others) {
		snprintf(buf, len, "%s/%s/%s", others, top, rel);
		if (access(buf, mode) == 0)
			return;
		err = errno;
	}
	sh_test_fail(__FILE__, __LINE__, "%s/%s: uid %u cannot %s it: %s", d, rel,
		     (unsigned)getuid(), mode == X_OK ? "run" : "read", strerror(err));
}

void sh_test_bin(char *buf, size_t len, const char *rel)
{
	tree_file(buf, len, "SHOAL_TEST_BINDIR", "bin", rel, X_OK);
}

void sh_test_src(char *buf, size_t len, const char *rel)
{
	tree_file(buf, len, "SHOAL_SRCDIR", "src", rel, R_OK);
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
	others_remove();
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
	if (others_prepare() != 0)
		return 1;
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
	others_remove();
	printf("%d passed, %d skipped, %d failed\n", passed, skipped, failed);
	/* (a run of nothing at all, a misspelt case name, fails) */
	return failed ? 1 : (passed + skipped ? 0 : 1);
}

int sh_test_shoald(const char *const *args, const char *const *env, const char *log, int log_flags,
		   pid_t *pid)
{
	char exe[4096];
	sh_test_bin(exe, sizeof(exe), "tools/shoald");
	const char *argv[64] = {exe};
	size_t n = 1;
	for (; args && args[n - 1] && n < 60; n++)
		argv[n] = args[n - 1];
	argv[n++] = "--ready-fd";
	argv[n++] = "3";
	argv[n] = NULL;
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	fflush(NULL);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test case */
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC | log_flags, 0600);
			if (fd < 0 || dup2(fd, 2) < 0)
				_exit(126);
		}
		for (size_t i = 0; env && env[i]; i++) {
			if (strchr(env[i], '='))
				putenv((char *)env[i]);
			else
				unsetenv(env[i]);
		}
		if (p[1] == 3 ? fcntl(3, F_SETFD, 0) != 0 : dup2(p[1], 3) != 3)
			_exit(126);
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	char line[512];
	size_t got = 0;
	double until = now_ms() + 120000;
	for (;;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		double left = until - now_ms();
		if (left <= 0 || poll(&pf, 1, (int)left + 1) == 0) {
			close(p[0]);
			kill(child, SIGKILL);
			waitpid(child, NULL, 0);
			sh_test_fail(__FILE__, __LINE__, "shoald %s did not serve within 120 s",
				     args && args[0] ? args[1] : "");
		}
		ssize_t r = read(p[0], line + got, sizeof(line) - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r > 0) {
			got += (size_t)r;
			line[got] = 0;
			if (!strchr(line, '\n') && got + 1 < sizeof(line))
				continue;
		}
		close(p[0]);
		if (r > 0 && !strncmp(line, "ready ", 6)) {
			*pid = child;
			return 0;
		}
		/* its end closed without the line: it ended */
		int st;
		while (waitpid(child, &st, 0) < 0 && errno == EINTR)
			;
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
}

static void read_text(const char *path, char *buf, size_t len)
{
	buf[0] = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	size_t got = 0;
	ssize_t r;
	while (got + 1 < len && (r = read(fd, buf + got, len - 1 - got)) > 0)
		got += (size_t)r;
	buf[got] = 0;
	close(fd);
}

void sh_test_wait_text(const char *path, const char *needle, char *buf, size_t len, int timeout_ms)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	CHECK(in >= 0);
	CHECK(inotify_add_watch(in, slash ? dir : ".", IN_MODIFY | IN_CREATE | IN_CLOSE_WRITE) >=
	      0);
	double until = now_ms() + timeout_ms;
	/* the watch is set before the first look: no change falls between */
	for (read_text(path, buf, len); !strstr(buf, needle); read_text(path, buf, len)) {
		double left = until - now_ms();
		struct pollfd pf = {.fd = in, .events = POLLIN};
		if (left <= 0 || poll(&pf, 1, (int)left + 1) == 0) {
			close(in);
			sh_test_fail(__FILE__, __LINE__, "%s lacks \"%s\" after %d ms:\n%s", path,
				     needle, timeout_ms, buf);
		}
		char ev[4096];
		while (read(in, ev, sizeof(ev)) > 0)
			;
	}
	close(in);
}

void sh_test_wait_gone(pid_t pid, int timeout_ms)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0) {
		CHECK(errno == ESRCH); /* gone already */
		return;
	}
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	int r = poll(&pf, 1, timeout_ms);
	close(fd);
	if (r != 1)
		sh_test_fail(__FILE__, __LINE__, "process %d still runs after %d ms", (int)pid,
			     timeout_ms);
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

void sh_test_mapping_of(const void *p, char *path, size_t len, char *line, size_t linelen)
{
	FILE *f = fopen("/proc/self/maps", "re");
	CHECK(f != NULL);
	char l[512];
	bool found = false;
	while (!found && fgets(l, sizeof(l), f)) {
		unsigned long lo, hi;
		if (sscanf(l, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo &&
		    (uintptr_t)p < hi) {
			snprintf(path, len, "/proc/self/map_files/%lx-%lx", lo, hi);
			if (line)
				snprintf(line, linelen, "%s", l);
			found = true;
		}
	}
	fclose(f);
	if (!found)
		sh_test_fail(__FILE__, __LINE__, "no mapping in /proc/self/maps holds %p", p);
}

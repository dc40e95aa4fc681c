/* Tests that a fiber's stack overflow is caught by its guard page and
 * reported: the process dies by SIGSEGV and stderr names the fiber and says
 * "stack overflow". The overflow runs in a re-executed copy of this program
 * (selected by an environment variable before main) so that a sanitizer
 * runtime can be told, before it starts, to leave SIGSEGV to shoal. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_ENV "SHOAL_TEST_OVERFLOW_CHILD"

/* A volatile bound the compiler cannot see through, so the recursion is
 * neither infinite in its eyes (-Winfinite-recursion) nor finite in fact. */
static volatile int depth_limit = INT_MAX;

/* Not a tail call: the frame (and its volatile array) stays live across
 * the recursive call, so every level costs real stack. */
__attribute__((noinline)) static int recurse(int depth)
{
	volatile char frame[512];
	frame[0] = (char)depth;
	frame[sizeof frame - 1] = (char)(depth >> 8);
	if (depth >= depth_limit)
		return frame[0];
	int r = recurse(depth + 1);
	return r + frame[depth % (int)sizeof frame];
}

static void *overflow_fn(void *arg)
{
	return (void *)(intptr_t)recurse(0);
}

static void *neighbour(void *arg)
{
	int v;
	shoal_chan_recv(arg, &v, SHOAL_FOREVER);
	return NULL;
}

/* Child scenarios, chosen by the environment variable's value. */
static void run_child(const char *mode)
{
	shoal_sched_opts so = {0};
	shoal_fiber_opts fo = {.name = "deep-recursion"};
	int rename = 0;
	if (strcmp(mode, "mprotect") == 0) {
		so.guard = SHOAL_GUARD_MPROTECT;
	} else if (strcmp(mode, "madvise") == 0) {
		so.guard = SHOAL_GUARD_MADVISE;
	} else if (strcmp(mode, "renamed") == 0) {
		fo.name = NULL;
		fo.stack_size = 256 * 1024;
		rename = 1;
	} else if (strcmp(mode, "default") != 0) {
		_exit(90);
	}
	shoal_sched *s = NULL;
	if (shoal_sched_create(&s, &so) != 0)
		_exit(91);
	/* a few live neighbours, so the guard must be the overflowing
	 * fiber's own and not just the end of a mapping */
	shoal_chan *c = NULL;
	if (shoal_chan_create(&c, sizeof(int), 0) != 0)
		_exit(92);
	shoal_fiber *f = NULL, *nb[6];
	for (int i = 0; i < 3; i++)
		if (shoal_spawn(&nb[i], neighbour, c, NULL) != 0)
			_exit(93);
	if (shoal_spawn(&f, overflow_fn, NULL, &fo) != 0)
		_exit(93);
	for (int i = 3; i < 6; i++)
		if (shoal_spawn(&nb[i], neighbour, c, NULL) != 0)
			_exit(93);
	if (rename && shoal_fiber_set_name(f, "renamed-deep") != 0)
		_exit(94);
	shoal_join(f, NULL);
	_exit(95); /* the overflow was not caught */
}

__attribute__((constructor)) static void overflow_child_entry(void)
{
	const char *mode = getenv(CHILD_ENV);
	if (mode)
		run_child(mode);
}

struct outcome {
	int status;
	char err[8192];
};

static void run_overflow(const char *mode, struct outcome *o)
{
	int p[2];
	CHECK(pipe(p) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		setenv(CHILD_ENV, mode, 1);
		/* ASan would report the SEGV itself; shoal's handler must */
		setenv("ASAN_OPTIONS", "handle_segv=0:use_sigaltstack=0:detect_leaks=0", 1);
		execl("/proc/self/exe", "test_overflow", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	size_t n = 0;
	for (;;) {
		ssize_t r = read(p[0], o->err + n, sizeof o->err - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == sizeof o->err - 1)
			break;
	}
	o->err[n] = '\0';
	close(p[0]);
	CHECK(waitpid(pid, &o->status, 0) == pid);
}

static void check_overflow(const char *mode, const char *name)
{
	struct outcome o;
	run_overflow(mode, &o);
	if (!WIFSIGNALED(o.status) || WTERMSIG(o.status) != SIGSEGV)
		sh_test_fail(__FILE__, __LINE__, "%s: child %s %d, want SIGSEGV; stderr:\n%s", mode,
			     WIFSIGNALED(o.status) ? "killed by signal" : "exited with",
			     WIFSIGNALED(o.status) ? WTERMSIG(o.status) : WEXITSTATUS(o.status),
			     o.err);
	if (!strstr(o.err, name) || !strstr(o.err, "stack overflow"))
		sh_test_fail(__FILE__, __LINE__,
			     "%s: stderr lacks \"%s\" or \"stack overflow\":\n%s", mode, name,
			     o.err);
}

SH_TEST(overflow_default_guard)
{
	check_overflow("default", "deep-recursion");
}

SH_TEST(overflow_mprotect_guard)
{
	check_overflow("mprotect", "deep-recursion");
}

SH_TEST(overflow_madvise_guard)
{
	check_overflow("madvise", "deep-recursion");
}

SH_TEST(overflow_renamed_big_stack)
{
	check_overflow("renamed", "renamed-deep");
}

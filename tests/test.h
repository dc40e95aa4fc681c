/* The test harness: SH_TEST(name) defines a case; the runner in harness.c
 * runs each case in its own child process under a timeout and ends with
 * "N passed, N skipped, N failed". `test_x NAME...` runs only the named cases;
 * SHOAL_TEST_NOFORK=1 runs them in-process (for gdb). Checks print both
 * sides, or the expected and actual error code with their names. */
#ifndef SHOAL_TEST_H
#define SHOAL_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <shoal/shoal.h>

typedef void (*sh_test_fn)(void);
void sh_test_register(const char *name, sh_test_fn fn, int timeout_s);
void sh_test_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));

#define SH_TEST_T(name, timeout_s)                                \
	static void test_##name(void);                            \
	__attribute__((constructor)) static void reg_##name(void) \
	{                                                         \
		sh_test_register(#name, test_##name, timeout_s);  \
	}                                                         \
	static void test_##name(void)
#define SH_TEST(name) SH_TEST_T(name, 60)

/* Ends the case as skipped: what it checks cannot be checked here (why
 * says what it needs). Counted and printed apart from the passes, so a
 * check that did not run shows in the summary line. */
void sh_test_skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#define SH_SKIP(...) sh_test_skip(__VA_ARGS__)

#define CHECK(e)                                                           \
	do {                                                               \
		if (!(e))                                                  \
			sh_test_fail(__FILE__, __LINE__, "CHECK(%s)", #e); \
	} while (0)

#define CHECK_EQ(a, b)                                                                         \
	do {                                                                                   \
		long long a_ = (long long)(a), b_ = (long long)(b);                            \
		if (a_ != b_)                                                                  \
			sh_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, \
				     b_);                                                      \
	} while (0)

/* expr must return exactly code (0 for success). */
#define CHECK_RC(expr, code)                                                                  \
	do {                                                                                  \
		int rc_ = (expr), want_ = (code);                                             \
		if (rc_ != want_)                                                             \
			sh_test_fail(__FILE__, __LINE__, "%s: expected %d (%s), got %d (%s)", \
				     #expr, want_, shoal_strerror(want_), rc_,                \
				     shoal_strerror(rc_));                                    \
	} while (0)
#define CHECK_OK(expr) CHECK_RC(expr, 0)

#define CHECK_STR(a, b)                                                                        \
	do {                                                                                   \
		const char *a_ = (a), *b_ = (b);                                               \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                                         \
			sh_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, \
				     a_ ? a_ : "(null)", b_ ? b_ : "(null)");                  \
	} while (0)

/* Nonzero when built with a sanitizer (slower: scale loops down). */
int sh_test_sanitized(void);

#define MS 1000000LL /* nanoseconds, for deadlines */

/* How late a wait of wait_ns may end and still count as on time here:
 * half the wait again, plus what this machine adds to any wait now. That
 * is measured at the first call in a case: the median lateness of five
 * 1 ms sleeps of the OS, times 4, at least 3 ms, twice that under a
 * sanitizer (a loaded machine, qemu-user and sanitizers are allowed for;
 * a timer twice late on a wait of 20 ms or more, or 10 times late on a
 * 1 ms wait, is not). A busy machine stalls a thread now and then for
 * tens of ms: check the median or the best of a few waits against it,
 * not each one. */
int64_t sh_test_late_bound(int64_t wait_ns);

/* late (ns past the deadline of a wait of wait_ns) is within the bound. */
#define CHECK_ON_TIME(late, wait_ns)                                                               \
	do {                                                                                       \
		int64_t l_ = (late), w_ = (wait_ns), b_ = sh_test_late_bound(w_);                  \
		if (l_ < 0 || l_ > b_)                                                             \
			sh_test_fail(__FILE__, __LINE__,                                           \
				     "%s: a wait of %.1f ms ended %.2f ms late (on time: "         \
				     "0 to %.2f ms)",                                              \
				     #late, (double)w_ / 1e6, (double)l_ / 1e6, (double)b_ / 1e6); \
	} while (0)

/* A scheduler for the calling thread / a channel, or the case fails. */
shoal_sched *sh_test_sched_new(void);
shoal_chan *sh_test_chan_new(size_t elem, size_t cap);

/* Runs argv (a path) with stdout and stderr captured into out (NUL-
 * terminated, truncated to outlen) and env's "NAME=value" entries (may be
 * NULL) added to its environment; returns its exit status, or 128 + the
 * signal that killed it. */
int sh_test_run(char *const argv[], char *const env[], char *out, size_t outlen);
/* Starts shoald of this build as the case's daemon (it dies with the
 * case): args after the program's name (NULL-ended), env's entries
 * applied to its environment ("NAME=value" sets, a bare "NAME" unsets; may
 * be NULL), its standard error into log (opened with O_TRUNC or O_APPEND
 * in log_flags; NULL: the case's own). Waits on the line shoald writes
 * once it serves (--ready-fd, which this adds), not on connects: 0 and
 * *pid then, else shoald ended first and it returns its exit status (128
 * + a signal), reaped. The case fails if neither comes within 120 s. */
int sh_test_shoald(const char *const *args, const char *const *env, const char *log, int log_flags,
		   pid_t *pid);
/* Waits on events, not in sleeps: until the file at path holds needle
 * (inotify on its directory says when it changed; its text is left in
 * buf), or until process pid is gone (a pidfd, which any process may
 * have of another of its uid). The case fails after timeout_ms. */
void sh_test_wait_text(const char *path, const char *needle, char *buf, size_t len, int timeout_ms);
void sh_test_wait_gone(pid_t pid, int timeout_ms);
/* The path of a program or extension of this build (rel: "tools/shoal",
 * "tests/ext_sample.so"), which the calling uid must be able to run;
 * found through SHOAL_TEST_BINDIR, which ctest sets. A process that
 * dropped to another uid, where the build is out of its reach (a clone
 * under a 0700 directory), gets the runner's copy of it (harness.c). */
void sh_test_bin(char *buf, size_t len, const char *rel);
/* The same for a file of the source tree the calling uid reads
 * (rel: "tests/st_write.py"), through SHOAL_SRCDIR. */
void sh_test_src(char *buf, size_t len, const char *rel);
/* The file behind the mapping that holds p, as /proc/self/map_files/LO-HI
 * into path (which root may reopen: the writable way to a segment), and
 * its line of /proc/self/maps into line (may be NULL); the case fails
 * when no mapping holds p. */
void sh_test_mapping_of(const void *p, char *path, size_t len, char *line, size_t linelen);

#define CHECK_HAS(hay, needle)                                                                 \
	do {                                                                                   \
		if (!strstr((hay), (needle)))                                                  \
			sh_test_fail(__FILE__, __LINE__, "output lacks \"%s\":\n%s", (needle), \
				     (hay));                                                   \
	} while (0)

/* Attacks as another user. drop_to: this process becomes uid (gid, the
 * groups) for good, or exits (99: refused; 98: it could go back). run_as:
 * fn(arg) in a child running as uid (0: root, nothing dropped); its exit
 * status, 0 when every check in it held, 128 + a signal that killed it. */
#define SH_TEST_NOBODY 65534
void sh_test_drop_to(uid_t uid, gid_t gid, const gid_t *groups, int ngroups);
int sh_test_run_as(uid_t uid, const gid_t *groups, int ngroups, void (*fn)(void *), void *arg);

/* Runs LeakSanitizer now (a no-op without it), so a leak is reported by
 * the case that made it, once everything is torn down. */
void sh_test_leak_check(void);

#endif

/* shoal-test: threaded */
/* Extensions in their own processes (shoal-ext of this build, loading
 * tests/ext_sample.so): calls with values both ways, errors that come back
 * with their code and message, crashes of every kind failing a call at
 * once with the signal or status and the function, deadlines, restarts,
 * start failures reported fast, limits and the basic sandbox, and 1000
 * crash/restart cycles that leak no descriptor or mapping. And the attacks
 * of issue 16 by a hostile extension (tests/ext_attack.c), each as root
 * and as uid 65534: truncating its rings, io_uring and IP sockets, a host
 * without namespaces, reaching into the host, orphans, a deaf doorbell;
 * and its output routed into the host's log. */
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char runner[4096], sample[4096], noinit[4096], attack[4096];

static void paths(void)
{
	sh_test_bin(runner, sizeof(runner), "tools/shoal-ext");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	sh_test_bin(noinit, sizeof(noinit), "tests/ext_noinit.so");
	sh_test_bin(attack, sizeof(attack), "tests/ext_attack.so");
}

/* Sanitizers in the child would catch its crashes and die another way. */
static char *no_handlers[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=1",
			      "TSAN_OPTIONS=handle_segv=0:handle_abort=0", NULL};

static shoal_ext_config config(void)
{
	paths();
	shoal_ext_config c;
	shoal_ext_config_init(&c);
	c.path = sample;
	c.runner = runner;
	c.env = no_handlers;
	return c;
}

static shoal_ext *start(const shoal_ext_config *c)
{
	shoal_ext *e = NULL;
	int rc = shoal_ext_start(&e, c);
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "start: %s: %s", shoal_strerror(rc),
			     e ? shoal_ext_error(e) : "");
	return e;
}

static int call(shoal_ext *e, const char *fn, const shoal_value *args, shoal_vbuf *vb,
		const shoal_value **r)
{
	return shoal_ext_call(e, fn, args, vb, r, shoal_deadline_in(10000 * MS));
}

#define CHECK_MSG(e, needle)                                                                   \
	do {                                                                                   \
		if (!strstr(shoal_ext_error(e), (needle)))                                     \
			sh_test_fail(__FILE__, __LINE__, "message lacks \"%s\": %s", (needle), \
				     shoal_ext_error(e));                                      \
	} while (0)

/* The directory of pid's cgroup in the hierarchy an extension's memory
 * cgroup is made in: v1's memory hierarchy where the host has one, else
 * the unified (v2) one, mounted at /sys/fs/cgroup or, on a hybrid host,
 * /sys/fs/cgroup/unified. Read here apart from the library, so the test
 * does not take its word for where that is. "" when pid has neither. */
static void cgroup_of(pid_t pid, char *buf, size_t len)
{
	char path[64], line[512], v1[512] = "", v2[512] = "";
	bool have_v1 = false, have_v2 = false;
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	FILE *f = fopen(path, "re");
	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		/* hierarchy-id:controller,controller:path */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		bool mem = false;
		for (char *save = NULL, *ctl = strtok_r(c1 + 1, ",", &save); ctl;
		     ctl = strtok_r(NULL, ",", &save))
			mem |= !strcmp(ctl, "memory");
		if (mem)
			have_v1 = true, snprintf(v1, sizeof(v1), "%s", c2 + 1);
		else if (c2 == c1 + 1)
			have_v2 = true, snprintf(v2, sizeof(v2), "%s", c2 + 1);
	}
	fclose(f);
	const char *mnt = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0
				  ? "/sys/fs/cgroup"
				  : "/sys/fs/cgroup/unified";
	if (have_v1)
		snprintf(buf, len, "/sys/fs/cgroup/memory%s", strcmp(v1, "/") ? v1 : "");
	else if (have_v2)
		snprintf(buf, len, "%s%s", mnt, strcmp(v2, "/") ? v2 : "");
	else
		buf[0] = 0;
}

SH_TEST(calls_and_values)
{
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	CHECK(shoal_ext_pid(e) > 0);
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	shoal_value *args = shoal_v_array(vb, 2);
	shoal_v_set(args, 0, shoal_v_int(vb, 40));
	shoal_v_set(args, 1, shoal_v_int(vb, 2));
	const shoal_value *r;
	CHECK_OK(call(e, "add", args, out, &r));
	CHECK_EQ(r->type, SHOAL_V_INT);
	CHECK_EQ(r->v.i, 42);
	/* every kind of value survives the trip */
	shoal_value *m = shoal_v_map(vb, 3);
	shoal_v_map_set(m, 0, shoal_v_cstr(vb, "pi"), shoal_v_float(vb, 3.25));
	shoal_v_map_set(m, 1, shoal_v_cstr(vb, "bytes"), shoal_v_bytes(vb, "\0\1\2", 3));
	shoal_value *inner = shoal_v_array(vb, 3);
	shoal_v_set(inner, 0, shoal_v_nil(vb));
	shoal_v_set(inner, 1, shoal_v_bool(vb, true));
	shoal_v_set(inner, 2, shoal_v_cstr(vb, "h\xc3\xa9llo"));
	shoal_v_map_set(m, 2, shoal_v_cstr(vb, "list"), inner);
	shoal_vbuf_reset(out);
	CHECK_OK(call(e, "echo", m, out, &r));
	CHECK(shoal_v_equal(r, m));
	CHECK(shoal_v_map_get(r, "pi")->v.f == 3.25);
	/* errors come back with their code and message */
	CHECK_RC(call(e, "fail", shoal_v_cstr(vb, "xyz"), out, &r), SHOAL_ERANGE);
	CHECK_MSG(e, "bad input: xyz");
	CHECK_RC(call(e, "add", shoal_v_cstr(vb, "x"), out, &r), SHOAL_EINVAL);
	CHECK_MSG(e, "expected [int, int]");
	CHECK_RC(call(e, "nosuch", NULL, out, &r), SHOAL_ENOENT);
	CHECK_MSG(e, "no function nosuch");
	/* copy mode carries what is larger than a ring record, in pieces */
	size_t big = 50u << 20;
	unsigned char *mem = malloc(big);
	CHECK(mem != NULL);
	for (size_t i = 0; i < big; i++)
		mem[i] = (unsigned char)(i * 7);
	shoal_vbuf_reset(out);
	shoal_value *bv = shoal_v_bytes(vb, mem, big);
	if (call(e, "echo", bv, out, &r) != 0)
		sh_test_fail(__FILE__, __LINE__, "echo 50 MiB: %s", shoal_ext_error(e));
	CHECK(shoal_v_equal(r, bv));
	int64_t shape[2] = {1024, 2048};
	shoal_value *tv = shoal_v_tensor(vb, SHOAL_DT_F32, 2, shape, mem);
	shoal_vbuf_reset(out);
	CHECK_OK(call(e, "echo", tv, out, &r));
	CHECK(shoal_v_equal(r, tv));
	free(mem);
	/* and it still works */
	CHECK_OK(call(e, "add", args, out, &r));
	CHECK_EQ(shoal_ext_starts(e), 1);
	CHECK_OK(shoal_ext_stop(e));
	/* a malformed reply is refused; the extension, out of step, is killed
	 * and comes back per its policy; the host goes on */
	c.restart = SHOAL_RESTART_ON_CRASH;
	e = start(&c);
	CHECK_RC(call(e, "bad_utf8", NULL, out, &r), SHOAL_EPROTO);
	CHECK_MSG(e, "not UTF-8");
	CHECK_RC(call(e, "bad_utf8", shoal_v_int(vb, 100000), out, &r), SHOAL_EPROTO);
	CHECK_MSG(e, "not UTF-8"); /* checked once out of band */
	CHECK_EQ(shoal_ext_starts(e), 2);
	CHECK_OK(call(e, "add", args, out, &r));
	CHECK_EQ(r->v.i, 42);
	CHECK_EQ(shoal_ext_starts(e), 3);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
	shoal_vbuf_free(out);
}

/* Resident KiB of a process (VmRSS). */
static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	long kib = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* An extension keeps the memory of a large payload for the next one, and
 * gives it back after a second with nothing to do. */
SH_TEST(idle_extension_gives_memory_back)
{
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	/* under a sanitizer, whose allocator keeps what is freed, only the
	 * calls after an idle spell are checked: a smaller payload will do */
	size_t big = sh_test_sanitized() ? 16u << 20 : 96u << 20;
	unsigned char *mem = malloc(big);
	CHECK(mem != NULL);
	memset(mem, 3, big);
	const shoal_value *r;
	shoal_value *v = shoal_v_blob(vb, mem, big);
	CHECK_OK(call(e, "echo", v, out, &r));
	CHECK(shoal_v_equal(r, v));
	long held = rss_kib(shoal_ext_pid(e));
	CHECK_OK(call(e, "add", NULL, out, &r) == SHOAL_EINVAL ? 0 : -1);
	usleep(1500 * 1000);
	long after = rss_kib(shoal_ext_pid(e));
	/* (a sanitizer's allocator keeps what is freed in quarantine) */
	if (!sh_test_sanitized() && (held < 96 * 1024 || after > held - 64 * 1024))
		sh_test_fail(__FILE__, __LINE__,
			     "extension RSS %ld KiB with the payload, %ld after idling", held,
			     after);
	CHECK_OK(call(e, "echo", v, out, &r)); /* and it still takes the next */
	CHECK(shoal_v_equal(r, v));
	CHECK_OK(shoal_ext_stop(e));
	free(mem);
	shoal_vbuf_free(vb);
	shoal_vbuf_free(out);
}

SH_TEST(crashes_fail_calls_at_once)
{
	shoal_ext_config c = config();
	c.restart = SHOAL_RESTART_ON_CRASH;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	struct {
		const char *fn, *says;
	} kinds[] = {{"crash", "SIGSEGV"}, {"abort", "SIGABRT"}, {"exit", "exited with status 7"}};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		pid_t before = shoal_ext_pid(e);
		int64_t t0 = shoal_now_ns();
		CHECK_RC(call(e, kinds[i].fn, NULL, vb, &r), SHOAL_ECRASHED);
		int64_t dt = shoal_now_ns() - t0;
		CHECK_MSG(e, kinds[i].says);
		char fn[64];
		snprintf(fn, sizeof(fn), "%s()", kinds[i].fn);
		CHECK_MSG(e, fn);
		/* at once: not after a poll interval or a timeout */
		if (dt > 2000 * MS)
			sh_test_fail(__FILE__, __LINE__, "%s took %lld ms to report", kinds[i].fn,
				     (long long)(dt / MS));
		CHECK(kill(before, 0) != 0); /* reaped */
		/* restarted on the next call */
		CHECK_OK(call(e, "add", NULL, vb, &r) == SHOAL_EINVAL ? 0 : -1);
		CHECK(shoal_ext_pid(e) != before);
	}
	CHECK_EQ(shoal_ext_starts(e), 4);
	CHECK_OK(shoal_ext_stop(e));
	/* without a restart policy it stays down */
	c.restart = SHOAL_RESTART_NEVER;
	e = start(&c);
	CHECK_RC(call(e, "crash", NULL, vb, &r), SHOAL_ECRASHED);
	CHECK_RC(call(e, "add", NULL, vb, &r), SHOAL_ECRASHED);
	CHECK_MSG(e, "not running");
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

SH_TEST(deadlines_kill_and_restart)
{
	shoal_ext_config c = config();
	c.restart = SHOAL_RESTART_ON_CRASH;
	c.call_timeout_ns = 200 * MS;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	/* its 200 ms, then 100 ms to give up when asked, then killed: on time */
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_ext_call(e, "sleep", shoal_v_int(vb, 5000), vb, &r, 0), SHOAL_ETIMEDOUT);
	CHECK_ON_TIME(shoal_now_ns() - t0 - 300 * MS, 300 * MS);
	CHECK_MSG(e, "sleep() did not return before its deadline");
	CHECK_MSG(e, "nor when asked to give up");
	/* a function that gives up when asked is not killed */
	CHECK_OK(call(e, "add", NULL, vb, &r) == SHOAL_EINVAL ? 0 : -1); /* restarted */
	uint32_t starts = shoal_ext_starts(e);
	t0 = shoal_now_ns();
	CHECK_RC(shoal_ext_call(e, "patient", NULL, vb, &r, shoal_deadline_in(100 * MS)),
		 SHOAL_ETIMEDOUT);
	CHECK_ON_TIME(shoal_now_ns() - t0 - 100 * MS, 100 * MS); /* (it looks every 1 ms) */
	CHECK_MSG(e, "gave up when asked");
	CHECK_OK(call(e, "add", NULL, vb, &r) == SHOAL_EINVAL ? 0 : -1);
	CHECK_EQ(shoal_ext_starts(e), starts); /* the same process */
	/* an explicit deadline wins over the config's */
	CHECK_OK(shoal_ext_call(e, "sleep", shoal_v_int(vb, 300), vb, &r,
				shoal_deadline_in(5000 * MS)));
	CHECK_EQ(shoal_ext_starts(e), 2);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

SH_TEST(start_failures_are_fast)
{
	shoal_ext_config c = config();
	struct {
		const char *path, *env;
		int rc;
		const char *says;
	} cases[] = {
		{"/nonexistent/ext.so", NULL, SHOAL_ENOENT, "No such file"},
		{noinit, NULL, SHOAL_EBADMSG, "not a shoal extension"},
		{sample, "EXT_SAMPLE_INIT=fail", SHOAL_EACCES, "init refused"},
		{sample, "EXT_SAMPLE_INIT=crash", SHOAL_ECRASHED, "SIGSEGV while loading"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *env[] = {no_handlers[0], no_handlers[1], (char *)cases[i].env, NULL};
		c.path = cases[i].path;
		c.env = env;
		shoal_ext *e = NULL;
		int64_t t0 = shoal_now_ns();
		CHECK_RC(shoal_ext_start(&e, &c), cases[i].rc);
		CHECK(shoal_now_ns() - t0 < 2000 * MS);
		CHECK(e != NULL);
		CHECK_MSG(e, cases[i].says);
		CHECK_OK(shoal_ext_stop(e));
	}
	c.path = sample;
	c.env = no_handlers;
	c.runner = "/nonexistent/shoal-ext";
	shoal_ext *e = NULL;
	CHECK_RC(shoal_ext_start(&e, &c), SHOAL_ENOENT);
	CHECK_MSG(e, "cannot run");
	CHECK_OK(shoal_ext_stop(e));
	/* a runner that runs the runner (as python3 runs shoal's module): its
	 * arguments come before shoal-ext's options */
	char *via[SHOAL_EXT_RUNNER_ARGS_MAX + 2] = {runner, NULL};
	c.runner = "/usr/bin/env";
	c.runner_args = via;
	e = start(&c);
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	shoal_value *args = shoal_v_array(vb, 2);
	shoal_v_set(args, 0, shoal_v_int(vb, 2));
	shoal_v_set(args, 1, shoal_v_int(vb, 3));
	const shoal_value *r;
	CHECK_OK(call(e, "add", args, out, &r));
	CHECK_EQ(r->v.i, 5);
	shoal_vbuf_free(out);
	shoal_vbuf_free(vb);
	CHECK_OK(shoal_ext_stop(e));
	for (int i = 0; i <= SHOAL_EXT_RUNNER_ARGS_MAX; i++)
		via[i] = "-u";
	e = NULL;
	CHECK_RC(shoal_ext_start(&e, &c), SHOAL_EINVAL); /* too many */
	CHECK(e == NULL);
}

SH_TEST(limits_and_basic_sandbox)
{
	shoal_ext_config c = config();
	setenv("TEST_EXT_SECRET", "leaked", 1);
	int stray = open("/dev/null", O_RDONLY); /* inheritable */
	CHECK(stray >= 0);
	char *env[] = {"GIVEN=yes", no_handlers[0], no_handlers[1], NULL};
	c.env = env;
	c.cwd = "/tmp";
	c.max_files = 32;
	if (!sh_test_sanitized())
		c.mem_limit = 512u << 20; /* ASan reserves terabytes of address space */
	c.sandbox = SHOAL_SANDBOX_BASIC;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	CHECK_OK(call(e, "getenv", shoal_v_cstr(vb, "TEST_EXT_SECRET"), vb, &r));
	CHECK_EQ(r->type, SHOAL_V_NIL);
	CHECK_OK(call(e, "getenv", shoal_v_cstr(vb, "GIVEN"), vb, &r));
	CHECK_STR(r->v.s, "yes");
	CHECK_OK(call(e, "cwd", NULL, vb, &r));
	CHECK_STR(r->v.s, "/tmp");
	/* descriptors: 0-2 and its own three, nothing of ours */
	CHECK_OK(call(e, "fds", NULL, vb, &r));
	if (r->v.i > 6)
		sh_test_fail(__FILE__, __LINE__, "the extension has %lld descriptors open",
			     (long long)r->v.i);
	CHECK_OK(call(e, "open_many", shoal_v_int(vb, 100), vb, &r));
	CHECK(r->v.i < 32);
	if (c.mem_limit) {
		CHECK_RC(call(e, "alloc", shoal_v_int(vb, 1024), vb, &r), SHOAL_ENOMEM);
		CHECK_MSG(e, "malloc of 1024 MiB failed");
		CHECK_OK(call(e, "alloc", shoal_v_int(vb, 64), vb, &r));
	}
	CHECK_OK(shoal_ext_stop(e));
	/* without the sandbox the environment is ours */
	c.sandbox = SHOAL_SANDBOX_NONE;
	e = start(&c);
	CHECK_OK(call(e, "getenv", shoal_v_cstr(vb, "TEST_EXT_SECRET"), vb, &r));
	CHECK_STR(r->v.s, "leaked");
	CHECK_OK(shoal_ext_stop(e));
	close(stray);
	shoal_vbuf_free(vb);
}

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	CHECK(d != NULL);
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static int count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	int n = 0, ch;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

/* The cgroup e's process runs in (into dir), which must be one of its own
 * right under base, named prefix...; and the processes in it. */
static void ext_cgroup(shoal_ext *e, const char *base, const char *prefix, char *dir, size_t len,
		       pid_t *procs, int *nprocs)
{
	cgroup_of(shoal_ext_pid(e), dir, len);
	const char *leaf = strrchr(dir, '/');
	if (!leaf || (size_t)(leaf - dir) != strlen(base) || strncmp(dir, base, strlen(base)) ||
	    strncmp(leaf + 1, prefix, strlen(prefix)))
		sh_test_fail(__FILE__, __LINE__, "the extension's cgroup is %s, not %s/%s*", dir,
			     base, prefix);
	char path[700];
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	FILE *f = fopen(path, "re");
	CHECK(f != NULL);
	int n = 0, pid;
	while (n < 64 && fscanf(f, "%d", &pid) == 1)
		procs[n++] = pid;
	fclose(f);
	CHECK(n >= 1);
	*nprocs = n;
}

/* mem_max: a memory cgroup of its own; past it the OOM killer ends the
 * extension, and the host says that was why. */
SH_TEST(memory_limit_kills_with_a_reason)
{
	shoal_ext_config c = config();
	c.mem_max = 160u << 20; /* room for a sanitized runtime, not for the hog */
	c.restart = SHOAL_RESTART_ON_CRASH;
	char *env[] = {no_handlers[0], no_handlers[1], NULL};
	c.env = env;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	/* each run of it in a cgroup of its own, which we note to look for
	 * after the stop, with the processes in it */
	char base[600], prefix[64], cg[2][600];
	pid_t procs[2][64];
	int nprocs[2];
	cgroup_of(getpid(), base, sizeof(base));
	snprintf(prefix, sizeof(prefix), "shoal-ext-%d-", (int)getpid());
	CHECK_OK(call(e, "hog", shoal_v_int(vb, 16), vb, &r));
	ext_cgroup(e, base, prefix, cg[0], sizeof(cg[0]), procs[0], &nprocs[0]);
	CHECK_RC(call(e, "hog", shoal_v_int(vb, 2048), vb, &r), SHOAL_ECRASHED);
	CHECK_MSG(e, "killed by the OOM killer: over its memory limit of 160 MiB");
	CHECK_MSG(e, "in hog()");
	/* it comes back, limited again */
	CHECK_OK(call(e, "hog", shoal_v_int(vb, 16), vb, &r));
	CHECK_EQ(shoal_ext_starts(e), 2);
	ext_cgroup(e, base, prefix, cg[1], sizeof(cg[1]), procs[1], &nprocs[1]);
	CHECK(strcmp(cg[0], cg[1]) != 0);
	CHECK_OK(shoal_ext_stop(e));
	/* and its cgroups are gone, with every process that was in them */
	for (int k = 0; k < 2; k++) {
		if (access(cg[k], F_OK) == 0 || errno != ENOENT)
			sh_test_fail(__FILE__, __LINE__, "cgroup %s left behind", cg[k]);
		for (int i = 0; i < nprocs[k]; i++)
			if (kill(procs[k][i], 0) == 0 || errno != ESRCH)
				sh_test_fail(__FILE__, __LINE__, "process %d of %s still there",
					     (int)procs[k][i], cg[k]);
	}
	DIR *d = opendir(base);
	CHECK(d != NULL);
	for (struct dirent *de; (de = readdir(d)) != NULL;)
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			sh_test_fail(__FILE__, __LINE__, "cgroup %s/%s left behind", base,
				     de->d_name);
	closedir(d);
	shoal_vbuf_free(vb);
}

SH_TEST_T(crash_restart_cycles_leak_nothing, 240)
{
	shoal_ext_config c = config();
	c.restart = SHOAL_RESTART_ON_CRASH;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	CHECK_RC(call(e, "crash", NULL, vb, &r), SHOAL_ECRASHED); /* warm up the path */
	CHECK_RC(call(e, "add", NULL, vb, &r), SHOAL_EINVAL);
	int fds = count_dir("/proc/self/fd"), maps = count_lines("/proc/self/maps");
	size_t bytes = shoal_alloc_bytes();
	int cycles = sh_test_sanitized() ? 100 : 1000;
	for (int i = 0; i < cycles; i++) {
		CHECK_RC(call(e, "crash", NULL, vb, &r), SHOAL_ECRASHED);
		shoal_vbuf_reset(vb);
		CHECK_RC(call(e, "add", NULL, vb, &r), SHOAL_EINVAL); /* restarted */
	}
	CHECK_EQ(shoal_ext_starts(e), (uint32_t)cycles + 2);
	CHECK_EQ(count_dir("/proc/self/fd"), fds);
	CHECK_EQ(count_lines("/proc/self/maps"), maps);
	CHECK_EQ(shoal_alloc_bytes(), bytes);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

/* test.down(d): calls the extension's nested(d - 1). */
static int svc_down(void *self, const shoal_value *args, shoal_vbuf *out, shoal_value **result,
		    char *msg, size_t msglen)
{
	shoal_ext *e = self;
	const shoal_value *r;
	shoal_value *d = shoal_v_int(out, args->v.i - 1);
	int rc = shoal_ext_call(e, "nested", d, out, &r, SHOAL_FOREVER);
	if (rc) {
		snprintf(msg, msglen, "%s", shoal_ext_error(e));
		return rc;
	}
	*result = (shoal_value *)r;
	return 0;
}

/* Calls the extension's exit from inside its call of this service: the
 * extension is gone when the service returns. */
static int svc_exit_there(void *self, const shoal_value *args, shoal_vbuf *out,
			  shoal_value **result, char *msg, size_t msglen)
{
	(void)args;
	const shoal_value *r;
	int rc = shoal_ext_call(self, "exit", shoal_v_int(out, 3), out, &r, SHOAL_FOREVER);
	snprintf(msg, msglen, "exit: %s", shoal_strerror(rc));
	*result = NULL;
	return rc ? rc : SHOAL_EIO;
}

static int svc_double(void *self, const shoal_value *args, shoal_vbuf *out, shoal_value **result,
		      char *msg, size_t msglen)
{
	(void)self;
	if (!args || args->type != SHOAL_V_INT) {
		snprintf(msg, msglen, "double: expected an int");
		return SHOAL_EINVAL;
	}
	*result = shoal_v_int(out, args->v.i * 2);
	return 0;
}

static int svc_echo(void *self, const shoal_value *args, shoal_vbuf *out, shoal_value **result,
		    char *msg, size_t msglen)
{
	(void)self, (void)out, (void)msg, (void)msglen;
	*result = (shoal_value *)args;
	return 0;
}

/* Bytes, strings and tensors of many ring records, in an array: each
 * different, so that a part landing in the wrong place shows. */
static shoal_value *big_values(shoal_vbuf *vb, size_t n, int seed)
{
	unsigned char *mem = malloc(n);
	CHECK(mem != NULL);
	for (size_t i = 0; i < n; i++)
		mem[i] = (unsigned char)(i * 13 + (size_t)seed);
	char *text = malloc(n);
	CHECK(text != NULL);
	for (size_t i = 0; i < n; i++)
		text[i] = (char)('a' + (i + (size_t)seed) % 26);
	int64_t shape[2] = {(int64_t)n / 64, 16};
	shoal_value *a = shoal_v_array(vb, 4);
	shoal_v_set(a, 0, shoal_v_bytes(vb, mem, n));
	shoal_v_set(a, 1, shoal_v_str(vb, text, n - 3));
	shoal_value *keep = shoal_v_bytes(vb, mem + 7, n - 7); /* the tensor's memory */
	shoal_v_set(a, 2, shoal_v_tensor(vb, SHOAL_DT_F32, 2, shape, keep->v.bytes));
	shoal_v_set(a, 3, shoal_v_int(vb, seed));
	free(mem);
	free(text);
	return a;
}

SH_TEST(calls_nest_both_ways)
{
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	CHECK_OK(shoal_service_register("test.down", svc_down, e));
	CHECK_OK(shoal_service_register("test.double", svc_double, NULL));
	CHECK_RC(shoal_service_register("test.double", svc_double, NULL), SHOAL_EEXIST);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	/* a singleton through the extension */
	shoal_value *a = shoal_v_array(vb, 2);
	shoal_v_set(a, 0, shoal_v_cstr(vb, "test.double"));
	shoal_v_set(a, 1, shoal_v_int(vb, 21));
	CHECK_OK(call(e, "call_host", a, vb, &r));
	CHECK_EQ(r->v.i, 42);
	/* a service's error reaches the extension, and comes back to us */
	shoal_v_set(a, 1, shoal_v_cstr(vb, "x"));
	CHECK_RC(call(e, "call_host", a, vb, &r), SHOAL_EINVAL);
	CHECK_MSG(e, "double: expected an int");
	shoal_v_set(a, 0, shoal_v_cstr(vb, "test.nothing"));
	CHECK_RC(call(e, "call_host", a, vb, &r), SHOAL_ENOENT);
	CHECK_MSG(e, "no service method test.nothing");
	/* large payloads both ways through a host service: out of band in
	 * every direction */
	CHECK_OK(shoal_service_register("test.echo", svc_echo, NULL));
	shoal_value *big = big_values(vb, 3u << 20, 5);
	shoal_v_set(a, 0, shoal_v_cstr(vb, "test.echo"));
	shoal_v_set(a, 1, big);
	CHECK_OK(call(e, "call_host", a, vb, &r));
	CHECK(shoal_v_equal(r, big));
	CHECK_OK(shoal_service_unregister("test.echo"));
	/* host -> ext -> host -> ext ... 64 levels each way, one thread */
	CHECK_OK(call(e, "nested", shoal_v_int(vb, 64), vb, &r));
	CHECK_EQ(r->v.i, 64);
	CHECK_OK(call(e, "nested", shoal_v_int(vb, 3), vb, &r));
	CHECK_EQ(r->v.i, 3);
	/* deeper than the extension allows: an error, not a hang or a crash */
	CHECK_RC(call(e, "nested", shoal_v_int(vb, 200), vb, &r), SHOAL_ERANGE);
	CHECK_MSG(e, "nested deeper than");
	CHECK_OK(call(e, "nested", shoal_v_int(vb, 2), vb, &r)); /* and it goes on */
	/* the extension exits in a call nested in our service: its rings are
	 * gone when the service returns, whose return is not sent (it was, on
	 * the unmapped rings: SIGSEGV); the outer call fails as a crash */
	CHECK_OK(shoal_service_register("test.exit_there", svc_exit_there, e));
	shoal_v_set(a, 0, shoal_v_cstr(vb, "test.exit_there"));
	shoal_v_set(a, 1, shoal_v_int(vb, 0));
	CHECK_RC(call(e, "call_host", a, vb, &r), SHOAL_ECRASHED);
	CHECK_MSG(e, "exited with status 3");
	CHECK_OK(shoal_service_unregister("test.exit_there"));
	CHECK_OK(shoal_service_unregister("test.down"));
	CHECK_OK(shoal_service_unregister("test.double"));
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

SH_TEST(strict_sandbox_denies_network_and_ptrace)
{
	shoal_ext_config c = config();
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	/* the control: without the sandbox both work (we are its parent) */
	shoal_ext *e = start(&c);
	CHECK_OK(call(e, "tcp", NULL, vb, &r));
	CHECK_EQ(r->v.i, 0);
	CHECK_OK(shoal_ext_stop(e));
	/* LeakSanitizer stops the world with ptrace at exit: off in here */
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	c.env = env;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	e = start(&c);
	CHECK_OK(call(e, "tcp", NULL, vb, &r));
	CHECK_EQ(r->v.i, EPERM);
	CHECK_OK(call(e, "ptrace_host", shoal_v_int(vb, getpid()), vb, &r));
	CHECK_EQ(r->v.i, EPERM);
	CHECK_OK(call(e, "add", NULL, vb, &r) == SHOAL_EINVAL ? 0 : -1); /* it still works */
	/* a pid namespace of its own (we run as root here, so the kernel
	 * lets us make one): it has one of the first pids there (2, or 3
	 * when a sanitizer's thread in its init took 2), and the host is
	 * not there */
	CHECK_OK(call(e, "pids", shoal_v_int(vb, getpid()), vb, &r));
	if (r->v.items[0].v.i < 2 || r->v.items[0].v.i > 4)
		sh_test_fail(__FILE__, __LINE__, "pid %lld: not in a namespace of its own",
			     (long long)r->v.items[0].v.i);
	CHECK_EQ(r->v.items[1].v.i, ESRCH);
	/* its crashes still say what killed it, from behind the namespace */
	CHECK_RC(call(e, "abort", NULL, vb, &r), SHOAL_ECRASHED);
	CHECK_MSG(e, "SIGABRT in abort()");
	CHECK_OK(shoal_ext_stop(e));
	/* allow_network lets sockets through, and nothing else */
	c.allow_network = true;
	e = start(&c);
	CHECK_OK(call(e, "tcp", NULL, vb, &r));
	CHECK_EQ(r->v.i, 0);
	CHECK_OK(call(e, "ptrace_host", shoal_v_int(vb, getpid()), vb, &r));
	CHECK_EQ(r->v.i, EPERM);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

/* A strict extension runs as a uid of its own, which cannot read the
 * host's private files: the host's user chose the .so, so it is read
 * before the uid changes, and loaded from that copy. Here a 0600 copy in a
 * 0700 directory of root's (as a build in root's home is). */
SH_TEST(strict_loads_a_library_only_the_host_can_read)
{
	if (geteuid() != 0)
		SH_SKIP("needs root (its strict extensions run as another uid)");
	shoal_ext_config c = config();
	char dir[] = "/tmp/shoal-test-private-XXXXXX", so[128];
	CHECK(mkdtemp(dir) != NULL); /* 0700 */
	snprintf(so, sizeof(so), "%s/ext_sample.so", dir);
	FILE *in = fopen(sample, "rb"), *out = fopen(so, "wb");
	CHECK(in && out);
	char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		CHECK(fwrite(buf, 1, n, out) == n);
	CHECK(fclose(in) == 0 && fclose(out) == 0);
	CHECK_EQ(chmod(so, 0600), 0);
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	c.env = env;
	c.path = so;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_value *args = shoal_v_array(vb, 2);
	shoal_v_set(args, 0, shoal_v_int(vb, 40));
	shoal_v_set(args, 1, shoal_v_int(vb, 2));
	const shoal_value *r;
	CHECK_OK(call(e, "add", args, vb, &r));
	CHECK_EQ(r->v.i, 42);
	CHECK_OK(shoal_ext_stop(e));
	/* one it cannot open at all still says which file and why */
	CHECK_EQ(unlink(so), 0);
	shoal_ext *gone = NULL;
	CHECK_RC(shoal_ext_start(&gone, &c), SHOAL_ENOENT);
	CHECK_MSG(gone, so);
	CHECK_OK(shoal_ext_stop(gone));
	CHECK_EQ(rmdir(dir), 0);
	shoal_vbuf_free(vb);
}

static shoal_store_stat store_stat(shoal_store *s)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	CHECK_OK(shoal_disconnect(c));
	return st;
}

/* Releases travel without replies on each side's own connection: the
 * store sees them in its own time. */
static shoal_store_stat wait_objects(shoal_store *s, uint64_t n)
{
	shoal_store_stat st = store_stat(s);
	for (int i = 0; i < 5000 && st.objects != n; i++) {
		usleep(1000);
		st = store_stat(s);
	}
	CHECK_EQ(st.objects, n);
	return st;
}

SH_TEST(shared_payloads_go_by_reference)
{
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = 256u << 20;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &so));
	shoal_ext_config c = config();
	c.store_socket = shoal_store_socket(s);
	c.payload = SHOAL_PAYLOAD_SHARED;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	/* 8 MiB: far more than a ring record can carry */
	int64_t n = 2 << 20;
	float *f = malloc((size_t)n * 4);
	CHECK(f != NULL);
	for (int64_t i = 0; i < n; i++)
		f[i] = (float)i;
	shoal_value *t = shoal_v_tensor(vb, SHOAL_DT_F32, 1, &n, f);
	const shoal_value *r;
	CHECK_OK(call(e, "echo", t, out, &r));
	CHECK_EQ(r->type, SHOAL_V_TENSOR);
	CHECK(r->v.t.obj != 0);
	CHECK(r->v.t.data != f); /* mapped from the store */
	CHECK(shoal_v_equal(r, t));
	CHECK_EQ(t->v.t.obj, 0); /* the caller's value was not changed */
	shoal_vbuf_reset(out);
	/* shared once, by reference from then on: no new object per call */
	CHECK_OK(shoal_v_share(e, vb, t));
	CHECK(t->v.t.obj != 0);
	shoal_id id = t->v.t.obj;
	for (int i = 0; i < 3; i++) {
		CHECK_OK(call(e, "echo", t, out, &r));
		CHECK_EQ(r->v.t.obj, id); /* the very object came back */
		shoal_vbuf_reset(out);
	}
	/* only that one is left (the first call's went when the extension
	 * took the next call) */
	wait_objects(s, 1);
	/* copy mode still works per call, for what fits */
	int64_t small = 100;
	shoal_value *t2 = shoal_v_tensor(vb, SHOAL_DT_F32, 1, &small, f);
	CHECK_OK(shoal_ext_call_ex(e, "echo", t2, out, &r, shoal_deadline_in(5000 * MS),
				   SHOAL_CALL_COPY));
	CHECK_EQ(r->v.t.obj, 0);
	CHECK(shoal_v_equal(r, t2));
	shoal_vbuf_reset(out);
	/* a blob (bytes by reference) goes shared like a tensor, and copied
	 * in copy mode, and stays a blob either way */
	shoal_value *blob = shoal_v_blob(vb, f, 1u << 20);
	CHECK_OK(call(e, "echo", blob, out, &r));
	CHECK_EQ(r->type, SHOAL_V_BLOB);
	CHECK(r->v.t.obj != 0);
	CHECK(r->v.t.data != (const void *)f);
	CHECK(shoal_v_equal(r, blob));
	shoal_vbuf_reset(out);
	CHECK_OK(shoal_ext_call_ex(e, "echo", blob, out, &r, shoal_deadline_in(5000 * MS),
				   SHOAL_CALL_COPY));
	CHECK_EQ(r->type, SHOAL_V_BLOB);
	CHECK_EQ(r->v.t.obj, 0);
	CHECK(shoal_v_equal(r, blob));
	shoal_vbuf_reset(out);
	/* a tensor made by the extension comes back shared */
	CHECK_OK(call(e, "make_tensor", shoal_v_int(out, 1 << 20), out, &r));
	CHECK(r->v.t.obj != 0);
	CHECK(((const float *)r->v.t.data)[12345] == 12345.0f);
	/* lifetimes are counted: once both sides let go, nothing is left */
	shoal_vbuf_reset(out);
	shoal_vbuf_reset(vb);
	CHECK_OK(call(e, "add", NULL, out, &r) == SHOAL_EINVAL ? 0 : -1); /* it lets go too */
	shoal_store_stat st = wait_objects(s, 0);
	CHECK_EQ(st.used, 0);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
	shoal_vbuf_free(out);
	free(f);
	CHECK_OK(shoal_store_close(s));
}

struct fiber_call {
	shoal_ext *e;
	int rc;
	int64_t ms;
};

static void *fiber_crash(void *arg)
{
	struct fiber_call *fc = arg;
	shoal_vbuf *vb;
	if (shoal_vbuf_create(&vb) != 0)
		return NULL;
	const shoal_value *r;
	int64_t t0 = shoal_now_ns();
	fc->rc = shoal_ext_call(fc->e, "crash", NULL, vb, &r, SHOAL_FOREVER);
	fc->ms = (shoal_now_ns() - t0) / MS;
	shoal_vbuf_free(vb);
	return fc;
}

static void *fiber_ticks(void *arg)
{
	int *ticks = arg;
	for (int i = 0; i < 5; i++) {
		shoal_sleep_until(shoal_deadline_in(MS));
		(*ticks)++;
	}
	return NULL;
}

/* From a fiber, a call blocks only its fiber, and a crash still ends it. */
SH_TEST(calls_from_fibers)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	struct fiber_call fc = {.e = e};
	int ticks = 0;
	shoal_fiber *a, *b;
	CHECK_OK(shoal_spawn(&a, fiber_crash, &fc, NULL));
	CHECK_OK(shoal_spawn(&b, fiber_ticks, &ticks, NULL));
	CHECK_OK(shoal_join(a, NULL));
	CHECK_OK(shoal_join(b, NULL));
	CHECK_RC(fc.rc, SHOAL_ECRASHED);
	CHECK_MSG(e, "SIGSEGV");
	CHECK(fc.ms < 2000);
	CHECK_EQ(ticks, 5);
	CHECK_OK(shoal_ext_stop(e));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(calls_in_flight)
{
	shoal_ext_config c = config();
	c.restart = SHOAL_RESTART_ON_CRASH;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	enum { N = 64 };
	shoal_future *f[N];
	for (int i = 0; i < N; i++) {
		shoal_value *a = shoal_v_array(vb, 2);
		shoal_v_set(a, 0, shoal_v_int(vb, i));
		shoal_v_set(a, 1, shoal_v_int(vb, 1000));
		CHECK_OK(shoal_ext_call_async(e, "add", a, 0, 0, &f[i]));
	}
	/* waited for in any order: each gets its own result */
	const shoal_value *r;
	for (int i = N - 1; i >= 0; i -= 2) {
		CHECK_OK(shoal_future_wait(f[i], vb, &r, shoal_deadline_in(5000 * MS)));
		CHECK_EQ(r->v.i, 1000 + i);
	}
	for (int i = 0; i < N; i += 2) {
		CHECK_OK(shoal_future_wait(f[i], vb, &r, shoal_deadline_in(5000 * MS)));
		CHECK_EQ(r->v.i, 1000 + i);
	}
	/* large results read while waiting for another call are kept for
	 * their own wait, whichever order the waits come in */
	shoal_value *in[3];
	for (int i = 0; i < 3; i++) {
		in[i] = big_values(vb, (1u << 20) + (size_t)i * 4096, i);
		CHECK_OK(shoal_ext_call_async(e, "echo", in[i], 0, 0, &f[i]));
	}
	for (int i = 2; i >= 0; i--) {
		shoal_vbuf *own;
		CHECK_OK(shoal_vbuf_create(&own));
		CHECK_OK(shoal_future_wait(f[i], own, &r, shoal_deadline_in(5000 * MS)));
		CHECK(shoal_v_equal(r, in[i]));
		shoal_vbuf_free(own);
	}
	/* a crash fails every call in flight behind it */
	shoal_future *a, *b, *d;
	CHECK_OK(shoal_ext_call_async(e, "sleep", shoal_v_int(vb, 50), 0, 0, &a));
	CHECK_OK(shoal_ext_call_async(e, "crash", NULL, 0, 0, &b));
	CHECK_OK(shoal_ext_call_async(e, "add", NULL, 0, 0, &d));
	CHECK_RC(shoal_future_wait(d, vb, &r, shoal_deadline_in(5000 * MS)), SHOAL_ECRASHED);
	CHECK_MSG(e, "SIGSEGV in crash()"); /* the call it was running */
	CHECK_OK(shoal_future_wait(a, vb, &r, shoal_deadline_in(5000 * MS)));
	CHECK_RC(shoal_future_wait(b, vb, &r, shoal_deadline_in(5000 * MS)), SHOAL_ECRASHED);
	/* and the next call restarts it */
	shoal_value *two = shoal_v_array(vb, 2);
	shoal_v_set(two, 0, shoal_v_int(vb, 2));
	shoal_v_set(two, 1, shoal_v_int(vb, 3));
	CHECK_OK(call(e, "add", two, vb, &r));
	CHECK_EQ(r->v.i, 5);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

struct fiber_adds {
	shoal_ext *e;
	int base, ok;
};

static void *fiber_adds(void *arg)
{
	struct fiber_adds *fa = arg;
	shoal_vbuf *vb;
	if (shoal_vbuf_create(&vb) != 0)
		return NULL;
	for (int i = 0; i < 200; i++) {
		shoal_vbuf_reset(vb);
		shoal_value *a = shoal_v_array(vb, 2);
		shoal_v_set(a, 0, shoal_v_int(vb, fa->base));
		shoal_v_set(a, 1, shoal_v_int(vb, i));
		const shoal_value *r;
		if (shoal_ext_call(fa->e, "add", a, vb, &r, shoal_deadline_in(5000 * MS)) == 0 &&
		    r->v.i == fa->base + i)
			fa->ok++;
		if (i % 50 == 0)
			shoal_ext_call(fa->e, "sleep", shoal_v_int(vb, 2), vb, &r, SHOAL_FOREVER);
	}
	shoal_vbuf_free(vb);
	return fa;
}

/* Fibers of one thread calling one extension take turns. */
SH_TEST(fibers_share_an_extension)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	struct fiber_adds fa[4];
	shoal_fiber *f[4];
	for (int i = 0; i < 4; i++) {
		fa[i] = (struct fiber_adds){.e = e, .base = i * 1000};
		CHECK_OK(shoal_spawn(&f[i], fiber_adds, &fa[i], NULL));
	}
	for (int i = 0; i < 4; i++) {
		CHECK_OK(shoal_join(f[i], NULL));
		CHECK_EQ(fa[i].ok, 200);
	}
	CHECK_OK(shoal_ext_stop(e));
	CHECK_OK(shoal_sched_destroy(s));
}

/* A thread with a scheduler of its own whose two fibers call the
 * extension (fiber_adds). */
static void *fibers_of_a_thread(void *arg)
{
	struct fiber_adds *fa = arg;
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f[2];
	for (int i = 0; i < 2; i++)
		CHECK_OK(shoal_spawn(&f[i], fiber_adds, &fa[i], NULL));
	for (int i = 0; i < 2; i++)
		CHECK_OK(shoal_join(f[i], NULL));
	CHECK_OK(shoal_sched_destroy(s));
	return NULL;
}

/* Fibers of two threads and a plain thread calling one extension take
 * turns: a fiber waiting for its turn is woken by a caller of another
 * thread as by one of its own. */
SH_TEST(fibers_of_threads_share_an_extension)
{
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	struct fiber_adds fa[5];
	for (int i = 0; i < 5; i++)
		fa[i] = (struct fiber_adds){.e = e, .base = i * 1000};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, fibers_of_a_thread, &fa[2 * i]) == 0);
	fiber_adds(&fa[4]);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(fa[i].ok, 200);
	CHECK_OK(shoal_ext_stop(e));
}

/* Runs fn in a child that dropped to uid/gid 65534 (no groups): the host
 * of an unprivileged user. */
static void as_nobody(void (*fn)(void))
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
			_exit(99);
		fn();
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		sh_test_fail(__FILE__, __LINE__, "the part as uid 65534 failed (status 0x%x)", st);
}

/* issue 16.3: an extension truncates (and grows) its rings through every
 * path it has; the kernel refuses each (the size is sealed), so the host
 * reads its rings on and the extension's own touch of them works. */
static void rings_truncation_refused(void)
{
	for (int sb = SHOAL_SANDBOX_NONE; sb <= SHOAL_SANDBOX_STRICT; sb++) {
		shoal_ext_config c = config();
		c.path = attack;
		c.sandbox = (shoal_sandbox)sb;
		/* (LeakSanitizer needs ptrace, which strict denies) */
		char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0",
			       no_handlers[1], NULL};
		c.env = env;
		shoal_ext *e = start(&c);
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		const shoal_value *r;
		int rc = call(e, "truncate_rings", NULL, vb, &r);
		if (rc)
			sh_test_fail(__FILE__, __LINE__, "sandbox %d: %s: %s", sb,
				     shoal_strerror(rc), shoal_ext_error(e));
		for (int i = 0; i < 3; i++)
			if (r->v.items[i].v.i == 0)
				sh_test_fail(__FILE__, __LINE__,
					     "sandbox %d, uid %d: path %d truncated the rings", sb,
					     (int)getuid(), i);
		/* as root map_files is open to it: the size it sees is unchanged */
		if (r->v.items[3].v.i >= 0)
			CHECK(r->v.items[3].v.i <= r->v.items[4].v.i &&
			      r->v.items[3].v.i > r->v.items[4].v.i - 4096);
		/* and the host goes on over the same rings */
		for (int i = 0; i < 100; i++) {
			shoal_vbuf_reset(vb);
			CHECK_RC(call(e, "nosuch", NULL, vb, &r), SHOAL_ENOENT);
		}
		CHECK_EQ(shoal_ext_starts(e), 1);
		CHECK_OK(shoal_ext_stop(e));
		shoal_vbuf_free(vb);
	}
}

SH_TEST(extension_cannot_resize_its_rings)
{
	rings_truncation_refused();
	as_nobody(rings_truncation_refused);
}

/* A TCP listener on 127.0.0.1 (non-blocking); its port in *port. */
static int loopback_listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(sa);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(fd, 16) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&sa, &l) == 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Whether a connection reached the listener within ms. */
static bool connected(int lfd, int ms)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	if (poll(&p, 1, ms) != 1)
		return false;
	int c = accept(lfd, NULL, NULL);
	if (c >= 0)
		close(c);
	return c >= 0;
}

/* issue 16.5: a strict extension tries io_uring (whose SOCKET op would
 * make an IP socket past the socket() rule) and IP sockets to a listener
 * of ours on 127.0.0.1; the control (no sandbox) shows both attacks
 * work where nothing stops them. */
static void strict_denies_io_uring_and_ip(void)
{
	shoal_ext_config c = config();
	c.path = attack;
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	int port, lfd = loopback_listener(&port);
	shoal_ext *e = start(&c);
	CHECK_OK(call(e, "net", shoal_v_int(vb, port), vb, &r));
	CHECK_EQ(r->v.items[1].v.i, 0); /* the control connects */
	CHECK(connected(lfd, 5000));
	CHECK_OK(call(e, "io_uring", NULL, vb, &r));
	bool uring_here = r->v.items[0].v.i == 0; /* the kernel offers io_uring */
	CHECK_OK(shoal_ext_stop(e));
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	c.env = env;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	for (int allow = 0; allow <= 1; allow++) {
		c.allow_network = allow;
		e = start(&c);
		CHECK_OK(call(e, "io_uring", NULL, vb, &r));
		for (int i = 0; i < 3; i++)
			if (r->v.items[i].v.i != EPERM)
				sh_test_fail(__FILE__, __LINE__,
					     "io_uring call %d: errno %lld, not EPERM (io_uring "
					     "here: %d)",
					     i, (long long)r->v.items[i].v.i, uring_here);
		CHECK_OK(call(e, "net", shoal_v_int(vb, port), vb, &r));
		if (!allow) {
			CHECK_EQ(r->v.items[0].v.i, EPERM); /* AF_INET */
			CHECK_EQ(r->v.items[1].v.i, EPERM);
			CHECK_EQ(r->v.items[2].v.i, EPERM); /* AF_INET6 */
			CHECK_EQ(r->v.items[4].v.i, EPERM); /* AF_NETLINK */
		} else {
			CHECK_EQ(r->v.items[0].v.i, 0);
			/* its own network namespace is not ours... unless allowed:
			 * then it has ours, by choice of the config */
		}
		CHECK_EQ(r->v.items[3].v.i, EPERM); /* AF_PACKET, allowed or not */
		/* and an ordinary extension's work goes on under the allow-list */
		CHECK_OK(call(e, "usable", NULL, vb, &r));
		for (int i = 0; i < 6; i++)
			if (r->v.items[i].v.i != 0)
				sh_test_fail(__FILE__, __LINE__, "usable: step %d failed: %lld", i,
					     (long long)r->v.items[i].v.i);
		CHECK_EQ(r->v.items[5].v.i, 0); /* AF_UNIX it may have */
		if (!allow && connected(lfd, 300))
			sh_test_fail(__FILE__, __LINE__, "the strict extension reached 127.0.0.1");
		CHECK_OK(call(e, "add", NULL, vb, &r) == SHOAL_ENOENT ? 0 : -1);
		CHECK_OK(shoal_ext_stop(e));
	}
	close(lfd);
	shoal_vbuf_free(vb);
}

SH_TEST(strict_denies_io_uring_and_ip)
{
	strict_denies_io_uring_and_ip();
	as_nobody(strict_denies_io_uring_and_ip);
}

static void write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

/* A host where the kernel really refuses a network namespace: inside a
 * user namespace of its own that may make no further user namespaces
 * (its max_user_namespaces is 0) and whose capabilities are gone. */
static bool host_without_namespaces(void)
{
	/* ThreadSanitizer's runtime keeps a thread of its own, and a process
	 * with threads may not enter a new user namespace */
	if (unshare(CLONE_NEWUSER) != 0) {
		if (errno == EINVAL && sh_test_sanitized())
			return false;
		sh_test_fail(__FILE__, __LINE__, "unshare(CLONE_NEWUSER): %s", strerror(errno));
	}
	write_text("/proc/self/setgroups", "deny");
	write_text("/proc/self/uid_map", "0 0 1");
	write_text("/proc/self/gid_map", "0 0 1");
	write_text("/proc/sys/user/max_user_namespaces", "0");
	for (int cap = 0; cap <= 63; cap++)
		prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	CHECK(syscall(SYS_capset, &h, d) == 0);
	/* the precondition, really in force */
	CHECK(unshare(CLONE_NEWNET) != 0);
	CHECK(unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0);
	return true;
}

/* issue 16.5: where strict cannot have a network namespace (and
 * allow_network is off) it does not start: it used to warn and run
 * beside the host's 127.0.0.1. */
SH_TEST(strict_fails_closed_without_namespaces)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (!host_without_namespaces()) {
			fprintf(stderr, "skipped: a sanitizer's thread keeps us out of a user "
					"namespace\n");
			_exit(0);
		}
		shoal_ext_config c = config();
		c.path = attack;
		c.sandbox = SHOAL_SANDBOX_STRICT;
		shoal_ext *e = NULL;
		CHECK_RC(shoal_ext_start(&e, &c), SHOAL_EPERM);
		CHECK_MSG(e, "network");
		CHECK_MSG(e, "kernel refused");
		CHECK_EQ(shoal_ext_pid(e), 0);
		CHECK_OK(shoal_ext_stop(e));
		/* nor with allow_network: its other namespaces are missing too */
		c.allow_network = true;
		CHECK_RC(shoal_ext_start(&e, &c), SHOAL_EPERM);
		CHECK_MSG(e, "namespaces of its own");
		CHECK_OK(shoal_ext_stop(e));
		/* basic still runs there */
		c.sandbox = SHOAL_SANDBOX_BASIC;
		e = start(&c);
		CHECK_OK(shoal_ext_stop(e));
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The processes below pid (its children, theirs...), into out. */
static int descendants(pid_t pid, pid_t *out, int max)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = fopen(path, "re");
	int n = 0, c;
	while (f && n < max && fscanf(f, "%d", &c) == 1) {
		out[n++] = c;
		n += descendants(c, out + n, max - n);
	}
	if (f)
		fclose(f);
	return n;
}

static volatile int64_t canary = 0x1122334455667788;

/* issue 16.4: a strict extension of a host tries every way into it: its
 * memory through /proc/<host>/mem (the canary must stay), its
 * descriptors, capabilities of its own, leaving its cgroup (and then its
 * memory limit). The control, without the sandbox and as root, shows
 * the write lands where nothing stops it. */
static void strict_cannot_reach_the_host(void)
{
	bool root = geteuid() == 0;
	shoal_ext_config c = config();
	c.path = attack;
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	shoal_value *poke = shoal_v_array(vb, 3);
	shoal_v_set(poke, 0, shoal_v_int(vb, getpid()));
	shoal_v_set(poke, 1, shoal_v_int(vb, (int64_t)(uintptr_t)&canary));
	shoal_v_set(poke, 2, shoal_v_int(vb, 666));
	shoal_ext *e;
	if (root) {
		e = start(&c);
		CHECK_OK(call(e, "poke_mem", poke, vb, &r));
		CHECK_EQ(r->v.items[1].v.i, 0);
		CHECK_EQ(canary, 666); /* the attack works on an unconfined child */
		canary = 0x1122334455667788;
		CHECK_OK(shoal_ext_stop(e));
	}
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	c.env = env;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	/* (not as uid 65534 under a sanitizer: with no cgroup for it, mem_max
	 * becomes an address-space limit, and ASan reserves terabytes) */
	if (root || !sh_test_sanitized())
		c.mem_max = 160u << 20;
	e = start(&c);
	CHECK_OK(call(e, "poke_mem", poke, vb, &r));
	CHECK(r->v.items[0].v.i != 0); /* no /proc/<host> to open */
	CHECK_EQ(canary, 0x1122334455667788);
	CHECK_OK(call(e, "host_fds", shoal_v_int(vb, getpid()), vb, &r));
	for (int i = 0; i < 4; i++)
		if (r->v.items[i].v.i == 0)
			sh_test_fail(__FILE__, __LINE__, "host_fds: path %d open to it", i);
	CHECK_OK(call(e, "caps", NULL, vb, &r));
	for (int i = 0; i < 5; i++)
		if (r->v.items[i].v.i != 0)
			sh_test_fail(__FILE__, __LINE__, "capability set %d is %llx", i,
				     (long long)r->v.items[i].v.i);
	if (root) {
		/* a uid and gid of its own, no account's (not nobody's) */
		int64_t uid = r->v.items[5].v.i, gid = r->v.items[6].v.i;
		if (uid < 61184 || uid > 65519 || gid != uid)
			sh_test_fail(__FILE__, __LINE__, "strict runs as uid %lld, gid %lld",
				     (long long)uid, (long long)gid);
		CHECK(getpwuid((uid_t)uid) == NULL && getgrgid((gid_t)gid) == NULL);
	}
	CHECK_OK(call(e, "escape_cgroup", NULL, vb, &r));
	for (int i = 0; i < 4; i++)
		if (r->v.items[i].v.i == 0)
			sh_test_fail(__FILE__, __LINE__, "escape_cgroup: hierarchy %d let it go",
				     i);
	if (root) {
		/* seen from here: every process of it still in its own cgroup */
		char want[64], got[512];
		snprintf(want, sizeof(want), "/shoal-ext-%d-", (int)getpid());
		pid_t kids[16];
		int n = descendants(shoal_ext_pid(e), kids, 16);
		CHECK(n >= 2); /* the namespace's init and the extension */
		for (int i = 0; i < n; i++) {
			cgroup_of(kids[i], got, sizeof(got));
			if (!strstr(got, want))
				sh_test_fail(__FILE__, __LINE__, "process %d is in cgroup %s",
					     (int)kids[i], got);
		}
	}
	CHECK_OK(shoal_ext_stop(e));
	if (root) {
		/* and its memory limit holds */
		c.path = sample;
		e = start(&c);
		CHECK_RC(call(e, "hog", shoal_v_int(vb, 2048), vb, &r), SHOAL_ECRASHED);
		CHECK_MSG(e, "killed by the OOM killer");
		CHECK_OK(shoal_ext_stop(e));
	}
	shoal_vbuf_free(vb);
}

SH_TEST(strict_cannot_reach_the_host)
{
	strict_cannot_reach_the_host();
	as_nobody(strict_cannot_reach_the_host);
}

/* issue 31.1: every way into a live strict extension of a root host that
 * another local user has (uid 65534, the real nobody other daemons run
 * as, another unprivileged uid, and even its own uid): ptrace, its
 * memory through /proc/<pid>/mem, read and written, its descriptors
 * through pidfd_getfd and by reopening /proc/<pid>/fd/N, map_files, its
 * environment. Each is tried on a control first, a process of the
 * attacker's own uid that is dumpable, so the attack is shown to work. */
enum {
	INTO_ATTACH = 1,
	INTO_MEM_READ = 2,
	INTO_MEM_WRITE = 4,
	INTO_GETFD = 8,
	INTO_FD = 16,
	INTO_MAP_FILES = 32,
	INTO_ENVIRON = 64
};

/* What of the above works against pid, as this process is: a mask. */
static int ways_into(pid_t pid)
{
	int got = 0;
	char path[96];
	if (ptrace(PTRACE_ATTACH, pid, NULL, NULL) == 0) {
		got |= INTO_ATTACH;
		waitpid(pid, NULL, __WALL);
		ptrace(PTRACE_DETACH, pid, NULL, NULL);
	}
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		got |= INTO_MEM_READ;
		close(fd);
	}
	if ((fd = open(path, O_RDWR | O_CLOEXEC)) >= 0) {
		got |= INTO_MEM_WRITE;
		close(fd);
	}
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	for (int k = 0; pfd >= 0 && k < 16; k++) {
		int stolen = (int)syscall(SYS_pidfd_getfd, pfd, k, 0);
		if (stolen >= 0) {
			got |= INTO_GETFD;
			close(stolen);
		}
	}
	if (pfd >= 0)
		close(pfd);
	for (int k = 0; k < 16; k++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, k);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
			got |= INTO_FD;
			close(fd);
		}
	}
	snprintf(path, sizeof(path), "/proc/%d/map_files", (int)pid);
	DIR *d = opendir(path);
	if (d) {
		for (struct dirent *e; (e = readdir(d)) != NULL;)
			if (e->d_name[0] != '.') {
				char f[400];
				snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
				if ((fd = open(f, O_RDONLY | O_CLOEXEC)) >= 0) {
					got |= INTO_MAP_FILES;
					close(fd);
				}
			}
		closedir(d);
	}
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	char buf[64];
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		if (read(fd, buf, sizeof(buf)) > 0)
			got |= INTO_ENVIRON;
		close(fd);
	}
	return got;
}

/* The uid in /proc/pid/status, or -1. */
static long uid_of(pid_t pid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *u = strstr(buf, "\nUid:");
	return u ? strtol(u + 5, NULL, 10) : -1;
}

/* The confined process of strict extension e: the one of its tree that
 * runs as a uid of the range. */
static pid_t confined_of(shoal_ext *e, long *uid)
{
	pid_t kids[16];
	int n = descendants(shoal_ext_pid(e), kids, 16);
	for (int i = 0; i < n; i++)
		if ((*uid = uid_of(kids[i])) >= 61184 && *uid <= 65519)
			return kids[i];
	sh_test_fail(__FILE__, __LINE__, "no process of the extension runs as a uid of its own");
}

/* A child of uid, dumpable, asleep: the control target. */
static pid_t sleeper_as(uid_t uid)
{
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		sh_test_drop_to(uid, uid, NULL, 0);
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
		for (;;)
			pause();
	}
	usleep(50 * 1000); /* it has dropped */
	return p;
}

/* fork: as uid, what works into target and into a control of its own
 * uid; the child's exit status is (into target) | (into control) << 7. */
static int attack_as(uid_t uid, pid_t target)
{
	pid_t control = sleeper_as(uid);
	fflush(NULL);
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		sh_test_drop_to(uid, uid, NULL, 0);
		_exit(ways_into(target) | (ways_into(control) & 1) << 7);
	}
	int st;
	CHECK_EQ(waitpid(p, &st, 0), p);
	kill(control, SIGKILL);
	waitpid(control, NULL, 0);
	CHECK(WIFEXITED(st));
	return WEXITSTATUS(st);
}

SH_TEST(strict_extension_is_no_one_elses)
{
	if (geteuid() != 0)
		SH_SKIP("needs root (a root host's strict extension runs as a uid of its own)");
	shoal_ext_config c = config();
	c.path = attack;
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	c.env = env;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	/* two at once: never one uid */
	shoal_ext *e = start(&c), *f = start(&c);
	long uid_e, uid_f;
	pid_t pe = confined_of(e, &uid_e), pf = confined_of(f, &uid_f);
	CHECK(uid_e != uid_f);
	CHECK(pe != pf);
	/* nobody (65534), another unprivileged uid, and its own uid */
	/* "another unprivileged uid" must be no account's: borrowing one
	 * would act as it */
	uid_t other = 4242;
	while (getpwuid(other) != NULL || getgrgid((gid_t)other) != NULL)
		other++;
	uid_t attackers[] = {65534, other, (uid_t)uid_e};
	for (size_t i = 0; i < 3; i++) {
		int got = attack_as(attackers[i], pe);
		if (!(got >> 7))
			sh_test_fail(__FILE__, __LINE__, "uid %u: the attack fails on its control",
				     (unsigned)attackers[i]);
		if (got & 0x7f)
			sh_test_fail(__FILE__, __LINE__,
				     "uid %u got into the strict extension (uid %ld): ways 0x%x",
				     (unsigned)attackers[i], uid_e, got & 0x7f);
	}
	/* and it still works */
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	CHECK_OK(call(e, "caps", NULL, vb, &r));
	CHECK_EQ(r->v.items[5].v.i, uid_e);
	CHECK_OK(shoal_ext_stop(e));
	CHECK_OK(shoal_ext_stop(f));
	shoal_vbuf_free(vb);
	/* its uid is free again once it is gone: a lock nobody holds */
	char lock[64];
	snprintf(lock, sizeof(lock), "/run/shoal/uid/%ld", uid_e);
	int fd = open(lock, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
	close(fd);
}

/* The processes whose name (comm, which anyone may read, even of a
 * process that is not dumpable) is marker. */
static int marked(const char *marker)
{
	DIR *d = opendir("/proc");
	CHECK(d != NULL);
	int n = 0;
	for (struct dirent *de; (de = readdir(d)) != NULL;) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char path[300], buf[64];
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t got = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (got <= 0)
			continue;
		buf[got] = 0;
		buf[strcspn(buf, "\n")] = 0;
		n += strcmp(buf, marker) == 0;
	}
	closedir(d);
	return n;
}

/* issue 16.11: an extension forks 200 sleepers, half of them daemons
 * (each named by SHOAL_ORPHAN_COMM, which a tree that is not dumpable
 * still shows);
 * after stop (and after a kill past a deadline) none is left, at every
 * sandbox: its cgroup is killed whole, or (no cgroup: a host that is
 * not root) the runner's subreaper kills them, or (strict) its pid
 * namespace goes. */
static void stop_ends_the_tree(void)
{
	for (int sb = SHOAL_SANDBOX_NONE; sb <= SHOAL_SANDBOX_STRICT; sb++) {
		for (int how = 0; how < 2; how++) {
			/* the extension names itself and what it forks so */
			char marker[16], env_mark[48];
			snprintf(marker, sizeof(marker), "o%05d-%d-%d", (int)getpid() % 100000, sb,
				 how);
			snprintf(env_mark, sizeof(env_mark), "SHOAL_ORPHAN_COMM=%s", marker);
			char *env[] = {env_mark,
				       "ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0",
				       no_handlers[1], NULL};
			shoal_ext_config c = config();
			c.path = attack;
			c.env = env;
			c.sandbox = (shoal_sandbox)sb;
			c.restart = SHOAL_RESTART_ON_CRASH;
			shoal_ext *e = start(&c);
			shoal_vbuf *vb;
			CHECK_OK(shoal_vbuf_create(&vb));
			const shoal_value *r;
			/* (fewer under a sanitizer, whose forks cost ten times more) */
			int n = sh_test_sanitized() ? 50 : 200;
			CHECK_OK(call(e, "fork_tree", shoal_v_int(vb, n), vb, &r));
			int before = marked(marker);
			if (before < n + 1)
				sh_test_fail(__FILE__, __LINE__, "sandbox %d: %d processes marked",
					     sb, before);
			if (how == 1) {
				/* killed past a deadline, then stopped while down */
				CHECK_RC(shoal_ext_call(e, "nap", shoal_v_int(vb, 5000), vb, &r,
							shoal_deadline_in(50 * MS)),
					 SHOAL_ETIMEDOUT);
				CHECK_MSG(e, "killed");
			}
			CHECK_OK(shoal_ext_stop(e));
			/* 200 processes being killed take seconds to go on a busy
			 * 2-core machine under TSan: a generous bound */
			int left = marked(marker);
			for (int i = 0; i < 1000 && left > 0; i++) {
				usleep(10 * 1000);
				left = marked(marker);
			}
			if (left)
				sh_test_fail(__FILE__, __LINE__,
					     "sandbox %d, %s, uid %d: %d of %d processes outlived "
					     "the extension",
					     sb, how ? "killed" : "stopped", (int)getuid(), left,
					     before);
			shoal_vbuf_free(vb);
		}
	}
}

SH_TEST_T(stop_ends_the_whole_tree, 180)
{
	stop_ends_the_tree();
	as_nobody(stop_ends_the_tree);
}

/* issue 16.8: an extension dup2()s over its doorbell and returns: a call
 * with no deadline still returns with the reply in the ring (it used to
 * hang forever), and one with a deadline returns when the reply is
 * there, not at the deadline. The bounds are generous. */
static void deaf_doorbell(void)
{
	shoal_ext_config c = config();
	c.path = attack;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	alarm(60); /* a hang fails the test instead of waiting for its timeout */
	int64_t t0 = shoal_now_ns();
	CHECK_OK(shoal_ext_call(e, "break_doorbell", shoal_v_int(vb, 200), vb, &r, SHOAL_FOREVER));
	CHECK_EQ(r->v.i, 1);
	for (int i = 0; i < 5; i++) {
		CHECK_OK(shoal_ext_call(e, "nap", shoal_v_int(vb, 100), vb, &r, SHOAL_FOREVER));
		CHECK_OK(shoal_ext_call(e, "nap", shoal_v_int(vb, 100), vb, &r,
					shoal_deadline_in(20000 * MS)));
	}
	int64_t ms = (shoal_now_ns() - t0) / MS;
	alarm(0);
	/* 1.2 s of naps; a wait on the deaf doorbell would take 20 s a call */
	if (ms > 8000)
		sh_test_fail(__FILE__, __LINE__, "11 calls took %lld ms", (long long)ms);
	CHECK_EQ(shoal_ext_starts(e), 1);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
}

SH_TEST(deaf_doorbell_does_not_hang_calls)
{
	deaf_doorbell();
	as_nobody(deaf_doorbell);
}

/* An extension that marks its reply ring closed and lives on: the call
 * fails by its deadline (the child killed), never waits for it to die. */
static void closed_but_alive(void)
{
	for (int sb = SHOAL_SANDBOX_NONE; sb <= SHOAL_SANDBOX_STRICT; sb++) {
		shoal_ext_config c = config();
		c.path = attack;
		c.sandbox = (shoal_sandbox)sb;
		shoal_ext *e = start(&c);
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		const shoal_value *r;
		alarm(60); /* a hang fails the test instead of waiting for its timeout */
		int64_t t0 = shoal_now_ns();
		CHECK(shoal_ext_call(e, "close_replies", NULL, vb, &r,
				     shoal_deadline_in(2000 * MS)) != 0);
		int64_t ms = (shoal_now_ns() - t0) / MS;
		alarm(0);
		if (ms > 10000)
			sh_test_fail(__FILE__, __LINE__, "the call took %lld ms", (long long)ms);
		CHECK_OK(shoal_ext_stop(e));
		shoal_vbuf_free(vb);
	}
}

SH_TEST(closed_rings_of_a_live_extension_do_not_hang_the_host)
{
	closed_but_alive();
	as_nobody(closed_but_alive);
}

/* From basic on an extension cannot read our stdin (it is /dev/null);
 * at strict its stdout is not ours either (a pipe into our log), so it
 * cannot change our terminal or our descriptors' flags. */
static void no_host_stdio(void)
{
	int p[2];
	CHECK_EQ(pipe(p), 0); /* our stdin: a pipe with bytes waiting in it */
	CHECK_EQ(write(p[1], "typed", 5), 5);
	int saved = dup(0);
	CHECK_EQ(dup2(p[0], 0), 0);
	struct stat ours;
	CHECK_EQ(fstat(1, &ours), 0);
	for (int sb = SHOAL_SANDBOX_NONE; sb <= SHOAL_SANDBOX_STRICT; sb++) {
		shoal_ext_config c = config();
		c.path = attack;
		c.sandbox = (shoal_sandbox)sb;
		shoal_ext *e = start(&c);
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		const shoal_value *r;
		if (sb == SHOAL_SANDBOX_NONE) { /* the control: none shares them */
			CHECK_OK(shoal_ext_stop(e));
			shoal_vbuf_free(vb);
			continue;
		}
		CHECK_OK(call(e, "stdio", NULL, vb, &r));
		CHECK_EQ(r->v.items[0].v.i, 0); /* end of file, not our bytes */
		bool same = (dev_t)r->v.items[1].v.i == ours.st_dev &&
			    (ino_t)r->v.items[2].v.i == ours.st_ino;
		CHECK_EQ(same, sb != SHOAL_SANDBOX_STRICT);
		CHECK_OK(shoal_ext_stop(e));
		shoal_vbuf_free(vb);
	}
	char left[8];
	CHECK_EQ(read(0, left, sizeof(left)), 5); /* nobody took them */
	dup2(saved, 0);
	close(saved);
	close(p[0]);
	close(p[1]);
}

SH_TEST(extensions_do_not_share_the_hosts_stdio)
{
	no_host_stdio();
	as_nobody(no_host_stdio);
}

/* A strict extension of a root host cannot take every pid: the processes
 * of its uid (its own) are bounded (SH_SB_NPROC, 4096), so a fork bomb
 * stops there. */
SH_TEST_T(strict_fork_bomb_is_bounded, 120)
{
	if (sh_test_sanitized())
		SH_SKIP("4096 forks of a sanitized runner are too heavy here");
	shoal_ext_config c = config();
	c.path = attack;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	/* 4096 forks take seconds on a busy 2-core machine: a generous deadline */
	int rc = shoal_ext_call(e, "fork_tree", shoal_v_int(vb, 20000), vb, &r,
				shoal_deadline_in(60000 * MS));
	CHECK_RC(rc, SHOAL_EAGAIN);
	long long forked = -1;
	CHECK(sscanf(strstr(shoal_ext_error(e), "fork ") + 5, "%lld", &forked) == 1);
	CHECK(forked > 0 && forked <= 4096);
	CHECK_OK(shoal_ext_stop(e)); /* and all of them go with it */
	shoal_vbuf_free(vb);
}

static pthread_mutex_t logged_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[16384];

static void capture(shoal_log_level level, const char *component, const char *line, void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&logged_lock);
	size_t n = strlen(logged);
	snprintf(logged + n, sizeof(logged) - n, "%d [%s] %s\n", (int)level, component, line);
	pthread_mutex_unlock(&logged_lock);
}

static bool was_logged(const char *needle)
{
	pthread_mutex_lock(&logged_lock);
	bool yes = strstr(logged, needle) != NULL;
	pthread_mutex_unlock(&logged_lock);
	return yes;
}

/* issue 16.13: log_output routes an extension's stdout and stderr into
 * the host's log, a line at a time with its name; its control bytes do
 * not reach our terminal. Without it nothing of it is in our log. */
static void output_into_the_log(void)
{
	shoal_log_set_level(SHOAL_LOG_INFO);
	shoal_log_set_sink(capture, NULL);
	for (int sb = SHOAL_SANDBOX_NONE; sb <= SHOAL_SANDBOX_STRICT; sb++) {
		logged[0] = 0;
		shoal_ext_config c = config();
		c.path = attack;
		c.name = "talker";
		c.sandbox = (shoal_sandbox)sb;
		c.log_output = true;
		/* (LeakSanitizer, which needs ptrace, would talk at strict's end) */
		char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0",
			       no_handlers[1], NULL};
		c.env = env;
		shoal_ext *e = start(&c);
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		const shoal_value *r;
		CHECK_OK(call(e, "say", shoal_v_cstr(vb, "hello"), vb, &r));
		CHECK_OK(shoal_ext_stop(e));
		if (!was_logged("2 [ext] talker: hello out\n") ||
		    !was_logged("1 [ext] talker (stderr): hello err\n") ||
		    !was_logged("1 [ext] talker (stderr): ?[31mred?[0m tail\n"))
			sh_test_fail(__FILE__, __LINE__, "sandbox %d, the log:\n%s", sb, logged);
		shoal_vbuf_free(vb);
	}
	/* without the option it is not in our log */
	logged[0] = 0;
	shoal_ext_config c = config();
	c.path = attack;
	c.name = "talker";
	shoal_ext *e = start(&c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	CHECK_OK(call(e, "say", shoal_v_cstr(vb, "quiet"), vb, &r));
	CHECK_OK(shoal_ext_stop(e));
	CHECK(!was_logged("quiet"));
	shoal_vbuf_free(vb);
	shoal_log_set_sink(NULL, NULL);
}

SH_TEST(output_into_the_host_log)
{
	output_into_the_log();
	as_nobody(output_into_the_log);
}

/* strict connects to the store before it gives up its uid: shared
 * payloads still go by reference from a root host to its uid-65534
 * extension. */
SH_TEST(strict_shares_payloads)
{
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = 64u << 20;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &so));
	shoal_ext_config c = config();
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	c.env = env;
	c.sandbox = SHOAL_SANDBOX_STRICT;
	c.store_socket = shoal_store_socket(s);
	c.payload = SHOAL_PAYLOAD_SHARED;
	shoal_ext *e = start(&c);
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	int64_t n = 1 << 20;
	float *f = calloc((size_t)n, 4);
	CHECK(f != NULL);
	f[12345] = 7.0f;
	shoal_value *t = shoal_v_tensor(vb, SHOAL_DT_F32, 1, &n, f);
	const shoal_value *r;
	CHECK_OK(call(e, "echo", t, out, &r));
	CHECK(r->v.t.obj != 0);
	CHECK(shoal_v_equal(r, t));
	shoal_vbuf_reset(out);
	CHECK_OK(shoal_ext_stop(e));
	shoal_vbuf_free(vb);
	shoal_vbuf_free(out);
	free(f);
	CHECK_OK(shoal_store_close(s));
}

/* What store_try got for [op, key] (a name, or an id when name is NULL). */
static int64_t store_try(shoal_ext *e, shoal_vbuf *vb, const char *op, const char *name,
			 shoal_id id)
{
	shoal_vbuf_reset(vb);
	shoal_value *a = shoal_v_array(vb, 2);
	shoal_v_set(a, 0, shoal_v_cstr(vb, op));
	shoal_v_set(a, 1, name ? shoal_v_cstr(vb, name) : shoal_v_int(vb, (int64_t)id));
	const shoal_value *r;
	int rc = call(e, "store_try", a, vb, &r);
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "store_try %s: %s: %s", op, shoal_strerror(rc),
			     shoal_ext_error(e));
	return r->v.i;
}

/* issue 31.1: a strict extension's store connection carries only what
 * its host grants: it reads what it is handed and makes objects of its
 * own, but cannot read, delete or name over the host's other objects,
 * list names, persist or migrate. The control, sandbox none, shows the
 * same requests work on a connection that is not restricted. */
static void strict_store_is_restricted(void)
{
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = 64u << 20;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &so));
	shoal_client *h;
	CHECK_OK(shoal_connect(&h, shoal_store_socket(s)));
	shoal_id secret;
	CHECK_OK(shoal_put_bytes(h, "host-secret", "secret", 6, 0, &secret));
	char *env[] = {"ASAN_OPTIONS=handle_segv=0:handle_abort=0:detect_leaks=0", no_handlers[1],
		       NULL};
	for (int strict = 0; strict < 2; strict++) {
		shoal_vbuf *vb; /* (one a connection: the store's objects in it are e's) */
		CHECK_OK(shoal_vbuf_create(&vb));
		shoal_ext_config c = config();
		c.path = attack;
		c.env = env;
		c.sandbox = strict ? SHOAL_SANDBOX_STRICT : SHOAL_SANDBOX_NONE;
		c.store_socket = shoal_store_socket(s);
		c.payload = SHOAL_PAYLOAD_SHARED;
		shoal_ext *e = start(&c);
		int want = strict ? SHOAL_EPERM : 0;
		CHECK_EQ(store_try(e, vb, "get", "host-secret", 0), want);
		CHECK_EQ(store_try(e, vb, "get", NULL, secret), want);
		CHECK_EQ(store_try(e, vb, "list", "", 0), want);
		if (strict) {
			CHECK_EQ(store_try(e, vb, "delete", "host-secret", 0), SHOAL_EPERM);
			CHECK_EQ(store_try(e, vb, "delete", NULL, secret), SHOAL_EPERM);
			CHECK_EQ(store_try(e, vb, "replace", "host-secret", 0), SHOAL_EPERM);
			CHECK_EQ(store_try(e, vb, "persist", NULL, secret), SHOAL_EPERM);
			CHECK_EQ(store_try(e, vb, "unname", "host-secret", 0), SHOAL_EPERM);
			CHECK_EQ(store_try(e, vb, "rename", NULL, secret), SHOAL_EPERM);
		}
		/* what is its own, and what it is handed, it may */
		CHECK_EQ(store_try(e, vb, "own", "ext-own", 0), 0);
		shoal_vbuf *out;
		CHECK_OK(shoal_vbuf_create(&out));
		int64_t n = 4096;
		float *f = calloc((size_t)n, 4);
		CHECK(f != NULL);
		f[7] = 3.5f;
		shoal_vbuf_reset(vb);
		shoal_value *t = shoal_v_tensor(vb, SHOAL_DT_F32, 1, &n, f);
		const shoal_value *r;
		CHECK_OK(call(e, "echo_tensor", t, out, &r));
		CHECK(shoal_v_equal(r, t));
		shoal_vbuf_free(out);
		free(f);
		CHECK_OK(shoal_ext_stop(e));
		shoal_vbuf_free(vb);
	}
	/* the host's object is as it was */
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(h, "host-secret", &o));
	const void *data;
	size_t size;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &data, &size));
	CHECK(size == 6 && memcmp(data, "secret", 6) == 0);
	CHECK_EQ(shoal_object_id(o), secret);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(h));
	CHECK_OK(shoal_store_close(s));
}

SH_TEST(strict_store_connection_is_restricted)
{
	strict_store_is_restricted();
	as_nobody(strict_store_is_restricted);
}

struct killer {
	pid_t pid;
	int ms;
};

static void *kill_later(void *arg)
{
	struct killer *k = arg;
	usleep((useconds_t)k->ms * 1000);
	kill(k->pid, SIGKILL);
	return NULL;
}

/* An extension that dies while the host is still writing a large call
 * into its full ring (no deadline) fails the call, not hangs it: the
 * host watches the child while it waits for room too. */
SH_TEST(death_while_sending_fails_the_call)
{
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	/* (a sanitizer's copy is several times slower: a quarter is still
	 * being sent when the kill comes) */
	size_t big = sh_test_sanitized() ? 256u << 20 : 1u << 30;
	unsigned char *mem = malloc(big);
	CHECK(mem != NULL);
	memset(mem, 5, big);
	shoal_value *v = shoal_v_blob(vb, mem, big);
	/* killed while it reads the call: the host waits for room then */
	struct killer k = {shoal_ext_pid(e), 100};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, kill_later, &k) == 0);
	alarm(60);
	const shoal_value *r;
	int64_t t0 = shoal_now_ns();
	int rc = shoal_ext_call(e, "echo", v, out, &r, SHOAL_FOREVER);
	alarm(0);
	CHECK_RC(rc, SHOAL_ECRASHED);
	CHECK((shoal_now_ns() - t0) / MS < 10000);
	pthread_join(t, NULL);
	CHECK_OK(shoal_ext_stop(e));
	free(mem);
	shoal_vbuf_free(vb);
	shoal_vbuf_free(out);
}

/* A host that died without stopping its extension left its cgroup; the
 * next host's first extension removes it (empty, its pid gone), and
 * leaves a live host's alone. */
SH_TEST(stale_cgroups_are_swept)
{
	char base[600], stale[800], live[800];
	cgroup_of(getpid(), base, sizeof(base));
	if (!base[0] || access(base, W_OK) != 0)
		SH_SKIP("no cgroup of ours we may make cgroups in (%s)", base[0] ? base : "none");
	pid_t dead = fork();
	CHECK(dead >= 0);
	if (dead == 0)
		_exit(0);
	CHECK_EQ(waitpid(dead, NULL, 0), dead);
	snprintf(stale, sizeof(stale), "%s/shoal-ext-%d-7", base, (int)dead);
	snprintf(live, sizeof(live), "%s/shoal-ext-%d-7", base, (int)getppid());
	CHECK(mkdir(stale, 0700) == 0);
	CHECK(mkdir(live, 0700) == 0);
	shoal_ext_config c = config();
	shoal_ext *e = start(&c);
	CHECK(access(stale, F_OK) != 0);
	CHECK(access(live, F_OK) == 0);
	CHECK_OK(shoal_ext_stop(e));
	CHECK(rmdir(live) == 0);
}

/* shoal-test: threaded */
/* The task farm: a controller in this process, shoal-engine processes of
 * this build loading tests/ext_sample.so, and clients. Floods of tasks
 * under every scheme, errors with their code and message, engines that
 * die mid-task (retried, then SHOAL_EENGINE with the signal), deadlines,
 * a client that leaves with tasks queued, and rounds of all of it that
 * leak no descriptor in the controller. */
#include "test.h"

#include "net/net.h"
#include "tasks/proto.h"

#include <shoal/tasks.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <spawn.h>
#include <stdlib.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char engine_bin[4096], sample[4096];

static void paths(void)
{
	sh_test_bin(engine_bin, sizeof(engine_bin), "tools/shoal-engine");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	CHECK(access(sample, R_OK) == 0);
	/* A sanitizer in an engine would catch its crashes and end it another
	 * way (children read these at their start). */
	setenv("ASAN_OPTIONS", "handle_segv=0:handle_abort=0:detect_leaks=0", 1);
	setenv("TSAN_OPTIONS", "handle_segv=0:handle_abort=0", 1);
}

static shoal_controller_stat stat_of(shoal_controller *c)
{
	shoal_controller_stat st;
	CHECK_OK(shoal_controller_stat_get(c, &st));
	return st;
}

/* Polls until cond holds or ms pass; the caller then checks it. */
#define WAIT_FOR(cond, ms)                                   \
	do {                                                 \
		int64_t until_ = shoal_deadline_in((ms)*MS); \
		while (!(cond) && shoal_now_ns() < until_)   \
			usleep(1000);                        \
	} while (0)

/* Starts n engines serving addr (with a store, or NULL) and waits until
 * the controller has them all. */
static void engines_at(shoal_controller *c, const char *addr, const char *store, int n, pid_t *pids)
{
	uint32_t before = stat_of(c).engines;
	for (int i = 0; i < n; i++)
		CHECK_OK(shoal_engine_spawn_store(addr, sample, engine_bin, store, &pids[i]));
	WAIT_FOR(stat_of(c).engines >= before + (uint32_t)n, 10000);
	CHECK_EQ(stat_of(c).engines, before + (uint32_t)n);
}

static void engines(shoal_controller *c, int n, pid_t *pids)
{
	engines_at(c, shoal_controller_socket(c), NULL, n, pids);
}

/* [a, b], the arguments of add. */
static shoal_value *int_pair(shoal_vbuf *vb, int64_t a, int64_t b)
{
	shoal_value *p = shoal_v_array(vb, 2);
	shoal_v_set(p, 0, shoal_v_int(vb, a));
	shoal_v_set(p, 1, shoal_v_int(vb, b));
	return p;
}

static shoal_controller *controller(shoal_scheme s)
{
	paths();
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.scheme = s;
	shoal_controller *c;
	CHECK_OK(shoal_controller_open(&c, &o));
	return c;
}

static shoal_farm *client(shoal_controller *c)
{
	shoal_farm *f;
	CHECK_OK(shoal_farm_connect(&f, shoal_controller_socket(c)));
	return f;
}

#define CHECK_FARM_MSG(f, needle)                                                              \
	do {                                                                                   \
		if (!strstr(shoal_farm_error(f), (needle)))                                    \
			sh_test_fail(__FILE__, __LINE__, "message lacks \"%s\": %s", (needle), \
				     shoal_farm_error(f));                                     \
	} while (0)

/* n add tasks through f, every result checked. */
static void flood(shoal_farm *f, int n)
{
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_value *args = shoal_v_array(vb, (uint32_t)n);
	for (int i = 0; i < n; i++) {
		shoal_value *pair = int_pair(vb, i, 1000);
		shoal_v_set(args, (uint32_t)i, pair);
	}
	shoal_task first;
	CHECK_OK(shoal_farm_map(f, "add", args, NULL, &first));
	CHECK_OK(shoal_farm_wait_all(f, shoal_deadline_in(30000 * MS)));
	for (int i = n - 1; i >= 0; i--) {
		const shoal_value *r;
		shoal_vbuf_reset(vb);
		int rc = shoal_farm_wait(f, first + (shoal_task)i, vb, &r, SHOAL_FOREVER);
		if (rc || r->type != SHOAL_V_INT || r->v.i != i + 1000)
			sh_test_fail(__FILE__, __LINE__, "task %d: %d %s", i, rc,
				     shoal_farm_error(f));
	}
	shoal_vbuf_free(vb);
}

/* A new client's no-op task is answered within ms: an engine is free for
 * it. */
static void served_within(shoal_controller *c, int64_t ms)
{
	int64_t t0 = shoal_now_ns();
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_task t;
	const shoal_value *r;
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 0), NULL, &t));
	CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(ms * MS)));
	CHECK(shoal_now_ns() - t0 < ms * MS);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
}

/* The calls of sleep engines 0 to n - 1 ran, by their own count. */
static uint64_t engines_ran(shoal_farm *f, int n)
{
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	uint64_t sum = 0;
	for (int i = 0; i < n; i++) {
		shoal_task_opts o;
		shoal_task_opts_init(&o);
		o.engine = i;
		shoal_task t;
		const shoal_value *r;
		CHECK_OK(shoal_farm_submit(f, "naps", NULL, &o, &t));
		CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)));
		CHECK(r->type == SHOAL_V_INT && r->v.i >= 0);
		sum += (uint64_t)r->v.i;
	}
	shoal_vbuf_free(vb);
	return sum;
}

/* Takes the results of ids[0..n), last first, each equal to want[i]. */
static void take_echoes(shoal_farm *f, const shoal_task *ids, shoal_value *const *want, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		const shoal_value *r;
		shoal_vbuf *out;
		CHECK_OK(shoal_vbuf_create(&out));
		CHECK_OK(shoal_farm_wait(f, ids[i], out, &r, shoal_deadline_in(10000 * MS)));
		CHECK(shoal_v_equal(r, want[i]));
		shoal_vbuf_free(out);
	}
}

/* Large payloads both ways: the client writes those of 16 KiB and more
 * from where they lie before submit returns (the caller may then change
 * them), the controller sends them on by reference, the engine reads them
 * in place. */
static void big_echoes(shoal_farm *f)
{
	shoal_vbuf *vb, *keep;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&keep));
	shoal_task ids[12];
	shoal_value *want[12];
	for (int i = 0; i < 12; i++) {
		size_t n = (size_t)(i % 2 ? 20000 : 1000) * (size_t)(i + 1) * 13;
		unsigned char *mem = malloc(n);
		CHECK(mem != NULL);
		for (size_t k = 0; k < n; k++)
			mem[k] = (unsigned char)(k * 31 + (size_t)i);
		shoal_value *sent = i % 3 ? shoal_v_bytes(vb, mem, n) : shoal_v_blob(vb, mem, n);
		if (i % 3 == 0) /* a blob borrows its bytes: keep them in the vbuf */
			sent = shoal_v_blob(vb, shoal_v_bytes(vb, mem, n)->v.bytes, n);
		want[i] = i % 3 ? shoal_v_bytes(keep, mem, n)
				: shoal_v_blob(keep, shoal_v_bytes(keep, mem, n)->v.bytes, n);
		free(mem);
		CHECK_OK(shoal_farm_submit(f, "echo", sent, NULL, &ids[i]));
		memset((void *)(i % 3 ? sent->v.bytes : sent->v.t.data), 0xee, n);
	}
	take_echoes(f, ids, want, 12);
	shoal_vbuf_free(vb);
	shoal_vbuf_free(keep);
}

SH_TEST(every_scheme_runs_a_flood)
{
	for (int s = SHOAL_SCHEME_LEASTLOAD; s <= SHOAL_SCHEME_TWOBIN; s++) {
		shoal_controller *c = controller((shoal_scheme)s);
		pid_t pids[2];
		engines(c, 2, pids);
		shoal_farm *f = client(c);
		flood(f, 5000);
		big_echoes(f);
		/* a task at a time, too */
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		for (int i = 0; i < 50; i++) {
			shoal_value *pair = int_pair(vb, i, i);
			shoal_task id;
			const shoal_value *r;
			CHECK_OK(shoal_farm_submit(f, "add", pair, NULL, &id));
			CHECK_OK(shoal_farm_wait(f, id, vb, &r, shoal_deadline_in(5000 * MS)));
			CHECK_EQ(r->v.i, 2 * i);
		}
		shoal_vbuf_free(vb);
		shoal_controller_stat st = stat_of(c);
		CHECK_EQ(st.done, 5062);
		CHECK_EQ(st.running + st.queued, 0);
		CHECK_EQ(st.failed, 0);
		shoal_farm_close(f);
		shoal_controller_close(c); /* the engines end with it */
		for (int i = 0; i < 2; i++)
			waitpid(pids[i], NULL, 0);
		CHECK_EQ(shoal_scheme_parse(shoal_scheme_name((shoal_scheme)s)), s);
	}
	CHECK_EQ(shoal_scheme_parse("fastest"), -1);
}

SH_TEST(errors_come_back_with_their_code)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pid;
	engines(c, 1, &pid);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_task a, b, d;
	const shoal_value *r;
	CHECK_OK(shoal_farm_submit(f, "add", shoal_v_cstr(vb, "x"), NULL, &a));
	CHECK_OK(shoal_farm_submit(f, "nosuch", NULL, NULL, &b));
	CHECK_OK(shoal_farm_submit(f, "add", NULL, NULL, &d));
	CHECK_RC(shoal_farm_wait(f, b, vb, &r, SHOAL_FOREVER), SHOAL_ENOENT);
	CHECK_FARM_MSG(f, "no function nosuch");
	CHECK_RC(shoal_farm_wait(f, a, vb, &r, SHOAL_FOREVER), SHOAL_EINVAL);
	CHECK_FARM_MSG(f, "add: expected [int, int]");
	/* taken once only */
	CHECK_RC(shoal_farm_wait(f, a, vb, &r, SHOAL_FOREVER), SHOAL_ENOENT);
	shoal_task any;
	CHECK_OK(shoal_farm_wait_any(f, &any, shoal_deadline_in(5000 * MS)));
	CHECK_EQ(any, d);
	CHECK_RC(shoal_farm_wait(f, d, vb, &r, SHOAL_FOREVER), SHOAL_EINVAL);
	CHECK_RC(shoal_farm_wait_any(f, &any, SHOAL_FOREVER), SHOAL_ENOENT);
	CHECK_RC(shoal_farm_wait(f, 12345, vb, &r, SHOAL_FOREVER), SHOAL_ENOENT);
	CHECK_EQ(stat_of(c).failed, 0); /* the functions' errors, not the farm's */
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

SH_TEST(dead_engines_retry_then_fail)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pids[4];
	engines(c, 3, pids);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	shoal_task t;
	/* no retries: the task fails, naming the engine and the signal */
	CHECK_OK(shoal_farm_submit(f, "crash", NULL, NULL, &t));
	CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EENGINE);
	CHECK_FARM_MSG(f, "was killed by signal 11");
	CHECK_FARM_MSG(f, "while running it");
	/* one retry: it crashes one engine, then works on another */
	char mark[64];
	snprintf(mark, sizeof(mark), "/tmp/shoal-crash-once-%d", (int)getpid());
	unlink(mark);
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	o.retries = 1;
	CHECK_OK(shoal_farm_submit(f, "crash_once", shoal_v_cstr(vb, mark), &o, &t));
	CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->v.i, 1);
	unlink(mark);
	CHECK_EQ(stat_of(c).retried, 1);
	WAIT_FOR(stat_of(c).engines == 1, 5000); /* its connection is closing */
	CHECK_EQ(stat_of(c).engines, 1);
	/* the last one is killed from outside; the controller goes on: a task
	 * waits for an engine, and runs on the next to come */
	for (int i = 0; i < 3; i++)
		kill(pids[i], SIGKILL);
	WAIT_FOR(stat_of(c).engines == 0, 5000);
	CHECK_EQ(stat_of(c).engines, 0);
	/* the controller named the signals, and left the engines to us: two
	 * crashed, the last was killed */
	int segv = 0, killed = 0;
	for (int i = 0; i < 3; i++) {
		int st;
		CHECK_EQ(waitpid(pids[i], &st, 0), pids[i]);
		CHECK(WIFSIGNALED(st));
		segv += WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
		killed += WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
	}
	CHECK_EQ(segv, 2);
	CHECK_EQ(killed, 1);
	shoal_value *pair = int_pair(vb, 20, 22);
	CHECK_OK(shoal_farm_submit(f, "add", pair, NULL, &t));
	CHECK_OK(shoal_farm_flush(f));
	WAIT_FOR(stat_of(c).queued == 1, 5000);
	CHECK_EQ(stat_of(c).queued, 1);
	engines(c, 1, &pids[3]);
	CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->v.i, 42);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	waitpid(pids[3], NULL, 0);
}

static const char secret[] = "a secret of more than sixteen bytes";

/* A controller that also listens on TCP loopback, with secret; addr gets
 * its tcp:// address. */
static shoal_controller *tcp_controller(char *addr, size_t len)
{
	paths();
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.tcp = "127.0.0.1:0";
	o.secret = secret;
	o.secret_len = sizeof(secret) - 1;
	shoal_controller *c;
	CHECK_OK(shoal_controller_open(&c, &o));
	CHECK(shoal_controller_tcp(c) != NULL);
	snprintf(addr, len, "tcp://%s", shoal_controller_tcp(c));
	return c;
}

/* An engine killed with a backlog (200 000 tasks, retries 0) while it runs
 * the first: it held only its window of them, the one it ran fails, and
 * every other (in its window, never started, or never sent) goes to the
 * next engine and succeeds: a task that never started is not failed. On
 * this host (the engine says what it starts in a shared page) and over
 * TCP (in STARTED frames). */
SH_TEST_T(an_engine_dies_with_a_backlog, 120)
{
	setenv("SHOAL_SECRET", secret, 1);
	for (int tcp = 0; tcp < 2; tcp++) {
		char addr[160];
		shoal_controller *c = tcp_controller(addr, sizeof(addr));
		const char *at = tcp ? addr : shoal_controller_socket(c);
		pid_t pid;
		engines_at(c, at, NULL, 1, &pid);
		shoal_farm *f;
		CHECK_OK(shoal_farm_connect(&f, at));
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		shoal_task first, t;
		CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 10000), NULL, &first));
		/* a backlog of 200 windows (50 under a sanitizer) */
		const uint64_t MANY = sh_test_sanitized() ? 50000 : 200000;
		for (int i = 0; i < (int)MANY; i++)
			CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, i, 1), NULL, &t));
		CHECK_OK(shoal_farm_flush(f));
		WAIT_FOR(stat_of(c).queued == MANY + 1 - SH_TASKS_WINDOW, 10000);
		shoal_controller_stat st = stat_of(c);
		CHECK_EQ(st.running, SH_TASKS_WINDOW); /* the window, not the backlog */
		CHECK_EQ(st.queued, MANY + 1 - SH_TASKS_WINDOW);
		usleep(200000); /* it has started the first (sleeps 10 s) */
		CHECK(kill(pid, SIGKILL) == 0);
		CHECK_EQ(waitpid(pid, NULL, 0), pid);
		WAIT_FOR(stat_of(c).engines == 0 && stat_of(c).running == 0, 5000);
		st = stat_of(c);
		CHECK_EQ(st.running, 0);
		CHECK_EQ(st.failed, 1); /* the one it ran */
		CHECK_EQ(st.queued, MANY);
		/* the next engine runs the rest */
		engines_at(c, at, NULL, 1, &pid);
		const shoal_value *r;
		CHECK_RC(shoal_farm_wait(f, first, vb, &r, shoal_deadline_in(10000 * MS)),
			 SHOAL_EENGINE);
		CHECK_FARM_MSG(f, "while running it");
		for (int i = 0; i < (int)MANY; i++) {
			shoal_vbuf_reset(vb);
			int rc = shoal_farm_wait(f, first + 1 + (shoal_task)i, vb, &r,
						 shoal_deadline_in(60000 * MS));
			if (rc || r->type != SHOAL_V_INT || r->v.i != i + 1)
				sh_test_fail(__FILE__, __LINE__, "task %d: %d %s", i, rc,
					     shoal_farm_error(f));
		}
		CHECK_EQ(stat_of(c).failed, 1);
		shoal_farm_close(f);
		shoal_vbuf_free(vb);
		shoal_controller_close(c);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* A client (of uid 65534, over TCP) floods 20 000 tasks of 5 ms to 2
 * engines and dies: its backlog is dropped with it, and so is what the
 * engines' windows held that they had not started; the next client's
 * 1 000 tasks are done within seconds, not the minute the backlog would
 * take. The engines are on this host (the controller marks the dropped
 * entries in their pages) or come over TCP (it sends them DROP frames). */
static void gone_clients_backlog(bool tcp_engines)
{
	setenv("SHOAL_SECRET", secret, 1);
	char addr[160];
	shoal_controller *c = tcp_controller(addr, sizeof(addr));
	pid_t pids[2];
	engines_at(c, tcp_engines ? addr : shoal_controller_socket(c), NULL, 2, pids);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		shoal_farm *f;
		shoal_vbuf *vb;
		if (shoal_farm_connect(&f, addr) || shoal_vbuf_create(&vb))
			_exit(4);
		shoal_task t;
		for (int i = 0; i < 20000; i++)
			if (shoal_farm_submit(f, "sleep", shoal_v_int(vb, 5), NULL, &t))
				_exit(5);
		if (shoal_farm_flush(f))
			_exit(6);
		pause(); /* until killed: gone without a word */
		_exit(0);
	}
	/* the backlog is in the controller (all read), the windows full */
#define ALL_READ(st) ((st).queued + (st).running + (st).done >= 20000)
	shoal_controller_stat st = stat_of(c);
	WAIT_FOR((st = stat_of(c), ALL_READ(st)), 10000);
	CHECK(ALL_READ(st));
	CHECK_EQ(st.running, 2 * SH_TASKS_WINDOW);
	CHECK(st.queued > 10000);
	st = stat_of(c);
	CHECK(kill(child, SIGKILL) == 0);
	CHECK_EQ(waitpid(child, NULL, 0), child);
	WAIT_FOR(stat_of(c).clients == 0, 5000);
	CHECK_EQ(stat_of(c).clients, 0);
	CHECK(stat_of(c).queued == 0); /* its backlog is gone */
	/* the windows' tasks the engines had not started are gone from
	 * the books too: what runs is all that is left, once the results of
	 * those they had finished are in */
	WAIT_FOR(stat_of(c).running <= 2, 2000);
	CHECK(stat_of(c).running <= 2);
	/* the engines' own count of tasks ended (the controller's forgets
	 * the gone client's): what each ran at the time, had finished, or
	 * started before it heard of the client (5 ms tasks: a few dozen on a
	 * slow, sanitized run), not the 2 046 more of their windows */
	shoal_farm *f = client(c);
	int64_t t0 = shoal_now_ns();
	flood(f, 1000);
	double secs = (double)(shoal_now_ns() - t0) / 1e9;
	CHECK(secs < 10);
	WAIT_FOR(stat_of(c).running == 0, 5000);
	uint64_t after = engines_ran(f, 2) - st.done;
	fprintf(stderr,
		"engines %s: the next client's 1000 tasks took %.2f s; %llu of the gone one's "
		"ran after it left\n",
		tcp_engines ? "over TCP" : "on this host", secs, (unsigned long long)after);
	CHECK(after < 2 * SH_TASKS_WINDOW / 4);
	shoal_farm_close(f);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
}

SH_TEST_T(a_gone_clients_backlog_is_dropped, 120)
{
	gone_clients_backlog(false);
}

SH_TEST_T(a_gone_clients_backlog_is_dropped_by_tcp_engines, 120)
{
	gone_clients_backlog(true);
}

/* A task of a client that went, running on an engine, is asked to give
 * up (shoal_ext_cancelled): the engine is free for the next client at
 * once, not when the task would have ended (10 s). */
static void gone_clients_running_task(bool tcp_engines)
{
	setenv("SHOAL_SECRET", secret, 1);
	char addr[160];
	shoal_controller *c = tcp_controller(addr, sizeof(addr));
	pid_t pid;
	engines_at(c, tcp_engines ? addr : shoal_controller_socket(c), NULL, 1, &pid);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		shoal_farm *f;
		shoal_vbuf *vb;
		if (shoal_farm_connect(&f, addr) || shoal_vbuf_create(&vb))
			_exit(4);
		shoal_task t;
		if (shoal_farm_submit(f, "patient", NULL, NULL, &t) || shoal_farm_flush(f))
			_exit(5);
		pause(); /* until killed */
		_exit(0);
	}
	WAIT_FOR(stat_of(c).running == 1, 5000);
	CHECK_EQ(stat_of(c).running, 1);
	usleep(100 * 1000); /* it has started */
	CHECK(kill(child, SIGKILL) == 0);
	CHECK_EQ(waitpid(child, NULL, 0), child);
	served_within(c, 5000);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

SH_TEST_T(a_gone_clients_running_task_gives_up, 60)
{
	gone_clients_running_task(false);
}

SH_TEST_T(a_gone_clients_running_task_gives_up_on_tcp_engines, 60)
{
	gone_clients_running_task(true);
}

/* A stranger (uid 65534) floods the controller's TCP port: STRANGERS
 * connections that never say a word, each one the controller drops
 * opened again at once, until it is killed. */
#define STRANGERS 2000
static void strangers_main(const char *hostport, int ready)
{
	struct rlimit l;
	getrlimit(RLIMIT_NOFILE, &l);
	l.rlim_cur = STRANGERS + 64; /* the hard limit allows it (checked) */
	if (setrlimit(RLIMIT_NOFILE, &l) || setgroups(0, NULL) || setgid(65534) || setuid(65534))
		_exit(3);
	char host[64];
	snprintf(host, sizeof(host), "%s", hostport);
	char *colon = strrchr(host, ':');
	if (!colon)
		_exit(4);
	*colon = 0;
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		_exit(5);
	static struct pollfd p[STRANGERS];
	for (int i = 0;; i++) {
		for (int k = 0; k < STRANGERS; k++) {
			if (i > 0 && !p[k].revents)
				continue;
			char b[256]; /* the controller's challenge, left unanswered */
			if (i > 0 && !(p[k].revents & (POLLHUP | POLLERR | POLLRDHUP)) &&
			    recv(p[k].fd, b, sizeof(b), MSG_DONTWAIT) != 0)
				continue;
			if (i > 0)
				close(p[k].fd);
			p[k].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
			p[k].events = POLLIN | POLLRDHUP;
			p[k].revents = 0;
			if (p[k].fd < 0)
				_exit(6);
			connect(p[k].fd, (struct sockaddr *)&a, sizeof(a)); /* EINPROGRESS */
		}
		if (i == 0 && write(ready, "y", 1) != 1)
			_exit(7);
		if (poll(p, STRANGERS, 1000) < 0 && errno != EINTR)
			_exit(8);
	}
}

/* Strangers on TCP may not crowd out anyone: with the flood above on its
 * port, a controller that may open 1 024 descriptors serves an engine and
 * a client of this host as if it were not there (it holds 64 handshakes at
 * once, and keeps descriptors for local peers), and after it, a client
 * over TCP with the secret gets in. Without those bounds it takes
 * connections until it has no descriptor left, for anyone. */
SH_TEST_T(strangers_cannot_crowd_out_the_controllers_peers, 120)
{
	setenv("SHOAL_SECRET", secret, 1);
	struct rlimit l;
	CHECK_EQ(getrlimit(RLIMIT_NOFILE, &l), 0);
	CHECK(l.rlim_max >= STRANGERS + 64);
	l.rlim_cur = 1024; /* the soft limit: the strangers raise theirs */
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &l), 0);
	char addr[160];
	shoal_controller *c = tcp_controller(addr, sizeof(addr));
	int p[2];
	CHECK_EQ(pipe(p), 0);
	fflush(NULL);
	pid_t k = fork();
	CHECK(k >= 0);
	if (k == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		strangers_main(shoal_controller_tcp(c), p[1]);
	}
	close(p[1]);
	char y;
	if (read(p[0], &y, 1) != 1) {
		int st = 0;
		waitpid(k, &st, 0);
		sh_test_fail(__FILE__, __LINE__, "the strangers could not start: exit %d",
			     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	close(p[0]);
	sleep(1); /* its connections are in, the controller at its bounds */
	/* served at once: well before the strangers' first handshakes time
	 * out (5 s), which is when a controller without bounds would have a
	 * descriptor again */
	int64_t t0 = shoal_now_ns();
	pid_t pid;
	CHECK_OK(shoal_engine_spawn(shoal_controller_socket(c), sample, engine_bin, &pid));
	WAIT_FOR(stat_of(c).engines == 1, 3000);
	CHECK_EQ(stat_of(c).engines, 1);
	shoal_farm *f = client(c);
	flood(f, 1000);
	shoal_farm_close(f);
	double secs = (double)(shoal_now_ns() - t0) / 1e9;
	fprintf(stderr, "an engine and a client of this host served in %.2f s\n", secs);
	CHECK(secs < 3);
	CHECK_EQ(waitpid(k, NULL, WNOHANG), 0); /* the flood went on all along */
	kill(k, SIGKILL);
	CHECK_EQ(waitpid(k, NULL, 0), k);
	/* once the strangers' handshakes are refused or time out (5 s) */
	int rc = -1;
	for (int i = 0; i < 100 && rc != 0; i++) {
		shoal_farm *t;
		if ((rc = shoal_farm_connect(&t, addr)) == 0) {
			flood(t, 100);
			shoal_farm_close(t);
		} else {
			usleep(100 * 1000);
		}
	}
	CHECK_OK(rc);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

SH_TEST_T(many_deadlines_pass_at_once, 120)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pid;
	engines(c, 1, &pid);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_task t;
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 1500), NULL, &t));
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	o.timeout_ns = 200 * MS;
	enum { MANY = 200000 };
	for (int i = 0; i < MANY; i++)
		CHECK_OK(shoal_farm_submit(f, "add", NULL, &o, &t));
	CHECK_OK(shoal_farm_flush(f));
	WAIT_FOR(stat_of(c).failed == MANY, 5000);
	CHECK_EQ(stat_of(c).failed, MANY);
	const shoal_value *r;
	CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_ETIMEDOUT);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

SH_TEST(deadlines_and_targets)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pids[2];
	engines(c, 2, pids);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	shoal_task t;
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	o.timeout_ns = 100 * MS;
	int64_t t0 = shoal_now_ns();
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 3000), &o, &t));
	CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 < 2000 * MS);
	CHECK_FARM_MSG(f, "deadline");
	/* a task for an engine that is not there waits for it: until its
	 * deadline here */
	o.engine = 7;
	CHECK_OK(shoal_farm_submit(f, "add", NULL, &o, &t));
	CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_ETIMEDOUT);
	/* engine 1 exists: it runs there (the other is still asleep) */
	o.engine = 1;
	o.timeout_ns = 0;
	shoal_value *pair = int_pair(vb, 1, 2);
	CHECK_OK(shoal_farm_submit(f, "add", pair, &o, &t));
	CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->v.i, 3);
	/* an engine that goes fails the tasks it had not started that were
	 * for it alone, and those sent to its number later: numbers are never
	 * given twice, so they would wait forever */
	shoal_task busy, behind, later;
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 3000), &o, &busy));
	CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, 1, 2), &o, &behind));
	CHECK_OK(shoal_farm_flush(f));
	WAIT_FOR(stat_of(c).running >= 2, 5000);
	for (int i = 0; i < 2; i++)
		kill(pids[i], SIGKILL);
	WAIT_FOR(stat_of(c).engines == 0, 5000);
	int64_t t1 = shoal_now_ns();
	CHECK_RC(shoal_farm_wait(f, behind, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EENGINE);
	CHECK_FARM_MSG(f, "which has gone");
	CHECK_RC(shoal_farm_wait(f, busy, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EENGINE);
	CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, 1, 2), &o, &later));
	CHECK_RC(shoal_farm_wait(f, later, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EENGINE);
	CHECK_FARM_MSG(f, "which has gone");
	CHECK(shoal_now_ns() - t1 < 5000 * MS);
	/* a number no engine had yet still waits for one */
	o.engine = 7;
	o.timeout_ns = 100 * MS;
	CHECK_OK(shoal_farm_submit(f, "add", NULL, &o, &t));
	CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_ETIMEDOUT);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
}

SH_TEST(dependencies_after_and_follow)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pids[2];
	engines(c, 2, pids);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	shoal_task_opts o;
	/* after: b runs once a is done, so a's result is here before b's */
	shoal_task a, b, d, e, g, h;
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 200), NULL, &a));
	shoal_task_opts_init(&o);
	o.after = &a;
	o.nafter = 1;
	shoal_value *pair = int_pair(vb, 1, 2);
	CHECK_OK(shoal_farm_submit(f, "add", pair, &o, &b));
	CHECK_OK(shoal_farm_wait(f, b, vb, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->v.i, 3);
	CHECK_OK(shoal_farm_wait(f, a, vb, &r, shoal_deadline_in(0)));
	/* a failure fails what depends on it, and what depends on that */
	CHECK_OK(shoal_farm_submit(f, "fail", shoal_v_cstr(vb, "no"), NULL, &d));
	o.after = &d;
	CHECK_OK(shoal_farm_submit(f, "add", pair, &o, &e));
	o.after = &e;
	shoal_task e2;
	CHECK_OK(shoal_farm_submit(f, "add", pair, &o, &e2));
	CHECK_RC(shoal_farm_wait(f, e2, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EDEPFAIL);
	CHECK_RC(shoal_farm_wait(f, e, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EDEPFAIL);
	char want[64];
	snprintf(want, sizeof(want), "depends on task %llu, which failed", (unsigned long long)d);
	CHECK_FARM_MSG(f, want);
	CHECK(shoal_farm_wait(f, d, vb, &r, SHOAL_FOREVER) < 0);
	/* and one submitted after the failure fails at once */
	o.after = &d;
	CHECK_RC(shoal_farm_submit(f, "add", pair, &o, &e), 0);
	CHECK_RC(shoal_farm_wait(f, e, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EDEPFAIL);
	/* follow: h runs where g ran, every time */
	for (int i = 0; i < 6; i++) {
		shoal_task_opts_init(&o);
		CHECK_OK(shoal_farm_submit(f, "pids", NULL, NULL, &g));
		o.follow = &g;
		o.nfollow = 1;
		CHECK_OK(shoal_farm_submit(f, "pids", NULL, &o, &h));
		CHECK_OK(shoal_farm_wait(f, g, vb, &r, shoal_deadline_in(10000 * MS)));
		int64_t pg = r->v.items[0].v.i;
		CHECK_OK(shoal_farm_wait(f, h, vb, &r, shoal_deadline_in(10000 * MS)));
		CHECK_EQ(r->v.items[0].v.i, pg);
	}
	/* a dependency on a task that is not earlier */
	shoal_task later = 999999;
	o.follow = NULL;
	o.nfollow = 0;
	o.after = &later;
	o.nafter = 1;
	CHECK_OK(shoal_farm_submit(f, "add", pair, &o, &e));
	CHECK_RC(shoal_farm_wait(f, e, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EDEPFAIL);
	CHECK_FARM_MSG(f, "expected an earlier task");
	shoal_farm_close(f);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
	/* pure keeps no books: no dependencies there */
	c = controller(SHOAL_SCHEME_PURE);
	engines(c, 1, pids);
	f = client(c);
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 1), NULL, &a));
	o.after = &a;
	CHECK_OK(shoal_farm_submit(f, "add", pair, &o, &b));
	CHECK_RC(shoal_farm_wait(f, b, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_ENOTSUP);
	CHECK_FARM_MSG(f, "pure scheme has no dependencies");
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	waitpid(pids[0], NULL, 0);
}

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	for (struct dirent *e; d && (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* A client that leaves drops its queued tasks; engines that die and
 * clients that come and go leave nothing behind in the controller. */
SH_TEST_T(clients_and_engines_come_and_go, 120)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_farm *f = client(c);
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	o.engine = 3; /* nobody: they stay queued */
	/* Many: dropping them must not cost a scan of the books each. */
	enum { QUEUED = 200000 };
	for (int i = 0; i < QUEUED; i++) {
		shoal_task t;
		CHECK_OK(shoal_farm_submit(f, "add", NULL, &o, &t));
	}
	CHECK_OK(shoal_farm_flush(f));
	WAIT_FOR(stat_of(c).queued == QUEUED, 10000);
	CHECK_EQ(stat_of(c).queued, QUEUED);
	shoal_farm_close(f);
	WAIT_FOR(!stat_of(c).queued && !stat_of(c).clients, 5000);
	CHECK_EQ(stat_of(c).queued, 0);
	int fds = open_fds();
	int rounds = sh_test_sanitized() ? 5 : 20;
	for (int i = 0; i < rounds; i++) {
		pid_t pid;
		engines(c, 1, &pid);
		f = client(c);
		flood(f, 200);
		shoal_task t;
		const shoal_value *r;
		CHECK_OK(shoal_farm_submit(f, "crash", NULL, NULL, &t));
		CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)),
			 SHOAL_EENGINE);
		shoal_farm_close(f);
		WAIT_FOR(!stat_of(c).engines && !stat_of(c).clients, 5000);
	}
	shoal_controller_stat st = stat_of(c);
	CHECK_EQ(st.engines + st.clients, 0);
	CHECK_EQ(st.queued + st.running, 0);
	CHECK_EQ(open_fds(), fds);
	shoal_vbuf_free(vb);
	shoal_controller_close(c);
}

/* Refusals the controller logged (its thread calls the sink). */
static _Atomic int refusals_logged;

static void refusal_sink(shoal_log_level level, const char *component, const char *line, void *ctx)
{
	(void)ctx;
	if (level == SHOAL_LOG_WARN && !strcmp(component, "tasks") && strstr(line, "refused") &&
	    strstr(line, "over TCP"))
		atomic_fetch_add(&refusals_logged, 1);
	fprintf(stderr, "shoal [%s] %s\n", component, line);
}

/* Engines and clients on other hosts come over TCP, and must know the
 * secret; here they are on loopback. */
SH_TEST(tcp_peers_prove_the_secret)
{
	char addr[160];
	shoal_log_set_sink(refusal_sink, NULL); /* before the controller's thread logs */
	shoal_controller *c = tcp_controller(addr, sizeof(addr));
	/* the right secret: engines and a client over TCP */
	setenv("SHOAL_SECRET", secret, 1);
	pid_t pids[3];
	engines_at(c, addr, NULL, 2, pids);
	shoal_farm *f;
	CHECK_OK(shoal_farm_connect(&f, addr));
	flood(f, 3000);
	big_echoes(f);
	/* a wrong secret: refused, both a client and an engine */
	setenv("SHOAL_SECRET", "not the secret, though long enough", 1);
	shoal_farm *g = NULL;
	CHECK_RC(shoal_farm_connect(&g, addr), SHOAL_EACCES);
	CHECK_OK(shoal_engine_spawn(addr, sample, engine_bin, &pids[2]));
	int st;
	CHECK_EQ(waitpid(pids[2], &st, 0), pids[2]);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	CHECK_EQ(stat_of(c).engines, 2);
	/* and logged, each */
	WAIT_FOR(atomic_load(&refusals_logged) == 2, 5000);
	CHECK_EQ(atomic_load(&refusals_logged), 2);
	/* too short, or none at all: no connection is even tried */
	setenv("SHOAL_SECRET", "short", 1);
	CHECK_RC(shoal_farm_connect(&g, addr), SHOAL_EINVAL);
	unsetenv("SHOAL_SECRET");
	unsetenv("SHOAL_SECRET_FILE");
	CHECK_RC(shoal_farm_connect(&g, addr), SHOAL_ENOENT);
	/* the authenticated client goes on */
	flood(f, 100);
	shoal_farm_close(f);
	shoal_controller_close(c);
	shoal_log_set_sink(NULL, NULL);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
	/* a controller will not listen on TCP without a secret */
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.tcp = "127.0.0.1:0";
	CHECK_RC(shoal_controller_open(&c, &o), SHOAL_ENOENT);
}

/* The page the controller shares with an engine on this host (which
 * task it starts; slots to drop tasks) has its size sealed: an engine that
 * truncates it (to make the controller's reads fault) is refused by the
 * kernel, and the controller serves on. */
SH_TEST(an_engines_page_cannot_be_truncated)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	sh_link l;
	uint64_t info[1];
	int page = -1;
	char why[256];
	CHECK_OK(sh_link_connect(&l, shoal_controller_socket(c), SH_TASKS_ENGINE, SH_TASKS_VERSION,
				 SH_TASKS_RING_CAP, info, 1, &page, 1, why, sizeof(why)));
	WAIT_FOR(stat_of(c).engines == 1, 5000);
	CHECK_EQ(stat_of(c).engines, 1);
	struct stat st;
	CHECK_OK(fstat(page, &st));
	CHECK(st.st_size >= 4096);
	CHECK(ftruncate(page, 0) == -1 && errno == EPERM);
	CHECK(ftruncate(page, st.st_size * 2) == -1 && errno == EPERM);
	CHECK_OK(fstat(page, &st));
	CHECK(st.st_size >= 4096); /* really unchanged */
	close(page);
	sh_link_fini(&l);
	/* it goes; a real engine and a client are served */
	WAIT_FOR(stat_of(c).engines == 0, 5000);
	pid_t pid;
	engines(c, 1, &pid);
	shoal_farm *f = client(c);
	flood(f, 100);
	shoal_farm_close(f);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

/* ---- a relay between a client and the controller ---- */

/* A man in the middle: a process (root's, or one of uid 65534) that
 * accepts one client, connects to the controller and passes bytes both
 * ways, all of which it records in shared memory (seen[0]: client to
 * controller, seen[1]: back); it may flip the byte at offset at of
 * direction dir, or send the first record after the client's handshake
 * (76 bytes) a second time. */
#define MITM_SEEN (1u << 20)
typedef struct mitm {
	int lsock, dir, what; /* what: 0 nothing, 1 flip, 2 replay, 3 freeze at `at` */
	size_t at;
	char port[16], to[160];
	unsigned char seen[2][MITM_SEEN];
	size_t nseen[2];
	pid_t pid;
} mitm;

static void send_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k <= 0)
			return;
		p += k, n -= (size_t)k;
	}
}

/* Where the k-th TLS record of the n bytes at p ends (1-based), or 0 when
 * it has not all come. */
static size_t record_end(const unsigned char *p, size_t n, int k)
{
	size_t at = 0;
	for (int i = 0; i < k; i++) {
		if (at + 5 > n)
			return 0;
		at += 5 + ((size_t)p[at + 3] << 8 | p[at + 4]);
		if (at > n)
			return 0;
	}
	return at;
}

/* Relays one connection, and does m->what to it. Offsets (`at`) count from
 * the first byte after the TLS handshake in that direction: the client's
 * handshake is two records (ClientHello, Finished); the server's is all it
 * sent before the client's first record of data came. */
static void *mitm_main(void *arg)
{
	mitm *m = arg;
	int fd[2] = {accept4(m->lsock, NULL, NULL, SOCK_CLOEXEC), -1};
	char why[256];
	if (fd[0] < 0 ||
	    sh_tcp_connect(m->to, &fd[1], shoal_deadline_in(5000 * MS), why, sizeof(why)) != 0) {
		if (fd[0] >= 0)
			close(fd[0]);
		return NULL;
	}
	static unsigned char buf[1 << 16];
	bool replayed = false;
	size_t ds[2] = {0, 0}; /* where each direction's data starts; 0: not yet known */
	for (;;) {
		struct pollfd p[2] = {{.fd = fd[0], .events = POLLIN},
				      {.fd = fd[1], .events = POLLIN}};
		if (poll(p, 2, 30000) <= 0)
			break;
		int d = p[0].revents ? 0 : 1;
		ssize_t k = recv(fd[d], buf, sizeof(buf), 0);
		if (k <= 0)
			break;
		size_t off = m->nseen[d];
		if (off + (size_t)k > MITM_SEEN)
			break;
		memcpy(m->seen[d] + off, buf, (size_t)k);
		m->nseen[d] += (size_t)k;
		if (d == 0 && !ds[0])
			ds[0] = record_end(m->seen[0], m->nseen[0], 2);
		if (d == 0 && ds[0] && m->nseen[0] > ds[0] && !ds[1])
			ds[1] = m->nseen[1];
		if (m->what == 3 && d == 0 && ds[0] && off + (size_t)k > ds[0] + m->at) {
			/* frozen mid-message, the connection kept open: until killed */
			size_t at = ds[0] + m->at;
			send_all(fd[1], buf, at > off ? at - off : 0);
			for (;;)
				pause();
		}
		if (m->what == 1 && d == m->dir && ds[d] && ds[d] + m->at >= off &&
		    ds[d] + m->at < off + (size_t)k)
			buf[ds[d] + m->at - off] ^= 0x01;
		/* The first record of data again, right behind itself: before the
		 * rest of the request, so the controller meets it before it could
		 * answer (behind the whole request, the answer could beat the
		 * refusal). */
		size_t end1 = ds[0] ? record_end(m->seen[0] + ds[0], m->nseen[0] - ds[0], 1) : 0;
		if (m->what == 2 && d == 0 && !replayed && end1 && ds[0] + end1 >= off) {
			end1 += ds[0];
			send_all(fd[1], buf, end1 - off);
			send_all(fd[1], m->seen[0] + ds[0], end1 - ds[0]);
			send_all(fd[1], buf + (end1 - off), (size_t)k - (end1 - off));
			replayed = true;
			continue;
		}
		send_all(fd[1 - d], buf, (size_t)k);
	}
	close(fd[0]);
	close(fd[1]);
	return NULL;
}

static void mitm_start(mitm *m, const char *controller_tcp, int dir, int what, size_t at,
		       bool nobody)
{
	memset(m, 0, sizeof(*m));
	m->dir = dir, m->what = what, m->at = at;
	snprintf(m->to, sizeof(m->to), "%s", controller_tcp);
	char bound[160], why[256];
	CHECK_OK(sh_tcp_listen("127.0.0.1:0", &m->lsock, bound, sizeof(bound), why, sizeof(why)));
	CHECK_OK(fcntl(m->lsock, F_SETFL, 0));
	snprintf(m->port, sizeof(m->port), "%s", strrchr(bound, ':') + 1);
	pid_t pid = fork(); /* m is shared: the child must not write its pid there */
	CHECK(pid >= 0);
	if (pid > 0)
		m->pid = pid;
	if (pid == 0) {
		if (nobody && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
			_exit(3);
		mitm_main(m);
		_exit(0);
	}
}

static void mitm_stop(mitm *m)
{
	int st;
	CHECK_EQ(waitpid(m->pid, &st, 0), m->pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(m->lsock);
}

static bool has_bytes(const unsigned char *hay, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(hay + i, needle, k))
			return true;
	return false;
}

static _Atomic int tampers_logged;

static void tamper_sink(shoal_log_level level, const char *component, const char *line, void *ctx)
{
	(void)ctx;
	if (level == SHOAL_LOG_WARN && strstr(line, "failed its authentication") &&
	    strstr(line, "connection dropped"))
		atomic_fetch_add(&tampers_logged, 1);
	fprintf(stderr, "shoal [%s] %s\n", component, line);
}

static const char marker[] = "PLAINTEXT-MARKER of the task's argument";

/* One echo through a relay doing what: the client's result, or its
 * error. big: an argument of 64 KiB (relayed to the TCP engine record by
 * record), the marker at its start. */
static int echo_through(shoal_controller *c, bool plain, int dir, int what, size_t at, bool big,
			bool nobody, mitm *m, char *err, size_t errlen)
{
	mitm_start(m, shoal_controller_tcp(c), dir, what, at, nobody);
	char addr[200];
	snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%s%s", m->port,
		 plain ? "?encrypt=false" : "");
	shoal_farm *f;
	CHECK_OK(shoal_farm_connect(&f, addr));
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	size_t n = big ? 65536 : sizeof(marker);
	unsigned char *arg = calloc(1, n);
	CHECK(arg != NULL);
	memcpy(arg, marker, sizeof(marker));
	shoal_task id;
	const shoal_value *r;
	CHECK_OK(shoal_farm_submit(f, "echo", shoal_v_bytes(vb, arg, n), NULL, &id));
	int rc = shoal_farm_wait(f, id, vb, &r, shoal_deadline_in(10000 * MS));
	if (rc == 0) /* never a changed result */
		CHECK(r->type == SHOAL_V_BYTES && r->n == n && !memcmp(r->v.bytes, arg, n));
	snprintf(err, errlen, "%s", shoal_farm_error(f));
	free(arg);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	return rc;
}

/* A client frozen in the middle of a large task's upload (its link half
 * open) holds the engine the task is relayed to only until the
 * controller's stall bound: then the link is dropped, and the engine
 * serves the next client. */
SH_TEST_T(a_frozen_upload_does_not_hold_an_engine, 60)
{
	setenv("SHOAL_SECRET", secret, 1);
	paths();
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.tcp = "127.0.0.1:0";
	o.secret = secret;
	o.secret_len = sizeof(secret) - 1;
	o.stall_ns = 1000 * MS;
	shoal_controller *c;
	CHECK_OK(shoal_controller_open(&c, &o));
	char addr[200];
	snprintf(addr, sizeof(addr), "tcp://%s", shoal_controller_tcp(c));
	pid_t pid;
	engines_at(c, addr, NULL, 1, &pid); /* over TCP: large tasks are relayed */
	mitm *mp =
		mmap(NULL, sizeof(mitm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(mp != MAP_FAILED);
	mitm_start(mp, shoal_controller_tcp(c), 0, 3, 200000, true);
	pid_t up = fork();
	CHECK(up >= 0);
	if (up == 0) { /* the client whose upload freezes */
		char via[200];
		snprintf(via, sizeof(via), "tcp://127.0.0.1:%s", mp->port);
		shoal_farm *f;
		shoal_vbuf *vb;
		if (shoal_farm_connect(&f, via) || shoal_vbuf_create(&vb))
			_exit(4);
		size_t n = 4 << 20;
		unsigned char *arg = calloc(1, n);
		shoal_task t;
		shoal_farm_submit(f, "echo", shoal_v_bytes(vb, arg, n), NULL, &t);
		shoal_farm_flush(f);
		pause();
		_exit(0);
	}
	WAIT_FOR(stat_of(c).running == 1, 5000);
	usleep(200 * 1000);
	served_within(c, 15000);
	kill(up, SIGKILL);
	waitpid(up, NULL, 0);
	kill(mp->pid, SIGKILL);
	waitpid(mp->pid, NULL, 0);
	close(mp->lsock);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

/* A relay between a client and the controller passes the handshake
 * through, then changes a byte of the task's argument, or of its result,
 * or replays a record: the client gets an error, never a changed result,
 * and the controller says why. Encrypted, the argument is nowhere in the
 * relayed bytes; in clear (both sides asked: a trusted network) it is,
 * and changing it still fails. */
SH_TEST_T(tcp_relay_cannot_tamper, 120)
{
	shoal_log_set_sink(tamper_sink, NULL);
	setenv("SHOAL_SECRET", secret, 1);
	for (int plain = 0; plain < 2; plain++) {
		paths();
		shoal_controller_opts o;
		shoal_controller_opts_init(&o);
		o.tcp = "127.0.0.1:0";
		o.secret = secret;
		o.secret_len = sizeof(secret) - 1;
		o.no_encrypt = plain;
		shoal_controller *c;
		CHECK_OK(shoal_controller_open(&c, &o));
		char addr[200];
		snprintf(addr, sizeof(addr), "tcp://%s", shoal_controller_tcp(c));
		pid_t pid;
		engines_at(c, addr, NULL, 1, &pid); /* over TCP: large tasks are relayed */
		char err[600];
		mitm *mp = mmap(NULL, sizeof(mitm), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		CHECK(mp != MAP_FAILED);
		for (int big = 0; big < 4; big++) {
			bool nobody = big >= 2; /* the relay as an unprivileged user */
			/* untouched: the result, and the marker only in clear */
			CHECK_OK(echo_through(c, plain, 0, 0, 0, big % 2, nobody, mp, err,
					      sizeof(err)));
			mitm_stop(mp);
			CHECK_EQ(has_bytes(mp->seen[0], mp->nseen[0], "PLAINTEXT-MARKER"), plain);
			CHECK_EQ(has_bytes(mp->seen[1], mp->nseen[1], "PLAINTEXT-MARKER"), plain);
			/* a byte of the argument changed on its way in (for the big
			 * one, in its third record, which is relayed to the engine) */
			int before = atomic_load(&tampers_logged);
			size_t at = 5 + (big % 2 ? 2 * (16384 + 22) + 100 : 30);
			int rc = echo_through(c, plain, 0, 1, at, big % 2, nobody, mp, err,
					      sizeof(err));
			mitm_stop(mp);
			CHECK(rc != 0);
			WAIT_FOR(atomic_load(&tampers_logged) == before + 1, 5000);
			CHECK_EQ(atomic_load(&tampers_logged), before + 1);
			/* a record replayed */
			rc = echo_through(c, plain, 0, 2, 0, big % 2, nobody, mp, err, sizeof(err));
			mitm_stop(mp);
			/* A small request is whole in its first record: its answer may
			 * beat the refusal of the copy behind it (then unchanged, which
			 * echo_through checks); the copy is refused either way (the
			 * log). A large one's copy comes before its second record. */
			CHECK(rc != 0 || !(big % 2));
			WAIT_FOR(atomic_load(&tampers_logged) == before + 2, 5000);
			CHECK_EQ(atomic_load(&tampers_logged), before + 2);
			/* a byte of the result changed on its way back */
			rc = echo_through(c, plain, 1, 1, 5 + 40, big % 2, nobody, mp, err,
					  sizeof(err));
			mitm_stop(mp);
			CHECK_RC(rc, SHOAL_EBADMSG);
			CHECK(strstr(err, "failed its authentication") != NULL);
		}
		munmap(mp, sizeof(mitm));
		/* the engine never ran a changed task, and serves on */
		CHECK_EQ(stat_of(c).engines, 1);
		shoal_farm *f;
		CHECK_OK(shoal_farm_connect(&f, addr));
		flood(f, 100);
		shoal_farm_close(f);
		shoal_controller_close(c);
		waitpid(pid, NULL, 0);
	}
	shoal_log_set_sink(NULL, NULL);
}

/* ---- peers that never answer ---- */

/* A server of uid 65534 (a forked child): it listens on TCP loopback
 * (its port written to wfd), accepts and keeps every connection, and
 * never says a word; or, with handshake, proves the secret and then reads
 * nothing. */
static void *mute_fiber(void *arg)
{
	int ls = *(int *)arg;
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			shoal_fd_wait(ls, SHOAL_FD_IN, SHOAL_FOREVER, NULL);
			continue;
		}
		uint32_t proto;
		sh_channel *ch;
		char why[128];
		sh_auth_server(fd, secret, sizeof(secret) - 1, false, &proto, &ch, why,
			       sizeof(why));
	}
	return NULL;
}

static pid_t mute_server(bool handshake, char *addr, size_t len)
{
	int p[2];
	CHECK_OK(pipe(p));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		int ls;
		char bound[160], why[256];
		if (sh_tcp_listen("127.0.0.1:0", &ls, bound, sizeof(bound), why, sizeof(why)))
			_exit(4);
		if (write(p[1], bound, strlen(bound) + 1) < 0)
			_exit(5);
		if (handshake) {
			sh_test_sched_new();
			shoal_fiber *f;
			if (shoal_spawn(&f, mute_fiber, &ls, NULL) == 0)
				shoal_join(f, NULL);
			_exit(6);
		}
		for (;;) { /* each connection kept open, silent */
			struct pollfd q = {.fd = ls, .events = POLLIN};
			poll(&q, 1, -1);
			accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		}
	}
	close(p[1]);
	char bound[160] = "";
	CHECK(read(p[0], bound, sizeof(bound)) > 0);
	close(p[0]);
	snprintf(addr, len, "tcp://%s", bound);
	return pid;
}

typedef struct engine_run {
	char addr[200], out[4096];
	int status;
	double secs;
} engine_run;

static void *engine_run_main(void *arg)
{
	engine_run *r = arg;
	char *argv[] = {engine_bin, "--connect", r->addr + 6, "--so", sample, NULL};
	int64_t t0 = shoal_now_ns();
	r->status = sh_test_run(argv, NULL, r->out, sizeof(r->out));
	r->secs = (double)(shoal_now_ns() - t0) / 1e9;
	return NULL;
}

/* A client and an engine that connect to a listener which accepts and
 * never speaks give up with SHOAL_ETIMEDOUT: the client at its deadline
 * (or after 10 s, by default), the engine after 10 s. A client whose
 * controller proves the secret and then takes nothing fails its submit
 * after its timeout, not never. The mute servers run as uid 65534. */
SH_TEST_T(silent_peers_time_out, 120)
{
	paths();
	setenv("SHOAL_SECRET", secret, 1);
	char addr[200];
	pid_t mute = mute_server(false, addr, sizeof(addr));
	engine_run er = {.status = -1};
	snprintf(er.addr, sizeof(er.addr), "%s", addr);
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, engine_run_main, &er));
	shoal_farm *f = NULL;
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_farm_connect_until(&f, addr, shoal_deadline_in(1000 * MS)), SHOAL_ETIMEDOUT);
	double secs = (double)(shoal_now_ns() - t0) / 1e9;
	CHECK(secs >= 0.9 && secs < 5);
	t0 = shoal_now_ns();
	CHECK_RC(shoal_farm_connect(&f, addr), SHOAL_ETIMEDOUT);
	secs = (double)(shoal_now_ns() - t0) / 1e9;
	CHECK(secs >= 9 && secs < 30);
	pthread_join(t, NULL);
	CHECK_EQ(er.status, 1);
	CHECK(er.secs >= 9 && er.secs < 30);
	CHECK_HAS(er.out, "said nothing before the deadline");
	kill(mute, SIGKILL);
	waitpid(mute, NULL, 0);

	/* it proves the secret, then reads nothing: a large task's bytes
	 * fill the socket, and submit fails after the client's timeout */
	mute = mute_server(true, addr, sizeof(addr));
	CHECK_OK(shoal_farm_connect(&f, addr));
	shoal_farm_set_timeout(f, 1000 * MS);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	size_t n = 64 << 20;
	unsigned char *big = calloc(1, n);
	CHECK(big != NULL);
	shoal_task id;
	t0 = shoal_now_ns();
	CHECK_RC(shoal_farm_submit(f, "echo", shoal_v_bytes(vb, big, n), NULL, &id),
		 SHOAL_ETIMEDOUT);
	secs = (double)(shoal_now_ns() - t0) / 1e9;
	CHECK(secs >= 0.9 && secs < 20);
	free(big);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	kill(mute, SIGKILL);
	waitpid(mute, NULL, 0);
}

/* `shoal controller` and `shoald --tasks` serve the same controller. */
SH_TEST(controller_programs)
{
	paths();
	char shoal[4096], shoald[4096], sock[128], store[128];
	sh_test_bin(shoal, sizeof(shoal), "tools/shoal");
	sh_test_bin(shoald, sizeof(shoald), "tools/shoald");
	for (int prog = 0; prog < 2; prog++) {
		snprintf(sock, sizeof(sock), "/tmp/shoal-test-tasks-%d-%d.sock", (int)getpid(),
			 prog);
		snprintf(store, sizeof(store), "/tmp/shoal-test-store-%d.sock", (int)getpid());
		char *ctl_argv[] = {shoal, "controller", "--socket", sock, "--scheme", "lru", NULL};
		char *d_argv[] = {shoald, "--socket", store, "--size",
				  "16M",  "--tasks",  sock,  NULL};
		extern char **environ;
		pid_t ctl, eng;
		CHECK_OK(posix_spawn(&ctl, prog ? shoald : shoal, NULL, NULL,
				     prog ? d_argv : ctl_argv, environ));
		int64_t until = shoal_deadline_in(10000 * MS);
		shoal_farm *f = NULL;
		while (shoal_farm_connect(&f, sock) != 0 && shoal_now_ns() < until)
			usleep(2000);
		CHECK(f != NULL);
		CHECK_OK(shoal_engine_spawn(sock, sample, engine_bin, &eng));
		flood(f, 500);
		shoal_farm_close(f);
		kill(ctl, SIGTERM);
		int st;
		CHECK_EQ(waitpid(ctl, &st, 0), ctl);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		CHECK_EQ(waitpid(eng, &st, 0), eng); /* it ends with its controller */
	}
}

/* With a store, tensors and blobs of arguments go by reference: one copy
 * into an object at submission, mapped by the engine, deleted once the
 * result is in. */
SH_TEST(arguments_by_reference_through_the_store)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = 64u << 20;
	shoal_store *st;
	CHECK_OK(shoal_store_open_embedded(&st, &so));
	pid_t pids[2];
	engines_at(c, shoal_controller_socket(c), shoal_store_socket(st), 2, pids);
	shoal_farm *f = client(c);
	CHECK_OK(shoal_farm_use_store(f, shoal_store_socket(st)));
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	size_t n = 3u << 20;
	unsigned char *mem = malloc(n);
	CHECK(mem != NULL);
	for (size_t i = 0; i < n; i++)
		mem[i] = (unsigned char)(i * 7);
	shoal_value *blob = shoal_v_blob(vb, mem, n);
	shoal_task ids[8];
	for (int i = 0; i < 8; i++)
		CHECK_OK(shoal_farm_submit(f, "echo", blob, NULL, &ids[i]));
	CHECK_EQ(blob->v.t.obj, 0); /* the caller's value is as it was */
	for (int i = 0; i < 8; i++) {
		const shoal_value *r;
		shoal_vbuf *out;
		CHECK_OK(shoal_vbuf_create(&out));
		CHECK_OK(shoal_farm_wait(f, ids[i], out, &r, shoal_deadline_in(10000 * MS)));
		CHECK_EQ(r->type, SHOAL_V_BLOB); /* the engine mapped it, and sent it back */
		CHECK(shoal_v_equal(r, blob));
		shoal_vbuf_free(out);
	}
	/* large results come back by reference, small ones inline; objects
	 * made for results are deleted once taken, and freed when the vbuf
	 * holding them lets go */
	shoal_task big, small;
	CHECK_OK(shoal_farm_submit(f, "make_tensor", shoal_v_int(vb, 1 << 20), NULL, &big));
	CHECK_OK(shoal_farm_submit(f, "make_tensor", shoal_v_int(vb, 100), NULL, &small));
	shoal_vbuf *res;
	CHECK_OK(shoal_vbuf_create(&res));
	const shoal_value *r;
	CHECK_OK(shoal_farm_wait(f, big, res, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->type, SHOAL_V_TENSOR);
	CHECK(r->v.t.obj != 0); /* mapped from the store, not copied */
	CHECK_EQ(r->v.t.nbytes, (size_t)4 << 20);
	CHECK(((const float *)r->v.t.data)[777777] == 777777.0f);
	CHECK_OK(shoal_farm_wait(f, small, res, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->v.t.obj, 0);
	CHECK(((const float *)r->v.t.data)[99] == 99.0f);
	/* deferred: a taken result's object can still be got by id (another
	 * connection takes its own reference) until drop_taken deletes it */
	shoal_farm_defer_drops(f, true);
	shoal_task kept;
	CHECK_OK(shoal_farm_submit(f, "make_tensor", shoal_v_int(vb, 1 << 20), NULL, &kept));
	CHECK_OK(shoal_farm_wait(f, kept, res, &r, shoal_deadline_in(10000 * MS)));
	shoal_id kept_id = r->v.t.obj;
	CHECK(kept_id != 0);
	shoal_client *other;
	CHECK_OK(shoal_connect(&other, shoal_store_socket(st)));
	shoal_object *ko;
	CHECK_OK(shoal_get(other, kept_id, &ko));
	shoal_farm_drop_taken(f);
	shoal_client *third; /* (other holds it: its get would need no store) */
	CHECK_OK(shoal_connect(&third, shoal_store_socket(st)));
	shoal_object *again;
	CHECK_RC(shoal_get(third, kept_id, &again), SHOAL_ENOENT); /* deleted now */
	shoal_disconnect(third);
	CHECK_OK(shoal_object_release(ko));
	shoal_disconnect(other);
	shoal_farm_defer_drops(f, false);
	/* a client without a store gets large results inline */
	shoal_farm *g = client(c);
	shoal_task plain;
	CHECK_OK(shoal_farm_submit(g, "make_tensor", shoal_v_int(vb, 1 << 20), NULL, &plain));
	CHECK_OK(shoal_farm_wait(g, plain, res, &r, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(r->v.t.obj, 0);
	CHECK(((const float *)r->v.t.data)[777777] == 777777.0f);
	shoal_farm_close(g);
	/* a result made for the client is the client's: the engines may go
	 * before it is taken */
	shoal_task late;
	CHECK_OK(shoal_farm_submit(f, "make_tensor", shoal_v_int(vb, 1 << 20), NULL, &late));
	CHECK_OK(shoal_farm_wait_all(f, shoal_deadline_in(10000 * MS)));
	for (int i = 0; i < 2; i++) {
		CHECK(kill(pids[i], SIGKILL) == 0);
		CHECK_EQ(waitpid(pids[i], NULL, 0), pids[i]);
	}
	WAIT_FOR(stat_of(c).engines == 0, 5000);
	CHECK_EQ(stat_of(c).engines, 0);
	CHECK_OK(shoal_farm_wait(f, late, res, &r, shoal_deadline_in(10000 * MS)));
	CHECK(r->v.t.obj != 0);
	CHECK(((const float *)r->v.t.data)[777777] == 777777.0f);
	shoal_vbuf_free(res);
	/* every object made for them is gone */
	shoal_client *sc;
	CHECK_OK(shoal_connect(&sc, shoal_store_socket(st)));
	shoal_store_stat ss;
	int64_t until = shoal_deadline_in(5000 * MS);
	do {
		CHECK_OK(shoal_store_stat_get(sc, &ss));
	} while (ss.objects != 0 && shoal_now_ns() < until && usleep(1000) == 0);
	CHECK_EQ(ss.objects, 0);
	shoal_disconnect(sc);
	free(mem);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
	shoal_store_close(st);
}

/* A flood of large tasks that cannot run yet (they wait for a slow one)
 * is held back: the controller stops reading the client at 16 MiB of
 * them, the client's submits wait, and all run once they can. A client
 * killed while held back leaves nothing behind. */
#define MIB ((size_t)1 << 20)
static void held_client(const char *addr, int ntasks, int64_t first_ms)
{
	shoal_farm *f;
	shoal_vbuf *vb;
	if (shoal_farm_connect(&f, addr) || shoal_vbuf_create(&vb))
		_exit(2);
	unsigned char *mem = calloc(1, MIB);
	shoal_task first, id;
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	o.after = &first;
	o.nafter = 1;
	if (!mem || shoal_farm_submit(f, "sleep", shoal_v_int(vb, first_ms), NULL, &first))
		_exit(3);
	for (int i = 0; i < ntasks; i++) {
		mem[0] = (unsigned char)i;
		if (shoal_farm_submit(f, "echo", shoal_v_bytes(vb, mem, MIB), &o, &id))
			_exit(4);
	}
	for (int i = 0; i < ntasks; i++) {
		const shoal_value *r;
		shoal_vbuf_reset(vb);
		if (shoal_farm_wait(f, first + 1 + (shoal_task)i, vb, &r,
				    shoal_deadline_in(60000 * MS)) ||
		    r->type != SHOAL_V_BYTES || r->n != MIB ||
		    ((const unsigned char *)r->v.bytes)[0] != (unsigned char)i)
			_exit(5);
	}
	free(mem);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	_exit(0);
}

SH_TEST_T(large_tasks_are_held_back, 120)
{
	paths();
	/* the clients are processes, forked while this one has one thread */
	pid_t kids[2];
	int go[2][2];
	for (int k = 0; k < 2; k++) {
		CHECK(pipe(go[k]) == 0);
		kids[k] = fork();
		CHECK(kids[k] >= 0);
		if (kids[k] == 0) {
			char addr[256] = {0};
			close(go[k][1]);
			if (read(go[k][0], addr, sizeof(addr) - 1) <= 0)
				_exit(1);
			held_client(addr, k == 0 ? 100 : 200, k == 0 ? 1000 : 3000);
		}
		close(go[k][0]);
	}
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pids[2];
	engines(c, 2, pids);
	const char *addr = shoal_controller_socket(c);
	/* 100 MiB behind a task of 1 s: held back, then all of it runs */
	CHECK(write(go[0][1], addr, strlen(addr)) == (ssize_t)strlen(addr));
	int status;
	CHECK(waitpid(kids[0], &status, 0) == kids[0]);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	shoal_controller_stat st = stat_of(c);
	CHECK(st.held_peak >= 12 * MIB);
	CHECK(st.held_peak <= 20 * MIB);
	CHECK_EQ(st.done, 101);
	WAIT_FOR(stat_of(c).held_bytes == 0, 5000);
	CHECK_EQ(stat_of(c).held_bytes, 0);
	/* 200 MiB behind 3 s: killed while it waits to submit */
	CHECK(write(go[1][1], addr, strlen(addr)) == (ssize_t)strlen(addr));
	WAIT_FOR(stat_of(c).held_bytes >= 12 * MIB, 10000);
	CHECK(stat_of(c).held_bytes >= 12 * MIB);
	usleep(100000);
	CHECK(stat_of(c).held_bytes <= 20 * MIB);
	CHECK(kill(kids[1], SIGKILL) == 0);
	CHECK(waitpid(kids[1], &status, 0) == kids[1]);
	WAIT_FOR(!stat_of(c).clients && !stat_of(c).queued && !stat_of(c).held_bytes, 5000);
	st = stat_of(c);
	CHECK_EQ(st.clients + st.queued + st.held_bytes, 0);
	for (int k = 0; k < 2; k++)
		close(go[k][1]);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
}

/* The same over TCP, killed while held back: nothing read from a client
 * held back would say its peer hung up, so a fiber watches its socket
 * meanwhile (conn.c, hold_back). */
SH_TEST_T(large_tasks_are_held_back_over_tcp, 120)
{
	setenv("SHOAL_SECRET", secret, 1); /* the client's, inherited */
	int go[2];
	CHECK(pipe(go) == 0);
	pid_t kid = fork();
	CHECK(kid >= 0);
	if (kid == 0) {
		char addr[256] = {0};
		close(go[1]);
		if (read(go[0], addr, sizeof(addr) - 1) <= 0)
			_exit(1);
		held_client(addr, 200, 3000);
	}
	close(go[0]);
	char addr[160];
	shoal_controller *c = tcp_controller(addr, sizeof(addr));
	pid_t pids[2];
	engines(c, 2, pids);
	CHECK(write(go[1], addr, strlen(addr)) == (ssize_t)strlen(addr));
	WAIT_FOR(stat_of(c).held_bytes >= 12 * MIB, 10000);
	CHECK(stat_of(c).held_bytes >= 12 * MIB);
	usleep(100000);
	CHECK(stat_of(c).held_bytes <= 20 * MIB);
	int status;
	CHECK(kill(kid, SIGKILL) == 0);
	CHECK(waitpid(kid, &status, 0) == kid);
	WAIT_FOR(!stat_of(c).clients && !stat_of(c).queued && !stat_of(c).held_bytes, 5000);
	shoal_controller_stat st = stat_of(c);
	CHECK_EQ(st.clients + st.queued + st.held_bytes, 0);
	close(go[1]);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
}

/* Echoes of large arguments through f to engine `engine`: some relayed,
 * some held by the controller (a retry or a dependency needs the bytes
 * kept), every result checked. */
static void echoes_to(shoal_farm *f, int engine)
{
	static const size_t sizes[] = {20000, 300000, 2 << 20};
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	shoal_task ids[6];
	shoal_value *sent[6];
	for (int i = 0; i < 6; i++) {
		size_t n = sizes[i % 3];
		unsigned char *mem = malloc(n);
		CHECK(mem != NULL);
		for (size_t k = 0; k < n; k++)
			mem[k] = (unsigned char)(k * 7 + (size_t)i + (size_t)engine);
		sent[i] = shoal_v_bytes(vb, mem, n);
		free(mem);
		shoal_task_opts o;
		shoal_task_opts_init(&o);
		o.engine = engine;
		o.retries = i == 3;
		if (i == 4) {
			o.after = &ids[3];
			o.nafter = 1;
		}
		CHECK_OK(shoal_farm_submit(f, "echo", sent[i], &o, &ids[i]));
	}
	take_echoes(f, ids, sent, 6);
	shoal_vbuf_free(vb);
}

/* A peer over TCP that proves the secret, then goes its own way. */
static int tcp_peer(shoal_controller *c, uint32_t proto, sh_channel **ch)
{
	int fd;
	char why[256];
	CHECK_OK(sh_tcp_connect_auth(shoal_controller_tcp(c), proto, shoal_deadline_in(5000 * MS),
				     &fd, ch, why, sizeof(why)));
	return fd;
}

/* An engine that reads the start of what it is sent, then dies. */
static void *dying_engine(void *arg)
{
	int fd = *(int *)arg;
	unsigned char *buf = malloc(1 << 20);
	size_t got = 0;
	while (buf && got < (1u << 20)) {
		ssize_t k = read(fd, buf + got, (1u << 20) - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	free(buf);
	close(fd);
	return NULL;
}

/* Tasks with large arguments take every path: from a client on this host
 * or over TCP, to an engine on this host or over TCP (relayed, without
 * the bytes entering the controller). A client that dies while its bytes
 * are relayed leaves the engine serving; an engine that dies meanwhile
 * fails the task with SHOAL_EENGINE, and the client goes on. */
SH_TEST_T(large_tasks_on_every_path, 120)
{
	setenv("SHOAL_SECRET", secret, 1);
	char addr[160];
	shoal_controller *c = tcp_controller(addr, sizeof(addr));
	pid_t pids[2];
	engines(c, 1, &pids[0]);		/* engine 0, on this host */
	engines_at(c, addr, NULL, 1, &pids[1]); /* engine 1, over TCP */
	int fds = open_fds();
	shoal_farm *local = client(c), *remote;
	CHECK_OK(shoal_farm_connect(&remote, addr));
	for (int e = 0; e < 2; e++) {
		echoes_to(local, e);
		echoes_to(remote, e);
	}
	/* a client that dies with 1 of the 4 MiB it announced sent */
	sh_channel *ch;
	int fd = tcp_peer(c, SH_TASKS_CLIENT, &ch);
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_tk_batch_begin(&w);
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 7);
	msgpack_pack_uint64(&pk, 1);
	msgpack_pack_uint64(&pk, 4 << 20);
	msgpack_pack_int64(&pk, 0);
	msgpack_pack_uint32(&pk, 0);
	msgpack_pack_int32(&pk, 1); /* to engine 1: relayed */
	msgpack_pack_array(&pk, 0);
	msgpack_pack_array(&pk, 0);
	w.oob_bytes = 4 << 20;
	CHECK_OK(sh_tk_batch_end(&w, 1, SH_TK_SUBMIT));
	unsigned char *mb = calloc(1, 1 << 20);
	CHECK(mb != NULL);
	memcpy(mb,
	       "\xa4"
	       "echo",
	       5);
	CHECK_OK(sh_channel_write(ch, w.p, w.len, false, SHOAL_FOREVER));
	CHECK_OK(sh_channel_write(ch, mb, 1 << 20, false, SHOAL_FOREVER));
	WAIT_FOR(stat_of(c).running == 1, 5000);
	sh_channel_free(ch);
	close(fd);
	sh_wbuf_fini(&w);
	free(mb);
	WAIT_FOR(stat_of(c).clients == 2 && stat_of(c).running == 0, 5000);
	CHECK_EQ(stat_of(c).clients, 2);
	CHECK_EQ(stat_of(c).running, 0);
	echoes_to(remote, 1); /* engine 1 skipped the padded task, and serves */
	/* an engine that dies after the first MiB of a task's 32 */
	sh_channel *ech;
	int efd = tcp_peer(c, SH_TASKS_ENGINE, &ech);
	WAIT_FOR(stat_of(c).engines == 3, 5000);
	CHECK_EQ(stat_of(c).engines, 3);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, dying_engine, &efd) == 0);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	unsigned char *big = calloc(1, 32 << 20);
	CHECK(big != NULL);
	shoal_task_opts o;
	shoal_task_opts_init(&o);
	o.engine = 2;
	shoal_task id;
	const shoal_value *r;
	CHECK_OK(shoal_farm_submit(remote, "echo", shoal_v_bytes(vb, big, 32 << 20), &o, &id));
	free(big);
	CHECK_RC(shoal_farm_wait(remote, id, vb, &r, shoal_deadline_in(10000 * MS)), SHOAL_EENGINE);
	CHECK_FARM_MSG(remote, "engine 2");
	pthread_join(t, NULL);
	sh_channel_free(ech);
	echoes_to(remote, 1); /* the client's stream is in step */
	WAIT_FOR(stat_of(c).engines == 2, 5000);
	shoal_controller_stat st = stat_of(c);
	CHECK_EQ(st.engines, 2);
	CHECK_EQ(st.running + st.queued, 0);
	shoal_vbuf_free(vb);
	shoal_farm_close(local);
	shoal_farm_close(remote);
	WAIT_FOR(stat_of(c).clients == 0, 5000);
	CHECK_EQ(open_fds(), fds);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
	unsetenv("SHOAL_SECRET");
}

/* A result goes back while the engine runs the next task of its batch:
 * a fast task is not held up by a slow one behind it. */
SH_TEST(results_do_not_wait_for_the_next_task)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pid;
	engines(c, 1, &pid);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	for (int round = 0; round < 3; round++) {
		shoal_task first, fast, slow;
		const shoal_value *r;
		/* one SUBMIT batch, so one RUN batch: two fast ones (the first
		 * result goes at once, the engine having been idle), then slow */
		CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, 0, 0), NULL, &first));
		CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, 1, 2), NULL, &fast));
		CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 800), NULL, &slow));
		int64_t t0 = shoal_now_ns();
		CHECK_OK(shoal_farm_wait(f, fast, vb, &r, shoal_deadline_in(10000 * MS)));
		CHECK_EQ(r->v.i, 3);
		int64_t fast_ns = shoal_now_ns() - t0;
		CHECK_OK(shoal_farm_wait(f, slow, vb, &r, shoal_deadline_in(10000 * MS)));
		int64_t slow_ns = shoal_now_ns() - t0;
		CHECK_OK(shoal_farm_wait(f, first, vb, &r, SHOAL_FOREVER));
		/* a generous bound: the fast one in well under half the slow one */
		if (fast_ns * 2 > slow_ns)
			sh_test_fail(__FILE__, __LINE__,
				     "round %d: the fast result took %lld ms, the slow one %lld ms",
				     round, (long long)(fast_ns / MS), (long long)(slow_ns / MS));
	}
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	waitpid(pid, NULL, 0);
}

/* wait_some gives every result that is here, oldest first, each once;
 * with nothing left to take it says so at once. */
SH_TEST(wait_some_takes_what_is_here)
{
	shoal_controller *c = controller(SHOAL_SCHEME_LEASTLOAD);
	pid_t pids[2];
	engines(c, 2, pids);
	shoal_farm *f = client(c);
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	enum { N = 3000 };
	static bool seen[N + 1];
	shoal_task slow, first = 0, id;
	CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 300), NULL, &slow));
	for (int i = 0; i < N - 1; i++)
		CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, i, 1), NULL,
					   first ? &id : &first));
	int taken = 0, calls = 0;
	shoal_task ids[512];
	while (taken < N) {
		uint32_t n = 0;
		CHECK_OK(shoal_farm_wait_some(f, ids, 512, &n, shoal_deadline_in(10000 * MS)));
		CHECK(n >= 1 && n <= 512);
		calls++;
		for (uint32_t i = 0; i < n; i++) {
			CHECK(ids[i] >= slow && ids[i] <= slow + N - 1 && !seen[ids[i] - slow]);
			CHECK(i == 0 || ids[i] > ids[i - 1]); /* oldest first */
			seen[ids[i] - slow] = true;
			const shoal_value *r;
			shoal_vbuf_reset(vb);
			CHECK_OK(shoal_farm_wait(f, ids[i], vb, &r, 0));
			if (ids[i] != slow)
				CHECK_EQ(r->v.i, (int64_t)(ids[i] - first) + 1);
			taken++;
		}
	}
	CHECK(calls < N); /* results came in batches */
	/* A result larger than the ring, polled for with waits that end at
	 * once: the message read in part by one goes on in the next. */
	size_t big = (size_t)3 << 20;
	unsigned char *mem = malloc(big);
	CHECK(mem != NULL);
	for (size_t k = 0; k < big; k++)
		mem[k] = (unsigned char)(k * 7);
	shoal_vbuf_reset(vb);
	shoal_task eid;
	CHECK_OK(shoal_farm_submit(f, "echo", shoal_v_bytes(vb, mem, big), NULL, &eid));
	uint32_t got = 0;
	int polls = 0;
	for (int64_t t0 = shoal_now_ns(); got == 0 && shoal_now_ns() - t0 < 20000 * MS; polls++) {
		int prc = shoal_farm_wait_some(f, ids, 512, &got, shoal_now_ns());
		CHECK(prc == 0 || prc == SHOAL_ETIMEDOUT);
	}
	CHECK(got == 1 && ids[0] == eid);
	const shoal_value *er;
	shoal_vbuf_reset(vb);
	CHECK_OK(shoal_farm_wait(f, eid, vb, &er, SHOAL_FOREVER));
	const void *eb = er->type == SHOAL_V_BYTES ? er->v.bytes : er->v.t.data;
	size_t en = er->type == SHOAL_V_BYTES ? er->n : er->v.t.nbytes;
	CHECK((er->type == SHOAL_V_BYTES || er->type == SHOAL_V_BLOB) && en == big &&
	      memcmp(eb, mem, big) == 0);
	free(mem);
	uint32_t n = 7;
	CHECK_RC(shoal_farm_wait_some(f, ids, 512, &n, SHOAL_FOREVER), SHOAL_ENOENT);
	CHECK_EQ(n, 0u);
	CHECK_RC(shoal_farm_wait_some(f, ids, 0, &n, SHOAL_FOREVER), SHOAL_EINVAL);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	shoal_controller_close(c);
	for (int i = 0; i < 2; i++)
		waitpid(pids[i], NULL, 0);
}

SH_TEST(no_controller_no_client)
{
	shoal_farm *f = NULL;
	CHECK(shoal_farm_connect(&f, "/nonexistent/tasks.sock") != 0);
	CHECK(f == NULL);
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.scheme = (shoal_scheme)42;
	shoal_controller *c;
	CHECK_RC(shoal_controller_open(&c, &o), SHOAL_EINVAL);
}

/* ---- issue 17: a farm that says what it is doing ---- */

/* The controller's log lines, kept (it logs from its own thread). */
static pthread_mutex_t heard_lock = PTHREAD_MUTEX_INITIALIZER;
static char heard[1 << 14];

static void hear(shoal_log_level l, const char *component, const char *line, void *ctx)
{
	(void)l;
	(void)ctx;
	pthread_mutex_lock(&heard_lock);
	size_t n = strlen(heard);
	snprintf(heard + n, sizeof(heard) - n, "[%s] %s\n", component, line);
	pthread_mutex_unlock(&heard_lock);
}

static bool heard_it(const char *needle)
{
	pthread_mutex_lock(&heard_lock);
	bool yes = strstr(heard, needle) != NULL;
	pthread_mutex_unlock(&heard_lock);
	return yes;
}

/* shoal_farm_stat, on this host and over TCP: the controller's figures as
 * its own stat has them, a row per engine (its number, pid or address,
 * tasks in flight), answered after the results the controller has for
 * the client (which the waits then find); engines coming and going are
 * logged at info with their number and pid. */
SH_TEST_T(farm_stat_shows_engines_and_tasks, 120)
{
	setenv("SHOAL_SECRET", secret, 1);
	shoal_log_set_level(SHOAL_LOG_INFO);
	shoal_log_set_sink(hear, NULL);
	for (int tcp = 0; tcp < 2; tcp++) {
		char addr[160];
		heard[0] = 0;
		shoal_controller *c = tcp_controller(addr, sizeof(addr));
		const char *at = tcp ? addr : shoal_controller_socket(c);
		pid_t pids[2];
		engines_at(c, at, NULL, 2, pids);
		char line[96];
		/* logged by the controller's thread once it counted them: soon
		 * after the count is seen, not before */
		for (int i = 0; i < 2 && !tcp; i++) {
			snprintf(line, sizeof(line), "(pid %d) joined", (int)pids[i]);
			WAIT_FOR(heard_it(line), 5000);
			CHECK(heard_it(line));
		}
		WAIT_FOR(heard_it("joined; 2 engines now"), 5000);
		CHECK(heard_it("joined; 2 engines now"));
		shoal_farm *f;
		CHECK_OK(shoal_farm_connect(&f, at));
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		shoal_task slow[2], t;
		for (int i = 0; i < 2; i++)
			CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 1500), NULL,
						   &slow[i]));
		shoal_controller_stat st;
		shoal_farm_engine rows[4];
		uint32_t n = 0;
		/* the sleeps are on their engines (one each: leastload) for 1.5 s:
		 * seen well before */
		int64_t until = shoal_deadline_in(5000 * MS);
		do {
			CHECK_OK(
				shoal_farm_stat(f, &st, rows, 4, &n, shoal_deadline_in(5000 * MS)));
		} while (st.running < 2 && shoal_now_ns() < until);
		CHECK_EQ(st.engines, 2);
		CHECK_EQ(n, 2);
		CHECK_EQ(st.clients, 1);
		CHECK_EQ(st.running, 2);
		CHECK_EQ(st.done, 0);
		CHECK_EQ(st.queued, 0);
		CHECK_EQ(st.failed, 0);
		CHECK(rows[0].num != rows[1].num && rows[0].num < 2 && rows[1].num < 2);
		CHECK_EQ(rows[0].inflight, 1);
		CHECK_EQ(rows[1].inflight, 1);
		for (int i = 0; i < 2; i++) {
			if (tcp) {
				CHECK_EQ(rows[i].pid, 0);
				CHECK_HAS(rows[i].peer, "127.0.0.1");
			} else {
				CHECK(rows[i].pid == pids[0] || rows[i].pid == pids[1]);
				snprintf(line, sizeof(line), "pid %d", (int)rows[i].pid);
				CHECK_STR(rows[i].peer, line);
			}
		}
		CHECK(rows[0].pid != rows[1].pid || tcp);
		CHECK_OK(shoal_farm_wait_all(f, shoal_deadline_in(10000 * MS)));
		/* results that come before an answer are kept for the waits */
		for (int i = 0; i < 5; i++)
			CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, i, 1), NULL, &t));
		until = shoal_deadline_in(5000 * MS);
		do {
			CHECK_OK(
				shoal_farm_stat(f, &st, rows, 4, &n, shoal_deadline_in(5000 * MS)));
		} while (st.done < 7 && shoal_now_ns() < until);
		CHECK_EQ(st.done, 7);
		CHECK_EQ(st.running, 0);
		CHECK_EQ(rows[0].inflight + rows[1].inflight, 0);
		/* the controller's own figures are the same */
		shoal_controller_stat own = stat_of(c);
		CHECK_EQ(own.engines, 2);
		CHECK_EQ(own.done, 7);
		for (shoal_task id = slow[1] + 1; id <= t; id++) {
			const shoal_value *r;
			CHECK_OK(shoal_farm_wait(f, id, vb, &r, SHOAL_NOWAIT));
			CHECK_EQ(r->v.i, (int64_t)(id - slow[1]));
		}
		/* fewer rows than engines: the count says how many there are */
		CHECK_OK(shoal_farm_stat(f, &st, rows, 1, &n, shoal_deadline_in(5000 * MS)));
		CHECK_EQ(n, 2);
		CHECK_OK(shoal_farm_stat(f, &st, NULL, 0, NULL, shoal_deadline_in(5000 * MS)));
		CHECK_RC(shoal_farm_stat(f, NULL, NULL, 0, NULL, SHOAL_FOREVER), SHOAL_EINVAL);
		CHECK_RC(shoal_farm_stat(f, &st, NULL, 3, &n, SHOAL_FOREVER), SHOAL_EINVAL);
		/* a departure, with what is left */
		CHECK_EQ(kill(pids[0], SIGKILL), 0);
		WAIT_FOR(stat_of(c).engines == 1, 10000);
		WAIT_FOR(heard_it("1 engine left"), 5000);
		if (!tcp) {
			snprintf(line, sizeof(line), "(pid %d) was killed by signal 9",
				 (int)pids[0]);
			CHECK(heard_it(line));
		}
		CHECK(heard_it("1 engine left"));
		CHECK_OK(shoal_farm_stat(f, &st, rows, 4, &n, shoal_deadline_in(5000 * MS)));
		CHECK_EQ(st.engines, 1);
		CHECK_EQ(n, 1);
		shoal_vbuf_free(vb);
		shoal_farm_close(f);
		shoal_controller_close(c);
		for (int i = 0; i < 2; i++)
			waitpid(pids[i], NULL, 0);
	}
	shoal_log_set_sink(NULL, NULL);
}

/* A wait on a controller without engines says so when its deadline
 * passes (and costs a bounded round trip then, nothing before); with an
 * engine busy, the timeout is a plain one. The task waited for runs once
 * an engine comes. */
SH_TEST_T(a_wait_without_engines_says_so, 120)
{
	setenv("SHOAL_SECRET", secret, 1);
	for (int tcp = 0; tcp < 2; tcp++) {
		char addr[160];
		shoal_controller *c = tcp_controller(addr, sizeof(addr));
		const char *at = tcp ? addr : shoal_controller_socket(c);
		shoal_farm *f;
		CHECK_OK(shoal_farm_connect(&f, at));
		shoal_vbuf *vb;
		CHECK_OK(shoal_vbuf_create(&vb));
		shoal_task t, any;
		const shoal_value *r;
		CHECK_OK(shoal_farm_submit(f, "add", int_pair(vb, 2, 3), NULL, &t));
		int64_t t0 = shoal_now_ns();
		CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(300 * MS)),
			 SHOAL_ETIMEDOUT);
		int64_t took = shoal_now_ns() - t0;
		char want[256];
		snprintf(want, sizeof(want), "no engine is connected to the controller at %s", at);
		CHECK_FARM_MSG(f, want);
		/* the deadline, then at most the 250 ms question (slack for a
		 * loaded or sanitized run) */
		CHECK(took >= 300 * MS && took < 300 * MS + 250 * MS + 1500 * MS);
		CHECK_RC(shoal_farm_wait_any(f, &any, shoal_deadline_in(50 * MS)), SHOAL_ETIMEDOUT);
		CHECK_FARM_MSG(f, "no engine is connected");
		CHECK_RC(shoal_farm_wait_all(f, shoal_deadline_in(50 * MS)), SHOAL_ETIMEDOUT);
		CHECK_FARM_MSG(f, "no engine is connected");
		pid_t pid;
		engines_at(c, at, NULL, 1, &pid);
		CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)));
		CHECK_EQ(r->v.i, 5);
		/* an engine is there, busy: a plain timeout */
		CHECK_OK(shoal_farm_submit(f, "sleep", shoal_v_int(vb, 2000), NULL, &t));
		CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(200 * MS)),
			 SHOAL_ETIMEDOUT);
		CHECK_FARM_MSG(f, "no result before the deadline");
		CHECK(strstr(shoal_farm_error(f), "no engine") == NULL);
		CHECK_OK(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * MS)));
		shoal_vbuf_free(vb);
		shoal_farm_close(f);
		shoal_controller_close(c);
		waitpid(pid, NULL, 0);
	}
}

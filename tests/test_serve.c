/* Tests of the scaffold the daemons serve on: fiber groups (members freed
 * as they end, stop cancels and joins them all within its deadline, no
 * member joins a stopping group), the listener (a unix and a TCP accept
 * loop: credentials, room, handshake slots, the bounded refusal log,
 * connections ended with it) and child processes (descriptors, log, PATH,
 * pidfd waits, a group killed as a whole). */
#include "test.h"

#include "base/proc.h"
#include "fiber/fiber_impl.h"
#include "fiber/group.h"
#include "net/listener.h"
#include "ring/link.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- fiber groups ---- */

static int ended;

static void *sleeper(void *arg)
{
	int64_t ns = (int64_t)(intptr_t)arg;
	int rc = shoal_sleep_until(shoal_deadline_in(ns));
	ended++;
	return (void *)(intptr_t)rc;
}

SH_TEST(a_group_frees_members_as_they_end)
{
	shoal_sched *s = sh_test_sched_new();
	sh_fgroup g;
	sh_fgroup_init(&g);
	ended = 0;
	for (int i = 0; i < 100; i++)
		CHECK_OK(sh_fgroup_spawn(&g, NULL, sleeper, (void *)(intptr_t)(i % 2 ? MS : 0),
					 NULL));
	CHECK_EQ(g.n, 100u);
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(50 * MS)), SHOAL_ETIMEDOUT);
	CHECK_EQ(ended, 100);
	CHECK_EQ(g.n, 0u);
	shoal_sched_stats st;
	shoal_sched_stats_get(s, &st);
	CHECK_EQ(st.live, 0u); /* nothing left to join */
	CHECK_OK(sh_fgroup_stop(&g, SHOAL_NOWAIT));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(stopping_a_group_cancels_and_joins_every_member)
{
	shoal_sched *s = sh_test_sched_new();
	sh_fgroup g;
	sh_fgroup_init(&g);
	ended = 0;
	for (int i = 0; i < 50; i++)
		CHECK_OK(sh_fgroup_spawn(&g, NULL, sleeper, (void *)(intptr_t)(3600 * 1000 * MS),
					 NULL));
	CHECK_OK(shoal_yield()); /* they block */
	int64_t t0 = shoal_now_ns();
	CHECK_OK(sh_fgroup_stop(&g, shoal_deadline_in(10000 * MS)));
	CHECK(shoal_now_ns() - t0 < 5000 * MS);
	CHECK_EQ(ended, 50);
	CHECK_EQ(g.n, 0u);
	/* a stopped group takes no one: fn never runs, arg stays the caller's */
	CHECK_RC(sh_fgroup_spawn(&g, NULL, sleeper, NULL, NULL), SHOAL_ECANCELED);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(a_group_join_keeps_its_deadline)
{
	shoal_sched *s = sh_test_sched_new();
	sh_fgroup g;
	sh_fgroup_init(&g);
	ended = 0;
	/* a member that takes its time to end (a reply it finishes) */
	CHECK_OK(sh_fgroup_spawn(&g, NULL, sleeper, (void *)(intptr_t)(300 * MS), NULL));
	CHECK_OK(shoal_yield());
	CHECK_RC(sh_fgroup_join(&g, shoal_deadline_in(20 * MS)), SHOAL_ETIMEDOUT);
	CHECK_EQ(g.n, 1u); /* still a member: a later join waits for it */
	CHECK_EQ(ended, 0);
	CHECK_RC(sh_fgroup_spawn(&g, NULL, sleeper, NULL, NULL), SHOAL_ECANCELED);
	CHECK_OK(sh_fgroup_join(&g, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(ended, 1);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- listeners ---- */

static char logbuf[16384];
static size_t loglen;

static void sink(shoal_log_level level, const char *component, const char *line, void *ctx)
{
	(void)level, (void)ctx;
	int n = snprintf(logbuf + loglen, sizeof(logbuf) - loglen, "%s: %s\n", component, line);
	if (n > 0 && loglen + (size_t)n < sizeof(logbuf))
		loglen += (size_t)n;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

typedef struct served {
	sh_listener *l;
	int room; /* connections that still fit */
	int live, done;
} served;

static bool has_room(void *arg, char *why, size_t whylen)
{
	served *s = arg;
	if (s->room > 0)
		return true;
	snprintf(why, whylen, "no room (the test's bound)");
	return false;
}

typedef struct conn {
	served *s;
	int fd;
	int hello;
} conn;

/* Echoes one message, then holds the connection until the peer goes or
 * the listener stops (cancel). */
static void *echo_main(void *arg)
{
	conn *c = arg;
	char b[64];
	if (shoal_fd_wait(c->fd, SHOAL_FD_IN, SHOAL_FOREVER, NULL) == 0) {
		ssize_t r = recv(c->fd, b, sizeof(b), 0);
		if (r > 0)
			send(c->fd, b, (size_t)r, MSG_NOSIGNAL);
		sh_listener_hello_done(c->s->l, c->hello);
		while (shoal_fd_wait(c->fd, SHOAL_FD_IN, SHOAL_FOREVER, NULL) == 0 &&
		       recv(c->fd, b, sizeof(b), 0) > 0)
			;
	}
	close(c->fd);
	c->s->live--;
	c->s->done++;
	SH_DELETE(c);
	return NULL;
}

static int take(void *arg, sh_accepted *a, char *why, size_t whylen)
{
	served *s = arg;
	conn *c = SH_NEW(conn);
	if (!c)
		return snprintf(why, whylen, "out of memory"), SHOAL_ENOMEM;
	*c = (conn){.s = s, .fd = a->fd, .hello = a->hello};
	int rc = sh_listener_spawn(s->l, echo_main, c, "test-conn");
	if (rc) {
		SH_DELETE(c);
		return snprintf(why, whylen, "%s", shoal_strerror(rc)), rc;
	}
	s->room--;
	s->live++;
	return 0;
}

/* Connects (non-blocking) to the unix socket at path or the TCP port. */
static int dial(const struct sockaddr *sa, socklen_t len, int type)
{
	int fd = socket(sa->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	int rc = connect(fd, sa, len);
	CHECK(rc == 0 || errno == EINPROGRESS);
	CHECK_OK(shoal_fd_wait(fd, SHOAL_FD_OUT, shoal_deadline_in(5000 * MS), NULL));
	return fd;
}

/* Sends "hi" and reads it back, or sees the connection closed: 1 echoed,
 * 0 closed. */
static int hello(int fd)
{
	send(fd, "hi", 2, MSG_NOSIGNAL);
	char b[8];
	for (;;) {
		CHECK_OK(shoal_fd_wait(fd, SHOAL_FD_IN, shoal_deadline_in(5000 * MS), NULL));
		ssize_t r = recv(fd, b, sizeof(b), 0);
		if (r < 0 && errno == EAGAIN)
			continue;
		return r == 2 && !memcmp(b, "hi", 2);
	}
}

SH_TEST(a_unix_listener_checks_room_and_ends_its_connections)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_log_set_level(SHOAL_LOG_WARN);
	shoal_log_set_sink(sink, NULL);
	loglen = 0;
	logbuf[0] = 0;
	char dir[] = "/tmp/shoal-test-serve-XXXXXX";
	CHECK(mkdtemp(dir));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/l.sock", dir);
	int lsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(lsock >= 0);
	CHECK_OK(bind(lsock, (struct sockaddr *)&sa, sizeof(sa)));
	CHECK_OK(listen(lsock, 64));
	sh_listener l;
	served sv = {.l = &l, .room = 3};
	CHECK_OK(sh_listener_start(&l, &(sh_listener_opts){.area = "test",
							   .lsock = lsock,
							   .group = (gid_t)-1,
							   .room = has_room,
							   .take = take,
							   .arg = &sv}));
	int fds[5];
	for (int i = 0; i < 5; i++) {
		fds[i] = dial((struct sockaddr *)&sa, sizeof(sa), SOCK_SEQPACKET);
		CHECK_EQ(hello(fds[i]), i < 3); /* three fit, two are refused */
	}
	CHECK_EQ(sv.live, 3);
	CHECK_EQ(l.accepted, 3u);
	CHECK_EQ(l.refused, 2u);
	char me[64];
	snprintf(me, sizeof(me), "refused pid %d: no room", (int)getpid());
	CHECK_EQ(count(logbuf, me), 2);
	/* one client goes: its connection ends and is freed by itself */
	close(fds[0]);
	for (int i = 0; i < 100 && sv.done < 1; i++)
		shoal_sleep_until(shoal_deadline_in(MS));
	CHECK_EQ(sv.done, 1);
	CHECK_EQ(l.conns.n, 2u);
	/* stopping ends the rest (they wait on clients that stay) */
	CHECK_OK(sh_listener_stop(&l, true, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(sv.live, 0);
	CHECK_EQ(sv.done, 3);
	for (int i = 1; i < 5; i++)
		close(fds[i]);
	close(lsock);
	unlink(sa.sun_path);
	rmdir(dir);
	shoal_log_set_sink(NULL, NULL);
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(a_tcp_listener_bounds_handshakes_and_its_log)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_log_set_level(SHOAL_LOG_WARN);
	shoal_log_set_sink(sink, NULL);
	loglen = 0;
	logbuf[0] = 0;
	int lsock;
	char bound[64], why[256];
	CHECK_OK(sh_tcp_listen("127.0.0.1:0", &lsock, bound, sizeof(bound), why, sizeof(why)));
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	CHECK_OK(getsockname(lsock, (struct sockaddr *)&sa, &sl));
	sh_listener l;
	served sv = {.l = &l, .room = 1000};
	CHECK_OK(sh_listener_start(&l, &(sh_listener_opts){.area = "test",
							   .lsock = lsock,
							   .tcp = true,
							   .label = "peer",
							   .hellos = 8,
							   .hellos_per_source = 2,
							   .take = take,
							   .arg = &sv}));
	/* 30 strangers from one address at once: two may be in their
	 * handshake, the rest are refused, and 10 refusals are told */
	int fds[30];
	for (int i = 0; i < 30; i++)
		fds[i] = dial((struct sockaddr *)&sa, sizeof(sa), SOCK_STREAM);
	for (int i = 0; i < 200 && l.accepted + l.refused < 30; i++)
		shoal_sleep_until(shoal_deadline_in(MS));
	CHECK_EQ(l.accepted, 2u);
	CHECK_EQ(l.refused, 28u);
	CHECK_EQ(count(logbuf, "refused peer 127.0.0.1:"), SH_REFUSALS_TOLD);
	CHECK_HAS(logbuf, "over TCP: 2 handshakes from 127.0.0.1 at once already");
	/* a handshake that ends frees its slot: a newcomer is taken */
	int a = -1;
	for (int i = 0; i < 30 && a < 0; i++)
		if (i < 30 && hello(fds[i]))
			a = i;
	CHECK(a >= 0);
	int late = dial((struct sockaddr *)&sa, sizeof(sa), SOCK_STREAM);
	CHECK_EQ(hello(late), 1);
	CHECK_EQ(l.accepted, 3u);
	CHECK_OK(sh_listener_stop(&l, true, shoal_deadline_in(10000 * MS)));
	CHECK_EQ(sv.live, 0);
	for (int i = 0; i < 30; i++)
		close(fds[i]);
	close(late);
	close(lsock);
	shoal_log_set_sink(NULL, NULL);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- child processes ---- */

SH_TEST(a_child_gets_the_descriptors_and_log_it_is_given)
{
	char path[4096];
	CHECK_OK(sh_proc_find("sh", path, sizeof(path)));
	CHECK(path[0] == '/');
	CHECK_RC(sh_proc_find("no-such-program-shoal", path, sizeof(path)), SHOAL_ENOENT);
	char dir[] = "/tmp/shoal-test-proc-XXXXXX";
	CHECK(mkdtemp(dir));
	char log[4200];
	snprintf(log, sizeof(log), "%s/child.log", dir);
	int p[2];
	CHECK_OK(pipe2(p, O_CLOEXEC));
	char *argv[] = {"sh", "-c", "echo out; echo err >&2; echo three >&3; exit 7", NULL};
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.stdio[0] = SH_PROC_DEVNULL;
	o.log = log;
	o.from[0] = p[1];
	o.to[0] = 3;
	o.nfds = 1;
	sh_proc c;
	char why[256];
	CHECK_OK(sh_proc_spawn(&c, &o, why, sizeof(why)));
	close(p[1]);
	CHECK(c.pidfd >= 0);
	CHECK_OK(sh_proc_wait(&c, shoal_deadline_in(10000 * MS)));
	CHECK(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 7);
	char b[256] = "";
	CHECK_EQ(read(p[0], b, sizeof(b) - 1), 6);
	CHECK(!strncmp(b, "three\n", 6));
	close(p[0]);
	int fd = open(log, O_RDONLY);
	CHECK(fd >= 0);
	ssize_t n = read(fd, b, sizeof(b) - 1);
	CHECK(n > 0);
	b[n] = 0;
	CHECK_HAS(b, "out\n");
	CHECK_HAS(b, "err\n");
	close(fd);
	struct stat st;
	CHECK_OK(stat(log, &st));
	CHECK_EQ(st.st_mode & 0777, 0600u);
	sh_proc_fini(&c);
	unlink(log);
	rmdir(dir);
	char *none[] = {"no-such-program-shoal", NULL};
	sh_proc_opts_init(&o, none);
	CHECK_RC(sh_proc_spawn(&c, &o, why, sizeof(why)), SHOAL_ENOENT);
	CHECK_HAS(why, "no-such-program-shoal: it is in no directory of PATH");
}

SH_TEST(a_childs_group_is_killed_as_a_whole)
{
	/* grandchildren orphaned by the kill come back to us to reap */
	CHECK_OK(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0));
	char *argv[] = {"sh", "-c", "sleep 100 & sleep 100 & wait", NULL};
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.detach = SH_PROC_PGROUP;
	o.default_signals = true;
	sh_proc c;
	char why[256];
	CHECK_OK(sh_proc_spawn(&c, &o, why, sizeof(why)));
	CHECK_EQ(c.pgid, c.pid);
	CHECK_RC(sh_proc_wait(&c, shoal_deadline_in(50 * MS)), SHOAL_ETIMEDOUT);
	CHECK_OK(sh_proc_kill(&c, shoal_deadline_in(10000 * MS)));
	CHECK(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL);
	/* the sleeps went with it */
	int st;
	while (waitpid(-c.pgid, &st, 0) > 0)
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK(kill(-c.pgid, 0) != 0 && errno == ESRCH);
	CHECK_RC(sh_proc_signal(&c, SIGTERM), -ESRCH); /* reaped: never a recycled pid */
	sh_proc_fini(&c);
	CHECK_OK(prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0));
}

SH_TEST(a_child_ends_on_sigterm_when_asked_for_defaults)
{
	/* the test ignores SIGTERM; the child must not inherit that */
	struct sigaction ign = {.sa_handler = SIG_IGN}, old;
	sigaction(SIGTERM, &ign, &old);
	char *argv[] = {"sleep", "100", NULL};
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.default_signals = true;
	sh_proc c;
	char why[256];
	CHECK_OK(sh_proc_spawn(&c, &o, why, sizeof(why)));
	CHECK_EQ(c.pgid, 0);
	CHECK_OK(sh_proc_signal(&c, SIGTERM));
	CHECK_OK(sh_proc_wait(&c, shoal_deadline_in(10000 * MS)));
	CHECK(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGTERM);
	sh_proc_fini(&c);
	sigaction(SIGTERM, &old, NULL);
}

/* The supervisor of a cluster (shoal_cluster_supervise, in the process
 * shoal_cluster_start runs: `shoal cluster serve`, or a python3): runs the
 * controller in a thread, starts and follows the
 * launches (launch.h), answers `status`, `add` and `stop` on the control
 * socket in the cluster's directory, and ends every process it started
 * when told to stop or signalled. With --tcp its engines get a secret (the
 * user's, else one made for this cluster, kept in the directory); with
 * --stores, a store on each node (on this host a shoald of its own). It
 * tells `start` on the ready descriptor whether the engines registered. */
#include "base/proc.h"
#include "cluster/launch.h"
#include "cluster/supervise.h"
#include "net/net.h"
#include "shoal_impl.h"
#include "tasks/controller.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/tasks.h>

extern char **environ;

#define MAX_LAUNCHES 64
#define NEWS_MAX 8192

/* ---- the supervisor ------------------------------------------------------ */

typedef struct sup {
	const char *name, *dir;
	uint32_t n; /* engines asked for at start */
	shoal_launcher kind;
	const char *hosts, *ssh, *tcp, *so, *python, *pkgdir;
	shoal_scheme scheme;
	int64_t timeout_ns;
	bool stores;		   /* a store on each node */
	const char *store_size;	   /* shoald --size */
	const char *store_args;	   /* more of shoald's options (--meta ...), split on blanks */
	char store_sock[PATH_MAX]; /* local: the store this supervisor runs */
	sh_proc store;		   /* pid 0: none */
	char secret[129];
	bool have_secret;
	char ctl_sock[PATH_MAX];
	char engine_addr[300]; /* what engines of other hosts connect to */
	shoal_controller *ctl;
	sh_launch *launch[MAX_LAUNCHES];
	uint32_t nlaunch, asked;
	char news[NEWS_MAX]; /* the last ends, for status */
	int64_t started_ns;
	int log_fd;
} sup;

static void sup_log(sup *s, const char *fmt, ...) SHOAL_PRINTF(2, 3);
static void sup_log(sup *s, const char *fmt, ...)
{
	char line[2048];
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	size_t k = strftime(line, sizeof(line), "%Y-%m-%d %H:%M:%S ", &tm);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + k, sizeof(line) - k, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

#define STORE_ARGS 40 /* words of a store's command line, at most */

/* A node's store: shoald, its --size and the user's --store-args (split on
 * blanks) into a, for every launcher; the socket is each launcher's to add.
 * Returns the words written (a has room for STORE_ARGS). */
static size_t store_command(sup *s, const char **a)
{
	static char shoald[PATH_MAX], args[1024];
	size_t k = 0;
	a[k++] = sh_program_path("shoald", shoald, sizeof(shoald));
	a[k++] = "--size";
	a[k++] = s->store_size;
	snprintf(args, sizeof(args), "%s", s->store_args ? s->store_args : "");
	char *save = NULL;
	for (char *w = strtok_r(args, " \t", &save); w && k + 1 < STORE_ARGS;
	     w = strtok_r(NULL, " \t", &save))
		a[k++] = w;
	return k;
}

/* The engine's command for a launch: Python engines unless --so. */
static int engine_argv(sup *s, bool local, const char **a, const char **env, char *envbuf,
		       size_t envlen)
{
	static char engine[PATH_MAX], so[PATH_MAX];
	size_t k = 0, e = 0;
	if (s->so) {
		const char *r = getenv("SHOAL_ENGINE");
		a[k++] = r && *r ? r : sh_program_path("shoal-engine", engine, sizeof(engine));
		a[k++] = "--so";
		a[k++] = realpath(s->so, so) ? so : s->so;
	} else {
		a[k++] = s->python;
		a[k++] = "-m";
		a[k++] = "shoal.engine";
		if (s->pkgdir) {
			/* the package first, then the user's own modules */
			const char *up = getenv("PYTHONPATH");
			snprintf(envbuf, envlen, "PYTHONPATH=%s%s%s", s->pkgdir,
				 up && *up ? ":" : "", up && *up ? up : "");
			env[e++] = envbuf;
		}
	}
	if (local || !s->tcp) {
		a[k++] = "--socket";
		a[k++] = s->ctl_sock;
	} else {
		a[k++] = "--connect";
		a[k++] = s->engine_addr;
	}
	if (local)
		a[k++] = "--die-with-parent";
	if (local && s->store.pid > 0) {
		a[k++] = "--store";
		a[k++] = s->store_sock;
	}
	a[k] = NULL;
#if defined(SH_ASAN)
	/* A module built with ASan loads only where the sanitizer's runtime
	 * came first: engines elsewhere must be started as this one was. */
	static char san[3][PATH_MAX + 32];
	static const char *const vars[] = {"LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS"};
	for (int i = 0; i < 3; i++) {
		const char *v = getenv(vars[i]);
		if (v && *v) {
			snprintf(san[i], sizeof(san[i]), "%s=%s", vars[i], v);
			env[e++] = san[i];
		}
	}
#endif
	env[e] = NULL;
	return 0;
}

static int sup_launch(sup *s, shoal_launcher kind, uint32_t n, const char *hosts, char *why,
		      size_t whylen)
{
	if (s->nlaunch == MAX_LAUNCHES)
		return snprintf(why, whylen, "at most %d launches in a cluster", MAX_LAUNCHES), -1;
	if (kind == SHOAL_LAUNCH_SSH && !s->tcp)
		return snprintf(why, whylen,
				"ssh: engines on other hosts need the controller on TCP: give "
				"--tcp HOST:PORT (an address they reach)"),
		       -1;
	const char *argv[16], *env[8];
	static char envbuf[2 * PATH_MAX + 16];
	engine_argv(s, kind == SHOAL_LAUNCH_LOCAL, argv, env, envbuf, sizeof(envbuf));
	sh_launch_cfg c = {
		.kind = kind,
		.n = n,
		.argv = argv,
		.secret = s->have_secret ? s->secret : NULL,
		.env = env,
		.hosts = hosts,
		.ssh = s->ssh,
		.dir = s->dir,
		.name = s->name,
		.id = s->nlaunch,
		.timeout_ns = s->timeout_ns,
	};
	/* local Python engines: forked from one interpreter (argv is
	 * python3 -m shoal.engine ARGS: the forker takes ARGS) */
	static const char *forker[4];
	if (kind == SHOAL_LAUNCH_LOCAL && !s->so && n > 1) {
		forker[0] = s->python;
		forker[1] = "-c";
		forker[2] = "import sys; from shoal import _engine; "
			    "sys.exit(_engine._fork_engines(sys.argv[1:]))";
		forker[3] = NULL;
		c.fork_argv = forker;
	}
	static const char *store_argv[STORE_ARGS];
	if (s->stores && kind != SHOAL_LAUNCH_LOCAL) {
		store_argv[store_command(s, store_argv)] = NULL;
		c.store_argv = store_argv;
	}
	sh_launch *l;
	if (sh_launch_start(&l, &c, why, whylen) != 0)
		return -1;
	s->launch[s->nlaunch++] = l;
	s->asked += n;
	return 0;
}

static void sup_poll(sup *s)
{
	char news[NEWS_MAX];
	news[0] = 0;
	for (uint32_t i = 0; i < s->nlaunch; i++)
		sh_launch_poll(s->launch[i], news, sizeof(news));
	if (!news[0])
		return;
	sup_log(s, "%s", news);
	/* the newest ends first, within NEWS_MAX */
	size_t a = strlen(news), b = strlen(s->news);
	if (a + b + 1 > sizeof(s->news))
		b = sizeof(s->news) - a - 1 < b ? sizeof(s->news) - a - 1 : b;
	memmove(s->news + a, s->news, b);
	memcpy(s->news, news, a);
	s->news[a + b] = 0;
}

/* The descriptors that say a launch has news (sh_launch_wait_fds). */
#define WAIT_FDS 1024
static uint32_t sup_wait_fds(sup *s, struct pollfd *p, uint32_t max, int64_t *until)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->nlaunch && n < max; i++)
		n += sh_launch_wait_fds(s->launch[i], p + n, max - n, until);
	return n;
}

static void sup_status(sup *s, char *out, size_t len)
{
	shoal_controller_stat st;
	shoal_controller_stat_get(s->ctl, &st);
	int k = snprintf(out, len,
			 "cluster %s (supervisor pid %d, up %.1f s)\n"
			 "controller: %s%s%s\n",
			 s->name, (int)getpid(), (shoal_now_ns() - s->started_ns) / 1e9,
			 s->ctl_sock, s->tcp ? " and tcp://" : "", s->tcp ? s->engine_addr : "");
	if (s->have_secret && k > 0 && (size_t)k < len)
		k += snprintf(out + k, len - (size_t)k, "secret: %s/secret\n", s->dir);
	if (s->store.pid > 0 && k > 0 && (size_t)k < len)
		k += snprintf(out + k, len - (size_t)k, "store: %s (pid %d)\n", s->store_sock,
			      (int)s->store.pid);
	else if (s->stores && k > 0 && (size_t)k < len)
		k += snprintf(out + k, len - (size_t)k,
			      "stores: one a node, /tmp/shoal-%u-cluster-%s-NODE/store.sock\n",
			      (unsigned)geteuid(), s->name);
	if (k > 0 && (size_t)k < len)
		k += snprintf(out + k, len - (size_t)k,
			      "engines: %u registered, %u asked for\n"
			      "tasks: %" PRIu64 " queued, %" PRIu64 " running, %" PRIu64
			      " done, %" PRIu64 " retried, %" PRIu64 " failed\n",
			      st.engines, s->asked, st.queued, st.running, st.done, st.retried,
			      st.failed);
	for (uint32_t i = 0; i < s->nlaunch && k > 0 && (size_t)k < len; i++) {
		size_t o = (size_t)k;
		out[o] = 0;
		sh_launch_describe(s->launch[i], out + o, len - o);
		k = (int)strlen(out);
	}
	if (s->news[0] && k > 0 && (size_t)k < len)
		snprintf(out + k, len - (size_t)k, "ended:\n%s", s->news);
}

/* Whether a launch from the first one on failed. */
static bool sup_failed(sup *s, uint32_t first)
{
	for (uint32_t i = first; i < s->nlaunch; i++)
		if (sh_launch_failed(s->launch[i]))
			return true;
	return false;
}

/* Waits until `want` engines are registered; on a launcher's failure or at
 * the deadline, why says who did not come and why. */
static int sup_wait(sup *s, uint32_t want, uint32_t first, int64_t deadline, char *why,
		    size_t whylen)
{
	for (;;) {
		shoal_controller_stat st;
		shoal_controller_stat_get(s->ctl, &st);
		if (st.engines >= want)
			return 0;
		sup_poll(s);
		if (sup_failed(s, first) || shoal_now_ns() >= deadline) {
			char units[4096] = "";
			for (uint32_t i = first; i < s->nlaunch; i++)
				sh_launch_describe(s->launch[i], units + strlen(units),
						   sizeof(units) - strlen(units));
			int k = snprintf(why, whylen, "%u of %u engines registered %s:\n",
					 st.engines, want,
					 sup_failed(s, first) ? "when a launcher failed"
							      : "before the timeout (--timeout)");
			/* what ended, then how each launch is doing, cut to fit */
			const char *parts[] = {s->news, units};
			for (int i = 0; i < 2 && k > 0 && (size_t)k + 1 < whylen; i++) {
				size_t room = whylen - (size_t)k - 1, n = strlen(parts[i]);
				memcpy(why + k, parts[i], n < room ? n : room);
				k += (int)(n < room ? n : room);
				why[k] = 0;
			}
			return -1;
		}
		/* an engine joined or left, a process a launch started ended,
		 * a Slurm launch's next ask, or the deadline */
		struct pollfd p[1 + WAIT_FDS] = {{sh_ctl_engines_fd(s->ctl), POLLIN, 0}};
		int64_t until = deadline;
		nfds_t n = 1 + sup_wait_fds(s, p + 1, WAIT_FDS, &until);
		int64_t left = until == SHOAL_FOREVER ? 3600000000000LL : until - shoal_now_ns();
		left = left < 0 ? 0 : left > 3600000000000LL ? 3600000000000LL : left;
		if (poll(p, n, (int)((left + 999999) / 1000000)) > 0 && p[0].revents) {
			uint64_t v;
			if (read(p[0].fd, &v, sizeof(v)) < 0) {
				/* cleared already: stat says the rest */
			}
		}
	}
}

static void sup_stop(sup *s)
{
	int64_t deadline = shoal_now_ns() + 10000000000LL;
	for (uint32_t i = 0; i < s->nlaunch; i++)
		sh_launch_stop(s->launch[i], deadline);
	sup_poll(s);
}

static int make_secret(sup *s, char *why, size_t whylen)
{
	unsigned char raw[SH_SECRET_MAX];
	size_t n = 0;
	char ignored[256];
	if (sh_secret_load(raw, &n, ignored, sizeof(ignored)) == 0) {
		/* the user's: engines get it in their environment, as text */
		if (n >= sizeof(s->secret))
			return snprintf(why, whylen,
					"the secret is %zu bytes: engines take at most %zu in "
					"their environment",
					n, sizeof(s->secret) - 1),
			       -1;
		for (size_t i = 0; i < n; i++)
			if (raw[i] < 0x21 || raw[i] > 0x7e)
				return snprintf(why, whylen,
						"the secret holds bytes that are not printable: "
						"engines take it as text (or unset "
						"$SHOAL_SECRET_FILE "
						"and $SHOAL_SECRET: the cluster then makes one)"),
				       -1;
		memcpy(s->secret, raw, n);
		s->secret[n] = 0;
	} else {
		/* a one-time secret, for this cluster alone */
		unsigned char r[32];
		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return snprintf(why, whylen, "getrandom: %s", strerror(errno)), -1;
		for (size_t i = 0; i < sizeof(r); i++)
			sprintf(s->secret + 2 * i, "%02x", r[i]);
	}
	s->have_secret = true;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/secret", s->dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return snprintf(why, whylen, "%s: %s", path, strerror(errno)), -1;
	size_t len = strlen(s->secret);
	bool ok = write(fd, s->secret, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
	close(fd);
	if (!ok)
		return snprintf(why, whylen, "%s: cannot write it", path), -1;
	return 0;
}

static int control_listen(const char *dir)
{
	struct sockaddr_un a;
	if (sh_cluster_unix_addr(dir, "control.sock", &a))
		return -1;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	unlink(a.sun_path);
	/* 0600, as every socket of shoal's, inside the cluster's 0700 directory */
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || chmod(a.sun_path, 0600) != 0 ||
	    listen(fd, 16) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Answers one request; true when it was a stop. */
static bool sup_answer(sup *s, int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return false;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 ||
	    (cr.uid != geteuid() && cr.uid != 0)) {
		sup_log(s, "refused a request of uid %d", (int)cr.uid);
		close(fd);
		return false;
	}
	/* a request is one message, at once: the requester is a command */
	struct pollfd p = {fd, POLLIN, 0};
	char buf[SH_CLUSTER_REQ_MAX + 1];
	ssize_t n = poll(&p, 1, 2000) == 1 ? recv(fd, buf, sizeof(buf), MSG_DONTWAIT) : -1;
	static char reply[SH_CLUSTER_REPLY_MAX];
	bool stop = false;
	sh_cluster_req r;
	static char why[8192];
	if (n <= 0) {
		close(fd);
		return false;
	}
	if (sh_cluster_parse_request(buf, (size_t)n, &r, why, sizeof(why)) != 0) {
		snprintf(reply, sizeof(reply), "error: %s\n", why);
	} else if (r.op == SH_CLUSTER_STATUS) {
		for (uint32_t i = 0; i < s->nlaunch; i++)
			sh_launch_refresh(s->launch[i]);
		sup_poll(s);
		sup_status(s, reply, sizeof(reply));
	} else if (r.op == SH_CLUSTER_STOP) {
		snprintf(reply, sizeof(reply), "stopping\n");
		stop = true;
	} else {
		shoal_controller_stat st;
		shoal_controller_stat_get(s->ctl, &st);
		uint32_t want = s->asked + r.n;
		if (sup_launch(s, (shoal_launcher)r.launcher, r.n, r.hosts[0] ? r.hosts : NULL, why,
			       sizeof(why)) != 0)
			snprintf(reply, sizeof(reply), "error: %s\n", why);
		else if (sup_wait(s, st.engines + r.n, s->nlaunch - 1,
				  shoal_now_ns() + s->timeout_ns, why, sizeof(why)) != 0) {
			/* what came of it goes too: an add is whole or not at all */
			sh_launch_stop(s->launch[s->nlaunch - 1], shoal_now_ns() + 10000000000LL);
			snprintf(reply, sizeof(reply), "error: %s\n", why);
		} else {
			sup_log(s, "added %u engines (%s)", r.n, sh_launcher_names[r.launcher]);
			snprintf(reply, sizeof(reply), "added %u engines: %u asked for in all\n",
				 r.n, want);
		}
	}
	send(fd, reply, strlen(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
	close(fd);
	return stop;
}

/* The store of this host's engines (--stores with the local launcher): a
 * shoald of this supervisor's, on DIR/store.sock. */
static int local_store_start(sup *s, char *why, size_t whylen)
{
	char log[PATH_MAX + 16];
	const char *a[STORE_ARGS + 5];
	snprintf(s->store_sock, sizeof(s->store_sock), "%s/store.sock", s->dir);
	snprintf(log, sizeof(log), "%s/store.log", s->dir);
	size_t k = store_command(s, a);
	a[k++] = "--socket";
	a[k++] = s->store_sock;
	a[k++] = "--ready-fd";
	a[k++] = "3";
	a[k] = NULL;
	int word;
	if (sh_proc_spawn_daemon(&s->store, (char *const *)a, log, SH_PROC_SAME, &word, why,
				 whylen) != 0) {
		s->store.pid = 0;
		return -1;
	}
	/* ready once it says so (--ready-fd), or it ended: whichever comes */
	int64_t deadline = shoal_now_ns() + 20000000000LL;
	char line[PATH_MAX + 16];
	size_t got = 0;
	for (;;) {
		struct pollfd pf[2] = {{.fd = word, .events = POLLIN},
				       {.fd = s->store.pidfd, .events = POLLIN}};
		int64_t left = deadline - shoal_now_ns();
		if (left <= 0 ||
		    poll(pf, s->store.pidfd >= 0 ? 2 : 1, (int)(left / 1000000 + 1)) == 0) {
			close(word);
			return snprintf(why, whylen,
					"the store (shoald) did not listen within 20 s"),
			       -1;
		}
		ssize_t r = pf[0].revents ? read(word, line + got, sizeof(line) - 1 - got) : 0;
		if (r > 0) {
			got += (size_t)r;
			line[got] = 0;
			if (strchr(line, '\n') && !strncmp(line, "ready ", 6)) {
				close(word);
				return 0;
			}
			if (got + 1 < sizeof(line))
				continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		/* its end of the pipe closed, or it ended, without the line */
		close(word);
		sh_proc_wait(&s->store, shoal_now_ns() + 5000000000LL);
		char tail[600] = "";
		FILE *f = fopen(log, "re");
		if (f) {
			size_t n = fread(tail, 1, sizeof(tail) - 1, f);
			tail[n] = 0;
			fclose(f);
		}
		sh_proc_fini(&s->store);
		s->store.pid = 0;
		return snprintf(why, whylen, "the store (shoald) ended at its start: %s", tail), -1;
	}
}

static void local_store_stop(sup *s)
{
	if (s->store.pid <= 0)
		return;
	sh_proc_signal(&s->store, SIGTERM);
	if (sh_proc_wait(&s->store, shoal_now_ns() + 10000000000LL) == SHOAL_ETIMEDOUT)
		sh_proc_kill(&s->store, SHOAL_FOREVER);
	sh_proc_fini(&s->store);
	s->store.pid = 0;
}

/* The supervisor's main: runs until a stop request, SIGTERM or SIGINT. */
static int serve(sup *s, int ready_fd)
{
	char why[8192];
	s->started_ns = shoal_now_ns();
	/* never inherited by engines: start reads until it closes */
	if (ready_fd >= 0)
		fcntl(ready_fd, F_SETFD, FD_CLOEXEC);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	signal(SIGPIPE, SIG_IGN);
	int lfd = control_listen(s->dir);
	int rc = -1;
	if (sfd < 0 || lfd < 0) {
		snprintf(why, sizeof(why), "cannot listen in %s: %s", s->dir, strerror(errno));
		goto out;
	}
	if (s->tcp && make_secret(s, why, sizeof(why)) != 0)
		goto out;
	shoal_controller_opts co;
	shoal_controller_opts_init(&co);
	snprintf(s->ctl_sock, sizeof(s->ctl_sock), "%s/controller.sock", s->dir);
	co.socket = s->ctl_sock;
	co.scheme = s->scheme;
	co.tcp = s->tcp;
	if (s->have_secret) {
		co.secret = s->secret;
		co.secret_len = strlen(s->secret);
	}
	int e = shoal_controller_open(&s->ctl, &co);
	if (e) {
		snprintf(why, sizeof(why), "cannot start the controller%s%s: %s",
			 s->tcp ? " on " : "", s->tcp ? s->tcp : "", shoal_strerror(e));
		goto out;
	}
	if (s->tcp)
		snprintf(s->engine_addr, sizeof(s->engine_addr), "%s",
			 shoal_controller_tcp(s->ctl));
	sup_log(s, "cluster %s: controller on %s%s%s", s->name, s->ctl_sock,
		s->tcp ? " and tcp://" : "", s->tcp ? s->engine_addr : "");
	if (s->stores && s->kind == SHOAL_LAUNCH_LOCAL &&
	    local_store_start(s, why, sizeof(why)) != 0)
		goto out;
	if (sup_launch(s, s->kind, s->n, s->hosts, why, sizeof(why)) != 0 ||
	    sup_wait(s, s->n, 0, s->started_ns + s->timeout_ns, why, sizeof(why)) != 0)
		goto out;
	rc = 0;
	{
		char msg[8192];
		int k = snprintf(
			msg, sizeof(msg),
			"ok %u engines in %.0f ms\nsupervisor: pid %d\ncontroller: %s%s%s\n", s->n,
			(shoal_now_ns() - s->started_ns) / 1e6, (int)getpid(), s->ctl_sock,
			s->tcp ? " and tcp://" : "", s->tcp ? s->engine_addr : "");
		if (s->have_secret && k > 0 && (size_t)k < sizeof(msg))
			k += snprintf(msg + k, sizeof(msg) - (size_t)k, "secret: %s/secret\n",
				      s->dir);
		if (s->store.pid > 0 && k > 0 && (size_t)k < sizeof(msg))
			snprintf(msg + k, sizeof(msg) - (size_t)k, "store: %s\n", s->store_sock);
		else if (s->stores && k > 0 && (size_t)k < sizeof(msg))
			snprintf(msg + k, sizeof(msg) - (size_t)k,
				 "stores: /tmp/shoal-%u-cluster-%s-NODE/store.sock on each node\n",
				 (unsigned)geteuid(), s->name);
		sup_log(s, "%s", msg);
		if (write(ready_fd, msg, strlen(msg)) < 0) {
			/* start went: the cluster runs on, as asked */
		}
		close(ready_fd);
		ready_fd = -1;
	}
	for (;;) {
		/* a request, a signal, or the end of a process a launch started
		 * (a Slurm launch's next ask bounds the wait) */
		struct pollfd p[2 + WAIT_FDS] = {{lfd, POLLIN, 0}, {sfd, POLLIN, 0}};
		int64_t until = SHOAL_FOREVER;
		nfds_t n = 2 + sup_wait_fds(s, p + 2, WAIT_FDS, &until);
		int64_t left = until == SHOAL_FOREVER ? -1 : until - shoal_now_ns();
		poll(p, n, left < 0 ? -1 : (int)(left / 1000000 + 1));
		if (p[1].revents) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) > 0) {
				sup_log(s, "stopping on %s", strsignal((int)si.ssi_signo));
				break;
			}
		}
		if (p[0].revents && sup_answer(s, lfd)) {
			sup_log(s, "stopping, as asked");
			break;
		}
		sup_poll(s);
	}
out:
	if (rc && ready_fd >= 0) {
		char msg[8300];
		snprintf(msg, sizeof(msg), "error: %s\n", why);
		sup_log(s, "%s", msg);
		if (write(ready_fd, msg, strlen(msg)) < 0) {
			/* nobody waits: the log has it */
		}
	}
	if (lfd >= 0)
		close(lfd);
	sup_stop(s);
	local_store_stop(s); /* after its engines */
	for (uint32_t i = 0; i < s->nlaunch; i++)
		sh_launch_free(s->launch[i]);
	shoal_controller_close(s->ctl);
	sh_cluster_cleanup_dir(s->dir);
	if (sfd >= 0)
		close(sfd);
	return rc ? 1 : 0;
}

int sh_cluster_serve(const sh_cluster_cfg *c, int ready_fd)
{
	sup s = {.store.pidfd = -1};
	s.name = c->name;
	s.dir = c->dir;
	s.n = c->n;
	s.kind = c->launcher;
	s.hosts = c->hosts;
	s.ssh = c->ssh;
	s.tcp = c->tcp;
	s.so = c->so;
	s.python = c->python;
	s.pkgdir = c->pkgdir;
	s.scheme = c->scheme;
	s.timeout_ns = c->timeout_ns;
	s.stores = c->stores;
	s.store_size = c->store_size;
	s.store_args = c->store_args;
	return serve(&s, ready_fd);
}

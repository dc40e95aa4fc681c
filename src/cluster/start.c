/* The public calls of clusters (shoal/cluster.h): start makes the
 * cluster's directory (0700) and runs the supervisor (the caller's program
 * for it, else `shoal cluster serve`) with the options as its arguments,
 * then reads its word on a pipe ("ok ..." once the engines registered, or
 * "error: ..."); status, add and stop ask the supervisor on its control
 * socket; supervise is the supervisor's main, reading those arguments back. */
#include "base/proc.h"
#include "cluster/launch.h"
#include "cluster/supervise.h"
#include "shoal_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void shoal_cluster_opts_init(shoal_cluster_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->launcher = SHOAL_LAUNCH_LOCAL;
	o->scheme = SHOAL_SCHEME_LEASTLOAD;
}

/* The cluster's name, checked, and its directory. */
static int where(const char *name, char *dir, size_t len, char *why, size_t whylen)
{
	if (!sh_cluster_name_ok(name))
		return sh_say(
			why, whylen, SHOAL_EINVAL,
			"a cluster's name is 1 to 64 letters, digits, '.', '_' or '-': got '%.80s'",
			name);
	if (sh_cluster_dir(name, dir, len) != 0)
		return sh_say(why, whylen, SHOAL_EACCES,
			      "no safe directory for the cluster's sockets (shoal_socket_dir: the "
			      "log says why)");
	return 0;
}

/* The supervisor's command line: its program, then the options. */
#define SUP_ARGS 48

static int sup_argv(const shoal_cluster_opts *o, const char *name, const char *hosts,
		    const char **a, char bufs[][32], char *exe, size_t exelen)
{
	size_t k = 0;
	if (o->supervisor && o->supervisor[0]) {
		for (; o->supervisor[k] && k < 8; k++)
			a[k] = o->supervisor[k];
	} else {
		a[k++] = sh_program_path("shoal", exe, exelen);
		a[k++] = "cluster";
		a[k++] = "serve";
	}
	snprintf(bufs[0], 32, "%u", o->engines);
	snprintf(bufs[1], 32, "%.3f", o->timeout_s > 0 ? o->timeout_s : 60);
	snprintf(bufs[2], 32, "%d", (int)o->scheme);
	a[k++] = "--name", a[k++] = name;
	a[k++] = "-n", a[k++] = bufs[0];
	a[k++] = "--launcher", a[k++] = shoal_launcher_name(o->launcher);
	a[k++] = "--timeout", a[k++] = bufs[1];
	a[k++] = "--scheme", a[k++] = shoal_scheme_name(o->scheme);
	const char *opt[][2] = {{"--hosts", hosts},
				{"--tcp", o->tcp},
				{"--so", o->so},
				{"--ssh", o->ssh},
				{"--python", o->python},
				{"--pythonpath", o->pythonpath},
				{"--store-size", o->store_size},
				{"--store-args", o->store_args}};
	for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
		if (opt[i][1])
			a[k++] = opt[i][0], a[k++] = opt[i][1];
	if (o->stores)
		a[k++] = "--stores";
	a[k++] = "--ready-fd", a[k++] = "3";
	a[k] = NULL;
	return 0;
}

int shoal_cluster_start(const shoal_cluster_opts *o, shoal_cluster_info *info, char *why,
			size_t whylen)
{
	const char *name = o->name ? o->name : "default";
	if (o->engines == 0 || o->engines > SHOAL_CLUSTER_MAX_ENGINES)
		return sh_say(why, whylen, SHOAL_EINVAL, "engines: expected 1 to %d, got %u",
			      SHOAL_CLUSTER_MAX_ENGINES, o->engines);
	if (o->launcher < SHOAL_LAUNCH_LOCAL || o->launcher > SHOAL_LAUNCH_SLURM)
		return sh_say(why, whylen, SHOAL_EINVAL,
			      "launcher %d: expected local, mpi, ssh or slurm", (int)o->launcher);
	if (o->launcher == SHOAL_LAUNCH_SSH && !o->hosts)
		return sh_say(why, whylen, SHOAL_EINVAL, "the ssh launcher needs hosts (a file)");
	if (o->launcher == SHOAL_LAUNCH_SSH && !o->tcp)
		return sh_say(
			why, whylen, SHOAL_EINVAL,
			"the ssh launcher needs tcp: an address of this host the engines reach");
	if (o->so && access(o->so, R_OK) != 0)
		return sh_say(why, whylen, shoal_errno(), "so %s: %s", o->so, strerror(errno));
	char hosts[PATH_MAX];
	if (o->hosts && !realpath(o->hosts, hosts))
		return sh_say(why, whylen, shoal_errno(), "hosts %s: %s", o->hosts,
			      strerror(errno));
	char dir[PATH_MAX], reply[256];
	int rc = where(name, dir, sizeof(dir), why, whylen);
	if (rc)
		return rc;
	int e = sh_cluster_ask(dir, "status", reply, sizeof(reply), shoal_now_ns() + 2000000000LL);
	if (e == 0 || e == SHOAL_ETIMEDOUT)
		return sh_say(why, whylen, SHOAL_EEXIST,
			      "a cluster named %s is running (shoal cluster stop --name %s)", name,
			      name);
	sh_cluster_cleanup_dir(dir); /* a supervisor's that did not end well */
	if (mkdir(dir, 0700) != 0)
		return sh_say(why, whylen, shoal_errno(), "%s: %s", dir, strerror(errno));
	char logpath[PATH_MAX + 16], exe[PATH_MAX], bufs[3][32];
	snprintf(logpath, sizeof(logpath), "%s/cluster.log", dir);
	const char *a[SUP_ARGS];
	sup_argv(o, name, o->hosts ? hosts : NULL, a, bufs, exe, sizeof(exe));
	/* a session of its own: the caller's end (a terminal's hang-up, a
	 * Ctrl-C to its group) is not the cluster's */
	sh_proc sp;
	int word;
	char spawn_why[PATH_MAX + 64];
	int sr = sh_proc_spawn_daemon(&sp, (char *const *)a, logpath, SH_PROC_SESSION, &word,
				      spawn_why, sizeof(spawn_why));
	if (sr) {
		sh_cluster_cleanup_dir(dir);
		return sh_say(why, whylen, sr, "the supervisor: %s", spawn_why);
	}
	/* it forks the supervisor proper and ends at once: the cluster is
	 * no child of the caller's, which would keep it as a zombie after it
	 * ends (a Python session starting clusters) */
	sh_proc_wait(&sp, SHOAL_FOREVER);
	sh_proc_fini(&sp);
	/* its word: "ok ..." or "error: ..." (EOF: it died; the log says why) */
	static char msg[SH_CLUSTER_REPLY_MAX];
	size_t got = 0;
	ssize_t r;
	while (got + 1 < sizeof(msg) && (r = read(word, msg + got, sizeof(msg) - 1 - got)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		got += (size_t)r;
	}
	close(word);
	msg[got] = 0;
	if (strncmp(msg, "ok ", 3) == 0) {
		if (info) { /* its word says where; the engines are those asked for */
			memset(info, 0, sizeof(*info));
			sh_cluster_info_parse(msg + 3, info);
			info->engines = info->asked = o->engines;
		}
		return 0;
	}
	if (got)
		return sh_say(why, whylen, SHOAL_EIO, "cluster %s did not start: %s", name,
			      strncmp(msg, "error: ", 7) == 0 ? msg + 7 : msg);
	return sh_say(why, whylen, SHOAL_EIO,
		      "the cluster's supervisor (%s) ended without a word (see %s)", a[0], logpath);
}

/* Asks cluster name's supervisor req until wait_s; its answer into reply.
 * A stop's "no such cluster" cleans up what a dead supervisor left. */
static int ask_named(const char *name, const char *req, double wait_s, char *reply, size_t len,
		     char *dir, size_t dirlen, char *why, size_t whylen)
{
	name = name ? name : "default";
	int rc = where(name, dir, dirlen, why, whylen);
	if (rc)
		return rc;
	rc = sh_cluster_ask(dir, req, reply, len, shoal_now_ns() + (int64_t)(wait_s * 1e9));
	if (rc == SHOAL_ENOENT) {
		if (!strcmp(req, "stop"))
			sh_cluster_cleanup_dir(dir); /* nothing runs there: a dead one's files */
		return sh_say(why, whylen, rc, "no cluster named %s here (shoal cluster start)",
			      name);
	}
	if (rc)
		return sh_say(why, whylen, rc, "cluster %s did not answer: %s", name,
			      shoal_strerror(rc));
	if (strncmp(reply, "error: ", 7) == 0) {
		size_t n = strlen(reply);
		if (n && reply[n - 1] == '\n')
			reply[n - 1] = 0;
		return sh_say(why, whylen, SHOAL_EIO, "%s", reply + 7);
	}
	return 0;
}

int shoal_cluster_status(const char *name, shoal_cluster_info *info, char *why, size_t whylen)
{
	static char reply[SH_CLUSTER_REPLY_MAX];
	char dir[PATH_MAX];
	int rc = ask_named(name, "status", 10, reply, sizeof(reply), dir, sizeof(dir), why, whylen);
	if (rc == 0 && info) {
		memset(info, 0, sizeof(*info));
		sh_cluster_info_parse(reply, info);
	}
	return rc;
}

int shoal_cluster_add(const char *name, uint32_t n, shoal_launcher l, const char *hosts,
		      double timeout_s, shoal_cluster_info *info, char *why, size_t whylen)
{
	sh_cluster_req r = {.op = SH_CLUSTER_ADD, .n = n, .launcher = (int)l};
	if (n == 0 || n > SHOAL_CLUSTER_MAX_ENGINES)
		return sh_say(why, whylen, SHOAL_EINVAL, "engines to add: expected 1 to %d, got %u",
			      SHOAL_CLUSTER_MAX_ENGINES, n);
	if (hosts) {
		char abs[PATH_MAX];
		if (!realpath(hosts, abs))
			return sh_say(why, whylen, shoal_errno(), "hosts %s: %s", hosts,
				      strerror(errno));
		if (strlen(abs) >= sizeof(r.hosts))
			return sh_say(why, whylen, SHOAL_EINVAL, "hosts %s: the path is too long",
				      hosts);
		memcpy(r.hosts, abs, strlen(abs) + 1);
	}
	char req[SH_CLUSTER_REQ_MAX + 1], dir[PATH_MAX];
	if (sh_cluster_format_request(&r, req, sizeof(req)) < 0)
		return sh_say(why, whylen, SHOAL_EINVAL,
			      "launcher %d: expected local, mpi, ssh or slurm", (int)l);
	static char reply[SH_CLUSTER_REPLY_MAX];
	/* the supervisor waits for the engines up to its own timeout */
	int rc = ask_named(name, req, (timeout_s > 0 ? timeout_s : 60) + 5, reply, sizeof(reply),
			   dir, sizeof(dir), why, whylen);
	if (rc == 0 && info)
		rc = shoal_cluster_status(name, info, why, whylen);
	return rc;
}

int shoal_cluster_stop(const char *name, double timeout_s, char *why, size_t whylen)
{
	char reply[256], dir[PATH_MAX];
	int rc = ask_named(name, "stop", 10, reply, sizeof(reply), dir, sizeof(dir), why, whylen);
	if (rc)
		return rc;
	/* stopped once its directory is gone, the supervisor's last act:
	 * inotify says when (a watch set after it went fails: gone already) */
	double t = timeout_s > 0 ? timeout_s : 10;
	int64_t deadline = shoal_now_ns() + (int64_t)((t + 5) * 1e9);
	int in = inotify_init1(IN_CLOEXEC);
	if (in >= 0 && inotify_add_watch(in, dir, IN_DELETE_SELF) >= 0) {
		for (int64_t left; (left = deadline - shoal_now_ns()) > 0;) {
			struct pollfd pf = {.fd = in, .events = POLLIN};
			if (poll(&pf, 1, (int)(left / 1000000 + 1)) > 0)
				break; /* IN_DELETE_SELF, or IN_IGNORED after it */
		}
	}
	if (in >= 0)
		close(in);
	struct stat st;
	if (stat(dir, &st) == 0)
		return sh_say(why, whylen, SHOAL_ETIMEDOUT,
			      "cluster %s is still stopping after %.0f s", name ? name : "default",
			      t + 5);
	return 0;
}

/* ---- the supervisor's main ---- */

/* The directory of the shoal package beside this program (build/X/python,
 * or the install's lib/python3.N/dist-packages), for Python engines. */
static const char *package_dir(char *out, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	static const char *const rel[] = {"/../python", "/../lib/python3/dist-packages",
					  "/../lib/python3.11/dist-packages", NULL};
	for (int i = 0; rel[i]; i++) {
		char probe[PATH_MAX + 64];
		snprintf(probe, sizeof(probe), "%s%s/shoal/__init__.py", exe, rel[i]);
		if (access(probe, R_OK) == 0) {
			probe[strlen(probe) - strlen("/shoal/__init__.py")] = 0;
			if (!realpath(probe, out))
				snprintf(out, len, "%s", probe);
			return out;
		}
	}
	return NULL;
}

int shoal_cluster_supervise(int argc, char **argv)
{
	sh_cluster_cfg c = {.launcher = SHOAL_LAUNCH_LOCAL,
			    .scheme = SHOAL_SCHEME_LEASTLOAD,
			    .timeout_ns = 60000000000LL};
	const char *name = "default";
	int ready_fd = -1;
	/* what start gave, as start writes it: never a user's typing */
	for (int i = 0; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(k, "--stores")) {
			c.stores = true;
			continue;
		}
		if (!v || strncmp(k, "-", 1) != 0) {
			fprintf(stderr,
				"shoal cluster supervisor: '%s': expected the options "
				"shoal_cluster_start gives\n",
				k);
			return 2;
		}
		i++;
		if (!strcmp(k, "--name"))
			name = v;
		else if (!strcmp(k, "-n"))
			c.n = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(k, "--launcher"))
			c.launcher = (shoal_launcher)shoal_launcher_parse(v);
		else if (!strcmp(k, "--timeout"))
			c.timeout_ns = (int64_t)(strtod(v, NULL) * 1e9);
		else if (!strcmp(k, "--scheme"))
			c.scheme = (shoal_scheme)shoal_scheme_parse(v);
		else if (!strcmp(k, "--hosts"))
			c.hosts = v;
		else if (!strcmp(k, "--tcp"))
			c.tcp = v;
		else if (!strcmp(k, "--so"))
			c.so = v;
		else if (!strcmp(k, "--ssh"))
			c.ssh = v;
		else if (!strcmp(k, "--python"))
			c.python = v;
		else if (!strcmp(k, "--pythonpath"))
			c.pkgdir = v;
		else if (!strcmp(k, "--store-size"))
			c.store_size = v;
		else if (!strcmp(k, "--store-args"))
			c.store_args = v;
		else if (!strcmp(k, "--ready-fd"))
			ready_fd = atoi(v);
		else {
			fprintf(stderr, "shoal cluster supervisor: unknown option %s\n", k);
			return 2;
		}
	}
	char dir[PATH_MAX], pkg[PATH_MAX];
	if ((int)c.launcher < 0 || (int)c.scheme < 0 || c.n == 0 || c.timeout_ns <= 0 ||
	    !sh_cluster_name_ok(name) || sh_cluster_dir(name, dir, sizeof(dir)) != 0) {
		fprintf(stderr, "shoal cluster supervisor: options out of range\n");
		return 2;
	}
	c.name = name;
	c.dir = dir;
	c.python = c.python ? c.python : "/usr/bin/python3";
	if (!c.pkgdir && !c.so)
		c.pkgdir = package_dir(pkg, sizeof(pkg));
	c.store_size = c.store_size ? c.store_size : "1G";
	/* the supervisor proper is a child of this process, which ends now:
	 * start reaps it, and the cluster is no one's child but init's (or a
	 * subreaper's) */
	if (ready_fd >= 0) {
		pid_t pid = fork();
		if (pid < 0) {
			fprintf(stderr, "shoal cluster supervisor: fork: %s\n", strerror(errno));
			return 1;
		}
		if (pid > 0)
			_exit(0);
	}
	/* who comes and goes: the log is the supervisor's record */
	const char *lv = getenv("SHOAL_LOG");
	if (!lv || !*lv)
		shoal_log_set_level(SHOAL_LOG_INFO);
	return sh_cluster_serve(&c, ready_fd);
}

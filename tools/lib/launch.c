/* The launchers of `shoal cluster` (see launch.h): engines on this host,
 * through mpiexec, through ssh to each host of a hosts file, or as the
 * tasks of one Slurm job. Every process a launch starts leads (or is in)
 * a process group of its own, so a stop reaches what it started even
 * when a launcher forked (mpiexec's daemons, ssh's session). */

#include "lib/launch.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/base.h>

extern char **environ;

#define MAX_UNITS 1024
#define MAX_ARGS 64
#define SLURM_POLL_NS 500000000LL

typedef struct unit {
	pid_t pid;  /* its process; 0: a Slurm job */
	pid_t pgid; /* its process group, which a stop signals */
	int in;	    /* ssh: its standard input, held until the stop */
	int status; /* how it ended (waitpid) */
	bool ended, stopped;
	uint32_t engines;
	char what[160]; /* "ssh node1 (2 engines)" */
	char log[512];	/* its output */
} unit;

struct sh_launch {
	sh_launch_cfg cfg;
	unit *u;
	uint32_t nu;
	/* Slurm */
	char job[32];
	char state[32];
	int64_t next_poll;
	bool failed;
};

/* ---- small things ------------------------------------------------------ */

static void say(char *out, size_t len, const char *fmt, ...) SHOAL_PRINTF(3, 4);
static void say(char *out, size_t len, const char *fmt, ...)
{
	if (!out || !len)
		return;
	size_t o = strlen(out);
	if (o + 1 >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out + o, len - o, fmt, ap);
	va_end(ap);
}

/* s in single quotes for sh: ' becomes '\''. */
static void sq(char *out, size_t len, const char *s)
{
	say(out, len, "'");
	for (; *s; s++)
		if (*s == '\'')
			say(out, len, "'\\''");
		else
			say(out, len, "%c", *s);
	say(out, len, "'");
}

/* The last lines of a launcher's output (at most about 1200 bytes), with
 * what is not printable shown as '?': it goes into messages. */
static void tail_of(const char *path, char *out, size_t len)
{
	out[0] = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[1201];
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > 1200 ? end - 1200 : 0;
	ssize_t n = pread(fd, buf, 1200, from);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	char *p = buf;
	if (from > 0 && (p = strchr(buf, '\n')) != NULL)
		p++;
	else
		p = buf;
	while (*p == '\n')
		p++;
	size_t k = strlen(p);
	while (k && (p[k - 1] == '\n' || p[k - 1] == ' '))
		p[--k] = 0;
	for (size_t i = 0; i < k; i++)
		if (p[i] == '\n')
			p[i] = '|';
		else if (!isprint((unsigned char)p[i]))
			p[i] = '?';
	snprintf(out, len, "%s", p);
}

/* environ less any SHOAL_SECRET*, plus the secret and extra: for engines
 * and their launchers. Freed with free() (one block). */
static char **engine_env(const sh_launch_cfg *c)
{
	size_t n = 0, extra = 0, bytes = 0;
	for (char **e = environ; *e; e++)
		n++;
	for (const char *const *e = c->env; e && *e; e++)
		extra++, bytes += strlen(*e) + 1;
	if (c->secret)
		bytes += strlen(c->secret) + sizeof("SHOAL_SECRET=");
	char **out = malloc((n + extra + 2) * sizeof(char *) + bytes);
	if (!out)
		return NULL;
	char *p = (char *)(out + n + extra + 2);
	size_t k = 0;
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "SHOAL_SECRET", 12) == 0)
			continue;
		bool replaced = false;
		for (const char *const *x = c->env; x && *x && !replaced; x++) {
			const char *eq = strchr(*x, '=');
			replaced = eq && strncmp(*e, *x, (size_t)(eq - *x + 1)) == 0;
		}
		if (!replaced)
			out[k++] = *e;
	}
	for (const char *const *x = c->env; x && *x; x++) {
		strcpy(p, *x);
		out[k++] = p;
		p += strlen(p) + 1;
	}
	if (c->secret) {
		sprintf(p, "SHOAL_SECRET=%s", c->secret);
		out[k++] = p;
	}
	out[k] = NULL;
	return out;
}

/* Starts argv in a process group of its own (pgid 0) or pgid, its input
 * from in (or /dev/null), its output appended to log. */
static int spawn(char *const *argv, char **env, int in, const char *log, pid_t pgid, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	if (in >= 0)
		posix_spawn_file_actions_adddup2(&fa, in, 0);
	else
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	sigset_t none;
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&at, &none);
	sigset_t dfl;
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGTERM);
	sigaddset(&dfl, SIGINT);
	sigaddset(&dfl, SIGHUP);
	sigaddset(&dfl, SIGPIPE);
	sigaddset(&dfl, SIGCHLD);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setpgroup(&at, pgid);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
					      POSIX_SPAWN_SETSIGDEF);
	int rc = posix_spawn(pid, argv[0], &fa, &at, argv, env);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	return -rc;
}

/* Runs argv to its end (at most until deadline, then killed), its
 * standard output into out and its error output into err (each cut to
 * its buffer). Returns the wait status, or -1 (why in err). */
static int run(char *const *argv, char **env, int64_t deadline, char *out, size_t outlen, char *err,
	       size_t errlen)
{
	int po[2], pe[2];
	out[0] = err[0] = 0;
	if (pipe2(po, O_CLOEXEC) != 0)
		return snprintf(err, errlen, "pipe: %s", strerror(errno)), -1;
	if (pipe2(pe, O_CLOEXEC) != 0) {
		close(po[0]), close(po[1]);
		return snprintf(err, errlen, "pipe: %s", strerror(errno)), -1;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	if (rc) {
		close(po[0]), close(pe[0]);
		snprintf(err, errlen, "cannot run %s: %s", argv[0], strerror(rc));
		return -1;
	}
	size_t no = 0, ne = 0;
	struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	int open_fds = 2;
	bool killed = false;
	while (open_fds) {
		int64_t left = (deadline - shoal_now_ns()) / 1000000;
		if (left <= 0) {
			kill(pid, SIGKILL);
			killed = true;
			break;
		}
		if (poll(p, 2, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char *b = i ? err : out;
			size_t *k = i ? &ne : &no;
			size_t cap = i ? errlen : outlen;
			char sink[512];
			ssize_t r = *k + 1 < cap ? read(p[i].fd, b + *k, cap - 1 - *k)
						 : read(p[i].fd, sink, sizeof(sink));
			if (r <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				open_fds--;
			} else if (*k + 1 < cap) {
				*k += (size_t)r;
				b[*k] = 0;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (killed) {
		snprintf(err, errlen, "%s did not answer in time", argv[0]);
		return -1;
	}
	return st;
}

static void strip(char *s)
{
	size_t k = strlen(s);
	while (k && isspace((unsigned char)s[k - 1]))
		s[--k] = 0;
	for (char *p = s; *p; p++)
		if (*p == '\n')
			*p = '|';
		else if (!isprint((unsigned char)*p))
			*p = '?';
}

static void describe_status(int st, char *out, size_t len)
{
	if (WIFEXITED(st))
		snprintf(out, len, "exited %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(out, len, "killed by %s", strsignal(WTERMSIG(st)));
	else
		snprintf(out, len, "ended");
}

static unit *add_unit(sh_launch *l, uint32_t engines, const char *fmt, ...) SHOAL_PRINTF(3, 4);
static unit *add_unit(sh_launch *l, uint32_t engines, const char *fmt, ...)
{
	unit *u = &l->u[l->nu];
	memset(u, 0, sizeof(*u));
	u->in = -1;
	u->engines = engines;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(u->what, sizeof(u->what), fmt, ap);
	va_end(ap);
	snprintf(u->log, sizeof(u->log), "%s/launch-%u.%u.log", l->cfg.dir, l->cfg.id, l->nu);
	l->nu++;
	return u;
}

/* argv + "--name" NAME into a[] (NULL-ended); false when too long. */
static bool with_name(const sh_launch_cfg *c, const char *name, char **a)
{
	size_t k = 0;
	for (; c->argv[k]; k++) {
		if (k + 3 >= MAX_ARGS)
			return false;
		a[k] = (char *)c->argv[k];
	}
	if (name) {
		a[k++] = "--name";
		a[k++] = (char *)name;
	}
	a[k] = NULL;
	return true;
}

/* The engine's command for a shell, each word quoted, then a --name
 * whose value ends in the shell expression tail (unquoted). */
static void shell_command(const sh_launch_cfg *c, const char *name, const char *tail, char *out,
			  size_t len)
{
	for (size_t k = 0; c->argv[k]; k++) {
		sq(out, len, c->argv[k]);
		say(out, len, " ");
	}
	say(out, len, "--name ");
	sq(out, len, name);
	say(out, len, "%s", tail);
}

/* ---- a store on each node --------------------------------------------- */

/* Sets $d and $S (the node's store socket) in a shell; node: a shell
 * word naming the node ("$(hostname)", or a quoted host alias). */
static void store_vars(const sh_launch_cfg *c, const char *node, char *out, size_t len)
{
	say(out, len, "d=/tmp/shoal-$(id -u)-cluster-");
	sq(out, len, c->name);
	say(out, len, "-%s; S=\"$d/store.sock\"; ", node);
}

/* Starts the node's shoald on $S, its directory made ours (a directory of
 * someone else's there is refused: its socket would be theirs); exec: in
 * place of the shell, else in the background. */
static void store_start(const sh_launch_cfg *c, bool exec, char *out, size_t len)
{
	say(out, len,
	    "mkdir -p -m 700 \"$d\" && [ -O \"$d\" ] || { echo \"shoal: $d is not a "
	    "directory of ours\" >&2; exit 98; }; rm -f \"$S\"; %s",
	    exec ? "exec " : "");
	for (size_t k = 0; c->store_argv[k]; k++) {
		sq(out, len, c->store_argv[k]);
		say(out, len, " ");
	}
	say(out, len, "--socket \"$S\"%s", exec ? "" : " </dev/null 3<&- & ");
}

/* Waits (20 s at most) for the node's store to listen. */
static void store_wait(char *out, size_t len)
{
	say(out, len,
	    "n=0; while [ ! -S \"$S\" ] && [ $n -lt 400 ]; do sleep 0.05; "
	    "n=$((n+1)); done; ");
}

/* ---- local ------------------------------------------------------------- */

/* Python engines: one interpreter imports the engine once and forks the
 * others from it, where n python3 starts cost about 45 ms of CPU each. */
static int start_forked(sh_launch *l, char **env, char *why, size_t whylen)
{
	const sh_launch_cfg *c = &l->cfg;
	char n[16], prefix[96];
	snprintf(n, sizeof(n), "%u", c->n);
	snprintf(prefix, sizeof(prefix), "%s.%u.", c->name, c->id);
	char *a[MAX_ARGS * 2];
	size_t k = 0;
	for (; c->fork_argv[k]; k++)
		a[k] = (char *)c->fork_argv[k];
	a[k++] = n;
	a[k++] = prefix;
	/* the engine's arguments: what follows python3 -m shoal.engine */
	for (size_t i = 3; c->argv[i] && k + 1 < MAX_ARGS * 2; i++)
		a[k++] = (char *)c->argv[i];
	a[k] = NULL;
	unit *u = add_unit(l, c->n, "engines %s0..%u (forked from one python3)", prefix, c->n - 1);
	int rc = spawn(a, env, -1, u->log, 0, &u->pid);
	if (rc) {
		l->nu--;
		return snprintf(why, whylen, "cannot run %s: %s", a[0], strerror(-rc)), -1;
	}
	u->pgid = u->pid;
	return 0;
}

static int start_local(sh_launch *l, char **env, char *why, size_t whylen)
{
	if (l->cfg.fork_argv)
		return start_forked(l, env, why, whylen);
	pid_t group = 0;
	for (uint32_t i = 0; i < l->cfg.n; i++) {
		char name[96], *a[MAX_ARGS];
		snprintf(name, sizeof(name), "%s.%u.%u", l->cfg.name, l->cfg.id, i);
		if (!with_name(&l->cfg, name, a))
			return snprintf(why, whylen, "the engine's command is too long"), -1;
		unit *u = add_unit(l, 1, "engine %s", name);
		int rc = spawn(a, env, -1, u->log, group, &u->pid);
		if (rc) {
			snprintf(why, whylen, "cannot run %s: %s", a[0], strerror(-rc));
			l->nu--;
			return -1;
		}
		if (!group)
			group = u->pid;
		u->pgid = group;
	}
	return 0;
}

/* ---- mpi --------------------------------------------------------------- */

static int start_mpi(sh_launch *l, char **env, char *why, size_t whylen)
{
	const char *mpiexec = getenv("SHOAL_MPIEXEC");
	if (!mpiexec || !*mpiexec)
		mpiexec = "mpiexec";
	char prog[512];
	if (!strchr(mpiexec, '/')) {
		/* posix_spawn needs a path: find it as a shell would */
		const char *path = getenv("PATH");
		bool found = false;
		for (const char *p = path ? path : "/usr/bin:/bin"; *p && !found;) {
			const char *colon = strchr(p, ':');
			size_t k = colon ? (size_t)(colon - p) : strlen(p);
			snprintf(prog, sizeof(prog), "%.*s/%s", (int)k, p, mpiexec);
			found = access(prog, X_OK) == 0;
			p += k + (colon ? 1 : 0);
		}
		if (!found)
			return snprintf(why, whylen,
					"mpi: no %s on PATH (Debian: apt install openmpi-bin)",
					mpiexec),
			       -1;
	} else
		snprintf(prog, sizeof(prog), "%s", mpiexec);
	char n[16], script[8192] = "", store[8192] = "", *a[MAX_ARGS * 2];
	snprintf(n, sizeof(n), "%u", l->cfg.n);
	char name[96];
	snprintf(name, sizeof(name), "%s.mpi%u.", l->cfg.name, l->cfg.id);
	const char *rank = "\"${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-$$}}\"";
	if (l->cfg.store_argv) {
		store_vars(&l->cfg, "$(hostname)", store, sizeof(store));
		store_start(&l->cfg, true, store, sizeof(store));
		store_vars(&l->cfg, "$(hostname)", script, sizeof(script));
		store_wait(script, sizeof(script));
	}
	say(script, sizeof(script), "exec ");
	char tail[128];
	snprintf(tail, sizeof(tail), "%s%s", rank, l->cfg.store_argv ? " --store \"$S\"" : "");
	shell_command(&l->cfg, name, tail, script, sizeof(script));
	if (strlen(script) + 1 >= sizeof(script) || strlen(store) + 1 >= sizeof(store))
		return snprintf(why, whylen, "the engine's command is too long"), -1;
	size_t k = 0;
	a[k++] = prog;
	if (geteuid() == 0)
		a[k++] = "--allow-run-as-root";
	a[k++] = "--oversubscribe";
	a[k++] = "-n";
	a[k++] = n;
	if (l->cfg.hosts) {
		a[k++] = "--hostfile";
		a[k++] = (char *)l->cfg.hosts;
	}
	/* by name: the values stay in the environment */
	char names[MAX_ARGS][64];
	size_t nn = 0;
	if (l->cfg.secret) {
		a[k++] = "-x";
		a[k++] = "SHOAL_SECRET";
	}
	for (const char *const *e = l->cfg.env; e && *e && nn < MAX_ARGS / 2; e++) {
		const char *eq = strchr(*e, '=');
		if (!eq || (size_t)(eq - *e) >= sizeof(names[0]))
			continue;
		snprintf(names[nn], sizeof(names[nn]), "%.*s", (int)(eq - *e), *e);
		a[k++] = "-x";
		a[k++] = names[nn++];
	}
	size_t before = k;
	int rc;
	if (l->cfg.store_argv) {
		/* first a store on each node, then the engines, which wait for it */
		char *b[MAX_ARGS * 2];
		size_t j = 0;
		for (size_t i = 0; i < before; i++)
			if (strcmp(a[i], "-n") != 0 && (i == 0 || strcmp(a[i - 1], "-n") != 0))
				b[j++] = a[i];
		b[j++] = "--map-by";
		b[j++] = "ppr:1:node";
		b[j++] = "/bin/sh";
		b[j++] = "-c";
		b[j++] = store;
		b[j] = NULL;
		unit *su = add_unit(l, 0, "mpiexec: a store on each node");
		rc = spawn(b, env, -1, su->log, 0, &su->pid);
		if (rc) {
			l->nu--;
			return snprintf(why, whylen, "cannot run %s: %s", prog, strerror(-rc)), -1;
		}
		su->pgid = su->pid;
	}
	a[k++] = "/bin/sh";
	a[k++] = "-c";
	a[k++] = script;
	a[k] = NULL;
	unit *u = add_unit(l, l->cfg.n, "mpiexec -n %u", l->cfg.n);
	rc = spawn(a, env, -1, u->log, 0, &u->pid);
	if (rc) {
		l->nu--;
		return snprintf(why, whylen, "cannot run %s: %s", prog, strerror(-rc)), -1;
	}
	u->pgid = u->pid;
	return 0;
}

/* ---- ssh --------------------------------------------------------------- */

/* A host name as ssh takes it, never an option ("-oProxyCommand=..."). */
static bool host_ok(const char *h)
{
	if (!*h || *h == '-' || strlen(h) > 255)
		return false;
	for (; *h; h++)
		if (!isalnum((unsigned char)*h) && !strchr(".-_:@[]", *h))
			return false;
	return true;
}

typedef struct host {
	char name[256];
	uint32_t cap; /* 0: as many as given */
	uint32_t n;
} host;

static int read_hosts(const char *path, host **out, uint32_t *nout, char *why, size_t whylen)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return snprintf(why, whylen, "ssh: cannot read the hosts file %s: %s", path,
				strerror(errno)),
		       -1;
	host *h = NULL;
	uint32_t n = 0, cap = 0;
	char line[1024];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char name[256], count[64];
		int k = sscanf(line, "%255s %63s", name, count);
		if (k <= 0)
			continue;
		if (!host_ok(name)) {
			snprintf(why, whylen, "%s:%d: '%.64s' is not a host name", path, lineno,
				 name);
			rc = -1;
			break;
		}
		uint32_t c = 0;
		if (k == 2) {
			const char *v = strncmp(count, "slots=", 6) == 0 ? count + 6 : count;
			char *end;
			unsigned long x = strtoul(v, &end, 10);
			if (*end || !*v || x == 0 || x > 100000) {
				snprintf(why, whylen,
					 "%s:%d: '%.64s': expected a count of engines (N or "
					 "slots=N)",
					 path, lineno, count);
				rc = -1;
				break;
			}
			c = (uint32_t)x;
		}
		if (n == cap) {
			uint32_t nc = cap ? cap * 2 : 8;
			host *nh = nc <= MAX_UNITS ? realloc(h, nc * sizeof(host)) : NULL;
			if (!nh) {
				snprintf(why, whylen, "%s: too many hosts (at most %d)", path,
					 MAX_UNITS);
				rc = -1;
				break;
			}
			h = nh;
			cap = nc;
		}
		snprintf(h[n].name, sizeof(h[n].name), "%s", name);
		h[n].cap = c;
		h[n].n = 0;
		n++;
	}
	fclose(f);
	if (rc == 0 && n == 0) {
		snprintf(why, whylen, "ssh: the hosts file %s names no host", path);
		rc = -1;
	}
	if (rc) {
		free(h);
		return rc;
	}
	*out = h;
	*nout = n;
	return 0;
}

static int split_words(const char *s, char *buf, size_t len, char **a, size_t max)
{
	snprintf(buf, len, "%s", s);
	size_t k = 0;
	for (char *save = NULL, *w = strtok_r(buf, " \t", &save); w;
	     w = strtok_r(NULL, " \t", &save)) {
		if (k + 1 >= max)
			return -1;
		a[k++] = w;
	}
	a[k] = NULL;
	return (int)k;
}

static int start_ssh(sh_launch *l, char **env, char *why, size_t whylen)
{
	if (!l->cfg.hosts)
		return snprintf(why, whylen,
				"ssh: --hosts FILE is required (a host a line, "
				"optionally with its count of engines)"),
		       -1;
	host *h;
	uint32_t nh;
	if (read_hosts(l->cfg.hosts, &h, &nh, why, whylen))
		return -1;
	/* place the engines: hosts with counts take up to them, in order;
	 * hosts without take the rest in turn */
	uint32_t left = l->cfg.n;
	bool any_cap = false;
	for (uint32_t i = 0; i < nh; i++)
		any_cap |= h[i].cap != 0;
	if (any_cap) {
		for (uint32_t i = 0; i < nh && left; i++) {
			uint32_t take = h[i].cap ? (h[i].cap < left ? h[i].cap : left) : 0;
			h[i].n = take;
			left -= take;
		}
	}
	for (uint32_t i = 0; left; i = (i + 1) % nh) {
		if (any_cap && h[i].cap)
			continue;
		if (any_cap) {
			bool open = false;
			for (uint32_t j = 0; j < nh; j++)
				open |= !h[j].cap;
			if (!open)
				break;
		}
		h[i].n++;
		left--;
	}
	if (left) {
		snprintf(why, whylen,
			 "ssh: %u engines asked for, the hosts file %s has room for %u", l->cfg.n,
			 l->cfg.hosts, l->cfg.n - left);
		free(h);
		return -1;
	}
	const char *ssh = l->cfg.ssh ? l->cfg.ssh : getenv("SHOAL_SSH");
	char sshbuf[1024], *sshw[MAX_ARGS];
	int nw = split_words(ssh && *ssh ? ssh : "ssh", sshbuf, sizeof(sshbuf), sshw, MAX_ARGS - 8);
	if (nw <= 0) {
		free(h);
		return snprintf(why, whylen, "ssh: the ssh command is empty or too long"), -1;
	}
	char prog[512];
	if (!strchr(sshw[0], '/')) {
		const char *path = getenv("PATH");
		bool found = false;
		for (const char *p = path ? path : "/usr/bin:/bin"; *p && !found;) {
			const char *colon = strchr(p, ':');
			size_t k = colon ? (size_t)(colon - p) : strlen(p);
			snprintf(prog, sizeof(prog), "%.*s/%s", (int)k, p, sshw[0]);
			found = access(prog, X_OK) == 0;
			p += k + (colon ? 1 : 0);
		}
		if (!found) {
			free(h);
			return snprintf(why, whylen,
					"ssh: no %s on PATH (Debian: apt install openssh-client)",
					sshw[0]),
			       -1;
		}
		sshw[0] = prog;
	}
	int rc = 0;
	for (uint32_t i = 0; i < nh && rc == 0; i++) {
		if (!h[i].n)
			continue;
		/* The secret comes first on its standard input, never in a
		 * command line (which another user of that host could read);
		 * the engines then live until that input closes: our stop, or
		 * this process's end. */
		char script[16384] = "";
		say(script, sizeof(script),
		    "exec 3<&0; IFS= read -r SHOAL_SECRET || exit 97; export SHOAL_SECRET; ");
		for (const char *const *e = l->cfg.env; e && *e; e++) {
			const char *eq = strchr(*e, '=');
			if (!eq)
				continue;
			say(script, sizeof(script), "%.*s=", (int)(eq - *e), *e);
			sq(script, sizeof(script), eq + 1);
			say(script, sizeof(script), "; export %.*s; ", (int)(eq - *e), *e);
		}
		char name[300];
		snprintf(name, sizeof(name), "%s.%s.", l->cfg.name, h[i].name);
		if (l->cfg.store_argv) {
			/* the host's store first, in the same session: it ends with it */
			char node[300] = "";
			sq(node, sizeof(node), h[i].name);
			store_vars(&l->cfg, node, script, sizeof(script));
			store_start(&l->cfg, false, script, sizeof(script));
			store_wait(script, sizeof(script));
		}
		/* the session ends when the engines have (its status the
		 * worst of theirs), or when its input closes (they are ended);
		 * fd 3: sh gives a background job /dev/null for its input */
		say(script, sizeof(script), "pids=; i=0; while [ $i -lt %u ]; do ", h[i].n);
		shell_command(&l->cfg, name,
			      l->cfg.store_argv
				      ? "$i --store \"$S\" </dev/null 3<&- & pids=\"$pids "
					"$!\"; i=$((i+1)); done; "
				      : "$i </dev/null 3<&- & pids=\"$pids $!\"; "
					"i=$((i+1)); done; ",
			      script, sizeof(script));
		say(script, sizeof(script),
		    "{ cat <&3 >/dev/null; kill $pids 2>/dev/null; } & st=0; "
		    "for p in $pids; do wait $p || st=$?; done; trap '' TERM; kill 0; wait; ");
		if (l->cfg.store_argv)
			say(script, sizeof(script), "rm -f \"$S\"; rmdir \"$d\" 2>/dev/null; ");
		say(script, sizeof(script), "exit $st");
		char remote[40000] = "exec sh -c ";
		sq(remote, sizeof(remote), script);
		if (strlen(remote) + 1 >= sizeof(remote)) {
			rc = -1;
			snprintf(why, whylen, "ssh: the engine's command is too long");
			break;
		}
		char *a[MAX_ARGS];
		size_t k = 0;
		for (int w = 0; w < nw; w++)
			a[k++] = sshw[w];
		a[k++] = "-T";
		a[k++] = "-o";
		a[k++] = "BatchMode=yes";
		a[k++] = "--";
		a[k++] = h[i].name;
		a[k++] = remote;
		a[k] = NULL;
		int in[2];
		if (pipe2(in, O_CLOEXEC) != 0) {
			rc = -1;
			snprintf(why, whylen, "pipe: %s", strerror(errno));
			break;
		}
		unit *u = add_unit(l, h[i].n, "ssh %s (%u engine%s)", h[i].name, h[i].n,
				   h[i].n == 1 ? "" : "s");
		/* what runs there, for whoever reads the log (no secret in it) */
		int lf = open(u->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (lf >= 0) {
			dprintf(lf, "# ssh %s: %s\n", h[i].name, remote);
			close(lf);
		}
		int e = spawn(a, env, in[0], u->log, 0, &u->pid);
		close(in[0]);
		if (e) {
			close(in[1]);
			l->nu--;
			rc = -1;
			snprintf(why, whylen, "cannot run %s: %s", a[0], strerror(-e));
			break;
		}
		u->in = in[1];
		u->pgid = u->pid;
		char line[512];
		int len = snprintf(line, sizeof(line), "%s\n", l->cfg.secret ? l->cfg.secret : "");
		/* a pipe takes a line this short at once; ssh reads it when
		 * connected. A host that is gone shows as ssh's end. */
		if (write(u->in, line, (size_t)len) != len) {
			/* ssh ended already: its end is reported by the poll */
		}
	}
	free(h);
	return rc;
}

/* ---- slurm ------------------------------------------------------------- */

static int start_slurm(sh_launch *l, char **env, char *why, size_t whylen)
{
	char wrap[16384] = "", inner[6144] = "";
	char name[96];
	snprintf(name, sizeof(name), "%s.slurm%u.", l->cfg.name, l->cfg.id);
	if (l->cfg.store_argv) {
		/* a step of one task a node for the stores, beside the engines' */
		char store[6144] = "";
		store_vars(&l->cfg, "$(hostname)", store, sizeof(store));
		store_start(&l->cfg, true, store, sizeof(store));
		say(wrap, sizeof(wrap),
		    "srun --overlap -n \"$SLURM_JOB_NUM_NODES\" "
		    "--ntasks-per-node=1 /bin/sh -c ");
		sq(wrap, sizeof(wrap), store);
		say(wrap, sizeof(wrap), " & ");
		store_vars(&l->cfg, "$(hostname)", inner, sizeof(inner));
		store_wait(inner, sizeof(inner));
	}
	say(wrap, sizeof(wrap), "exec srun --overcommit --overlap /bin/sh -c ");
	say(inner, sizeof(inner), "exec ");
	shell_command(&l->cfg, name,
		      l->cfg.store_argv ? "\"$SLURM_PROCID\" --store \"$S\"" : "\"$SLURM_PROCID\"",
		      inner, sizeof(inner));
	sq(wrap, sizeof(wrap), inner);
	if (strlen(wrap) + 1 >= sizeof(wrap))
		return snprintf(why, whylen, "the engine's command is too long"), -1;
	char n[16], jobname[128], out[600];
	snprintf(n, sizeof(n), "%u", l->cfg.n);
	snprintf(jobname, sizeof(jobname), "shoal-%s", l->cfg.name);
	snprintf(out, sizeof(out), "%s/slurm-%%j.log", l->cfg.dir);
	char *a[] = {"sbatch", "--parsable", "--export=ALL", "-J", jobname, "-n", n, "--overcommit",
		     "-o",     out,	     "--wrap",	     wrap, NULL};
	char so[256], se[1024];
	int64_t t = l->cfg.timeout_ns > 0 ? l->cfg.timeout_ns : 30000000000LL;
	int st = run(a, env, shoal_now_ns() + t, so, sizeof(so), se, sizeof(se));
	strip(se);
	if (st < 0)
		return snprintf(why, whylen, "sbatch: %s", se), -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char how[64];
		describe_status(st, how, sizeof(how));
		return snprintf(why, whylen, "sbatch refused the job (%s): %s", how,
				*se ? se : "(it said nothing)"),
		       -1;
	}
	/* "ID" or "ID;CLUSTER" */
	char *end;
	unsigned long id = strtoul(so, &end, 10);
	if (end == so || id == 0)
		return snprintf(why, whylen, "sbatch answered '%.64s', expected a job id", so), -1;
	snprintf(l->job, sizeof(l->job), "%lu", id);
	snprintf(l->state, sizeof(l->state), "PENDING");
	unit *u = add_unit(l, l->cfg.n, "slurm job %s (%u tasks)", l->job, l->cfg.n);
	snprintf(u->log, sizeof(u->log), "%s/slurm-%s.log", l->cfg.dir, l->job);
	return 0;
}

static bool slurm_ended(const char *state)
{
	static const char *const live[] = {"PENDING",	"RUNNING",	"COMPLETING", "CONFIGURING",
					   "SUSPENDED", "REQUEUED",	"RESIZING",   "SIGNALING",
					   "STAGE_OUT", "REQUEUE_HOLD", NULL};
	for (int i = 0; live[i]; i++)
		if (strcmp(state, live[i]) == 0)
			return false;
	return true;
}

/* Asks Slurm how the job is: squeue while it knows it, then scontrol
 * (which keeps finished jobs MinJobAge seconds). reason gets Reason=. */
static void slurm_state(sh_launch *l, char *reason, size_t rlen)
{
	char so[512], se[512];
	char *q[] = {"squeue", "-h", "-j", l->job, "-o", "%T %r", NULL};
	reason[0] = 0;
	int st = run(q, environ, shoal_now_ns() + 10000000000LL, so, sizeof(so), se, sizeof(se));
	char state[32] = "";
	if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
	    sscanf(so, "%31s %255[^\n]", state, reason) >= 1) {
		snprintf(l->state, sizeof(l->state), "%s", state);
		return;
	}
	char *c[] = {"scontrol", "-o", "show", "job", l->job, NULL};
	st = run(c, environ, shoal_now_ns() + 10000000000LL, so, sizeof(so), se, sizeof(se));
	const char *js = strstr(so, "JobState=");
	if (st >= 0 && js && sscanf(js + 9, "%31s", state) == 1) {
		snprintf(l->state, sizeof(l->state), "%s", state);
		const char *r = strstr(so, " Reason=");
		if (r)
			sscanf(r + 8, "%255s", reason);
		return;
	}
	/* Slurm forgot it: it ended long ago */
	if (!slurm_ended(l->state))
		snprintf(l->state, sizeof(l->state), "GONE");
}

/* ---- the launch -------------------------------------------------------- */

int sh_launch_start(sh_launch **out, const sh_launch_cfg *cfg, char *why, size_t whylen)
{
	*out = NULL;
	if (why && whylen)
		why[0] = 0;
	if (!cfg->argv || !cfg->argv[0] || cfg->argv[0][0] != '/' || !cfg->dir || !cfg->name ||
	    cfg->n == 0)
		return snprintf(why, whylen,
				"a launch needs engines, an absolute engine "
				"command, a directory and a name"),
		       SHOAL_EINVAL;
	if (cfg->kind == SH_LAUNCH_SSH && !cfg->secret)
		return snprintf(why, whylen,
				"ssh: engines on other hosts need the controller "
				"on TCP (--tcp HOST:PORT) and its secret"),
		       SHOAL_EINVAL;
	uint32_t units = cfg->kind == SH_LAUNCH_LOCAL ? cfg->n : MAX_UNITS;
	if (units > MAX_UNITS * 64)
		return snprintf(why, whylen, "at most %d local engines at once", MAX_UNITS * 64),
		       SHOAL_EINVAL;
	sh_launch *l = calloc(1, sizeof(*l));
	if (l)
		l->u = calloc(units, sizeof(unit));
	char **env = l && l->u ? engine_env(cfg) : NULL;
	if (!env) {
		if (l)
			free(l->u);
		free(l);
		return snprintf(why, whylen, "out of memory"), SHOAL_ENOMEM;
	}
	l->cfg = *cfg;
	int rc;
	switch (cfg->kind) {
	case SH_LAUNCH_LOCAL:
		rc = start_local(l, env, why, whylen);
		break;
	case SH_LAUNCH_MPI:
		rc = start_mpi(l, env, why, whylen);
		break;
	case SH_LAUNCH_SSH:
		rc = start_ssh(l, env, why, whylen);
		break;
	case SH_LAUNCH_SLURM:
		rc = start_slurm(l, env, why, whylen);
		break;
	default:
		rc = -1;
		snprintf(why, whylen, "no such launcher");
	}
	free(env);
	if (rc) {
		sh_launch_stop(l, shoal_now_ns() + 2000000000LL);
		sh_launch_free(l);
		return SHOAL_EINVAL;
	}
	/* the caller keeps only what it must: the strings it gave stay its */
	*out = l;
	return 0;
}

uint32_t sh_launch_poll(sh_launch *l, char *news, size_t newslen)
{
	uint32_t alive = 0;
	for (uint32_t i = 0; i < l->nu; i++) {
		unit *u = &l->u[i];
		if (u->ended)
			continue;
		if (l->job[0]) {
			int64_t now = shoal_now_ns();
			if (now >= l->next_poll) {
				l->next_poll = now + SLURM_POLL_NS;
				char reason[256];
				slurm_state(l, reason, sizeof(reason));
				if (slurm_ended(l->state)) {
					u->ended = true;
					char tail[1300];
					tail_of(u->log, tail, sizeof(tail));
					if (!u->stopped && strcmp(l->state, "COMPLETED") != 0)
						l->failed = true;
					bool r = *reason && strcmp(reason, "None") != 0;
					say(news, newslen, "%s: %s%s%s%s%s%s\n", u->what, l->state,
					    r ? " (" : "", r ? reason : "", r ? ")" : "",
					    *tail ? "; its output: " : "", tail);
					continue;
				}
			}
			alive++;
			continue;
		}
		int st;
		pid_t r = waitpid(u->pid, &st, WNOHANG);
		if (r == 0) {
			alive++;
			continue;
		}
		u->ended = true;
		u->status = r > 0 ? st : 0;
		if (u->in >= 0) {
			close(u->in);
			u->in = -1;
		}
		if (u->stopped)
			continue;
		if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			l->failed = true;
		char how[64], tail[1300];
		describe_status(u->status, how, sizeof(how));
		tail_of(u->log, tail, sizeof(tail));
		say(news, newslen, "%s: %s%s%s\n", u->what, how, *tail ? "; its output: " : "",
		    tail);
	}
	return alive;
}

void sh_launch_refresh(sh_launch *l)
{
	l->next_poll = 0;
}

void sh_launch_describe(const sh_launch *l, char *out, size_t len)
{
	for (uint32_t i = 0; i < l->nu; i++) {
		const unit *u = &l->u[i];
		if (l->job[0])
			say(out, len, "%s: %s\n", u->what, l->state);
		else if (!u->ended)
			say(out, len, "%s: running (pid %d)\n", u->what, (int)u->pid);
		else {
			char how[64];
			describe_status(u->status, how, sizeof(how));
			say(out, len, "%s: %s\n", u->what, how);
		}
	}
}

bool sh_launch_failed(const sh_launch *l)
{
	return l->failed;
}

void sh_launch_stop(sh_launch *l, int64_t deadline)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < l->nu; i++) {
		unit *u = &l->u[i];
		if (u->ended)
			continue;
		u->stopped = true;
		if (u->in >= 0) {
			/* ssh: the remote side ends its engines on this EOF */
			close(u->in);
			u->in = -1;
		}
		if (l->job[0]) {
			char so[256], se[256];
			char *a[] = {"scancel", l->job, NULL};
			run(a, environ, deadline, so, sizeof(so), se, sizeof(se));
			l->next_poll = 0;
		} else if (u->pgid > 0 && strncmp(u->what, "ssh ", 4) != 0)
			kill(-u->pgid, SIGTERM);
	}
	/* ssh gets a moment to carry the EOF over before it is signalled */
	int64_t ssh_grace = shoal_now_ns() + 2000000000LL;
	bool termed = false;
	for (;;) {
		char news[64];
		news[0] = 0;
		if (sh_launch_poll(l, news, sizeof(news)) == 0)
			return;
		int64_t now = shoal_now_ns();
		if (!termed && (now >= ssh_grace || now >= deadline)) {
			termed = true;
			for (uint32_t i = 0; i < l->nu; i++)
				if (!l->u[i].ended && l->u[i].pgid > 0)
					kill(-l->u[i].pgid, SIGTERM);
		}
		if (now >= deadline)
			break;
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	for (uint32_t i = 0; i < l->nu; i++) {
		unit *u = &l->u[i];
		if (u->ended)
			continue;
		if (l->job[0]) {
			char so[256], se[256];
			char *a[] = {"scancel", "-s", "KILL", l->job, NULL};
			run(a, environ, shoal_now_ns() + 5000000000LL, so, sizeof(so), se,
			    sizeof(se));
			continue;
		}
		kill(-u->pgid, SIGKILL);
		kill(u->pid, SIGKILL);
		int st;
		while (waitpid(u->pid, &st, 0) < 0 && errno == EINTR)
			;
		u->ended = true;
		u->status = st;
	}
}

void sh_launch_free(sh_launch *l)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < l->nu; i++)
		if (l->u[i].in >= 0)
			close(l->u[i].in);
	free(l->u);
	free(l);
}

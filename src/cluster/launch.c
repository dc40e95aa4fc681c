/* The launches of `shoal cluster` (see launch.h): starting, following and
 * stopping a group of engines, the process helpers every launcher uses, and
 * the local launcher; mpiexec, ssh and Slurm are in launch_remote.c. Every
 * process a launch starts leads (or is in) a process group of its own, so a
 * stop reaches what it started even when a launcher forked (mpiexec's
 * daemons, ssh's session). */

#include "cluster/launch_impl.h"

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

/* ---- small things ------------------------------------------------------ */

void sh_ln_say(char *out, size_t len, const char *fmt, ...)
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
void sh_ln_sq(char *out, size_t len, const char *s)
{
	sh_ln_say(out, len, "'");
	for (; *s; s++)
		if (*s == '\'')
			sh_ln_say(out, len, "'\\''");
		else
			sh_ln_say(out, len, "%c", *s);
	sh_ln_say(out, len, "'");
}

/* The last lines of a launcher's output (at most about 1200 bytes), with
 * what is not printable shown as '?': it goes into messages. */
void sh_ln_tail_of(const char *path, char *out, size_t len)
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
char **sh_ln_engine_env(const sh_launch_cfg *c)
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
int sh_ln_spawn(char *const *argv, char **env, int in, const char *log, pid_t pgid, sh_proc *p,
		char *why, size_t whylen)
{
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.env = env;
	o.stdio[0] = in >= 0 ? in : SH_PROC_DEVNULL;
	o.log = log;
	o.detach = SH_PROC_PGROUP;
	o.pgid = pgid;
	o.default_signals = true;
	return sh_proc_spawn(p, &o, why, whylen);
}

/* Runs argv to its end (at most until deadline, then killed), its
 * standard output into out and its error output into err (each cut to
 * its buffer). Returns the wait status, or -1 (why in err). */
int sh_ln_run(char *const *argv, char **env, int64_t deadline, char *out, size_t outlen, char *err,
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
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.env = env;
	o.stdio[0] = SH_PROC_DEVNULL;
	o.stdio[1] = po[1];
	o.stdio[2] = pe[1];
	sh_proc pr;
	int rc = sh_proc_spawn(&pr, &o, err, errlen);
	close(po[1]);
	close(pe[1]);
	if (rc) {
		close(po[0]), close(pe[0]);
		return -1;
	}
	size_t no = 0, ne = 0;
	struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	int open_fds = 2;
	bool killed = false;
	while (open_fds) {
		int64_t left = (deadline - shoal_now_ns()) / 1000000;
		if (left <= 0) {
			sh_proc_signal(&pr, SIGKILL);
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
	sh_proc_wait(&pr, SHOAL_FOREVER);
	sh_proc_fini(&pr);
	if (killed) {
		snprintf(err, errlen, "%s did not answer in time", argv[0]);
		return -1;
	}
	return pr.status;
}

void sh_ln_strip(char *s)
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

void sh_ln_describe_status(int st, char *out, size_t len)
{
	if (WIFEXITED(st))
		snprintf(out, len, "exited %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(out, len, "killed by %s", strsignal(WTERMSIG(st)));
	else
		snprintf(out, len, "ended");
}

unit *sh_ln_add_unit(sh_launch *l, uint32_t engines, const char *fmt, ...)
{
	unit *u = &l->u[l->nu];
	memset(u, 0, sizeof(*u));
	u->in = -1;
	u->proc.pidfd = -1;
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
bool sh_ln_with_name(const sh_launch_cfg *c, const char *name, char **a)
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
void sh_ln_shell_command(const sh_launch_cfg *c, const char *name, const char *tail, char *out,
			 size_t len)
{
	for (size_t k = 0; c->argv[k]; k++) {
		sh_ln_sq(out, len, c->argv[k]);
		sh_ln_say(out, len, " ");
	}
	sh_ln_say(out, len, "--name ");
	sh_ln_sq(out, len, name);
	sh_ln_say(out, len, "%s", tail);
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
	unit *u = sh_ln_add_unit(l, c->n, "engines %s0..%u (forked from one python3)", prefix,
				 c->n - 1);
	if (sh_ln_spawn(a, env, -1, u->log, 0, &u->proc, why, whylen) != 0) {
		l->nu--;
		return -1;
	}
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
		if (!sh_ln_with_name(&l->cfg, name, a))
			return snprintf(why, whylen, "the engine's command is too long"), -1;
		unit *u = sh_ln_add_unit(l, 1, "engine %s", name);
		if (sh_ln_spawn(a, env, -1, u->log, group, &u->proc, why, whylen) != 0) {
			l->nu--;
			return -1;
		}
		group = u->proc.pgid;
	}
	return 0;
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
	if (cfg->kind == SHOAL_LAUNCH_SSH && !cfg->secret)
		return snprintf(why, whylen,
				"ssh: engines on other hosts need the controller "
				"on TCP (--tcp HOST:PORT) and its secret"),
		       SHOAL_EINVAL;
	uint32_t units = cfg->kind == SHOAL_LAUNCH_LOCAL ? cfg->n : MAX_UNITS;
	if (units > MAX_UNITS * 64)
		return snprintf(why, whylen, "at most %d local engines at once", MAX_UNITS * 64),
		       SHOAL_EINVAL;
	sh_launch *l = calloc(1, sizeof(*l));
	if (l)
		l->u = calloc(units, sizeof(unit));
	char **env = l && l->u ? sh_ln_engine_env(cfg) : NULL;
	if (!env) {
		if (l)
			free(l->u);
		free(l);
		return snprintf(why, whylen, "out of memory"), SHOAL_ENOMEM;
	}
	l->cfg = *cfg;
	int rc;
	switch (cfg->kind) {
	case SHOAL_LAUNCH_LOCAL:
		rc = start_local(l, env, why, whylen);
		break;
	case SHOAL_LAUNCH_MPI:
		rc = sh_ln_start_mpi(l, env, why, whylen);
		break;
	case SHOAL_LAUNCH_SSH:
		rc = sh_ln_start_ssh(l, env, why, whylen);
		break;
	case SHOAL_LAUNCH_SLURM:
		rc = sh_ln_start_slurm(l, env, why, whylen);
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
				sh_ln_slurm_state(l, reason, sizeof(reason));
				if (sh_ln_slurm_ended(l->state)) {
					u->ended = true;
					char tail[1300];
					sh_ln_tail_of(u->log, tail, sizeof(tail));
					if (!u->stopped && strcmp(l->state, "COMPLETED") != 0)
						l->failed = true;
					bool r = *reason && strcmp(reason, "None") != 0;
					sh_ln_say(news, newslen, "%s: %s%s%s%s%s%s\n", u->what,
						  l->state, r ? " (" : "", r ? reason : "",
						  r ? ")" : "", *tail ? "; its output: " : "",
						  tail);
					continue;
				}
			}
			alive++;
			continue;
		}
		int rc = sh_proc_reap(&u->proc);
		if (rc == SHOAL_EAGAIN) {
			alive++;
			continue;
		}
		u->ended = true;
		u->status = rc == 0 ? u->proc.status : 0;
		int st = u->status;
		if (u->in >= 0) {
			close(u->in);
			u->in = -1;
		}
		if (u->stopped)
			continue;
		if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			l->failed = true;
		char how[64], tail[1300];
		sh_ln_describe_status(u->status, how, sizeof(how));
		sh_ln_tail_of(u->log, tail, sizeof(tail));
		sh_ln_say(news, newslen, "%s: %s%s%s\n", u->what, how,
			  *tail ? "; its output: " : "", tail);
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
			sh_ln_say(out, len, "%s: %s\n", u->what, l->state);
		else if (!u->ended)
			sh_ln_say(out, len, "%s: running (pid %d)\n", u->what, (int)u->proc.pid);
		else {
			char how[64];
			sh_ln_describe_status(u->status, how, sizeof(how));
			sh_ln_say(out, len, "%s: %s\n", u->what, how);
		}
	}
}

bool sh_launch_failed(const sh_launch *l)
{
	return l->failed;
}

uint32_t sh_launch_wait_fds(const sh_launch *l, struct pollfd *p, uint32_t max, int64_t *until)
{
	/* a Slurm job has no process here: its state is asked for again at
	 * next_poll */
	if (l->job[0] && l->next_poll < *until)
		*until = l->next_poll;
	uint32_t n = 0;
	for (uint32_t i = 0; i < l->nu && n < max; i++)
		if (!l->u[i].ended && l->u[i].proc.pidfd >= 0)
			p[n++] = (struct pollfd){.fd = l->u[i].proc.pidfd, .events = POLLIN};
	return n;
}

/* Waits until one of l's processes ends or until. */
static void wait_units(sh_launch *l, int64_t until)
{
	struct pollfd p[MAX_UNITS];
	nfds_t n = sh_launch_wait_fds(l, p, MAX_UNITS, &until);
	int64_t left = until - shoal_now_ns();
	if (left > 0)
		poll(p, n, (int)(left / 1000000 + 1));
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
			sh_ln_run(a, environ, deadline, so, sizeof(so), se, sizeof(se));
			l->next_poll = 0;
		} else if (u->proc.pgid > 0 && strncmp(u->what, "ssh ", 4) != 0)
			sh_proc_signal(&u->proc, SIGTERM);
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
				if (!l->u[i].ended && l->u[i].proc.pgid > 0)
					sh_proc_signal(&l->u[i].proc, SIGTERM);
		}
		if (now >= deadline)
			break;
		wait_units(l, termed ? deadline : ssh_grace < deadline ? ssh_grace : deadline);
	}
	for (uint32_t i = 0; i < l->nu; i++) {
		unit *u = &l->u[i];
		if (u->ended)
			continue;
		if (l->job[0]) {
			char so[256], se[256];
			char *a[] = {"scancel", "-s", "KILL", l->job, NULL};
			sh_ln_run(a, environ, shoal_now_ns() + 5000000000LL, so, sizeof(so), se,
				  sizeof(se));
			continue;
		}
		sh_proc_kill(&u->proc, SHOAL_FOREVER);
		u->ended = true;
		u->status = u->proc.status;
	}
}

void sh_launch_free(sh_launch *l)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < l->nu; i++) {
		if (l->u[i].in >= 0)
			close(l->u[i].in);
		sh_proc_fini(&l->u[i].proc);
	}
	free(l->u);
	free(l);
}

/* Child processes (proc.h): posix_spawn with the descriptors, group and
 * signals asked for, a pidfd for each child, PATH lookup, signals and
 * reaping. */
#include "base/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void sh_proc_opts_init(sh_proc_opts *o, char *const *argv)
{
	*o = (sh_proc_opts){.argv = argv,
			    .stdio = {SH_PROC_INHERIT, SH_PROC_INHERIT, SH_PROC_INHERIT}};
}

int sh_proc_find(const char *name, char *out, size_t len)
{
	if (strchr(name, '/')) {
		snprintf(out, len, "%s", name);
		return access(out, X_OK) == 0 ? 0 : SHOAL_ENOENT;
	}
	const char *path = getenv("PATH");
	for (const char *p = path && *path ? path : "/usr/bin:/bin"; *p;) {
		const char *colon = strchr(p, ':');
		size_t k = colon ? (size_t)(colon - p) : strlen(p);
		/* an empty entry is the current directory, as for a shell */
		int n = snprintf(out, len, "%.*s%s%s", (int)k, p, k ? "/" : "", name);
		if (n > 0 && (size_t)n < len && access(out, X_OK) == 0)
			return 0;
		p += k + (colon ? 1 : 0);
	}
	return SHOAL_ENOENT;
}

static int stdio_action(posix_spawn_file_actions_t *fa, int ours, int child)
{
	if (ours == SH_PROC_INHERIT)
		return 0;
	if (ours == SH_PROC_DEVNULL)
		return posix_spawn_file_actions_addopen(fa, child, "/dev/null",
							child ? O_WRONLY : O_RDONLY, 0);
	return posix_spawn_file_actions_adddup2(fa, ours, child);
}

int sh_proc_spawn(sh_proc *p, const sh_proc_opts *o, char *why, size_t whylen)
{
	*p = (sh_proc){.pidfd = -1};
	if (!o->argv || !o->argv[0] || o->nfds > SH_PROC_FDS) {
		snprintf(why, whylen, "no program to run");
		return SHOAL_EINVAL;
	}
	char path[PATH_MAX];
	if (sh_proc_find(o->argv[0], path, sizeof(path)) != 0) {
		snprintf(why, whylen, "cannot run %s: %s", o->argv[0],
			 strchr(o->argv[0], '/') ? "it is not an executable file"
						 : "it is in no directory of PATH");
		return SHOAL_ENOENT;
	}
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	int rc = 0;
	for (int i = 0; i < 3 && !rc; i++)
		if (!(o->log && i > 0))
			rc = stdio_action(&fa, o->stdio[i], i);
	if (!rc && o->log) {
		rc = posix_spawn_file_actions_addopen(&fa, 1, o->log, O_WRONLY | O_CREAT | O_APPEND,
						      0600);
		if (!rc)
			rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
	}
	for (unsigned i = 0; i < o->nfds && !rc; i++)
		rc = posix_spawn_file_actions_adddup2(&fa, o->from[i], o->to[i]);
	if (!rc && o->cwd)
		rc = posix_spawn_file_actions_addchdir_np(&fa, o->cwd);
	short flags = 0;
	if (!rc && o->detach == SH_PROC_PGROUP) {
		rc = posix_spawnattr_setpgroup(&at, o->pgid);
		flags |= POSIX_SPAWN_SETPGROUP;
	} else if (o->detach == SH_PROC_SESSION) {
		flags |= POSIX_SPAWN_SETSID;
	}
	if (!rc && o->default_signals) {
		sigset_t none, dfl;
		sigemptyset(&none);
		sigemptyset(&dfl);
		int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD};
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			sigaddset(&dfl, sigs[i]);
		posix_spawnattr_setsigmask(&at, &none);
		posix_spawnattr_setsigdefault(&at, &dfl);
		flags |= POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
	}
	if (!rc)
		rc = posix_spawnattr_setflags(&at, flags);
	if (!rc)
		rc = posix_spawn(&p->pid, path, &fa, &at, o->argv, o->env ? o->env : environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		p->pid = 0;
		snprintf(why, whylen, "cannot run %s: %s", path, strerror(rc));
		return -rc;
	}
	if (o->detach != SH_PROC_SAME)
		p->pgid = o->detach == SH_PROC_PGROUP && o->pgid ? o->pgid : p->pid;
	/* the child is ours and unreaped: its pid cannot be another's yet */
	p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	return 0;
}

int sh_proc_spawn_daemon(sh_proc *p, char *const *argv, const char *log, sh_proc_detach detach,
			 int *ready, char *why, size_t whylen)
{
	int fds[2];
	*p = (sh_proc){.pidfd = -1};
	if (pipe2(fds, O_CLOEXEC) != 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "a pipe for %s's word: %s", argv[0], strerror(errno));
		return rc;
	}
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.stdio[0] = SH_PROC_DEVNULL;
	o.log = log;
	o.from[0] = fds[1];
	o.to[0] = 3;
	o.nfds = 1;
	o.detach = detach;
	int rc = sh_proc_spawn(p, &o, why, whylen);
	close(fds[1]);
	if (rc) {
		close(fds[0]);
		return rc;
	}
	*ready = fds[0];
	return 0;
}

int sh_proc_signal(const sh_proc *p, int sig)
{
	if (p->pid <= 0 || p->reaped)
		return -ESRCH;
	if (p->pgid > 0)
		return kill(-p->pgid, sig) == 0 ? 0 : shoal_errno();
	if (p->pidfd >= 0)
		return syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0) == 0 ? 0
										   : shoal_errno();
	return kill(p->pid, sig) == 0 ? 0 : shoal_errno();
}

int sh_proc_reap(sh_proc *p)
{
	if (p->reaped)
		return 0;
	if (p->pid <= 0)
		return -ESRCH;
	int st;
	pid_t r;
	while ((r = waitpid(p->pid, &st, WNOHANG)) < 0 && errno == EINTR)
		;
	if (r == 0)
		return SHOAL_EAGAIN;
	if (r < 0)
		return shoal_errno(); /* ECHILD: someone else reaped it */
	p->status = st;
	p->reaped = true;
	return 0;
}

int sh_proc_wait(sh_proc *p, int64_t deadline)
{
	for (;;) {
		int rc = sh_proc_reap(p);
		if (rc != SHOAL_EAGAIN)
			return rc;
		int64_t left = deadline == SHOAL_FOREVER ? -1 : deadline - shoal_now_ns();
		if (deadline != SHOAL_FOREVER && left <= 0)
			return SHOAL_ETIMEDOUT;
		int ms = left < 0 ? -1
				  : (int)(left / 1000000 + 1 > 3600000 ? 3600000
								       : left / 1000000 + 1);
		if (p->pidfd >= 0) {
			struct pollfd pf = {.fd = p->pidfd, .events = POLLIN};
			poll(&pf, 1, ms);
		} else {
			/* no pidfd (before Linux 5.3): nothing to wait on but time */
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
	}
}

int sh_proc_kill(sh_proc *p, int64_t deadline)
{
	sh_proc_signal(p, SIGKILL);
	return sh_proc_wait(p, deadline);
}

void sh_proc_fini(sh_proc *p)
{
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
}

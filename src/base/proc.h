/* Child processes: the one way the library starts a program (an extension
 * runner, a task engine, a store, a supervisor, a launcher's ssh or srun),
 * finds it in PATH, signals it or its process group, and reaps it. Every
 * child gets exactly the descriptors named here (everything of ours is
 * close-on-exec), the environment it is given, and a pidfd, so that a
 * wait is a wait on an event and a signal never reaches a recycled pid. */
#ifndef SHOAL_BASE_PROC_H
#define SHOAL_BASE_PROC_H

#include "shoal_impl.h"

#include <sys/types.h>

#define SH_PROC_FDS 8

/* A child's standard descriptor: one of ours, or these. */
enum { SH_PROC_INHERIT = -1, SH_PROC_DEVNULL = -2 };

/* Where the child runs: in our process group, in a group of its own (or
 * pgid's), or in a session of its own (a terminal's hang-up or Ctrl-C to
 * our group is not its). */
typedef enum { SH_PROC_SAME = 0, SH_PROC_PGROUP, SH_PROC_SESSION } sh_proc_detach;

typedef struct sh_proc_opts {
	char *const *argv; /* argv[0]: a path, or a name looked up in PATH */
	char *const *env;  /* NULL: ours */
	const char *cwd;   /* NULL: ours */
	int stdio[3];	   /* sh_proc_opts_init: all SH_PROC_INHERIT */
	const char *log;   /* if set: stdout and stderr appended to it (made 0600) */
	/* more descriptors: ours from[i] is the child's to[i] (to >= 3) */
	int from[SH_PROC_FDS], to[SH_PROC_FDS];
	unsigned nfds;
	sh_proc_detach detach;
	pid_t pgid; /* SH_PROC_PGROUP: the group to join, 0 a new one */
	/* the signal mask emptied and SIGTERM, SIGINT, SIGHUP, SIGPIPE and
	 * SIGCHLD at their defaults (a daemon's child that must die of them) */
	bool default_signals;
} sh_proc_opts;

typedef struct sh_proc {
	pid_t pid;  /* 0: none */
	int pidfd;  /* -1: none (a kernel without pidfds) */
	pid_t pgid; /* the group it leads, when it leads one, else 0 */
	int status; /* its wait status once reaped */
	bool reaped;
} sh_proc;

void sh_proc_opts_init(sh_proc_opts *o, char *const *argv);

/* Starts the program. 0, or a negative SHOAL_E* with why ("cannot run
 * PROG: ..."). */
int sh_proc_spawn(sh_proc *p, const sh_proc_opts *o, char *why, size_t whylen);

/* Starts a daemon that says when it is ready on its descriptor 3 (shoald
 * --ready-fd 3, a cluster's supervisor): its input /dev/null, its output
 * appended to log, in detach's group; *ready gets our end of that pipe
 * (close-on-exec), which reads its word, then EOF once it closes its end
 * or ends. 0, or a negative SHOAL_E* with why. */
int sh_proc_spawn_daemon(sh_proc *p, char *const *argv, const char *log, sh_proc_detach detach,
			 int *ready, char *why, size_t whylen);

/* name's path as a shell would find it ($PATH, else /usr/bin:/bin); a
 * name with a slash is taken as it is. 0, or SHOAL_ENOENT when there is
 * no such executable. */
int sh_proc_find(const char *name, char *out, size_t len);

/* Sends sig to the child, or to its whole group when it was put in one
 * (the tree it started, and the group's other members). The child alone
 * through its pidfd: never to a recycled pid. SHOAL_ESRCH-like -ESRCH
 * once it is reaped. */
int sh_proc_signal(const sh_proc *p, int sig);

/* Reaps the child if it has ended: 0 (p->status holds how), or
 * SHOAL_EAGAIN while it runs. */
int sh_proc_reap(sh_proc *p);

/* Waits until the child ends and reaps it. Blocks the thread until
 * deadline (SHOAL_ETIMEDOUT). A fiber waits on p->pidfd in the poller
 * (shoal_fd_wait) and then calls sh_proc_reap. */
int sh_proc_wait(sh_proc *p, int64_t deadline);

/* SIGKILL to the child (its group), then waits until deadline. Blocks. */
int sh_proc_kill(sh_proc *p, int64_t deadline);

/* Closes the pidfd; a child not yet reaped is left to whoever reaps. */
void sh_proc_fini(sh_proc *p);

#endif

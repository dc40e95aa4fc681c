/* What the files of the extension host share: the handle (struct
 * shoal_ext) and the functions that cross them. ext_host.c is the handle
 * (open, turns, kill, stop, last error), ext_spawn.c starts its child,
 * ext_call.c makes calls, services.c serves the extension's calls back
 * and sandbox.c holds the child's cgroup. */
#ifndef SHOAL_RPC_EXT_HOST_H
#define SHOAL_RPC_EXT_HOST_H

#include "ring/msg.h"
#include "ring/ring.h"
#include "rpc/ext_proto.h"
#include "shm/shm.h"

#include <shoal/ext.h>

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

/* Carries an extension's stdout and stderr into our log (log_output): a
 * thread reads the two pipes and logs each line with the extension's
 * name. Its output is the extension's, so hostile: lines are cut at
 * PUMP_LINE bytes and control bytes are replaced. */
#define PUMP_LINE 2048
typedef struct sh_ext_waiter sh_ext_waiter;

typedef struct pump {
	int fd[2]; /* read ends: stdout, stderr */
	char name[128];
	char buf[2][PUMP_LINE];
	size_t len[2];
	int stop_fd; /* an eventfd rung when the child is gone: drain what is
		      * there and end */
	pthread_t thread;
} pump;

struct shoal_ext {
	shoal_ext_config cfg;
	pump *pump; /* log_output: the thread that logs its output */
	char *path, *name, *runner, *cwd, *libpath, *store_path; /* owned copies */
	char *rargs[SHOAL_EXT_RUNNER_ARGS_MAX + 1];		 /* owned copies, NULL-terminated */
	shoal_client *store;					 /* shared payloads go through it */
	char **env;
	size_t nenv;
	pid_t pid;
	int pidfd, sock, efd, efd_w; /* efd_w: the doorbell's write end */
	void *rings;
	size_t ring_bytes;
	sh_ring req, rep;
	uint32_t seq, starts;
	bool dead;		      /* the child is gone (or must go): restart before a call */
	struct shoal_future *pending; /* calls in flight, oldest first */
	_Atomic uint32_t *cancel;     /* shared: the call asked to give up */
	sh_wbuf out;
	unsigned char *in;
	size_t in_cap;
	sh_oob oob;	      /* where the frame just read puts its payloads */
	pthread_mutex_t lock; /* guards who is inside: owner, holder, depth */
	pthread_cond_t turn;
	pthread_t owner;	/* the thread inside (when depth > 0) */
	shoal_fiber *holder;	/* the fiber inside, when a fiber is */
	uint32_t depth;		/* how deep it is inside (nested calls) */
	sh_ext_waiter *waiters; /* fibers waiting for their turn, first first */
	char cg[256];		/* its memory cgroup's directory ("": none) */
	bool cg_v2;		/* in the unified hierarchy (else v1's memory one) */
	bool oom_killed;	/* the last child was killed for its memory limit */
};

/* ---- ext_host.c: the handle ---- */

/* An owned copy of s (NULL for NULL), freed with sh_ext_free_str. */
char *sh_ext_dup(const char *s);
void sh_ext_free_str(char *s);
/* Describes how a child ended: "killed by SIGSEGV", "exited with status 3". */
void sh_ext_describe(int st, char *buf, size_t len);
/* Tears the current child down: kill (if kill_it), reap, close everything
 * of it; *status (may be NULL) gets its wait status. */
void sh_ext_reap(shoal_ext *e, bool kill_it, int *status);
/* Entering and leaving e: one caller at a time, the same one may nest. */
void sh_ext_enter(shoal_ext *e);
void sh_ext_leave(shoal_ext *e);

/* ---- ext_spawn.c: starting the child ---- */

/* The child's environment, from ours and the config's (at the open). */
int sh_ext_build_env(shoal_ext *e);
/* One more entry in it (sh_ext_build_env left room). */
int sh_ext_env_add(shoal_ext *e, const char *entry);
/* Starts a child (rings, doorbell, runner); on failure it is torn down. */
int sh_ext_spawn(shoal_ext *e);
/* Waits for its ready message: the init's result, or the child's death. */
int sh_ext_await_ready(shoal_ext *e);
/* Ends the thread that logs the child's output, once its last lines are in. */
void sh_ext_pump_stop(shoal_ext *e);

/* ---- ext_call.c: calls ---- */

/* Frees the calls in flight that nobody waited for (at the stop). */
void sh_ext_drop_pending(shoal_ext *e);

/* ---- services.c: the host's services ---- */

/* Serves the extension's call in e->in (frame f) and sends its return. */
int sh_ext_serve(shoal_ext *e, const sh_frame *f, int64_t deadline);

/* ---- sandbox.c: the child's cgroup, the host's side of the sandbox ---- */

/* Makes e's cgroup, with memory limited to cfg.mem_max if set; why says
 * what failed. */
int sh_sb_cgroup_make(shoal_ext *e, char *why, size_t whylen);
/* Kills every process in e's cgroup. */
void sh_sb_cgroup_kill(shoal_ext *e);
/* After the child is reaped: was it the OOM killer; the cgroup goes. */
void sh_sb_cgroup_done(shoal_ext *e);

#endif

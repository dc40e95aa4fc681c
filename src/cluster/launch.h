/* Launchers: how `shoal cluster` starts engines through what a cluster
 * already runs (this host's processes, mpiexec, ssh, a Slurm job), follows
 * them and ends them. A launch is one group of engines started at once; it
 * is made of units (a local engine, the python3 that forks a host's Python
 * engines, one mpiexec, one ssh per host, one Slurm job) whose ends it
 * reports in the launcher's own words. The shared secret reaches engines
 * through their environment or ssh's standard input, never a command
 * line. */
#ifndef SHOAL_CLUSTER_LAUNCH_H
#define SHOAL_CLUSTER_LAUNCH_H

#include <shoal/cluster.h>

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "local", "mpi", "ssh", "slurm", NULL: shoal_launcher's names, in its
 * order (for sh_cli_choice). */
extern const char *const sh_launcher_names[];

typedef struct sh_launch_cfg {
	shoal_launcher kind;
	uint32_t n; /* engines */
	/* An engine's command line (its program an absolute path); each
	 * engine gets "--name NAME" after it where the launcher can say one. */
	const char *const *argv;
	const char *secret;	/* SHOAL_SECRET for the engines, or NULL */
	const char *const *env; /* more NAME=VALUE for the engines (NULL-ended), or NULL */
	const char *hosts;	/* ssh: the hosts file (required); mpi: --hostfile */
	const char *ssh;	/* ssh's command ("ssh -F FILE"): NULL: $SHOAL_SSH, else ssh */
	const char *dir;	/* the cluster's directory: the launchers' logs go there */
	const char *name;	/* the cluster's: in job and engine names */
	uint32_t id;		/* this launch's number in the cluster (logs, names) */
	int64_t timeout_ns;	/* bound on a submission (sbatch) */
	/* local: one process that starts the n engines itself (forks them from
	 * one interpreter), given "N PREFIX" and the engine's arguments after
	 * these words; NULL: n processes of argv. */
	const char *const *fork_argv;
	/* mpi, ssh, slurm: a store on each node for its engines (--store):
	 * shoald's absolute path and options but --socket, or NULL. Its
	 * socket: /tmp/shoal-UID-cluster-NAME-NODE/store.sock there. */
	const char *const *store_argv;
} sh_launch_cfg;

typedef struct sh_launch sh_launch;

/* Starts the engines; a Slurm launch submits its job (blocks for sbatch,
 * at most cfg->timeout_ns). On failure *out is NULL and why says what the
 * launcher said. */
int sh_launch_start(sh_launch **out, const sh_launch_cfg *cfg, char *why, size_t whylen);
/* Looks at its units without blocking long (a Slurm launch asks squeue at
 * most twice a second). Returns how many units are still running; what
 * ended since the last look (and how) is appended to news, one line each,
 * in the launcher's own words with the tail of its output. */
uint32_t sh_launch_poll(sh_launch *l, char *news, size_t newslen);
/* What says when to poll l next: the pidfds of its processes still running
 * (into p, at most max; their count is returned), and, for a launcher with
 * no process here (Slurm), *until lowered to its next ask. A waiter polls
 * these with its own descriptors, then calls sh_launch_poll. */
uint32_t sh_launch_wait_fds(const sh_launch *l, struct pollfd *p, uint32_t max, int64_t *until);
/* The next poll asks the launcher (Slurm) at once: for a status. */
void sh_launch_refresh(sh_launch *l);
/* Appends a line per unit: what it is and how it is doing. */
void sh_launch_describe(const sh_launch *l, char *out, size_t len);
/* True when some unit ended other than by our stop (failed, cancelled). */
bool sh_launch_failed(const sh_launch *l);
/* Ends every process it started, wherever: ssh's input closed, SIGTERM to
 * the process groups, scancel; what is left at deadline is killed
 * (SIGKILL, scancel -s KILL). Blocks until then. */
void sh_launch_stop(sh_launch *l, int64_t deadline);
void sh_launch_free(sh_launch *l);

#endif

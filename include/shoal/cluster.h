/* Clusters of the task farm: a controller and its engines started
 * through a launcher (processes of this host, mpiexec, ssh to each host,
 * one Slurm job), kept by a supervisor process of their own that outlives
 * the caller until the cluster is stopped, and ends every process it
 * started, wherever. `shoal cluster` and Python's shoal.tasks.Cluster are
 * both these calls. A cluster lives in a directory of its own (0700, in
 * shoal_socket_dir()), found by its name; its supervisor answers on a
 * socket there, to processes of its user (or root) only.
 *
 * Each call fills why (whylen bytes, may be NULL) with what went wrong in
 * a user's words when it fails. */
#ifndef SHOAL_CLUSTER_H
#define SHOAL_CLUSTER_H

#include <shoal/base.h>
#include <shoal/tasks.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum shoal_launcher {
	SHOAL_LAUNCH_LOCAL = 0, /* processes on this host */
	SHOAL_LAUNCH_MPI,	/* mpiexec -n N (Open MPI) */
	SHOAL_LAUNCH_SSH,	/* ssh HOST for each host of a hosts file */
	SHOAL_LAUNCH_SLURM	/* one sbatch job of N tasks running srun ENGINE */
} shoal_launcher;

/* "local", "mpi", "ssh", "slurm" -> the launcher, or -1. */
SHOAL_API int shoal_launcher_parse(const char *name);
SHOAL_API const char *shoal_launcher_name(shoal_launcher l);

/* The most engines a cluster starts at once. */
#define SHOAL_CLUSTER_MAX_ENGINES 65536

typedef struct shoal_cluster_opts {
	/* The cluster's name: 1 to 64 letters, digits, '.', '_' or '-'
	 * (NULL: "default"); several clusters run at once by name. */
	const char *name;
	uint32_t engines; /* to start: 1 to SHOAL_CLUSTER_MAX_ENGINES */
	shoal_launcher launcher;
	/* ssh: the hosts, a file of a host a line, optionally with its count
	 * of engines ("node1 4"); mpi: mpiexec's --hostfile. */
	const char *hosts;
	/* HOST:PORT (port 0: any): the controller serves engines and clients
	 * of other hosts there too (ssh needs it), who prove the secret:
	 * $SHOAL_SECRET_FILE or $SHOAL_SECRET when set, else one made for the
	 * cluster (shoal_cluster_info.secret_file). NULL: this host only. */
	const char *tcp;
	/* Engines run this library's functions (shoal-engine); NULL: Python
	 * engines (python3 -m shoal.engine). */
	const char *so;
	const char *ssh;	/* ssh's command line; NULL: $SHOAL_SSH, else "ssh" */
	const char *python;	/* Python engines' interpreter; NULL: /usr/bin/python3 */
	const char *pythonpath; /* where the shoal package is for them; NULL: beside shoal */
	shoal_scheme scheme;	/* how tasks are spread (default leastload) */
	double timeout_s;	/* how long start waits for the engines (0: 60) */
	/* A store (shoald) on each node, which its engines pass tensors and
	 * blobs through; store_size its --size (NULL: 1G), store_args more of
	 * its options, split on blanks (e.g. "--meta etcd://HOST:PORT"). */
	bool stores;
	const char *store_size, *store_args;
	/* The command that runs the supervisor: a program that hands the
	 * arguments start adds to shoal_cluster_supervise (NULL-ended). NULL:
	 * the shoal program installed with the library, "shoal cluster serve". */
	const char *const *supervisor;
} shoal_cluster_opts;

SHOAL_API void shoal_cluster_opts_init(shoal_cluster_opts *o);

/* A running cluster, as its supervisor says. */
typedef struct shoal_cluster_info {
	char controller[108];	/* the controller's unix socket */
	char tcp[300];		/* "tcp://HOST:PORT" for other hosts, or "" */
	char secret_file[4096]; /* the secret the cluster made, or "" (the user's) */
	char store[108];	/* the store of this host's engines (--stores, local), or "" */
	uint32_t engines;	/* registered with the controller now */
	uint32_t asked;		/* asked for, in all */
	int supervisor_pid;
	/* All of it for people: the tasks, each launch and how it is doing,
	 * what ended. */
	char text[65536];
} shoal_cluster_info;

/* Blocks: starts the supervisor, which starts the controller and the
 * engines; returns once every engine registered (info, when not NULL,
 * says where the cluster is). A launcher that fails or engines that do not
 * register within timeout_s fail it, naming those that did not come and
 * what their launcher said, and everything started is stopped.
 * SHOAL_EEXIST: a cluster of that name runs. */
SHOAL_API int shoal_cluster_start(const shoal_cluster_opts *o, shoal_cluster_info *info, char *why,
				  size_t whylen);
/* Blocks (a round trip to the supervisor, 10 s at most). SHOAL_ENOENT: no
 * cluster of that name (NULL: "default") runs. */
SHOAL_API int shoal_cluster_status(const char *name, shoal_cluster_info *info, char *why,
				   size_t whylen);
/* Blocks: n more engines through launcher l (hosts as in the options),
 * until they registered (timeout_s, 0: 60); all or none of them. */
SHOAL_API int shoal_cluster_add(const char *name, uint32_t n, shoal_launcher l, const char *hosts,
				double timeout_s, shoal_cluster_info *info, char *why,
				size_t whylen);
/* Blocks: the supervisor ends every process the cluster started (SIGTERM,
 * then SIGKILL after timeout_s; 0: 10) and its directory goes.
 * SHOAL_ENOENT: no such cluster (a supervisor that died is cleaned up). */
SHOAL_API int shoal_cluster_stop(const char *name, double timeout_s, char *why, size_t whylen);

/* The supervisor's own main, for the program that runs it (see
 * shoal_cluster_opts.supervisor): argv as start passes it. Blocks until
 * the cluster is stopped (or SIGTERM, SIGINT); the process's exit code. */
SHOAL_API int shoal_cluster_supervise(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif

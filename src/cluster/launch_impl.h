/* What launch.c and launch_remote.c share: a launch, its units, and the
 * helpers that start processes and build shell commands. Not for other
 * files: they use launch.h. */
#ifndef SHOAL_CLUSTER_LAUNCH_IMPL_H
#define SHOAL_CLUSTER_LAUNCH_IMPL_H

#include "base/proc.h"
#include "cluster/launch.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <shoal/base.h>

#define MAX_UNITS 1024
#define MAX_ARGS 64
#define SLURM_POLL_NS 500000000LL

typedef struct unit {
	sh_proc proc; /* its process, in a group a stop signals; pid 0: a Slurm job */
	int in;	      /* ssh: its standard input, held until the stop */
	int status;   /* how it ended (waitpid) */
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

/* Appends to out (a NUL-ended string in len bytes), cut to fit. */
void sh_ln_say(char *out, size_t len, const char *fmt, ...) SHOAL_PRINTF(3, 4);
/* Appends s in single quotes for sh. */
void sh_ln_sq(char *out, size_t len, const char *s);
/* The last lines of the file at path, for a message. */
void sh_ln_tail_of(const char *path, char *out, size_t len);
/* The engines' environment (one block: free()). */
char **sh_ln_engine_env(const sh_launch_cfg *c);
/* Starts argv in process group pgid (0: its own), input in (or /dev/null),
 * output appended to log, into p. 0 or a negative SHOAL_E* with why. */
int sh_ln_spawn(char *const *argv, char **env, int in, const char *log, pid_t pgid, sh_proc *p,
		char *why, size_t whylen);
/* Runs argv to its end (killed at deadline): its wait status, or -1. */
int sh_ln_run(char *const *argv, char **env, int64_t deadline, char *out, size_t outlen, char *err,
	      size_t errlen);
/* Makes s one printable line. */
void sh_ln_strip(char *s);
/* "exited 3", "killed by Terminated". */
void sh_ln_describe_status(int st, char *out, size_t len);
/* A new unit of l, its log named after it. */
unit *sh_ln_add_unit(sh_launch *l, uint32_t engines, const char *fmt, ...) SHOAL_PRINTF(3, 4);
/* argv + --name name into a (NULL-ended); false when too long. */
bool sh_ln_with_name(const sh_launch_cfg *c, const char *name, char **a);
/* The engine's command for a shell: quoted words, --name NAME then tail. */
void sh_ln_shell_command(const sh_launch_cfg *c, const char *name, const char *tail, char *out,
			 size_t len);

/* The launchers of launch_remote.c. */
int sh_ln_start_mpi(sh_launch *l, char **env, char *why, size_t whylen);
int sh_ln_start_ssh(sh_launch *l, char **env, char *why, size_t whylen);
int sh_ln_start_slurm(sh_launch *l, char **env, char *why, size_t whylen);
/* A Slurm job's state ended (not pending, running, completing...). */
bool sh_ln_slurm_ended(const char *state);
/* Asks Slurm how l's job is (l->state); reason gets its Reason=. */
void sh_ln_slurm_state(sh_launch *l, char *reason, size_t rlen);

#endif

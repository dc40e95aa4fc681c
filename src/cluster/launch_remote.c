/* The launchers that reach other hosts (see launch.h): mpiexec, ssh to each
 * host of a hosts file, and one Slurm job; and the store each node may run
 * for its engines (--stores). Each builds a shell command its launcher runs
 * on the node: words quoted (sh_ln_sq), the secret never among them. */
#include "cluster/launch_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shoal/base.h>

extern char **environ;

/* ---- a store on each node --------------------------------------------- */

/* Sets $d and $S (the node's store socket) in a shell; node: a shell
 * word naming the node ("$(hostname)", or a quoted host alias). */
static void store_vars(const sh_launch_cfg *c, const char *node, char *out, size_t len)
{
	sh_ln_say(out, len, "d=/tmp/shoal-$(id -u)-cluster-");
	sh_ln_sq(out, len, c->name);
	sh_ln_say(out, len, "-%s; S=\"$d/store.sock\"; ", node);
}

/* Starts the node's shoald on $S, its directory made ours (a directory of
 * someone else's there is refused: its socket would be theirs); exec: in
 * place of the shell, else in the background. */
static void store_start(const sh_launch_cfg *c, bool exec, char *out, size_t len)
{
	sh_ln_say(out, len,
		  "mkdir -p -m 700 \"$d\" && [ -O \"$d\" ] || { echo \"shoal: $d is not a "
		  "directory of ours\" >&2; exit 98; }; rm -f \"$S\"; %s",
		  exec ? "exec " : "");
	for (size_t k = 0; c->store_argv[k]; k++) {
		sh_ln_sq(out, len, c->store_argv[k]);
		sh_ln_say(out, len, " ");
	}
	sh_ln_say(out, len, "--socket \"$S\"%s", exec ? "" : " </dev/null 3<&- & ");
}

/* Waits (20 s at most) for the node's store to listen. */
static void store_wait(char *out, size_t len)
{
	sh_ln_say(out, len,
		  "n=0; while [ ! -S \"$S\" ] && [ $n -lt 400 ]; do sleep 0.05; "
		  "n=$((n+1)); done; ");
}

/* ---- mpi --------------------------------------------------------------- */

int sh_ln_start_mpi(sh_launch *l, char **env, char *why, size_t whylen)
{
	const char *mpiexec = getenv("SHOAL_MPIEXEC");
	if (!mpiexec || !*mpiexec)
		mpiexec = "mpiexec";
	char prog[512];
	if (sh_proc_find(mpiexec, prog, sizeof(prog)) != 0)
		return snprintf(why, whylen, "mpi: no %s on PATH (Debian: apt install openmpi-bin)",
				mpiexec),
		       -1;
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
	sh_ln_say(script, sizeof(script), "exec ");
	char tail[128];
	snprintf(tail, sizeof(tail), "%s%s", rank, l->cfg.store_argv ? " --store \"$S\"" : "");
	sh_ln_shell_command(&l->cfg, name, tail, script, sizeof(script));
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
		unit *su = sh_ln_add_unit(l, 0, "mpiexec: a store on each node");
		if (sh_ln_spawn(b, env, -1, su->log, 0, &su->proc, why, whylen) != 0) {
			l->nu--;
			return -1;
		}
	}
	a[k++] = "/bin/sh";
	a[k++] = "-c";
	a[k++] = script;
	a[k] = NULL;
	unit *u = sh_ln_add_unit(l, l->cfg.n, "mpiexec -n %u", l->cfg.n);
	if (sh_ln_spawn(a, env, -1, u->log, 0, &u->proc, why, whylen) != 0) {
		l->nu--;
		return -1;
	}
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

int sh_ln_start_ssh(sh_launch *l, char **env, char *why, size_t whylen)
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
	if (sh_proc_find(sshw[0], prog, sizeof(prog)) != 0) {
		free(h);
		return snprintf(why, whylen,
				"ssh: no %s on PATH (Debian: apt install openssh-client)", sshw[0]),
		       -1;
	}
	sshw[0] = prog;
	int rc = 0;
	for (uint32_t i = 0; i < nh && rc == 0; i++) {
		if (!h[i].n)
			continue;
		/* The secret comes first on its standard input, never in a
		 * command line (which another user of that host could read);
		 * the engines then live until that input closes: our stop, or
		 * this process's end. */
		char script[16384] = "";
		sh_ln_say(script, sizeof(script),
			  "exec 3<&0; IFS= read -r SHOAL_SECRET || exit 97; export SHOAL_SECRET; ");
		for (const char *const *e = l->cfg.env; e && *e; e++) {
			const char *eq = strchr(*e, '=');
			if (!eq)
				continue;
			sh_ln_say(script, sizeof(script), "%.*s=", (int)(eq - *e), *e);
			sh_ln_sq(script, sizeof(script), eq + 1);
			sh_ln_say(script, sizeof(script), "; export %.*s; ", (int)(eq - *e), *e);
		}
		char name[300];
		snprintf(name, sizeof(name), "%s.%s.", l->cfg.name, h[i].name);
		if (l->cfg.store_argv) {
			/* the host's store first, in the same session: it ends with it */
			char node[300] = "";
			sh_ln_sq(node, sizeof(node), h[i].name);
			store_vars(&l->cfg, node, script, sizeof(script));
			store_start(&l->cfg, false, script, sizeof(script));
			store_wait(script, sizeof(script));
		}
		/* the session ends when the engines have (its status the
		 * worst of theirs), or when its input closes (they are ended);
		 * fd 3: sh gives a background job /dev/null for its input */
		sh_ln_say(script, sizeof(script), "pids=; i=0; while [ $i -lt %u ]; do ", h[i].n);
		sh_ln_shell_command(&l->cfg, name,
				    l->cfg.store_argv
					    ? "$i --store \"$S\" </dev/null 3<&- & pids=\"$pids "
					      "$!\"; i=$((i+1)); done; "
					    : "$i </dev/null 3<&- & pids=\"$pids $!\"; "
					      "i=$((i+1)); done; ",
				    script, sizeof(script));
		sh_ln_say(
			script, sizeof(script),
			"{ cat <&3 >/dev/null; kill $pids 2>/dev/null; } & st=0; "
			"for p in $pids; do wait $p || st=$?; done; trap '' TERM; kill 0; wait; ");
		if (l->cfg.store_argv)
			sh_ln_say(script, sizeof(script),
				  "rm -f \"$S\"; rmdir \"$d\" 2>/dev/null; ");
		sh_ln_say(script, sizeof(script), "exit $st");
		char remote[40000] = "exec sh -c ";
		sh_ln_sq(remote, sizeof(remote), script);
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
		unit *u = sh_ln_add_unit(l, h[i].n, "ssh %s (%u engine%s)", h[i].name, h[i].n,
					 h[i].n == 1 ? "" : "s");
		/* what runs there, for whoever reads the log (no secret in it) */
		int lf = open(u->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (lf >= 0) {
			dprintf(lf, "# ssh %s: %s\n", h[i].name, remote);
			close(lf);
		}
		int e = sh_ln_spawn(a, env, in[0], u->log, 0, &u->proc, why, whylen);
		close(in[0]);
		if (e) {
			close(in[1]);
			l->nu--;
			rc = -1;
			break;
		}
		u->in = in[1];
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

int sh_ln_start_slurm(sh_launch *l, char **env, char *why, size_t whylen)
{
	char wrap[16384] = "", inner[6144] = "";
	char name[96];
	snprintf(name, sizeof(name), "%s.slurm%u.", l->cfg.name, l->cfg.id);
	if (l->cfg.store_argv) {
		/* a step of one task a node for the stores, beside the engines' */
		char store[6144] = "";
		store_vars(&l->cfg, "$(hostname)", store, sizeof(store));
		store_start(&l->cfg, true, store, sizeof(store));
		sh_ln_say(wrap, sizeof(wrap),
			  "srun --overlap -n \"$SLURM_JOB_NUM_NODES\" "
			  "--ntasks-per-node=1 /bin/sh -c ");
		sh_ln_sq(wrap, sizeof(wrap), store);
		sh_ln_say(wrap, sizeof(wrap), " & ");
		store_vars(&l->cfg, "$(hostname)", inner, sizeof(inner));
		store_wait(inner, sizeof(inner));
	}
	sh_ln_say(wrap, sizeof(wrap), "exec srun --overcommit --overlap /bin/sh -c ");
	sh_ln_say(inner, sizeof(inner), "exec ");
	sh_ln_shell_command(&l->cfg, name,
			    l->cfg.store_argv ? "\"$SLURM_PROCID\" --store \"$S\""
					      : "\"$SLURM_PROCID\"",
			    inner, sizeof(inner));
	sh_ln_sq(wrap, sizeof(wrap), inner);
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
	int st = sh_ln_run(a, env, shoal_now_ns() + t, so, sizeof(so), se, sizeof(se));
	sh_ln_strip(se);
	if (st < 0)
		return snprintf(why, whylen, "sbatch: %s", se), -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char how[64];
		sh_ln_describe_status(st, how, sizeof(how));
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
	unit *u = sh_ln_add_unit(l, l->cfg.n, "slurm job %s (%u tasks)", l->job, l->cfg.n);
	snprintf(u->log, sizeof(u->log), "%s/slurm-%s.log", l->cfg.dir, l->job);
	return 0;
}

bool sh_ln_slurm_ended(const char *state)
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
void sh_ln_slurm_state(sh_launch *l, char *reason, size_t rlen)
{
	char so[512], se[512];
	char *q[] = {"squeue", "-h", "-j", l->job, "-o", "%T %r", NULL};
	reason[0] = 0;
	int st = sh_ln_run(q, environ, shoal_now_ns() + 10000000000LL, so, sizeof(so), se,
			   sizeof(se));
	char state[32] = "";
	if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
	    sscanf(so, "%31s %255[^\n]", state, reason) >= 1) {
		snprintf(l->state, sizeof(l->state), "%s", state);
		return;
	}
	char *c[] = {"scontrol", "-o", "show", "job", l->job, NULL};
	st = sh_ln_run(c, environ, shoal_now_ns() + 10000000000LL, so, sizeof(so), se, sizeof(se));
	const char *js = strstr(so, "JobState=");
	if (st >= 0 && js && sscanf(js + 9, "%31s", state) == 1) {
		snprintf(l->state, sizeof(l->state), "%s", state);
		const char *r = strstr(so, " Reason=");
		if (r)
			sscanf(r + 8, "%255s", reason);
		return;
	}
	/* Slurm forgot it: it ended long ago */
	if (!sh_ln_slurm_ended(l->state))
		snprintf(l->state, sizeof(l->state), "GONE");
}

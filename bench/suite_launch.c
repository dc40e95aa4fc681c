/* The cluster_start rows of `shoal bench tasks`: how long `shoal cluster
 * start` takes, from its exec until it returns with every engine
 * registered, through each launcher (local, mpi, slurm, ssh), beside
 * ipyparallel's cluster (what `ipcluster start` runs) through the same
 * launcher in the same run (bench/peer/ipcluster_start.py; ipyparallel has
 * local, MPI and Slurm engine launchers). Slurm and ssh run on private test
 * hosts this suite starts and stops itself (scripts/testhosts/: an offline
 * single-node Slurm, an sshd on a loopback port): nothing leaves 127.0.0.1. */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUITE "tasks"

typedef struct host_env {
	char dir[PATH_MAX - 64];
	char var[PATH_MAX]; /* SLURM_CONF=... or SSH_CONFIG=... */
	char script[PATH_MAX];
	char why[256];
} host_env;

/* Starts a test host (slurm.sh or sshd.sh): 0, or -1 with why. */
static int host_start(host_env *h, const char *script)
{
	if (sh_bench_find_source(script, h->script, sizeof(h->script)) != 0) {
		snprintf(h->why, sizeof(h->why), "%s not found (set SHOAL_SRCDIR)", script + 3);
		return -1;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(h->dir, sizeof(h->dir), "%s/shoal-bench-host-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(h->dir)) {
		snprintf(h->why, sizeof(h->why), "mkdtemp: %s", strerror(errno));
		return -1;
	}
	char out[512], err[256];
	char *argv[] = {h->script, "start", h->dir, NULL};
	int st = sh_bench_exec(argv, NULL, NULL, out, sizeof(out), 60, NULL, err, sizeof(err));
	if (st != 0 || !strchr(out, '=')) {
		snprintf(h->why, sizeof(h->why), "%s start failed: %.150s", script + 3,
			 st < 0 ? err : out);
		sh_bench_rm_tree(h->dir);
		h->dir[0] = 0;
		return -1;
	}
	snprintf(h->var, sizeof(h->var), "%.*s", (int)strcspn(out, "\n"), out);
	return 0;
}

static void host_stop(host_env *h)
{
	if (!h->dir[0])
		return;
	char out[256], err[256];
	char *argv[] = {h->script, "stop", h->dir, NULL};
	sh_bench_exec(argv, NULL, NULL, out, sizeof(out), 60, NULL, err, sizeof(err));
	sh_bench_rm_tree(h->dir);
	h->dir[0] = 0;
}

/* A row's mean and best of n starts, in ms. */
static void set_times(sh_bench_result *x, const double *ms, int n)
{
	double sum = 0, lo = ms[0];
	for (int i = 0; i < n; i++)
		sum += ms[i], lo = ms[i] < lo ? ms[i] : lo;
	sh_bench_metric_set(x, "mean_ms", sum / n);
	sh_bench_metric_set(x, "min_ms", lo);
	sh_bench_show_samples(x, ms, n, "ms");
}

/* One launcher: rounds of start (timed) and stop. */
static void shoal_rows(const sh_bench_opts *o, sh_bench_report *r, const char *shoal,
		       const char *launcher, unsigned n, const char *so, const host_env *h)
{
	int rounds = o->quick ? 3 : 5;
	double ms[8];
	char nbuf[16], name[64], hosts[PATH_MAX], sshcmd[PATH_MAX + 16], out[4096], err[256];
	snprintf(nbuf, sizeof(nbuf), "%u", n);
	snprintf(name, sizeof(name), "bench-%s-%d", launcher, (int)getpid());
	sh_bench_result *x = sh_bench_add(r, SUITE, "cluster_start", "shoal", 0);
	sh_bench_param_str(x, "launcher", launcher);
	sh_bench_param_num(x, "n", n);
	sh_bench_param_str(x, "engines", so ? "C" : "Python");
	const char *argv[24];
	size_t k = 0;
	argv[k++] = shoal;
	argv[k++] = "cluster";
	argv[k++] = "start";
	argv[k++] = "-n";
	argv[k++] = nbuf;
	argv[k++] = "--launcher";
	argv[k++] = launcher;
	argv[k++] = "--name";
	argv[k++] = name;
	if (so) {
		argv[k++] = "--so";
		argv[k++] = so;
	}
	if (!strcmp(launcher, "ssh")) {
		/* both test hosts of the sshd, an engine on each */
		snprintf(hosts, sizeof(hosts), "%s/hosts", h->dir);
		FILE *f = fopen(hosts, "w");
		if (!f) {
			sh_bench_fail(x, "%s: %s", hosts, strerror(errno));
			return;
		}
		fprintf(f, "node1\nnode2\n");
		fclose(f);
		snprintf(sshcmd, sizeof(sshcmd), "ssh -F %s", strchr(h->var, '=') + 1);
		argv[k++] = "--hosts";
		argv[k++] = hosts;
		argv[k++] = "--tcp";
		argv[k++] = "127.0.0.1:0";
		argv[k++] = "--ssh";
		argv[k++] = sshcmd;
	}
	argv[k] = NULL;
	char *env[] = {h ? (char *)h->var : NULL, NULL};
	char *stop[] = {(char *)shoal, "cluster", "stop", "--name", name, NULL};
	/* a warm-up start first (the test Slurm schedules its first job late,
	 * and the page cache warms), as every peer row gets after ours */
	for (int i = -1; i < rounds; i++) {
		double t0 = sh_bench_now();
		int st = sh_bench_exec((char *const *)argv, NULL, env, out, sizeof(out), 120, NULL,
				       err, sizeof(err));
		if (i >= 0)
			ms[i] = (sh_bench_now() - t0) * 1e3;
		char o2[256];
		sh_bench_exec(stop, NULL, env, o2, sizeof(o2), 60, NULL, err, sizeof(err));
		if (st != 0) {
			sh_bench_fail(x, "shoal cluster start: %.200s", st < 0 ? err : out);
			return;
		}
	}
	set_times(x, ms, rounds);
}

/* ipyparallel's cluster through the same launcher, n engines. */
static void ipcluster_rows(const sh_bench_opts *o, sh_bench_report *r, const char *launcher,
			   unsigned n, const host_env *h)
{
	sh_bench_result *x = sh_bench_add(r, SUITE, "cluster_start", "ipcluster", 1);
	sh_bench_param_str(x, "launcher", launcher);
	sh_bench_param_num(x, "n", n);
	sh_bench_param_str(x, "engines", "Python");
	char script[PATH_MAX], out[4096], err[256], nbuf[16], rbuf[16];
	if (sh_bench_find_source("peer/ipcluster_start.py", script, sizeof(script)) != 0) {
		sh_bench_fail(x, "bench/peer/ipcluster_start.py not found (set SHOAL_SRCDIR)");
		return;
	}
	int rounds = o->quick ? 1 : 3;
	snprintf(nbuf, sizeof(nbuf), "%u", n);
	snprintf(rbuf, sizeof(rbuf), "%d", rounds);
	const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
	/* ipengine's launchers take ipyparallel's own name for this one */
	const char *as = !strcmp(launcher, "mpi") ? "mpi" : launcher;
	char *argv[] = {(char *)py, script, (char *)as, nbuf, rbuf, NULL};
	char dir[PATH_MAX - 32], ipdir[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/shoal-bench-ipc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		sh_bench_fail(x, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(ipdir, sizeof(ipdir), "IPYTHONDIR=%s", dir);
	char *env[] = {ipdir, h ? (char *)h->var : NULL, NULL};
	int st = sh_bench_exec(argv, dir, env, out, sizeof(out), 600, NULL, err, sizeof(err));
	sh_bench_rm_tree(dir);
	if (st == 3 && !strncmp(out, "skip ", 5)) {
		sh_bench_skip(x, "%.*s", (int)strcspn(out + 5, "\n"), out + 5);
		return;
	}
	double ms[8];
	int k = 0;
	for (const char *p = strstr(out, "start s="); p && k < 8; p = strstr(p + 1, "start s="))
		ms[k++] = atof(p + 8) * 1e3;
	if (st != 0 || k == 0) {
		const char *last = out;
		for (const char *q = out; *q; q++)
			if (q[0] == '\n' && q[1])
				last = q + 1;
		sh_bench_fail(x, "ipcluster_start.py: %.200s", st < 0 ? err : last);
		return;
	}
	set_times(x, ms, k);
}

void sh_bench_cluster_start(const sh_bench_opts *o, sh_bench_report *r, const char *lib)
{
	char shoal[PATH_MAX], unused[PATH_MAX];
	if (sh_bench_find_tool("shoal", shoal, unused, sizeof(shoal)) != 0) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "cluster_start", "shoal", 0);
		sh_bench_fail(x, "cannot find the shoal program next to this one");
		return;
	}
	shoal_rows(o, r, shoal, "local", 8, NULL, NULL);
	shoal_rows(o, r, shoal, "local", 8, lib, NULL);
	ipcluster_rows(o, r, "local", 8, NULL);
	if (access("/usr/bin/mpiexec", X_OK) == 0) {
		shoal_rows(o, r, shoal, "mpi", 2, NULL, NULL);
		ipcluster_rows(o, r, "mpi", 2, NULL);
	} else {
		sh_bench_result *x = sh_bench_add(r, SUITE, "cluster_start", "shoal", 0);
		sh_bench_param_str(x, "launcher", "mpi");
		sh_bench_skip(x, "no mpiexec (apt install openmpi-bin)");
	}
	host_env h = {0};
	if (host_start(&h, "../scripts/testhosts/slurm.sh") == 0) {
		shoal_rows(o, r, shoal, "slurm", 2, NULL, &h);
		ipcluster_rows(o, r, "slurm", 2, &h);
		host_stop(&h);
	} else {
		sh_bench_result *x = sh_bench_add(r, SUITE, "cluster_start", "shoal", 0);
		sh_bench_param_str(x, "launcher", "slurm");
		sh_bench_skip(x, "%s", h.why);
	}
	host_env s = {0};
	if (host_start(&s, "../scripts/testhosts/sshd.sh") == 0) {
		shoal_rows(o, r, shoal, "ssh", 2, NULL, &s);
		host_stop(&s);
	} else {
		sh_bench_result *x = sh_bench_add(r, SUITE, "cluster_start", "shoal", 0);
		sh_bench_param_str(x, "launcher", "ssh");
		sh_bench_skip(x, "%s", s.why);
	}
}

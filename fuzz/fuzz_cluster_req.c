/* Fuzzes what a cluster's supervisor reads from its control socket
 * (src/cluster/control.c, sh_cluster_parse_request): one request from
 * whoever of its uid connects. What parses must be a request the
 * supervisor can act on: a known operation, 1 to SHOAL_CLUSTER_MAX_ENGINES
 * engines and a known launcher for add, and no hosts file but an absolute
 * path; what does not must say why. A parsed request formats back to the
 * same request (sh_cluster_format_request, what `shoal cluster` sends).
 *
 * Input: the request's bytes, as one message.
 *
 * Seeds: the requests `shoal cluster status|stop|add` sends, by its own
 * encoder, and a few it never sends. */
#include "cluster/supervise.h"
#include "cluster/launch.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static int parse(const uint8_t *in, size_t n)
{
	sh_cluster_req r;
	char why[512] = "";
	int rc = sh_cluster_parse_request((const char *)in, n, &r, why, sizeof(why));
	if (rc) {
		if (!why[0])
			abort(); /* a refusal says why */
		return rc;
	}
	if (r.op != SH_CLUSTER_STATUS && r.op != SH_CLUSTER_STOP && r.op != SH_CLUSTER_ADD)
		abort();
	if (r.op == SH_CLUSTER_ADD) {
		if (r.n == 0 || r.n > SHOAL_CLUSTER_MAX_ENGINES || r.launcher < 0 ||
		    r.launcher > SHOAL_LAUNCH_SLURM || (r.hosts[0] && r.hosts[0] != '/') ||
		    !memchr(r.hosts, 0, sizeof(r.hosts)))
			abort();
	}
	/* what the supervisor acts on is what a command would have sent */
	char back[SH_CLUSTER_REQ_MAX + 1];
	sh_cluster_req again;
	int k = sh_cluster_format_request(&r, back, sizeof(back));
	if (k < 0 || sh_cluster_parse_request(back, (size_t)k, &again, why, sizeof(why)) != 0 ||
	    again.op != r.op || again.n != r.n || again.launcher != r.launcher ||
	    strcmp(again.hosts, r.hosts) != 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	parse(in, n);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static void seed_req(const char *name, const sh_cluster_req *r)
{
	char buf[SH_CLUSTER_REQ_MAX + 1];
	int k = sh_cluster_format_request(r, buf, sizeof(buf));
	if (k < 0 || parse((const uint8_t *)buf, (size_t)k) != 0)
		seed_die("does not parse", name);
	seed_write(name, buf, (size_t)k);
}

static void seed_raw(const char *name, const char *s, bool ok)
{
	if ((parse((const uint8_t *)s, strlen(s)) == 0) != ok)
		seed_die(ok ? "does not parse" : "parses", name);
	seed_write(name, s, strlen(s));
}

static void cluster_seeds(void)
{
	seed_req("status", &(sh_cluster_req){.op = SH_CLUSTER_STATUS});
	seed_req("stop", &(sh_cluster_req){.op = SH_CLUSTER_STOP});
	seed_req("add-local", &(sh_cluster_req){.op = SH_CLUSTER_ADD, .n = 2});
	seed_req("add-slurm",
		 &(sh_cluster_req){.op = SH_CLUSTER_ADD, .n = 8, .launcher = SHOAL_LAUNCH_SLURM});
	sh_cluster_req ssh = {.op = SH_CLUSTER_ADD, .n = 3, .launcher = SHOAL_LAUNCH_SSH};
	strcpy(ssh.hosts, "/home/me/hosts");
	seed_req("add-ssh-hosts", &ssh);
	seed_raw("add-zero", "add\n0\nlocal", false);
	seed_raw("add-relative-hosts", "add\n1\nmpi\nhosts", false);
	seed_raw("unknown", "restart", false);
	seed_raw("status-extra", "status\nnow", false);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_cluster_req", cluster_seeds);
	return 0;
}

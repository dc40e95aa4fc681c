/* The words of `shoal cluster` that come from outside a command line: the
 * launchers' names and the requests the supervisor reads from its control
 * socket (whoever of its uid connects: checked as hostile, fuzzed by
 * fuzz/fuzz_cluster_req.c). */
#include "lib/cluster.h"
#include "lib/launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sh_launcher_names[] = {"local", "mpi", "ssh", "slurm", NULL};

int sh_launcher_parse(const char *name)
{
	for (int i = 0; name && sh_launcher_names[i]; i++)
		if (strcmp(name, sh_launcher_names[i]) == 0)
			return i;
	return -1;
}

/* ---- the control socket's requests ------------------------------------- */

int sh_cluster_parse_request(const char *buf, size_t n, sh_cluster_req *r, char *why, size_t whylen)
{
	memset(r, 0, sizeof(*r));
	if (n == 0 || n > SH_CLUSTER_REQ_MAX)
		return snprintf(why, whylen, "a request of %zu bytes, expected 1 to %d", n,
				SH_CLUSTER_REQ_MAX),
		       -1;
	/* words separated by '\n': COMMAND [N LAUNCHER [HOSTS]] */
	char tmp[SH_CLUSTER_REQ_MAX + 1];
	memcpy(tmp, buf, n);
	tmp[n] = 0;
	if (memchr(buf, 0, n))
		return snprintf(why, whylen, "a request holding a NUL byte"), -1;
	char *save = NULL, *w[5];
	int k = 0;
	for (char *t = strtok_r(tmp, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
		if (k == 4)
			return snprintf(why, whylen, "a request of more than 4 lines"), -1;
		w[k++] = t;
	}
	if (k == 0)
		return snprintf(why, whylen, "an empty request"), -1;
	if (strcmp(w[0], "status") == 0 || strcmp(w[0], "stop") == 0) {
		if (k != 1)
			return snprintf(why, whylen, "%s takes nothing", w[0]), -1;
		r->op = strcmp(w[0], "status") == 0 ? SH_CLUSTER_STATUS : SH_CLUSTER_STOP;
		return 0;
	}
	if (strcmp(w[0], "add") != 0)
		return snprintf(why, whylen,
				"unknown request '%.32s' (expected status, add or stop)", w[0]),
		       -1;
	if (k < 3)
		return snprintf(why, whylen, "add: expected a count and a launcher"), -1;
	char *end;
	errno = 0;
	unsigned long c = strtoul(w[1], &end, 10);
	if (*end || end == w[1] || errno || c == 0 || c > SH_CLUSTER_MAX_ENGINES)
		return snprintf(why, whylen, "add: %.32s engines, expected 1 to %d", w[1],
				SH_CLUSTER_MAX_ENGINES),
		       -1;
	int l = sh_launcher_parse(w[2]);
	if (l < 0)
		return snprintf(why, whylen,
				"add: launcher '%.32s', expected local, mpi, ssh or slurm", w[2]),
		       -1;
	r->op = SH_CLUSTER_ADD;
	r->n = (uint32_t)c;
	r->launcher = l;
	if (k == 4) {
		if (w[3][0] != '/' || strlen(w[3]) >= sizeof(r->hosts))
			return snprintf(why, whylen,
					"add: the hosts file must be an absolute path"),
			       -1;
		snprintf(r->hosts, sizeof(r->hosts), "%s", w[3]);
	}
	return 0;
}

int sh_cluster_format_request(const sh_cluster_req *r, char *buf, size_t len)
{
	int k;
	if (r->op == SH_CLUSTER_STATUS)
		k = snprintf(buf, len, "status");
	else if (r->op == SH_CLUSTER_STOP)
		k = snprintf(buf, len, "stop");
	else if (r->op == SH_CLUSTER_ADD && r->launcher >= 0 && r->launcher <= SH_LAUNCH_SLURM)
		k = snprintf(buf, len, "add\n%u\n%s%s%s", r->n, sh_launcher_names[r->launcher],
			     r->hosts[0] ? "\n" : "", r->hosts);
	else
		return -1;
	return k > 0 && (size_t)k < len && k <= SH_CLUSTER_REQ_MAX ? k : -1;
}

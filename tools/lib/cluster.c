/* `shoal cluster start|status|add|stop`: the command line of the calls
 * of shoal/cluster.h (a task controller and its engines started through a
 * launcher, kept by a supervisor process of their own so that `start` can
 * return), and `serve`, the supervisor those calls run when no other
 * program is given (shoal_cluster_supervise). */
#include "cluster/launch.h"
#include "cluster/supervise.h"
#include "lib/tools.h"
#include "shoal_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/cluster.h>
#include <shoal/tasks.h>

/* ---- the commands --------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shoal cluster start -n N [--launcher local|mpi|ssh|slurm] [--hosts FILE]\n"
		"                         [--tcp HOST:PORT] [--so LIBRARY.so] [--name NAME]\n"
		"                         [--scheme S] [--timeout SECONDS] [--ssh COMMAND]\n"
		"                         [--stores [--store-size S] [--store-args 'ARGS']]\n"
		"       shoal cluster status [--name NAME]\n"
		"       shoal cluster add -n N [--launcher L] [--hosts FILE] [--name NAME]\n"
		"       shoal cluster stop [--name NAME] [--timeout SECONDS]\n\n"
		"Starts a task controller and N engines through a launcher, and returns once\n"
		"every engine has registered (or fails, naming the engines that did not come up\n"
		"and what their launcher said). A supervisor process keeps the cluster until\n"
		"`shoal cluster stop`, which ends every process the cluster started, wherever.\n"
		"Clients submit to the controller's socket (or tcp://HOST:PORT with the secret\n"
		"`status` names).\n\n"
		"launchers:\n"
		"  local   processes on this host (the default)\n"
		"  mpi     mpiexec -n N (Open MPI: as root with --allow-run-as-root;\n"
		"          --oversubscribe past the cores); --hosts: its --hostfile\n"
		"  ssh     ssh HOST for each host of --hosts FILE (a host a line, optionally\n"
		"          with its count of engines: 'node1 4'), with your own keys and ssh\n"
		"          config (--ssh 'ssh -F FILE', or $SHOAL_SSH); needs --tcp\n"
		"  slurm   one sbatch job of N tasks running srun ENGINE; sbatch's own\n"
		"          $SBATCH_* variables (partition, time, account) apply; the job is\n"
		"          followed (squeue, scontrol) and cancelled by stop (scancel)\n\n"
		"options:\n"
		"  -n N              engines to start (start, add)\n"
		"  --launcher L      local, mpi, ssh or slurm (default: local)\n"
		"  --hosts FILE      ssh: the hosts; mpi: the hostfile\n"
		"  --tcp HOST:PORT   also serve on TCP there (port 0: any), for engines and\n"
		"                    clients of other hosts; without it engines connect to the\n"
		"                    controller's unix socket (this host only)\n"
		"  --so LIBRARY.so   engines run this library's functions (shoal-engine);\n"
		"                    default: Python engines (python3 -m shoal.engine)\n"
		"  --name NAME       the cluster's name (default: default), for several at once\n"
		"  --scheme S        pure, lru, leastload (default), weighted or twobin\n"
		"  --timeout S       how long start or add waits for the engines (default 60),\n"
		"                    or stop for the processes to end (default 10)\n"
		"  --ssh COMMAND     ssh's command line (default: $SHOAL_SSH, else ssh)\n"
		"  --stores          also a store (shoald) on each node, which its engines\n"
		"                    pass tensors and blobs through (--store): local, on the\n"
		"                    cluster's directory; elsewhere on\n"
		"                    /tmp/shoal-UID-cluster-NAME-NODE/store.sock\n"
		"  --store-size S    each store's --size (default 1G)\n"
		"  --store-args 'A'  more of shoald's options for each store, e.g. '--meta\n"
		"                    etcd://HOST:PORT --cluster NAME --peer HOST:PORT' to\n"
		"                    register them with the cluster's registry\n"
		"  -h, --help        show this help\n\n"
		"The secret engines and TCP clients prove: $SHOAL_SECRET_FILE or $SHOAL_SECRET\n"
		"when set, else a fresh one for this cluster in a 0600 file (status names it);\n"
		"engines get it in their environment (ssh: on standard input), never on a\n"
		"command line.\n\n"
		"Exit codes: 0 ok, 1 failed (stderr says why), 2 bad arguments, 3 no such\n"
		"cluster.\n");
}

typedef struct opts {
	uint32_t n;
	int launcher;
	const char *hosts, *tcp, *so, *name, *scheme, *ssh, *python, *pkgdir;
	const char *store_size, *store_args;
	bool stores;
	double timeout;
} opts;

static int parse(const sh_cli *cli, int argc, char **argv, opts *o)
{
	*o = (opts){.launcher = SHOAL_LAUNCH_LOCAL, .name = "default", .timeout = -1};
	int c;
	while ((c = sh_cli_next(cli, argc, argv)) != -1) {
		char *end;
		switch (c) {
		case 'n': {
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || errno || v == 0 || v > SHOAL_CLUSTER_MAX_ENGINES)
				sh_cli_fail(cli, "-n '%s': expected 1 to %d engines", optarg,
					    SHOAL_CLUSTER_MAX_ENGINES);
			o->n = (uint32_t)v;
			break;
		}
		case 'L':
			o->launcher = shoal_launcher_parse(
				sh_cli_choice(cli, "--launcher", optarg, sh_launcher_names));
			break;
		case 'H':
			o->hosts = optarg;
			break;
		case 't':
			o->tcp = optarg;
			break;
		case 's':
			o->so = optarg;
			break;
		case 'N':
			if (!sh_cluster_name_ok(optarg))
				sh_cli_fail(cli,
					    "--name '%s': expected 1 to 64 letters, digits, '.', "
					    "'_' or '-'",
					    optarg);
			o->name = optarg;
			break;
		case 'S':
			o->scheme = optarg;
			break;
		case 'T':
			o->timeout = strtod(optarg, &end);
			if (*end || !(o->timeout > 0) || o->timeout > 86400)
				sh_cli_fail(cli, "--timeout '%s': expected seconds, > 0", optarg);
			break;
		case 'x':
			o->ssh = optarg;
			break;
		case 'P':
			o->python = optarg;
			break;
		case 'K':
			o->pkgdir = optarg;
			break;
		case 'o':
			o->stores = true;
			break;
		case 'z': {
			uint64_t v;
			if (sh_tools_parse_size(optarg, &v) != 0 || v == 0)
				sh_cli_fail(cli,
					    "--store-size '%s': expected a size, e.g. 512M, 4G",
					    optarg);
			o->store_size = optarg;
			break;
		}
		case 'A':
			o->store_args = optarg;
			break;
		}
	}
	return 0;
}

static const struct option cluster_opts[] = {SH_CLI_STD,
					     {"n", required_argument, NULL, 'n'},
					     {"launcher", required_argument, NULL, 'L'},
					     {"hosts", required_argument, NULL, 'H'},
					     {"tcp", required_argument, NULL, 't'},
					     {"so", required_argument, NULL, 's'},
					     {"name", required_argument, NULL, 'N'},
					     {"scheme", required_argument, NULL, 'S'},
					     {"timeout", required_argument, NULL, 'T'},
					     {"ssh", required_argument, NULL, 'x'},
					     {"python", required_argument, NULL, 'P'},
					     {"pythonpath", required_argument, NULL, 'K'},
					     {"stores", no_argument, NULL, 'o'},
					     {"store-size", required_argument, NULL, 'z'},
					     {"store-args", required_argument, NULL, 'A'},
					     {0}};

/* What a call's failure exits with: no such cluster, or failed. */
static int failed(const sh_cli *cli, int rc, const char *why)
{
	fprintf(stderr, "%s: %s\n", cli->prog, why);
	return rc == SHOAL_ENOENT ? SH_EXIT_NOTFOUND : SH_EXIT_FAIL;
}

static int cmd_start(const sh_cli *cli, int argc, char **argv)
{
	opts o;
	parse(cli, argc, argv, &o);
	sh_cli_operands(cli, argc, argv, 0, 0);
	if (!o.n)
		sh_cli_fail(cli, "-n N is required: how many engines");
	if (o.launcher == SHOAL_LAUNCH_SSH && !o.hosts)
		sh_cli_fail(cli, "--launcher ssh needs --hosts FILE");
	if (o.launcher == SHOAL_LAUNCH_SSH && !o.tcp)
		sh_cli_fail(cli, "--launcher ssh needs --tcp HOST:PORT, an address of this host "
				 "the engines reach");
	if (o.scheme && shoal_scheme_parse(o.scheme) < 0)
		sh_cli_fail(cli, "--scheme '%s': expected pure, lru, leastload, weighted or twobin",
			    o.scheme);
	if (o.so && access(o.so, R_OK) != 0)
		sh_cli_fail(cli, "--so %s: %s", o.so, strerror(errno));
	if (o.hosts && access(o.hosts, R_OK) != 0)
		sh_cli_fail(cli, "--hosts %s: %s", o.hosts, strerror(errno));
	shoal_cluster_opts co;
	shoal_cluster_opts_init(&co);
	co.name = o.name;
	co.engines = o.n;
	co.launcher = (shoal_launcher)o.launcher;
	co.hosts = o.hosts;
	co.tcp = o.tcp;
	co.so = o.so;
	co.ssh = o.ssh;
	co.python = o.python;
	co.pythonpath = o.pkgdir;
	co.scheme = o.scheme ? (shoal_scheme)shoal_scheme_parse(o.scheme) : SHOAL_SCHEME_LEASTLOAD;
	co.timeout_s = o.timeout > 0 ? o.timeout : 0;
	co.stores = o.stores;
	co.store_size = o.store_size;
	co.store_args = o.store_args;
	/* the supervisor is this program again (`shoal cluster serve`) */
	static char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *self[] = {exe, "cluster", "serve", NULL};
	if (n > 0) {
		exe[n] = 0;
		co.supervisor = self;
	}
	static shoal_cluster_info info;
	char why[SH_CLUSTER_REPLY_MAX];
	int rc = shoal_cluster_start(&co, &info, why, sizeof(why));
	if (rc)
		return failed(cli, rc, why);
	printf("cluster %s: %s", o.name, info.text);
	return SH_EXIT_OK;
}

static int cmd_ask(const sh_cli *cli, const char *what, int argc, char **argv)
{
	opts o;
	parse(cli, argc, argv, &o);
	sh_cli_operands(cli, argc, argv, 0, 0);
	static shoal_cluster_info info;
	static char why[SH_CLUSTER_REPLY_MAX];
	int rc;
	if (!strcmp(what, "add")) {
		if (!o.n)
			sh_cli_fail(cli, "-n N is required: how many engines to add");
		if (o.hosts && access(o.hosts, R_OK) != 0)
			sh_cli_fail(cli, "--hosts %s: %s", o.hosts, strerror(errno));
		rc = shoal_cluster_add(o.name, o.n, (shoal_launcher)o.launcher, o.hosts,
				       o.timeout > 0 ? o.timeout : 0, NULL, why, sizeof(why));
		if (rc == 0)
			printf("added %u engines to cluster %s\n", o.n, o.name);
	} else if (!strcmp(what, "stop")) {
		rc = shoal_cluster_stop(o.name, o.timeout > 0 ? o.timeout : 0, why, sizeof(why));
		if (rc == 0)
			printf("cluster %s stopped\n", o.name);
	} else {
		rc = shoal_cluster_status(o.name, &info, why, sizeof(why));
		if (rc == 0)
			fputs(info.text, stdout);
	}
	return rc ? failed(cli, rc, why) : SH_EXIT_OK;
}

int sh_cluster_cli(int argc, char **argv)
{
	const sh_cli top = {.prog = "shoal cluster",
			    .usage = usage,
			    .opts = cluster_opts,
			    .stop_at_operand = true};
	if (argc < 2) {
		usage(stderr);
		return SH_EXIT_USAGE;
	}
	const char *sub = argv[1];
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
		usage(stdout);
		return SH_EXIT_OK;
	}
	static char prog[64];
	snprintf(prog, sizeof(prog), "shoal cluster %.16s", sub);
	const sh_cli cli = {.prog = prog, .usage = usage, .opts = cluster_opts};
	if (!strcmp(sub, "start"))
		return cmd_start(&cli, argc - 1, argv + 1);
	if (!strcmp(sub, "serve")) /* the supervisor, as shoal_cluster_start runs it */
		return shoal_cluster_supervise(argc - 2, argv + 2);
	if (!strcmp(sub, "status") || !strcmp(sub, "stop") || !strcmp(sub, "add"))
		return cmd_ask(&cli, sub, argc - 1, argv + 1);
	sh_cli_fail(&top, "unknown subcommand '%s' (expected start, status, add or stop)", sub);
}

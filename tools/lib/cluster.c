/* `shoal cluster start|status|add|stop`, the commands: a task controller
 * and its engines started through a launcher (launch.h), kept by a
 * supervisor process of their own (supervisor.c) so that `start` can
 * return. `start` makes the cluster's directory (0700, in
 * shoal_socket_dir()) and runs the supervisor (this program again, as
 * `serve`, which hands its options to sh_cluster_serve); the other
 * commands ask it on its control socket there. The helpers of that
 * directory (its sockets' addresses, its clean-up) are here, shared with
 * supervisor.c. */

#include "lib/cluster.h"
#include "lib/launch.h"
#include "lib/tools.h"
#include "net/net.h"
#include "shoal_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/tasks.h>

extern char **environ;

/* ---- where a cluster lives ---------------------------------------------- */

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-')
		return false;
	for (; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
		    !(*s >= '0' && *s <= '9') && !strchr("._-", *s))
			return false;
	return true;
}

static int cluster_dir(const char *name, char *out, size_t len)
{
	char base[PATH_MAX];
	if (shoal_socket_dir(base, sizeof(base)) != 0)
		return -1;
	int k = snprintf(out, len, "%s/cluster-%s", base, name);
	/* its sockets' paths must fit in sun_path */
	return k > 0 && (size_t)k + sizeof("/controller.sock") <
				       sizeof(((struct sockaddr_un *)0)->sun_path)
		       ? 0
		       : -1;
}

int sh_cluster_unix_addr(const char *dir, const char *file, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int k = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s", dir, file);
	return k > 0 && (size_t)k < sizeof(a->sun_path) ? 0 : -1;
}

/* Our own files in a cluster's directory, then the directory. */
void sh_cluster_cleanup_dir(const char *dir)
{
	/* our own files only: the launchers' logs, sockets, the secret */
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(dir);
}

/* Sends a request to the cluster in dir and reads its answer. Returns 0,
 * SHOAL_ENOENT when no supervisor answers there, or another error. */
static int ask(const char *dir, const char *req, char *reply, size_t len, int64_t deadline)
{
	struct sockaddr_un a;
	if (sh_cluster_unix_addr(dir, "control.sock", &a))
		return SHOAL_EINVAL;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return shoal_errno();
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int e = errno;
		close(fd);
		return e == ENOENT || e == ECONNREFUSED ? SHOAL_ENOENT : -e;
	}
	/* the supervisor must be ours (or root's): never tell a squatter */
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 ||
	    (cr.uid != geteuid() && cr.uid != 0)) {
		close(fd);
		return SHOAL_EPERM;
	}
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
		int rc = shoal_errno();
		close(fd);
		return rc;
	}
	struct pollfd p = {fd, POLLIN, 0};
	int64_t left = (deadline - shoal_now_ns()) / 1000000;
	if (left <= 0 || poll(&p, 1, (int)(left > INT32_MAX ? INT32_MAX : left)) <= 0) {
		close(fd);
		return SHOAL_ETIMEDOUT;
	}
	ssize_t n = recv(fd, reply, len - 1, 0);
	close(fd);
	if (n <= 0)
		return n == 0 ? SHOAL_ENOENT : shoal_errno();
	reply[n] = 0;
	return 0;
}

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
	int ready_fd;
} opts;

static int parse(const sh_cli *cli, int argc, char **argv, opts *o)
{
	*o = (opts){.launcher = SH_LAUNCH_LOCAL, .name = "default", .timeout = -1, .ready_fd = -1};
	int c;
	while ((c = sh_cli_next(cli, argc, argv)) != -1) {
		char *end;
		switch (c) {
		case 'n': {
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || errno || v == 0 || v > SH_CLUSTER_MAX_ENGINES)
				sh_cli_fail(cli, "-n '%s': expected 1 to %d engines", optarg,
					    SH_CLUSTER_MAX_ENGINES);
			o->n = (uint32_t)v;
			break;
		}
		case 'L':
			o->launcher = sh_launcher_parse(
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
			if (!name_ok(optarg))
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
		case 'R':
			o->ready_fd = atoi(optarg);
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

/* The directory of the shoal package beside this program (build/X/python,
 * or the install's lib/python3.N/dist-packages), for Python engines. */
static const char *package_dir(char *out, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	static const char *const rel[] = {"/../python", "/../lib/python3/dist-packages",
					  "/../lib/python3.11/dist-packages", NULL};
	for (int i = 0; rel[i]; i++) {
		char probe[PATH_MAX + 64];
		snprintf(probe, sizeof(probe), "%s%s/shoal/__init__.py", exe, rel[i]);
		if (access(probe, R_OK) == 0) {
			probe[strlen(probe) - strlen("/shoal/__init__.py")] = 0;
			if (!realpath(probe, out))
				snprintf(out, len, "%s", probe);
			return out;
		}
	}
	return NULL;
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
					     {"ready-fd", required_argument, NULL, 'R'},
					     {"stores", no_argument, NULL, 'o'},
					     {"store-size", required_argument, NULL, 'z'},
					     {"store-args", required_argument, NULL, 'A'},
					     {0}};

static int cmd_start(const sh_cli *cli, const char *const *self, int argc, char **argv)
{
	opts o;
	parse(cli, argc, argv, &o);
	sh_cli_operands(cli, argc, argv, 0, 0);
	if (!o.n)
		sh_cli_fail(cli, "-n N is required: how many engines");
	if (o.launcher == SH_LAUNCH_SSH && !o.hosts)
		sh_cli_fail(cli, "--launcher ssh needs --hosts FILE");
	if (o.launcher == SH_LAUNCH_SSH && !o.tcp)
		sh_cli_fail(cli, "--launcher ssh needs --tcp HOST:PORT, an address of this host "
				 "the engines reach");
	if (o.scheme && shoal_scheme_parse(o.scheme) < 0)
		sh_cli_fail(cli, "--scheme '%s': expected pure, lru, leastload, weighted or twobin",
			    o.scheme);
	if (o.so && access(o.so, R_OK) != 0)
		sh_cli_fail(cli, "--so %s: %s", o.so, strerror(errno));
	char hosts[PATH_MAX];
	if (o.hosts) {
		if (!realpath(o.hosts, hosts))
			sh_cli_fail(cli, "--hosts %s: %s", o.hosts, strerror(errno));
		o.hosts = hosts;
	}
	char dir[PATH_MAX], reply[256];
	if (cluster_dir(o.name, dir, sizeof(dir)) != 0) {
		fprintf(stderr, "%s: no safe directory for the cluster's sockets (see above)\n",
			cli->prog);
		return SH_EXIT_FAIL;
	}
	int e = ask(dir, "status", reply, sizeof(reply), shoal_now_ns() + 2000000000LL);
	if (e == 0 || e == SHOAL_ETIMEDOUT) {
		fprintf(stderr,
			"%s: a cluster named %s is running (shoal cluster stop --name %s)\n",
			cli->prog, o.name, o.name);
		return SH_EXIT_FAIL;
	}
	sh_cluster_cleanup_dir(dir); /* a supervisor's that did not end well */
	if (mkdir(dir, 0700) != 0) {
		fprintf(stderr, "%s: %s: %s\n", cli->prog, dir, strerror(errno));
		return SH_EXIT_FAIL;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) {
		fprintf(stderr, "%s: pipe: %s\n", cli->prog, strerror(errno));
		return SH_EXIT_FAIL;
	}
	/* the supervisor: this command line again, as `serve` */
	char fdarg[16], logpath[PATH_MAX + 16];
	snprintf(fdarg, sizeof(fdarg), "%d", 3);
	snprintf(logpath, sizeof(logpath), "%s/cluster.log", dir);
	const char *a[64];
	size_t k = 0;
	for (; self[k]; k++)
		a[k] = self[k];
	a[k++] = "serve";
	for (int i = 1; i < argc && k < 60; i++)
		a[k++] = argv[i];
	if (o.hosts) {
		a[k++] = "--hosts";
		a[k++] = o.hosts;
	}
	a[k++] = "--ready-fd";
	a[k++] = fdarg;
	a[k] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	posix_spawn_file_actions_adddup2(&fa, p[1], 3);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	pid_t pid;
	int rc = posix_spawn(&pid, a[0], &fa, &at, (char *const *)a, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc) {
		close(p[0]);
		sh_cluster_cleanup_dir(dir);
		fprintf(stderr, "%s: cannot run %s: %s\n", cli->prog, a[0], strerror(rc));
		return SH_EXIT_FAIL;
	}
	/* its word: "ok ..." or "error: ..." (EOF: it died; the log says why) */
	char msg[9000];
	size_t got = 0;
	ssize_t r;
	while (got + 1 < sizeof(msg) && (r = read(p[0], msg + got, sizeof(msg) - 1 - got)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		got += (size_t)r;
	}
	close(p[0]);
	msg[got] = 0;
	if (strncmp(msg, "ok ", 3) == 0) {
		printf("cluster %s: %s", o.name, msg + 3);
		return SH_EXIT_OK;
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (got)
		fprintf(stderr, "%s: cluster %s did not start: %s", cli->prog, o.name,
			strncmp(msg, "error: ", 7) == 0 ? msg + 7 : msg);
	else
		fprintf(stderr, "%s: the cluster's supervisor ended without a word (see %s)\n",
			cli->prog, logpath);
	return SH_EXIT_FAIL;
}

static int cmd_serve(const sh_cli *cli, int argc, char **argv)
{
	opts o;
	parse(cli, argc, argv, &o);
	char dir[PATH_MAX], pkg[PATH_MAX];
	if (cluster_dir(o.name, dir, sizeof(dir)) != 0)
		return SH_EXIT_FAIL;
	sh_cluster_cfg c = {
		.name = o.name,
		.dir = dir,
		.n = o.n,
		.launcher = o.launcher,
		.hosts = o.hosts,
		.ssh = o.ssh,
		.tcp = o.tcp,
		.so = o.so,
		.python = o.python ? o.python : "/usr/bin/python3",
		.pkgdir = o.pkgdir ? o.pkgdir
			  : o.so   ? NULL
				   : package_dir(pkg, sizeof(pkg)),
		.scheme = o.scheme ? shoal_scheme_parse(o.scheme) : SHOAL_SCHEME_LEASTLOAD,
		.timeout_ns = (int64_t)((o.timeout > 0 ? o.timeout : 60) * 1e9),
		.stores = o.stores,
		.store_size = o.store_size ? o.store_size : "1G",
		.store_args = o.store_args,
	};
	sh_tools_log_info();
	return sh_cluster_serve(&c, o.ready_fd);
}

static int cmd_ask(const sh_cli *cli, const char *what, int argc, char **argv)
{
	opts o;
	parse(cli, argc, argv, &o);
	sh_cli_operands(cli, argc, argv, 0, 0);
	char dir[PATH_MAX], req[SH_CLUSTER_REQ_MAX + 1];
	if (cluster_dir(o.name, dir, sizeof(dir)) != 0)
		return SH_EXIT_FAIL;
	bool stop = strcmp(what, "stop") == 0, add = strcmp(what, "add") == 0;
	sh_cluster_req r = {.op = add	 ? SH_CLUSTER_ADD
				  : stop ? SH_CLUSTER_STOP
					 : SH_CLUSTER_STATUS,
			    .n = o.n,
			    .launcher = o.launcher};
	if (add) {
		if (!o.n)
			sh_cli_fail(cli, "-n N is required: how many engines to add");
		char hosts[PATH_MAX];
		if (o.hosts && !realpath(o.hosts, hosts))
			sh_cli_fail(cli, "--hosts %s: %s", o.hosts, strerror(errno));
		if (o.hosts && strlen(hosts) >= sizeof(r.hosts))
			sh_cli_fail(cli, "--hosts %s: the path is too long", o.hosts);
		if (o.hosts)
			memcpy(r.hosts, hosts, strlen(hosts) + 1);
	}
	if (sh_cluster_format_request(&r, req, sizeof(req)) < 0)
		sh_cli_fail(cli, "a request too long for the cluster's socket");
	static char reply[SH_CLUSTER_REPLY_MAX];
	double wait = add ? (o.timeout > 0 ? o.timeout : 60) + 5 : 10;
	int e = ask(dir, req, reply, sizeof(reply), shoal_now_ns() + (int64_t)(wait * 1e9));
	if (e == SHOAL_ENOENT) {
		if (stop) {
			/* nothing runs there: a supervisor that died left its files */
			sh_cluster_cleanup_dir(dir);
		}
		fprintf(stderr, "%s: no cluster named %s here (shoal cluster start)\n", cli->prog,
			o.name);
		return SH_EXIT_NOTFOUND;
	}
	if (e) {
		fprintf(stderr, "%s: cluster %s did not answer: %s\n", cli->prog, o.name,
			shoal_strerror(e));
		return SH_EXIT_FAIL;
	}
	if (strncmp(reply, "error: ", 7) == 0) {
		fprintf(stderr, "%s: %s", cli->prog, reply + 7);
		return SH_EXIT_FAIL;
	}
	if (!stop) {
		fputs(reply, stdout);
		return SH_EXIT_OK;
	}
	/* stopped once its control socket is gone (and with it the dir) */
	double t = o.timeout > 0 ? o.timeout : 10;
	int64_t deadline = shoal_now_ns() + (int64_t)((t + 5) * 1e9);
	struct stat st;
	while (stat(dir, &st) == 0 && shoal_now_ns() < deadline) {
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	if (stat(dir, &st) == 0) {
		fprintf(stderr, "%s: cluster %s is still stopping after %.0f s\n", cli->prog,
			o.name, t + 5);
		return SH_EXIT_FAIL;
	}
	printf("cluster %s stopped\n", o.name);
	return SH_EXIT_OK;
}

int sh_cluster_cli(const char *const *self, int argc, char **argv)
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
		return cmd_start(&cli, self, argc - 1, argv + 1);
	if (!strcmp(sub, "serve"))
		return cmd_serve(&cli, argc - 1, argv + 1);
	if (!strcmp(sub, "status") || !strcmp(sub, "stop") || !strcmp(sub, "add"))
		return cmd_ask(&cli, sub, argc - 1, argv + 1);
	sh_cli_fail(&top, "unknown subcommand '%s' (expected start, status, add or stop)", sub);
}

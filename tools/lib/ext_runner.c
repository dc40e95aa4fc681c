/* shoal-ext's command line (see tools/shoal-ext.c), shared with the
 * Python module, whose runner is the same program in a python3 process
 * (python/_shoal/child.c). Run by hand, it answers --help and --version
 * as every program does (cli.c), and without the descriptors a host gives
 * it says that it is not run by hand; under a host, a usage error goes to
 * the host as the ready message, so that the start fails with it. The
 * work is src/rpc/ext_runner.c's. */
#include "lib/tools.h"
#include "rpc/ext_proto.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shoal-ext --so EXTENSION.so [--name NAME] [--mem BYTES] [--cpu SECONDS]\n"
		"                 [--files N] [--sandbox none|basic|strict] [--network 0|1]\n"
		"                 [--store PATH] [--cgroup DIR]\n\n"
		"Runs one extension in a process of its own for the program that loaded it\n"
		"(shoal_ext_start), which starts it with a socket, shared-memory rings and a\n"
		"doorbell on descriptors 3, 4 and 5: it is not started by hand. A program finds\n"
		"it through $SHOAL_EXT_RUNNER, else where the library was installed.\n\n"
		"options (the host's):\n"
		"  --so PATH          the extension to load (required)\n"
		"  --name NAME        its name in messages\n"
		"  --mem BYTES        address-space limit (0: none)\n"
		"  --cpu SECONDS      CPU-time limit (0: none)\n"
		"  --files N          descriptor limit (0: none)\n"
		"  --sandbox S        none, basic (own session, no new privileges) or strict\n"
		"                     (namespaces, no privileges, a syscall filter)\n"
		"  --network 0|1      strict: whether it keeps the network\n"
		"  --store PATH       a store socket for payloads shared by reference\n"
		"  --cgroup DIR       a memory cgroup to join before it allocates\n"
		"  -h, --help         show this help\n"
		"  -V, --version      print the version\n"
		"\nExit codes: 0 the host closed it, 1 failed (the host is told why), 2 bad\n"
		"arguments or not started by a host, 3 the host went before it started.\n");
}

static uint64_t number(const sh_cli *cli, const char *opt, const char *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-')
		sh_cli_fail(cli, "%s '%s': expected a whole number", opt, v);
	return n;
}

/* The host's descriptors: a unix socket on 3, the rings' memfd on 4, the
 * doorbell's write end on 5. */
static bool from_host(void)
{
	struct stat s3, s4, s5;
	return fstat(SH_EXT_FD_SOCK, &s3) == 0 && S_ISSOCK(s3.st_mode) &&
	       fstat(SH_EXT_FD_RINGS, &s4) == 0 && S_ISREG(s4.st_mode) &&
	       fstat(SH_EXT_FD_EFD, &s5) == 0;
}

/* A usage error under a host is the host's to report: its start fails
 * with this message, not with "exited with status 2". */
static void tell_host(const char *msg)
{
	if (!from_host())
		return;
	sh_ext_ready m = {.magic = SH_EXT_READY_MAGIC, .status = SHOAL_EINVAL};
	snprintf(m.msg, sizeof(m.msg), "shoal-ext: %s", msg);
	sh_fd_send(SH_EXT_FD_SOCK, &m, sizeof(m), NULL, 0);
}

int sh_ext_runner_cli(int argc, char **argv, shoal_ext_init_fn init)
{
	static const struct option opts[] = {SH_CLI_STD,
					     {"so", required_argument, NULL, 'l'},
					     {"name", required_argument, NULL, 'n'},
					     {"mem", required_argument, NULL, 'm'},
					     {"cpu", required_argument, NULL, 'c'},
					     {"files", required_argument, NULL, 'f'},
					     {"sandbox", required_argument, NULL, 'b'},
					     {"network", required_argument, NULL, 'w'},
					     {"store", required_argument, NULL, 'S'},
					     {"cgroup", required_argument, NULL, 'g'},
					     {0}};
	static const char *const sandboxes[] = {"none", "basic", "strict", NULL};
	static const char *const bits[] = {"0", "1", NULL};
	optind = 1; /* a Python process may have parsed options its own way */
	const sh_cli cli = {.prog = "shoal-ext", .usage = usage, .opts = opts, .failed = tell_host};
	sh_ext_runner_cfg cfg = {.init = init};
	const char *sandbox = NULL;
	int o;
	while ((o = sh_cli_next(&cli, argc, argv)) != -1) {
		switch (o) {
		case 'l':
			cfg.so = optarg;
			break;
		case 'n':
			cfg.name = optarg;
			break;
		case 'm':
			cfg.mem = number(&cli, "--mem", optarg);
			break;
		case 'c':
			cfg.cpu = number(&cli, "--cpu", optarg);
			break;
		case 'f':
			cfg.files = number(&cli, "--files", optarg);
			break;
		case 'b':
			/* never "none" for a value it does not know */
			sandbox = sh_cli_choice(&cli, "--sandbox", optarg, sandboxes);
			break;
		case 'w':
			cfg.network = !strcmp(sh_cli_choice(&cli, "--network", optarg, bits), "1");
			break;
		case 'S':
			cfg.store = optarg;
			break;
		case 'g':
			cfg.cgroup = optarg;
			break;
		}
	}
	sh_cli_operands(&cli, argc, argv, 0, 0);
	if (!from_host()) {
		fprintf(stderr,
			"shoal-ext: runs an extension for the program that loads it "
			"(shoal_ext_start), which starts it with the descriptors it needs; it is "
			"not run by hand (see shoal-ext --help)\n");
		return SH_EXIT_USAGE;
	}
	cfg.strict = sandbox && !strcmp(sandbox, "strict");
	cfg.basic = sandbox && !strcmp(sandbox, "basic");
	return sh_ext_runner_main(&cfg);
}

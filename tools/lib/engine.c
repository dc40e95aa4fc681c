/* shoal-engine's command line (see tools/shoal-engine.c), shared with the
 * Python module, whose engine (`python3 -m shoal.engine`) is the same
 * program in a python3 process with its functions built in
 * (src/tasks/engine.c does the work). */
#include "lib/tools.h"
#include "tasks/proto.h"

#include <unistd.h>

static bool python_engine; /* python3 -m shoal.engine: no --so */

static void usage(FILE *f)
{
	if (python_engine)
		fprintf(f,
			"usage: python3 -m shoal.engine (--socket PATH | --socket "
			"tcp://HOST:PORT |\n"
			"                                --connect HOST:PORT) [--store PATH] "
			"[--name NAME]\n"
			"                                [--die-with-parent]\n\n"
			"Runs Python tasks (shoal.tasks) for a task controller (shoal "
			"controller,\n"
			"shoald --tasks, or shoal.tasks.Cluster): it connects to the controller, "
			"runs\n"
			"the functions of the tasks it sends and sends their results back, until "
			"the\n"
			"controller goes.");
	else
		fprintf(f, "usage: shoal-engine (--socket PATH | --socket tcp://HOST:PORT | "
			   "--connect HOST:PORT)\n"
			   "                    --so LIBRARY.so [--store PATH] [--name NAME] "
			   "[--die-with-parent]\n\n"
			   "Runs tasks for a task controller (shoal controller, shoald --tasks, "
			   "or a\n"
			   "program's shoal_controller_open): it loads the functions of "
			   "LIBRARY.so (written\n"
			   "against shoal/ext.h), connects to the controller, runs the tasks it "
			   "sends and\n"
			   "sends their results back, until the controller goes.");
	fprintf(f,
		" Over TCP the shared secret comes from\n"
		"$SHOAL_SECRET_FILE or $SHOAL_SECRET; HOST:PORT?encrypt=false asks for records\n"
		"in clear (still authenticated), if the controller allows it.\n\n"
		"options:\n"
		"  --socket PATH      the controller's unix socket, or tcp://HOST:PORT\n"
		"  --connect H:P      the controller over TCP (the same as --socket tcp://H:P)\n");
	if (!python_engine)
		fprintf(f, "  --so LIBRARY.so    the functions to run (required)\n");
	fprintf(f, "  --store PATH       a store socket: tensors and blobs of arguments and\n"
		   "                     results go by reference through it\n"
		   "  --name NAME        its name in messages (default: pid PID)\n"
		   "  --die-with-parent  end when the process that started it ends\n"
		   "  -h, --help         show this help\n"
		   "  -V, --version      print the version\n"
		   "\nExit codes: 0 the controller went, 1 failed (stderr says why), 2 bad "
		   "arguments.\n");
}

int sh_engine_cli(int argc, char **argv, shoal_ext_init_fn init)
{
	static const struct option opts[] = {SH_CLI_STD,
					     {"socket", required_argument, NULL, 's'},
					     {"connect", required_argument, NULL, 'c'},
					     {"so", required_argument, NULL, 'l'},
					     {"store", required_argument, NULL, 'S'},
					     {"name", required_argument, NULL, 'n'},
					     {"die-with-parent", no_argument, NULL, 'p'},
					     {0}};
	optind = 1; /* a Python process may have parsed options its own way */
	python_engine = init != NULL;
	const sh_cli cli = {.prog = init ? "python3 -m shoal.engine" : "shoal-engine",
			    .usage = usage,
			    .opts = opts};
	sh_engine_cfg cfg = {.init = init};
	int o;
	while ((o = sh_cli_next(&cli, argc, argv)) != -1) {
		switch (o) {
		case 's':
			cfg.socket = optarg;
			break;
		case 'c':
			cfg.connect = optarg;
			break;
		case 'l':
			cfg.so = optarg;
			break;
		case 'S':
			cfg.store = optarg;
			break;
		case 'n':
			cfg.name = optarg;
			break;
		case 'p':
			cfg.with_parent = true;
			break;
		}
	}
	sh_cli_operands(&cli, argc, argv, 0, 0);
	if (!cfg.socket && !cfg.connect)
		sh_cli_fail(&cli, "--socket PATH or --connect HOST:PORT is required");
	if (cfg.socket && cfg.connect)
		sh_cli_fail(&cli, "--socket and --connect both name a controller: give one");
	if (!cfg.so && !init)
		sh_cli_fail(&cli, "--so LIBRARY.so is required");
	if (cfg.so && init)
		sh_cli_fail(&cli, "--so: a Python engine runs Python functions, not a library");
	/* "engine pid 1234 has no function f": a name that reads as one */
	char name[32];
	if (!cfg.name || !*cfg.name) {
		snprintf(name, sizeof(name), "pid %d", (int)getpid());
		cfg.name = name;
	}
	return sh_engine_main(&cfg);
}

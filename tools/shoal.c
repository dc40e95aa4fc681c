/* shoal: the command line. Each subcommand is one row of the command table
 * below (name, arguments, one line of help, handler); later layers add
 * theirs (put, get, ls, ...) there. Usage errors exit 2 and say what was
 * expected and what came. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/shoal.h>

#include "bench.h"

typedef struct command {
	const char *name;
	const char *args;
	const char *help;
	int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} command;

static int cmd_bench(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const command commands[] = {
	{"bench", "[SUITE|all] [--quick] [--json] [--csv FILE] [--plot FILE.svg] [--large]",
	 "run benchmarks; no SUITE runs every suite, quick", cmd_bench},
	{"help", "[COMMAND]", "show this help, or a command's", cmd_help},
	{"version", "", "print the version", cmd_version},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void list_commands(FILE *f)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "%s%s", i ? (i + 1 == NCOMMANDS ? " or " : ", ") : "", commands[i].name);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: shoal COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-8s %s\n           %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(f, "\nshoal --version prints the version; shoal help COMMAND shows a command.\n");
}

static void bench_usage(FILE *f)
{
	fprintf(f, "usage: shoal bench [SUITE|all] [options]\n\nsuites:\n");
	for (size_t i = 0; i < sh_bench_nsuites; i++)
		fprintf(f, "  %-8s %s\n", sh_bench_suites[i].name, sh_bench_suites[i].about);
	fprintf(f,
		"  all      every suite, at full size (with no SUITE: every suite, --quick)\n"
		"\noptions:\n%s",
		sh_bench_opts_usage);
}

static void list_suites(FILE *f)
{
	for (size_t i = 0; i < sh_bench_nsuites; i++)
		fprintf(f, "%s%s", sh_bench_suites[i].name, i + 1 < sh_bench_nsuites ? ", " : "");
	fprintf(f, " or all");
}

static int cmd_bench(int argc, char **argv)
{
	if (sh_bench_wants_help(argc, argv)) {
		bench_usage(stdout);
		return 0;
	}
	sh_bench_opts o;
	memset(&o, 0, sizeof(o));
	char *pos[1], err[256];
	int npos;
	if (sh_bench_parse_opts(argc, argv, 1, &o, pos, 1, &npos, err, sizeof(err)) != 0) {
		fprintf(stderr, "shoal bench: %s\n", err);
		fprintf(stderr, "(shoal bench --help lists suites and options)\n");
		return 2;
	}
	const sh_bench_suite *run[16];
	size_t n = 0;
	if (npos == 0 || strcmp(pos[0], "all") == 0) {
		/* The newcomer's first look (`make run`): everything, quick. */
		if (npos == 0)
			o.quick = 1;
		for (size_t i = 0; i < sh_bench_nsuites && n < 16; i++)
			run[n++] = &sh_bench_suites[i];
	} else {
		run[0] = sh_bench_find_suite(pos[0]);
		if (!run[0]) {
			fprintf(stderr, "shoal bench: unknown suite '%s' (expected ", pos[0]);
			list_suites(stderr);
			fprintf(stderr, ")\n");
			return 2;
		}
		n = 1;
	}
	return sh_bench_main(run, n, &o);
}

static int cmd_help(int argc, char **argv)
{
	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	const command *c = find_command(argv[1]);
	if (!c) {
		fprintf(stderr, "shoal help: unknown command '%s' (expected ", argv[1]);
		list_commands(stderr);
		fprintf(stderr, ")\n");
		return 2;
	}
	if (c->run == cmd_bench) {
		bench_usage(stdout);
		return 0;
	}
	printf("usage: shoal %s %s\n%s\n", c->name, c->args, c->help);
	return 0;
}

static int cmd_version(int argc, char **argv)
{
	if (argc > 1) {
		fprintf(stderr, "shoal version: takes no arguments, got '%s'\n", argv[1]);
		return 2;
	}
	printf("shoal %s\n", SHOAL_VERSION_STRING);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *name = argv[1];
	if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0)
		return cmd_version(1, argv + 1);
	if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
		return cmd_help(1, argv + 1);
	const command *c = find_command(name);
	if (!c) {
		fprintf(stderr, "shoal: unknown %s '%s' (expected a command: ",
			name[0] == '-' ? "option" : "command", name);
		list_commands(stderr);
		fprintf(stderr, ")\nrun 'shoal help' for usage\n");
		return 2;
	}
	return c->run(argc - 1, argv + 1);
}

/* What the programs under tools/ share: the command-line manner (cli.c),
 * the mains of the store daemon (shoald and `shoal daemon` are the same
 * program) and of a controller alone (daemon.c), the command lines of
 * shoal-ext and shoal-engine (ext_runner.c, engine.c, which the Python
 * module's extensions and engines run too), the default socket path, and
 * parsing of sizes. Exit codes are the same in every program. */
#ifndef SHOAL_TOOLS_H
#define SHOAL_TOOLS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <shoal/base.h>
#include <shoal/ext.h>

enum {
	SH_EXIT_OK = 0,
	SH_EXIT_FAIL = 1,     /* the operation failed; stderr says why */
	SH_EXIT_USAGE = 2,    /* bad arguments */
	SH_EXIT_NOTFOUND = 3, /* no such name or object */
	SH_EXIT_NOSTORE = 4,  /* no store at the socket */
	SH_EXIT_FULL = 5,     /* the store is full */
	SH_EXIT_INVALID = 6,  /* the input file is invalid */
	SH_EXIT_IO = 7,	      /* a file could not be read or written (or exists: --force) */
};

/* A program's (or a shoal command's) command line: its name in messages
 * ("shoald", "shoal get"), what --help prints (usage lines, a paragraph
 * on what it does, its options) and its getopt_long table, which must
 * hold SH_CLI_STD and end with {0}. */
typedef struct sh_cli {
	const char *prog;
	void (*usage)(FILE *f);
	const struct option *opts;
	bool stop_at_operand; /* options only before the first operand (shoal COMMAND) */
	/* Told a usage error's message before the exit (or NULL): shoal-ext
	 * passes it on to the host that started it. */
	void (*failed)(const char *msg);
} sh_cli;
/* --help and --version, for every table (one a line: clang-format would
 * brace them) */
// clang-format off
#define SH_CLI_STD \
	{"help", no_argument, NULL, 'h'}, \
	{"version", no_argument, NULL, 'V'}
// clang-format on

/* The next option of argv (its val, optarg its value), or -1 when only
 * operands are left (argv[optind] ..., options and operands may mix).
 * --help and -h print the usage to stdout, --version and -V "NAME
 * VERSION", and exit 0; an unknown option or one without its value exits
 * 2 with a line on stderr that names it and points to --help. */
int sh_cli_next(const sh_cli *c, int argc, char **argv);
/* Exits 2 unless min to max operands are left after the options. */
void sh_cli_operands(const sh_cli *c, int argc, char **argv, int min, int max);
/* "PROG: MESSAGE (see PROG --help)" on stderr, then exit 2. */
_Noreturn void sh_cli_fail(const sh_cli *c, const char *fmt, ...) SHOAL_PRINTF(2, 3);
/* val if it is one of accepted (NULL-terminated); else a usage error that
 * lists them: an option that decides how safe something is never falls
 * back to a default on a value it does not know. */
const char *sh_cli_choice(const sh_cli *c, const char *opt, const char *val,
			  const char *const *accepted);
/* Programs that serve (the daemon, the controller) say who comes and
 * goes: the log level is info unless $SHOAL_LOG says otherwise. */
void sh_tools_log_info(void);

/* $SHOAL_SOCKET, else shoald.sock in shoal_socket_dir() ($XDG_RUNTIME_DIR/shoal,
 * /run/shoal for root, /tmp/shoal-UID); exits when that directory is not
 * safe (another user's, open to others, a symlink). */
const char *sh_tools_default_socket(void);

/* "1024", "64K", "512M", "2G", "1T" (binary units) into *out; 0 or -1. */
int sh_tools_parse_size(const char *s, uint64_t *out);

/* Formats bytes as "1.5 GiB" into buf. */
const char *sh_tools_fmt_bytes(uint64_t v, char *buf, size_t len);

/* The store daemon: serves until SIGTERM or SIGINT. prog names it in
 * messages ("shoald" or "shoal daemon"). */
int sh_daemon_main(const char *prog, int argc, char **argv);

/* The extension runner (shoal-ext): its options, then the runner's main;
 * the process's exit code. init: an extension built into this process
 * (the Python module's), else NULL to load --so. */
int sh_ext_runner_cli(int argc, char **argv, shoal_ext_init_fn init);

/* The task engine (shoal-engine): its options, then the engine's main;
 * the process's exit code. init: functions built into this process (the
 * Python module's engine), else NULL to load --so. */
int sh_engine_cli(int argc, char **argv, shoal_ext_init_fn init);
/* `shoal controller`: a task controller alone, until SIGTERM or SIGINT. */
int sh_controller_main(const char *prog, int argc, char **argv);
/* `shoal cluster ARGS` (argv[0] is "cluster"): shoal/cluster.h's calls,
 * and `serve`, the supervisor they run. */
int sh_cluster_cli(int argc, char **argv);

#endif

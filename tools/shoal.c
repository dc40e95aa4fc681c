/* shoal: the command line. Each command is one row of the command table
 * below (name, arguments, one line, a paragraph, its options, handler);
 * every command parses its options with getopt_long through tools/lib
 * (sh_cli_next), so each answers --help, --version and a bad option the
 * same way. Exit codes are those of tools/lib/tools.h, the same for every
 * command: 0 ok, 1 failed, 2 bad arguments, 3 no such name, 4 no store, 5
 * store full, 6 invalid file, 7 a file could not be read or written.
 * Messages are in a user's words: the store's protocol stays out of them. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/shoal.h>

#include "bench.h"
#include "lib/tools.h"

typedef struct command {
	const char *name;
	const char *args;
	const char *help;		   /* one line, for the list of commands */
	const char *about;		   /* a paragraph, for its --help */
	const char *options;		   /* its options' lines, for its --help */
	int (*run)(int argc, char **argv); /* argv[0] is the command's name */
} command;

static int cmd_bench(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_daemon(int argc, char **argv);
static int cmd_controller(int argc, char **argv);
static int cmd_put(int argc, char **argv);
static int cmd_get(int argc, char **argv);
static int cmd_ls(int argc, char **argv);
static int cmd_info(int argc, char **argv);
static int cmd_rm(int argc, char **argv);
static int cmd_stat(int argc, char **argv);
static int cmd_migrate(int argc, char **argv);
static int cmd_cluster(int argc, char **argv);

#define STORE_OPTIONS                                                                        \
	"  --socket PATH     the store's socket (default: $SHOAL_SOCKET, else shoald.sock\n" \
	"                    in $XDG_RUNTIME_DIR/shoal, /run/shoal or /tmp/shoal-UID)\n"     \
	"  --server-uid UID  also trust a store served by this uid (by default only\n"       \
	"                    yours or root's)\n"

static const command commands[] = {
	{"bench", "[SUITE|all] [--quick] [--json] [--csv FILE] [--plot FILE.svg] [--large]",
	 "run benchmarks; no SUITE runs every suite, quick", NULL, NULL, cmd_bench},
	{"daemon", "[--socket PATH] [--size BYTES] [--reserve] [--group GROUP] [--tasks PATH]",
	 "serve an object store until SIGTERM (the same as shoald)", NULL, NULL, cmd_daemon},
	{"controller", "[--socket PATH] [--scheme S] [--tcp HOST:PORT]",
	 "serve a task controller until SIGTERM", NULL, NULL, cmd_controller},
	{"put", "FILE.safetensors --name NAME [--replace] [--socket PATH] [--server-uid UID]",
	 "import a safetensors file as a persistent tensor_dict",
	 "Checks FILE.safetensors (header, dtypes, shapes, offsets) and imports its tensors "
	 "into the store as one tensor_dict object bound to NAME, which outlives this "
	 "command. Prints the name and the object's id.",
	 "  --name NAME       the name to bind (required)\n"
	 "  --replace         bind NAME even if it is taken (the old object goes once its\n"
	 "                    readers release it)\n" STORE_OPTIONS,
	 cmd_put},
	{"get",
	 "NAME --out FILE.safetensors [--force] [--from HOST:PORT] [--socket PATH] "
	 "[--server-uid UID]",
	 "export a tensor_dict as a safetensors file",
	 "Writes the tensor_dict bound to NAME as a safetensors file, laid out as the "
	 "reference writer does. An existing file is kept unless --force is given. With "
	 "--from, the store first copies it from the store at HOST:PORT (as shoal migrate; "
	 "on a terminal a progress bar shows bytes, rate and time left once it lasts a "
	 "second).",
	 "  --out FILE        the file to write (required)\n"
	 "  --force           overwrite FILE if it exists\n"
	 "  --from HOST:PORT  copy it from that store first (shoald --peer there)\n" STORE_OPTIONS,
	 cmd_get},
	{"ls", "[PREFIX] [--socket PATH] [--server-uid UID]", "list names: name, type, bytes, id",
	 "Lists the names bound in the store (those starting with PREFIX), one a line: name, "
	 "type, size and object id.",
	 STORE_OPTIONS, cmd_ls},
	{"info", "NAME [--socket PATH] [--server-uid UID]",
	 "describe an object: type, id, size, fields, members",
	 "Describes the object bound to NAME: its type, id, signature, size, fields and "
	 "members (the first 20; tensors with their dtype and shape).",
	 STORE_OPTIONS, cmd_info},
	{"rm", "NAME... [--socket PATH] [--server-uid UID]",
	 "delete objects (readers keep theirs until released)",
	 "Unbinds each NAME and deletes its object; processes that hold it keep reading it "
	 "until they release it.",
	 STORE_OPTIONS, cmd_rm},
	{"stat", "[--socket PATH|tcp://HOST:PORT] [--server-uid UID]",
	 "a store (capacity, used, objects) or a task controller (engines, tasks)",
	 "Shows what serves the socket. A store: capacity, bytes used, objects, names and "
	 "clients. A task controller (a unix socket or tcp://HOST:PORT, with the secret in "
	 "$SHOAL_SECRET_FILE or $SHOAL_SECRET): its engines (number, where, tasks in flight), "
	 "clients, and tasks queued, running, done, retried and failed.",
	 STORE_OPTIONS, cmd_stat},
	{"migrate", "NAME|ID --from HOST:PORT [--timeout SECONDS] [--socket PATH]",
	 "copy an object of another host's store into this one",
	 "Makes the store copy the object bound to NAME (or the object ID, in hex) from the "
	 "store at HOST:PORT (a shoald started with --peer HOST:PORT, which knows the same "
	 "secret: $SHOAL_SECRET_FILE or $SHOAL_SECRET in both daemons' environments) into its "
	 "own shared memory, under the same id, signature and name: later gets here are local. "
	 "On a terminal a progress bar shows bytes, rate and time left once it lasts a second. "
	 "Prints the id.",
	 "  --from HOST:PORT  the store that has the object (required)\n"
	 "  --timeout SECONDS give up waiting after this long (default 600; the copy goes\n"
	 "                    on in the store)\n" STORE_OPTIONS,
	 cmd_migrate},
	{"cluster", "start|status|add|stop [-n N] [--launcher local|mpi|ssh|slurm] ...",
	 "start a controller and engines through a launcher; status, add, stop", NULL, NULL,
	 cmd_cluster},
	{"help", "[COMMAND]", "show this help, or a command's",
	 "Lists the commands, or shows one command's usage, as COMMAND --help does.", "", cmd_help},
	{"version", "", "print the version", "Prints \"shoal VERSION\".", "", cmd_version},
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

/* text, wrapped at 79 columns */
static void print_wrapped(FILE *f, const char *text)
{
	size_t col = 0;
	while (*text) {
		size_t w = strcspn(text, " ");
		if (col && col + 1 + w > 79) {
			fputc('\n', f);
			col = 0;
		} else if (col) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", (int)w, text);
		col += w;
		text += w;
		text += strspn(text, " ");
	}
	fputc('\n', f);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: shoal [--help|--version] COMMAND [ARGS]\n\n");
	print_wrapped(f, "shoal runs the benchmarks, serves and uses a shared-memory object "
			 "store, and serves or inspects a task controller. Each command "
			 "answers --help.");
	fprintf(f, "\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-10s %s\n             %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(f, "\nExit codes: 0 ok, 1 failed, 2 bad arguments, 3 no such name, 4 no store "
		   "at the socket,\n5 store full, 6 invalid input file, 7 a file could not be "
		   "read or written.\n");
}

/* The command being run, whose usage --help prints. */
static const command *current;
static char current_prog[32];

static void command_usage(FILE *f)
{
	const command *c = current;
	fprintf(f, "usage: shoal %s %s\n\n", c->name, c->args);
	print_wrapped(f, c->about);
	fprintf(f, "\noptions:\n%s", c->options);
	fprintf(f, "  -h, --help        show this help\n"
		   "  -V, --version     print the version\n");
}

static sh_cli cli_of(const command *c, const struct option *opts)
{
	current = c;
	snprintf(current_prog, sizeof(current_prog), "shoal %s", c->name);
	return (sh_cli){.prog = current_prog, .usage = command_usage, .opts = opts};
}

static void bench_usage(FILE *f)
{
	fprintf(f, "usage: shoal bench [SUITE|all] [options]\n\n"
		   "Runs benchmark suites and prints their tables (or JSON); with no SUITE, "
		   "every suite at its quick size.\n\nsuites:\n");
	for (size_t i = 0; i < sh_bench_nsuites; i++)
		fprintf(f, "  %-8s %s\n", sh_bench_suites[i].name, sh_bench_suites[i].about);
	fprintf(f,
		"  all      every suite, at full size (with no SUITE: every suite, --quick)\n"
		"\noptions:\n%s  -V, --version   print the version\n",
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
	sh_cli cli = {.prog = "shoal bench", .usage = bench_usage, .opts = sh_bench_options};
	sh_bench_opts o;
	sh_bench_parse_opts(&cli, argc, argv, &o);
	sh_cli_operands(&cli, argc, argv, 0, 1);
	char **pos = argv + optind;
	int npos = argc - optind;
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
	static const struct option opts[] = {SH_CLI_STD, {0}};
	sh_cli cli = cli_of(find_command("help"), opts);
	while (sh_cli_next(&cli, argc, argv) != -1)
		;
	sh_cli_operands(&cli, argc, argv, 0, 1);
	if (optind == argc) {
		usage(stdout);
		return 0;
	}
	const command *c = find_command(argv[optind]);
	if (!c) {
		fprintf(stderr, "shoal help: unknown command '%s' (expected ", argv[optind]);
		list_commands(stderr);
		fprintf(stderr, ")\n");
		return 2;
	}
	/* as COMMAND --help */
	char *a[] = {(char *)c->name, "--help", NULL};
	return c->run(2, a);
}

static int cmd_version(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD, {0}};
	sh_cli cli = cli_of(find_command("version"), opts);
	while (sh_cli_next(&cli, argc, argv) != -1)
		;
	sh_cli_operands(&cli, argc, argv, 0, 0);
	printf("shoal %s\n", SHOAL_VERSION_STRING);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD, {0}};
	const sh_cli cli = {.prog = "shoal", .usage = usage, .opts = opts, .stop_at_operand = true};
	while (sh_cli_next(&cli, argc, argv) != -1)
		;
	if (optind >= argc) {
		usage(stderr);
		return SH_EXIT_USAGE;
	}
	const char *name = argv[optind];
	const command *c = find_command(name);
	if (!c) {
		fprintf(stderr, "shoal: unknown command '%s' (expected a command: ", name);
		list_commands(stderr);
		fprintf(stderr, ")\nrun 'shoal help' for usage\n");
		return SH_EXIT_USAGE;
	}
	return c->run(argc - optind, argv + optind);
}

/* ---- store commands ---- */

static int cmd_controller(int argc, char **argv)
{
	return sh_controller_main("shoal controller", argc, argv);
}

static int cmd_cluster(int argc, char **argv)
{
	return sh_cluster_cli(argc, argv);
}

static int cmd_daemon(int argc, char **argv)
{
	return sh_daemon_main("shoal daemon", argc, argv);
}

/* The options every store command takes (kept one a line: clang-format
 * would brace them). */
// clang-format off
#define STORE_OPTS \
	{"socket", required_argument, NULL, 'S'}, \
	{"server-uid", required_argument, NULL, 'U'}
// clang-format on

typedef struct store_args {
	const char *socket;
	uid_t server_uid; /* a store of this uid is trusted too */
} store_args;

static void store_args_init(store_args *a)
{
	a->socket = NULL;
	a->server_uid = (uid_t)-1;
}

/* o, an option sh_cli_next returned: true when it was one of STORE_OPTS. */
static bool store_opt(const sh_cli *cli, int o, store_args *a)
{
	if (o == 'S') {
		a->socket = optarg;
		return true;
	}
	if (o != 'U')
		return false;
	char *end;
	errno = 0;
	unsigned long u = strtoul(optarg, &end, 10);
	if (errno || *end || end == optarg || optarg[0] == '-' || u >= (uid_t)-1)
		sh_cli_fail(cli, "--server-uid expects a numeric uid, got '%s'", optarg);
	a->server_uid = (uid_t)u;
	return true;
}

/* After the options: the default socket only when none is named (its
 * directory is checked then). */
static void store_args_done(store_args *a)
{
	if (!a->socket)
		a->socket = sh_tools_default_socket();
}

/* A command's options beyond STORE_OPTS: none. */
static void store_only(const sh_cli *cli, int argc, char **argv, store_args *a)
{
	int o;
	store_args_init(a);
	while ((o = sh_cli_next(cli, argc, argv)) != -1)
		if (!store_opt(cli, o, a))
			sh_cli_fail(cli, "option '%c' is not handled", o);
	store_args_done(a);
}

/* Text that came from the store or a file (names, types, fields, the
 * store's messages) as the terminal gets it: whoever named an object, wrote
 * a tensor name or serves the socket must not drive the terminal, so
 * control bytes (C0, DEL, C1) and bytes that are not UTF-8 are shown as
 * \xNN. Cut to fit buf (cap > 4). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	if (s[0] < 0x80)
		return 1;
	size_t k = s[0] >= 0xc2 && s[0] <= 0xdf	  ? 2
		   : s[0] >= 0xe0 && s[0] <= 0xef ? 3
		   : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
						  : 0;
	if (k == 0 || n < k)
		return 0;
	for (size_t i = 1; i < k; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* overlong forms, surrogates and past U+10FFFF */
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
		return 0;
	return k;
}

static const char *shown(char *buf, size_t cap, const char *text, size_t n)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		size_t k = utf8_len(s + i, n - i);
		bool ctl =
			s[i] < 0x20 || s[i] == 0x7f || (k == 2 && s[i] == 0xc2 && s[i + 1] < 0xa0);
		if (k == 0 || ctl) {
			if (o + 4 >= cap)
				break;
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", s[i]);
			i++;
			continue;
		}
		if (o + k >= cap)
			break;
		memcpy(buf + o, s + i, k);
		o += k;
		i += k;
	}
	buf[o] = 0;
	return buf;
}

/* shown() of a C string, into one of a few rotating buffers, so that a
 * printf may show several. */
static const char *show(const char *text)
{
	static char bufs[4][4 * 4096 + 8];
	static unsigned next;
	char *b = bufs[next++ % 4];
	return shown(b, sizeof(bufs[0]), text ? text : "", text ? strlen(text) : 0);
}

static int exit_code(int rc)
{
	switch (rc) {
	case 0:
		return SH_EXIT_OK;
	case SHOAL_ENOENT:
		return SH_EXIT_NOTFOUND;
	case SHOAL_ENOSPC:
		return SH_EXIT_FULL;
	case SHOAL_EBADMSG:
		return SH_EXIT_INVALID;
	default:
		return SH_EXIT_FAIL;
	}
}

/* A failure of a file of the user's (opening, reading, writing it), not
 * of the store: its code is 7 whatever errno says (a missing directory
 * is not a missing name). ENOSPC is not here: for put it is the store's
 * (5); get counts it as the file's. */
static bool file_error(int rc)
{
	switch (rc) {
	case SHOAL_ENOENT:
	case SHOAL_EACCES:
	case SHOAL_EPERM:
	case SHOAL_EIO:
	case SHOAL_ENAMETOOLONG:
	case -ENOTDIR:
	case -EISDIR:
	case -EROFS:
	case -ENXIO:
	case -EDQUOT:
	case -EFBIG:
	case -ELOOP:
		return true;
	default:
		return false;
	}
}

/* The store's message in a user's words: its replies open with the
 * request's name ("SEAL: ...", "GET reply: ..."), which is the protocol's,
 * not the user's. */
static const char *user_words(const char *msg)
{
	size_t n = 0;
	while (msg[n] >= 'A' && msg[n] <= 'Z')
		n++;
	if (n >= 2 && msg[n] == ':' && msg[n + 1] == ' ')
		return msg + n + 2;
	if (n >= 2 && !strncmp(msg + n, " reply: ", 8))
		return msg + n + 8;
	return msg;
}

static int fail(const char *cmd, shoal_client *c, int rc)
{
	const char *msg = c ? shoal_client_error(c) : "";
	fprintf(stderr, "shoal %s: %s\n", cmd,
		show(msg && *msg ? user_words(msg) : shoal_strerror(rc)));
	return exit_code(rc);
}

/* The object bound to name: its id, or the store's error. */
static int lookup(shoal_client *c, const char *name, shoal_id *id)
{
	shoal_object *o;
	int rc = shoal_get_by_name(c, name, &o);
	if (rc == 0) {
		*id = shoal_object_id(o);
		shoal_object_release(o);
	}
	return rc;
}

/* Why there is no store to talk to at a's socket (rc, from connecting),
 * said; its exit code. */
static int no_store(const char *cmd, const store_args *a, int rc)
{
	if (rc == SHOAL_EACCES)
		fprintf(stderr,
			"shoal %s: %s is not served by you or root (see above); not connecting. "
			"Name its uid with --server-uid if you trust it\n",
			cmd, a->socket);
	else
		fprintf(stderr, "shoal %s: no store at %s (%s); start one with `shoal daemon`\n",
			cmd, a->socket, shoal_strerror(rc));
	return SH_EXIT_NOSTORE;
}

static int store_connect(shoal_client **c, const store_args *a)
{
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	o.server_uid = a->server_uid;
	return shoal_connect_with(c, a->socket, &o);
}

static shoal_client *connect_or_die(const char *cmd, const store_args *a, int *code)
{
	shoal_client *c;
	int rc = store_connect(&c, a);
	if (rc) {
		*code = no_store(cmd, a, rc);
		return NULL;
	}
	return c;
}

static int cmd_put(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD,
					     STORE_OPTS,
					     {"name", required_argument, NULL, 'n'},
					     {"replace", no_argument, NULL, 'r'},
					     {0}};
	sh_cli cli = cli_of(find_command("put"), opts);
	store_args a;
	store_args_init(&a);
	const char *name = NULL;
	bool replace = false;
	int o;
	while ((o = sh_cli_next(&cli, argc, argv)) != -1) {
		if (store_opt(&cli, o, &a))
			continue;
		if (o == 'n')
			name = optarg;
		else
			replace = true;
	}
	sh_cli_operands(&cli, argc, argv, 1, 1);
	const char *file = argv[optind];
	if (!name || !*name)
		sh_cli_fail(&cli, "--name NAME is required");
	store_args_done(&a);
	int code;
	shoal_client *c = connect_or_die("put", &a, &code);
	if (!c)
		return code;
	shoal_id id;
	int rc = shoal_import_safetensors(c, file, name,
					  SHOAL_PERSIST | (replace ? SHOAL_REPLACE : 0), &id);
	if (rc == SHOAL_EEXIST) {
		fprintf(stderr,
			"shoal put: the name %s is taken (by object %016" PRIx64 "); `shoal put %s "
			"--name %s --replace` binds it to this file instead, `shoal rm %s` frees "
			"it\n",
			show(name), lookup(c, name, &id) == 0 ? id : 0, show(file), show(name),
			show(name));
		code = SH_EXIT_FAIL;
	} else if (rc) {
		code = fail("put", c, rc);
		/* a name need not exist to be bound: a failure of the file's */
		if (file_error(rc))
			code = SH_EXIT_IO;
	}
	if (rc) {
		shoal_disconnect(c);
		return code;
	}
	printf("%s %016" PRIx64 "\n", show(name), id);
	shoal_disconnect(c);
	return SH_EXIT_OK;
}

/* get's file: a new one, unless force; an existing file that is not a
 * regular one (a FIFO, /dev/stdout) is written as it is. *made: we
 * created it (and remove it if the export fails). 0 or an exit code. */
static int claim_out(const char *path, bool force, bool *made)
{
	*made = false;
	if (force)
		return 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
	if (fd >= 0) {
		close(fd);
		*made = true;
		return 0;
	}
	struct stat st;
	if (errno == EEXIST && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return 0;
	if (errno == EEXIST) {
		fprintf(stderr, "shoal get: %s exists; --force overwrites it\n", show(path));
		return SH_EXIT_IO;
	}
	fprintf(stderr, "shoal get: cannot write %s: %s\n", show(path), strerror(errno));
	return SH_EXIT_IO;
}

/* The progress bar of a copy from another store (shoal migrate, shoal get
 * --from), on a terminal only, once the copy has lasted a second. */
typedef struct mig_bar {
	int64_t start;
	bool shown;
} mig_bar;

static void mig_progress(void *arg, uint64_t got, uint64_t total)
{
	mig_bar *b = arg;
	double s = (double)(shoal_now_ns() - b->start) / 1e9;
	if (s < 1 && !b->shown)
		return;
	double rate = s > 0 ? (double)got / s : 0;
	char g[32], t[32], r[32], eta[32] = "?";
	int width = 30, fill = total ? (int)((double)got / (double)total * width) : 0;
	if (rate > 0 && total >= got)
		snprintf(eta, sizeof(eta), "%.0f s", (double)(total - got) / rate);
	char bar[64];
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[width] = 0;
	fprintf(stderr, "\r[%s] %s of %s  %s/s  %s left   ", bar,
		sh_tools_fmt_bytes(got, g, sizeof(g)), sh_tools_fmt_bytes(total, t, sizeof(t)),
		sh_tools_fmt_bytes((uint64_t)rate, r, sizeof(r)), eta);
	b->shown = true;
}

/* Copies key (a name, or an id in hex) from the store at from into c's,
 * with the bar: 0 or the error (c's message says why). */
static int migrate_shown(shoal_client *c, const char *key, const char *from, shoal_id *out)
{
	/* an id is 16 hex digits; anything else is a name */
	shoal_id id = 0;
	if (strlen(key) == 16 && strspn(key, "0123456789abcdefABCDEF") == 16)
		id = strtoull(key, NULL, 16);
	mig_bar bar = {.start = shoal_now_ns()};
	shoal_migrate_opts mo = {.from = from};
	if (isatty(STDERR_FILENO)) {
		mo.progress = mig_progress;
		mo.progress_arg = &bar;
	}
	int rc = shoal_migrate(c, id ? NULL : key, id, &mo, out);
	if (bar.shown)
		fputc('\n', stderr);
	return rc;
}

static int cmd_get(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD,
					     STORE_OPTS,
					     {"out", required_argument, NULL, 'o'},
					     {"force", no_argument, NULL, 'f'},
					     {"from", required_argument, NULL, 'F'},
					     {0}};
	sh_cli cli = cli_of(find_command("get"), opts);
	store_args a;
	store_args_init(&a);
	const char *out = NULL, *from = NULL;
	bool force = false;
	int o;
	while ((o = sh_cli_next(&cli, argc, argv)) != -1) {
		if (store_opt(&cli, o, &a))
			continue;
		if (o == 'o')
			out = optarg;
		else if (o == 'F')
			from = optarg;
		else
			force = true;
	}
	sh_cli_operands(&cli, argc, argv, 1, 1);
	const char *name = argv[optind];
	if (!out || !*out)
		sh_cli_fail(&cli, "--out FILE is required");
	store_args_done(&a);
	int code;
	shoal_client *c = connect_or_die("get", &a, &code);
	if (!c)
		return code;
	/* The name first: a missing one is 3, a file we cannot write 7. */
	shoal_id id;
	int rc = 0;
	if (from) { /* copied here first; it lasts as long as it takes */
		shoal_client_set_timeout(c, SHOAL_FOREVER);
		rc = migrate_shown(c, name, from, &id);
	}
	if (rc == 0)
		rc = lookup(c, name, &id);
	bool made = false;
	if (rc) {
		code = fail("get", c, rc);
	} else if ((code = claim_out(out, force, &made)) == 0 &&
		   (rc = shoal_export_safetensors(c, name, out)) != 0) {
		code = fail("get", c, rc);
		if ((file_error(rc) || rc == SHOAL_ENOSPC) && rc != SHOAL_ENOENT)
			code = SH_EXIT_IO;
		/* ENOENT now: the file's directory, or the name gone meanwhile */
		if (rc == SHOAL_ENOENT)
			code = lookup(c, name, &id) == 0 ? SH_EXIT_IO : SH_EXIT_NOTFOUND;
	}
	if (code && made)
		unlink(out);
	shoal_disconnect(c);
	return code;
}

static int print_entry(const shoal_entry *e, void *ctx)
{
	char b[32];
	(void)ctx;
	printf("%-40s %-12s %10s  %016" PRIx64 "\n", show(e->name), show(e->type),
	       sh_tools_fmt_bytes(e->bytes, b, sizeof(b)), e->id);
	return 0;
}

static int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD, STORE_OPTS, {0}};
	sh_cli cli = cli_of(find_command("ls"), opts);
	store_args a;
	store_only(&cli, argc, argv, &a);
	sh_cli_operands(&cli, argc, argv, 0, 1);
	const char *prefix = optind < argc ? argv[optind] : "";
	int code;
	shoal_client *c = connect_or_die("ls", &a, &code);
	if (!c)
		return code;
	int rc = shoal_list(c, prefix, print_entry, NULL);
	code = rc ? fail("ls", c, rc) : SH_EXIT_OK;
	shoal_disconnect(c);
	return code;
}

static void print_fields(const shoal_node *n)
{
	size_t nf = shoal_node_nfields(n);
	for (size_t i = 0; i < nf; i++) {
		const char *k = shoal_node_field_name(n, i), *sv;
		int64_t iv;
		double fv;
		bool bv;
		size_t len, cnt;
		int64_t ints[SHOAL_TENSOR_MAX_DIMS];
		char b[4 * 200 + 8];
		printf("  %s = ", show(k));
		if (shoal_node_get_str(n, k, &sv, &len) == 0)
			printf("\"%s\"\n", shown(b, sizeof(b), sv, len > 200 ? 200 : len));
		else if (shoal_node_get_int(n, k, &iv) == 0)
			printf("%" PRId64 "\n", iv);
		else if (shoal_node_get_float(n, k, &fv) == 0)
			printf("%g\n", fv);
		else if (shoal_node_get_bool(n, k, &bv) == 0)
			printf("%s\n", bv ? "true" : "false");
		else if (shoal_node_get_ints(n, k, ints, SHOAL_TENSOR_MAX_DIMS, &cnt) == 0) {
			for (size_t j = 0; j < cnt; j++)
				printf("%s%" PRId64, j ? ", " : "[", ints[j]);
			printf("%s\n", cnt ? "]" : "[]");
		} else
			printf("(%s)\n", cnt > SHOAL_TENSOR_MAX_DIMS ? "a long int array" : "nil");
	}
}

static int cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD, STORE_OPTS, {0}};
	sh_cli cli = cli_of(find_command("info"), opts);
	store_args a;
	store_only(&cli, argc, argv, &a);
	sh_cli_operands(&cli, argc, argv, 1, 1);
	const char *name = argv[optind];
	int code;
	shoal_client *c = connect_or_die("info", &a, &code);
	if (!c)
		return code;
	shoal_object *o;
	int rc = shoal_get_by_name(c, name, &o);
	if (rc) {
		code = fail("info", c, rc);
		shoal_disconnect(c);
		return code;
	}
	const shoal_node *r = shoal_object_root(o);
	char b[32];
	printf("name:      %s\ntype:      %s\nid:        %016" PRIx64 "\nsignature: %016" PRIx64
	       "\nbytes:     %" PRIu64 " (%s)\n",
	       show(name), show(shoal_node_type(r)), shoal_object_id(o), shoal_object_signature(o),
	       shoal_object_bytes(o), sh_tools_fmt_bytes(shoal_object_bytes(o), b, sizeof(b)));
	if (shoal_node_nfields(r)) {
		printf("fields:\n");
		print_fields(r);
	}
	size_t nm = shoal_node_nmembers(r);
	printf("members:   %zu\n", nm);
	for (size_t i = 0; i < nm && i < 20; i++) {
		const char *mname;
		const shoal_node *m = shoal_node_member(r, i, &mname);
		shoal_tensor t;
		if (shoal_node_tensor(m, &t) == 0) {
			printf("  %-50s %-5s [", show(mname), shoal_dtype_name(t.dtype));
			for (int d = 0; d < t.ndim; d++)
				printf("%s%" PRId64, d ? ", " : "", t.shape[d]);
			printf("]\n");
		} else {
			printf("  %-50s %s\n", show(mname), show(shoal_node_type(m)));
		}
	}
	if (nm > 20)
		printf("  ... %zu more\n", nm - 20);
	shoal_object_release(o);
	shoal_disconnect(c);
	return SH_EXIT_OK;
}

static int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD, STORE_OPTS, {0}};
	sh_cli cli = cli_of(find_command("rm"), opts);
	store_args a;
	store_only(&cli, argc, argv, &a);
	sh_cli_operands(&cli, argc, argv, 1, 1 << 20);
	int code;
	shoal_client *c = connect_or_die("rm", &a, &code);
	if (!c)
		return code;
	code = SH_EXIT_OK;
	for (int i = optind; i < argc; i++) {
		int rc = shoal_delete(c, argv[i]);
		if (rc)
			code = fail("rm", c, rc);
	}
	shoal_disconnect(c);
	return code;
}

/* shoal stat on a task controller: its figures and its engines. */
static int controller_stat(const char *where)
{
	shoal_farm *f;
	int rc = shoal_farm_connect_until(&f, where, shoal_deadline_in(5 * 1000000000LL));
	if (rc) {
		fprintf(stderr, "shoal stat: no store or task controller at %s (%s)\n", show(where),
			shoal_strerror(rc));
		return SH_EXIT_NOSTORE;
	}
	shoal_controller_stat st;
	shoal_farm_engine eng[256];
	uint32_t n = 0;
	rc = shoal_farm_stat(f, &st, eng, 256, &n, shoal_deadline_in(5 * 1000000000LL));
	if (rc) {
		fprintf(stderr, "shoal stat: the task controller at %s: %s\n", show(where),
			show(shoal_farm_error(f)));
		shoal_farm_close(f);
		return SH_EXIT_FAIL;
	}
	char b1[32], b2[32];
	printf("task controller at %s\nengines:   %" PRIu32 "\nclients:   %" PRIu32
	       " (besides this one)\nqueued:    %" PRIu64
	       " (waiting for an engine)\nrunning:   %" PRIu64 "\ndone:      %" PRIu64
	       "\nretried:   %" PRIu64 "\nfailed:    %" PRIu64
	       "\nheld:      %s (large tasks' bytes; at most %s)\n",
	       show(where), st.engines, st.clients ? st.clients - 1 : 0, st.queued, st.running,
	       st.done, st.retried, st.failed, sh_tools_fmt_bytes(st.held_bytes, b1, sizeof(b1)),
	       sh_tools_fmt_bytes(st.held_peak, b2, sizeof(b2)));
	if (n)
		printf("\n  engine  where                          in flight\n");
	for (uint32_t i = 0; i < n && i < 256; i++)
		printf("  %6" PRIu32 "  %-30s %9" PRIu32 "\n", eng[i].num, show(eng[i].peer),
		       eng[i].inflight);
	if (n > 256)
		printf("  ... %" PRIu32 " more\n", n - 256);
	if (st.engines == 0)
		printf("\nno engine is connected: tasks wait until one is (shoal-engine --socket "
		       "%s --so LIBRARY.so)\n",
		       show(where));
	shoal_farm_close(f);
	return SH_EXIT_OK;
}

static int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD, STORE_OPTS, {0}};
	sh_cli cli = cli_of(find_command("stat"), opts);
	store_args a;
	store_only(&cli, argc, argv, &a);
	sh_cli_operands(&cli, argc, argv, 0, 0);
	if (!strncmp(a.socket, "tcp://", 6))
		return controller_stat(a.socket);
	/* A socket whose server answers the store's hello as something else
	 * may be a task controller's. */
	shoal_client *c;
	int rc = store_connect(&c, &a);
	if (rc == SHOAL_EPROTO)
		return controller_stat(a.socket);
	if (rc)
		return no_store("stat", &a, rc);
	int code;
	shoal_store_stat st;
	rc = shoal_store_stat_get(c, &st);
	if (rc) {
		code = fail("stat", c, rc);
		shoal_disconnect(c);
		return code;
	}
	char b1[32], b2[32];
	printf("socket:    %s\ncapacity:  %" PRIu64 " (%s)\nused:      %" PRIu64
	       " (%s)\nobjects:   %" PRIu64 "\nnames:     %" PRIu64 "\nclients:   %" PRIu64
	       " (besides this one)\npending:   %" PRIu64 " (deleted, waiting for readers)\n",
	       a.socket, st.capacity, sh_tools_fmt_bytes(st.capacity, b1, sizeof(b1)), st.used,
	       sh_tools_fmt_bytes(st.used, b2, sizeof(b2)), st.objects, st.names, st.clients - 1,
	       st.pending_frees);
	char b3[32], b4[32];
	printf("sent:      %" PRIu64 " objects (%s) to other hosts' stores\nfetched:   %" PRIu64
	       " objects (%s) from them, %" PRIu64 " on their way\n",
	       st.sent, sh_tools_fmt_bytes(st.sent_bytes, b3, sizeof(b3)), st.fetched,
	       sh_tools_fmt_bytes(st.fetched_bytes, b4, sizeof(b4)), st.migrating);
	if (st.incoming_total) {
		char b5[32], b6[32], b7[32];
		printf("coming:    %s of %s, at %s/s\n",
		       sh_tools_fmt_bytes(st.incoming_bytes, b5, sizeof(b5)),
		       sh_tools_fmt_bytes(st.incoming_total, b6, sizeof(b6)),
		       sh_tools_fmt_bytes(st.incoming_rate, b7, sizeof(b7)));
	}
	char b8[32];
	printf("spares:    %s ready (pages allocated ahead for puts and copies)\n",
	       sh_tools_fmt_bytes(st.spare_bytes, b8, sizeof(b8)));
	printf("pages:     %s (%s)\n", shoal_pages_name(st.pages), st.pages_why);
	if (st.spill_file_bytes || st.spilled) {
		char c1[32], c2[32], c3[32], c4[32], c5[32], c6[32];
		printf("spill:     %" PRIu64 " objects (%s) on disk only, %s of files\n"
		       "           %" PRIu64 " spilled (%s, %s/s), %" PRIu64
		       " restored (%s, %s/s)\n",
		       st.spill_objects, sh_tools_fmt_bytes(st.spill_bytes, c1, sizeof(c1)),
		       sh_tools_fmt_bytes(st.spill_file_bytes, c2, sizeof(c2)), st.spilled,
		       sh_tools_fmt_bytes(st.spilled_bytes, c3, sizeof(c3)),
		       sh_tools_fmt_bytes(st.spill_rate, c4, sizeof(c4)), st.restored,
		       sh_tools_fmt_bytes(st.restored_bytes, c5, sizeof(c5)),
		       sh_tools_fmt_bytes(st.restore_rate, c6, sizeof(c6)));
	}
	if (st.registry)
		printf("cluster:   %" PRIu64 " stores; etcd %s\n", st.peers,
		       st.registry == 1 ? "answers"
					: "does not answer (names of the cluster fail)");
	shoal_disconnect(c);
	return SH_EXIT_OK;
}

static int cmd_migrate(int argc, char **argv)
{
	static const struct option opts[] = {SH_CLI_STD,
					     STORE_OPTS,
					     {"from", required_argument, NULL, 'f'},
					     {"timeout", required_argument, NULL, 't'},
					     {0}};
	sh_cli cli = cli_of(find_command("migrate"), opts);
	store_args a;
	store_args_init(&a);
	const char *from = NULL;
	double timeout = 600;
	int o;
	while ((o = sh_cli_next(&cli, argc, argv)) != -1) {
		if (store_opt(&cli, o, &a))
			continue;
		if (o == 'f') {
			from = optarg;
		} else if (o == 't') {
			char *end;
			timeout = strtod(optarg, &end);
			if (*end || end == optarg || !(timeout > 0) || timeout > 1e6)
				sh_cli_fail(
					&cli,
					"--timeout '%s': expected seconds, more than 0, like 600",
					optarg);
		}
	}
	sh_cli_operands(&cli, argc, argv, 1, 1);
	if (!from)
		sh_cli_fail(&cli, "--from HOST:PORT is required: the store that has the object");
	const char *key = argv[optind];
	int code;
	shoal_client *c = connect_or_die("migrate", &a, &code);
	if (!c)
		return code;
	shoal_client_set_timeout(c, (int64_t)(timeout * 1e9));
	shoal_id out;
	int rc = migrate_shown(c, key, from, &out);
	if (rc) {
		code = fail("migrate", c, rc);
	} else {
		printf("%016" PRIx64 "\n", out);
		code = SH_EXIT_OK;
	}
	shoal_disconnect(c);
	return code;
}

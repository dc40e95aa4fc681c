/* shoal: the command line. Each subcommand is one row of the command table
 * below (name, arguments, one line of help, handler). Exit codes are those
 * of tools/lib/tools.h, the same for every command: 0 ok, 1 failed, 2 bad
 * arguments, 3 no such name, 4 no store, 5 store full, 6 invalid file.
 * Usage errors say what was expected and what came. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/shoal.h>

#include "bench.h"
#include "lib/tools.h"

typedef struct command {
	const char *name;
	const char *args;
	const char *help;
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

static const command commands[] = {
	{"bench", "[SUITE|all] [--quick] [--json] [--csv FILE] [--plot FILE.svg] [--large]",
	 "run benchmarks; no SUITE runs every suite, quick", cmd_bench},
	{"daemon", "[--socket PATH] [--size BYTES] [--reserve] [--group GROUP]",
	 "serve an object store until SIGTERM (the same as shoald)", cmd_daemon},
	{"controller", "[--socket PATH] [--scheme S] [--tcp HOST:PORT]",
	 "serve a task controller until SIGTERM", cmd_controller},
	{"put", "FILE.safetensors --name NAME [--replace] [--socket PATH] [--server-uid UID]",
	 "import a safetensors file as a persistent tensor_dict", cmd_put},
	{"get", "NAME --out FILE.safetensors [--socket PATH] [--server-uid UID]",
	 "export a tensor_dict as a safetensors file", cmd_get},
	{"ls", "[PREFIX] [--socket PATH] [--server-uid UID]", "list names: name, type, bytes, id",
	 cmd_ls},
	{"info", "NAME [--socket PATH] [--server-uid UID]",
	 "describe an object: type, id, size, fields, members", cmd_info},
	{"rm", "NAME... [--socket PATH] [--server-uid UID]",
	 "delete objects (readers keep theirs until released)", cmd_rm},
	{"stat", "[--socket PATH] [--server-uid UID]",
	 "the store: capacity, used, objects, names, clients", cmd_stat},
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

/* ---- store commands ---- */

static int cmd_controller(int argc, char **argv)
{
	return sh_controller_main("shoal controller", argc, argv);
}

static int cmd_daemon(int argc, char **argv)
{
	return sh_daemon_main("shoal daemon", argc, argv);
}

/* The arguments every store command shares: positionals, --socket, and
 * the named options a command accepts (NULL-terminated; flags have no
 * value when their name ends in '!'). */
typedef struct store_args {
	const char *socket;
	uid_t server_uid; /* a store of this uid is trusted too */
	const char *pos[16];
	int npos;
	const char *val[4];
	int flag[4];
} store_args;

static int parse_store_args(const char *cmd, int argc, char **argv, const char *const *names,
			    int minpos, int maxpos, store_args *a)
{
	memset(a, 0, sizeof(*a));
	a->server_uid = (uid_t)-1;
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i];
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			cmd_help(2, (char *[]){"help", (char *)cmd, NULL});
			exit(SH_EXIT_OK);
		}
		if (!strcmp(s, "--socket")) {
			if (i + 1 >= argc)
				goto needs_value;
			a->socket = argv[++i];
			continue;
		}
		if (!strcmp(s, "--server-uid")) {
			if (i + 1 >= argc)
				goto needs_value;
			char *end;
			errno = 0;
			unsigned long u = strtoul(argv[++i], &end, 10);
			if (errno || *end || end == argv[i] || u >= (uid_t)-1) {
				fprintf(stderr,
					"shoal %s: --server-uid expects a numeric uid, got '%s'\n",
					cmd, argv[i]);
				return -1;
			}
			a->server_uid = (uid_t)u;
			continue;
		}
		if (s[0] == '-' && s[1] == '-') {
			int k = 0;
			for (; names && names[k]; k++) {
				size_t l = strlen(names[k]);
				bool flag = names[k][l - 1] == '!';
				if (strncmp(s + 2, names[k], flag ? l - 1 : l) != 0 ||
				    s[2 + (flag ? l - 1 : l)] != 0)
					continue;
				if (flag) {
					a->flag[k] = 1;
				} else {
					if (i + 1 >= argc)
						goto needs_value;
					a->val[k] = argv[++i];
				}
				break;
			}
			if (names && names[k])
				continue;
			fprintf(stderr, "shoal %s: unknown option '%s' (see shoal %s --help)\n",
				cmd, s, cmd);
			return -1;
		}
		if (a->npos >= maxpos || a->npos >= 16) {
			fprintf(stderr,
				"shoal %s: unexpected argument '%s' (see shoal %s --help)\n", cmd,
				s, cmd);
			return -1;
		}
		a->pos[a->npos++] = s;
		continue;
	needs_value:
		fprintf(stderr, "shoal %s: %s needs a value\n", cmd, s);
		return -1;
	}
	if (!a->socket) /* the default only when none is named: its directory is checked */
		a->socket = sh_tools_default_socket();
	if (a->npos < minpos) {
		fprintf(stderr, "shoal %s: expected %d argument%s, got %d (see shoal %s --help)\n",
			cmd, minpos, minpos > 1 ? "s" : "", a->npos, cmd);
		return -1;
	}
	return 0;
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

static int fail(const char *cmd, shoal_client *c, int rc)
{
	const char *msg = c ? shoal_client_error(c) : "";
	fprintf(stderr, "shoal %s: %s\n", cmd, show(msg && *msg ? msg : shoal_strerror(rc)));
	return exit_code(rc);
}

static shoal_client *connect_or_die(const char *cmd, const store_args *a, int *code)
{
	shoal_client *c;
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	o.server_uid = a->server_uid;
	const char *sock = a->socket;
	int rc = shoal_connect_with(&c, sock, &o);
	if (rc == SHOAL_EACCES) {
		fprintf(stderr,
			"shoal %s: %s is not served by you or root (see above); not connecting. "
			"Name its uid with --server-uid if you trust it\n",
			cmd, sock);
		*code = SH_EXIT_NOSTORE;
		return NULL;
	}
	if (rc) {
		fprintf(stderr, "shoal %s: no store at %s (%s); start one with `shoal daemon`\n",
			cmd, sock, shoal_strerror(rc));
		*code = SH_EXIT_NOSTORE;
		return NULL;
	}
	return c;
}

static int cmd_put(int argc, char **argv)
{
	store_args a;
	static const char *const names[] = {"name", "replace!", NULL};
	if (parse_store_args("put", argc, argv, names, 1, 1, &a) != 0)
		return SH_EXIT_USAGE;
	if (!a.val[0] || !*a.val[0]) {
		fprintf(stderr, "shoal put: --name NAME is required\n");
		return SH_EXIT_USAGE;
	}
	int code;
	shoal_client *c = connect_or_die("put", &a, &code);
	if (!c)
		return code;
	shoal_id id;
	int rc = shoal_import_safetensors(c, a.pos[0], a.val[0],
					  SHOAL_PERSIST | (a.flag[1] ? SHOAL_REPLACE : 0), &id);
	if (rc) {
		code = fail("put", c, rc);
		shoal_disconnect(c);
		/* 3 is for names in the store; a missing file is a plain failure */
		return rc == SHOAL_ENOENT ? SH_EXIT_FAIL : code;
	}
	printf("%s %016" PRIx64 "\n", show(a.val[0]), id);
	shoal_disconnect(c);
	return SH_EXIT_OK;
}

static int cmd_get(int argc, char **argv)
{
	store_args a;
	static const char *const names[] = {"out", NULL};
	if (parse_store_args("get", argc, argv, names, 1, 1, &a) != 0)
		return SH_EXIT_USAGE;
	if (!a.val[0]) {
		fprintf(stderr, "shoal get: --out FILE is required\n");
		return SH_EXIT_USAGE;
	}
	int code;
	shoal_client *c = connect_or_die("get", &a, &code);
	if (!c)
		return code;
	int rc = shoal_export_safetensors(c, a.pos[0], a.val[0]);
	code = rc ? fail("get", c, rc) : SH_EXIT_OK;
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
	store_args a;
	if (parse_store_args("ls", argc, argv, NULL, 0, 1, &a) != 0)
		return SH_EXIT_USAGE;
	int code;
	shoal_client *c = connect_or_die("ls", &a, &code);
	if (!c)
		return code;
	int rc = shoal_list(c, a.npos ? a.pos[0] : "", print_entry, NULL);
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
	store_args a;
	if (parse_store_args("info", argc, argv, NULL, 1, 1, &a) != 0)
		return SH_EXIT_USAGE;
	int code;
	shoal_client *c = connect_or_die("info", &a, &code);
	if (!c)
		return code;
	shoal_object *o;
	int rc = shoal_get_by_name(c, a.pos[0], &o);
	if (rc) {
		code = fail("info", c, rc);
		shoal_disconnect(c);
		return code;
	}
	const shoal_node *r = shoal_object_root(o);
	char b[32];
	printf("name:      %s\ntype:      %s\nid:        %016" PRIx64 "\nsignature: %016" PRIx64
	       "\nbytes:     %" PRIu64 " (%s)\n",
	       show(a.pos[0]), show(shoal_node_type(r)), shoal_object_id(o),
	       shoal_object_signature(o), shoal_object_bytes(o),
	       sh_tools_fmt_bytes(shoal_object_bytes(o), b, sizeof(b)));
	if (shoal_node_nfields(r)) {
		printf("fields:\n");
		print_fields(r);
	}
	size_t nm = shoal_node_nmembers(r);
	printf("members:   %zu\n", nm);
	for (size_t i = 0; i < nm && i < 20; i++) {
		const char *name;
		const shoal_node *m = shoal_node_member(r, i, &name);
		shoal_tensor t;
		if (shoal_node_tensor(m, &t) == 0) {
			printf("  %-50s %-5s [", show(name), shoal_dtype_name(t.dtype));
			for (int d = 0; d < t.ndim; d++)
				printf("%s%" PRId64, d ? ", " : "", t.shape[d]);
			printf("]\n");
		} else {
			printf("  %-50s %s\n", show(name), show(shoal_node_type(m)));
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
	store_args a;
	if (parse_store_args("rm", argc, argv, NULL, 1, 16, &a) != 0)
		return SH_EXIT_USAGE;
	int code;
	shoal_client *c = connect_or_die("rm", &a, &code);
	if (!c)
		return code;
	code = SH_EXIT_OK;
	for (int i = 0; i < a.npos; i++) {
		int rc = shoal_delete(c, a.pos[i]);
		if (rc)
			code = fail("rm", c, rc);
	}
	shoal_disconnect(c);
	return code;
}

static int cmd_stat(int argc, char **argv)
{
	store_args a;
	if (parse_store_args("stat", argc, argv, NULL, 0, 0, &a) != 0)
		return SH_EXIT_USAGE;
	int code;
	shoal_client *c = connect_or_die("stat", &a, &code);
	if (!c)
		return code;
	shoal_store_stat st;
	int rc = shoal_store_stat_get(c, &st);
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
	shoal_disconnect(c);
	return SH_EXIT_OK;
}

/* The one manner every program answers its command line in (shoal and
 * each of its commands, shoald, shoal-ext, shoal-engine): options parsed by
 * getopt_long from a table the program declares, --help (usage and a
 * description, on stdout, exit 0), --version ("NAME VERSION", exit 0), and
 * a usage error as one line on stderr that names the option and points to
 * --help (exit 2). */
#include "tools.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal/shoal.h>

/* Only the first word: "shoal get" is version "shoal 0.1.0". */
static void print_version(const sh_cli *c)
{
	const char *sp = strchr(c->prog, ' ');
	int n = sp ? (int)(sp - c->prog) : (int)strlen(c->prog);
	printf("%.*s %s\n", n, c->prog, SHOAL_VERSION_STRING);
}

void sh_cli_fail(const sh_cli *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s (see %s --help)\n", c->prog, msg, c->prog);
	if (c->failed)
		c->failed(msg);
	exit(SH_EXIT_USAGE);
}

int sh_cli_next(const sh_cli *c, int argc, char **argv)
{
	/* A fresh scan for each argv: `shoal` parses its command's. */
	static char **scanning;
	if (argv != scanning) {
		scanning = argv;
		optind = 0; /* glibc and musl: start over */
	}
	opterr = 0; /* our messages, not getopt's */
	int before = optind ? optind : 1;
	/* a one-letter name in the table is also its short option ("-n 4") */
	char shorts[64] = "";
	size_t ns = 0;
	if (c->stop_at_operand)
		shorts[ns++] = '+';
	shorts[ns++] = ':';
	shorts[ns++] = 'h';
	shorts[ns++] = 'V';
	for (const struct option *l = c->opts; l->name && ns + 3 < sizeof(shorts); l++)
		if (l->name[0] && !l->name[1] && l->val == l->name[0]) {
			shorts[ns++] = l->name[0];
			if (l->has_arg == required_argument)
				shorts[ns++] = ':';
		}
	shorts[ns] = 0;
	int o = getopt_long(argc, argv, shorts, c->opts, NULL);
	switch (o) {
	case 'h':
		c->usage(stdout);
		exit(SH_EXIT_OK);
	case 'V':
		print_version(c);
		exit(SH_EXIT_OK);
	case ':': {
		/* optind is past the option that lacks its value */
		const char *a = argv[optind - 1 < argc ? optind - 1 : argc - 1];
		if (optopt && optopt != ':' && a[0] == '-' && a[1] != '-')
			sh_cli_fail(c, "-%c needs a value", optopt);
		sh_cli_fail(c, "%.*s needs a value", (int)strcspn(a, "="), a);
	}
	case '?': {
		/* optind is past what getopt stopped at */
		int at = optind - 1 >= before ? optind - 1 : before;
		const char *a = at < argc ? argv[at] : "?";
		int n = (int)strcspn(a, "=");
		if (a[0] == '-' && a[1] == '-' && a[n] == '=' && optopt)
			sh_cli_fail(c, "%.*s takes no value", n, a);
		if (a[0] == '-' && a[1] == '-' && n > 2) {
			/* getopt takes a prefix of one option: of several, say which */
			char which[256];
			size_t w = 0;
			int k = 0;
			for (const struct option *l = c->opts; l->name && w < sizeof(which); l++)
				if (!strncmp(l->name, a + 2, (size_t)n - 2))
					w += (size_t)snprintf(which + w, sizeof(which) - w,
							      "%s--%s", k++ ? ", " : "", l->name);
			if (k > 1)
				sh_cli_fail(c, "ambiguous option '%.*s' (%s)", n, a, which);
		}
		if (a[0] == '-' && a[1] == '-')
			sh_cli_fail(c, "unknown option '%.*s'", n, a);
		sh_cli_fail(c, "unknown option '-%c'", optopt ? optopt : '?');
	}
	default:
		return o;
	}
}

void sh_cli_operands(const sh_cli *c, int argc, char **argv, int min, int max)
{
	int n = argc - optind;
	if (n > max && max == 0)
		sh_cli_fail(c, "takes no arguments, got '%s'", argv[optind]);
	if (n > max)
		sh_cli_fail(c, "unexpected argument '%s'", argv[optind + max]);
	if (n < min)
		sh_cli_fail(c, "expected %s%d argument%s, got %d", min < max ? "at least " : "",
			    min, min == 1 ? "" : "s", n);
}

const char *sh_cli_choice(const sh_cli *c, const char *opt, const char *val,
			  const char *const *accepted)
{
	for (size_t i = 0; accepted[i]; i++)
		if (strcmp(val, accepted[i]) == 0)
			return accepted[i];
	char list[256];
	size_t o = 0;
	for (size_t i = 0; accepted[i] && o < sizeof(list); i++)
		o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s",
				      i ? (accepted[i + 1] ? ", " : " or ") : "", accepted[i]);
	sh_cli_fail(c, "%s '%s': expected %s", opt, val, list);
}

void sh_tools_log_info(void)
{
	const char *e = getenv("SHOAL_LOG");
	if (!e || !*e)
		shoal_log_set_level(SHOAL_LOG_INFO);
}

/* The benchmark machinery shared by every suite: records, the tables for
 * people (one per kind of figure, each column in one unit), JSON Lines for
 * machines, CSV, SVG plots, the options (through the tools' parser,
 * tools/lib/cli.c, in the manner of every program), the child processes each case
 * runs in (so that the peak RSS reported for a case is that case's own,
 * read from wait4()), and finding and running the programs a suite
 * measures. Also the table of suites and the run of some of them
 * (sh_bench_main), where only a failed row of shoal's own fails the run: a
 * baseline's or a peer's is a row that says why. Suites and programs use
 * bench.h. */
#include "bench.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <limits.h>
#include <unistd.h>

/* ---- options ------------------------------------------------------------ */

const char sh_bench_opts_usage[] =
	"  --quick          fewer iterations and smaller sizes (each suite under a minute)\n"
	"  --json           JSON Lines on stdout instead of the tables: one object a\n"
	"                   result with suite, test, params, status, baseline, impl,\n"
	"                   variant (when set: \"GOMAXPROCS=1\"), metrics (their unit\n"
	"                   in the name when they have one: _us, _ms, _s, _kib, _mb_s)\n"
	"  --csv FILE       also write the results as CSV (one row a metric)\n"
	"  --plot FILE.svg  also write a plot of what a suite sweeps (a size or a\n"
	"                   count); FILE-SUITE.svg each when several suites plot.\n"
	"                   ring, py-store, py-rpc and cluster sweep nothing: asking\n"
	"                   for the plot of one of them alone is an error\n"
	"  --large          include the sizes that need many GiB of memory\n"
	"  --only TEST      only the tests of that name in the suites that have it\n"
	"                   (cluster: migrate, link, remote, dedup, peer_loss, task_buffers;\n"
	"                   store: small, dict, import, readers, spill, restore;\n"
	"                   py-rpc: calls, shared, readers, start, idle)\n"
	"Both paths are checked before the run. Tables: times show mean, std dev,\n"
	"min (best) and max; rates the same with max (best); amounts one value.\n";

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* getopt_long's values of the options, past any character */
enum { OPT_QUICK = 256, OPT_JSON, OPT_LARGE, OPT_CSV, OPT_PLOT, OPT_ONLY };

const struct option sh_bench_options[] = {
	{"quick", no_argument, NULL, OPT_QUICK},
	{"json", no_argument, NULL, OPT_JSON},
	{"large", no_argument, NULL, OPT_LARGE},
	{"csv", required_argument, NULL, OPT_CSV},
	{"plot", required_argument, NULL, OPT_PLOT},
	{"only", required_argument, NULL, OPT_ONLY},
	SH_CLI_STD,
	{0},
};

void sh_bench_parse_opts(const sh_cli *c, int argc, char **argv, sh_bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	for (int k; (k = sh_cli_next(c, argc, argv)) != -1;) {
		switch (k) {
		case OPT_QUICK:
			o->quick = 1;
			break;
		case OPT_JSON:
			o->json = 1;
			break;
		case OPT_LARGE:
			o->large = 1;
			break;
		case OPT_PLOT:
			if (!ends_with(optarg, ".svg"))
				sh_cli_fail(c, "--plot writes SVG: expected a FILE.svg, got '%s'",
					    optarg);
			o->plot = optarg;
			break;
		case OPT_CSV:
		case OPT_ONLY:
			if (!optarg[0])
				sh_cli_fail(c, "--%s needs a value, got an empty one",
					    k == OPT_CSV ? "csv" : "only");
			*(k == OPT_CSV ? &o->csv : &o->only) = optarg;
			break;
		}
	}
	o->progress = !o->json && isatty(2);
}

/* ---- results ------------------------------------------------------------ */

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

void sh_bench_report_init(sh_bench_report *r)
{
	memset(r, 0, sizeof(*r));
}

void sh_bench_report_free(sh_bench_report *r)
{
	free(r->res);
	memset(r, 0, sizeof(*r));
}

sh_bench_result *sh_bench_add(sh_bench_report *r, const char *suite, const char *test,
			      const char *label, int baseline)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 32;
		sh_bench_result *p = realloc(r->res, cap * sizeof(*p));
		if (!p) {
			fprintf(stderr, "bench: out of memory\n");
			exit(1);
		}
		r->res = p;
		r->cap = cap;
	}
	sh_bench_result *x = &r->res[r->n++];
	memset(x, 0, sizeof(*x));
	copy_str(x->suite, sizeof(x->suite), suite);
	copy_str(x->test, sizeof(x->test), test);
	copy_str(x->label, sizeof(x->label), label);
	x->baseline = baseline;
	x->own = !baseline;
	x->status = SH_BENCH_OK;
	x->peak_rss_kib = -1;
	x->cmp_word = "faster";
	return x;
}

void sh_bench_param_num(sh_bench_result *x, const char *name, double v)
{
	if (x->nparams == SH_BENCH_MAX_PARAMS)
		return;
	sh_bench_param *p = &x->params[x->nparams++];
	copy_str(p->name, sizeof(p->name), name);
	if (v == floor(v) && fabs(v) < 1e15)
		snprintf(p->text, sizeof(p->text), "%.0f", v);
	else
		snprintf(p->text, sizeof(p->text), "%.9g", v);
	p->kind = SH_BENCH_P_NUM;
}

void sh_bench_param_str(sh_bench_result *x, const char *name, const char *v)
{
	if (x->nparams == SH_BENCH_MAX_PARAMS)
		return;
	sh_bench_param *p = &x->params[x->nparams++];
	copy_str(p->name, sizeof(p->name), name);
	copy_str(p->text, sizeof(p->text), v);
	p->kind = SH_BENCH_P_STR;
}

void sh_bench_param_bool(sh_bench_result *x, const char *name, bool v)
{
	sh_bench_param_str(x, name, v ? "true" : "false");
	if (x->nparams && strcmp(x->params[x->nparams - 1].name, name) == 0)
		x->params[x->nparams - 1].kind = SH_BENCH_P_BOOL;
}

void sh_bench_metric_set(sh_bench_result *x, const char *name, double v)
{
	for (int i = 0; i < x->nmetrics; i++) {
		if (strcmp(x->metrics[i].name, name) == 0) {
			x->metrics[i].value = v;
			return;
		}
	}
	if (x->nmetrics == SH_BENCH_MAX_METRICS)
		return;
	copy_str(x->metrics[x->nmetrics].name, sizeof(x->metrics[0].name), name);
	x->metrics[x->nmetrics++].value = v;
}

double sh_bench_metric_get(const sh_bench_result *x, const char *name, double def)
{
	for (int i = 0; i < x->nmetrics; i++)
		if (strcmp(x->metrics[i].name, name) == 0)
			return x->metrics[i].value;
	return def;
}

static void set_status(sh_bench_result *x, int status, const char *fmt, va_list ap)
{
	vsnprintf(x->message, sizeof(x->message), fmt, ap);
	x->status = status;
}

void sh_bench_fail(sh_bench_result *x, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	set_status(x, SH_BENCH_FAILED, fmt, ap);
	va_end(ap);
}

void sh_bench_skip(sh_bench_result *x, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	set_status(x, SH_BENCH_SKIPPED, fmt, ap);
	va_end(ap);
}

void sh_bench_note(sh_bench_report *r, const char *fmt, ...)
{
	size_t room = sizeof(r->notes) - r->notes_len;
	if (room < 2)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(r->notes + r->notes_len, room - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	r->notes_len += (size_t)k < room - 1 ? (size_t)k : room - 2;
	r->notes[r->notes_len++] = '\n';
	r->notes[r->notes_len] = '\0';
}

void sh_bench_stats(const double *v, int n, double *mean, double *sd, double *min, double *max)
{
	double sum = 0, lo = INFINITY, hi = -INFINITY;
	for (int i = 0; i < n; i++) {
		sum += v[i];
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	double m = n ? sum / n : 0, ss = 0;
	for (int i = 0; i < n; i++)
		ss += (v[i] - m) * (v[i] - m);
	*mean = m;
	*sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
	*min = n ? lo : 0;
	*max = n ? hi : 0;
}

void sh_bench_show_samples(sh_bench_result *x, const double *v, int n, const char *unit)
{
	sh_bench_stats(v, n, &x->mean, &x->sd, &x->min, &x->max);
	copy_str(x->show_unit, sizeof(x->show_unit), unit);
	x->has_stats = n > 0;
	x->nsamples = n;
}

static int same_params(const sh_bench_result *a, const sh_bench_result *b)
{
	if (a->nparams != b->nparams)
		return 0;
	for (int i = 0; i < a->nparams; i++)
		if (strcmp(a->params[i].name, b->params[i].name) != 0 ||
		    strcmp(a->params[i].text, b->params[i].text) != 0)
			return 0;
	return 1;
}

const sh_bench_result *sh_bench_baseline_of(const sh_bench_report *r, const sh_bench_result *x)
{
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *b = &r->res[i];
		if (b->baseline && b != x && strcmp(b->suite, x->suite) == 0 &&
		    strcmp(b->test, x->test) == 0 && same_params(b, x))
			return b;
	}
	return NULL;
}

/* ---- the table ---------------------------------------------------------- */

void sh_bench_fmt_time(char *buf, size_t len, double s)
{
	double a = fabs(s);
	if (a >= 1)
		snprintf(buf, len, "%.3f s", s);
	else if (a >= 1e-3)
		snprintf(buf, len, "%.2f ms", s * 1e3);
	else if (a >= 1e-6)
		snprintf(buf, len, "%.2f us", s * 1e6);
	else
		snprintf(buf, len, "%.1f ns", s * 1e9);
}

void sh_bench_fmt_num(char *buf, size_t len, double v)
{
	double a = fabs(v);
	if (!isfinite(v) || a < 10000) {
		snprintf(buf, len,
			 a >= 100 || v == floor(v) ? "%.0f"
			 : a >= 10		   ? "%.1f"
						   : "%.2f",
			 v);
		return;
	}
	char digits[32];
	snprintf(digits, sizeof(digits), "%.0f", a);
	size_t nd = strlen(digits), k = 0;
	if (v < 0 && k + 1 < len)
		buf[k++] = '-';
	for (size_t i = 0; i < nd && k + 2 < len; i++) {
		if (i && (nd - i) % 3 == 0)
			buf[k++] = ' ';
		buf[k++] = digits[i];
	}
	buf[k] = '\0';
}

/* Seconds per show_unit when it is a time ("us", "ns/hop"), else 0; *rest
 * gets what follows the unit ("/hop"). */
static double time_unit(const char *unit, const char **rest)
{
	static const struct {
		const char *u;
		double s;
	} units[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
	size_t ulen = strcspn(unit, "/");
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strlen(units[i].u) == ulen && strncmp(unit, units[i].u, ulen) == 0 &&
		    strcmp(unit + ulen, "/s") != 0) {
			*rest = unit + ulen;
			return units[i].s;
		}
	return 0;
}

/* The kinds of figure, a table each, each column in one kind of unit. */
enum { K_TIME, K_RATE, K_AMOUNT, K_N };

static int kind_of(const sh_bench_result *x)
{
	const char *rest;
	size_t n = strlen(x->show_unit);
	if (time_unit(x->show_unit, &rest) > 0)
		return K_TIME;
	return n > 2 && strcmp(x->show_unit + n - 2, "/s") == 0 ? K_RATE : K_AMOUNT;
}

static void fmt_stat(char *buf, size_t len, const sh_bench_result *x, double v)
{
	const char *rest = "";
	double s = time_unit(x->show_unit, &rest);
	if (s > 0) {
		sh_bench_fmt_time(buf, len, v * s);
		size_t k = strlen(buf);
		snprintf(buf + k, len - k, "%s", rest);
		return;
	}
	char num[48];
	sh_bench_fmt_num(num, sizeof(num), v);
	snprintf(buf, len, "%s %s", num, x->show_unit);
}

static void fmt_params(char *buf, size_t len, const sh_bench_result *x, char sep)
{
	size_t k = 0;
	buf[0] = '\0';
	for (int i = 0; i < x->nparams && k < len; i++) {
		int w = snprintf(buf + k, len - k, "%s%s=%s", i ? (sep == ' ' ? " " : ";") : "",
				 x->params[i].name, x->params[i].text);
		if (w < 0)
			break;
		k += (size_t)w;
	}
}

static void fmt_vs_only(char *buf, size_t len, const sh_bench_report *r, const sh_bench_result *x)
{
	buf[0] = '\0';
	if (x->baseline) {
		snprintf(buf, len, "(baseline)");
		return;
	}
	const sh_bench_result *b = sh_bench_baseline_of(r, x);
	if (!b || b->status != SH_BENCH_OK || x->cmp_value <= 0 || b->cmp_value <= 0)
		return;
	char who[64];
	snprintf(who, sizeof(who), "%s%s%s%s", b->label, b->variant[0] ? " (" : "", b->variant,
		 b->variant[0] ? ")" : "");
	double ratio = b->cmp_value / x->cmp_value, q = ratio >= 1 ? ratio : 1 / ratio;
	char num[48];
	if (q >= 100)
		sh_bench_fmt_num(num, sizeof(num), q);
	else
		snprintf(num, sizeof(num), "%.*f", q >= 10 ? 0 : 1, q);
	int k;
	if (ratio >= 1)
		k = snprintf(buf, len, "%sx %s than %s", num, x->cmp_word, who);
	else
		k = snprintf(buf, len, "%sx %s than %s", num,
			     strcmp(x->cmp_word, "faster") == 0 ? "slower" : "dearer", who);
	if (k > 0 && (size_t)k < len && x->peak_rss_kib > 0 && b->peak_rss_kib > 0)
		snprintf(buf + k, len - (size_t)k, ", RSS %.2fx",
			 x->peak_rss_kib / b->peak_rss_kib);
}

void sh_bench_fmt_vs(char *buf, size_t len, const sh_bench_report *r, const sh_bench_result *x)
{
	fmt_vs_only(buf, len, r, x);
	size_t k = strlen(buf);
	if (x->aside[0] && k + 1 < len)
		snprintf(buf + k, len - k, "%s%s", k ? ", " : "", x->aside);
}

/* test, impl, params, mean, std dev, min, max, value, peak RSS, vs */
enum { NCOLS = 10, CELL = 96 };

static void print_row(FILE *f, char cells[][CELL], const int *width)
{
	char line[NCOLS * (CELL + 2) + 4];
	size_t k = 0;
	for (int c = 0; c < NCOLS; c++) {
		if (width[c] < 0) /* a column empty in this table */
			continue;
		/* Names left-aligned, figures right-aligned, so columns of
		 * numbers line up on their units. */
		int left = c < 3 || c == NCOLS - 1;
		int w = snprintf(line + k, sizeof(line) - k, left ? "%-*s  " : "%*s  ", width[c],
				 cells[c]);
		if (w < 0)
			break;
		k += (size_t)w;
	}
	while (k > 0 && line[k - 1] == ' ')
		k--;
	line[k] = '\0';
	fprintf(f, "%s\n", line);
}

/* The ok rows of suite of one kind as a table: each kind has its own
 * header, so that a column holds one kind of unit (a memory figure never
 * stands in a column of times) and "best" names the right end. Columns
 * empty in every row are left out. */
static void print_kind(FILE *f, const sh_bench_report *r, const char *suite, int kind, int *first)
{
	static const char *const heads[K_N][NCOLS] = {
		{"test", "impl", "params", "mean", "std dev", "min (best)", "max", "value",
		 "peak RSS", "vs baseline"},
		{"test", "impl", "params", "mean rate", "std dev", "min", "max (best)", "value",
		 "peak RSS", "vs baseline"},
		{"test", "impl", "params", "mean", "std dev", "min", "max", "value", "peak RSS",
		 "vs baseline"},
	};
	size_t nok = 0;
	for (size_t i = 0; i < r->n; i++)
		nok += strcmp(r->res[i].suite, suite) == 0 && r->res[i].status == SH_BENCH_OK;
	char(*rows)[NCOLS][CELL] = calloc(nok + 1, sizeof(*rows));
	if (!rows)
		return;
	int width[NCOLS], used[NCOLS] = {1, 1, 0};
	for (int c = 0; c < NCOLS; c++) {
		copy_str(rows[0][c], CELL, heads[kind][c]);
		width[c] = (int)strlen(heads[kind][c]);
	}
	size_t n = 1;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, suite) != 0 || x->status != SH_BENCH_OK ||
		    (x->has_stats ? kind_of(x) : K_TIME) != kind)
			continue;
		char(*row)[CELL] = rows[n++];
		copy_str(row[0], CELL, x->test);
		snprintf(row[1], CELL, "%s%s%s%s", x->label, x->variant[0] ? " (" : "", x->variant,
			 x->variant[0] ? ")" : "");
		fmt_params(row[2], CELL, x, ' ');
		if (x->has_stats && x->nsamples > 1) {
			fmt_stat(row[3], CELL, x, x->mean);
			fmt_stat(row[4], CELL, x, x->sd);
			fmt_stat(row[5], CELL, x, x->min);
			fmt_stat(row[6], CELL, x, x->max);
		} else if (x->has_stats) {
			fmt_stat(row[7], CELL, x, x->mean);
		}
		if (x->peak_rss_kib >= 0)
			snprintf(row[8], CELL, "%.1f MB", x->peak_rss_kib * 1024 / 1e6);
		sh_bench_fmt_vs(row[9], CELL, r, x);
		for (int c = 0; c < NCOLS; c++) {
			int w = (int)strlen(row[c]);
			width[c] = w > width[c] ? w : width[c];
			used[c] |= w > 0;
		}
	}
	if (n > 1) {
		for (int c = 0; c < NCOLS; c++)
			width[c] = used[c] ? width[c] : -1;
		if (!*first)
			fputc('\n', f);
		*first = 0;
		for (size_t i = 0; i < n; i++)
			print_row(f, rows[i], width);
	}
	free(rows);
}

void sh_bench_print_table(FILE *f, const sh_bench_report *r, const char *suite, const char *title)
{
	if (title)
		fprintf(f, "%s\n\n", title);
	int first_table = 1;
	for (int kind = 0; kind < K_N; kind++)
		print_kind(f, r, suite, kind, &first_table);

	static const struct {
		int status;
		const char *head;
	} other[] = {{SH_BENCH_FAILED, "failed"}, {SH_BENCH_SKIPPED, "skipped"}};
	for (size_t s = 0; s < 2; s++) {
		int first = 1;
		for (size_t i = 0; i < r->n; i++) {
			const sh_bench_result *x = &r->res[i];
			if (strcmp(x->suite, suite) != 0 || x->status != other[s].status)
				continue;
			if (first)
				fprintf(f, "\n%s:\n", other[s].head);
			first = 0;
			char p[CELL];
			fmt_params(p, sizeof(p), x, ' ');
			fprintf(f, "  %s %s%s%s: %s\n", x->test, x->label, p[0] ? " " : "", p,
				x->message);
		}
	}
	if (r->notes_len)
		fprintf(f, "\n%s", r->notes);
}

/* ---- JSON Lines and CSV ------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (!isfinite(v))
		fputs("null", f);
	else if (v == floor(v) && fabs(v) < 1e15)
		fprintf(f, "%.0f", v);
	else
		fprintf(f, "%.9g", v);
}

static const char *status_name(int status)
{
	return status == SH_BENCH_OK ? "ok" : status == SH_BENCH_FAILED ? "failed" : "skipped";
}

void sh_bench_print_json(FILE *f, const sh_bench_report *r)
{
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		fputs("{\"suite\": ", f);
		json_str(f, x->suite);
		fputs(", \"test\": ", f);
		json_str(f, x->test);
		fputs(", \"params\": {", f);
		for (int k = 0; k < x->nparams; k++) {
			fputs(k ? ", " : "", f);
			json_str(f, x->params[k].name);
			fputs(": ", f);
			if (x->params[k].kind != SH_BENCH_P_STR)
				fputs(x->params[k].text, f);
			else
				json_str(f, x->params[k].text);
		}
		fprintf(f, "}, \"status\": \"%s\", \"baseline\": %s, \"impl\": ",
			status_name(x->status), x->baseline ? "true" : "false");
		json_str(f, x->label);
		if (x->variant[0]) {
			fputs(", \"variant\": ", f);
			json_str(f, x->variant);
		}
		if (x->status != SH_BENCH_OK) {
			fputs(x->status == SH_BENCH_FAILED ? ", \"error\": " : ", \"reason\": ", f);
			json_str(f, x->message);
		}
		fputs(", \"metrics\": {", f);
		for (int k = 0; k < x->nmetrics; k++) {
			fputs(k ? ", " : "", f);
			json_str(f, x->metrics[k].name);
			fputs(": ", f);
			json_num(f, x->metrics[k].value);
		}
		fputs("}}\n", f);
	}
	fflush(f);
}

static void csv_field(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int sh_bench_write_csv(const char *path, const sh_bench_report *r)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs("suite,test,params,status,baseline,impl,metric,value,message,variant\n", f);
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		char p[256];
		fmt_params(p, sizeof(p), x, ';');
		int rows = x->nmetrics ? x->nmetrics : 1;
		for (int k = 0; k < rows; k++) {
			csv_field(f, x->suite);
			fputc(',', f);
			csv_field(f, x->test);
			fputc(',', f);
			csv_field(f, p);
			fprintf(f, ",%s,%s,", status_name(x->status),
				x->baseline ? "true" : "false");
			csv_field(f, x->label);
			fputc(',', f);
			if (x->nmetrics) {
				csv_field(f, x->metrics[k].name);
				fputc(',', f);
				json_num(f, x->metrics[k].value);
			} else {
				fputc(',', f);
			}
			fputc(',', f);
			csv_field(f, x->message);
			fputc(',', f);
			csv_field(f, x->variant);
			fputc('\n', f);
		}
	}
	int bad = ferror(f);
	if (fclose(f) != 0 || bad)
		return -1;
	return 0;
}

/* ---- SVG ---------------------------------------------------------------- */

static void svg_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else
			fputc(*s, f);
	}
}

int sh_bench_svg_begin(FILE *f, int width, int height, const char *title)
{
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"font-family=\"sans-serif\" font-size=\"11\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">",
		width, height, width / 2);
	svg_text(f, title);
	fputs("</text>\n", f);
	return 30;
}

void sh_bench_svg_end(FILE *f)
{
	fputs("</svg>\n", f);
}

/* What a bar stands for: the label and its variant ("go GOMAXPROCS=1"). */
static void bar_key(char *buf, size_t len, const sh_bench_result *t)
{
	snprintf(buf, len, "%s%s%s", t->label, t->variant[0] ? " " : "", t->variant);
}

int sh_bench_svg_bars(FILE *f, const sh_bench_report *r, const char *suite, const char *test,
		      const char *metric, double scale, const char *y_unit, int x, int y, int w,
		      int h)
{
	static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
	enum { MAXG = 16, MAXL = 4 };
	const sh_bench_result *grp[MAXG];
	char labels[MAXL][64], key[64];
	int ng = 0, nl = 0;
	double lo = INFINITY, hi = -INFINITY;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *t = &r->res[i];
		double v = sh_bench_metric_get(t, metric, -1) * scale;
		if (strcmp(t->suite, suite) != 0 || strcmp(t->test, test) != 0 ||
		    t->status != SH_BENCH_OK || v <= 0)
			continue;
		int g = 0, l = 0;
		while (g < ng && !same_params(grp[g], t))
			g++;
		if (g == ng && ng < MAXG)
			grp[ng++] = t;
		bar_key(key, sizeof(key), t);
		while (l < nl && strcmp(labels[l], key) != 0)
			l++;
		if (l == nl && nl < MAXL)
			snprintf(labels[nl++], sizeof(labels[0]), "%s", key);
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	if (ng == 0)
		return 0;
	/* Log scale, whole decades, because the cases span three of them. */
	double d0 = floor(log10(lo)), d1 = ceil(log10(hi));
	if (d1 <= d0)
		d1 = d0 + 1;
	int left = x + 60, top = y + 10, bottom = y + h - 40, right = x + w - 10;
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">", x + 4, y + 4);
	svg_text(f, test);
	fputs(": ", f);
	svg_text(f, y_unit);
	fputs(", log scale</text>\n", f);
	for (double d = d0; d <= d1; d++) {
		int py = bottom - (int)((d - d0) / (d1 - d0) * (bottom - top));
		fprintf(f,
			"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n"
			"<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%g</text>\n",
			left, py, right, py, left - 4, py + 4, pow(10, d));
	}
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left,
		bottom, right, bottom);
	double gw = (double)(right - left) / ng, bw = gw * 0.8 / nl;
	for (int g = 0; g < ng; g++) {
		char p[CELL];
		fmt_params(p, sizeof(p), grp[g], ' ');
		int cx = left + (int)(gw * g + gw / 2);
		fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", cx, bottom + 14);
		svg_text(f, p);
		fputs("</text>\n", f);
		for (size_t i = 0; i < r->n; i++) {
			const sh_bench_result *t = &r->res[i];
			double v = sh_bench_metric_get(t, metric, -1) * scale;
			if (strcmp(t->suite, suite) != 0 || strcmp(t->test, test) != 0 ||
			    t->status != SH_BENCH_OK || v <= 0 || !same_params(grp[g], t))
				continue;
			int l = 0;
			bar_key(key, sizeof(key), t);
			while (l < nl && strcmp(labels[l], key) != 0)
				l++;
			if (l == nl)
				continue;
			int bh = (int)((log10(v) - d0) / (d1 - d0) * (bottom - top));
			int bx = left + (int)(gw * g + gw * 0.1 + bw * l);
			fprintf(f,
				"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n"
				"<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
				"font-size=\"9\">%.3g</text>\n",
				bx, bottom - bh, (int)bw - 2, bh, colors[l % 4], bx + (int)bw / 2,
				bottom - bh - 3, v);
		}
	}
	for (int l = 0; l < nl; l++) {
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
			"<text x=\"%d\" y=\"%d\">",
			left + 160 * l, bottom + 22, colors[l % 4], left + 160 * l + 14,
			bottom + 31);
		svg_text(f, labels[l]);
		fputs("</text>\n", f);
	}
	return h;
}

const char *sh_bench_param_get(const sh_bench_result *x, const char *name)
{
	for (int i = 0; i < x->nparams; i++)
		if (!strcmp(x->params[i].name, name))
			return x->params[i].text;
	return NULL;
}

/* A tick label for people: 1 000 000, 0.001, 2.5 */
static void tick_text(char *buf, size_t len, double v)
{
	if (v >= 10000)
		sh_bench_fmt_num(buf, len, v);
	else
		snprintf(buf, len, "%.3g", v);
}

/* The values of the params named in the comma-separated list `series`
 * joined by " / " into name, each value's index among those seen so far
 * per key in vals/nvals (for colour and dash). 0, or -1 if x lacks one. */
enum { MAXKEY = 3, MAXVAL = 12 };
static int series_of(const sh_bench_result *x, const char *series, char *name, size_t len,
		     char vals[MAXKEY][MAXVAL][64], int *nvals, int *idx)
{
	size_t k = 0;
	name[0] = '\0';
	int key = 0;
	for (const char *p = series; *p && key < MAXKEY; key++) {
		char pname[32];
		size_t pl = strcspn(p, ",");
		snprintf(pname, sizeof(pname), "%.*s", (int)pl, p);
		p += pl + (p[pl] == ',');
		/* "impl": the label (and variant), which is no param */
		char impl[64];
		if (!strcmp(pname, "impl"))
			bar_key(impl, sizeof(impl), x);
		const char *v = !strcmp(pname, "impl") ? impl : sh_bench_param_get(x, pname);
		if (!v)
			return -1;
		int j = 0;
		while (j < nvals[key] && strcmp(vals[key][j], v))
			j++;
		if (j == nvals[key] && j < MAXVAL)
			snprintf(vals[key][nvals[key]++], sizeof(vals[0][0]), "%s", v);
		idx[key] = j < MAXVAL ? j : MAXVAL - 1;
		int w = snprintf(name + k, len - k, "%s%s", k ? " / " : "", v);
		if (w > 0 && (size_t)w < len - k)
			k += (size_t)w;
	}
	return 0;
}

struct svg_pt {
	int s;
	double x, y;
};

static int cmp_pt(const void *a, const void *b)
{
	const struct svg_pt *p = a, *q = b;
	if (p->s != q->s)
		return p->s - q->s;
	return p->x < q->x ? -1 : p->x > q->x;
}

int sh_bench_svg_lines(FILE *f, const sh_bench_report *r, const sh_bench_lines *l, int x, int y,
		       int w, int h)
{
	static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
					     "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
					     "#bcbd22", "#17becf", "#000000", "#aaaaaa"};
	static const char *const dashes[] = {"", "6,3", "2,2", "8,3,2,3"};
	enum { MAXS = 24 };
	char names[MAXS][96], vals[MAXKEY][MAXVAL][64];
	int nvals[MAXKEY] = {0}, style[MAXS][MAXKEY], ns = 0;
	size_t npt = 0;
	struct svg_pt *pt = calloc(r->n + 1, sizeof(*pt));
	if (!pt)
		return 0;
	double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *t = &r->res[i];
		const char *xs = sh_bench_param_get(t, l->xparam);
		double v = sh_bench_metric_get(t, l->metric, -1) * l->scale;
		char nm[96];
		int idx[MAXKEY] = {0};
		if (strcmp(t->suite, l->suite) || (l->test && strcmp(t->test, l->test)) ||
		    t->status != SH_BENCH_OK || v <= 0 || !xs || atof(xs) <= 0 ||
		    series_of(t, l->series, nm, sizeof(nm), vals, nvals, idx) != 0)
			continue;
		int k = 0;
		while (k < ns && strcmp(names[k], nm))
			k++;
		if (k == ns) {
			if (ns == MAXS)
				continue;
			snprintf(names[ns], sizeof(names[0]), "%s", nm);
			memcpy(style[ns++], idx, sizeof(idx));
		}
		pt[npt++] = (struct svg_pt){k, atof(xs), v};
		xlo = fmin(xlo, atof(xs)), xhi = fmax(xhi, atof(xs));
		ylo = fmin(ylo, v), yhi = fmax(yhi, v);
	}
	if (ns == 0) {
		free(pt);
		return 0;
	}
	qsort(pt, npt, sizeof(*pt), cmp_pt);
	/* The axes end at the data (a little room for the markers): log10
	 * of the lowest and highest value, decades marked inside. */
	double x0 = log10(xlo), x1 = log10(xhi), y0 = log10(ylo), y1 = log10(yhi);
	if (x1 - x0 < 1e-9)
		x0 -= 0.5, x1 += 0.5;
	if (y1 - y0 < 1e-9)
		y0 -= 0.5, y1 += 0.5;
	double px = (x1 - x0) * 0.03, py = (y1 - y0) * 0.05;
	x0 -= px, x1 += px, y0 -= py, y1 += py;
	int per_row = (w - 80) / 180, rows = (ns + per_row - 1) / per_row;
	int left = x + 80, top = y + 24, bottom = y + h - 50, right = x + w - 20;
#define PX(v) (left + (int)((log10(v) - x0) / (x1 - x0) * (right - left)))
#define PY(v) (bottom - (int)((log10(v) - y0) / (y1 - y0) * (bottom - top)))
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">", x + 4, y + 14);
	svg_text(f, l->title);
	fputs(" (log-log)</text>\n", f);
	fprintf(f,
		"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
		"stroke=\"#888\"/>\n",
		left, top, right - left, bottom - top);
	char tick[48];
	for (double d = ceil(y0); d <= y1; d++) {
		tick_text(tick, sizeof(tick), pow(10, d));
		fprintf(f,
			"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
			"<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n",
			left, PY(pow(10, d)), right, PY(pow(10, d)), left - 4, PY(pow(10, d)) + 4,
			tick);
	}
	for (double d = ceil(x0); d <= x1; d++) {
		tick_text(tick, sizeof(tick), pow(10, d));
		fprintf(f,
			"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
			"<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
			PX(pow(10, d)), top, PX(pow(10, d)), bottom, PX(pow(10, d)), bottom + 14,
			tick);
	}
	/* The ends of the data, labelled on the axis too (a sweep may not
	 * span a decade), unless a decade's label stands there already. */
	for (int e = 0; e < 2; e++) {
		double v = e ? yhi : ylo, d = round(log10(v));
		if (abs(PY(v) - PY(pow(10, d))) < 12 && d >= y0 && d <= y1)
			continue;
		tick_text(tick, sizeof(tick), v);
		fprintf(f,
			"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>"
			"<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
			left - 3, PY(v), left, PY(v), left - 4, PY(v) + 4, tick);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (left + right) / 2,
		bottom + 30);
	svg_text(f, l->x_label);
	fprintf(f,
		"</text>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
		"transform=\"rotate(-90 %d %d)\">",
		x + 14, (top + bottom) / 2, x + 14, (top + bottom) / 2);
	svg_text(f, l->y_label);
	fputs("</text>\n", f);
	for (int k = 0; k < ns; k++) {
		const char *color = colors[style[k][0] % 12], *dash = dashes[style[k][1] % 4];
		fprintf(f,
			"<polyline fill=\"none\" stroke-width=\"2\" stroke=\"%s\"%s%s%s points=\"",
			color, dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
		for (size_t i = 0; i < npt; i++)
			if (pt[i].s == k)
				fprintf(f, "%d,%d ", PX(pt[i].x), PY(pt[i].y));
		fputs("\"/>\n", f);
		for (size_t i = 0; i < npt; i++)
			if (pt[i].s == k)
				fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"2.5\" fill=\"%s\"/>\n",
					PX(pt[i].x), PY(pt[i].y), color);
		int lx = left + 180 * (k % per_row), ly = bottom + 44 + 16 * (k / per_row);
		fprintf(f,
			"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke-width=\"2\" "
			"stroke=\"%s\"%s%s%s/><text x=\"%d\" y=\"%d\">",
			lx, ly - 4, lx + 24, ly - 4, color, dash[0] ? " stroke-dasharray=\"" : "",
			dash, dash[0] ? "\"" : "", lx + 28, ly);
		svg_text(f, names[k]);
		fputs("</text>\n", f);
	}
#undef PX
#undef PY
	free(pt);
	return h + 16 * rows;
}

/* ---- child processes ---------------------------------------------------- */

/* This program's directory, or -1. */
static int self_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *slash = strrchr(buf, '/');
	if (!slash)
		return -1;
	*slash = 0;
	return 0;
}

/* self/a/name, else self/b/name, whichever is accessible in mode, as path:
 * the build tree's layout first, then the installed one. 0 or -1. */
static int find_either(const char *self, const char *a, const char *b, const char *name, int mode,
		       char *path, size_t len)
{
	snprintf(path, len, "%s/%s%s", self, a, name);
	if (access(path, mode) == 0)
		return 0;
	snprintf(path, len, "%s/%s%s", self, b, name);
	return access(path, mode) == 0 ? 0 : -1;
}

int sh_bench_find_aux(const char *name, int mode, char *path, size_t len)
{
	char self[PATH_MAX / 2]; /* leaves room for the suffixes below */
	if (self_dir(self, sizeof(self)) != 0)
		return -1;
	return find_either(self, "../bench/", "../lib/shoal/", name, mode, path, len);
}

int sh_bench_find_tool(const char *tool, char *tool_path, char *lib_path, size_t len)
{
	char self[PATH_MAX / 2];
	if (self_dir(self, sizeof(self)) != 0 ||
	    sh_bench_find_aux("rpc_ext.so", R_OK, lib_path, len))
		return -1;
	return find_either(self, "../tools/", "", tool, X_OK, tool_path, len);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void sh_bench_rm_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int sh_bench_find_source(const char *rel, char *path, size_t len)
{
	const char *src = getenv("SHOAL_SRCDIR");
	if (src) {
		snprintf(path, len, "%s/bench/%s", src, rel);
		if (access(path, R_OK) == 0)
			return 0;
	}
	const char *here = __FILE__; /* .../bench/bench.c */
	const char *slash = strrchr(here, '/');
	snprintf(path, len, "%.*s/%s", slash ? (int)(slash - here) : 1, slash ? here : ".", rel);
	return access(path, R_OK) == 0 ? 0 : -1;
}

double sh_bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int sh_bench_proc_mem(pid_t pid, long *uss_kib, long *pss_kib)
{
	char path[64], line[256];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/smaps_rollup");
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v, uss = 0, pss = -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Pss: %ld kB", &v) == 1)
			pss = v;
		else if (sscanf(line, "Private_Clean: %ld kB", &v) == 1 ||
			 sscanf(line, "Private_Dirty: %ld kB", &v) == 1)
			uss += v;
	}
	fclose(f);
	if (uss_kib)
		*uss_kib = uss;
	if (pss_kib)
		*pss_kib = pss;
	return pss < 0 ? -1 : 0;
}

long sh_bench_self_pss_kib(void)
{
	long pss;
	return sh_bench_proc_mem(0, NULL, &pss) == 0 ? pss : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

void sh_bench_percentiles(double *v, int n, double *p50, double *p99)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	*p50 = v[n / 2];
	*p99 = v[(size_t)((double)n * 0.99)];
}

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t k = write(fd, p, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		p += k;
		len -= (size_t)k;
	}
}

/* Reads fd until EOF into buf (excess is read and dropped) or until the
 * deadline. Returns the bytes kept, or -1 on timeout. */
static ssize_t read_until_eof(int fd, char *buf, size_t cap, double deadline)
{
	size_t got = 0;
	char scratch[4096];
	for (;;) {
		double left = deadline - sh_bench_now();
		if (left <= 0)
			return -1;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int k = poll(&p, 1, (int)(left * 1000) + 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			continue;
		char *dst = got < cap ? buf + got : scratch;
		size_t room = got < cap ? cap - got : sizeof(scratch);
		ssize_t n = read(fd, dst, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return (ssize_t)got;
		if (dst != scratch)
			got += (size_t)n;
	}
}

static void describe_status(int st, char *err, size_t errlen)
{
	if (WIFSIGNALED(st))
		snprintf(err, errlen, "child killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else
		snprintf(err, errlen, "child exited with status %d", WEXITSTATUS(st));
}

/* Aligned so the payload after it is aligned for any result struct. */
struct child_head {
	_Alignas(16) int rc;
	char err[240];
};

/* Waits for a child (killing it first when it overran its time) and
 * returns its wait status; *peak_rss_kib (may be NULL) gets its own peak. */
static int reap(pid_t pid, bool kill_it, long *peak_rss_kib)
{
	if (kill_it)
		kill(pid, SIGKILL);
	int st = 0;
	struct rusage ru;
	memset(&ru, 0, sizeof(ru));
	while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
		;
	if (peak_rss_kib)
		*peak_rss_kib = ru.ru_maxrss;
	return st;
}

/* Forks with a pipe from child to parent: returns the pid (0 in the child)
 * with fds[] open, or -1 with err set and nothing left open. */
static pid_t start_child(int fds[2], char *err, size_t errlen)
{
	if (pipe2(fds, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
	}
	return pid;
}

int sh_bench_in_child(sh_bench_child_fn fn, void *arg, void *out, size_t out_size, int timeout_s,
		      long *peak_rss_kib, char *err, size_t errlen)
{
	int fds[2];
	*peak_rss_kib = -1;
	size_t total = sizeof(struct child_head) + out_size;
	char *buf = calloc(1, total);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pid_t pid = start_child(fds, err, errlen);
	if (pid < 0) {
		free(buf);
		return -1;
	}
	if (pid == 0) {
		close(fds[0]);
		struct child_head *h = (struct child_head *)buf;
		h->rc = fn(arg, buf + sizeof(*h), out_size, h->err, sizeof(h->err));
		write_all(fds[1], buf, total);
		_exit(0);
	}
	close(fds[1]);
	ssize_t got = read_until_eof(fds[0], buf, total, sh_bench_now() + timeout_s);
	close(fds[0]);
	int st = reap(pid, got < 0, peak_rss_kib);
	int rc = -1;
	struct child_head h;
	memcpy(&h, buf, sizeof(h));
	if (got < 0)
		snprintf(err, errlen, "timed out after %d s (child killed)", timeout_s);
	else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || (size_t)got != total)
		describe_status(st, err, errlen);
	else if (h.rc != 0)
		snprintf(err, errlen, "%s", h.err[0] ? h.err : "failed without a message");
	else {
		memcpy(out, buf + sizeof(h), out_size);
		rc = 0;
	}
	free(buf);
	return rc;
}

int sh_bench_exec(char *const argv[], const char *dir, char *const env[], char *out, size_t outlen,
		  int timeout_s, long *peak_rss_kib, char *err, size_t errlen)
{
	int fds[2];
	if (peak_rss_kib)
		*peak_rss_kib = -1;
	if (outlen)
		out[0] = '\0';
	pid_t pid = start_child(fds, err, errlen);
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		for (size_t i = 0; env && env[i]; i++) {
			char name[128];
			const char *eq = strchr(env[i], '=');
			if (!eq || (size_t)(eq - env[i]) >= sizeof(name))
				continue;
			memcpy(name, env[i], (size_t)(eq - env[i]));
			name[eq - env[i]] = '\0';
			setenv(name, eq + 1, 1);
		}
		if (dir && chdir(dir) != 0) {
			dprintf(2, "cannot enter %s: %s\n", dir, strerror(errno));
			_exit(127);
		}
		execvp(argv[0], argv);
		dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	ssize_t got =
		read_until_eof(fds[0], out, outlen ? outlen - 1 : 0, sh_bench_now() + timeout_s);
	close(fds[0]);
	if (got >= 0 && outlen)
		out[got] = '\0';
	int st = reap(pid, got < 0, peak_rss_kib);
	if (got < 0) {
		snprintf(err, errlen, "%s timed out after %d s (killed)", argv[0], timeout_s);
		return -1;
	}
	if (!WIFEXITED(st)) {
		describe_status(st, err, errlen);
		return -1;
	}
	return WEXITSTATUS(st);
}

/* ---- suites and the driver ---------------------------------------------- */

const sh_bench_suite sh_bench_suites[] = {
	{"fibers", "hackysack, hop cost and context switches: shoal fibers vs Go goroutines",
	 sh_bench_fibers, sh_bench_fibers_table, sh_bench_fibers_plot},
	{"ring", "request/reply round trip between processes: shared-memory rings vs a unix socket",
	 sh_bench_ring, sh_bench_ring_table, NULL},
	{"store", "object store: small put/get, a 1100-tensor state dict, reader memory",
	 sh_bench_store, sh_bench_store_table, sh_bench_store_plot},
	{"rpc", "calls into extension processes vs local calls (pyisolate's suite), start, memory",
	 sh_bench_rpc, sh_bench_rpc_table, sh_bench_rpc_plot},
	{"tasks", "a flood of no-op tasks through a controller to 2 engines (ipyparallel's test)",
	 sh_bench_tasks, sh_bench_tasks_table, sh_bench_tasks_plot},
	{"py-store", "the object store from Python: small put/get, a state dict, arrays, readers",
	 sh_bench_pystore, sh_bench_pystore_table, NULL},
	{"py-rpc",
	 "isolated Python extensions: pyisolate's calls vs local ones, start, idle memory",
	 sh_bench_pyrpc, sh_bench_pyrpc_table, NULL},
	{"py-tasks",
	 "the task farm from Python: a flood, buffers, a cluster's start, vs ipyparallel",
	 sh_bench_pytasks, sh_bench_pytasks_table, sh_bench_pytasks_plot},
	{"py-fibers",
	 "Python tasklets on shoal's fibers: hackysack, hop, spawn, idle memory, vs greenlet, "
	 "gevent, asyncio",
	 sh_bench_pyfibers, sh_bench_pyfibers_table, sh_bench_pyfibers_plot},
	{"cluster",
	 "stores on two hosts: an object migrated between shoalds vs raw TCP, dedup of asks",
	 sh_bench_cluster, sh_bench_cluster_table, NULL},
};
const size_t sh_bench_nsuites = sizeof(sh_bench_suites) / sizeof(sh_bench_suites[0]);

const sh_bench_suite *sh_bench_find_suite(const char *name)
{
	for (size_t i = 0; i < sh_bench_nsuites; i++)
		if (strcmp(sh_bench_suites[i].name, name) == 0)
			return &sh_bench_suites[i];
	return NULL;
}

/* FILE.svg for one suite, FILE-SUITE.svg when several suites plot. */
static void plot_path(char *buf, size_t len, const char *path, const char *suite, int several)
{
	if (!several) {
		snprintf(buf, len, "%s", path);
		return;
	}
	size_t stem = strlen(path) - 4;
	snprintf(buf, len, "%.*s-%s.svg", (int)stem, path, suite);
}

/* Whether a file can be written at path, before a run that would end by
 * writing it: opened for writing as the run will (created and removed
 * again when it was not there; an existing file is left as it is). 0, or
 * -1 with the reason in err. */
static int check_out_path(const char *opt, const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	bool made = fd >= 0;
	if (fd < 0 && errno == EEXIST)
		fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		struct stat st;
		snprintf(err, errlen, "%s %s: cannot write it: %s", opt, path,
			 errno == EISDIR || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
				 ? "it is a directory"
				 : strerror(errno));
		return -1;
	}
	close(fd);
	if (made)
		unlink(path);
	return 0;
}

int sh_bench_main(const sh_bench_suite *const *suites, size_t n, const sh_bench_opts *o)
{
	sh_bench_report r;
	int status = 0, nplots = 0;
	char err[4200];
	for (size_t i = 0; i < n; i++)
		nplots += suites[i]->plot != NULL;
	if (o->plot && nplots == 0) {
		fprintf(stderr,
			"shoal bench: --plot: %s sweeps no size or count, so it has nothing to "
			"plot (fibers, store, rpc, tasks, py-tasks and py-fibers do)\n",
			n == 1 ? suites[0]->name : "none of these suites");
		return 2;
	}
	for (size_t i = 0; o->plot && i < n; i++) {
		char path[4096];
		if (!suites[i]->plot)
			continue;
		plot_path(path, sizeof(path), o->plot, suites[i]->name, nplots > 1);
		if (check_out_path("--plot", path, err, sizeof(err)) != 0) {
			fprintf(stderr, "shoal bench: %s\n", err);
			return 2;
		}
	}
	if (o->csv && check_out_path("--csv", o->csv, err, sizeof(err)) != 0) {
		fprintf(stderr, "shoal bench: %s\n", err);
		return 2;
	}
	sh_bench_report_init(&r);
	for (size_t i = 0; i < n; i++) {
		const sh_bench_suite *s = suites[i];
		size_t before = r.n;
		r.notes_len = 0;
		r.notes[0] = '\0';
		/* Only shoal's own rows fail the run: a baseline or a peer that
		 * could not run is a row of the table (failed, with why), and
		 * the figures it would have framed still stand. */
		if (s->run(o, &r) != 0)
			status = 1;
		for (size_t k = before; k < r.n; k++)
			if (r.res[k].status == SH_BENCH_FAILED && r.res[k].own)
				status = 1;
		if (!o->json) {
			if (i)
				fputc('\n', stdout);
			s->table(stdout, &r);
			fflush(stdout);
		}
		if (o->plot && !s->plot)
			fprintf(stderr, "shoal bench: no plot for %s: it sweeps no size or count\n",
				s->name);
		if (o->plot && s->plot) {
			char path[4096];
			plot_path(path, sizeof(path), o->plot, s->name, nplots > 1);
			FILE *f = fopen(path, "w");
			if (f) {
				s->plot(f, &r);
				if (fclose(f) != 0)
					f = NULL;
			}
			if (!f) {
				fprintf(stderr, "shoal bench: cannot write %s: %s\n", path,
					strerror(errno));
				status = 2;
			}
		}
	}
	if (o->json)
		sh_bench_print_json(stdout, &r);
	if (o->csv && sh_bench_write_csv(o->csv, &r) != 0) {
		fprintf(stderr, "shoal bench: cannot write %s: %s\n", o->csv, strerror(errno));
		status = 2;
	}
	sh_bench_report_free(&r);
	return status;
}

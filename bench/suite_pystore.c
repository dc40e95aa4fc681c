/* The py-store suite: the object store from Python, as a Python user reaches it
 * (`import shoal`). The measuring is Python's own (python/shoal/bench.py, run as
 * `python3 -m shoal.bench store --json` with Debian's python3 on this build's
 * package, or the installed one); this suite reads its JSON Lines into the report,
 * so the table, --json, --csv and the summary are every suite's. sh_bench_python,
 * the running and reading, serves every suite measured from Python (py-rpc too). */
#include "bench.h"

#include <cjson/cJSON.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUITE "py-store"
#define PYTHON "/usr/bin/python3"

/* The directory holding the shoal package: beside this program's build
 * (build/X/python), or the install's lib/python3.N/dist-packages. */
static int package_dir(char *out, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0; /* .../tools or .../bin */
	char probe[PATH_MAX + 64];
	snprintf(probe, sizeof(probe), "%s/../python/shoal/__init__.py", exe);
	if (access(probe, R_OK) == 0) {
		probe[strlen(probe) - strlen("/shoal/__init__.py")] = 0;
		if (strlen(probe) >= len)
			return -1;
		memcpy(out, probe, strlen(probe) + 1);
		return 0;
	}
	snprintf(probe, sizeof(probe), "%s/../lib/python3*/dist-packages/shoal/__init__.py", exe);
	glob_t g;
	int rc = -1;
	if (glob(probe, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
		char *p = g.gl_pathv[0];
		p[strlen(p) - strlen("/shoal/__init__.py")] = 0;
		if (strlen(p) < len) {
			memcpy(out, p, strlen(p) + 1);
			rc = 0;
		}
	}
	globfree(&g);
	return rc;
}

/* The unit a metric's name carries, for the table. */
static const char *unit_of(const char *metric)
{
	static const char *const units[][2] = {
		{"_us", "us"},	 {"_ms", "ms"},		{"_mb_s", "MB/s"}, {"_pct", "%"},
		{"_kib", "KiB"}, {"_per_s", "tasks/s"}, {"_ns", "ns"},	   {"_bytes", "bytes"}};
	size_t n = strlen(metric);
	if (strcmp(metric, "mb_s") == 0)
		return "MB/s";
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t k = strlen(units[i][0]);
		if (n >= k && strcmp(metric + n - k, units[i][0]) == 0)
			return units[i][1];
	}
	return NULL;
}

/* One JSON line of shoal.bench as a result of suite in r: the row, or
 * NULL when the line is not one. */
static const sh_bench_result *add_line(sh_bench_report *r, const char *suite, const cJSON *j)
{
	const cJSON *test = cJSON_GetObjectItem(j, "test"), *impl = cJSON_GetObjectItem(j, "impl");
	const cJSON *params = cJSON_GetObjectItem(j, "params");
	const cJSON *metrics = cJSON_GetObjectItem(j, "metrics");
	const cJSON *status = cJSON_GetObjectItem(j, "status");
	if (!cJSON_IsString(test) || !cJSON_IsString(impl) || !cJSON_IsObject(metrics))
		return NULL;
	sh_bench_result *x = sh_bench_add(r, suite, test->valuestring, impl->valuestring,
					  cJSON_IsTrue(cJSON_GetObjectItem(j, "baseline")));
	const cJSON *it;
	cJSON_ArrayForEach(it, params)
	{
		if (cJSON_IsNumber(it))
			sh_bench_param_num(x, it->string, it->valuedouble);
		else if (cJSON_IsString(it))
			sh_bench_param_str(x, it->string, it->valuestring);
		else if (cJSON_IsBool(it))
			sh_bench_param_bool(x, it->string, cJSON_IsTrue(it));
	}
	if (cJSON_IsString(status) && strcmp(status->valuestring, "ok") != 0) {
		const cJSON *why = cJSON_GetObjectItem(j, "reason");
		if (!why)
			why = cJSON_GetObjectItem(j, "error");
		const char *w = cJSON_IsString(why) ? why->valuestring : "";
		if (strcmp(status->valuestring, "skipped") == 0)
			sh_bench_skip(x, "%s", w);
		else
			sh_bench_fail(x, "%s", w);
		return x;
	}
	/* The table shows a mean, a rate or a share, else the first figure with
	 * a unit; the comparison with the baseline row uses the same one (a time,
	 * a rate inverted, or an amount of memory). */
	const char *shown = NULL, *first = NULL;
	double v = 0, v_first = 0;
	cJSON_ArrayForEach(it, metrics)
	{
		if (!cJSON_IsNumber(it))
			continue;
		sh_bench_metric_set(x, it->string, it->valuedouble);
		if (!first && unit_of(it->string))
			first = it->string, v_first = it->valuedouble;
		if (!shown && unit_of(it->string) &&
		    (strncmp(it->string, "mean_", 5) == 0 || strcmp(it->string, "mb_s") == 0 ||
		     strstr(it->string, "_pct")))
			shown = it->string, v = it->valuedouble;
	}
	if (!shown)
		shown = first, v = v_first;
	if (!shown)
		return x;
	const char *u = unit_of(shown);
	sh_bench_show_samples(x, &v, 1, u);
	if (strncmp(shown, "mean_", 5) == 0) {
		/* Repetitions with their spread (std_, min_, max_ in the same
		 * unit, and runs): shown as every suite shows them. */
		char k[3][32];
		snprintf(k[0], sizeof(k[0]), "std_%s", shown + 5);
		snprintf(k[1], sizeof(k[1]), "min_%s", shown + 5);
		snprintf(k[2], sizeof(k[2]), "max_%s", shown + 5);
		double runs = sh_bench_metric_get(x, "runs", 0);
		if (runs > 1 && sh_bench_metric_get(x, k[0], -1) >= 0 &&
		    sh_bench_metric_get(x, k[1], -1) >= 0 &&
		    sh_bench_metric_get(x, k[2], -1) >= 0) {
			x->sd = sh_bench_metric_get(x, k[0], 0);
			x->min = sh_bench_metric_get(x, k[1], 0);
			x->max = sh_bench_metric_get(x, k[2], 0);
			x->nsamples = (int)runs;
		}
		double rate = sh_bench_metric_get(x, "mb_s", 0);
		if (rate > 0)
			snprintf(x->aside, sizeof(x->aside), "%.0f MB/s", rate);
	}
	if (strcmp(u, "us") == 0 || strcmp(u, "ms") == 0 || strcmp(u, "ns") == 0) {
		x->cmp_value = v;
		x->cmp_word = "faster";
	} else if ((strcmp(u, "MB/s") == 0 || strcmp(u, "tasks/s") == 0) && v > 0) {
		x->cmp_value = 1 / v;
		x->cmp_word = "faster";
	} else if (strcmp(u, "KiB") == 0 || strcmp(u, "bytes") == 0) {
		x->cmp_value = v;
		x->cmp_word = "cheaper";
	}
	return x;
}

int sh_bench_python(const sh_bench_opts *o, sh_bench_report *r, const char *suite,
		    const char *pysuite, const char *first_test)
{
	char dir[PATH_MAX], env_path[PATH_MAX + 16], err[256];
	if (package_dir(dir, sizeof(dir)) != 0 || access(PYTHON, X_OK) != 0) {
		sh_bench_result *x = sh_bench_add(r, suite, first_test, "shoal", 0);
		sh_bench_skip(x, "%s",
			      access(PYTHON, X_OK) != 0
				      ? PYTHON " is not installed"
				      : "the shoal Python package is neither in this build "
					"(build/X/python) nor installed beside this program");
		return 0;
	}
	snprintf(env_path, sizeof(env_path), "PYTHONPATH=%s", dir);
	/* the store daemon of this build, for the rows that start their own */
	char shoald[PATH_MAX], lib[PATH_MAX], env_shoald[PATH_MAX + 16];
	snprintf(env_shoald, sizeof(env_shoald), "SHOAL_SHOALD=shoald");
	if (sh_bench_find_tool("shoald", shoald, lib, sizeof(shoald)) == 0)
		snprintf(env_shoald, sizeof(env_shoald), "SHOAL_SHOALD=%s", shoald);
	char *env[] = {env_path, env_shoald, "PYTHONDONTWRITEBYTECODE=1", NULL};
	/* the suite's parts (py-rpc's: calls, shared, readers, start, idle) */
	char only[96] = "";
	if (o->only && !strcmp(pysuite, "rpc"))
		snprintf(only, sizeof(only), "--only=%s", o->only);
	char *argv[8] = {PYTHON, "-m", "shoal.bench", (char *)pysuite, "--json"};
	int na = 5;
	if (o->quick)
		argv[na++] = "--quick";
	if (o->large)
		argv[na++] = "--large";
	if (only[0])
		argv[na++] = only;
	argv[na] = NULL;
	size_t cap = 1 << 20;
	char *out = malloc(cap);
	if (!out)
		return -1;
	int st = sh_bench_exec(argv, NULL, env, out, cap, o->quick ? 300 : 1800, NULL, err,
			       sizeof(err));
	int lines = 0, own_failed = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		cJSON *j = line[0] == '{' ? cJSON_Parse(line) : NULL;
		const sh_bench_result *x = j && cJSON_IsString(cJSON_GetObjectItem(j, "suite"))
						   ? add_line(r, suite, j)
						   : NULL;
		if (x) {
			lines++;
			own_failed += x->status == SH_BENCH_FAILED && x->own;
		}
		cJSON_Delete(j);
	}
	/* (it exits 1 when one of its shoal rows failed: those rows say why) */
	if (lines == 0 || (st != 0 && !(st == 1 && own_failed))) {
		sh_bench_result *x = sh_bench_add(r, suite, "run", "python3", 0);
		sh_bench_fail(x, "python3 -m shoal.bench %s: %s", pysuite,
			      st < 0 ? err : "exited with an error (run it by hand to see it)");
	}
	free(out);
	return 0;
}

int sh_bench_pystore(const sh_bench_opts *o, sh_bench_report *r)
{
	return sh_bench_python(o, r, SUITE, "store", "put_small");
}

static const char *param_or(const sh_bench_result *x, const char *name, const char *def)
{
	const char *v = sh_bench_param_get(x, name);
	return v ? v : def;
}

void sh_bench_pystore_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench py-store: the object store from Python (import shoal), "
			     "beside pickle through shared memory, torch.load and memcpy");
	const sh_bench_result *g = NULL, *sd = NULL, *tl = NULL, *gt = NULL;
	double rd_max = 0;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || x->status != 0)
			continue;
		if (!strcmp(x->test, "get_small") && !x->baseline)
			g = x;
		if (!strcmp(x->test, "get_tasklets") && !x->baseline)
			gt = x;
		if (!strcmp(x->test, "get_state_dict") && !strcmp(x->label, "shoal"))
			sd = x;
		if (!strcmp(x->test, "get_state_dict") && !strcmp(x->label, "torch.load"))
			tl = x;
		double u = sh_bench_metric_get(x, "uss_per_reader_pct", -1);
		if (u > rd_max)
			rd_max = u;
	}
	fprintf(f, "summary:");
	if (g)
		fprintf(f, " get_small p50 %.2f us (goal <= 5: %s);",
			sh_bench_metric_get(g, "p50_us", 0),
			sh_bench_metric_get(g, "p50_us", 0) <= 5 ? "met" : "NOT met");
	if (gt) {
		double q = sh_bench_metric_get(gt, "ratio_vs_sequential", 0),
		       t = sh_bench_metric_get(gt, "threads_added", -1);
		fprintf(f,
			" 1 000 tasklets' gets at once %.1f ms, %.2fx 1 000 in a row, %.0f threads "
			"added (goals <= 2x, 0: %s);",
			sh_bench_metric_get(gt, "total_ms", 0), q, t,
			q <= 2 && t == 0 ? "met" : "NOT met");
	}
	if (sd && tl) {
		double a = sh_bench_metric_get(sd, "mean_ms", 0),
		       b = sh_bench_metric_get(tl, "mean_ms", 0);
		fprintf(f,
			" get_state_dict %.2f ms, %.0fx torch.load (goals <= 5 ms, >= 100x: %s);",
			a, a > 0 ? b / a : 0, a <= 5 && a > 0 && b / a >= 100 ? "met" : "NOT met");
	}
	/* the bulk rows, each on the pages it ran on */
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || x->status != 0 || x->baseline)
			continue;
		const char *pages = param_or(x, "pages", "4k");
		bool reserve = !strcmp(param_or(x, "reserve", "false"), "true");
		double q = sh_bench_metric_get(x, "ratio_vs_memcpy", -1);
		if (!strcmp(x->test, "put_array") && q >= 0 &&
		    atof(param_or(x, "bytes", "0")) >= (64 << 20)) {
			double goal = reserve ? 0.9 : 0.6;
			fprintf(f,
				" put_array of %s on %s pages%s %.2f of memcpy (goal >= %.1f: %s);",
				atof(param_or(x, "bytes", "0")) >= (1 << 30) ? "1 GiB" : "64 MiB",
				pages, reserve ? " with --reserve" : "", q, goal,
				q >= goal ? "met" : "NOT met");
		} else if (!strcmp(x->test, "put_state_dict") && q >= 0) {
			fprintf(f, " put_state_dict on %s pages %.2f of memcpy (goal >= 0.8: %s);",
				pages, q, q >= 0.8 ? "met" : "NOT met");
		} else if (!strcmp(x->test, "fetch_state_dict_first")) {
			double t = sh_bench_metric_get(x, "ratio_vs_tcp_copy", -1);
			fprintf(f,
				" its first fetch into a fresh store on %s pages %.2fx a plain TCP "
				"copy (goal <= 1.25: %s);",
				pages, t, t >= 0 && t <= 1.25 ? "met" : "NOT met");
		}
	}
	fprintf(f, " a reader adds %.3f%% of the tensor (goal <= 1%%: %s)\n", rd_max,
		rd_max <= 1 ? "met" : "NOT met");
}

/* The py-fibers suite: Python tasklets on shoal's fibers (shoal.tasklets, issue 34)
 * beside greenlet, gevent, asyncio and a generator scheduler (Fibra's shape), each in
 * its best setting, with the same script shape, in the same run: hackysack, a hop,
 * a spawn and the memory of a blocked tasklet. The measuring is Python's own
 * (python/shoal/bench_fibers.py, `python3 -m shoal.bench fibers --json`), run and
 * read by sh_bench_python as py-store's is; this file adds the table's summary (the
 * goals of issue 34) and the plot: hackysack's time against n, a line per impl. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUITE "py-fibers"

int sh_bench_pyfibers(const sh_bench_opts *o, sh_bench_report *r)
{
	return sh_bench_python(o, r, SUITE, "fibers", "hackysack");
}

static const char *met(int ok)
{
	return ok ? "met" : "NOT met";
}

/* The ok row of test by impl; for hackysack the one with the largest n. */
static const sh_bench_result *find(const sh_bench_report *r, const char *test, const char *impl)
{
	const sh_bench_result *best = NULL;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		const char *n = sh_bench_param_get(x, "n");
		if (strcmp(x->suite, SUITE) != 0 || x->status != SH_BENCH_OK ||
		    strcmp(x->test, test) != 0 || strcmp(x->label, impl) != 0 || !n)
			continue;
		if (!best || atof(n) > atof(sh_bench_param_get(best, "n")))
			best = x;
	}
	return best;
}

void sh_bench_pyfibers_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench py-fibers: Python tasklets on shoal's fibers "
			     "(shoal.tasklets) beside greenlet, gevent, asyncio and a generator "
			     "scheduler, same scripts, same run");
	const sh_bench_result *hs = find(r, "hackysack", "shoal");
	const sh_bench_result *gl = find(r, "hackysack", "greenlet");
	const sh_bench_result *hop = find(r, "hop", "shoal");
	const sh_bench_result *idle = find(r, "idle", "shoal");
	fprintf(f, "summary:");
	if (hs) {
		double s = sh_bench_metric_get(hs, "best_s", 0);
		const char *n = sh_bench_param_get(hs, "n");
		fprintf(f, " hackysack(%s,%s) best %.1f ms (goal <= 15 ms at 10000: %s);", n,
			sh_bench_param_get(hs, "turns"), s * 1e3,
			atof(n) == 10000 ? met(s <= 0.015) : "not run at 10000");
		if (gl && !strcmp(sh_bench_param_get(gl, "n"), n)) {
			double x = sh_bench_metric_get(gl, "best_s", 0) / s;
			fprintf(f, " %.0fx greenlet (goal >= 30x: %s);", x, met(x >= 30));
		}
		static const char *const others[] = {"gevent", "asyncio", "generator"};
		for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
			const sh_bench_result *o = find(r, "hackysack", others[i]);
			if (o && !strcmp(sh_bench_param_get(o, "n"), n))
				fprintf(f, " %s %.1f ms;", others[i],
					sh_bench_metric_get(o, "best_s", 0) * 1e3);
		}
	}
	if (hop) {
		double v = sh_bench_metric_get(hop, "ns", 0);
		fprintf(f, " hop %.0f ns (goal <= 100: %s);", v, met(v <= 100));
	}
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) || x->status != SH_BENCH_OK ||
		    strcmp(x->test, "spawn") || strcmp(x->label, "shoal"))
			continue;
		double v = sh_bench_metric_get(x, "ns", 0);
		fprintf(f, " spawn %.0f ns a tasklet at n=%s (goal <= 500: %s);", v,
			sh_bench_param_get(x, "n"), met(v <= 500));
	}
	if (idle) {
		double v = sh_bench_metric_get(idle, "uss_bytes", 0);
		fprintf(f, " idle %.1f KiB Uss a blocked tasklet of %s (goal <= 16 KiB: %s)",
			v / 1024, sh_bench_param_get(idle, "n"), met(v <= 16 * 1024));
	}
	fprintf(f, "\n");
}

void sh_bench_pyfibers_plot(FILE *f, const sh_bench_report *r)
{
	/* the seed's plot: hackysack's time against the number of sackers */
	const sh_bench_lines hs = {SUITE,
				   "hackysack",
				   "n",
				   "impl",
				   "best_s",
				   1,
				   "hackysack, 1000 turns: best of 5, of 3 with --quick (Python)",
				   "sackers (tasklets, each with a channel)",
				   "time (s)"};
	int y = sh_bench_svg_begin(f, 760, 420,
				   "shoal bench py-fibers: Python tasklets and their peers");
	sh_bench_svg_lines(f, r, &hs, 0, y, 760, 360);
	sh_bench_svg_end(f);
}

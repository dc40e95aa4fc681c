/* The py-tasks suite: the task farm from Python (shoal.tasks), the seed's flood and
 * buffers on ipyparallel's scheduler, side by side with ipyparallel in the same run.
 * The measuring is Python's own (python/shoal/bench_tasks.py, `python3 -m
 * shoal.bench tasks --json`), run and read by sh_bench_python as py-store's is; this
 * file adds the table's summary, the goals of issue 20, and the plot: the seed's
 * time against N, a line per scheme and peer. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUITE "py-tasks"

int sh_bench_pytasks(const sh_bench_opts *o, sh_bench_report *r)
{
	return sh_bench_python(o, r, SUITE, "tasks", "flood");
}

static const char *met(int ok)
{
	return ok ? "met" : "NOT met";
}

/* The ok flood row of impl with the largest n (and that transport), or NULL. */
static const sh_bench_result *largest_flood(const sh_bench_report *r, const char *impl,
					    const char *transport, double below)
{
	const sh_bench_result *best = NULL;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		const char *n = sh_bench_param_get(x, "n"), *t = sh_bench_param_get(x, "transport");
		const char *s = sh_bench_param_get(x, "scheme");
		if (strcmp(x->suite, SUITE) != 0 || x->status != 0 || strcmp(x->test, "flood") ||
		    strcmp(x->label, impl) || !n || !t || strcmp(t, transport) ||
		    (s && strcmp(s, "leastload")) || atof(n) > below)
			continue;
		if (!best || atof(n) > atof(sh_bench_param_get(best, "n")))
			best = x;
	}
	return best;
}

void sh_bench_pytasks_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench py-tasks: the task farm from Python (shoal.tasks), "
			     "beside ipyparallel with as many engines");
	const sh_bench_result *fl = largest_flood(r, "shoal", "local", 1e18);
	const sh_bench_result *ip = largest_flood(r, "ipyparallel", "zmq-tcp", 1e18);
	const sh_bench_result *same =
		ip ? largest_flood(r, "shoal", "local", atof(sh_bench_param_get(ip, "n"))) : NULL;
	double buf = -1, start = -1;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || x->status != 0 || strcmp(x->label, "shoal"))
			continue;
		const char *b = sh_bench_param_get(x, "bytes");
		if (!strcmp(x->test, "buffers") && b && atof(b) >= (1 << 20)) {
			double m = sh_bench_metric_get(x, "mb_s", 0);
			if (buf < 0 || m < buf)
				buf = m;
		}
		if (!strcmp(x->test, "cluster_start"))
			start = sh_bench_metric_get(x, "mean_ms", -1);
	}
	fprintf(f, "summary:");
	if (fl) {
		double m = sh_bench_metric_get(fl, "roundtrip_per_s", 0);
		fprintf(f,
			" flood of %s no-op tasks, local: %.0f a second (goal at 65536: >= 100000: "
			"%s);",
			sh_bench_param_get(fl, "n"), m,
			atof(sh_bench_param_get(fl, "n")) >= 65536 ? met(m >= 100000)
								   : "not run at 65536");
	}
	if (ip && same) {
		double x = sh_bench_metric_get(same, "roundtrip_per_s", 0) /
			   sh_bench_metric_get(ip, "roundtrip_per_s", 1);
		fprintf(f, " %.0fx ipyparallel at n=%s (goal >= 250x: %s);", x,
			sh_bench_param_get(ip, "n"), met(x >= 250));
	}
	if (buf >= 0)
		fprintf(f,
			" numpy buffers of 1 MiB and more %.0f MB/s at least (goal >= 1000: %s);",
			buf, met(buf >= 1000));
	if (start >= 0)
		fprintf(f, " Cluster(n=2) up and answering in %.0f ms (goal <= 300: %s)", start,
			met(start <= 300));
	fprintf(f, "\n");
}

void sh_bench_pytasks_plot(FILE *f, const sh_bench_report *r)
{
	/* the seed's plot: time against N, log-log, a line per scheme and peer */
	const sh_bench_lines rt = {SUITE,
				   "flood",
				   "n",
				   "scheme,transport,impl",
				   "roundtrip_s",
				   1,
				   "Roundtrip: first submit to last result, best of 3 (Python)",
				   "no-op tasks in the flood",
				   "time (s)"},
			     sent = {SUITE,
				     "flood",
				     "n",
				     "scheme,transport,impl",
				     "sent_s",
				     1,
				     "Sent: first submit until the last submit returns (Python)",
				     "no-op tasks in the flood",
				     "time (s)"},
			     buf = {SUITE,
				    "buffers",
				    "bytes",
				    "impl",
				    "mb_s",
				    1,
				    "A numpy array echoed by a task: throughput (raw tcp: a socket "
				    "alone)",
				    "bytes of the array",
				    "throughput (MB/s)"};
	int y = sh_bench_svg_begin(f, 760, 1300,
				   "shoal bench py-tasks: 2 Python engines, beside ipyparallel");
	y += sh_bench_svg_lines(f, r, &rt, 0, y, 760, 360) + 10;
	y += sh_bench_svg_lines(f, r, &sent, 0, y, 760, 360) + 10;
	sh_bench_svg_lines(f, r, &buf, 0, y, 760, 360);
	sh_bench_svg_end(f);
}

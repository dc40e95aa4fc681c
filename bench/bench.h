/* The benchmark machinery every suite shares: result records, the tables
 * for people (one per kind of figure: times, rates, amounts), JSON Lines
 * for machines, CSV, small SVG plots, option parsing, and running one case
 * in a child process so that its peak RSS is its own; and each suite's
 * entry points, which the table of suites in bench.c lists. Suites fill an
 * sh_bench_report; the programs print it. Internal to bench/ and tools/:
 * names are sh_bench_*. */
#ifndef SH_BENCH_H
#define SH_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "lib/tools.h"

/* ---- options ------------------------------------------------------------ */

typedef struct sh_bench_opts {
	int quick;	  /* fewer iterations, smaller sizes */
	int json;	  /* JSON Lines on stdout instead of the table */
	int large;	  /* include the sizes that need many GiB */
	const char *csv;  /* write the results as CSV here, or NULL */
	const char *plot; /* write an SVG plot here, or NULL */
	int progress;	  /* say on stderr what runs (when it is a tty) */
	const char *only; /* only this part of a suite that has parts; NULL: all */
} sh_bench_opts;

/* Whether part of a suite runs (--only). */
static inline bool sh_bench_wants(const sh_bench_opts *o, const char *part)
{
	return !o->only || strcmp(o->only, part) == 0;
}

/* The options every benchmark program takes (sh_bench_opts_usage), for
 * the tools' parser (tools/lib/cli.c): a program's sh_cli holds this table. */
extern const struct option sh_bench_options[];

/* Parses argv's options into o, in the manner of every program (--help,
 * --version, and a usage error exits 2 naming the option); the operands
 * are left at argv[optind..]. */
void sh_bench_parse_opts(const sh_cli *c, int argc, char **argv, sh_bench_opts *o);

/* The option lines of a usage text, shared by every program. */
extern const char sh_bench_opts_usage[];

/* ---- results ------------------------------------------------------------ */

enum { SH_BENCH_OK = 0, SH_BENCH_FAILED = 1, SH_BENCH_SKIPPED = 2 };

#define SH_BENCH_MAX_PARAMS 8
#define SH_BENCH_MAX_METRICS 16

typedef struct sh_bench_param {
	char name[24];
	char text[40];
	/* JSON's type: a number or a boolean printed bare ("true"/"false"),
	 * a string quoted */
	enum { SH_BENCH_P_STR, SH_BENCH_P_NUM, SH_BENCH_P_BOOL } kind;
} sh_bench_param;

typedef struct sh_bench_metric {
	char name[32];
	double value;
} sh_bench_metric;

typedef struct sh_bench_result {
	char suite[16];
	char test[32];
	/* What was measured ("shoal", "go", "memcpy"): the table's impl
	 * column, "impl" in JSON and CSV (a case may have several baselines). */
	char label[16];
	/* 1: a reference measured in the same run (a local call, memcpy, a
	 * raw socket, a peer such as Go or ipyparallel), "baseline": true;
	 * 0: shoal's own figure, or a peer's compared with its baseline (the
	 * slower of Go's two settings). */
	int baseline;
	/* shoal's own (set from !baseline by sh_bench_add; 0 for a peer's
	 * row that is not a baseline): only a failure of shoal's own fails a
	 * run. */
	int own;
	int status;
	char message[256]; /* error (failed) or reason (skipped) */
	sh_bench_param params[SH_BENCH_MAX_PARAMS];
	int nparams;
	sh_bench_metric metrics[SH_BENCH_MAX_METRICS];
	int nmetrics;
	/* For the table: the repetitions' statistics in show_unit. A time
	 * unit ("s", "ms", "us", "ns", or one of them with a "/what" after
	 * it) is scaled to s/ms/us/ns as fits and shown with times (best =
	 * min); a unit ending in "/s" is a rate (best = max); anything else
	 * is an amount (KiB, MB). nsamples == 1: one figure, shown as a
	 * value, not as a mean. */
	int has_stats, nsamples;
	double mean, sd, min, max;
	char show_unit[16];
	/* Shown after the label in the table's impl column and as "variant"
	 * in JSON and CSV ("GOMAXPROCS=1"), or empty. */
	char variant[32];
	/* Appended to the table's last column ("0.22x memcpy"), or empty. */
	char aside[48];
	double peak_rss_kib; /* < 0: not measured */
	/* The figure compared with the baseline row of the same suite, test
	 * and params (lower is better), and the word for "lower" ("faster",
	 * "cheaper"). cmp_value <= 0: not compared. */
	double cmp_value;
	const char *cmp_word;
} sh_bench_result;

typedef struct sh_bench_report {
	sh_bench_result *res;
	size_t n, cap;
	/* Lines a suite wants printed under its table (a goal, a caveat). */
	char notes[2048];
	size_t notes_len;
} sh_bench_report;

void sh_bench_report_init(sh_bench_report *r);
void sh_bench_report_free(sh_bench_report *r);

/* A new result (status ok) appended to r; never NULL (exits on OOM, this is
 * a benchmark program). The pointer is valid until the next add. */
sh_bench_result *sh_bench_add(sh_bench_report *r, const char *suite, const char *test,
			      const char *label, int baseline);
void sh_bench_param_num(sh_bench_result *x, const char *name, double v);
void sh_bench_param_str(sh_bench_result *x, const char *name, const char *v);
/* A boolean parameter: true or false in JSON, "true"/"false" as its text. */
void sh_bench_param_bool(sh_bench_result *x, const char *name, bool v);
void sh_bench_metric_set(sh_bench_result *x, const char *name, double v);
/* The text of param name of x, or NULL. */
const char *sh_bench_param_get(const sh_bench_result *x, const char *name);
/* Returns the metric's value, or def when x has no such metric. */
double sh_bench_metric_get(const sh_bench_result *x, const char *name, double def);
void sh_bench_fail(sh_bench_result *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sh_bench_skip(sh_bench_result *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sh_bench_note(sh_bench_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets the table statistics from n samples already in unit. */
void sh_bench_show_samples(sh_bench_result *x, const double *v, int n, const char *unit);

/* Mean, sample standard deviation, min and max of v[0..n). */
void sh_bench_stats(const double *v, int n, double *mean, double *sd, double *min, double *max);

/* The baseline row matching x (same suite, test and params), or NULL. */
const sh_bench_result *sh_bench_baseline_of(const sh_bench_report *r, const sh_bench_result *x);

/* ---- output ------------------------------------------------------------- */

/* The tables for the results of one suite: ok rows, one table per kind of
 * figure (times, rates, amounts), then failed, skipped, the suite's notes;
 * the caller writes its summary line after. */
void sh_bench_print_table(FILE *f, const sh_bench_report *r, const char *suite, const char *title);
void sh_bench_print_json(FILE *f, const sh_bench_report *r);
/* Writes every result as CSV, one row per metric. Returns 0 or -1 (errno). */
int sh_bench_write_csv(const char *path, const sh_bench_report *r);

/* Appends to an SVG document one panel of grouped bars (log scale): one
 * group per params of `test` in `suite`, one bar per label, height =
 * metric * scale; y_label says in plain words what the bars are, with the
 * unit ("best of 3 runs (ms)"). Returns the height used. */
int sh_bench_svg_begin(FILE *f, int width, int height, const char *title);
int sh_bench_svg_bars(FILE *f, const sh_bench_report *r, const char *suite, const char *test,
		      const char *metric, double scale, const char *y_unit, int x, int y, int w,
		      int h);
/* A panel of lines on log-log axes: metric * scale against the numeric
 * param xparam, for the ok results of `test` (NULL: every test) in
 * `suite` that have xparam and every param of `series`: one line per
 * distinct combination of the series params (a comma-separated list of
 * up to 3, "scheme,transport"; "impl" is the label): the first picks the
 * colour, the second the dash,
 * its points in the order of x. The axes end at the data. Returns the
 * height used (legend included), 0 when nothing matched. */
typedef struct sh_bench_lines {
	const char *suite, *test, *xparam, *series, *metric;
	double scale;
	const char *title;   /* "round trip of the whole flood" */
	const char *x_label; /* "tasks in the flood" */
	const char *y_label; /* "time (s)" */
} sh_bench_lines;
int sh_bench_svg_lines(FILE *f, const sh_bench_report *r, const sh_bench_lines *l, int x, int y,
		       int w, int h);
void sh_bench_svg_end(FILE *f);

/* x against its baseline row: "7.3x faster than go, RSS 0.40x", "(baseline)"
 * for a baseline, "" when there is nothing to compare. */
void sh_bench_fmt_vs(char *buf, size_t len, const sh_bench_report *r, const sh_bench_result *x);

/* Formats seconds with a fitting unit ("2.91 ms"). */
void sh_bench_fmt_time(char *buf, size_t len, double s);
/* Formats a number for people: three significant digits below 10 000,
 * whole numbers in groups of three from there ("1 904 742"). */
void sh_bench_fmt_num(char *buf, size_t len, double v);

/* ---- child processes ---------------------------------------------------- */

/* Work done in a child: fills out[0..out_size) and returns 0, or returns -1
 * with a message in err. */
typedef int (*sh_bench_child_fn)(void *arg, void *out, size_t out_size, char *err, size_t errlen);

/* Runs fn in a forked child and copies its out back through a pipe.
 * *peak_rss_kib gets the child's ru_maxrss from wait4(). A child that
 * crashes, exits early or outlives timeout_s (then killed) is an error.
 * Returns 0 or -1 with err set. Call with stdout flushed. */
int sh_bench_in_child(sh_bench_child_fn fn, void *arg, void *out, size_t out_size, int timeout_s,
		      long *peak_rss_kib, char *err, size_t errlen);

/* Runs argv (PATH lookup) in dir (NULL: here) with the extra environment
 * entries env ("NAME=value", NULL-terminated, may be NULL), captures its
 * stdout and stderr together into out (NUL-terminated, truncated to
 * outlen), kills it after timeout_s. *peak_rss_kib (may be NULL) gets its
 * ru_maxrss. Returns the exit status (0-255), or -1 with err set when it
 * could not run, was killed or timed out. */
int sh_bench_exec(char *const argv[], const char *dir, char *const env[], char *out, size_t outlen,
		  int timeout_s, long *peak_rss_kib, char *err, size_t errlen);

/* Pss of the calling process in KiB from /proc/self/smaps_rollup, or -1. */
long sh_bench_self_pss_kib(void);
/* Uss (Private_Clean + Private_Dirty) and Pss of process pid (0: this
 * one) in KiB, from smaps_rollup; either pointer may be NULL. 0 or -1. */
int sh_bench_proc_mem(pid_t pid, long *uss_kib, long *pss_kib);

/* Sorts v[0..n) and gives its median and 99th percentile. */
void sh_bench_percentiles(double *v, int n, double *p50, double *p99);

/* A program of this project (tool: "shoal-ext", "shoal-engine") and the
 * library the rpc and tasks suites load (rpc_ext.so), next to this program
 * in a build tree (tools/, bench/), else where `make install` put them.
 * 0, or -1 when either is missing. */
int sh_bench_find_tool(const char *tool, char *tool_path, char *lib_path, size_t len);
/* A file the benchmarks load or run (access mode: R_OK, X_OK): bench/NAME
 * in a build tree beside this program's directory, else lib/shoal/NAME where
 * `make install` put it. 0, or -1 when it is in neither. */
int sh_bench_find_aux(const char *name, int mode, char *path, size_t len);

/* A source file of bench/ a suite runs (rel: "go/hackysack.go"), from
 * $SHOAL_SRCDIR/bench/ (an installed program), else from the source tree
 * this program was built from. 0, or -1 when it is in neither. */
int sh_bench_find_source(const char *rel, char *path, size_t len);

/* Removes path and everything under it (a scratch directory a suite made
 * for a peer), not following symbolic links. */
void sh_bench_rm_tree(const char *path);

/* Monotonic clock in seconds. */
double sh_bench_now(void);

/* Makes kind ("4k", "thp", "hugetlb") available to stores started from
 * now on, for bytes of segments: as root, grows the hugetlb pool or lets
 * shmem take transparent huge pages, until sh_bench_pages_reset (or exit,
 * or SIGINT/SIGTERM), which puts every setting back. 0, or -1 with why
 * (not root, a kernel without them, a pool that did not grow): the row is
 * then skipped with it. "4k" needs nothing. */
int sh_bench_pages_set(const char *kind, uint64_t bytes, char *why, size_t whylen);
void sh_bench_pages_reset(void);

/* Two network namespaces of the run's own joined by a veth pair (see
 * link.c): side 0 at addr[0], side 1 at addr[1]. name: "veth", or
 * "veth-RATE" once shaped. */
typedef struct sh_bench_link {
	int home, ns[2], hold[2];
	pid_t pid[2];
	char addr[2][16];
	char tc[64];
	char name[32];
} sh_bench_link;
/* 0, or -1 with why (not root, no tc, no namespaces): the rows skip. */
int sh_bench_link_up(sh_bench_link *l, char *why, size_t whylen);
/* Shapes both ends to rate (tc's words: "4gbit"). */
int sh_bench_link_shape(sh_bench_link *l, const char *rate, char *why, size_t whylen);
/* The calling thread enters side's namespace (-1: the run's own again):
 * what it starts from now on, and the sockets it makes, are there. */
int sh_bench_link_enter(const sh_bench_link *l, int side);
void sh_bench_link_down(sh_bench_link *l);

/* ---- suites ------------------------------------------------------------- */

typedef struct sh_bench_suite {
	const char *name;
	const char *about;
	/* Appends its results to r. Returns 0, or -1 if it could not run at
	 * all (results that failed are reported in r, not here). */
	int (*run)(const sh_bench_opts *o, sh_bench_report *r);
	/* Prints the suite's table (and summary) of r's results to f. */
	void (*table)(FILE *f, const sh_bench_report *r);
	/* Writes an SVG plot of its results to f, or NULL when it sweeps no
	 * size or count (asking for its plot is then an error, found before
	 * the run). */
	void (*plot)(FILE *f, const sh_bench_report *r);
} sh_bench_suite;

extern const sh_bench_suite sh_bench_suites[];
extern const size_t sh_bench_nsuites;
const sh_bench_suite *sh_bench_find_suite(const char *name);

/* Runs the given suites with o, prints tables or JSON, writes CSV and plot.
 * The --csv and --plot paths are checked before anything runs. Returns the
 * exit status for the program: 0, 1 if one of shoal's own results failed
 * (not a baseline's or a peer's: those are reported as failed rows, and
 * the run still passes) or a suite could not run, 2 if an output file
 * cannot be written or a plot was asked of a suite that has none (the
 * only suite run). */
int sh_bench_main(const sh_bench_suite *const *suites, size_t n, const sh_bench_opts *o);

/* The fibers suite (suite_fibers.c). */
int sh_bench_fibers(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_fibers_table(FILE *f, const sh_bench_report *r);
void sh_bench_fibers_plot(FILE *f, const sh_bench_report *r);
/* One hackysack case (n sackers plus one, turns kicks), shoal and go. */
int sh_bench_hackysack_case(const sh_bench_opts *o, sh_bench_report *r, uint32_t n, uint64_t turns);

/* The ring suite (suite_ring.c). */
int sh_bench_ring(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_ring_table(FILE *f, const sh_bench_report *r);

/* suite_rpc.c: pyisolate's call benchmarks, extension start and memory. */
int sh_bench_rpc(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_rpc_table(FILE *f, const sh_bench_report *r);
void sh_bench_rpc_plot(FILE *f, const sh_bench_report *r);

/* suite_tasks.c: the task farm's flood of no-op tasks. */
int sh_bench_tasks(const sh_bench_opts *o, sh_bench_report *r);
/* Its cluster_start rows (suite_launch.c): shoal cluster start per launcher
 * beside ipyparallel's; lib: an engine library for the C engines' row. */
void sh_bench_cluster_start(const sh_bench_opts *o, sh_bench_report *r, const char *lib);
void sh_bench_tasks_table(FILE *f, const sh_bench_report *r);
void sh_bench_tasks_plot(FILE *f, const sh_bench_report *r);
/* py-store: the store from Python (python/shoal/bench.py), read from its JSON. */
int sh_bench_pystore(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_pystore_table(FILE *f, const sh_bench_report *r);
/* Runs `python3 -m shoal.bench PYSUITE --json` on this build's (or the installed)
 * shoal package and adds its JSON lines to r as results of suite (suite_pystore.c);
 * when Python or the package is missing, first_test says so, skipped. */
int sh_bench_python(const sh_bench_opts *o, sh_bench_report *r, const char *suite,
		    const char *pysuite, const char *first_test);
/* py-rpc: isolated Python extensions (python/shoal/bench_rpc.py), from its JSON. */
int sh_bench_pyrpc(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_pyrpc_table(FILE *f, const sh_bench_report *r);
/* py-tasks: the task farm from Python (python/shoal/bench_tasks.py), from its JSON. */
int sh_bench_pytasks(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_pytasks_table(FILE *f, const sh_bench_report *r);
void sh_bench_pytasks_plot(FILE *f, const sh_bench_report *r);
/* py-fibers: Python tasklets and their peers (python/shoal/bench_fibers.py), from its
 * JSON. */
int sh_bench_pyfibers(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_pyfibers_table(FILE *f, const sh_bench_report *r);
void sh_bench_pyfibers_plot(FILE *f, const sh_bench_report *r);

/* suite_tasks.c: one flood of n no-op tasks ("nop", args: payload, or
 * nil) on f: seconds until all were submitted and until all were done;
 * every result is taken (into vb) after. */
struct shoal_farm;
struct shoal_value;
struct shoal_vbuf;
int sh_bench_farm_flood(struct shoal_farm *f, uint64_t n, const struct shoal_value *payload,
			struct shoal_vbuf *vb, double *sent, double *rt);

/* suite_cluster.c: migrations between two shoalds, dedup. */
int sh_bench_cluster(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_cluster_table(FILE *f, const sh_bench_report *r);

/* suite_store.c: put/get latency, a state dict's get, reader memory. */
int sh_bench_store(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_store_table(FILE *f, const sh_bench_report *r);
void sh_bench_store_plot(FILE *f, const sh_bench_report *r);
/* suite_spill.c: its spill and restore rows, into a spill directory on a
 * disk; and their line under the store's summary. */
void sh_bench_spill(const sh_bench_opts *o, sh_bench_report *r);
void sh_bench_spill_summary(FILE *f, const sh_bench_report *r);
/* A fresh directory for a store's spill under /var/tmp, which must be on a
 * disk with need bytes free (and an eighth more): 0, or -1 with why (the
 * rows are then skipped). */
int sh_bench_spill_scratch(char *dir, size_t len, uint64_t need, char *why, size_t whylen);

#endif

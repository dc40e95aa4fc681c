/* The benchmarks' own rules, as every suite of `shoal bench` applies them
 * (bench/bench.c, sh_bench_main): a run fails only when one of shoal's own
 * rows failed; a baseline or a peer that could not run is a failed row in
 * the table and in --json, and the run still exits 0. Parameters keep
 * JSON's types (a boolean is true or false, not a string). Suites made of
 * rows as the real ones add them, run through the same main as
 * `shoal bench SUITE`, their output read back. */
#include "test.h"

#include "bench.h"

#include <fcntl.h>
#include <unistd.h>

/* What the next run's suite adds: a shoal row, and a peer row (an
 * ipyparallel flood, say) that fails or not. */
static int own_fails, peer_fails;

static int run_rows(const sh_bench_opts *o, sh_bench_report *r)
{
	(void)o;
	sh_bench_result *x = sh_bench_add(r, "rules", "flood", "shoal", 0);
	sh_bench_param_num(x, "n", 256);
	sh_bench_param_bool(x, "encrypted", false);
	if (own_fails)
		sh_bench_fail(x, "shoal-engine did not start");
	else
		sh_bench_metric_set(x, "per_s", 1000);
	x = sh_bench_add(r, "rules", "flood", "ipyparallel", 1);
	sh_bench_param_num(x, "n", 256);
	sh_bench_param_bool(x, "encrypted", true);
	if (peer_fails)
		sh_bench_fail(x, "ipcluster: no mpiexec rank could start");
	else
		sh_bench_metric_set(x, "per_s", 10);
	return 0;
}

static void table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, "rules", "rules: a shoal row and a peer row");
}

static const sh_bench_suite suite = {
	.name = "rules", .about = "test", .run = run_rows, .table = table};

/* Runs the suite as `shoal bench rules [--json]` would: its exit status;
 * what it printed in out. */
static int run_main(int json, char *out, size_t len)
{
	char path[] = "/tmp/shoal-test-bench-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	fflush(stdout);
	int saved = dup(1);
	CHECK(saved >= 0 && dup2(fd, 1) == 1);
	sh_bench_opts o = {.json = json};
	const sh_bench_suite *s[] = {&suite};
	int st = sh_bench_main(s, 1, &o);
	fflush(stdout);
	CHECK(dup2(saved, 1) == 1);
	close(saved);
	ssize_t n = pread(fd, out, len - 1, 0);
	CHECK(n >= 0);
	out[n] = '\0';
	close(fd);
	return st;
}

SH_TEST(a_failed_peer_row_is_reported_and_the_run_passes)
{
	char out[16384];
	own_fails = 0, peer_fails = 1;
	CHECK_EQ(run_main(1, out, sizeof(out)), 0);
	CHECK_HAS(out, "\"impl\": \"ipyparallel\"");
	CHECK_HAS(out, "\"status\": \"failed\", \"baseline\": true, \"impl\": \"ipyparallel\", "
		       "\"error\": \"ipcluster: no mpiexec rank could start\"");
	CHECK_HAS(out, "\"status\": \"ok\", \"baseline\": false, \"impl\": \"shoal\"");
	/* and the table shows it among the failed */
	CHECK_EQ(run_main(0, out, sizeof(out)), 0);
	CHECK_HAS(out, "ipcluster: no mpiexec rank could start");
}

SH_TEST(a_failed_shoal_row_fails_the_run)
{
	char out[16384];
	own_fails = 1, peer_fails = 0;
	CHECK_EQ(run_main(1, out, sizeof(out)), 1);
	CHECK_HAS(out, "\"status\": \"failed\", \"baseline\": false, \"impl\": \"shoal\", "
		       "\"error\": \"shoal-engine did not start\"");
	own_fails = 1, peer_fails = 1;
	CHECK_EQ(run_main(0, out, sizeof(out)), 1);
	own_fails = 0, peer_fails = 0;
	CHECK_EQ(run_main(1, out, sizeof(out)), 0);
}

SH_TEST(parameters_keep_their_json_types)
{
	char out[16384];
	own_fails = 0, peer_fails = 0;
	CHECK_EQ(run_main(1, out, sizeof(out)), 0);
	CHECK_HAS(out, "\"params\": {\"n\": 256, \"encrypted\": false}");
	CHECK_HAS(out, "\"params\": {\"n\": 256, \"encrypted\": true}");
	CHECK(!strstr(out, "\"false\"") && !strstr(out, "\"true\""));
}

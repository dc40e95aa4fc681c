/* End-to-end tests of the programs: the `shoal` command line answers bad
 * commands, suites and options with exit status 2 and a message naming what
 * it expected, and `hackysack N TURNS --json` runs a real case in a child
 * process and prints one JSON object per result with BENCH.md's keys. The
 * programs are found through SHOAL_TEST_BINDIR, which ctest sets. */
#include "test.h"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

/* Without go on PATH the Go rows are skipped, which keeps this test fast
 * and independent of what is installed. */
static char *const no_go[] = {"PATH=/nonexistent", NULL};
#define run(argv, out, outlen) sh_test_run(argv, no_go, out, outlen)
#define path_of sh_test_bin

static char out[1 << 16];

SH_TEST(shoal_rejects_unknown_command)
{
	char exe[4096];
	path_of(exe, sizeof exe, "tools/shoal");
	char *argv[] = {exe, "frobnicate", NULL};
	CHECK_EQ(run(argv, out, sizeof out), 2);
	CHECK_HAS(out, "unknown command 'frobnicate'");
	CHECK_HAS(out, "bench");
}

SH_TEST(shoal_rejects_unknown_suite_and_option)
{
	char exe[4096];
	path_of(exe, sizeof exe, "tools/shoal");
	char *a1[] = {exe, "bench", "nosuch", NULL};
	CHECK_EQ(run(a1, out, sizeof out), 2);
	CHECK_HAS(out, "unknown suite 'nosuch'");
	CHECK_HAS(out, "fibers");
	char *a2[] = {exe, "bench", "fibers", "--bogus", NULL};
	CHECK_EQ(run(a2, out, sizeof out), 2);
	CHECK_HAS(out, "--bogus");
}

SH_TEST(shoal_version_and_help)
{
	char exe[4096];
	path_of(exe, sizeof exe, "tools/shoal");
	char *a1[] = {exe, "--version", NULL};
	CHECK_EQ(run(a1, out, sizeof out), 0);
	CHECK_HAS(out, SHOAL_VERSION_STRING);
	char *a2[] = {exe, "help", NULL};
	CHECK_EQ(run(a2, out, sizeof out), 0);
	CHECK_HAS(out, "usage: shoal");
	char *a3[] = {exe, NULL};
	CHECK_EQ(run(a3, out, sizeof out), 2);
}

SH_TEST_T(hackysack_json_one_case, 120)
{
	char exe[4096];
	path_of(exe, sizeof exe, "bench/hackysack");
	char *argv[] = {exe, "200", "2000", "--json", NULL};
	CHECK_EQ(run(argv, out, sizeof out), 0);
	/* The shoal row ran and passed its own checks (counter == turns,
	 * every fiber joined); the Go row is skipped without go. */
	CHECK_HAS(out, "{\"suite\": \"fibers\", \"test\": \"hackysack\", "
		       "\"params\": {\"n\": 200, \"turns\": 2000}, \"status\": \"ok\", "
		       "\"baseline\": false, \"impl\": \"shoal\", \"metrics\": {\"best_s\": ");
	CHECK_HAS(out, "\"peak_rss_kib\": ");
	CHECK_HAS(out, "\"status\": \"skipped\", \"baseline\": true, \"impl\": \"go\"");
	/* The C program on boost.context is built where libboost-context-dev
	 * is installed (not under sanitizers): then it runs and checks itself
	 * (counter == turns, every join's value) as the other sides do. */
#if SHOAL_BOOST_PEER
	CHECK_HAS(out, "\"params\": {\"n\": 200, \"turns\": 2000}, \"status\": \"ok\", "
		       "\"baseline\": true, \"impl\": \"boost\", \"metrics\": {\"best_s\": ");
#else
	CHECK_HAS(out, "\"status\": \"skipped\", \"baseline\": true, \"impl\": \"boost\"");
#endif
	/* and the first, untimed run of each side that ran, as its own row */
	CHECK_HAS(out, "\"test\": \"hackysack_first_run\", \"params\": {\"n\": 200, \"turns\": "
		       "2000}, \"status\": \"ok\", \"baseline\": false, \"impl\": \"shoal\"");
	int lines = 0;
	for (const char *p = out; *p; p++)
		lines += *p == '\n';
#if SHOAL_BOOST_PEER
	CHECK_EQ(lines, 5); /* boost's first run too */
#else
	CHECK_EQ(lines, 4);
#endif
}

#if SHOAL_BOOST_PEER
/* The boost.context baseline answers the Go program's flags the same way:
 * one "ok t=..." line with a time per run, or one "error ..." line. */
SH_TEST_T(boost_peer_runs_switches_and_rejects_bad_flags, 60)
{
	char exe[4096];
	path_of(exe, sizeof exe, "bench/hackysack-boost");
	char *a1[] = {exe,	  "-reps", "2",		"-test", "switch",
		      "-variant", "chan",  "-switches", "2000",	 NULL};
	CHECK_EQ(run(a1, out, sizeof out), 0);
	CHECK_HAS(out, "ok t=");
	CHECK(strchr(out, ',') != NULL);
	char *a2[] = {exe, "-reps", "1", "-test", "switch", "-variant", "yield", NULL};
	CHECK_EQ(run(a2, out, sizeof out), 0);
	CHECK_HAS(out, "ok t=");
	char *a3[] = {exe, "-test", "nosuch", NULL};
	CHECK_EQ(run(a3, out, sizeof out), 1);
	CHECK_HAS(out, "error unknown test 'nosuch' (expected hackysack, hop or switch)");
	char *a4[] = {exe, "-n", "lots", NULL};
	CHECK_EQ(run(a4, out, sizeof out), 1);
	CHECK_HAS(out, "error -n wants a whole number, not 'lots'");
	char *a5[] = {exe, "-n", "0", NULL};
	CHECK_EQ(run(a5, out, sizeof out), 1);
	CHECK_HAS(out, "error need n >= 1 and turns >= 1");
}
#endif

SH_TEST(hackysack_rejects_bad_numbers)
{
	char exe[4096];
	path_of(exe, sizeof exe, "bench/hackysack");
	char *argv[] = {exe, "10", "lots", NULL};
	CHECK_EQ(run(argv, out, sizeof out), 2);
	char *argv2[] = {exe, "0", "100", NULL};
	CHECK_EQ(run(argv2, out, sizeof out), 2);
}

/* hackysack: the fibers suite as a program of its own (the seed's
 * benchmark, its hop and switch costs, and the Go and boost.context
 * baselines), or with `hackysack N TURNS` one custom case on shoal and on
 * each baseline there is. Same options and output as `shoal bench
 * fibers`. */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t custom_n;
static uint64_t custom_turns;

static int run_custom(const sh_bench_opts *o, sh_bench_report *r)
{
	return sh_bench_hackysack_case(o, r, custom_n, custom_turns);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: hackysack [N TURNS] [options]\n"
		"Runs the hackysack benchmark (N+1 fibers kicking a sack TURNS times) on\n"
		"shoal fibers and, when they are there, on Go goroutines (go installed) and\n"
		"a C program on boost.context (built with libboost-context-dev). Without\n"
		"N TURNS it runs the whole fibers suite, like `shoal bench fibers`.\n"
		"options:\n%s",
		sh_bench_opts_usage);
}

/* A whole number in [min, max], or -1 with a message. */
static int parse_count(const char *what, const char *s, unsigned long long min,
		       unsigned long long max, unsigned long long *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < min || v > max) {
		fprintf(stderr,
			"hackysack: %s must be a whole number from %llu to %llu, got '%s'\n", what,
			min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	sh_cli cli = {.prog = "hackysack", .usage = usage, .opts = sh_bench_options};
	sh_bench_opts o;
	sh_bench_parse_opts(&cli, argc, argv, &o);
	sh_cli_operands(&cli, argc, argv, 0, 2);
	char **pos = argv + optind;
	int npos = argc - optind;
	if (npos == 1) {
		fprintf(stderr, "hackysack: expected N and TURNS (two numbers), got only '%s'\n",
			pos[0]);
		return 2;
	}
	if (npos == 0) {
		const sh_bench_suite *s = sh_bench_find_suite("fibers");
		return sh_bench_main(&s, 1, &o);
	}
	unsigned long long n, turns;
	if (parse_count("N", pos[0], 1, 100000000, &n) != 0 ||
	    parse_count("TURNS", pos[1], 1, 1000000000000ull, &turns) != 0)
		return 2;
	custom_n = (uint32_t)n;
	custom_turns = turns;
	sh_bench_suite custom = *sh_bench_find_suite("fibers");
	custom.run = run_custom;
	const sh_bench_suite *s = &custom;
	return sh_bench_main(&s, 1, &o);
}

/* The ring suite: the round trip of an 8-byte request and its reply between
 * two processes, through a pair of shared-memory rings (spinning a few
 * microseconds before the futex, and with no spin so that every trip sleeps
 * and is woken), against a unix stream socket measured in the same run as
 * the baseline. This is the transport of the store, RPC and local engines:
 * DESIGN.md's cost table expects 0.36-0.40 us p50 for spin-then-futex. */
#include "bench.h"

#include "ring/ring.h"
#include "shm/shm.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SUITE "ring"
#define RING_CAP 4096

enum transport { T_RING, T_RING_FUTEX, T_UNIX };
static const char *const t_names[] = {"ring", "ring-futex", "unix"};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The echo side, in the child: answers each request with the value + 1. */
static int echo_ring(void *mem, size_t one, uint32_t spin_ns)
{
	sh_ring req, rep;
	if (sh_ring_attach(&req, mem, one, false) ||
	    sh_ring_attach(&rep, (char *)mem + one, one, true))
		return 2;
	req.spin_ns = rep.spin_ns = spin_ns;
	for (;;) {
		const void *p;
		size_t len;
		int rc = sh_ring_peek(&req, &p, &len, SHOAL_FOREVER);
		if (rc == SHOAL_ECLOSED)
			return 0;
		if (rc || len != 8)
			return 3;
		uint64_t v;
		memcpy(&v, p, 8);
		sh_ring_release(&req);
		v++;
		if (sh_ring_write(&rep, &v, 8, SHOAL_FOREVER) != 0)
			return 4;
	}
}

static int echo_unix(int sock)
{
	for (;;) {
		uint64_t v;
		ssize_t n = read(sock, &v, 8);
		if (n == 0)
			return 0;
		if (n != 8)
			return 5;
		v++;
		if (write(sock, &v, 8) != 8)
			return 6;
	}
}

/* One transport: n timed round trips after n/10 of warm-up; lat[] gets each
 * trip in microseconds. */
static int run_one(enum transport t, int n, double *lat, char *err, size_t errlen)
{
	uint32_t spin_ns = t == T_RING_FUTEX ? 0 : 10000;
	size_t one = 0;
	void *mem = NULL;
	int sv[2] = {-1, -1};
	if (t == T_UNIX) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
			snprintf(err, errlen, "socketpair: %s", strerror(errno));
			return -1;
		}
	} else {
		int fd;
		if (sh_ring_bytes(RING_CAP, &one) != 0 ||
		    sh_memfd_create("bench-ring", 2 * one, false, &fd) != 0 ||
		    sh_shm_map(fd, 2 * one, true, &mem) != 0) {
			snprintf(err, errlen, "could not make the shared rings");
			return -1;
		}
		close(fd);
		sh_ring_format(mem, one);
		sh_ring_format((char *)mem + one, one);
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		if (t == T_UNIX) {
			close(sv[0]);
			_exit(echo_unix(sv[1]));
		}
		_exit(echo_ring(mem, one, spin_ns));
	}
	sh_ring req, rep;
	if (t == T_UNIX) {
		close(sv[1]);
	} else {
		sh_ring_attach(&req, mem, one, true);
		sh_ring_attach(&rep, (char *)mem + one, one, false);
		req.spin_ns = rep.spin_ns = spin_ns;
	}
	int warm = n / 10, rc = 0;
	for (int i = -warm; i < n && rc == 0; i++) {
		uint64_t v = (uint64_t)i, w = 0;
		double t0 = now_s();
		if (t == T_UNIX) {
			if (write(sv[0], &v, 8) != 8 || read(sv[0], &w, 8) != 8)
				rc = -1;
		} else {
			const void *p;
			size_t len;
			int64_t dl = shoal_deadline_in(10 * 1000000000LL);
			if (sh_ring_write(&req, &v, 8, dl) != 0 ||
			    sh_ring_peek(&rep, &p, &len, dl) != 0 || len != 8)
				rc = -1;
			else {
				memcpy(&w, p, 8);
				sh_ring_release(&rep);
			}
		}
		double dt = now_s() - t0;
		if (rc == 0 && w != v + 1)
			rc = -1;
		if (i >= 0)
			lat[i] = dt * 1e6;
	}
	if (t == T_UNIX)
		close(sv[0]);
	else
		sh_ring_close(&req);
	int st = 0;
	waitpid(pid, &st, 0);
	if (mem)
		sh_shm_unmap(mem, 2 * one);
	if (rc != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		snprintf(err, errlen, "%s round trip failed (echo child status %#x)", t_names[t],
			 st);
		return -1;
	}
	return 0;
}

int sh_bench_ring(const sh_bench_opts *o, sh_bench_report *r)
{
	int n = o->quick ? 20000 : 200000;
	double *lat = malloc(sizeof(double) * (size_t)n);
	if (!lat)
		return -1;
	/* The baseline first, then both ring variants. */
	const enum transport order[] = {T_UNIX, T_RING, T_RING_FUTEX};
	for (size_t k = 0; k < 3; k++) {
		enum transport t = order[k];
		sh_bench_result *x = sh_bench_add(r, SUITE, "roundtrip",
						  t == T_UNIX ? "socket" : "shoal", t == T_UNIX);
		sh_bench_param_str(x, "transport", t_names[t]);
		sh_bench_param_num(x, "bytes", 8);
		char err[256];
		if (run_one(t, n, lat, err, sizeof(err)) != 0) {
			sh_bench_fail(x, "%s", err);
			continue;
		}
		double p50, p99;
		sh_bench_percentiles(lat, n, &p50, &p99);
		double sum = 0;
		for (int i = 0; i < n; i++)
			sum += lat[i];
		sh_bench_metric_set(x, "p50_us", p50);
		sh_bench_metric_set(x, "p99_us", p99);
		sh_bench_metric_set(x, "mean_us", sum / n);
		sh_bench_metric_set(x, "trips", n);
		sh_bench_show_samples(x, lat, n, "us");
		x->cmp_value = p50;
		x->cmp_word = "faster";
	}
	free(lat);
	return 0;
}

void sh_bench_ring_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench ring: 8-byte request/reply between two processes, "
			     "shared-memory rings vs a unix socket");
	double sock = 0, ring = 0, fut = 0;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || x->status != SH_BENCH_OK)
			continue;
		double p50 = sh_bench_metric_get(x, "p50_us", 0);
		if (strcmp(x->params[0].text, "unix") == 0)
			sock = p50;
		else if (strcmp(x->params[0].text, "ring") == 0)
			ring = p50;
		else
			fut = p50;
	}
	fprintf(f,
		"columns: every timed round trip; p50_us and p99_us are in --json.\n"
		"summary: p50 ring %.2f us, ring with every trip asleep %.2f us, unix socket %.2f "
		"us "
		"(%.1fx)\n\n",
		ring, fut, sock, ring > 0 ? sock / ring : 0);
}

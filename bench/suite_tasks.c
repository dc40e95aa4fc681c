/* `shoal bench tasks`: the flood of ipyparallel's scheduler benchmark (a
 * mail on the IPython list on its ZMQ scheduler). A client submits N no-op
 * tasks as fast as it can to a controller with 2 engines, then waits for
 * every result: "Sent" is the time from the first submit until the last
 * submit returns, "Roundtrip" the time from the first submit to the last
 * result. Each scheme runs its own controller; the best of 3 rounds
 * counts. The follow-up of the seed, a buffer with each task, is measured
 * beside raw TCP loopback throughput in the same run (the ceiling the
 * issue sets) and, from 64 KiB, beside the same stream through a relay
 * thread (the ceiling of a controller that forwards the bytes). Over TCP,
 * both with the secure channel's records encrypted ("tcp") and
 * authenticated only ("tcp-auth": controller and peers told the network
 * is trusted).
 *
 * ipyparallel runs the same flood in the same run when Debian's python3
 * has it (bench/peer/tasks_ipyparallel.py; `scripts/deps.sh bench`
 * installs it): rows flood/ipyparallel (transport zmq-tcp). The
 * cluster_start rows (suite_launch.c) time `shoal cluster start` per
 * launcher beside ipyparallel's.
 *
 * --json, flood rows: sent_s, roundtrip_s and roundtrip_per_s of the best
 * round, roundtrip_s_mean and roundtrip_per_s_mean over the 3, and
 * sent_ns_per_task; the table shows each round as tasks a second. */
#include "bench.h"

#include <shoal/tasks.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SUITE "tasks"

/* ipyparallel is measured in the run when Debian's python3 has it
 * (bench/peer/tasks_ipyparallel.py); otherwise, and for dask, which this
 * suite does not run, the figures are recorded ones, said to be so, with
 * where and how they were taken. */
#define IPP_RECORDED                                                                            \
	"ipyparallel 7 at 250-390 tasks/s round trip (recorded, not measured in this run: %s; " \
	"the same flood, no-op tasks to 2 engines on one host, on this project's 2-core test "  \
	"VM on 2026-11-30 when this suite was written, commit a216bca)"
#define DASK_RECORDED                                                                          \
	"dask.distributed at 350-550 tasks/s round trip (recorded, not measured in this run: " \
	"this suite does not run dask; the same flood to 2 workers on one host, on this "      \
	"project's 2-core test VM on 2026-11-30, commit a216bca)"

typedef struct farm_setup {
	shoal_controller *ctl;
	pid_t pids[2];
	shoal_farm *f;
} farm_setup;

/* The transports measured: this host's rings, and TCP loopback with the
 * channel's records encrypted or authenticated only. */
enum { T_LOCAL, T_TCP, T_TCP_AUTH, T_N };
static const char *const transport_name[T_N] = {"local", "tcp", "tcp-auth"};

/* A controller with 2 engines and a client, on this host's rings, or all
 * over TCP loopback (with a fresh secret, as peers on other hosts). */
static int setup(farm_setup *s, shoal_scheme scheme, int transport, const char *store,
		 const char *engine, const char *lib, char *err, size_t errlen)
{
	bool tcp = transport != T_LOCAL;
	memset(s, 0, sizeof(*s));
	shoal_controller_opts o;
	shoal_controller_opts_init(&o);
	o.scheme = scheme;
	char secret[40], addr[160];
	if (tcp) {
		snprintf(secret, sizeof(secret), "bench-%016llx%08x",
			 (unsigned long long)shoal_now_ns(), (unsigned)getpid());
		setenv("SHOAL_SECRET", secret, 1); /* the engines' and the client's */
		o.tcp = "127.0.0.1:0";
		o.secret = secret;
		o.secret_len = strlen(secret);
		o.no_encrypt = transport == T_TCP_AUTH;
	}
	/* tcp-auth asks for unencrypted links on purpose: the controller's
	 * warning about it would only interleave with the table (the note
	 * under it says what tcp-auth is). */
	shoal_log_level level = shoal_log_get_level();
	if (o.no_encrypt && level == SHOAL_LOG_WARN)
		shoal_log_set_level(SHOAL_LOG_ERROR);
	int rc = shoal_controller_open(&s->ctl, &o);
	shoal_log_set_level(level);
	if (rc == 0)
		snprintf(addr, sizeof(addr), "%s%s%s", tcp ? "tcp://" : "",
			 tcp ? shoal_controller_tcp(s->ctl) : shoal_controller_socket(s->ctl),
			 transport == T_TCP_AUTH ? "?encrypt=false" : "");
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = shoal_engine_spawn_store(addr, lib, engine, store, &s->pids[i]);
	shoal_controller_stat st = {0};
	double until = sh_bench_now() + 10;
	while (rc == 0 && shoal_controller_stat_get(s->ctl, &st) == 0 && st.engines < 2 &&
	       sh_bench_now() < until)
		usleep(1000);
	if (rc == 0 && st.engines < 2)
		rc = SHOAL_ETIMEDOUT;
	if (rc == 0)
		rc = shoal_farm_connect(&s->f, addr);
	if (rc == 0 && store)
		rc = shoal_farm_use_store(s->f, store);
	if (rc)
		snprintf(err, errlen, "setting up a controller and 2 engines: %s",
			 shoal_strerror(rc));
	return rc;
}

static void teardown(farm_setup *s)
{
	if (s->f)
		shoal_farm_close(s->f);
	if (s->ctl)
		shoal_controller_close(s->ctl);
	for (int i = 0; i < 2; i++)
		if (s->pids[i] > 0)
			waitpid(s->pids[i], NULL, 0);
}

/* Takes every result (the books start over once all are taken). */
static int drain(shoal_farm *f, shoal_task first, uint64_t n, shoal_vbuf *vb)
{
	for (uint64_t i = 0; i < n; i++) {
		const shoal_value *res;
		shoal_vbuf_reset(vb);
		int rc = shoal_farm_wait(f, first + i, vb, &res, SHOAL_FOREVER);
		if (rc)
			return rc;
	}
	return 0;
}

int sh_bench_farm_flood(shoal_farm *f, uint64_t n, const shoal_value *payload, shoal_vbuf *vb,
			double *sent, double *rt)
{
	shoal_task first = 0, id;
	double t0 = sh_bench_now();
	for (uint64_t i = 0; i < n; i++) {
		int rc = shoal_farm_submit(f, "nop", payload, NULL, &id);
		if (rc)
			return rc;
		if (i == 0)
			first = id;
	}
	double t1 = sh_bench_now();
	int rc = shoal_farm_wait_all(f, shoal_deadline_in(300000000000LL));
	double t2 = sh_bench_now();
	*sent = t1 - t0;
	*rt = t2 - t0;
	return rc ? rc : drain(f, first, n, vb);
}

static void bench_flood(const sh_bench_opts *o, sh_bench_report *r, const char *engine,
			const char *lib)
{
	static const uint64_t ns[] = {256, 1024, 4096, 16384, 65536, 262144};
	static const shoal_scheme all[] = {SHOAL_SCHEME_PURE, SHOAL_SCHEME_LRU,
					   SHOAL_SCHEME_LEASTLOAD, SHOAL_SCHEME_WEIGHTED,
					   SHOAL_SCHEME_TWOBIN};
	size_t nn = o->quick ? 4 : 6, nsch = o->quick ? 2 : 5;
	static const shoal_scheme quick[] = {SHOAL_SCHEME_PURE, SHOAL_SCHEME_LEASTLOAD};
	shoal_vbuf *vb;
	if (shoal_vbuf_create(&vb))
		exit(1);
	for (int tcp = 0; tcp < T_N; tcp++)
		for (size_t s = 0; s < nsch; s++) {
			shoal_scheme scheme = o->quick ? quick[s] : all[s];
			farm_setup fs;
			char err[256];
			int rc = setup(&fs, scheme, tcp, NULL, engine, lib, err, sizeof(err));
			for (size_t k = 0; k < nn; k++) {
				sh_bench_result *x = sh_bench_add(r, SUITE, "flood", "shoal", 0);
				sh_bench_param_num(x, "n", (double)ns[k]);
				sh_bench_param_str(x, "scheme", shoal_scheme_name(scheme));
				sh_bench_param_str(x, "transport", transport_name[tcp]);
				if (rc) {
					sh_bench_fail(x, "%s", err);
					continue;
				}
				double best_sent = 0, best_rt = 0, rts[3], per_s[3];
				int reps = 3;
				for (int i = 0; i < reps && rc == 0; i++) {
					double sent, rt;
					if ((rc = sh_bench_farm_flood(fs.f, ns[k], NULL, vb, &sent,
								      &rt)) != 0)
						sh_bench_fail(x, "%s: %s", shoal_strerror(rc),
							      shoal_farm_error(fs.f));
					else if (i == 0 || rt < best_rt)
						best_rt = rt, best_sent = sent;
					rts[i] = rt;
					per_s[i] = (double)ns[k] / rt;
				}
				if (rc)
					break;
				double mean_rt = (rts[0] + rts[1] + rts[2]) / 3;
				sh_bench_metric_set(x, "sent_s", best_sent);
				sh_bench_metric_set(x, "roundtrip_s", best_rt);
				sh_bench_metric_set(x, "roundtrip_s_mean", mean_rt);
				sh_bench_metric_set(x, "roundtrip_per_s", (double)ns[k] / best_rt);
				sh_bench_metric_set(x, "roundtrip_per_s_mean",
						    (double)ns[k] / mean_rt);
				sh_bench_metric_set(x, "sent_ns_per_task",
						    best_sent * 1e9 / (double)ns[k]);
				/* the table: tasks a second, as the seed gives them */
				sh_bench_show_samples(x, per_s, reps, "tasks/s");
			}
			teardown(&fs);
		}
	shoal_vbuf_free(vb);
}

/* ---- raw TCP loopback: the ceiling of the buffers test ---- */

typedef struct sink {
	int fd;
	size_t bytes;
} sink;

static void *sink_main(void *arg)
{
	sink *k = arg;
	char *buf = malloc(1 << 20);
	size_t got = 0;
	while (buf && got < k->bytes) {
		ssize_t n = read(k->fd, buf, 1 << 20);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	free(buf);
	k->bytes = got;
	return NULL;
}

/* A connected TCP pair over loopback: *c the connecting end, *s the
 * accepted one. */
static int tcp_pair(int *c, int *s)
{
	*c = *s = -1;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &al)) {
		if (ls >= 0)
			close(ls);
		return -1;
	}
	*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*c >= 0 && connect(*c, (struct sockaddr *)&a, sizeof(a)) == 0)
		*s = accept(ls, NULL, NULL);
	close(ls);
	if (*s < 0) {
		if (*c >= 0)
			close(*c);
		*c = -1;
		return -1;
	}
	return 0;
}

/* The relay: bytes from one socket spliced through a pipe into another,
 * as the controller passed a large task from a TCP client to a TCP engine
 * before the secure channel (and would again under kernel TLS), with nothing else to do: no frames,
 * no verdict, no scheduling, blocking calls, steps of up to 1 MiB. */
typedef struct relay {
	int in, out;
	size_t bytes;
} relay;

static void *relay_main(void *arg)
{
	relay *y = arg;
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return NULL;
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	for (size_t moved = 0; moved < y->bytes;) {
		ssize_t n = splice(y->in, NULL, p[1], NULL, 1 << 20, SPLICE_F_MOVE);
		if (n <= 0)
			break;
		for (ssize_t out = 0; out < n;) {
			ssize_t k =
				splice(p[0], NULL, y->out, NULL, (size_t)(n - out), SPLICE_F_MOVE);
			if (k <= 0)
				goto done;
			out += k;
		}
		moved += (size_t)n;
	}
done:
	close(p[0]);
	close(p[1]);
	shutdown(y->out, SHUT_WR); /* the sink ends even if we stopped early */
	return NULL;
}

/* MB/s of one TCP stream over loopback, bytes written in chunks; with
 * through_relay, through a relay thread between two connections. */
static double raw_tcp_mb_s(size_t bytes, size_t chunk, bool through_relay)
{
	int c, s, rc2 = -1, rs2 = -1;
	if (tcp_pair(&c, &s) != 0)
		return 0;
	relay y = {.in = s, .bytes = bytes};
	pthread_t rt;
	bool relaying = false;
	if (through_relay) {
		if (tcp_pair(&rc2, &rs2) == 0) {
			y.out = rc2;
			relaying = pthread_create(&rt, NULL, relay_main, &y) == 0;
		}
		if (!relaying) {
			close(c);
			close(s);
			if (rc2 >= 0)
				close(rc2), close(rs2);
			return 0;
		}
	}
	sink k = {.fd = relaying ? rs2 : s, .bytes = bytes};
	pthread_t t;
	char *buf = calloc(1, chunk);
	double mb_s = 0;
	if (buf && pthread_create(&t, NULL, sink_main, &k) == 0) {
		double t0 = sh_bench_now();
		for (size_t sent = 0; sent < bytes;) {
			ssize_t n = write(c, buf, chunk < bytes - sent ? chunk : bytes - sent);
			if (n <= 0)
				break;
			sent += (size_t)n;
		}
		pthread_join(t, NULL);
		double dt = sh_bench_now() - t0;
		mb_s = dt > 0 && k.bytes == bytes ? (double)k.bytes / dt / 1e6 : 0;
	}
	free(buf);
	close(c);
	if (relaying) {
		shutdown(s, SHUT_RD);
		pthread_join(rt, NULL);
		close(rc2);
		close(rs2);
	}
	close(s);
	return mb_s;
}

/* One TCP stream of bytes (through a relay or not), best of 3, as a row of
 * the buffers test; its MB/s. raw: the plain stream's, for the ratio. */
static double tcp_row(sh_bench_report *r, size_t size, size_t bytes, bool through_relay, double raw)
{
	size_t chunk = size < 65536 ? 65536 : size;
	double v[3], best = 0;
	for (int i = 0; i < 3; i++) {
		v[i] = raw_tcp_mb_s(bytes, chunk, through_relay);
		best = fmax(best, v[i]);
	}
	sh_bench_result *x =
		sh_bench_add(r, SUITE, "buffers", through_relay ? "relay" : "tcp", !through_relay);
	sh_bench_param_num(x, "bytes", (double)size);
	sh_bench_param_str(x, "transport", through_relay ? "relay" : "raw");
	sh_bench_metric_set(x, "mb_s", best);
	if (through_relay)
		sh_bench_metric_set(x, "ratio_vs_raw", raw > 0 ? best / raw : 0);
	sh_bench_show_samples(x, v, 3, "MB/s");
	return best;
}

static void bench_buffers(const sh_bench_opts *o, sh_bench_report *r, const char *engine,
			  const char *lib)
{
	static const size_t sizes[] = {512, 1024, 4096, 65536, 1 << 20, 8 << 20};
	size_t nsizes = o->quick ? 5 : 6;
	/* The buffer goes inline both ways. (By reference through a store,
	 * shoal_farm_use_store, each task's buffer is a fresh object whose
	 * pages fault in at 7-14 us each on this VM, and a flood of them fills
	 * the store before results free them: slower here, until the store
	 * hands out warm memory.) */
	farm_setup fs[T_N] = {{0}};
	char err[T_N][256];
	int rcs[T_N];
	for (int tcp = 0; tcp < T_N; tcp++)
		rcs[tcp] = setup(&fs[tcp], SHOAL_SCHEME_LEASTLOAD, tcp, NULL, engine, lib, err[tcp],
				 sizeof(err[tcp]));
	shoal_vbuf *vb, *pb;
	if (shoal_vbuf_create(&vb) || shoal_vbuf_create(&pb))
		exit(1);
	for (size_t k = 0; k < nsizes; k++) {
		size_t size = sizes[k];
		size_t total = o->quick ? (size_t)64 << 20 : (size_t)512 << 20;
		uint64_t n = total / size;
		n = n < 32 ? 32 : n > 65536 ? 65536 : n;
		size_t bytes = n * size < ((size_t)64 << 20) ? (size_t)64 << 20 : n * size;
		double raw = tcp_row(r, size, bytes, false, 0);
		if (size >= 65536) /* the ceiling of a controller that forwards the bytes */
			tcp_row(r, size, bytes, true, raw);
		shoal_vbuf_reset(pb);
		unsigned char *mem = calloc(1, size);
		shoal_value *payload = mem ? shoal_v_bytes(pb, mem, size) : NULL;
		free(mem);
		for (int tcp = 0; tcp < T_N; tcp++) {
			sh_bench_result *x = sh_bench_add(r, SUITE, "buffers", "shoal", 0);
			sh_bench_param_num(x, "bytes", (double)size);
			sh_bench_param_str(x, "transport", transport_name[tcp]);
			if (rcs[tcp]) {
				sh_bench_fail(x, "%s", err[tcp]);
				continue;
			}
			/* best of 3, as the flood: the first round also faults in
			 * the buffers every side keeps */
			double sent, rt, best = 0, mb_s[3];
			int frc = payload ? 0 : SHOAL_ENOMEM;
			for (int i = 0; i < 3 && frc == 0; i++)
				if ((frc = sh_bench_farm_flood(fs[tcp].f, n, payload, vb, &sent,
							       &rt)) == 0) {
					mb_s[i] = (double)(n * size) / rt / 1e6;
					best = i == 0 || rt < best ? rt : best;
				}
			if (frc) {
				sh_bench_fail(x, "%s: %s", shoal_strerror(frc),
					      shoal_farm_error(fs[tcp].f));
				continue;
			}
			double top = (double)(n * size) / best / 1e6;
			sh_bench_metric_set(x, "per_s", (double)n / best);
			sh_bench_metric_set(x, "mb_s", top);
			sh_bench_metric_set(x, "ratio_vs_raw", raw > 0 ? top / raw : 0);
			sh_bench_metric_set(x, "tasks", (double)n);
			sh_bench_show_samples(x, mb_s, 3, "MB/s");
		}
	}
	shoal_vbuf_free(vb);
	shoal_vbuf_free(pb);
	for (int tcp = 0; tcp < T_N; tcp++)
		teardown(&fs[tcp]);
}

/* Why ipyparallel was not measured in this run, or "" when it was. */
static char ipp_why[160];

/* The flood on ipyparallel (bench/peer/tasks_ipyparallel.py), as rows of
 * the flood test beside shoal's. */
static void bench_ipyparallel(const sh_bench_opts *o, sh_bench_report *r)
{
	char script[PATH_MAX], out[8192], err[256];
	const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
	snprintf(ipp_why, sizeof(ipp_why), "not run");
	if (sh_bench_find_source("peer/tasks_ipyparallel.py", script, sizeof(script)) != 0) {
		snprintf(ipp_why, sizeof(ipp_why),
			 "bench/peer/tasks_ipyparallel.py not found (set SHOAL_SRCDIR to the "
			 "source tree)");
		return;
	}
	/* Its rate is a few hundred tasks a second: 256 tasks with --quick.
	 * Its profile and connection files go to a scratch IPYTHONDIR, so the
	 * run leaves nothing behind. */
	char *argv[] = {(char *)py, script, "256", o->quick ? NULL : "1024", NULL};
	char dir[PATH_MAX - 32], env_dir[PATH_MAX];
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/shoal-bench-ipp-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		snprintf(ipp_why, sizeof(ipp_why), "mkdtemp %.100s: %.40s", dir, strerror(errno));
		return;
	}
	snprintf(env_dir, sizeof(env_dir), "IPYTHONDIR=%s", dir);
	char *env[] = {env_dir, NULL};
	int st = sh_bench_exec(argv, NULL, env, out, sizeof(out), o->quick ? 120 : 600, NULL, err,
			       sizeof(err));
	sh_bench_rm_tree(dir);
	if (st == 3 && strncmp(out, "skip ", 5) == 0) {
		snprintf(ipp_why, sizeof(ipp_why), "%.*s", (int)strcspn(out + 5, "\n"), out + 5);
		return;
	}
	const char *okl = strstr(out, "\nok");
	if (st != 0 || !okl) {
		const char *last = out;
		for (const char *q = out; *q; q++)
			if (q[0] == '\n' && q[1])
				last = q + 1;
		snprintf(ipp_why, sizeof(ipp_why), "its run failed: %.120s", st < 0 ? err : last);
		sh_bench_result *x = sh_bench_add(r, SUITE, "flood", "ipyparallel", 1);
		sh_bench_fail(x, "bench/peer/tasks_ipyparallel.py: %s", ipp_why);
		return;
	}
	/* rounds come 3 by 3 per n, in order (its start is measured by the
	 * cluster_start rows, launcher by launcher) */
	const char *p;
	long n = 0;
	int k = 0;
	double sent[3], rt[3], per_s[3];
	for (p = strstr(out, "round "); p; p = strstr(p + 1, "round ")) {
		long rn;
		double se, rtt;
		if (sscanf(p, "round n=%ld sent=%lf rt=%lf", &rn, &se, &rtt) != 3 || rtt <= 0)
			continue;
		if (rn != n)
			n = rn, k = 0;
		sent[k] = se, rt[k] = rtt, per_s[k] = (double)rn / rtt;
		if (++k < 3)
			continue;
		sh_bench_result *x = sh_bench_add(r, SUITE, "flood", "ipyparallel", 1);
		sh_bench_param_num(x, "n", (double)n);
		sh_bench_param_str(x, "scheme", "leastload");
		sh_bench_param_str(x, "transport", "zmq-tcp");
		int b = 0;
		for (int i = 1; i < 3; i++)
			b = rt[i] < rt[b] ? i : b;
		double mean_rt = (rt[0] + rt[1] + rt[2]) / 3;
		sh_bench_metric_set(x, "sent_s", sent[b]);
		sh_bench_metric_set(x, "roundtrip_s", rt[b]);
		sh_bench_metric_set(x, "roundtrip_s_mean", mean_rt);
		sh_bench_metric_set(x, "roundtrip_per_s", (double)n / rt[b]);
		sh_bench_metric_set(x, "roundtrip_per_s_mean", (double)n / mean_rt);
		sh_bench_metric_set(x, "sent_ns_per_task", sent[b] * 1e9 / (double)n);
		sh_bench_show_samples(x, per_s, 3, "tasks/s");
		k = 0;
	}
	ipp_why[0] = '\0';
}

int sh_bench_tasks(const sh_bench_opts *o, sh_bench_report *r)
{
	char engine[PATH_MAX], lib[PATH_MAX];
	if (sh_bench_find_tool("shoal-engine", engine, lib, sizeof(engine)) != 0) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "flood", "shoal", 0);
		sh_bench_fail(x, "cannot find shoal-engine and rpc_ext.so next to this program");
		return 0;
	}
	bench_flood(o, r, engine, lib);
	bench_ipyparallel(o, r);
	bench_buffers(o, r, engine, lib);
	sh_bench_cluster_start(o, r, lib);
	sh_bench_note(r, "flood: tasks a second over the whole round trip, each of 3 rounds (the "
			 "seconds of Sent and Roundtrip, best and mean, are in --json: sent_s, "
			 "roundtrip_s, roundtrip_s_mean, roundtrip_per_s, roundtrip_per_s_mean, "
			 "sent_ns_per_task). "
			 "goals: >= 200 000 no-op tasks/s round trip at n = 65 536 on the local "
			 "path (100 000/s over TCP), Sent flat per task as n grows, buffers of "
			 "64 KiB and more at >= 70%% of raw TCP loopback. "
			 "tcp: TCP loopback, records encrypted; tcp-auth: records authenticated "
			 "only (controller and peers told the network is trusted). "
			 "relay: raw TCP through a thread that splices it from one connection "
			 "into another, as the controller relays a large task from a TCP client "
			 "to a TCP engine, with nothing else: the ceiling of any controller that "
			 "forwards the bytes.");
	if (ipp_why[0])
		sh_bench_note(r, IPP_RECORDED, ipp_why);
	else
		sh_bench_note(r,
			      "ipyparallel: measured in this run (bench/peer/tasks_ipyparallel.py "
			      "with Debian's python3): a cluster of a controller and 2 engines on "
			      "this host, its default scheme leastload over ZMQ on TCP loopback "
			      "(zmq-tcp), the same flood and rounds.");
	sh_bench_note(r, "cluster_start: `shoal cluster start -n N --launcher L` from its exec "
			 "until it returns with every engine registered (Python engines, and C "
			 "engines for local), beside ipyparallel's Cluster through the same "
			 "launcher (bench/peer/ipcluster_start.py) until a client sees every "
			 "engine; slurm and ssh on private test hosts this suite starts "
			 "(scripts/testhosts). goals: local n = 8 <= 300 ms; mpi and slurm n = 2 "
			 "<= 2 s; each >= 5x faster than ipcluster.");
	sh_bench_note(r, "%s", DASK_RECORDED);
	return 0;
}

void sh_bench_tasks_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench tasks: a flood of no-op tasks to 2 engines (Sent and "
			     "Roundtrip as the seed defines them), and tasks with buffers");
	double best = 0, best_mean = 0, lo = 1e300, hi = 0, ipp = 0;
	/* local, tcp, relay, tcp-auth */
	double rlo[4] = {1e300, 1e300, 1e300, 1e300}, rhi[4] = {0, 0, 0, 0};
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) || x->status != SH_BENCH_OK)
			continue;
		if (!strcmp(x->test, "buffers")) {
			const char *t = sh_bench_param_get(x, "transport");
			const char *bytes = sh_bench_param_get(x, "bytes");
			int k = !t			 ? 0
				: !strcmp(t, "tcp")	 ? 1
				: !strcmp(t, "relay")	 ? 2
				: !strcmp(t, "tcp-auth") ? 3
							 : 0;
			if (t && strcmp(t, "raw") && bytes && atof(bytes) >= 65536) {
				double v = sh_bench_metric_get(x, "ratio_vs_raw", 0);
				rlo[k] = fmin(rlo[k], v), rhi[k] = fmax(rhi[k], v);
			}
			continue;
		}
		if (!strcmp(x->label, "ipyparallel")) {
			ipp = fmax(ipp, sh_bench_metric_get(x, "roundtrip_per_s", 0));
			continue;
		}
		if (strcmp(x->test, "flood"))
			continue;
		if (sh_bench_metric_get(x, "roundtrip_per_s", 0) > best) {
			best = sh_bench_metric_get(x, "roundtrip_per_s", 0);
			best_mean = sh_bench_metric_get(x, "roundtrip_per_s_mean", 0);
		}
		double s = sh_bench_metric_get(x, "sent_ns_per_task", 0);
		lo = fmin(lo, s), hi = fmax(hi, s);
	}
	char top[48], top_mean[48], peer[96];
	sh_bench_fmt_num(top, sizeof(top), best);
	sh_bench_fmt_num(top_mean, sizeof(top_mean), best_mean);
	if (ipp > 0)
		snprintf(peer, sizeof(peer), "ipyparallel in this run: up to %.0f", ipp);
	else
		snprintf(peer, sizeof(peer), "ipyparallel 250-390, recorded: see above");
	fprintf(f,
		"summary: up to %s tasks/s round trip (best of 3; mean %s) (%s); Sent %.0f-%.0f "
		"ns a task; buffers of 64 KiB and more at "
		"%.2f-%.2f of raw TCP "
		"locally, %.2f-%.2f over TCP encrypted and %.2f-%.2f authenticated only "
		"(goal >= 0.70), where a bare relay between two TCP connections reaches "
		"%.2f-%.2f\n\n",
		top, top_mean, peer, hi > 0 ? lo : 0, hi, rhi[0] > 0 ? rlo[0] : 0, rhi[0],
		rhi[1] > 0 ? rlo[1] : 0, rhi[1], rhi[3] > 0 ? rlo[3] : 0, rhi[3],
		rhi[2] > 0 ? rlo[2] : 0, rhi[2]);
}

void sh_bench_tasks_plot(FILE *f, const sh_bench_report *r)
{
	/* One line per scheme and transport (colour: scheme, dash: transport) */
	const sh_bench_lines
		rt = {SUITE,
		      "flood",
		      "n",
		      "scheme,transport,impl",
		      "roundtrip_s",
		      1,
		      "Roundtrip: first submit to last result, best of 3",
		      "no-op tasks in the flood",
		      "time (s)"},
		sent = {SUITE,
			"flood",
			"n",
			"scheme,transport,impl",
			"sent_s",
			1,
			"Sent: first submit until the last submit returns, in the best round",
			"no-op tasks in the flood",
			"time (s)"},
		buf = {SUITE,
		       "buffers",
		       "bytes",
		       "transport",
		       "mb_s",
		       1,
		       "Tasks with a buffer: throughput, best of 3 (raw and relay: TCP "
		       "loopback alone)",
		       "bytes of buffer in each task",
		       "throughput (MB/s)"};
	int y = sh_bench_svg_begin(f, 760, 1300, "shoal bench tasks: a controller and 2 engines");
	y += sh_bench_svg_lines(f, r, &rt, 0, y, 760, 360) + 10;
	y += sh_bench_svg_lines(f, r, &sent, 0, y, 760, 360) + 10;
	sh_bench_svg_lines(f, r, &buf, 0, y, 760, 360);
	sh_bench_svg_end(f);
}

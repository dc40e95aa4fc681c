/* The store suite (issue 3, vineyard's seed): against an embedded store on
 * a real unix socket, the latency of putting and getting a small object,
 * against a unix-socket round trip of the same bytes measured in the same
 * run (what a socket-only store pays at least); the time to get a state
 * dict shaped like stable-diffusion v1.5 (about 1 100 tensors) until every
 * tensor's address, dtype and shape are in hand; and what each of N reader
 * processes that map and read one large tensor costs beyond the shared
 * pages (Uss). `shoal put` of a safetensors file against cp is in the
 * import test. put_small and get_small run again (param spill: true)
 * against a store with a spill directory that stays under its high mark;
 * the spill and restore rows are suite_spill.c's.
 *
 * --json: get_small times get, read and release together; get_tensor_dict
 * rows have param client: warm (metadata walk, segments still mapped),
 * cold (a fresh process: get and walk; connect_ms apart) and cold+read
 * (until every tensor's pages have been read). */
#include "bench.h"
#include "store/safetensors.h"

#include <shoal/shoal.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SUITE "store"
#define SMALL_BYTES 64

static void set_latency(sh_bench_result *x, double *lat, int n)
{
	double p50, p99;
	sh_bench_percentiles(lat, n, &p50, &p99);
	sh_bench_metric_set(x, "p50_us", p50);
	sh_bench_metric_set(x, "p99_us", p99);
	sh_bench_metric_set(x, "ops", n);
	sh_bench_show_samples(x, lat, n, "us");
	x->cmp_value = p50;
	x->cmp_word = "faster";
}

/* The baseline: SMALL_BYTES to an echoing process over a unix stream
 * socket and back, n times. */
static int socket_baseline(double *lat, int n, char *err, size_t errlen)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		char b[SMALL_BYTES];
		for (;;) {
			size_t got = 0;
			while (got < sizeof(b)) {
				ssize_t k = read(sv[1], b + got, sizeof(b) - got);
				if (k <= 0)
					_exit(0);
				got += (size_t)k;
			}
			if (write(sv[1], b, sizeof(b)) != (ssize_t)sizeof(b))
				_exit(1);
		}
	}
	close(sv[1]);
	char b[SMALL_BYTES] = {1};
	int rc = 0;
	for (int i = -1000; i < n && rc == 0; i++) {
		double t0 = sh_bench_now();
		if (write(sv[0], b, sizeof(b)) != (ssize_t)sizeof(b))
			rc = -1;
		size_t got = 0;
		while (rc == 0 && got < sizeof(b)) {
			ssize_t k = read(sv[0], b + got, sizeof(b) - got);
			if (k <= 0)
				rc = -1;
			else
				got += (size_t)k;
		}
		if (i >= 0)
			lat[i] = (sh_bench_now() - t0) * 1e6;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	if (rc)
		snprintf(err, errlen, "socket echo failed");
	return rc;
}

/* The p50 of the row test with spilling off, or 0. */
static double p50_spill_off(const sh_bench_report *r, const char *test)
{
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		const char *sp = sh_bench_param_get(x, "spill");
		if (!strcmp(x->suite, SUITE) && !strcmp(x->test, test) && sp &&
		    !strcmp(sp, "false") && x->status == SH_BENCH_OK)
			return sh_bench_metric_get(x, "p50_us", 0);
	}
	return 0;
}

/* With spill: against a store that has a spill directory and stays under
 * its high mark (the rows of the same test without are measured first). */
static void set_small_latency(sh_bench_report *r, sh_bench_result *x, double *lat, int n,
			      bool spill)
{
	set_latency(x, lat, n);
	double off = spill ? p50_spill_off(r, x->test) : 0;
	if (off > 0) {
		sh_bench_metric_set(x, "ratio_vs_spill_off", x->cmp_value / off);
		snprintf(x->aside, sizeof(x->aside), "p50 %.2fx spilling off", x->cmp_value / off);
	}
}

static void bench_small(const sh_bench_opts *o, sh_bench_report *r, const char *sock, bool spill)
{
	int n = o->quick ? 5000 : 50000;
	double *lat = malloc(sizeof(double) * (size_t)n);
	shoal_id *ids = malloc(sizeof(shoal_id) * (size_t)n);
	if (!lat || !ids)
		exit(1);
	char err[256];
	if (!spill) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "roundtrip", "socket", 1);
		sh_bench_param_num(x, "bytes", SMALL_BYTES);
		if (socket_baseline(lat, n, err, sizeof(err)) != 0)
			sh_bench_fail(x, "%s", err);
		else
			set_latency(x, lat, n);
	}

	shoal_client *c;
	int rc = shoal_connect(&c, sock);
	sh_bench_result *p = sh_bench_add(r, SUITE, "put_small", "shoal", 0);
	sh_bench_param_num(p, "bytes", SMALL_BYTES);
	sh_bench_param_bool(p, "spill", spill);
	if (rc) {
		sh_bench_fail(p, "connect: %s", shoal_strerror(rc));
		free(lat);
		free(ids);
		return;
	}
	char data[SMALL_BYTES];
	memset(data, 7, sizeof(data));
	for (int i = -1000; i < n && rc == 0; i++) {
		shoal_id id;
		double t0 = sh_bench_now();
		rc = shoal_put_bytes(c, NULL, data, sizeof(data), 0, &id);
		double dt = (sh_bench_now() - t0) * 1e6;
		if (i >= 0) {
			lat[i] = dt;
			ids[i] = id;
		} else if (rc == 0) {
			rc = shoal_delete_id(c, id);
		}
	}
	if (rc) {
		sh_bench_fail(p, "put: %s: %s", shoal_strerror(rc), shoal_client_error(c));
		n = 0;
	} else {
		set_small_latency(r, p, lat, n, spill);
	}
	/* get_small: every object just put, by id: the whole cycle a user
	 * runs, timed: get, read every byte, release (its RELEASE message). */
	sh_bench_result *g = sh_bench_add(r, SUITE, "get_small", "shoal", 0);
	sh_bench_param_num(g, "bytes", SMALL_BYTES);
	sh_bench_param_bool(g, "spill", spill);
	for (int i = 0; i < n && rc == 0; i++) {
		shoal_object *ob;
		double t0 = sh_bench_now();
		rc = shoal_get(c, ids[i], &ob);
		if (rc == 0) {
			const void *d;
			size_t len;
			unsigned sum = 0;
			shoal_node_blob(shoal_object_root(ob), 0, &d, &len);
			for (size_t k = 0; k < len; k++)
				sum += ((const unsigned char *)d)[k];
			shoal_object_release(ob);
			if (len != SMALL_BYTES || sum != 7 * SMALL_BYTES)
				rc = SHOAL_EPROTO;
		}
		lat[i] = (sh_bench_now() - t0) * 1e6;
	}
	if (rc || n == 0)
		sh_bench_fail(g, "get: %s: %s", shoal_strerror(rc), shoal_client_error(c));
	else
		set_small_latency(r, g, lat, n, spill);
	for (int i = 0; i < n; i++)
		shoal_delete_id(c, ids[i]);
	shoal_disconnect(c);
	free(lat);
	free(ids);
}

/* put_small and get_small again, against a store of the same size with a
 * spill directory on a disk that stays under its high mark: what having
 * spilling on costs objects that fit. */
static void bench_small_spilling(const sh_bench_opts *o, sh_bench_report *r, size_t size)
{
	char base[256], spill[300], why[300];
	if (sh_bench_spill_scratch(base, sizeof(base), 0, why, sizeof(why)) != 0) {
		static const char *const tests[] = {"put_small", "get_small"};
		for (int i = 0; i < 2; i++) {
			sh_bench_result *x = sh_bench_add(r, SUITE, tests[i], "shoal", 0);
			sh_bench_param_num(x, "bytes", SMALL_BYTES);
			sh_bench_param_bool(x, "spill", true);
			sh_bench_skip(x, "%s", why);
		}
		return;
	}
	snprintf(spill, sizeof(spill), "%s/spill", base);
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = size;
	so.spill_dir = spill;
	shoal_store *s;
	int rc = shoal_store_open_embedded(&s, &so);
	if (rc) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "put_small", "shoal", 0);
		sh_bench_param_num(x, "bytes", SMALL_BYTES);
		sh_bench_param_bool(x, "spill", true);
		sh_bench_fail(x, "a store spilling into %s: %s", spill, shoal_strerror(rc));
	} else {
		bench_small(o, r, shoal_store_socket(s), true);
		shoal_store_close(s);
	}
	sh_bench_rm_tree(base);
}

/* A state dict shaped like stable-diffusion v1.5's: n F16 tensors whose
 * sizes cycle through the shapes of conv kernels, attention projections,
 * norms and biases, scaled to `bytes` in all. */
static int put_state_dict(shoal_client *c, const char *name, int n, uint64_t bytes,
			  uint64_t *total_out)
{
	static const double weight[] = {8, 4, 1, 0.02, 0.01, 2, 0.5, 0.02};
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += weight[i % 8];
	shoal_builder *b;
	int rc = shoal_builder_create(c, "tensor_dict", &b);
	if (rc)
		return rc;
	uint64_t total = 0;
	int64_t cols = 320;
	for (int i = 0; i < n; i++) {
		int64_t elems = (int64_t)((double)bytes / 2 * weight[i % 8] / sum);
		int64_t rows = elems / cols > 0 ? elems / cols : 1;
		total += (uint64_t)(rows * cols * 2 + 64);
	}
	if ((rc = shoal_builder_reserve(b, total)) != 0) {
		shoal_builder_abort(b);
		return rc;
	}
	for (int i = 0; i < n && rc == 0; i++) {
		int64_t elems = (int64_t)((double)bytes / 2 * weight[i % 8] / sum);
		int64_t shape[2] = {elems / cols > 0 ? elems / cols : 1, cols};
		char nm[96];
		snprintf(nm, sizeof(nm), "model.diffusion_model.blocks.%d.%s", i / 8,
			 (const char *[]){"conv.weight", "attn.to_q.weight", "attn.to_k.weight",
					  "norm.weight", "norm.bias", "ff.net.0.proj.weight",
					  "proj_out.weight", "proj_out.bias"}[i % 8]);
		shoal_node *m;
		void *p;
		rc = shoal_node_add_member(shoal_builder_root(b), nm, "tensor", &m);
		if (rc == 0)
			rc = shoal_node_set_tensor(m, SHOAL_DT_F16, 2, shape, &p);
		if (rc == 0)
			memset(p, i & 0x7f, (size_t)(shape[0] * shape[1] * 2));
	}
	if (rc) {
		shoal_builder_abort(b);
		return rc;
	}
	*total_out = total;
	return shoal_builder_seal(b, name, 0, NULL);
}

/* A cold get in a fresh process: connect, get sd15 and walk its tensors'
 * metadata (cold get), then read a byte of every page of every tensor
 * (until all the data is readable: the mapping's page faults). */
struct cold_arg {
	const char *sock;
	int ntensors;
};
struct cold_out {
	double connect_s, get_s, readable_s;
};

static int cold_child(void *argp, void *outp, size_t out_size, char *err, size_t errlen)
{
	const struct cold_arg *a = argp;
	struct cold_out *out = outp;
	(void)out_size;
	shoal_client *c;
	shoal_object *ob;
	double t0 = sh_bench_now();
	int rc = shoal_connect(&c, a->sock);
	if (rc) {
		snprintf(err, errlen, "connect: %s", shoal_strerror(rc));
		return -1;
	}
	double t1 = sh_bench_now();
	rc = shoal_get_by_name(c, "sd15", &ob);
	const shoal_node *root = rc == 0 ? shoal_object_root(ob) : NULL;
	size_t nm = root ? shoal_node_nmembers(root) : 0;
	shoal_tensor *t = calloc(nm + 1, sizeof(*t));
	for (size_t k = 0; rc == 0 && k < nm; k++)
		rc = t ? shoal_node_tensor(shoal_node_member(root, k, NULL), &t[k]) : SHOAL_ENOMEM;
	double t2 = sh_bench_now();
	unsigned sum = 0;
	for (size_t k = 0; rc == 0 && k < nm; k++)
		for (size_t b = 0; b < t[k].nbytes; b += 4096)
			sum += ((const volatile unsigned char *)t[k].data)[b];
	double t3 = sh_bench_now();
	__asm__ volatile("" ::"r"(sum));
	if (rc == 0 && nm != (size_t)a->ntensors)
		rc = SHOAL_EPROTO;
	if (rc)
		snprintf(err, errlen, "get: %s: %s", shoal_strerror(rc), shoal_client_error(c));
	free(t);
	if (root)
		shoal_object_release(ob);
	shoal_disconnect(c);
	out->connect_s = t1 - t0;
	out->get_s = t2 - t1;
	out->readable_s = t3 - t1;
	return rc ? -1 : 0;
}

static void bench_dict_cold(const sh_bench_opts *o, sh_bench_report *r, const char *sock,
			    int ntensors, uint64_t total)
{
	int reps = o->quick ? 5 : 10;
	double get_ms[10], read_ms[10], conn = 0;
	char err[256] = "";
	struct cold_arg a = {sock, ntensors};
	int done = 0;
	for (; done < reps; done++) {
		struct cold_out out;
		long rss;
		if (sh_bench_in_child(cold_child, &a, &out, sizeof(out), 60, &rss, err,
				      sizeof(err)) != 0)
			break;
		get_ms[done] = out.get_s * 1e3;
		read_ms[done] = out.readable_s * 1e3;
		conn += out.connect_s * 1e3;
	}
	static const char *const client[2] = {"cold", "cold+read"};
	for (int k = 0; k < 2; k++) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "get_tensor_dict", "shoal", 0);
		sh_bench_param_num(x, "tensors", ntensors);
		sh_bench_param_num(x, "bytes", (double)total);
		sh_bench_param_str(x, "client", client[k]);
		if (done < reps) {
			sh_bench_fail(x, "a fresh process: %s", err);
			continue;
		}
		double *v = k ? read_ms : get_ms, mean, sd, mn, mx;
		sh_bench_stats(v, reps, &mean, &sd, &mn, &mx);
		sh_bench_metric_set(x, "mean_ms", mean);
		sh_bench_metric_set(x, "min_ms", mn);
		sh_bench_metric_set(x, "connect_ms", conn / reps);
		sh_bench_show_samples(x, v, reps, "ms");
	}
}

static void bench_dict(const sh_bench_opts *o, sh_bench_report *r, const char *sock)
{
	int ntensors = 1100;
	uint64_t bytes = o->quick ? (128ull << 20) : (2ull << 30);
	sh_bench_result *x = sh_bench_add(r, SUITE, "get_tensor_dict", "shoal", 0);
	sh_bench_param_num(x, "tensors", ntensors);
	shoal_client *c;
	int rc = shoal_connect(&c, sock);
	uint64_t total = 0;
	if (rc == 0)
		rc = put_state_dict(c, "sd15", ntensors, bytes, &total);
	sh_bench_param_num(x, "bytes", (double)total);
	if (rc) {
		sh_bench_fail(x, "creating the state dict: %s: %s", shoal_strerror(rc),
			      rc == SHOAL_ENOSPC || rc < -10000 ? shoal_client_error(c) : "");
		if (c)
			shoal_disconnect(c);
		return;
	}
	/* Warm: the same client again and again, over a connection that
	 * stays open, as a worker would; it keeps released segments mapped,
	 * so this is the metadata walk alone (the cold rows below map). */
	int reps = o->quick ? 20 : 50;
	double v[50];
	for (int i = -2; i < reps && rc == 0; i++) {
		double t0 = sh_bench_now();
		shoal_object *ob;
		rc = shoal_get_by_name(c, "sd15", &ob);
		if (rc)
			break;
		const shoal_node *root = shoal_object_root(ob);
		size_t nm = shoal_node_nmembers(root);
		uintptr_t check = 0;
		for (size_t k = 0; k < nm; k++) {
			shoal_tensor t;
			if ((rc = shoal_node_tensor(shoal_node_member(root, k, NULL), &t)) != 0)
				break;
			check += (uintptr_t)t.data + (uintptr_t)t.shape[0] + (uintptr_t)t.dtype;
		}
		double dt = sh_bench_now() - t0;
		if (nm != (size_t)ntensors || check == 0)
			rc = SHOAL_EPROTO;
		shoal_object_release(ob);
		if (i >= 0)
			v[i] = dt * 1e3;
	}
	if (rc) {
		sh_bench_fail(x, "get: %s: %s", shoal_strerror(rc), shoal_client_error(c));
	} else {
		double mean, sd, mn, mx;
		sh_bench_stats(v, reps, &mean, &sd, &mn, &mx);
		sh_bench_metric_set(x, "mean_ms", mean);
		sh_bench_metric_set(x, "min_ms", mn);
		sh_bench_show_samples(x, v, reps, "ms");
	}
	sh_bench_param_str(x, "client", "warm");
	if (rc == 0)
		bench_dict_cold(o, r, sock, ntensors, total);
	shoal_delete(c, "sd15");
	shoal_disconnect(c);
}

/* Uss of the calling process, KiB, or -1. */
static long self_uss_kib(void)
{
	long uss;
	return sh_bench_proc_mem(0, &uss, NULL) == 0 ? uss : -1;
}

/* The page tables of the calling process (VmPTE), KiB. */
static long self_pte_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	char line[256];
	long v = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPTE: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* n reader processes, all alive at once, each maps the tensor and reads
 * every page of it; each reports its Uss and page tables before and after. */
static int run_readers(const char *sock, int n, double *uss_extra_kib, double *pte_extra_kib,
		       char *err, size_t errlen)
{
	int res[2], go[2];
	if (pipe(res) != 0 || pipe(go) != 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid_t pids[64];
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(res[0]);
			close(go[1]);
			long before = self_uss_kib(), pte = self_pte_kib();
			shoal_client *c;
			shoal_object *ob;
			long msg[4] = {-1, -1, -1, -1};
			if (shoal_connect(&c, sock) == 0 && shoal_get_by_name(c, "big", &ob) == 0) {
				shoal_tensor t;
				shoal_node_tensor(shoal_object_root(ob), &t);
				for (size_t k = 0; k < t.nbytes; k += 4096)
					(void)((const volatile unsigned char *)t.data)[k];
				msg[0] = before;
				msg[1] = self_uss_kib();
				msg[2] = pte;
				msg[3] = self_pte_kib();
			}
			if (write(res[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				_exit(1);
			char b;
			if (read(go[0], &b, 1) < 0)
				_exit(1);
			_exit(0); /* the store releases for a reader that is gone */
		}
	}
	close(res[1]);
	close(go[0]);
	double extra = 0, pte = 0;
	int rc = 0;
	for (int i = 0; i < n; i++) {
		long msg[4];
		if (read(res[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg) || msg[0] < 0 ||
		    msg[1] < 0) {
			snprintf(err, errlen, "a reader failed");
			rc = -1;
			break;
		}
		extra += (double)(msg[1] - msg[0]);
		pte += (double)(msg[3] - msg[2]);
	}
	close(go[1]); /* all may exit now */
	close(res[0]);
	for (int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
	*uss_extra_kib = extra / n;
	*pte_extra_kib = pte / n;
	return rc;
}

static void bench_readers(const sh_bench_opts *o, sh_bench_report *r, const char *sock)
{
	uint64_t bytes = o->large ? (2ull << 30) : (256ull << 20);
	shoal_client *c;
	int rc = shoal_connect(&c, sock);
	shoal_builder *b = NULL;
	if (rc == 0)
		rc = shoal_builder_create(c, "tensor", &b);
	void *p;
	int64_t shape[1] = {(int64_t)(bytes / 4)};
	if (rc == 0)
		rc = shoal_node_set_tensor(shoal_builder_root(b), SHOAL_DT_F32, 1, shape, &p);
	if (rc == 0) {
		memset(p, 1, bytes);
		rc = shoal_builder_seal(b, "big", 0, NULL);
	} else if (b) {
		shoal_builder_abort(b);
	}
	/* We keep a mapping too, as the process that made the tensor would:
	 * then its pages are shared from the first reader on, and a reader's
	 * Uss is what it costs beyond them. */
	shoal_object *hold = NULL;
	if (rc == 0 && (rc = shoal_get_by_name(c, "big", &hold)) == 0) {
		shoal_tensor t;
		shoal_node_tensor(shoal_object_root(hold), &t);
		for (size_t k = 0; k < t.nbytes; k += 4096)
			(void)((const volatile unsigned char *)t.data)[k];
	}
	static const int ns[] = {1, 5, 10, 20, 50};
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "readers", "shoal", 0);
		sh_bench_param_num(x, "readers", ns[i]);
		sh_bench_param_num(x, "tensor_bytes", (double)bytes);
		char err[256];
		double uss, pte;
		if (rc) {
			sh_bench_fail(x, "creating the tensor: %s", shoal_strerror(rc));
			continue;
		}
		if (run_readers(sock, ns[i], &uss, &pte, err, sizeof(err)) != 0) {
			sh_bench_fail(x, "%s", err);
			continue;
		}
		sh_bench_metric_set(x, "uss_per_reader_kib", uss);
		sh_bench_metric_set(x, "pte_per_reader_kib", pte);
		sh_bench_metric_set(x, "uss_per_reader_pct", uss * 1024 / (double)bytes * 100);
		double v = uss;
		sh_bench_show_samples(x, &v, 1, "KiB");
	}
	if (hold)
		shoal_object_release(hold);
	if (c) {
		shoal_delete(c, "big");
		shoal_disconnect(c);
	}
}

/* Writes a safetensors file of n F16 tensors, bytes in all, as the
 * reference writer lays it out. */
static int write_st_file(const char *path, int n, uint64_t bytes, char *err, size_t errlen)
{
	sh_st_tensor *t = calloc((size_t)n, sizeof(*t));
	if (!t)
		return -1;
	uint64_t off = 0, per = bytes / (uint64_t)n / 2 * 2;
	for (int i = 0; i < n; i++) {
		t[i].name = malloc(64);
		snprintf(t[i].name, 64, "model.layers.%04d.weight", i);
		t[i].name_len = strlen(t[i].name);
		t[i].dtype = SHOAL_DT_F16;
		t[i].ndim = 1;
		t[i].shape[0] = (int64_t)(per / 2);
		t[i].begin = off;
		off += per;
		t[i].end = off;
	}
	unsigned char *hdr;
	size_t hlen;
	int rc = sh_st_header_write(t, (size_t)n, NULL, 0, &hdr, &hlen);
	int fd = rc == 0 ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
	if (fd >= 0 && write(fd, hdr, hlen) == (ssize_t)hlen) {
		size_t chunk = 8u << 20;
		unsigned char *buf = malloc(chunk);
		for (uint64_t done = 0; buf && done < off && rc == 0; done += chunk) {
			size_t k = off - done < chunk ? (size_t)(off - done) : chunk;
			memset(buf, (int)(done >> 20), k);
			if (write(fd, buf, k) != (ssize_t)k)
				rc = -1;
		}
		free(buf);
	} else {
		rc = -1;
	}
	if (fd >= 0)
		close(fd);
	if (rc == 0)
		shoal_free(hdr, hlen);
	for (int i = 0; i < n; i++)
		free(t[i].name);
	free(t);
	if (rc)
		snprintf(err, errlen, "writing %s: %s", path, strerror(errno));
	return rc;
}

/* `shoal put` (this program, when it is shoal; else the same library call
 * in process) of a safetensors file, against cp of it to tmpfs, best of
 * three each, interleaved, the file hot in the page cache for both. */
static void bench_import(const sh_bench_opts *o, sh_bench_report *r, const char *sock)
{
	uint64_t bytes = o->quick ? (256ull << 20) : (2ull << 30);
	const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	char src[128], dst[128], self[PATH_MAX] = "", err[256] = "";
	snprintf(src, sizeof(src), "/tmp/shoal-bench-%d.safetensors", (int)getpid());
	snprintf(dst, sizeof(dst), "%s/shoal-bench-cp-%d.safetensors", tmp, (int)getpid());
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl > 0)
		self[sl] = 0;
	bool exec_put = sl > 6 && strcmp(self + sl - 6, "/shoal") == 0;
	/* cp by its index: the second add may move the results */
	size_t ci = r->n;
	sh_bench_param_num(sh_bench_add(r, SUITE, "import_safetensors", "cp", 1), "bytes",
			   (double)bytes);
	sh_bench_result *put =
		sh_bench_add(r, SUITE, "import_safetensors", exec_put ? "shoal put" : "import", 0);
	sh_bench_result *cp = &r->res[ci];
	sh_bench_param_num(put, "bytes", (double)bytes);
	if (write_st_file(src, 1100, bytes, err, sizeof(err)) != 0) {
		sh_bench_fail(cp, "%s", err);
		sh_bench_fail(put, "%s", err);
		unlink(src);
		return;
	}
	double tcp[3], tput[3];
	char out[4096];
	int rc = 0;
	shoal_client *c = NULL;
	if (shoal_connect(&c, sock) != 0)
		rc = -1;
	for (int i = 0; i < 3 && rc == 0; i++) {
		char *cpv[] = {"cp", src, dst, NULL};
		double t0 = sh_bench_now();
		if (sh_bench_exec(cpv, NULL, NULL, out, sizeof(out), 600, NULL, err, sizeof(err)) !=
		    0) {
			rc = -1;
			break;
		}
		tcp[i] = sh_bench_now() - t0;
		unlink(dst);
		t0 = sh_bench_now();
		if (exec_put) {
			char *pv[] = {self,	  "put",      src,	    "--name",
				      "imported", "--socket", (char *)sock, NULL};
			int st = sh_bench_exec(pv, NULL, NULL, out, sizeof(out), 600, NULL, err,
					       sizeof(err));
			if (st != 0) {
				if (st > 0)
					snprintf(err, sizeof(err), "shoal put: %.200s", out);
				rc = -1;
			}
		} else {
			int e = shoal_import_safetensors(c, src, "imported", 0, NULL);
			if (e) {
				snprintf(err, sizeof(err), "import: %s", shoal_client_error(c));
				rc = -1;
			}
		}
		tput[i] = sh_bench_now() - t0;
		shoal_delete(c, "imported");
	}
	if (c)
		shoal_disconnect(c);
	unlink(src);
	unlink(dst);
	if (rc) {
		sh_bench_fail(cp, "%s", err);
		sh_bench_fail(put, "%s", err);
		return;
	}
	double bcp = fmin(tcp[0], fmin(tcp[1], tcp[2])),
	       bput = fmin(tput[0], fmin(tput[1], tput[2]));
	sh_bench_metric_set(cp, "mb_s", (double)bytes / 1e6 / bcp);
	sh_bench_show_samples(cp, tcp, 3, "s");
	cp->cmp_value = bcp;
	cp->cmp_word = "faster";
	sh_bench_metric_set(put, "mb_s", (double)bytes / 1e6 / bput);
	sh_bench_metric_set(put, "ratio_vs_cp", bput / bcp);
	sh_bench_show_samples(put, tput, 3, "s");
	put->cmp_value = bput;
	put->cmp_word = "faster";
}

int sh_bench_store(const sh_bench_opts *o, sh_bench_report *r)
{
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = (size_t)((o->large ? 8ull : 4ull) << 30);
	shoal_store *s;
	int rc = shoal_store_open_embedded(&s, &so);
	if (rc) {
		fprintf(stderr, "shoal bench store: cannot start a store: %s\n",
			shoal_strerror(rc));
		return -1;
	}
	const char *sock = shoal_store_socket(s);
	if (sh_bench_wants(o, "small")) {
		bench_small(o, r, sock, false);
		bench_small_spilling(o, r, so.size);
	}
	if (sh_bench_wants(o, "dict"))
		bench_dict(o, r, sock);
	if (sh_bench_wants(o, "import"))
		bench_import(o, r, sock);
	if (sh_bench_wants(o, "readers"))
		bench_readers(o, r, sock);
	shoal_store_close(s);
	if (sh_bench_wants(o, "spill") || sh_bench_wants(o, "restore"))
		sh_bench_spill(o, r);
	sh_bench_note(r, "get_small: get, read every byte, release, timed together. "
			 "get_tensor_dict: client=warm, the same client again, its segments "
			 "still mapped: the metadata walk alone (every tensor's address, dtype, "
			 "shape); client=cold, a fresh process (its connect apart, connect_ms in "
			 "--json): get and the metadata walk; client=cold+read, the same until a "
			 "byte of every page of every tensor has been read (all data readable).");
	sh_bench_note(r, "goals: put_small and get_small p50 < 20 us; get_tensor_dict of 1100 "
			 "tensors < 2 ms; import within 1.5x of cp; each reader's Uss < 1%% of "
			 "the tensor");
	return 0;
}

void sh_bench_store_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench store: an embedded store on a unix socket, clients in "
			     "this and child processes");
	double put = 0, get = 0, dict = 0, cold = 0, cold_read = 0, sock = 0, pct = 0, imp = 0;
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		const char *spill = sh_bench_param_get(x, "spill");
		if (strcmp(x->suite, SUITE) != 0 || x->status != SH_BENCH_OK ||
		    (spill && !strcmp(spill, "true")))
			continue;
		if (!strcmp(x->test, "put_small"))
			put = sh_bench_metric_get(x, "p50_us", 0);
		else if (!strcmp(x->test, "get_small"))
			get = sh_bench_metric_get(x, "p50_us", 0);
		else if (!strcmp(x->test, "roundtrip"))
			sock = sh_bench_metric_get(x, "p50_us", 0);
		else if (!strcmp(x->test, "get_tensor_dict")) {
			const char *cl = sh_bench_param_get(x, "client");
			double *d = !cl || !strcmp(cl, "warm") ? &dict
				    : !strcmp(cl, "cold")      ? &cold
							       : &cold_read;
			*d = sh_bench_metric_get(x, "mean_ms", 0);
		} else if (!strcmp(x->test, "import_safetensors") && !x->baseline)
			imp = sh_bench_metric_get(x, "ratio_vs_cp", 0);
		else if (!strcmp(x->test, "readers"))
			pct = fmax(pct, sh_bench_metric_get(x, "uss_per_reader_pct", 0));
	}
	fprintf(f,
		"summary: put %.1f us, get-read-release %.1f us p50 (a unix-socket round trip "
		"alone: %.1f us); 1100-tensor dict %.2f ms warm (metadata), %.2f ms cold in a "
		"fresh process, %.2f ms until all its data is readable; import %.2fx cp; a reader "
		"costs at most %.2f%% of the tensor\n",
		put, get, sock, dict, cold, cold_read, imp, pct);
	sh_bench_spill_summary(f, r);
}

void sh_bench_store_plot(FILE *f, const sh_bench_report *r)
{
	const sh_bench_lines
		uss = {SUITE,
		       "readers",
		       "readers",
		       "impl",
		       "uss_per_reader_kib",
		       1,
		       "Processes reading one large tensor: what each costs beyond the "
		       "shared pages",
		       "reader processes, all alive at once",
		       "Uss of each reader (KiB)"},
		pte = {SUITE,
		       "readers",
		       "readers",
		       "impl",
		       "pte_per_reader_kib",
		       1,
		       "The same readers: page tables of each",
		       "reader processes, all alive at once",
		       "page tables of each reader (KiB)"};
	int y = sh_bench_svg_begin(f, 760, 800, "shoal bench store: readers of one tensor");
	y += sh_bench_svg_lines(f, r, &uss, 0, y, 760, 360) + 10;
	sh_bench_svg_lines(f, r, &pte, 0, y, 760, 360);
	sh_bench_svg_end(f);
}

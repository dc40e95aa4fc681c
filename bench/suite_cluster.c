/* shoal bench cluster: stores of two hosts as two shoald processes on this
 * machine, their peers on loopback TCP. migrate: a tensor_dict of one blob
 * and of 1 000 blobs copied from one store into the other, against the same
 * bytes between two processes on raw TCP in the same run (baseline rows),
 * with the channel's encryption and without; dedup: 8 asks at once for one
 * object. With etcd installed (a fresh one on loopback, both stores --meta
 * etcd), peer_loss: how long until the other store no longer counts a
 * store killed with SIGKILL (its lease expired); task_buffers: tasks with a
 * buffer from a client of one store to an engine of the other through a
 * controller on TCP, each argument migrating, beside raw TCP. Without
 * etcd those two are skipped, saying why. */
#include "bench.h"

#include <shoal/shoal.h>
#include <shoal/tasks.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SUITE "cluster"

typedef struct daemon {
	pid_t pid;
	char dir[64], sock[128], log[128], peer[64];
} daemon_t;

static char secret_env[80];

/* shoald on a fresh socket, its peers on 127.0.0.1:0, in the clear
 * towards peers that also ask for it when plain. 0 or -1 (err). */
static int daemon_start_x(daemon_t *d, uint64_t size, bool plain, const char *const *x, char *err,
			  size_t errlen)
{
	char exe[PATH_MAX], lib[PATH_MAX];
	if (sh_bench_find_tool("shoald", exe, lib, sizeof(exe)) != 0) {
		snprintf(err, errlen, "shoald not found beside this program");
		return -1;
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/shoal-bench-cluster-XXXXXX");
	if (!mkdtemp(d->dir)) {
		snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
	char sz[32];
	snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return -1;
	}
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		putenv(secret_env);
		const char *argv[24] = {exe,	    "--socket", d->sock,  "--size",	sz,
					"--spares", "0",	"--peer", "127.0.0.1:0"};
		int n = 9;
		if (plain)
			argv[n++] = "--peer-no-encrypt";
		for (int i = 0; x && x[i] && n < 23; i++)
			argv[n++] = x[i];
		execv(exe, (char *const *)argv);
		_exit(127);
	}
	/* --reserve touches the capacity first: seconds a GiB on a cold VM */
	for (int i = 0; i < 12000; i++) {
		char text[4096] = "";
		FILE *f = fopen(d->log, "r");
		if (f) {
			text[fread(text, 1, sizeof(text) - 1, f)] = 0;
			fclose(f);
		}
		const char *p = strstr(text, "peers on ");
		if (p && sscanf(p + 9, "%63[0-9.:]", d->peer) == 1)
			return 0;
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			snprintf(err, errlen, "shoald exited at start: %.200s", text);
			d->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	snprintf(err, errlen, "shoald did not start within 120 s");
	return -1;
}

static int daemon_start(daemon_t *d, uint64_t size, bool plain, char *err, size_t errlen)
{
	return daemon_start_x(d, size, plain, NULL, err, errlen);
}

static void daemon_stop(daemon_t *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, NULL, 0);
	}
	d->pid = 0;
	if (d->dir[0])
		sh_bench_rm_tree(d->dir);
	d->dir[0] = 0;
}

static shoal_client *client_of(const daemon_t *d, char *err, size_t errlen)
{
	shoal_client *c;
	int rc = shoal_connect(&c, d->sock);
	if (rc) {
		snprintf(err, errlen, "connect %s: %s", d->sock, shoal_strerror(rc));
		return NULL;
	}
	shoal_client_set_timeout(c, 600 * 1000000000LL);
	return c;
}

/* A tensor_dict of nblobs U8 tensors, bytes in all, named name. */
static int put_dict(const daemon_t *d, const char *name, int nblobs, uint64_t bytes, char *err,
		    size_t errlen)
{
	shoal_client *c = client_of(d, err, errlen);
	if (!c)
		return -1;
	shoal_builder *b;
	int rc = shoal_builder_create(c, "tensor_dict", &b);
	uint64_t each = bytes / (uint64_t)nblobs;
	if (rc == 0)
		rc = shoal_builder_reserve(b, (size_t)(each + 64) * (size_t)nblobs);
	static unsigned char chunk[1 << 20];
	for (size_t i = 0; i < sizeof(chunk); i++)
		chunk[i] = (unsigned char)(i * 131 + 7);
	for (int t = 0; rc == 0 && t < nblobs; t++) {
		char nm[32];
		snprintf(nm, sizeof(nm), "layers.%d.weight", t);
		shoal_node *m;
		int64_t shape[1] = {(int64_t)each};
		unsigned char *p;
		rc = shoal_node_add_member(shoal_builder_root(b), nm, "tensor", &m);
		if (rc == 0)
			rc = shoal_node_set_tensor(m, SHOAL_DT_U8, 1, shape, (void **)&p);
		for (uint64_t off = 0; rc == 0 && off < each; off += sizeof(chunk)) {
			size_t k =
				each - off < sizeof(chunk) ? (size_t)(each - off) : sizeof(chunk);
			rc = shoal_builder_write(b, p + off, chunk, k);
		}
	}
	shoal_id id;
	if (rc == 0)
		rc = shoal_builder_seal(b, name, SHOAL_PERSIST, &id);
	else
		shoal_builder_abort(b);
	if (rc)
		snprintf(err, errlen, "put %s: %s", name, shoal_client_error(c));
	shoal_disconnect(c);
	return rc ? -1 : 0;
}

static int drop(const daemon_t *d, const char *name, char *err, size_t errlen)
{
	shoal_client *c = client_of(d, err, errlen);
	if (!c)
		return -1;
	int rc = shoal_delete(c, name);
	shoal_store_stat st = {0};
	/* freed once nothing holds it */
	for (int i = 0; rc == 0 && i < 1000; i++) {
		if ((rc = shoal_store_stat_get(c, &st)) != 0 || st.objects == 0)
			break;
		usleep(10000);
	}
	if (rc)
		snprintf(err, errlen, "delete %s: %s", name, shoal_client_error(c));
	shoal_disconnect(c);
	return rc ? -1 : 0;
}

static int migrate_once(const daemon_t *to, const daemon_t *from, const char *name, int streams,
			double *s, char *err, size_t errlen)
{
	shoal_client *c = client_of(to, err, errlen);
	if (!c)
		return -1;
	shoal_migrate_opts mo = {.from = from->peer, .streams = (uint32_t)streams};
	shoal_id id;
	double t0 = sh_bench_now();
	int rc = shoal_migrate(c, name, 0, &mo, &id);
	*s = sh_bench_now() - t0;
	if (rc)
		snprintf(err, errlen, "migrate %s: %s", name, shoal_client_error(c));
	shoal_disconnect(c);
	return rc ? -1 : 0;
}

/* ---- raw TCP: the same bytes between two processes ---- */

/* Sends bytes over each of nstreams connections to port, from a 1 MiB
 * buffer: the child of raw_tcp. */
static void raw_send(struct in_addr to, int port, uint64_t bytes, int nstreams)
{
	int fds[16];
	for (int i = 0; i < nstreams; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {
			.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = to};
		if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0)
			_exit(1);
	}
	static unsigned char buf[1 << 20];
	memset(buf, 7, sizeof(buf));
	uint64_t left[16];
	for (int i = 0; i < nstreams; i++)
		left[i] = bytes / (uint64_t)nstreams;
	for (int more = 1; more;) {
		more = 0;
		for (int i = 0; i < nstreams; i++) {
			if (!left[i])
				continue;
			size_t k = left[i] < sizeof(buf) ? (size_t)left[i] : sizeof(buf);
			ssize_t w = send(fds[i], buf, k, 0);
			if (w <= 0)
				_exit(1);
			left[i] -= (uint64_t)w;
			more = 1;
		}
	}
	_exit(0);
}

typedef struct rx_arg {
	int fd;
	uint64_t want, got;
} rx_arg;

static void *raw_recv(void *p)
{
	rx_arg *a = p;
	unsigned char *buf = malloc(1 << 20);
	while (buf && a->got < a->want) {
		ssize_t k = recv(a->fd, buf, 1 << 20, 0);
		if (k <= 0)
			break;
		a->got += (uint64_t)k;
	}
	free(buf);
	return NULL;
}

/* Seconds to move bytes from a child process to this one over nstreams
 * TCP connections, each read by a thread of its own: on loopback, or
 * (link) from its side 0 to its side 1. */
static int raw_tcp(const sh_bench_link *link, uint64_t bytes, int nstreams, double *s, char *err,
		   size_t errlen)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (link)
		inet_pton(AF_INET, link->addr[1], &a.sin_addr);
	/* a socket stays in the namespace it was made in */
	if (link)
		sh_bench_link_enter(link, 1);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (link)
		sh_bench_link_enter(link, -1);
	socklen_t al = sizeof(a);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 16) != 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) != 0) {
		snprintf(err, errlen, "listen: %s", strerror(errno));
		if (l >= 0)
			close(l);
		return -1;
	}
	fflush(NULL);
	if (link)
		sh_bench_link_enter(link, 0);
	pid_t pid = fork();
	if (pid == 0)
		raw_send(a.sin_addr, ntohs(a.sin_port), bytes, nstreams);
	if (link)
		sh_bench_link_enter(link, -1);
	rx_arg rx[16];
	pthread_t th[16];
	for (int i = 0; i < nstreams; i++) {
		rx[i] = (rx_arg){.fd = accept(l, NULL, NULL), .want = bytes / (uint64_t)nstreams};
	}
	double t0 = sh_bench_now();
	for (int i = 0; i < nstreams; i++)
		pthread_create(&th[i], NULL, raw_recv, &rx[i]);
	uint64_t got = 0;
	for (int i = 0; i < nstreams; i++) {
		pthread_join(th[i], NULL);
		got += rx[i].got;
		close(rx[i].fd);
	}
	*s = sh_bench_now() - t0;
	close(l);
	int st;
	waitpid(pid, &st, 0);
	if (got != bytes / (uint64_t)nstreams * (uint64_t)nstreams) {
		snprintf(err, errlen, "raw TCP: %llu of %llu bytes came", (unsigned long long)got,
			 (unsigned long long)bytes);
		return -1;
	}
	return 0;
}

/* ---- the cases ---- */

static void set_rate(sh_bench_result *x, const double *s, int n, uint64_t bytes)
{
	double mean, sd, mn, mx;
	sh_bench_stats(s, n, &mean, &sd, &mn, &mx);
	sh_bench_metric_set(x, "s", mean);
	sh_bench_metric_set(x, "min_s", mn);
	sh_bench_metric_set(x, "mb_s", (double)bytes / mean / 1e6);
	double rate[16];
	for (int i = 0; i < n && i < 16; i++)
		rate[i] = (double)bytes / s[i] / 1e6;
	sh_bench_show_samples(x, rate, n < 16 ? n : 16, "MB/s");
}

/* Row x: raw TCP moving bytes over streams 3 times (on loopback, or link),
 * its rate set, or failed with why. 0 or -1. */
static int raw_rate(sh_bench_result *x, const sh_bench_link *link, uint64_t bytes, int streams)
{
	char err[512];
	double s[3];
	for (int i = 0; i < 3; i++)
		if (raw_tcp(link, bytes, streams, &s[i], err, sizeof(err)) != 0) {
			sh_bench_fail(x, "%s", err);
			return -1;
		}
	set_rate(x, s, 3, bytes);
	return 0;
}

/* Raw TCP over 1, 2 and 4 streams, into raw_s[streams] (seconds, mean). */
static void bench_raw(sh_bench_report *r, uint64_t bytes, double raw_s[5])
{
	for (int k = 1; k <= 4; k *= 2) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "migrate", "raw_tcp", 1);
		sh_bench_param_num(x, "bytes", (double)bytes);
		sh_bench_param_num(x, "streams", k);
		if (raw_rate(x, NULL, bytes, k) == 0)
			raw_s[k] = sh_bench_metric_get(x, "s", 0);
	}
}

/* Stores a and b of size, each with the options x (NULL-terminated, may be
 * NULL): on loopback, or with link, a on its side 0 and b on its side 1,
 * their peers on those sides' addresses. 0, or -1 with err. */
static int pair_start(daemon_t *a, daemon_t *b, uint64_t size, bool plain, const char *const *x,
		      const sh_bench_link *link, char *err, size_t errlen)
{
	daemon_t *d[2] = {a, b};
	for (int side = 0; side < 2; side++) {
		const char *argv[16];
		int n = 0;
		for (; x && x[n] && n < 13; n++)
			argv[n] = x[n];
		char peer[40];
		if (link) {
			snprintf(peer, sizeof(peer), "%s:0", link->addr[side]);
			argv[n++] = "--peer"; /* the last --peer is the one taken */
			argv[n++] = peer;
			sh_bench_link_enter(link, side);
		}
		argv[n] = NULL;
		int rc = daemon_start_x(d[side], size, plain, argv, err, errlen);
		if (link)
			sh_bench_link_enter(link, -1);
		if (rc)
			return -1;
	}
	return 0;
}

/* A dict of nblobs tensors migrated reps times over streams links. */
/* The link of the rows being measured: "loopback", or a veth's name. */
static const char *cur_link = "loopback";

static sh_bench_result *migrate_row(sh_bench_report *r, const char *test, uint64_t bytes,
				    int nblobs, int streams, bool plain, const char *pages)
{
	sh_bench_result *x = sh_bench_add(r, SUITE, test, "shoal", 0);
	sh_bench_param_num(x, "bytes", (double)bytes);
	sh_bench_param_num(x, "blobs", nblobs);
	sh_bench_param_num(x, "streams", streams);
	sh_bench_param_bool(x, "encrypted", !plain);
	sh_bench_param_str(x, "link", cur_link);
	sh_bench_param_str(x, "pages", pages);
	sh_bench_param_bool(x, "reserve", strcmp(pages, "4k") != 0);
	return x;
}

static void ratio_to_raw(sh_bench_result *x, const double raw_s[5], int streams)
{
	double raw = raw_s[streams <= 4 ? streams : 4];
	if (raw > 0) {
		sh_bench_metric_set(x, "ratio_vs_raw_tcp", raw / sh_bench_metric_get(x, "s", 1));
		snprintf(x->aside, sizeof(x->aside), "%.2fx raw TCP (%d stream%s)",
			 sh_bench_metric_get(x, "ratio_vs_raw_tcp", 0), streams,
			 streams > 1 ? "s" : "");
	}
}

static void migrate_case(sh_bench_report *r, daemon_t *a, daemon_t *b, uint64_t bytes, int nblobs,
			 int streams, bool plain, const char *pages, bool cold,
			 const double raw_s[5])
{
	char err[512];
	sh_bench_result *x = migrate_row(r, "migrate", bytes, nblobs, streams, plain, pages);
	if (put_dict(a, "model", nblobs, bytes, err, sizeof(err)) != 0) {
		sh_bench_fail(x, "%s", err);
		return;
	}
	/* the first copy into a store just started: the case users meet first */
	if (cold) {
		sh_bench_result *c =
			migrate_row(r, "migrate_first", bytes, nblobs, streams, plain, pages);
		double s0;
		if (migrate_once(b, a, "model", streams, &s0, err, sizeof(err)) != 0 ||
		    drop(b, "model", err, sizeof(err)) != 0) {
			sh_bench_fail(c, "%s", err);
		} else {
			set_rate(c, &s0, 1, bytes);
			ratio_to_raw(c, raw_s, streams);
		}
	}
	double s[3];
	int i = 0;
	for (; i < 3; i++)
		if (migrate_once(b, a, "model", streams, &s[i], err, sizeof(err)) != 0 ||
		    drop(b, "model", err, sizeof(err)) != 0)
			break;
	if (i < 3)
		sh_bench_fail(x, "%s", err);
	else {
		set_rate(x, s, 3, bytes);
		ratio_to_raw(x, raw_s, streams);
	}
	drop(a, "model", err, sizeof(err));
}

/* The migrations of one page kind ("4k": the machine's default; "thp",
 * "hugetlb": shoald --huge-pages, set up for the run as root, else
 * skipped with the reason). */
static void bench_migrate(sh_bench_report *r, uint64_t bytes, bool plain, const char *pages,
			  const double raw_s[5])
{
	char err[512];
	daemon_t a = {0}, b = {0};
	uint64_t size = bytes + (64u << 20);
	bool huge = strcmp(pages, "4k") != 0;
	/* huge pages with the capacity touched at start (--reserve): the
	 * pool's pages met for the first time are the VM's cost, not ours */
	const char *const x[] = {huge ? "--huge-pages" : NULL, "--reserve", NULL};
	/* two stores' worth, each holding the object once */
	if (sh_bench_pages_set(pages, 2 * size, err, sizeof(err)) != 0) {
		sh_bench_result *y =
			migrate_row(r, "migrate", bytes, 1000, SHOAL_MIGRATE_STREAMS, plain, pages);
		sh_bench_skip(y, "%s", err);
		return;
	}
	if (pair_start(&a, &b, size, plain, x, NULL, err, sizeof(err))) {
		sh_bench_result *y =
			migrate_row(r, "migrate", bytes, 1, SHOAL_MIGRATE_STREAMS, plain, pages);
		sh_bench_fail(y, "%s", err);
	} else if (plain && !huge) {
		/* one stream against several: the default is chosen from these */
		for (int k = 1; k <= 4; k *= 2)
			migrate_case(r, &a, &b, bytes, 1, k, plain, pages, k == 1, raw_s);
		migrate_case(r, &a, &b, bytes, 1000, SHOAL_MIGRATE_STREAMS, plain, pages, false,
			     raw_s);
	} else {
		migrate_case(r, &a, &b, bytes, 1, SHOAL_MIGRATE_STREAMS, plain, pages, true, raw_s);
		migrate_case(r, &a, &b, bytes, 1000, SHOAL_MIGRATE_STREAMS, plain, pages, false,
			     raw_s);
	}
	daemon_stop(&a);
	daemon_stop(&b);
	sh_bench_pages_reset();
}

static void buffers_sweep(const sh_bench_opts *o, sh_bench_report *r, bool plain, const char *meta,
			  const double *raw_by_size, const sh_bench_link *link);
static pid_t etcd_start_at(const char *host, const char *dir, int *port, char *err, size_t errlen);

/* Raw TCP over a veth between two namespaces of the run's own, unshaped
 * and then shaped to rate, and migrations between shoalds on its two
 * sides over the shaped link: a network, not the two cores, limits them. */
static void bench_link(const sh_bench_opts *o, sh_bench_report *r, uint64_t bytes, const char *rate)
{
	char err[512], name[40];
	snprintf(name, sizeof(name), "veth-%s", rate);
	sh_bench_link l;
	if (sh_bench_link_up(&l, err, sizeof(err)) != 0) {
		cur_link = name;
		for (int plain = 1; plain >= 0; plain--)
			sh_bench_skip(migrate_row(r, "migrate", bytes, 1000, SHOAL_MIGRATE_STREAMS,
						  plain, "4k"),
				      "%s", err);
		cur_link = "loopback";
		return;
	}
	/* the unshaped veth: what the shaping must stay well under */
	sh_bench_result *u = sh_bench_add(r, SUITE, "migrate", "raw_tcp", 1);
	sh_bench_param_num(u, "bytes", (double)bytes);
	sh_bench_param_num(u, "streams", 1);
	sh_bench_param_str(u, "link", "veth");
	raw_rate(u, &l, bytes, 1);
	double raw_s[5] = {0};
	sh_bench_result *x = sh_bench_add(r, SUITE, "migrate", "raw_tcp", 1);
	sh_bench_param_num(x, "bytes", (double)bytes);
	sh_bench_param_num(x, "streams", 1);
	sh_bench_param_str(x, "link", name);
	if (sh_bench_link_shape(&l, rate, err, sizeof(err)) != 0) {
		sh_bench_fail(x, "%s", err);
		sh_bench_link_down(&l);
		return;
	}
	if (raw_rate(x, &l, bytes, 1) != 0) {
		sh_bench_link_down(&l);
		return;
	}
	double shaped = sh_bench_metric_get(x, "mb_s", 0),
	       free_ = sh_bench_metric_get(u, "mb_s", 0);
	if (free_ > 0)
		snprintf(x->aside, sizeof(x->aside), "%.2fx the unshaped veth", shaped / free_);
	for (int k = 0; k <= 4; k++)
		raw_s[k] = sh_bench_metric_get(x, "s", 0);
	cur_link = l.name;
	/* the best memory this machine gives: huge pages when root can set
	 * them up, else the default */
	const char *pages =
		sh_bench_pages_set("hugetlb", 2 * (bytes + (64u << 20)), err, sizeof(err)) == 0
			? "hugetlb"
			: "4k";
	for (int plain = 1; plain >= 0; plain--) {
		daemon_t a = {0}, b = {0};
		bool huge = strcmp(pages, "4k") != 0;
		const char *const opt[] = {"--reserve", huge ? "--huge-pages" : NULL, NULL};
		if (pair_start(&a, &b, bytes + (64u << 20), plain, opt, &l, err, sizeof(err)) !=
		    0) {
			sh_bench_fail(migrate_row(r, "migrate", bytes, 1000, SHOAL_MIGRATE_STREAMS,
						  plain, pages),
				      "%s", err);
		} else {
			migrate_case(r, &a, &b, bytes, 1000, SHOAL_MIGRATE_STREAMS, plain, pages,
				     true, raw_s);
			migrate_case(r, &a, &b, bytes, 1, SHOAL_MIGRATE_STREAMS, plain, pages,
				     false, raw_s);
		}
		daemon_stop(&a);
		daemon_stop(&b);
	}
	sh_bench_pages_reset();
	/* tasks carrying buffers across it: the registry (etcd), the client's
	 * store and the controller on side 0, the engine's store and the
	 * engine on side 1; the same raw TCP rate is their ceiling */
	char dir[64] = "/tmp/shoal-bench-etcd-XXXXXX", meta[64];
	int port;
	pid_t etcd = -1;
	if (access("/usr/bin/etcd", X_OK) != 0) {
		snprintf(err, sizeof(err), "etcd is not installed (Debian's etcd-server)");
	} else if (mkdtemp(dir)) {
		sh_bench_link_enter(&l, 0);
		etcd = etcd_start_at(l.addr[0], dir, &port, err, sizeof(err));
		sh_bench_link_enter(&l, -1);
	}
	if (etcd < 0) {
		sh_bench_result *y = sh_bench_add(r, SUITE, "task_buffers", "shoal", 0);
		sh_bench_param_str(y, "link", l.name);
		sh_bench_skip(y, "%s", err);
	} else {
		snprintf(meta, sizeof(meta), "etcd://%s:%d", l.addr[0], port);
		double raw3[3] = {shaped, shaped, shaped};
		buffers_sweep(o, r, true, meta, raw3, &l);
		buffers_sweep(o, r, false, meta, raw3, &l);
		kill(etcd, SIGKILL);
		waitpid(etcd, NULL, 0);
	}
	if (dir[sizeof("/tmp/shoal-bench-etcd-") - 1] != 'X')
		sh_bench_rm_tree(dir);
	cur_link = "loopback";
	sh_bench_link_down(&l);
}

typedef struct asker {
	const daemon_t *to, *from;
	double done_at;
	int rc;
	char err[256];
} asker;

static void *ask_main(void *p)
{
	asker *k = p;
	double s;
	k->rc = migrate_once(k->to, k->from, "model", 0, &s, k->err, sizeof(k->err));
	k->done_at = sh_bench_now();
	return NULL;
}

static void bench_dedup(const sh_bench_opts *o, sh_bench_report *r)
{
	uint64_t bytes = o->quick ? 64ull << 20 : 256ull << 20;
	char err[512];
	daemon_t a = {0}, b = {0};
	sh_bench_result *x = sh_bench_add(r, SUITE, "dedup", "shoal", 0);
	sh_bench_param_num(x, "requesters", 8);
	sh_bench_param_num(x, "bytes", (double)bytes);
	if (daemon_start(&a, bytes + (64u << 20), false, err, sizeof(err)) ||
	    daemon_start(&b, bytes + (64u << 20), false, err, sizeof(err)) ||
	    put_dict(&a, "model", 1, bytes, err, sizeof(err))) {
		sh_bench_fail(x, "%s", err);
		goto out;
	}
	asker k[8];
	pthread_t th[8];
	for (int i = 0; i < 8; i++) {
		k[i] = (asker){.to = &b, .from = &a};
		pthread_create(&th[i], NULL, ask_main, &k[i]);
	}
	double first = 1e300, last = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		if (k[i].rc) {
			sh_bench_fail(x, "ask %d: %s", i, k[i].err);
			goto out;
		}
		first = k[i].done_at < first ? k[i].done_at : first;
		last = k[i].done_at > last ? k[i].done_at : last;
	}
	shoal_client *c = client_of(&a, err, sizeof(err));
	shoal_store_stat st;
	if (!c || shoal_store_stat_get(c, &st) != 0) {
		sh_bench_fail(x, "stat: %s", c ? shoal_client_error(c) : err);
	} else {
		sh_bench_metric_set(x, "transfers", (double)st.sent);
		sh_bench_metric_set(x, "wire_bytes", (double)st.sent_bytes);
		sh_bench_metric_set(x, "last_ms_after_first", (last - first) * 1e3);
		double v = (double)st.sent;
		sh_bench_show_samples(x, &v, 1, "transfers");
		snprintf(x->aside, sizeof(x->aside), "%.0f wire bytes, last %.1f ms after first",
			 (double)st.sent_bytes, (last - first) * 1e3);
	}
	if (c)
		shoal_disconnect(c);
out:
	daemon_stop(&a);
	daemon_stop(&b);
}

/* ---- peer_loss: etcd's lease and the watch ---- */

static bool tcp_open_at(const char *host, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &a.sin_addr);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* etcd on free ports of host (in the caller's network namespace), its data
 * in dir: its pid, or -1. */
static pid_t etcd_start_at(const char *host, const char *dir, int *port, char *err, size_t errlen)
{
	*port = 30000 + (int)(getpid() % 20000);
	while (tcp_open_at(host, *port) || tcp_open_at(host, *port + 1))
		*port += 2;
	char data[128], client[64], peer[64], cluster[96], log[160];
	snprintf(data, sizeof(data), "%s/etcd", dir);
	snprintf(client, sizeof(client), "http://%s:%d", host, *port);
	snprintf(peer, sizeof(peer), "http://%s:%d", host, *port + 1);
	snprintf(cluster, sizeof(cluster), "default=%s", peer);
	snprintf(log, sizeof(log), "%s/etcd.log", dir);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		execl("/usr/bin/etcd", "etcd", "--data-dir", data, "--listen-client-urls", client,
		      "--advertise-client-urls", client, "--listen-peer-urls", peer,
		      "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000 && pid > 0 && !tcp_open_at(host, *port); i++)
		usleep(10000);
	if (pid < 0 || !tcp_open_at(host, *port)) {
		snprintf(err, errlen, "etcd did not start on %s:%d (see %s)", host, *port, log);
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		return -1;
	}
	return pid;
}

static pid_t etcd_start(const char *dir, int *port, char *err, size_t errlen)
{
	return etcd_start_at("127.0.0.1", dir, port, err, errlen);
}

static uint64_t peers_seen(const daemon_t *d)
{
	char err[256];
	shoal_client *c = client_of(d, err, sizeof(err));
	shoal_store_stat st = {0};
	if (c) {
		shoal_store_stat_get(c, &st);
		shoal_disconnect(c);
	}
	return st.peers;
}

static void bench_peer_loss(const sh_bench_opts *o, sh_bench_report *r)
{
	int ttl = o->quick ? 3 : 5, reps = o->quick ? 1 : 3;
	sh_bench_result *x = sh_bench_add(r, SUITE, "peer_loss", "shoal", 0);
	sh_bench_param_num(x, "lease_ttl_s", ttl);
	if (access("/usr/bin/etcd", X_OK) != 0) {
		sh_bench_skip(x, "etcd is not installed (Debian's etcd-server; make run installs "
				 "it)");
		return;
	}
	char dir[64] = "/tmp/shoal-bench-etcd-XXXXXX", err[512], meta[64], t[16];
	if (!mkdtemp(dir)) {
		sh_bench_fail(x, "mkdtemp: %s", strerror(errno));
		return;
	}
	int port;
	pid_t etcd = etcd_start(dir, &port, err, sizeof(err));
	double s[8];
	int i = 0;
	if (etcd < 0)
		sh_bench_fail(x, "%s", err);
	snprintf(meta, sizeof(meta), "etcd://127.0.0.1:%d", port);
	snprintf(t, sizeof(t), "%d", ttl);
	const char *args[] = {"--meta", meta, "--cluster", "bench", "--lease-ttl", t, NULL};
	for (; etcd > 0 && i < reps; i++) {
		daemon_t a = {0}, b = {0};
		if (daemon_start_x(&a, 64u << 20, false, args, err, sizeof(err)) ||
		    daemon_start_x(&b, 64u << 20, false, args, err, sizeof(err))) {
			sh_bench_fail(x, "%s", err);
			daemon_stop(&a);
			daemon_stop(&b);
			break;
		}
		for (int k = 0; k < 1000 && peers_seen(&b) != 2; k++)
			usleep(10000);
		/* killed: it cannot say goodbye; the lease has to expire */
		kill(a.pid, SIGKILL);
		waitpid(a.pid, NULL, 0);
		a.pid = 0;
		double t0 = sh_bench_now();
		while (peers_seen(&b) != 1 && sh_bench_now() - t0 < 3 * ttl)
			usleep(5000);
		s[i] = sh_bench_now() - t0;
		daemon_stop(&a);
		daemon_stop(&b);
		if (s[i] >= 3 * ttl) {
			sh_bench_fail(x, "the other store did not see the loss within %d s",
				      3 * ttl);
			break;
		}
	}
	if (x->status == SH_BENCH_OK && i == reps) {
		double mean, sd, mn, mx;
		sh_bench_stats(s, reps, &mean, &sd, &mn, &mx);
		sh_bench_metric_set(x, "detect_s", mean);
		sh_bench_metric_set(x, "max_s", mx);
		sh_bench_show_samples(x, s, reps, "s");
		snprintf(x->aside, sizeof(x->aside), "lease %d s: goal <= %d s", ttl, ttl + 1);
	}
	if (etcd > 0) {
		kill(etcd, SIGKILL);
		waitpid(etcd, NULL, 0);
	}
	sh_bench_rm_tree(dir);
}

/* ---- task_buffers: a farm whose client and engine are on different stores ---- */

/* The buffers sweep with the client's arguments in store a and the engine
 * on store b: every argument goes a -> b by migration, never through the
 * controller. */
/* Tasks carrying buffers from a client whose store is a to an engine whose
 * store is b. On a link (not NULL): a, the controller and the client on
 * its side 0, b and the engine on side 1, so every byte crosses it. */
static void buffers_sweep(const sh_bench_opts *o, sh_bench_report *r, bool plain, const char *meta,
			  const double *raw_by_size, const sh_bench_link *link)
{
	static const size_t sizes[] = {64u << 10, 1u << 20, 8u << 20};
	size_t nsizes = o->quick ? 2 : 3;
	char err[512], engine[PATH_MAX], lib[PATH_MAX];
	daemon_t a = {0}, b = {0};
	char tcp[40] = "127.0.0.1:0";
	if (link)
		snprintf(tcp, sizeof(tcp), "%s:0", link->addr[0]);
	const char *args[] = {"--meta", meta, "--cluster", plain ? "bench-plain" : "bench", NULL};
	uint64_t total = o->quick ? 64ull << 20 : 256ull << 20;
	shoal_controller *ctl = NULL;
	shoal_farm *f = NULL;
	pid_t epid = 0;
	shoal_vbuf *pb = NULL;
	int rc = 0;
	if (sh_bench_find_tool("shoal-engine", engine, lib, sizeof(engine)) != 0) {
		snprintf(err, sizeof(err),
			 "shoal-engine or rpc_ext.so not found beside this program");
		rc = -1;
	}
	if (rc == 0 &&
	    pair_start(&a, &b, 2 * total + (64u << 20), plain, args, link, err, sizeof(err)))
		rc = -1;
	/* both see each other (the watch) before the first task */
	for (int i = 0; rc == 0 && i < 1000 && peers_seen(&b) < 2; i++)
		usleep(10000);
	shoal_controller_opts co;
	shoal_controller_opts_init(&co);
	co.tcp = tcp;
	co.no_encrypt = plain;
	char addr[160];
	/* the controller's sockets and threads in side 0, the engine in side 1 */
	if (rc == 0 && link)
		sh_bench_link_enter(link, 0);
	if (rc == 0 && (rc = shoal_controller_open(&ctl, &co)) != 0)
		snprintf(err, sizeof(err), "controller: %s", shoal_strerror(rc));
	if (rc == 0) {
		snprintf(addr, sizeof(addr), "tcp://%s%s", shoal_controller_tcp(ctl),
			 plain ? "?encrypt=false" : "");
		if (link)
			sh_bench_link_enter(link, 1);
		if ((rc = shoal_engine_spawn_store(addr, lib, engine, b.sock, &epid)) != 0)
			snprintf(err, sizeof(err), "engine: %s", shoal_strerror(rc));
	}
	if (link)
		sh_bench_link_enter(link, -1);
	shoal_controller_stat cs = {0};
	for (int i = 0; rc == 0 && i < 1000 && cs.engines < 1; i++) {
		shoal_controller_stat_get(ctl, &cs);
		usleep(10000);
	}
	if (rc == 0 && link)
		sh_bench_link_enter(link, 0);
	if (rc == 0 && (rc = shoal_farm_connect(&f, addr)) != 0)
		snprintf(err, sizeof(err), "client: %s", shoal_strerror(rc));
	if (link)
		sh_bench_link_enter(link, -1);
	if (rc == 0 && (rc = shoal_farm_use_store(f, a.sock)) != 0)
		snprintf(err, sizeof(err), "use_store: %s", shoal_farm_error(f));
	if (rc == 0 && (rc = shoal_vbuf_create(&pb)) != 0)
		snprintf(err, sizeof(err), "out of memory");
	for (size_t k = 0; k < nsizes; k++) {
		size_t size = sizes[k];
		uint64_t n = total / size;
		sh_bench_result *x = sh_bench_add(r, SUITE, "task_buffers", "shoal", 0);
		sh_bench_param_num(x, "bytes", (double)size);
		sh_bench_param_bool(x, "encrypted", !plain);
		sh_bench_param_str(x, "link", link ? link->name : "loopback");
		if (rc) {
			sh_bench_fail(x, "%s", err);
			continue;
		}
		shoal_vbuf_reset(pb);
		unsigned char *mem = malloc(size);
		if (mem)
			memset(mem, 3, size);
		shoal_value *payload = mem ? shoal_v_bytes(pb, mem, size) : NULL;
		free(mem);
		double best = 0, mb_s[3];
		int frc = payload ? 0 : SHOAL_ENOMEM;
		shoal_vbuf *out = NULL;
		if (frc == 0)
			frc = shoal_vbuf_create(&out);
		for (int i = 0; i < 3 && frc == 0; i++) {
			double sent, t;
			if ((frc = sh_bench_farm_flood(f, n, payload, out, &sent, &t)) == 0) {
				mb_s[i] = (double)(n * size) / t / 1e6;
				best = i == 0 || mb_s[i] > best ? mb_s[i] : best;
			}
		}
		if (out)
			shoal_vbuf_free(out);
		if (frc) {
			sh_bench_fail(x, "%s: %s", shoal_strerror(frc), shoal_farm_error(f));
			continue;
		}
		sh_bench_metric_set(x, "mb_s", best);
		sh_bench_metric_set(x, "tasks", (double)n);
		double raw = raw_by_size ? raw_by_size[k] : 0;
		if (raw > 0) {
			sh_bench_metric_set(x, "ratio_vs_raw_tcp", best / raw);
			snprintf(x->aside, sizeof(x->aside), "%.2fx raw TCP", best / raw);
		}
		sh_bench_show_samples(x, mb_s, 3, "MB/s");
	}
	shoal_controller_stat_get(ctl, &cs);
	if (rc == 0 && cs.held_peak >= (1u << 20))
		sh_bench_note(r,
			      "task_buffers: the controller held %llu bytes at once: arguments "
			      "went through it",
			      (unsigned long long)cs.held_peak);
	if (pb)
		shoal_vbuf_free(pb);
	if (f)
		shoal_farm_close(f);
	if (epid > 0) {
		kill(epid, SIGTERM);
		waitpid(epid, NULL, 0);
	}
	if (ctl)
		shoal_controller_close(ctl);
	daemon_stop(&a);
	daemon_stop(&b);
}

static void bench_task_buffers(const sh_bench_opts *o, sh_bench_report *r)
{
	if (access("/usr/bin/etcd", X_OK) != 0) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "task_buffers", "shoal", 0);
		sh_bench_skip(x, "etcd is not installed (Debian's etcd-server; make run installs "
				 "it)");
		return;
	}
	char dir[64] = "/tmp/shoal-bench-etcd-XXXXXX", err[512], meta[64];
	if (!mkdtemp(dir))
		return;
	int port;
	pid_t etcd = etcd_start(dir, &port, err, sizeof(err));
	snprintf(meta, sizeof(meta), "etcd://127.0.0.1:%d", port);
	/* raw TCP for the same bytes, the ceiling */
	static const size_t sizes[] = {64u << 10, 1u << 20, 8u << 20};
	double raw[3] = {0};
	uint64_t total = o->quick ? 64ull << 20 : 256ull << 20;
	for (size_t k = 0; k < 3; k++) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "task_buffers", "raw_tcp", 1);
		sh_bench_param_num(x, "bytes", (double)sizes[k]);
		if (raw_rate(x, NULL, total, 1) == 0)
			raw[k] = sh_bench_metric_get(x, "mb_s", 0);
	}
	if (etcd < 0) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "task_buffers", "shoal", 0);
		sh_bench_fail(x, "%s", err);
	} else {
		buffers_sweep(o, r, true, meta, raw, NULL);
		buffers_sweep(o, r, false, meta, raw, NULL);
		kill(etcd, SIGKILL);
		waitpid(etcd, NULL, 0);
	}
	sh_bench_rm_tree(dir);
}

/* ---- remote clients: a store's object got into this process ---- */

/* The dict of put_dict (one tensor of bytes) got from a by a remote
 * client (shoal_remote_get) in this process, on loopback or from side 1
 * of link: the first get into memory this process never had (remote_get_first),
 * then 3 more (remote_get), against raw TCP over that link. */
static sh_bench_result *remote_row(sh_bench_report *r, const char *test, uint64_t bytes, bool plain)
{
	sh_bench_result *x = sh_bench_add(r, SUITE, test, "shoal", 0);
	sh_bench_param_num(x, "bytes", (double)bytes);
	sh_bench_param_bool(x, "encrypted", !plain);
	sh_bench_param_str(x, "link", cur_link);
	return x;
}

static void remote_rows(sh_bench_report *r, const daemon_t *a, uint64_t bytes, bool plain,
			const sh_bench_link *link, const double raw_s[5])
{
	char err[512], addr[96];
	sh_bench_result *first = remote_row(r, "remote_get_first", bytes, plain);
	sh_bench_result *x = remote_row(r, "remote_get", bytes, plain);
	if (put_dict(a, "model", 1, bytes, err, sizeof(err)) != 0) {
		sh_bench_fail(x, "%s", err);
		return;
	}
	snprintf(addr, sizeof(addr), "%s%s", a->peer, plain ? "?encrypt=false" : "");
	shoal_remote *rc = NULL;
	if (link)
		sh_bench_link_enter(link, 1);
	int e = shoal_remote_connect(&rc, addr, shoal_deadline_in(60 * 1000000000LL), err,
				     sizeof(err));
	if (link)
		sh_bench_link_enter(link, -1);
	double s[4];
	int i = 0;
	for (; e == 0 && i < 4; i++) {
		shoal_object *obj;
		double t0 = sh_bench_now();
		if ((e = shoal_remote_get(rc, "model", 0, shoal_deadline_in(600 * 1000000000LL),
					  &obj)) != 0) {
			snprintf(err, sizeof(err), "%s", shoal_remote_error(rc));
			break;
		}
		s[i] = sh_bench_now() - t0;
		if (shoal_object_bytes(obj) != bytes) {
			snprintf(err, sizeof(err), "got %llu bytes of %llu",
				 (unsigned long long)shoal_object_bytes(obj),
				 (unsigned long long)bytes);
			e = -1;
		}
		shoal_object_release(obj);
	}
	if (e) {
		sh_bench_fail(first, "%s", err);
		sh_bench_fail(x, "%s", err);
	} else {
		set_rate(first, s, 1, bytes);
		ratio_to_raw(first, raw_s, 1);
		set_rate(x, s + 1, 3, bytes);
		ratio_to_raw(x, raw_s, 1);
	}
	shoal_remote_close(rc);
	drop(a, "model", err, sizeof(err));
}

static void bench_remote(sh_bench_report *r, uint64_t bytes)
{
	char err[512];
	double raw_s[5] = {0};
	sh_bench_result *x = sh_bench_add(r, SUITE, "remote_get", "raw_tcp", 1);
	sh_bench_param_num(x, "bytes", (double)bytes);
	sh_bench_param_num(x, "streams", 1);
	sh_bench_param_str(x, "link", "loopback");
	if (raw_rate(x, NULL, bytes, 1) == 0)
		raw_s[1] = sh_bench_metric_get(x, "s", 0);
	for (int plain = 1; plain >= 0; plain--) {
		daemon_t a = {0};
		const char *const opt[] = {"--reserve", NULL};
		if (daemon_start_x(&a, bytes + (64u << 20), plain, opt, err, sizeof(err)) != 0)
			sh_bench_fail(remote_row(r, "remote_get", bytes, plain), "%s", err);
		else
			remote_rows(r, &a, bytes, plain, NULL, raw_s);
		daemon_stop(&a);
	}
	/* the store on side 0 of the shaped veth, this process on side 1 */
	sh_bench_link l;
	if (sh_bench_link_up(&l, err, sizeof(err)) != 0) {
		cur_link = "veth-4gbit";
		sh_bench_skip(remote_row(r, "remote_get", bytes, false), "%s", err);
		cur_link = "loopback";
		return;
	}
	x = sh_bench_add(r, SUITE, "remote_get", "raw_tcp", 1);
	sh_bench_param_num(x, "bytes", (double)bytes);
	sh_bench_param_num(x, "streams", 1);
	sh_bench_param_str(x, "link", "veth-4gbit");
	raw_s[1] = 0;
	if (sh_bench_link_shape(&l, "4gbit", err, sizeof(err)) != 0)
		sh_bench_fail(x, "%s", err);
	else if (raw_rate(x, &l, bytes, 1) == 0)
		raw_s[1] = sh_bench_metric_get(x, "s", 0);
	cur_link = l.name;
	for (int plain = 1; raw_s[1] > 0 && plain >= 0; plain--) {
		daemon_t a = {0};
		char peer[40];
		snprintf(peer, sizeof(peer), "%s:0", l.addr[0]);
		const char *const opt[] = {"--reserve", "--peer", peer, NULL};
		sh_bench_link_enter(&l, 0);
		int rc = daemon_start_x(&a, bytes + (64u << 20), plain, opt, err, sizeof(err));
		sh_bench_link_enter(&l, -1);
		if (rc)
			sh_bench_fail(remote_row(r, "remote_get", bytes, plain), "%s", err);
		else
			remote_rows(r, &a, bytes, plain, &l, raw_s);
		daemon_stop(&a);
	}
	cur_link = "loopback";
	sh_bench_link_down(&l);
}

int sh_bench_cluster(const sh_bench_opts *o, sh_bench_report *r)
{
	unsigned char rnd[16];
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -1;
	int n = snprintf(secret_env, sizeof(secret_env), "SHOAL_SECRET=");
	for (size_t i = 0; i < sizeof(rnd); i++)
		n += snprintf(secret_env + n, sizeof(secret_env) - (size_t)n, "%02x", rnd[i]);
	/* the task farm's client, engine and controller read it too */
	setenv("SHOAL_SECRET", secret_env + strlen("SHOAL_SECRET="), 1);
	uint64_t bytes = o->quick ? 512ull << 20 : 4ull << 30;
	double raw_s[5] = {0};
	static const char *const kinds[] = {"4k", "hugetlb", "thp"};
	if (sh_bench_wants(o, "migrate")) {
		bench_raw(r, bytes, raw_s);
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			bench_migrate(r, bytes, true, kinds[k], raw_s);
			bench_migrate(r, bytes, false, kinds[k], raw_s);
		}
	}
	if (sh_bench_wants(o, "link"))
		bench_link(o, r, bytes, "4gbit");
	/* a remote client's get of 1 GiB (the size; --quick 256 MiB) */
	if (sh_bench_wants(o, "remote"))
		bench_remote(r, o->quick ? 256ull << 20 : 1ull << 30);
	if (sh_bench_wants(o, "dedup"))
		bench_dedup(o, r);
	if (sh_bench_wants(o, "peer_loss"))
		bench_peer_loss(o, r);
	if (sh_bench_wants(o, "task_buffers"))
		bench_task_buffers(o, r);
	sh_bench_note(r, "migrate: a tensor_dict copied from one shoald into another, from "
			 "shoal_migrate's call to its return (connect, handshake, metadata, every "
			 "byte, the copy registered); raw_tcp: the same bytes from one process's "
			 "buffer to another's, no store at either end. encrypted=false: both "
			 "daemons with --peer-no-encrypt (records still authenticated). "
			 "migrate_first: the first copy into a store just started.");
	sh_bench_note(r, "link=loopback: 127.0.0.1, where the two cores, not a network, set the "
			 "pace; link=veth-4gbit: a veth pair between two network namespaces of "
			 "the run's own, both ends shaped with tc tbf to 4 Gbit/s, the stores and "
			 "raw TCP's ends on its two sides (raw_tcp link=veth: the same pair "
			 "unshaped, the rate the shaping stays well under). Needs root, else "
			 "skipped.");
	sh_bench_note(r, "pages: what the stores' segments live on (4k: the machine's default; "
			 "hugetlb, thp: shoald --huge-pages with the pool grown, or shmem_enabled "
			 "set to advise, for the rows and put back after; needs root, else "
			 "skipped); reserve=true: with --reserve (the capacity touched at start; "
			 "the pool's pages are touched once when it grows, as each host's store "
			 "would with --reserve).");
	sh_bench_note(r, "ratio_vs_raw_tcp: against raw TCP over as many streams as the "
			 "migration used.");
	sh_bench_note(r, "remote_get: a tensor_dict of one tensor got from a shoald (--reserve) "
			 "by a remote client in the bench's process (shoal_remote_get: connect "
			 "once, then the call's metadata and every byte received into memory of "
			 "this process), mean of 3 after remote_get_first (the first, into memory "
			 "this process never had); raw_tcp: the same bytes between two processes "
			 "in the same run. Goal: >= 0.8x raw TCP.");
	sh_bench_note(r, "peer_loss: two shoalds with --meta etcd (a fresh etcd on loopback), one "
			 "killed with SIGKILL: the time until the other's watch no longer counts "
			 "it (its lease expired in etcd).");
	sh_bench_note(r,
		      "task_buffers: tasks of a buffer (best of 3 rounds of 256 MiB, --quick "
		      "64 MiB) from a client whose store is a, through a controller on TCP, to an "
		      "engine whose store is b (both --meta etcd): each argument migrates a -> b, "
		      "the controller carries only its reference; raw_tcp: the same bytes as one "
		      "stream. link=veth-4gbit: the client, its store, the controller and etcd "
		      "on one side of the shaped veth, the engine and its store on the other, set "
		      "against raw TCP on that link.");
	sh_bench_note(r, "goals: on the shaped veth, migrate 1000 blobs >= 0.95x raw TCP in "
			 "clear and >= 0.9x encrypted, task buffers of 1 MiB and more >= 0.9x; on "
			 "loopback with huge pages and --reserve "
			 ">= 0.5x raw TCP in clear; 1000 blobs within 10%% of 1 blob; dedup: "
			 "exactly 1 transfer; peer_loss within the lease + 1 s; task_buffers of "
			 "64 KiB and more >= 0.7x raw TCP");
	return 0;
}

/* A row's figure against raw TCP, when it is shoal's migrate row of this
 * link, page kind, encryption and blob count at the default streams. */
static bool is_migrate(const sh_bench_result *x, const char *link, const char *pages,
		       const char *enc, const char *blobs)
{
	const char *l = sh_bench_param_get(x, "link"), *pg = sh_bench_param_get(x, "pages"),
		   *e = sh_bench_param_get(x, "encrypted"), *nb = sh_bench_param_get(x, "blobs"),
		   *ns = sh_bench_param_get(x, "streams");
	return !strcmp(x->test, "migrate") && l && pg && e && nb && ns &&
	       atoi(ns) == SHOAL_MIGRATE_STREAMS && !strncmp(l, link, strlen(link)) &&
	       !strcmp(pg, pages) && !strcmp(e, enc) && !strcmp(nb, blobs);
}

void sh_bench_cluster_table(FILE *f, const sh_bench_report *r)
{
	sh_bench_print_table(f, r, SUITE,
			     "shoal bench cluster: two shoalds on loopback TCP or a shaped veth, "
			     "a copy from one to the other");
	double plain1 = -1, plain1000 = -1, enc1 = -1, huge1 = -1, thp1 = -1, veth_c = -1,
	       veth_e = -1, transfers = -1, detect = -1, ttl = 0;
	double tb_min = -1, tb_veth = -1; /* the least ratio of task_buffers in clear */
	const char *veth_pages = "";
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || x->status != SH_BENCH_OK || x->baseline)
			continue;
		const char *e = sh_bench_param_get(x, "encrypted");
		double ratio = sh_bench_metric_get(x, "ratio_vs_raw_tcp", -1);
		const char *pg = sh_bench_param_get(x, "pages");
		if (is_migrate(x, "loopback", "4k", "false", "1"))
			plain1 = ratio;
		else if (is_migrate(x, "loopback", "4k", "false", "1000"))
			plain1000 = ratio;
		else if (is_migrate(x, "loopback", "4k", "true", "1"))
			enc1 = ratio;
		else if (is_migrate(x, "loopback", "hugetlb", "false", "1"))
			huge1 = ratio;
		else if (is_migrate(x, "loopback", "thp", "false", "1"))
			thp1 = ratio;
		else if (pg && is_migrate(x, "veth-", pg, "false", "1000"))
			veth_c = ratio, veth_pages = pg;
		else if (pg && is_migrate(x, "veth-", pg, "true", "1000"))
			veth_e = ratio;
		else if (!strcmp(x->test, "dedup"))
			transfers = sh_bench_metric_get(x, "transfers", -1);
		else if (!strcmp(x->test, "task_buffers") && e && !strcmp(e, "false")) {
			const char *l = sh_bench_param_get(x, "link");
			double q = sh_bench_metric_get(x, "ratio_vs_raw_tcp", -1),
			       *m = l && strncmp(l, "veth", 4) == 0 ? &tb_veth : &tb_min;
			*m = *m < 0 || q < *m ? q : *m;
		} else if (!strcmp(x->test, "peer_loss")) {
			detect = sh_bench_metric_get(x, "detect_s", -1);
			const char *t = sh_bench_param_get(x, "lease_ttl_s");
			ttl = t ? atof(t) : 0;
		}
	}
	fprintf(f, "summary:");
	const char *sep = " ";
	if (plain1 >= 0 || plain1000 >= 0 || enc1 >= 0) {
		fprintf(f,
			"%sloopback, 4 KiB pages: migrate %.2fx raw TCP in clear (1 blob), %.2fx "
			"with 1000 blobs, %.2fx encrypted",
			sep, plain1, plain1000, enc1);
		sep = "; ";
	}
	if (huge1 >= 0 || thp1 >= 0) {
		fprintf(f, "%sloopback, --huge-pages --reserve, in clear: %.2fx hugetlb, %.2fx thp",
			sep, huge1, thp1);
		sep = "; ";
	}
	if (veth_c >= 0 || veth_e >= 0) {
		fprintf(f,
			"%sshaped veth, %s pages, 1000 blobs: %.2fx raw TCP on the same link in "
			"clear, %.2fx encrypted",
			sep, veth_pages, veth_c, veth_e);
		sep = "; ";
	}
	if (transfers >= 0) {
		fprintf(f, "%s8 asks for one object: %.0f transfer(s)", sep, transfers);
		sep = "; ";
	}
	if (detect >= 0) {
		fprintf(f, "%sa killed store seen gone in %.2f s (lease %.0f s)", sep, detect, ttl);
		sep = "; ";
	}
	if (tb_min >= 0) {
		fprintf(f, "%stask buffers across stores >= %.2fx raw TCP in clear on loopback",
			sep, tb_min);
		sep = "; ";
	}
	if (tb_veth >= 0)
		fprintf(f, "%s>= %.2fx on the shaped veth", sep, tb_veth);
	fputc('\n', f);
}

/* shoal-test: threaded */
/* Tests of the object store against a real store (embedded: a server
 * thread with its own scheduler, on a real unix socket) and real client
 * processes: put and get of bytes and tensor dicts, zero-copy sharing of
 * pages between processes, kernel-enforced immutability, references and
 * deferred frees, transient objects, clients killed mid-create, capacity,
 * 100 concurrent clients, and malformed frames of every kind. */
#include "test.h"
#include "store_dict.h"

#include "store/client.h"
#include "store/proto.h"
#include "wire/wire.h"

#include <dlpack/dlpack.h>
#include <dirent.h>
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <shoal/fiber.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static shoal_store *open_store(size_t size)
{
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.size = size;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &o));
	return s;
}

/* A store in its own process (shoald of this build), for the tests that
 * fork client processes: forking while the embedded store's thread runs is
 * unsafe, since a child can inherit a lock that thread held (ASan's
 * allocator does not reset its locks at fork, and the child hangs). */
typedef struct daemon_store {
	pid_t pid;
	char dir[64], path[128];
} daemon_store;

static void daemon_open(daemon_store *d, size_t size)
{
	char sz[32];
	snprintf(d->dir, sizeof(d->dir), "/tmp/shoal-store-XXXXXX");
	CHECK(mkdtemp(d->dir) != NULL);
	snprintf(d->path, sizeof(d->path), "%s/s.sock", d->dir);
	snprintf(sz, sizeof(sz), "%zu", size ? size : (size_t)1 << 30);
	const char *args[] = {"--socket", d->path, "--size", sz, NULL};
	CHECK_OK(sh_test_shoald(args, NULL, NULL, 0, &d->pid));
}

/* Stops it with SIGTERM: it must exit 0 (and, under ASan, leak nothing). */
static void daemon_close(daemon_store *d)
{
	CHECK_EQ(kill(d->pid, SIGTERM), 0);
	int st;
	CHECK(waitpid(d->pid, &st, 0) == d->pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		sh_test_fail(__FILE__, __LINE__, "shoald: status 0x%x", st);
	rmdir(d->dir);
}

static shoal_client *connect_path(const char *path)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, path));
	return c;
}

static shoal_client *connect_to(shoal_store *s)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	return c;
}

static shoal_store_stat stat_of(shoal_client *c)
{
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	return st;
}

/* Writes through a copy-on-write view: the writer's own pages; the sealed
 * bytes stay for the object, other views and other clients. */
static void cow_writes(shoal_client *c, shoal_client *other, const char *name, size_t size)
{
	shoal_object *o, *v, *w;
	CHECK_OK(shoal_get_by_name(c, name, &o));
	CHECK_OK(shoal_object_cow(o, &v));
	CHECK_OK(shoal_object_cow(v, &w)); /* a view of a view: one of the object */
	const void *po, *pv, *pw;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &po, &n));
	CHECK_OK(shoal_node_blob(shoal_object_root(v), 0, &pv, &n));
	CHECK_OK(shoal_node_blob(shoal_object_root(w), 0, &pw, &n));
	CHECK_EQ(n, size);
	CHECK(pv != po && pw != pv);
	CHECK(memcmp(pv, po, size) == 0);
	memset((void *)pv, 0x5a, size);
	((unsigned char *)pw)[size - 1] ^= 1;
	const unsigned char *bo = po, *bv = pv, *bw = pw;
	for (size_t i = 0; i < size; i++) {
		CHECK_EQ(bo[i], (unsigned char)(i * 7));
		CHECK_EQ(bv[i], 0x5a);
		CHECK_EQ(bw[i], (unsigned char)(i * 7 ^ (i == size - 1)));
	}
	/* released in any order; another client reads the sealed bytes */
	CHECK_OK(shoal_object_release(o));
	shoal_object *x;
	CHECK_OK(shoal_get_by_name(other, name, &x));
	CHECK_OK(shoal_node_blob(shoal_object_root(x), 0, &po, &n));
	for (size_t i = 0; i < size; i++)
		CHECK_EQ(((const unsigned char *)po)[i], (unsigned char)(i * 7));
	CHECK_OK(shoal_object_release(x));
	CHECK_OK(shoal_object_release(v));
	CHECK_OK(shoal_object_release(w));
}

static void put_pattern(shoal_client *c, const char *name, size_t size)
{
	unsigned char *d = malloc(size);
	CHECK(d != NULL);
	for (size_t i = 0; i < size; i++)
		d[i] = (unsigned char)(i * 7);
	CHECK_OK(shoal_put_bytes(c, name, d, size, 0, NULL));
	free(d);
}

SH_TEST(a_copy_on_write_view_keeps_its_writes_its_own)
{
	shoal_store *s = open_store(64 << 20);
	shoal_client *c = connect_to(s), *other = connect_to(s);
	put_pattern(c, "big", 8 << 20); /* a segment of its own */
	put_pattern(c, "small", 100);	/* in the arena */
	cow_writes(c, other, "big", 8 << 20);
	cow_writes(c, other, "small", 100);
	/* segments whose descriptors were not kept (a client holding hundreds):
	 * the view is a copy, with the same answers */
	shoal_client *late;
	int fds[600], nfd = 0;
	while (nfd < 600 && (fds[nfd] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 &&
	       fds[nfd] < SH_CLIENT_KEEP_FD_MAX + 8)
		nfd++;
	CHECK(nfd < 600 && fds[nfd] >= SH_CLIENT_KEEP_FD_MAX);
	late = connect_to(s);
	put_pattern(c, "later", 4 << 20);
	cow_writes(late, other, "later", 4 << 20);
	for (int i = 0; i <= nfd; i++)
		close(fds[i]);
	shoal_disconnect(late);
	shoal_disconnect(other);
	shoal_disconnect(c);
	shoal_store_close(s);
}

/* A view never written leaves its mapping to the next view of the same
 * bytes (no page faulted again); a written one does not: the next view
 * reads the sealed bytes, whatever the one before wrote. */
SH_TEST(a_view_never_written_is_kept_and_a_written_one_is_not)
{
	shoal_store *s = open_store(64 << 20);
	shoal_client *c = connect_to(s);
	put_pattern(c, "big", 8 << 20);
	shoal_object *o, *v;
	const void *p1, *p2;
	size_t n;
	CHECK_OK(shoal_get_by_name(c, "big", &o));
	CHECK_OK(shoal_object_cow(o, &v));
	CHECK_OK(shoal_node_blob(shoal_object_root(v), 0, &p1, &n));
	volatile unsigned char sum = 0;
	for (size_t i = 0; i < n; i += 4096)
		sum += ((const unsigned char *)p1)[i]; /* read only */
	CHECK_OK(shoal_object_release(v));
	CHECK_EQ(c->ncow_kept, 1u);
	CHECK_OK(shoal_object_cow(o, &v));
	CHECK_OK(shoal_node_blob(shoal_object_root(v), 0, &p2, &n));
	CHECK(p2 == p1); /* the kept mapping */
	CHECK_EQ(c->ncow_kept, 0u);
	((unsigned char *)p2)[12345] ^= 0xff; /* one page written */
	CHECK_OK(shoal_object_release(v));
	CHECK_EQ(c->ncow_kept, 0u); /* not kept */
	for (int round = 0; round < 3; round++) {
		CHECK_OK(shoal_object_cow(o, &v));
		CHECK_OK(shoal_node_blob(shoal_object_root(v), 0, &p2, &n));
		for (size_t i = 0; i < n; i++)
			if (((const unsigned char *)p2)[i] != (unsigned char)(i * 7))
				sh_test_fail(__FILE__, __LINE__,
					     "round %d: byte %zu was written before", round, i);
		CHECK_OK(shoal_object_release(v));
	}
	/* the object gone from this client, its kept mappings go with its segment */
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_delete(c, "big"));
	shoal_disconnect(c);
	shoal_store_close(s);
}

SH_TEST(put_get_bytes)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	shoal_id id = 0;
	CHECK_OK(shoal_put_bytes(c, "greeting", "hello", 5, 0, &id));
	CHECK(id != 0);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "greeting", &o));
	CHECK_EQ(shoal_object_id(o), id);
	const shoal_node *r = shoal_object_root(o);
	CHECK_STR(shoal_node_type(r), "bytes");
	const void *p;
	size_t n;
	CHECK_OK(shoal_node_blob(r, 0, &p, &n));
	CHECK_EQ(n, 5);
	CHECK(memcmp(p, "hello", 5) == 0);
	CHECK_OK(shoal_object_release(o));
	/* by id too; a name is taken until deleted */
	CHECK_OK(shoal_get(c, id, &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_RC(shoal_put_bytes(c, "greeting", "x", 1, 0, NULL), SHOAL_EEXIST);
	CHECK(strstr(shoal_client_error(c), "greeting") != NULL);
	CHECK_RC(shoal_get_by_name(c, "nope", &o), SHOAL_ENOENT);
	CHECK(strstr(shoal_client_error(c), "nope") != NULL);
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.objects, 1);
	CHECK_EQ(st.names, 1);
	CHECK_EQ(st.clients, 1);
	CHECK(st.used >= 5);
	CHECK_OK(shoal_delete(c, "greeting"));
	st = stat_of(c);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.used, 0);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

static shoal_id put_dict(shoal_client *c, const char *name, int n, unsigned flags)
{
	return put_dict_of(c, name, n, 16, flags);
}

static void check_dict(const shoal_object *o, int n)
{
	const shoal_node *r = shoal_object_root(o);
	CHECK_STR(shoal_node_type(r), "tensor_dict");
	CHECK_EQ(shoal_node_nmembers(r), n);
	for (int t = 0; t < n; t++) {
		const char *nm;
		const shoal_node *m = shoal_node_member(r, (size_t)t, &nm);
		char want[64];
		snprintf(want, sizeof(want), "layers.%d.weight", t);
		CHECK_STR(nm, want);
		CHECK(shoal_node_find(r, want) == m);
		shoal_tensor tv;
		CHECK_OK(shoal_node_tensor(m, &tv));
		CHECK_EQ(tv.dtype, SHOAL_DT_F32);
		CHECK_EQ(tv.ndim, 2);
		CHECK_EQ(tv.shape[0], t % 7 + 1);
		CHECK_EQ(tv.strides[0], 16);
		CHECK_EQ((uintptr_t)tv.data % SH_STORE_BLOB_ALIGN, 0);
		const float *p = tv.data;
		for (int i = 0; i < tv.shape[0] * 16; i++)
			if (p[i] != (float)(t * 1000 + i))
				CHECK_EQ(p[i], t * 1000 + i);
	}
	CHECK(shoal_node_find(r, "layers.x") == NULL);
}

/* A client shared by threads: each thread reads its own last failure
 * (errno's way), never the other's, and a success of one does not clear
 * the other's message. */
typedef struct err_peer {
	shoal_client *c;
	pthread_barrier_t *b;
	char seen[256];
} err_peer;

static void *fails_then_reads(void *arg)
{
	err_peer *p = arg;
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(p->c, "only-in-thread-a", &o), SHOAL_ENOENT);
	pthread_barrier_wait(p->b); /* a failed */
	pthread_barrier_wait(p->b); /* b succeeded and read its own */
	snprintf(p->seen, sizeof(p->seen), "%s", shoal_client_error(p->c));
	return NULL;
}

SH_TEST(each_thread_reads_its_own_failure)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	CHECK_OK(shoal_put_bytes(c, "there", "x", 1, 0, NULL));
	pthread_barrier_t b;
	pthread_barrier_init(&b, NULL, 2);
	err_peer a = {.c = c, .b = &b};
	pthread_t t;
	CHECK_OK(pthread_create(&t, NULL, fails_then_reads, &a));
	pthread_barrier_wait(&b);
	CHECK_STR(shoal_client_error(c), ""); /* a's failure is a's */
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(c, "only-in-main", &o), SHOAL_ENOENT);
	CHECK(strstr(shoal_client_error(c), "only-in-main") != NULL);
	CHECK_OK(shoal_get_by_name(c, "there", &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_STR(shoal_client_error(c), ""); /* a success clears this thread's */
	pthread_barrier_wait(&b);
	CHECK_OK(pthread_join(t, NULL));
	CHECK(strstr(a.seen, "only-in-thread-a") != NULL);
	pthread_barrier_destroy(&b);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
}

SH_TEST(tensor_dict_round_trip)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	int n = 1100;
	shoal_id id = put_dict(c, "sd", n, 0);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "sd", &o));
	CHECK_EQ(shoal_object_id(o), id);
	check_dict(o, n);
	/* A second get of the same object maps nothing new. */
	shoal_object *o2;
	CHECK_OK(shoal_get(c, id, &o2));
	check_dict(o2, n);
	CHECK_OK(shoal_object_release(o2));

	/* DLPack: the view holds its own reference past the release. */
	DLManagedTensor *dl;
	const shoal_node *m = shoal_node_find(shoal_object_root(o), "layers.3.weight");
	CHECK_OK(shoal_node_dlpack(o, m, &dl));
	CHECK_OK(shoal_object_release(o));
	CHECK_EQ(dl->dl_tensor.ndim, 2);
	CHECK_EQ(dl->dl_tensor.shape[0], 4);
	CHECK_EQ(dl->dl_tensor.dtype.code, kDLFloat);
	CHECK_EQ(dl->dl_tensor.dtype.bits, 32);
	CHECK_EQ(((const float *)dl->dl_tensor.data)[5], 3005);
	CHECK_OK(shoal_delete(c, "sd"));
	CHECK_EQ(stat_of(c).pending_frees, 1); /* the view still holds it */
	CHECK_EQ(((const float *)dl->dl_tensor.data)[6], 3006);
	dl->deleter(dl);
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.pending_frees, 0);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.used, 0);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

SH_TEST(fields_and_members)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "run", &b));
	shoal_node *r = shoal_builder_root(b), *m;
	CHECK_OK(shoal_node_set_int(r, "epoch", -3));
	CHECK_OK(shoal_node_set_float(r, "lr", 0.5));
	CHECK_OK(shoal_node_set_bool(r, "done", true));
	CHECK_OK(shoal_node_set_str(r, "who", "ann", 3));
	CHECK_OK(shoal_node_set_int(r, "epoch", 7)); /* replaces */
	CHECK_OK(shoal_node_add_member(r, "cfg", "config", &m));
	CHECK_OK(shoal_node_set_str(m, "mode", "fast", 4));
	int64_t v[3] = {1, -2, 3};
	CHECK_OK(shoal_node_set_ints(m, "dims", v, 3));
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, NULL, 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	const shoal_node *g = shoal_object_root(o);
	int64_t i;
	double f;
	bool t;
	const char *str;
	size_t len;
	CHECK_OK(shoal_node_get_int(g, "epoch", &i));
	CHECK_EQ(i, 7);
	CHECK_OK(shoal_node_get_float(g, "lr", &f));
	CHECK(f == 0.5);
	CHECK_OK(shoal_node_get_bool(g, "done", &t));
	CHECK(t);
	CHECK_OK(shoal_node_get_str(g, "who", &str, &len));
	CHECK_STR(str, "ann");
	CHECK_RC(shoal_node_get_int(g, "who", &i), SHOAL_EINVAL);
	CHECK_RC(shoal_node_get_int(g, "none", &i), SHOAL_ENOENT);
	const shoal_node *cm = shoal_node_find(g, "cfg");
	CHECK(cm != NULL);
	CHECK_STR(shoal_node_type(cm), "config");
	int64_t got[3];
	size_t cnt;
	CHECK_OK(shoal_node_get_ints(cm, "dims", got, 3, &cnt));
	CHECK_EQ(cnt, 3);
	CHECK_EQ(got[1], -2);
	CHECK_RC(shoal_node_get_ints(cm, "dims", got, 2, &cnt), SHOAL_ERANGE);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

/* Rss and Pss (KiB) of a process's mappings of store segments, from
 * /proc/PID/smaps: only those pages, whatever else a sanitizer maps. */
static void segment_rss_pss(pid_t pid, long *rss, long *pss)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	bool in = false;
	long v;
	*rss = *pss = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = strstr(line, "memfd:shoal-segment") != NULL;
		else if (in && sscanf(line, "Rss: %ld kB", &v) == 1)
			*rss += v;
		else if (in && sscanf(line, "Pss: %ld kB", &v) == 1)
			*pss += v;
	}
	fclose(f);
}

/* A child that maps the object by name, reads every page, reports on
 * ready_fd and waits for a byte on go_fd before it exits. */
static pid_t spawn_reader(const char *sock, const char *name, int *ready_rd, int *go_wr)
{
	int r[2], g[2];
	CHECK(pipe(r) == 0 && pipe(g) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(r[0]);
		close(g[1]);
		shoal_client *c;
		shoal_object *o;
		if (shoal_connect(&c, sock) != 0 || shoal_get_by_name(c, name, &o) != 0)
			_exit(2);
		const void *p;
		size_t n;
		shoal_node_blob(shoal_object_root(o), 0, &p, &n);
		volatile unsigned long sum = 0;
		for (size_t i = 0; i < n; i += 4096)
			sum += ((const unsigned char *)p)[i];
		char x = (char)sum;
		if (write(r[1], &x, 1) != 1 || read(g[0], &x, 1) < 0)
			_exit(3);
		shoal_object_release(o);
		shoal_disconnect(c);
		_exit(0);
	}
	close(r[1]);
	close(g[0]);
	*ready_rd = r[0];
	*go_wr = g[1];
	return pid;
}

static void wait_ok(pid_t pid)
{
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		sh_test_fail(__FILE__, __LINE__, "child %d: status 0x%x", (int)pid, st);
}

SH_TEST(readers_share_pages)
{
	daemon_store d;
	daemon_open(&d, 256u << 20);
	shoal_client *c = connect_path(d.path);
	size_t size = 64u << 20;
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	void *p;
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), size, &p));
	memset(p, 0x5a, size);
	CHECK_OK(shoal_builder_seal(b, "big", 0, NULL));
	enum { N = 2 };
	pid_t pid[N];
	int rd[N], wr[N];
	char x;
	for (int i = 0; i < N; i++)
		pid[i] = spawn_reader(d.path, "big", &rd[i], &wr[i]);
	for (int i = 0; i < N; i++)
		CHECK_EQ(read(rd[i], &x, 1), 1);
	/* Each reader has all 64 MiB resident, shared: each is charged half. */
	for (int i = 0; i < N; i++) {
		long rss, pss;
		segment_rss_pss(pid[i], &rss, &pss);
		if (rss < (long)(size / 1024) || pss > rss / N + 1024)
			sh_test_fail(
				__FILE__, __LINE__,
				"reader %d: segment Rss %ld KiB, Pss %ld KiB; expected Rss %zu, "
				"Pss about %zu",
				i, rss, pss, size / 1024, size / 1024 / N);
	}
	for (int i = 0; i < N; i++) {
		CHECK_EQ(write(wr[i], "x", 1), 1);
		wait_ok(pid[i]);
		close(rd[i]);
		close(wr[i]);
	}
	CHECK_OK(shoal_disconnect(c));
	daemon_close(&d);
}

/* The writable path to a mapped segment that only root has: the file
 * behind a mapping, through /proc/self/map_files. */
static int open_mapping(const void *p, int flags)
{
	char path[128];
	sh_test_mapping_of(p, path, sizeof(path), NULL, 0);
	return open(path, flags);
}

SH_TEST(sealed_blobs_are_immutable)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	size_t size = 1u << 20;
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	unsigned char *w;
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), size, (void **)&w));
	memset(w, 1, size);
	/* A second writable mapping kept by the creator blocks the seal. */
	int wfd = open_mapping(w, O_RDWR);
	void *extra = NULL;
	if (wfd >= 0) {
		extra = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0);
		CHECK(extra != MAP_FAILED);
		shoal_builder *b2 = b;
		CHECK_RC(shoal_builder_seal(b2, "blocked", 0, NULL), SHOAL_EBUSY);
		if (!strstr(shoal_client_error(c), "mapped writable"))
			sh_test_fail(__FILE__, __LINE__, "message: %s", shoal_client_error(c));
		munmap(extra, size);
		CHECK_EQ(stat_of(c).used, 0); /* the failed seal dropped the region */
		CHECK_OK(shoal_builder_create(c, "bytes", &b));
		CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), size, (void **)&w));
		memset(w, 1, size);
		close(wfd);
	}
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, "sealed", 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	const void *p;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &p, &n));
	/* The reader's mapping cannot be made writable ... */
	void *page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
	CHECK(mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0);
	/* ... nor can the file be written or mapped writable, even by root. */
	int fd = open_mapping(p, O_RDWR);
	if (fd >= 0) {
		CHECK(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
		CHECK(pwrite(fd, "x", 1, 0) < 0 && errno == EPERM);
		CHECK(ftruncate(fd, 0) != 0);
		close(fd);
	}
	CHECK_EQ(((const unsigned char *)p)[0], 1);
	/* Small blobs live in the arena, which clients map read-only. */
	shoal_id small;
	CHECK_OK(shoal_put_bytes(c, NULL, "abc", 3, 0, &small));
	shoal_object *so;
	CHECK_OK(shoal_get(c, small, &so));
	CHECK_OK(shoal_node_blob(shoal_object_root(so), 0, &p, &n));
	page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
	CHECK(mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0);
	CHECK_OK(shoal_object_release(so));
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
}

SH_TEST(delete_while_mapped)
{
	shoal_store *s = open_store(0);
	shoal_client *a = connect_to(s), *b = connect_to(s);
	size_t size = 1u << 20;
	shoal_builder *bl;
	CHECK_OK(shoal_builder_create(a, "bytes", &bl));
	unsigned char *w;
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(bl), size, (void **)&w));
	memset(w, 7, size);
	CHECK_OK(shoal_builder_seal(bl, "obj", SHOAL_PERSIST, NULL));
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(b, "obj", &o));
	const void *p;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &p, &n));
	CHECK_OK(shoal_delete(a, "obj"));
	/* gone by name, still readable by the reader, not freed yet */
	shoal_object *o2;
	CHECK_RC(shoal_get_by_name(a, "obj", &o2), SHOAL_ENOENT);
	CHECK_RC(shoal_get(a, shoal_object_id(o), &o2), SHOAL_ENOENT);
	shoal_store_stat st = stat_of(a);
	CHECK_EQ(st.pending_frees, 1);
	CHECK_EQ(st.names, 0);
	CHECK(st.used >= size);
	CHECK_EQ(((const unsigned char *)p)[size - 1], 7);
	CHECK_OK(shoal_object_release(o));
	/* The release is b's (and goes without a reply): ask on b, behind it. */
	st = stat_of(b);
	CHECK_EQ(st.pending_frees, 0);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.used, 0);
	/* A reader whose connection ends lets go too (a killed one: in
	 * transient_and_persistent). */
	CHECK_OK(shoal_put_bytes(a, "obj2", "x", 1, SHOAL_PERSIST, NULL));
	CHECK_OK(shoal_get_by_name(b, "obj2", &o));
	CHECK_OK(shoal_delete(a, "obj2"));
	CHECK_EQ(stat_of(a).pending_frees, 1);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(b));
	for (int i = 0; i < 5000 && stat_of(a).objects != 0; i++)
		usleep(1000); /* b's end is seen by the store in its own time */
	CHECK_EQ(stat_of(a).objects, 0);
	CHECK_OK(shoal_disconnect(a));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

static int count_entry(const shoal_entry *e, void *ctx)
{
	(void)e;
	(*(int *)ctx)++;
	return 0;
}

/* Polls the store until pred holds of its stat, for up to 10 s. */
#define WAIT_STAT(c, st, pred)                                                            \
	do {                                                                              \
		int64_t end_ = shoal_deadline_in(10000 * MS);                             \
		for (;;) {                                                                \
			st = stat_of(c);                                                  \
			if (pred)                                                         \
				break;                                                    \
			if (shoal_now_ns() > end_)                                        \
				sh_test_fail(__FILE__, __LINE__, "timed out: %s", #pred); \
			shoal_sleep_until(shoal_deadline_in(2 * MS));                     \
		}                                                                         \
	} while (0)

SH_TEST(transient_and_persistent)
{
	daemon_store d;
	daemon_open(&d, 0);
	shoal_client *c = connect_path(d.path);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		shoal_client *k;
		if (shoal_connect(&k, d.path) != 0 ||
		    shoal_put_bytes(k, "transient", "t", 1, 0, NULL) != 0 ||
		    put_dict(k, "kept", 10, SHOAL_PERSIST) == 0)
			_exit(2);
		shoal_id id;
		if (shoal_put_bytes(k, "later", "l", 1, 0, &id) != 0 || shoal_persist(k, id) != 0)
			_exit(3);
		shoal_object *o;
		if (shoal_get_by_name(k, "transient", &o) != 0)
			_exit(4);
		_exit(0); /* dies holding a reference: the store lets go */
	}
	wait_ok(pid);
	shoal_store_stat st;
	WAIT_STAT(c, st, st.clients == 1);
	CHECK_EQ(st.objects, 2);
	CHECK_EQ(st.names, 2);
	CHECK_EQ(st.pending_frees, 0);
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(c, "transient", &o), SHOAL_ENOENT);
	CHECK_OK(shoal_get_by_name(c, "kept", &o));
	check_dict(o, 10);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_get_by_name(c, "later", &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(c));
	daemon_close(&d);
}

/* An object sealed for another connection is that one's: it outlives
 * its maker and goes with its owner. */
SH_TEST(objects_made_for_an_owner)
{
	daemon_store d;
	daemon_open(&d, 0);
	shoal_client *owner = connect_path(d.path), *watch = connect_path(d.path);
	uint64_t token, again;
	CHECK_OK(shoal_claim(owner, &token));
	CHECK_OK(shoal_claim(owner, &again));
	CHECK_EQ(again, token);
	int pipefd[2];
	CHECK(pipe(pipefd) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* the maker: a large blob (a segment) and a small one (the arena) */
		shoal_client *k;
		shoal_builder *b;
		void *p;
		shoal_id ids[2];
		if (shoal_connect(&k, d.path) != 0)
			_exit(2);
		for (int i = 0; i < 2; i++) {
			size_t n = i ? 100 : (size_t)1 << 20;
			if (shoal_builder_create(k, "bytes", &b) ||
			    shoal_node_add_blob(shoal_builder_root(b), n, &p))
				_exit(3);
			memset(p, 'a' + i, n);
			if (shoal_builder_seal_for(b, token, &ids[i]) != 0)
				_exit(4);
		}
		if (shoal_builder_create(k, "bytes", &b) ||
		    shoal_builder_seal_for(b, token ^ 1, &ids[0]) != SHOAL_ENOENT)
			_exit(5);
		if (write(pipefd[1], ids, sizeof(ids)) != sizeof(ids))
			_exit(6);
		_exit(0); /* the maker goes: what it made for the owner stays */
	}
	close(pipefd[1]);
	shoal_id ids[2];
	CHECK(read(pipefd[0], ids, sizeof(ids)) == sizeof(ids));
	close(pipefd[0]);
	wait_ok(pid);
	shoal_store_stat st;
	WAIT_STAT(watch, st, st.clients == 2);
	CHECK_EQ(st.objects, 2);
	for (int i = 0; i < 2; i++) {
		shoal_object *o;
		CHECK_OK(shoal_get(owner, ids[i], &o));
		const void *data;
		size_t n;
		CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &data, &n));
		CHECK_EQ(n, i ? 100u : 1u << 20);
		CHECK_EQ(((const char *)data)[n - 1], 'a' + i);
		CHECK_OK(shoal_object_release(o));
	}
	/* the owner goes: so does what was made for it */
	CHECK_OK(shoal_disconnect(owner));
	WAIT_STAT(watch, st, st.clients == 1 && st.objects == 0);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.used, 0);
	CHECK_OK(shoal_disconnect(watch));
	daemon_close(&d);
}

SH_TEST(killed_mid_create_leaves_nothing)
{
	daemon_store d;
	daemon_open(&d, 64u << 20);
	shoal_client *c = connect_path(d.path);
	int r[2];
	CHECK(pipe(r) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		shoal_client *k;
		shoal_builder *b;
		void *p;
		if (shoal_connect(&k, d.path) != 0 ||
		    shoal_builder_create(k, "tensor_dict", &b) != 0 ||
		    shoal_builder_reserve(b, 16u << 20) != 0)
			_exit(2);
		shoal_node *m;
		int64_t shape[1] = {1 << 20};
		if (shoal_node_add_member(shoal_builder_root(b), "w", "tensor", &m) != 0 ||
		    shoal_node_set_tensor(m, SHOAL_DT_F32, 1, shape, &p) != 0)
			_exit(3);
		memset(p, 1, 4u << 20);
		if (shoal_put_bytes(k, "done-before", "x", 1, 0, NULL) != 0)
			_exit(4);
		if (write(r[1], "x", 1) != 1)
			_exit(5);
		pause();
		_exit(6);
	}
	char x;
	CHECK_EQ(read(r[0], &x, 1), 1);
	shoal_store_stat st = stat_of(c);
	CHECK(st.used >= 16u << 20);
	CHECK_EQ(st.objects, 1);
	CHECK_EQ(kill(pid, SIGKILL), 0);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	WAIT_STAT(c, st, st.clients == 1);
	CHECK_EQ(st.used, 0);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.names, 0);
	close(r[0]);
	close(r[1]);
	CHECK_OK(shoal_disconnect(c));
	daemon_close(&d);
}

SH_TEST(capacity_is_a_hard_limit)
{
	shoal_store *s = open_store(8u << 20);
	shoal_client *c = connect_to(s);
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	CHECK_RC(shoal_builder_reserve(b, 16u << 20), SHOAL_ENOSPC);
	const char *msg = shoal_client_error(c);
	if (!strstr(msg, "asked 16777216") || !strstr(msg, "of 8388608 free"))
		sh_test_fail(__FILE__, __LINE__, "message: %s", msg);
	shoal_builder_abort(b);
	/* fill it up with 1 MiB objects, then one more fails, then frees */
	int made = 0;
	char name[32];
	for (;; made++) {
		CHECK(made <= 8);
		CHECK_OK(shoal_builder_create(c, "bytes", &b));
		void *p;
		snprintf(name, sizeof(name), "o%d", made);
		int rc = shoal_node_add_blob(shoal_builder_root(b), 1u << 20, &p);
		if (rc == SHOAL_ENOSPC) {
			shoal_builder_abort(b);
			break;
		}
		CHECK_OK(rc);
		CHECK_OK(shoal_builder_seal(b, name, 0, NULL));
	}
	CHECK(made >= 7);
	shoal_store_stat st = stat_of(c);
	CHECK(st.used <= st.capacity);
	if (st.used == st.capacity)
		CHECK_RC(shoal_put_bytes(c, "tiny", "x", 1, 0, NULL), SHOAL_ENOSPC);
	CHECK_OK(shoal_delete(c, "o0"));
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	void *p;
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), 1u << 20, &p));
	CHECK_OK(shoal_builder_seal(b, "o0", 0, NULL));
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

/* Reads want bytes from fd (a client's "done" each), or fails by 60 s. */
static void await_bytes(int fd, int want, const char *what)
{
	int64_t give_up = shoal_deadline_in(60000 * MS);
	char buf[128];
	for (int got = 0; got < want;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)((give_up - shoal_now_ns()) / MS);
		if (left <= 0 || poll(&p, 1, left) != 1)
			sh_test_fail(__FILE__, __LINE__, "%d of %d clients %s in 60 s", got, want,
				     what);
		ssize_t n = read(fd, buf,
				 sizeof(buf) < (size_t)(want - got) ? sizeof(buf)
								    : (size_t)(want - got));
		if (n <= 0)
			sh_test_fail(__FILE__, __LINE__, "%d of %d clients %s (then %s)", got, want,
				     what, n ? strerror(errno) : "all gone");
		got += (int)n;
	}
}

/* 100 client processes each put an object, then (once all have) read 20
 * of the others' and check their bytes: every read must succeed, 2000 in
 * all; they stay connected until all have read (their objects are
 * transient: they go with them), then go, and nothing is left. */
SH_TEST_T(hundred_clients, 120)
{
	daemon_store d;
	daemon_open(&d, 256u << 20);
	shoal_client *c = connect_path(d.path);
	enum { N = 100, ROUNDS = 20 };
	/* done: each child writes a byte per phase; go[k]: closed by us to
	 * start phase k in every child at once */
	int done[2], go[2][2];
	CHECK(pipe(done) == 0 && pipe(go[0]) == 0 && pipe(go[1]) == 0);
	pid_t pid[N];
	for (int i = 0; i < N; i++) {
		pid[i] = fork();
		CHECK(pid[i] >= 0);
		if (pid[i] == 0) {
			close(done[0]);
			close(go[0][1]);
			close(go[1][1]);
			char x;
			shoal_client *k;
			if (shoal_connect(&k, d.path) != 0)
				_exit(2);
			char name[32], want[32];
			snprintf(name, sizeof(name), "c%d", i);
			if (shoal_put_bytes(k, name, name, strlen(name), 0, NULL) != 0)
				_exit(3);
			if (write(done[1], "p", 1) != 1 || read(go[0][0], &x, 1) != 0)
				_exit(8);
			for (int r = 0; r < ROUNDS; r++) {
				/* someone else's object: there, as all have put theirs */
				int j = (i + 1 + (i * 7 + r * 13) % (N - 1)) % N;
				snprintf(want, sizeof(want), "c%d", j);
				shoal_object *o;
				int rc = shoal_get_by_name(k, want, &o);
				if (rc != 0) {
					fprintf(stderr, "client %d: get %s: %s\n", i, want,
						shoal_strerror(rc));
					_exit(4);
				}
				const void *p;
				size_t n;
				if (shoal_node_blob(shoal_object_root(o), 0, &p, &n) != 0 ||
				    n != strlen(want) || memcmp(p, want, n) != 0)
					_exit(5);
				shoal_object_release(o);
			}
			shoal_store_stat st;
			if (shoal_store_stat_get(k, &st) != 0 || st.clients != N + 1 ||
			    st.objects != N)
				_exit(6);
			if (write(done[1], "r", 1) != 1 || read(go[1][0], &x, 1) != 0)
				_exit(8);
			_exit(shoal_disconnect(k) == 0 ? 0 : 7);
		}
	}
	close(done[1]);
	close(go[0][0]);
	close(go[1][0]);
	await_bytes(done[0], N, "put their object");
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.objects, N);
	CHECK_EQ(st.clients, N + 1);
	close(go[0][1]);
	await_bytes(done[0], N, "read the others' objects");
	close(go[1][1]);
	for (int i = 0; i < N; i++)
		wait_ok(pid[i]); /* each read all ROUNDS objects it asked for */
	close(done[0]);
	WAIT_STAT(c, st, st.clients == 1);
	CHECK_EQ(st.objects, 0); /* all transient: gone with their creators */
	CHECK_EQ(st.used, 0);
	CHECK_OK(shoal_disconnect(c));
	daemon_close(&d);
}

/* Sends raw bytes as one request record and returns the reply's status,
 * checking that a failure comes with a message. */
static int raw(shoal_client *c, const void *buf, size_t len)
{
	CHECK_OK(sh_ring_write(&c->l.up, buf, len, shoal_deadline_in(5000 * MS)));
	const void *rec;
	size_t n;
	CHECK_OK(sh_ring_peek(&c->l.down, &rec, &n, shoal_deadline_in(5000 * MS)));
	sh_frame f;
	char why[160];
	CHECK_OK(sh_frame_decode(rec, n, &f, why, sizeof(why)));
	if (f.status != 0) {
		sh_mp m;
		uint32_t k, ml;
		const char *msg;
		sh_mp_init(&m, (const unsigned char *)rec + SH_FRAME_HDR, f.body_len);
		CHECK(sh_mp_array(&m, &k) == 0 && k == 1 && sh_mp_str(&m, &msg, &ml) == 0 &&
		      ml > 0);
	}
	sh_ring_release(&c->l.down);
	return f.status;
}

/* A request of op with the given msgpack body bytes. */
static int raw_op(shoal_client *c, uint16_t op, const void *body, size_t len)
{
	unsigned char buf[SH_FRAME_HDR + 256];
	CHECK(len <= 256);
	sh_frame f = {.op = op, .seq = 77, .body_len = (uint32_t)len};
	sh_frame_encode(&f, buf);
	memcpy(buf + SH_FRAME_HDR, body, len);
	return raw(c, buf, SH_FRAME_HDR + len);
}

/* A SEAL whose node the caller packs. */
static int raw_seal(shoal_client *c, void (*pack_node)(msgpack_packer *pk, void *ctx), void *ctx)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_nil(&pk);
	msgpack_pack_uint32(&pk, 0);
	pack_node(&pk, ctx);
	sh_frame f = {.op = SH_OP_SEAL, .seq = 78};
	CHECK_OK(sh_wbuf_frame_end(&w, &f));
	int rc = raw(c, w.p, w.len);
	sh_wbuf_fini(&w);
	return rc;
}

static void node_head(msgpack_packer *pk, const char *type, int nfields)
{
	msgpack_pack_array(pk, 4);
	sh_mp_pack_cstr(pk, type);
	msgpack_pack_map(pk, (size_t)nfields);
}

static void bad_seg_ref(msgpack_packer *pk, void *ctx)
{
	uint64_t *ref = ctx; /* segment, offset, size */
	node_head(pk, "bytes", 0);
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 3);
	msgpack_pack_uint64(pk, ref[0]);
	msgpack_pack_uint64(pk, ref[1]);
	msgpack_pack_uint64(pk, ref[2]);
	msgpack_pack_array(pk, 0);
}

static void bad_tensor(msgpack_packer *pk, void *ctx)
{
	int kind = *(int *)ctx;
	node_head(pk, "tensor", 2);
	sh_mp_pack_cstr(pk, "dtype");
	sh_mp_pack_cstr(pk, kind == 0 ? "F33" : "F32");
	sh_mp_pack_cstr(pk, kind == 2 ? "dtype" : "shape"); /* 2: a key twice */
	msgpack_pack_array(pk, 2);
	msgpack_pack_int64(pk, kind == 3 ? -1 : 2);
	msgpack_pack_int64(pk, 3);
	msgpack_pack_array(pk, 1);
	msgpack_pack_bin(pk, 8); /* 2x3 F32 needs 24 bytes */
	msgpack_pack_bin_body(pk, "01234567", 8);
	msgpack_pack_array(pk, 0);
}

static void dup_members(msgpack_packer *pk, void *ctx)
{
	int depth = *(int *)ctx;
	node_head(pk, "x", 0);
	msgpack_pack_array(pk, 0);
	if (depth > 0) {
		msgpack_pack_array(pk, 1);
		msgpack_pack_array(pk, 2);
		sh_mp_pack_cstr(pk, "m");
		int d = depth - 1;
		dup_members(pk, &d);
		return;
	}
	msgpack_pack_array(pk, 2);
	for (int i = 0; i < 2; i++) {
		msgpack_pack_array(pk, 2);
		sh_mp_pack_cstr(pk, "same");
		node_head(pk, "y", 0);
		msgpack_pack_array(pk, 0);
		msgpack_pack_array(pk, 0);
	}
}

static void huge_inline(msgpack_packer *pk, void *ctx)
{
	static char big[SH_STORE_INLINE_MAX + 1];
	(void)ctx;
	node_head(pk, "bytes", 0);
	msgpack_pack_array(pk, 1);
	msgpack_pack_bin(pk, sizeof(big));
	msgpack_pack_bin_body(pk, big, sizeof(big));
	msgpack_pack_array(pk, 0);
}

SH_TEST(malformed_frames_get_errors)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	/* headers */
	unsigned char hdr[SH_FRAME_HDR + 1];
	sh_frame f = {.op = SH_OP_STAT, .seq = 5, .body_len = 1};
	sh_frame_encode(&f, hdr);
	hdr[SH_FRAME_HDR] = 0x90;	    /* [] */
	CHECK_OK(raw(c, hdr, sizeof(hdr))); /* the well-formed one */
	CHECK_RC(raw(c, hdr, 3), SHOAL_EBADMSG);
	unsigned char bad[sizeof(hdr)];
	struct {
		int off;
		unsigned char v;
	} flips[] = {{0, 'X'},
		     {4, 9},
		     {8, 0x80},
		     {10, 1},
		     {16, 5},
		     /* a body shorter than what follows (a longer one is a
		      * message in several records: the store waits for them) */
		     {20, 0}};
	for (size_t i = 0; i < SH_ARRAY_LEN(flips); i++) {
		memcpy(bad, hdr, sizeof(hdr));
		bad[flips[i].off] = flips[i].v;
		CHECK_RC(raw(c, bad, sizeof(bad)), SHOAL_EBADMSG);
	}
	CHECK_RC(raw_op(c, 0, "\x90", 1), SHOAL_EBADMSG);
	CHECK_RC(raw_op(c, 99, "\x90", 1), SHOAL_EBADMSG);
	/* every op with bodies that are not what it expects */
	static const struct {
		const char *b;
		size_t n;
	} bodies[] = {
		{"", 0},
		{"\xc1", 1},			 /* never used */
		{"\x90", 1},			 /* [] */
		{"\xdd\xff\xff\xff\xff", 5},	 /* array of 2^32-1, nothing after */
		{"\xdf\x7f\xff\xff\xff\x01", 6}, /* map of 2^31-1 */
		{"\x91\xdb\xff\xff\xff\xff", 6}, /* [str of 2^32-1] */
		{"\x91\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 10}, /* [2^64-1] */
		{"\x91\xd0\x80", 3},				  /* [-128] */
		{"\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
		 "\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x90",
		 36},						   /* nested 35 deep */
		{"\x93\xc0\x00\x94\xa1t\x80\x90\x90\x00", 10},	   /* trailing byte */
		{"\x93\xc0\x09\x94\xa1t\x80\x90\x90", 9},	   /* unknown flag */
		{"\x93\xa2\x61\x00\x00\x94\xa1t\x80\x90\x90", 11}, /* name with NUL */
		{"\x93\xc0\x00\x94\xa0\x80\x90\x90", 8},	   /* empty type */
		{"\x92\x91\x05\x90", 4},			   /* RELEASE of what is not held */
		{"\x94\xc0\x00\x94\xa1t\x80\x90\x90\x00", 10},	   /* SEAL for owner 0 */
		{"\x94\xc0\x00\x94\xa1t\x80\x90\x90\x07", 10},	   /* for an unclaimed one */
		{"\x91\x00", 2},				   /* id 0 */
	};
	for (uint16_t op = 1; op < SH_OP_MAX_; op++) {
		for (size_t i = 0; i < SH_ARRAY_LEN(bodies); i++) {
			int rc = raw_op(c, op, bodies[i].b, bodies[i].n);
			/* STAT [] and CLAIM [] */
			bool valid = (op == SH_OP_STAT || op == SH_OP_CLAIM) && i == 2;
			if ((rc == 0) != valid)
				sh_test_fail(__FILE__, __LINE__, "op %u body %zu: status %d", op, i,
					     rc);
		}
	}
	/* seal requests that are well-formed msgpack but wrong */
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	CHECK_OK(shoal_builder_reserve(b, 4096)); /* a real region, segment 1 */
	uint64_t refs[][3] = {{999, 0, 8}, {1, 4000, 200}, {1, UINT64_MAX, 2}};
	for (size_t i = 0; i < SH_ARRAY_LEN(refs); i++)
		CHECK_RC(raw_seal(c, bad_seg_ref, refs[i]), SHOAL_EBADMSG);
	for (int k = 0; k < 4; k++)
		CHECK_RC(raw_seal(c, bad_tensor, &k), SHOAL_EBADMSG);
	int depth = 0;
	CHECK_RC(raw_seal(c, dup_members, &depth), SHOAL_EBADMSG);
	depth = 20;
	CHECK_RC(raw_seal(c, dup_members, &depth), SHOAL_EBADMSG);
	CHECK_RC(raw_seal(c, huge_inline, NULL), SHOAL_EBADMSG);
	shoal_builder_abort(b);
	/* and the store is still fine */
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.clients, 1);
	CHECK_OK(shoal_put_bytes(c, "after", "ok", 2, 0, NULL));
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "after", &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_EQ(stat_of(c).used, 64);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

static shoal_id id_of(shoal_client *c, const char *name)
{
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, name, &o));
	shoal_id id = shoal_object_id(o);
	CHECK_OK(shoal_object_release(o));
	return id;
}

SH_TEST(names_are_bound_moved_and_let_go_of_without_the_objects)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/shoal-names-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.size = 64 << 20;
	o.state_dir = dir;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &o));
	shoal_client *c = connect_to(s);
	shoal_id a, b;
	CHECK_OK(shoal_put_bytes(c, "a", "first", 5, SHOAL_PERSIST, &a));
	CHECK_OK(shoal_put_bytes(c, NULL, "second", 6, SHOAL_PERSIST, &b));
	CHECK_OK(shoal_name(c, b, "b", false));
	CHECK_EQ(id_of(c, "b"), b);
	CHECK_OK(shoal_name(c, b, "b", false)); /* the name it has: nothing to do */
	/* one name an object */
	CHECK_RC(shoal_name(c, b, "b2", false), SHOAL_EEXIST);
	CHECK(strstr(shoal_client_error(c), "named \"b\"") != NULL);
	/* let go of: the object stays */
	CHECK_OK(shoal_unname(c, "b"));
	shoal_object *x;
	CHECK_RC(shoal_get_by_name(c, "b", &x), SHOAL_ENOENT);
	CHECK_OK(shoal_get(c, b, &x));
	CHECK_OK(shoal_object_release(x));
	CHECK_RC(shoal_unname(c, "b"), SHOAL_ENOENT);
	/* a taken name moves only with replace; the object it named stays */
	CHECK_RC(shoal_name(c, b, "a", false), SHOAL_EEXIST);
	CHECK(strstr(shoal_client_error(c), "replace") != NULL);
	CHECK_OK(shoal_name(c, b, "a", true));
	CHECK_EQ(id_of(c, "a"), b);
	CHECK_OK(shoal_get(c, a, &x));
	CHECK_OK(shoal_object_release(x));
	CHECK_OK(shoal_name(c, a, "old-a", false));
	CHECK_RC(shoal_name(c, 0x1234, "x", false), SHOAL_ENOENT);
	CHECK_RC(shoal_name(c, a, "", false), SHOAL_EINVAL);
	/* malformed NAME bodies get errors, not a crash */
	CHECK_RC(raw_op(c, SH_OP_NAME, "\x93\x01\xa0\xc2", 4), SHOAL_EBADMSG);	/* empty name */
	CHECK_RC(raw_op(c, SH_OP_NAME, "\x93\x01\xa1x\x01", 5), SHOAL_EBADMSG); /* replace 1 */
	CHECK_RC(raw_op(c, SH_OP_NAME, "\x92\x01\xa1x", 4), SHOAL_EBADMSG);	/* 2 items */
	CHECK_RC(raw_op(c, SH_OP_GET,
			"\x92\xa1"
			"a\x07",
			4),
		 SHOAL_EBADMSG); /* flags */
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.objects, 2);
	CHECK_EQ(st.names, 2);
	/* the names are written with the persistent objects: back at start */
	shoal_disconnect(c);
	shoal_store_close(s);
	CHECK_OK(shoal_store_open_embedded(&s, &o));
	c = connect_to(s);
	CHECK_EQ(id_of(c, "a"), b);
	CHECK_EQ(id_of(c, "old-a"), a);
	CHECK_RC(shoal_get_by_name(c, "b", &x), SHOAL_ENOENT);
	shoal_disconnect(c);
	shoal_store_close(s);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
}

/* An idle client and store burn no CPU: after the spin, both sleep. */
SH_TEST(idle_burns_no_cpu)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	CHECK_OK(shoal_put_bytes(c, "x", "x", 1, 0, NULL));
	struct timespec t0, t1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	usleep(300000);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
	double cpu_ms =
		(double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	/* Spinning would be ~300 ms of CPU; sleeping is well under 30. */
	if (cpu_ms > 30)
		sh_test_fail(__FILE__, __LINE__, "%.1f ms of CPU in 300 ms idle", cpu_ms);
	CHECK_EQ(stat_of(c).objects, 1); /* and it still answers */
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
}

/* Only our user (or root) gets in: the socket is 0600, and behind it the
 * store checks SO_PEERCRED, so a process of another user is turned away
 * even when the file mode would let it connect. */
SH_TEST(other_users_are_refused)
{
	/* (a user without root cannot make a process of another user) */
	if (geteuid() != 0)
		SH_SKIP("needs root, to connect as uid 65534");
	daemon_store d;
	daemon_open(&d, 0);
	struct stat st;
	CHECK(stat(d.path, &st) == 0);
	CHECK_EQ(st.st_mode & 0777, 0600);
	CHECK(chmod(d.dir, 0755) == 0);
	for (int open_mode = 0; open_mode < 2; open_mode++) {
		if (open_mode)
			CHECK(chmod(d.path, 0666) == 0); /* past the file mode: SO_PEERCRED */
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0 ||
			    geteuid() != 65534)
				_exit(100);
			shoal_client *c;
			int rc = shoal_connect(&c, d.path);
			/* refused by the file mode; then by the store itself, which
			 * hangs up on it (not by failing to reach the socket) */
			bool hung_up =
				rc == SHOAL_EPIPE || rc == SHOAL_ECONNRESET || rc == SHOAL_ECLOSED;
			bool refused = rc == SHOAL_EACCES || (open_mode && hung_up);
			if (!refused)
				fprintf(stderr, "uid 65534 at a %o socket: %s\n",
					open_mode ? 0666 : 0600,
					rc ? shoal_strerror(rc) : "connected");
			_exit(refused ? 0 : 1);
		}
		int ws;
		CHECK(waitpid(pid, &ws, 0) == pid);
		if (WIFEXITED(ws) && WEXITSTATUS(ws) == 100)
			sh_test_fail(__FILE__, __LINE__, "the child could not become uid 65534");
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			sh_test_fail(__FILE__, __LINE__, "uid 65534 was not refused (status 0x%x)",
				     ws);
	}
	shoal_client *c = connect_path(d.path); /* we still get in */
	CHECK_EQ(stat_of(c).clients, 1);
	CHECK_OK(shoal_disconnect(c));
	daemon_close(&d);
}

/* Names of 4 KiB each: a listing comes back in pages that fit a reply. */
SH_TEST(long_names_list_in_pages)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	char name[4097];
	enum { N = 600 }; /* 2.4 MB of names: more than one reply */
	for (int i = 0; i < N; i++) {
		memset(name, 'a' + i % 26, 4096);
		snprintf(name, 16, "%06d", i);
		name[6] = '-';
		name[4096] = 0;
		CHECK_OK(shoal_put_bytes(c, name, "x", 1, 0, NULL));
	}
	int count = 0;
	CHECK_OK(shoal_list(c, "", count_entry, &count));
	CHECK_EQ(count, N);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
}

/* Metadata larger than a ring record: 20 000 tensors, about 2 MB of
 * names, dtypes and shapes, in a request and a reply of several records. */
SH_TEST(metadata_beyond_one_record)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	int n = 20000;
	shoal_id id = put_dict(c, "wide", n, 0);
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	check_dict(o, n);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	sh_test_leak_check();
}

/* The store's segment memfds in this process (an embedded store's and its
 * clients': each file counted once): how many of exactly size bytes with
 * all their pages there, and the sizes of all of them. */
static int segments_of(uint64_t size, uint64_t *all_bytes)
{
	DIR *d = opendir("/proc/self/fd");
	CHECK(d != NULL);
	int n = 0, nseen = 0;
	ino_t seen[256];
	uint64_t all = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char p[300], t[128];
		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(p, t, sizeof(t) - 1);
		if (k <= 0)
			continue;
		t[k] = 0;
		struct stat st;
		if (!strstr(t, "memfd:shoal-segment") || stat(p, &st) != 0)
			continue;
		bool dup = false;
		for (int i = 0; i < nseen && !dup; i++)
			dup = seen[i] == st.st_ino;
		if (dup)
			continue;
		CHECK(nseen < 256);
		seen[nseen++] = st.st_ino;
		all += (uint64_t)st.st_size;
		n += (uint64_t)st.st_size == size && (uint64_t)st.st_blocks * 512 == size;
	}
	closedir(d);
	if (all_bytes)
		*all_bytes = all;
	return n;
}

/* Waits up to 10 s for segments_of(size) to be want. */
static void await_segments(uint64_t size, int want)
{
	int got = 0;
	for (int i = 0; i < 1000 && (got = segments_of(size, NULL)) != want; i++)
		usleep(10000);
	if (got != want)
		sh_test_fail(__FILE__, __LINE__, "%d segments of %" PRIu64 " bytes, expected %d",
			     got, size, want);
}

/* After a put of 4 MiB the store allocates a spare of that size ahead;
 * the next create of that size gets it with its pages already there,
 * holding only zeros; spares give way to creates that need the capacity
 * they hold; with spares = 0 there are none. */
SH_TEST(spare_segments)
{
	const uint64_t MB4 = 4u << 20;
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = 64u << 20; /* spares: half, 32 MiB */
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &so));
	shoal_client *c = connect_to(s);
	unsigned char *data = malloc(MB4);
	CHECK(data != NULL);
	memset(data, 0xab, MB4);
	CHECK_OK(shoal_put_bytes(c, "a", data, MB4, 0, NULL));
	await_segments(MB4, 2); /* a's and the spare */
	/* made (a spare in the making is no one's yet) */
	for (int i = 0; i < 1000 && stat_of(c).spare_bytes < MB4; i++)
		usleep(10000);
	CHECK_EQ(stat_of(c).spare_bytes, MB4);

	shoal_builder *b;
	uint32_t idx;
	int fd;
	void *p;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	CHECK_OK(sh_builder_region(b, MB4, &idx, &fd, &p));
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	/* the spare: every page is there before anyone wrote one */
	CHECK_EQ((uint64_t)st.st_blocks * 512, MB4);
	for (uint64_t off = 0; off < MB4; off += 4096)
		CHECK_EQ(((unsigned char *)p)[off], 0);
	CHECK_OK(sh_builder_blob_at(shoal_builder_root(b), idx, 0, MB4));
	CHECK_OK(shoal_builder_write(b, p, data, MB4));
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, "b", 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	const void *q;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &q, &n));
	CHECK(n == MB4 && memcmp(q, data, MB4) == 0);
	CHECK_OK(shoal_object_release(o));
	await_segments(MB4, 3); /* a, b and a new spare */

	/* 54 MiB: with a and b, 62 of 64; the spare's 4 must go first */
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), 54u << 20, &p));
	uint64_t all = 0;
	for (int i = 0; i < 1000 && (segments_of(0, &all), all > so.size); i++)
		usleep(10000);
	if (all > so.size)
		sh_test_fail(__FILE__, __LINE__,
			     "segments of %" PRIu64 " bytes in a %zu-byte store", all, so.size);
	CHECK_OK(shoal_builder_seal(b, "c", 0, NULL));
	/* deleted objects' memory goes (closed by the store's worker) */
	CHECK_OK(shoal_delete(c, "a"));
	CHECK_OK(shoal_delete(c, "b"));
	CHECK_OK(shoal_delete(c, "c"));
	for (int i = 0; i < 1000 && (segments_of(0, &all), all > 32u << 20); i++)
		usleep(10000);
	CHECK(all <= 32u << 20); /* at most the budget, in spares */
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));

	so.spares = 0;
	CHECK_OK(shoal_store_open_embedded(&s, &so));
	c = connect_to(s);
	CHECK_OK(shoal_put_bytes(c, "a", data, MB4, 0, NULL));
	usleep(100000);
	CHECK_EQ(segments_of(MB4, NULL), 1);
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
	free(data);
	sh_test_leak_check();
}

/* A tensor with a zero dimension has no bytes, whatever its other
 * dimensions: a writer may seal one whose strides do not fit in 64 bits,
 * and a reader is told so instead of computing them (the Python module's
 * fuzzer found the overflow). */
SH_TEST(tensor_strides_that_overflow_are_refused)
{
	shoal_store *s = open_store(0);
	shoal_client *c = connect_to(s);
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "tensor", &b));
	int64_t shape[3] = {0, INT64_MAX / 2, 4};
	void *p;
	CHECK_OK(shoal_node_set_tensor(shoal_builder_root(b), SHOAL_DT_F32, 3, shape, &p));
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, NULL, 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	shoal_tensor t;
	CHECK_RC(shoal_node_tensor(shoal_object_root(o), &t), SHOAL_EOVERFLOW);
	struct DLManagedTensor *m;
	CHECK_RC(shoal_node_dlpack(o, shoal_object_root(o), &m), SHOAL_EOVERFLOW);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(c));
	CHECK_OK(shoal_store_close(s));
}

/* ---- requests from fibers: only the fiber waits ---- */

typedef struct fiber_gets {
	shoal_client *c;
	shoal_id ids[64];
	int n, done, rc;
	_Atomic int in_get; /* the getter is inside a get */
} fiber_gets;

static void *getter(void *arg)
{
	fiber_gets *g = arg;
	for (int i = 0; i < g->n; i++) {
		shoal_object *o;
		atomic_store(&g->in_get, 1);
		int rc = shoal_get(g->c, g->ids[i], &o);
		atomic_store(&g->in_get, 0);
		if (rc) {
			g->rc = rc;
			return NULL;
		}
		const void *p;
		size_t len;
		char want[16];
		snprintf(want, sizeof(want), "v%d", i);
		if (shoal_node_blob(shoal_object_root(o), 0, &p, &len) != 0 ||
		    len != strlen(want) || memcmp(p, want, len) != 0)
			g->rc = SHOAL_EPROTO;
		shoal_object_release(o);
		g->done++;
	}
	return NULL;
}

/* SIGSTOP, and until it took: a signal to a process running on another
 * CPU lands a little later, and a request sent meanwhile is served. */
static void stop_store(pid_t pid)
{
	CHECK_EQ(kill(pid, SIGSTOP), 0);
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "r");
		CHECK(f != NULL);
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		const char *st = strrchr(buf, ')'); /* the state follows the name */
		if (st && st[1] == ' ' && st[2] == 'T')
			return;
		usleep(1000);
	}
	sh_test_fail(__FILE__, __LINE__, "shoald did not stop");
}

/* A fiber's get waits in its scheduler's poller (on the doorbell the store
 * made for the connection), not on a futex: while the store is stopped
 * (SIGSTOP) mid-get, another fiber of the thread keeps running; a
 * cancelled get returns SHOAL_ECANCELED and the connection serves the
 * next get (the abandoned reply is read and released first). */
SH_TEST(a_fibers_get_blocks_only_the_fiber)
{
	daemon_store d;
	daemon_open(&d, 0);
	shoal_sched *s;
	CHECK_OK(shoal_sched_create(&s, NULL));
	fiber_gets g = {.c = connect_path(d.path), .n = 64};
	for (int i = 0; i < g.n; i++) {
		char v[16];
		snprintf(v, sizeof(v), "v%d", i);
		CHECK_OK(shoal_put_bytes(g.c, NULL, v, strlen(v), 0, &g.ids[i]));
	}
	/* stopped store: the getter's first get waits; we go on meanwhile */
	stop_store(d.pid);
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, getter, &g, NULL));
	int ticks = 0;
	for (int64_t end = shoal_deadline_in(200 * 1000000LL); shoal_now_ns() < end; ticks++)
		CHECK_RC(shoal_sleep_until(shoal_deadline_in(1000000)), SHOAL_ETIMEDOUT);
	CHECK_EQ(g.done, 0);
	CHECK(atomic_load(&g.in_get));
	CHECK(ticks >= 50); /* ~1 ms each: this fiber ran all along */
	CHECK_EQ(kill(d.pid, SIGCONT), 0);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(g.rc);
	CHECK_EQ(g.done, g.n);

	/* cancelled mid-get, then the same connection again */
	stop_store(d.pid);
	g.done = 0;
	CHECK_OK(shoal_spawn(&f, getter, &g, NULL));
	CHECK_RC(shoal_sleep_until(shoal_deadline_in(50 * 1000000LL)), SHOAL_ETIMEDOUT);
	CHECK(atomic_load(&g.in_get));
	CHECK_OK(shoal_cancel(f));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_RC(g.rc, SHOAL_ECANCELED);
	CHECK_EQ(g.done, 0);
	CHECK_EQ(kill(d.pid, SIGCONT), 0);
	g.rc = 0;
	CHECK_OK(shoal_spawn(&f, getter, &g, NULL));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(g.rc);
	CHECK_EQ(g.done, g.n);
	/* the abandoned get's object was released: deleted, nothing stays
	 * behind waiting for a reader */
	for (int i = 0; i < g.n; i++)
		CHECK_OK(shoal_delete_id(g.c, g.ids[i]));
	shoal_store_stat st = stat_of(g.c);
	CHECK_EQ(st.objects, 0);
	CHECK_EQ(st.pending_frees, 0);
	CHECK_OK(shoal_disconnect(g.c));
	shoal_sched_destroy(s);
	daemon_close(&d);
	sh_test_leak_check();
}

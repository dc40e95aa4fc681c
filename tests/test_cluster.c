/* shoal-test: threaded. Stores on several hosts, as real shoald processes
 * on this machine (own sockets, own loopback ports): an object migrated
 * from one to another (and on to a third) byte for byte, under its id,
 * signature and name; many asks making one transfer; a delete at the
 * source during a transfer; the source killed mid-transfer; a wrong
 * secret, garbage and no secret at all; a destination too small. */
#include "test.h"

#include <shoal/fiber.h>

#include "net/net.h"
#include "store/proto.h"
#include "net/ossl.h"
#include "cluster/etcd.h"
#include "cluster/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SECRET "SHOAL_SECRET=cluster-test-secret-0123456789"

static char dir[64];

typedef struct node {
	pid_t pid;
	char sock[128], log[128], peer[64];
} node;

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/shoal-cluster-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

static void read_file(const char *path, char *buf, size_t len)
{
	buf[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
}

/* shoald --socket DIR/NAME.sock --size SIZE --peer 127.0.0.1:0 [x], with
 * secret (NULL: none) in its environment and its log in DIR/NAME.log;
 * returns once it serves (n->peer: where its peers connect). */
static void node_start_argv(node *n, const char *name, const char *size, const char *secret,
			    const char *const *x)
{
	snprintf(n->sock, sizeof(n->sock), "%s/%s.sock", dir, name);
	snprintf(n->log, sizeof(n->log), "%s/%s.log", dir, name);
	const char *args[32] = {"--socket", n->sock, "--size", size, "--peer", "127.0.0.1:0"};
	for (int i = 0; x && x[i] && i < 20; i++)
		args[6 + i] = x[i];
	const char *env[] = {"SHOAL_SECRET", "SHOAL_SECRET_FILE", secret, NULL};
	int st = sh_test_shoald(args, env, n->log, O_TRUNC, &n->pid);
	char text[4096];
	read_file(n->log, text, sizeof(text));
	if (st != 0)
		sh_test_fail(__FILE__, __LINE__, "shoald %s exited at start (%d):\n%s", name, st,
			     text);
	/* it said where its peers connect before it said it serves */
	const char *p = strstr(text, "peers on ");
	if (!p || sscanf(p + 9, "%63[0-9.:]", n->peer) != 1)
		sh_test_fail(__FILE__, __LINE__, "shoald %s serves, but not to peers:\n%s", name,
			     text);
}

static void node_start(node *n, const char *name, const char *size, const char *secret,
		       const char *x)
{
	const char *v[2] = {x, NULL};
	node_start_argv(n, name, size, secret, v);
}

static int node_stop(node *n)
{
	CHECK_EQ(kill(n->pid, SIGTERM), 0);
	int st;
	CHECK(waitpid(n->pid, &st, 0) == n->pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static shoal_client *client_of(const node *n)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, n->sock));
	shoal_client_set_timeout(c, 120 * 1000 * MS);
	return c;
}

static shoal_store_stat stat_of(const node *n)
{
	shoal_client *c = client_of(n);
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	shoal_disconnect(c);
	return st;
}

/* ---- the objects ---- */

/* Elements of tensor t: 64 B to 64 KiB, so that its blobs lie in the
 * small-object arena, in segments of their own and in a reserved region. */
static int64_t elems_of(int t)
{
	return t % 5 == 0 ? 16384 : t % 5 == 1 ? 5000 : 16 + t % 48;
}

static uint32_t value_of(int t, int64_t i)
{
	return (uint32_t)t * 100003u + (uint32_t)i;
}

static shoal_id put_dict(const node *n, const char *name, int count)
{
	shoal_client *c = client_of(n);
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "tensor_dict", &b));
	size_t reserved = 0;
	for (int t = 0; t < count; t++)
		if (t % 5 == 0)
			reserved += (size_t)elems_of(t) * 4 + SH_STORE_BLOB_ALIGN;
	CHECK_OK(shoal_builder_reserve(b, reserved));
	CHECK_OK(shoal_node_set_str(shoal_builder_root(b), "format", "pt", 2));
	for (int t = 0; t < count; t++) {
		char nm[64];
		snprintf(nm, sizeof(nm), "layers.%d.weight", t);
		shoal_node *m;
		CHECK_OK(shoal_node_add_member(shoal_builder_root(b), nm, "tensor", &m));
		int64_t shape[1] = {elems_of(t)};
		uint32_t *p;
		CHECK_OK(shoal_node_set_tensor(m, SHOAL_DT_U32, 1, shape, (void **)&p));
		for (int64_t i = 0; i < shape[0]; i++)
			p[i] = value_of(t, i);
	}
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, name, SHOAL_PERSIST, &id));
	shoal_disconnect(c);
	return id;
}

/* Every tensor of the dict named name at n, element by element. */
/* The dict of put_dict at n, by name (NULL: by id alone). */
static void check_dict(const node *n, const char *name, int count, shoal_id id, uint64_t sig)
{
	shoal_client *c = client_of(n);
	shoal_object *o;
	CHECK_OK(name ? shoal_get_by_name(c, name, &o) : shoal_get(c, id, &o));
	CHECK_EQ(shoal_object_id(o), id);
	CHECK_EQ(shoal_object_signature(o), sig);
	const shoal_node *r = shoal_object_root(o);
	CHECK_STR(shoal_node_type(r), "tensor_dict");
	const char *fmt;
	size_t fl;
	CHECK_OK(shoal_node_get_str(r, "format", &fmt, &fl));
	CHECK(fl == 2 && memcmp(fmt, "pt", 2) == 0);
	CHECK_EQ(shoal_node_nmembers(r), (size_t)count);
	for (int t = 0; t < count; t++) {
		char nm[64];
		snprintf(nm, sizeof(nm), "layers.%d.weight", t);
		const shoal_node *m = shoal_node_find(r, nm);
		CHECK(m != NULL);
		shoal_tensor ts;
		CHECK_OK(shoal_node_tensor(m, &ts));
		CHECK_EQ(ts.dtype, SHOAL_DT_U32);
		CHECK_EQ(ts.shape[0], elems_of(t));
		const uint32_t *p = ts.data;
		for (int64_t i = 0; i < ts.shape[0]; i++)
			if (p[i] != value_of(t, i))
				sh_test_fail(__FILE__, __LINE__,
					     "%s[%" PRId64 "] = %u, expected %u", nm, i, p[i],
					     value_of(t, i));
	}
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(c);
}

/* One blob of size bytes, byte i = (i * 131 + seed) & 0xff. */
static shoal_id put_blob(const node *n, const char *name, size_t size, int seed)
{
	shoal_client *c = client_of(n);
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	unsigned char *p;
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), size, (void **)&p));
	unsigned char chunk[4096];
	for (size_t off = 0; off < size; off += sizeof(chunk)) {
		size_t k = size - off < sizeof(chunk) ? size - off : sizeof(chunk);
		for (size_t i = 0; i < k; i++)
			chunk[i] = (unsigned char)(((off + i) * 131 + (size_t)seed) & 0xff);
		CHECK_OK(shoal_builder_write(b, p + off, chunk, k));
	}
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, name, SHOAL_PERSIST, &id));
	shoal_disconnect(c);
	return id;
}

static void check_blob(const node *n, const char *name, size_t size, int seed)
{
	shoal_client *c = client_of(n);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, name, &o));
	const void *d;
	size_t got;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &d, &got));
	CHECK_EQ(got, size);
	const unsigned char *p = d;
	for (size_t i = 0; i < size; i += 4093)
		if (p[i] != (unsigned char)((i * 131 + (size_t)seed) & 0xff))
			sh_test_fail(__FILE__, __LINE__, "byte %zu differs", i);
	CHECK(p[size - 1] == (unsigned char)(((size - 1) * 131 + (size_t)seed) & 0xff));
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(c);
}

/* An object whose transfer outlasts the first progress report (100 ms):
 * 1 GiB moves in about 0.7 s here; under a sanitizer a quarter of it
 * takes longer still. */
static size_t big_size(void)
{
	return sh_test_sanitized() ? 256u << 20 : 1u << 30;
}

static int migrate(const node *to, const char *name, shoal_id id, const node *from,
		   shoal_migrate_opts *o, shoal_id *out, char *err, size_t errlen)
{
	shoal_client *c = client_of(to);
	shoal_migrate_opts none = {0};
	if (!o)
		o = &none;
	o->from = from->peer;
	int rc = shoal_migrate(c, name, id, o, out);
	if (err)
		snprintf(err, errlen, "%s", shoal_client_error(c));
	shoal_disconnect(c);
	return rc;
}

/* ---- cases ---- */

SH_TEST_T(a_dict_of_1000_tensors_migrates_byte_for_byte, 240)
{
	setup();
	node a, b, c3;
	node_start(&a, "a", "1G", SECRET, NULL);
	node_start(&b, "b", "1G", SECRET, NULL);
	node_start(&c3, "c", "1G", SECRET, NULL);
	shoal_id id = put_dict(&a, "model", 1000);
	shoal_client *ca = client_of(&a);
	shoal_object *o;
	CHECK_OK(shoal_get(ca, id, &o));
	uint64_t sig = shoal_object_signature(o), bytes = shoal_object_bytes(o);
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(ca);

	shoal_id got = 0;
	char err[512];
	CHECK_OK(migrate(&b, "model", 0, &a, NULL, &got, err, sizeof(err)));
	CHECK_EQ(got, id);
	check_dict(&b, "model", 1000, id, sig);
	shoal_store_stat sb = stat_of(&b), sa = stat_of(&a);
	CHECK_EQ(sb.fetched, 1u);
	CHECK_EQ(sb.fetched_bytes, bytes);
	CHECK_EQ(sb.objects, 1u);
	CHECK_EQ(sa.sent, 1u);
	CHECK_EQ(sa.sent_bytes, bytes);

	/* here already: nothing travels, by name or by id */
	CHECK_OK(migrate(&b, "model", 0, &a, NULL, &got, NULL, 0));
	CHECK_OK(migrate(&b, NULL, id, &a, NULL, &got, NULL, 0));
	CHECK_EQ(got, id);
	CHECK_EQ(stat_of(&a).sent, 1u);

	/* on to a third store, from the copy, by id: asked for an id, it
	 * binds no name (a source names nothing at its destination) */
	CHECK_OK(migrate(&c3, NULL, id, &b, NULL, &got, err, sizeof(err)));
	CHECK_EQ(got, id);
	check_dict(&c3, NULL, 1000, id, sig);
	shoal_client *cc = client_of(&c3);
	CHECK_RC(shoal_get_by_name(cc, "model", &o), SHOAL_ENOENT);
	shoal_disconnect(cc);
	CHECK_EQ(stat_of(&b).sent, 1u);

	/* an object that is nowhere: the peer says so */
	CHECK_RC(migrate(&b, "nothing", 0, &a, NULL, &got, err, sizeof(err)), SHOAL_ENOENT);
	CHECK_HAS(err, "no object named \"nothing\"");
	CHECK_HAS(err, a.peer);

	/* over 4 links at once (128 MiB: 4 shares of 32 MiB), byte for byte */
	shoal_id big = put_blob(&a, "quarter-gig", 128u << 20, 9);
	shoal_migrate_opts four = {.streams = 4};
	CHECK_OK(migrate(&c3, "quarter-gig", 0, &a, &four, &got, err, sizeof(err)));
	CHECK_EQ(got, big);
	check_blob(&c3, "quarter-gig", 128u << 20, 9);

	/* the command line: the id printed, the copy a get away */
	char shoal[4096], out[4096];
	sh_test_bin(shoal, sizeof(shoal), "tools/shoal");
	put_blob(&a, "small", 1000, 3);
	char *argv[] = {shoal, "migrate", "small", "--from", a.peer, "--socket", b.sock, NULL};
	CHECK_EQ(sh_test_run(argv, NULL, out, sizeof(out)), 0);
	CHECK(strlen(out) == 17 && out[16] == '\n');
	check_blob(&b, "small", 1000, 3);
	/* shoal get --from: copied, then written as a file */
	char file[128];
	snprintf(file, sizeof(file), "%s/model.safetensors", dir);
	char *gv[] = {shoal,	  "get",   "model", "--from", a.peer,
		      "--socket", c3.sock, "--out", file,     NULL};
	CHECK_EQ(sh_test_run(gv, NULL, out, sizeof(out)), 0);
	check_dict(&c3, "model", 1000, id, sig);
	struct stat fst;
	CHECK(stat(file, &fst) == 0 && (uint64_t)fst.st_size > bytes);
	CHECK_EQ(node_stop(&c3), 0);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

typedef struct asker {
	const node *to, *from;
	shoal_id got;
	int rc;
	char err[512];
} asker;

static void *ask_main(void *arg)
{
	asker *k = arg;
	k->rc = migrate(k->to, "big", 0, k->from, NULL, &k->got, k->err, sizeof(k->err));
	return NULL;
}

SH_TEST_T(eight_asks_for_one_object_make_one_transfer, 240)
{
	setup();
	node a, b;
	node_start(&a, "a", "1G", SECRET, NULL);
	node_start(&b, "b", "1G", SECRET, NULL);
	size_t size = 128u << 20;
	shoal_id id = put_blob(&a, "big", size, 7);
	asker k[8];
	pthread_t th[8];
	for (int i = 0; i < 8; i++) {
		k[i] = (asker){.to = &b, .from = &a};
		CHECK_EQ(pthread_create(&th[i], NULL, ask_main, &k[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		if (k[i].rc)
			sh_test_fail(__FILE__, __LINE__, "ask %d: %s: %s", i,
				     shoal_strerror(k[i].rc), k[i].err);
		CHECK_EQ(k[i].got, id);
	}
	/* the source counts a send when its fiber runs again after the last
	 * byte left, which on a loaded machine can be after the destination
	 * has answered every ask: its figure is looked at until it comes (a
	 * bound of 10 s), then must be one transfer, not more */
	shoal_store_stat sa = stat_of(&a), sb = stat_of(&b);
	for (int i = 0; i < 1000 && sa.sent == 0; i++) {
		usleep(10000);
		sa = stat_of(&a);
	}
	CHECK_EQ(sa.sent, 1u);
	CHECK_EQ(sa.sent_bytes, (uint64_t)size);
	CHECK_EQ(sb.fetched, 1u);
	CHECK_EQ(sb.objects, 1u);
	CHECK_EQ(sb.used, (uint64_t)size);
	check_blob(&b, "big", size, 7);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* Stops the destination at the first sign of bytes, deletes the object at
 * the source meanwhile, and looks at the source's figures. */
typedef struct during {
	node *a, *b;
	bool seen;
	shoal_store_stat mid, coming; /* the source's after the delete; the destination's */
	uint64_t total;
} during;

static void delete_meanwhile(void *arg, uint64_t got, uint64_t total)
{
	during *d = arg;
	if (d->seen || got == 0 || got >= total)
		return;
	d->seen = true;
	d->total = total;
	d->coming = stat_of(d->b); /* the transfer, as the destination's STAT shows it */
	/* both stores serve their clients while the bytes move: a put and a
	 * get at each, well within a second (a generous bound) */
	node *both[2] = {d->a, d->b};
	for (int i = 0; i < 2; i++) {
		int64_t t0 = shoal_now_ns();
		shoal_client *c = client_of(both[i]);
		shoal_id id;
		shoal_object *o;
		CHECK_OK(shoal_put_bytes(c, NULL, "meanwhile", 9, 0, &id));
		CHECK_OK(shoal_get(c, id, &o));
		CHECK_OK(shoal_object_release(o));
		shoal_disconnect(c);
		CHECK((shoal_now_ns() - t0) / MS < 1000);
	}
	CHECK_EQ(kill(d->b->pid, SIGSTOP), 0);
	shoal_client *c = client_of(d->a);
	CHECK_OK(shoal_delete(c, "big"));
	CHECK_OK(shoal_store_stat_get(c, &d->mid));
	shoal_disconnect(c);
	CHECK_EQ(kill(d->b->pid, SIGCONT), 0);
}

SH_TEST_T(a_delete_at_the_source_waits_for_the_transfer, 240)
{
	setup();
	node a, b;
	node_start(&a, "a", "2G", SECRET, NULL);
	node_start(&b, "b", "2G", SECRET, NULL);
	size_t size = big_size();
	shoal_id id = put_blob(&a, "big", size, 11);
	during d = {.a = &a, .b = &b};
	shoal_migrate_opts o = {.progress = delete_meanwhile, .progress_arg = &d};
	shoal_id got;
	char err[512];
	int rc = migrate(&b, "big", 0, &a, &o, &got, err, sizeof(err));
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "%s: %s", shoal_strerror(rc), err);
	CHECK_EQ(got, id);
	if (!d.seen)
		sh_test_fail(__FILE__, __LINE__,
			     "%zu MiB came in under 100 ms: no moment to delete during the "
			     "transfer",
			     size >> 20);
	/* the destination showed it coming, with its rate */
	CHECK_EQ(d.coming.migrating, 1u);
	CHECK_EQ(d.coming.incoming_total, d.total);
	CHECK(d.coming.incoming_bytes > 0 && d.coming.incoming_bytes <= d.total);
	CHECK(d.coming.incoming_rate > 0);
	CHECK_EQ(stat_of(&b).incoming_total, 0u);
	/* meanwhile: the name gone, the object held for the transfer */
	CHECK_EQ(d.mid.names, 0u);
	CHECK_EQ(d.mid.objects, 1u);
	CHECK_EQ(d.mid.pending_frees, 1u);
	check_blob(&b, "big", size, 11);
	/* and freed once its last byte left */
	shoal_store_stat sa = stat_of(&a);
	for (int i = 0; i < 500 && sa.objects; i++) {
		usleep(10000);
		sa = stat_of(&a);
	}
	CHECK_EQ(sa.objects, 0u);
	CHECK_EQ(sa.used, 0u);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

typedef struct killer {
	node *a;
	bool killed;
} killer;

static void kill_source(void *arg, uint64_t got, uint64_t total)
{
	killer *k = arg;
	if (k->killed || got == 0 || got >= total)
		return;
	k->killed = true;
	CHECK_EQ(kill(k->a->pid, SIGKILL), 0);
}

typedef struct waiter {
	const node *to, *from;
	int rc;
	char err[512];
} waiter;

static void *wait_main(void *arg)
{
	waiter *w = arg;
	shoal_id got;
	w->rc = migrate(w->to, "big", 0, w->from, NULL, &got, w->err, sizeof(w->err));
	return NULL;
}

SH_TEST_T(the_source_killed_mid_transfer_fails_every_waiter, 240)
{
	setup();
	node a, b;
	node_start(&a, "a", "2G", SECRET, NULL);
	node_start(&b, "b", "2G", SECRET, NULL);
	size_t size = big_size();
	put_blob(&a, "big", size, 5);
	shoal_store_stat base = stat_of(&b);
	killer k = {.a = &a};
	waiter w[3];
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		w[i] = (waiter){.to = &b, .from = &a};
		CHECK_EQ(pthread_create(&th[i], NULL, wait_main, &w[i]), 0);
	}
	shoal_migrate_opts o = {.progress = kill_source, .progress_arg = &k};
	shoal_id got;
	char err[512];
	int rc = migrate(&b, "big", 0, &a, &o, &got, err, sizeof(err));
	if (!k.killed)
		sh_test_fail(__FILE__, __LINE__,
			     "%zu MiB came in under 100 ms: no moment to kill the source",
			     size >> 20);
	CHECK(rc != 0);
	CHECK_HAS(err, a.peer);
	CHECK_HAS(err, "after");
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		CHECK(w[i].rc != 0);
		CHECK_HAS(w[i].err, a.peer);
	}
	int st;
	CHECK(waitpid(a.pid, &st, 0) == a.pid);
	/* nothing of the copy stays */
	shoal_store_stat sb = stat_of(&b);
	CHECK_EQ(sb.used, base.used);
	CHECK_EQ(sb.objects, base.objects);
	CHECK_EQ(sb.migrating, 0u);
	/* and the destination goes on: a new source, a new transfer */
	node_start(&a, "a2", "2G", SECRET, NULL);
	put_blob(&a, "big", 1u << 20, 6);
	CHECK_OK(migrate(&b, "big", 0, &a, NULL, &got, err, sizeof(err)));
	check_blob(&b, "big", 1u << 20, 6);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* The stranger's attacks on a store's peer port, from whatever user runs
 * them: garbage; a wrong secret; the right secret (known: the attacker is a
 * cluster process) but another protocol. Exits nonzero if one got in. */
static void attack_peer_port(void *arg)
{
	const node *a = arg;
	int fd;
	char why[256];
	if (sh_tcp_connect(a->peer, &fd, shoal_deadline_in(5000 * MS), why, sizeof(why)) != 0)
		_exit(2);
	char junk[4096];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 7);
	if (write(fd, junk, sizeof(junk)) <= 0)
		_exit(3);
	close(fd);
	sh_channel *ch;
	setenv("SHOAL_SECRET", "not-the-clusters-secret-at-all", 1);
	if (sh_tcp_connect_auth(a->peer, SH_PEER_PROTO, shoal_deadline_in(5000 * MS), &fd, &ch, why,
				sizeof(why)) != SHOAL_EACCES)
		_exit(4);
	setenv("SHOAL_SECRET", SECRET + strlen("SHOAL_SECRET="), 1);
	if (sh_tcp_connect_auth(a->peer, SH_STORE_PROTO, shoal_deadline_in(5000 * MS), &fd, &ch,
				why, sizeof(why)) != 0)
		_exit(5);
	char x;
	if (read(fd, &x, 1) > 0) /* closed on it */
		_exit(6);
	sh_channel_free(ch);
	close(fd);
	_exit(0);
}

SH_TEST_T(strangers_are_refused_and_logged, 120)
{
	setup();
	node a, b;
	node_start(&a, "a", "256M", SECRET, NULL);
	node_start(&b, "b", "256M", "SHOAL_SECRET=another-secret-entirely-0000", NULL);
	put_blob(&a, "x", 100000, 1);
	shoal_id got;
	char err[512];
	int rc = migrate(&b, "x", 0, &a, NULL, &got, err, sizeof(err));
	CHECK_EQ(rc, SHOAL_EACCES);
	CHECK_HAS(err, a.peer);
	/* garbage, a wrong secret and a wrong protocol on the port, as root
	 * and as nobody: refused, and the store serves on */
	CHECK_EQ(sh_test_run_as(0, NULL, 0, attack_peer_port, &a), 0);
	CHECK_EQ(sh_test_run_as(SH_TEST_NOBODY, NULL, 0, attack_peer_port, &a), 0);
	node c3;
	node_start(&c3, "c", "256M", SECRET, NULL);
	CHECK_OK(migrate(&c3, "x", 0, &a, NULL, &got, err, sizeof(err)));
	check_blob(&c3, "x", 100000, 1);
	CHECK_EQ(node_stop(&c3), 0);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	char log[1 << 14];
	read_file(a.log, log, sizeof(log));
	CHECK_HAS(log, "refused peer 127.0.0.1:");
	CHECK_HAS(log, "secret");
	CHECK_HAS(log, "not a store");
	cleanup();
}

SH_TEST(a_peer_port_needs_a_secret)
{
	setup();
	char exe[4096], out[4096], sock[128];
	sh_test_bin(exe, sizeof(exe), "tools/shoald");
	snprintf(sock, sizeof(sock), "%s/n.sock", dir);
	char *argv[] = {exe, "--socket", sock, "--peer", "127.0.0.1:0", NULL};
	/* sh_test_run adds to the environment: take the secret out of ours */
	unsetenv("SHOAL_SECRET");
	unsetenv("SHOAL_SECRET_FILE");
	CHECK_EQ(sh_test_run(argv, NULL, out, sizeof(out)), 1);
	CHECK_HAS(out, "SHOAL_SECRET_FILE");
	cleanup();
}

/* issue 31.4: strangers from other addresses fill the peer port's
 * handshakes with silent connections (held open, more than there are
 * slots); a legitimate migration still goes through, at once or after a
 * retry (a silent stranger gives its slot up), and the refusals are told
 * at most 10 lines in 10 s, the rest counted. As root and as nobody. */
typedef struct flood {
	const char *peer;
	int ready[2], done[2];
} flood;

#define FLOOD_SOURCES 5
#define FLOOD_EACH 16

static void silent_strangers(void *arg)
{
	flood *f = arg;
	const char *colon = strrchr(f->peer, ':');
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(colon + 1)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int held = 0;
	for (int src = 0; src < FLOOD_SOURCES; src++)
		for (int i = 0; i < FLOOD_EACH; i++) {
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			struct sockaddr_in from = {.sin_family = AF_INET,
						   .sin_addr.s_addr =
							   htonl(0x7f000002 + (uint32_t)src)};
			if (fd < 0 || bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
			    connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0)
				_exit(2);
			held++; /* kept open, saying nothing */
		}
	char x = (char)held;
	if (write(f->ready[1], &x, 1) != 1 || read(f->done[0], &x, 1) < 0)
		_exit(3);
	_exit(0);
}

static int count_lines(const char *log, const char *needle)
{
	int n = 0;
	for (const char *p = log; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

SH_TEST_T(silent_strangers_do_not_fail_a_migration, 120)
{
	setup();
	node a, b;
	node_start(&a, "a", "256M", SECRET, NULL);
	node_start(&b, "b", "256M", SECRET, NULL);
	put_blob(&a, "x", 100000, 1);
	for (int who = 0; who < 2; who++) {
		flood f = {.peer = a.peer};
		CHECK_OK(pipe(f.ready));
		CHECK_OK(pipe(f.done));
		fflush(NULL);
		pid_t p = fork();
		CHECK(p >= 0);
		if (p == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (who)
				sh_test_drop_to(SH_TEST_NOBODY, SH_TEST_NOBODY, NULL, 0);
			silent_strangers(&f);
		}
		char x;
		CHECK_EQ(read(f.ready[0], &x, 1), 1);
		usleep(100 * 1000); /* the store has taken them all */
		shoal_id got;
		char err[512];
		int rc = migrate(&b, "x", 0, &a, NULL, &got, err, sizeof(err));
		if (rc)
			sh_test_fail(__FILE__, __LINE__,
				     "%s: the migration failed beside the "
				     "strangers: %s",
				     who ? "nobody" : "root", err);
		check_blob(&b, "x", 100000, 1);
		shoal_client *c = client_of(&b);
		CHECK_OK(shoal_delete(c, "x"));
		shoal_disconnect(c);
		CHECK_EQ(write(f.done[1], "x", 1), 1);
		int st;
		CHECK_EQ(waitpid(p, &st, 0), p);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		close(f.ready[0]), close(f.ready[1]), close(f.done[0]), close(f.done[1]);
	}
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	char log[1 << 16];
	read_file(a.log, log, sizeof(log));
	/* 2 x 80 strangers in well under 10 s: 10 told, the rest counted */
	int told = count_lines(log, "refused peer ");
	if (told < 1 || told > 10)
		sh_test_fail(__FILE__, __LINE__, "%d refusals told one by one:\n%s", told, log);
	CHECK_HAS(log, "from 127.0.0.");
	cleanup();
}

SH_TEST_T(a_copy_that_does_not_fit_is_refused, 120)
{
	setup();
	node a, b;
	node_start(&a, "a", "256M", SECRET, NULL);
	node_start(&b, "b", "64M", SECRET, "--peer-room=32M");
	put_blob(&a, "big", 100u << 20, 2);
	shoal_store_stat base = stat_of(&b);
	shoal_id got;
	char err[512];
	/* more than copies may hold */
	CHECK_RC(migrate(&b, "big", 0, &a, NULL, &got, err, sizeof(err)), SHOAL_ENOSPC);
	CHECK_HAS(err, "no room for copies coming from other stores");
	CHECK_HAS(err, "--peer-room");
	shoal_store_stat sb = stat_of(&b);
	CHECK_EQ(sb.used, base.used);
	CHECK_EQ(sb.objects, base.objects);
	/* and more than the store holds, whatever copies may */
	node c3;
	node_start(&c3, "c", "64M", SECRET, NULL);
	CHECK_RC(migrate(&c3, "big", 0, &a, NULL, &got, err, sizeof(err)), SHOAL_ENOSPC);
	CHECK_HAS(err, "store full");
	CHECK_EQ(node_stop(&c3), 0);
	/* a store without a source named cannot know where to look */
	shoal_client *c = client_of(&b);
	shoal_migrate_opts none = {0};
	CHECK_RC(shoal_migrate(c, "big", 0, &none, &got), SHOAL_ENOENT);
	CHECK_HAS(shoal_client_error(c), "no store to fetch it from");
	shoal_disconnect(c);
	/* and the source released it: a delete frees it at once */
	c = client_of(&a);
	CHECK_OK(shoal_delete(c, "big"));
	shoal_disconnect(c);
	shoal_store_stat sa = stat_of(&a);
	for (int i = 0; i < 500 && sa.objects; i++) {
		usleep(10000);
		sa = stat_of(&a);
	}
	CHECK_EQ(sa.objects, 0u);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* ---- a lying source ---- */

/* A source that knows the secret and lies: it answers a FETCH for any name
 * with an object of one 100-byte blob named `answer_name`, sends its
 * bytes, then `extra` bytes more. A thread with a fiber of its own. */
typedef struct liar {
	int lsock;
	char addr[64];
	const char *answer_name;
	size_t extra;
	/* a trickle: the object is `size` bytes (0: 100), of which it sends
	 * trickle bytes every 100 ms, until the link fails */
	uint64_t size;
	size_t trickle;
	/* a store of peer protocol 1: it closes the link at an op it does not
	 * know (anything but FETCH and JOIN) */
	bool old;
	pthread_t th;
	int rc;
} liar;

static void *liar_fiber(void *arg)
{
	liar *l = arg;
	char who[96], why[256];
	const char *secret = SECRET + strlen("SHOAL_SECRET=");
	int fd = sh_tcp_accept(l->lsock, "test", who, sizeof(who));
	sh_channel *ch = NULL;
	uint32_t proto;
	unsigned char *in = NULL;
	size_t cap = 0, len;
	if (fd < 0 ||
	    (l->rc = sh_auth_server(fd, secret, strlen(secret), false, &proto, &ch, why,
				    sizeof(why))) != 0 ||
	    (l->rc = sh_channel_read_frame(ch, &in, &cap, &len, 1 << 16, true,
					   shoal_deadline_in(10000 * MS))) != 0)
		goto out;
	sh_frame req;
	if (l->old && (sh_frame_decode(in, len, &req, why, sizeof(why)) != 0 ||
		       (req.op != SH_PEER_FETCH && req.op != SH_PEER_JOIN)))
		goto out;
	uint64_t size = l->size ? l->size : 100;
	sh_blobref blob = {.seg = 1, .off = 0, .size = size};
	shoal_node root = {.type = "bytes", .nblobs = 1, .blobs = &blob};
	sh_peer_fetch_reply r = {.id = 0x4242000000000001ull,
				 .sig = 0x4242000000000001ull,
				 .region = size,
				 .name = l->answer_name,
				 .root = &root,
				 .k = 1};
	sh_wbuf w;
	sh_wbuf_init(&w);
	unsigned char bytes[4096];
	memset(bytes, 7, sizeof(bytes));
	if ((l->rc = sh_peer_pack_reply(&w, 1, &r)) == 0 &&
	    (l->rc = sh_channel_write(ch, w.p, w.len, true, shoal_deadline_in(5000 * MS))) == 0 &&
	    !l->trickle)
		l->rc = sh_channel_write(ch, bytes, 100 + l->extra, true,
					 shoal_deadline_in(5000 * MS));
	for (int i = 0; l->rc == 0 && l->trickle && i < 600; i++) {
		shoal_sleep_until(shoal_deadline_in(100 * MS));
		l->rc = sh_channel_write(ch, bytes, l->trickle, true, shoal_deadline_in(5000 * MS));
	}
	sh_wbuf_fini(&w);
	shoal_sleep_until(shoal_deadline_in(500 * MS)); /* the destination reads, then we go */
out:
	if (in)
		free(in);
	sh_channel_free(ch);
	if (fd >= 0) {
		shoal_fd_forget(fd);
		close(fd);
	}
	return NULL;
}

static void *liar_main(void *arg)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, liar_fiber, arg, NULL));
	CHECK_OK(shoal_join(f, NULL));
	shoal_sched_destroy(s);
	return NULL;
}

static void liar_run(liar *l)
{
	char why[128];
	CHECK_OK(sh_tcp_listen("127.0.0.1:0", &l->lsock, l->addr, sizeof(l->addr), why,
			       sizeof(why)));
	CHECK_OK(pthread_create(&l->th, NULL, liar_main, l));
}

static void liar_start_ex(liar *l, const char *answer_name, size_t extra, uint64_t size,
			  size_t trickle)
{
	*l = (liar){.answer_name = answer_name, .extra = extra, .size = size, .trickle = trickle};
	liar_run(l);
}

static void liar_start(liar *l, const char *answer_name, size_t extra)
{
	liar_start_ex(l, answer_name, extra, 0, 0);
}

static void liar_end(liar *l)
{
	pthread_join(l->th, NULL);
	close(l->lsock);
}

/* issue 31.2: a source that holds the secret answers a fetch of "model"
 * with another name: the fetch fails saying so, and the destination binds
 * nothing; one that sends bytes after those its answer announced fails
 * the fetch too, and nothing is bound either. */
SH_TEST_T(a_lying_source_names_nothing, 60)
{
	setup();
	node b;
	node_start(&b, "b", "256M", SECRET, NULL);
	static const struct {
		const char *name;
		size_t extra;
		const char *says;
	} lies[] = {
		{"other", 0, "expected the object named \"model\""},
		{NULL, 0, "an unnamed object"},
		{"model", 50, "bytes came after the 100 its answer announced"},
	};
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		liar l;
		liar_start(&l, lies[i].name, lies[i].extra);
		node src = {0};
		snprintf(src.peer, sizeof(src.peer), "%s", l.addr);
		shoal_id got;
		char err[512];
		int rc = migrate(&b, "model", 0, &src, NULL, &got, err, sizeof(err));
		liar_end(&l);
		CHECK_RC(rc, SHOAL_EPROTO);
		CHECK_HAS(err, lies[i].says);
		CHECK_HAS(err, l.addr);
		shoal_client *c = client_of(&b);
		shoal_object *o;
		CHECK_RC(shoal_get_by_name(c, "model", &o), SHOAL_ENOENT);
		CHECK_RC(shoal_get_by_name(c, "other", &o), SHOAL_ENOENT);
		CHECK_EQ(stat_of(&b).objects, 0u);
		shoal_disconnect(c);
	}
	CHECK_EQ(node_stop(&b), 0);
	cleanup();
}

typedef struct migration {
	const node *to, *from;
	int rc;
	char err[512];
	double secs;
} migration;

static void *migration_main(void *arg)
{
	migration *m = arg;
	shoal_id got;
	int64_t t0 = shoal_now_ns();
	m->rc = migrate(m->to, "model", 0, m->from, NULL, &got, m->err, sizeof(m->err));
	m->secs = (double)(shoal_now_ns() - t0) / 1e9;
	return NULL;
}

/* issue 31.3: a source that trickles (20 KB a second) may hold the room it
 * was given only until the rate check ends its copy (5 s under 1 MB/s); a
 * local put meanwhile that needs that room ends the copy at once and gets
 * it (local puts come first). */
SH_TEST_T(a_trickling_source_holds_no_room, 120)
{
	setup();
	node b;
	node_start(&b, "b", "64M", SECRET, "--peer-room=60M");
	for (int put = 1; put >= 0; put--) {
		liar l;
		liar_start_ex(&l, "model", 0, 48u << 20, 2048);
		node src = {0};
		snprintf(src.peer, sizeof(src.peer), "%s", l.addr);
		migration m = {.to = &b, .from = &src};
		pthread_t t;
		CHECK_OK(pthread_create(&t, NULL, migration_main, &m));
		/* the copy holds its 48 MiB: a local put of 32 MiB needs them */
		shoal_store_stat st = stat_of(&b);
		for (int i = 0; i < 500 && st.used < (48u << 20); i++) {
			usleep(10000);
			st = stat_of(&b);
		}
		CHECK(st.used >= (48u << 20));
		if (put) {
			shoal_client *c = client_of(&b);
			char *big = calloc(1, 32u << 20);
			CHECK(big != NULL);
			shoal_id id;
			int64_t t0 = shoal_now_ns();
			CHECK_OK(shoal_put_bytes(c, "local", big, 32u << 20, 0, &id));
			CHECK((shoal_now_ns() - t0) / MS <
			      3000); /* at once, not after the trickle */
			free(big);
			pthread_join(t, NULL);
			CHECK_RC(m.rc, SHOAL_ENOSPC);
			CHECK_HAS(m.err, "its room went to a local put");
			CHECK_OK(shoal_delete(c, "local"));
			shoal_disconnect(c);
		} else {
			pthread_join(t, NULL);
			CHECK_RC(m.rc, SHOAL_ETIMEDOUT);
			if (!strstr(m.err, "below the least rate"))
				sh_test_fail(__FILE__, __LINE__, "%s", m.err);
			CHECK(m.secs > 4 && m.secs < 30);
		}
		liar_end(&l);
		/* and the room is back */
		CHECK_EQ(stat_of(&b).used, 0u);
	}
	CHECK_EQ(node_stop(&b), 0);
	cleanup();
}

/* ---- the registry in etcd ---- */

typedef struct etcd_proc {
	pid_t pid;
	char data[128], client[64], meta[80];
	int cport, pport;
} etcd_proc;

/* Whether something answers TCP on 127.0.0.1:port. */
static bool port_open(int port)
{
	char hp[32], why[128];
	int fd;
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
	if (sh_tcp_connect(hp, &fd, shoal_deadline_in(200 * MS), why, sizeof(why)) != 0)
		return false;
	close(fd);
	return true;
}

/* etcd on loopback ports of its own, its data in DIR/etcd (kept over a
 * restart with the same ports). */
static void etcd_start(etcd_proc *e)
{
	if (access("/usr/bin/etcd", X_OK) != 0)
		SH_SKIP("etcd is not installed (Debian's etcd-server; make test installs it)");
	if (!e->cport) {
		e->cport = 20000 + (int)(getpid() % 20000);
		while (port_open(e->cport) || port_open(e->cport + 1))
			e->cport += 2;
		e->pport = e->cport + 1;
		snprintf(e->data, sizeof(e->data), "%s/etcd", dir);
		snprintf(e->client, sizeof(e->client), "http://127.0.0.1:%d", e->cport);
		snprintf(e->meta, sizeof(e->meta), "etcd://127.0.0.1:%d", e->cport);
	}
	char peer[64], cluster[96], log[160];
	snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", e->pport);
	snprintf(cluster, sizeof(cluster), "default=%s", peer);
	snprintf(log, sizeof(log), "%s/etcd.log", dir);
	fflush(NULL);
	e->pid = fork();
	CHECK(e->pid >= 0);
	if (e->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		execl("/usr/bin/etcd", "etcd", "--data-dir", e->data, "--listen-client-urls",
		      e->client, "--advertise-client-urls", e->client, "--listen-peer-urls", peer,
		      "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000 && !port_open(e->cport); i++)
		usleep(10000);
	CHECK(port_open(e->cport));
}

static void etcd_kill(etcd_proc *e)
{
	if (e->pid > 0) {
		kill(e->pid, SIGKILL);
		waitpid(e->pid, NULL, 0);
	}
	e->pid = 0;
}

static void node_start_etcd(node *n, const char *name, const etcd_proc *e, const char *ttl)
{
	const char *x[] = {"--meta", e->meta, "--cluster", "test", "--lease-ttl", ttl, NULL};
	node_start_argv(n, name, "512M", SECRET, x);
}

/* Until st's field reaches want, at most ms: the stat at the end. */
#define STAT_UNTIL(n, field, want, ms)                                          \
	({                                                                      \
		shoal_store_stat st_ = stat_of(n);                              \
		for (int i_ = 0; i_ < (ms) / 20 && st_.field != (want); i_++) { \
			usleep(20000);                                          \
			st_ = stat_of(n);                                       \
		}                                                               \
		st_;                                                            \
	})

/* The record etcd keeps for name in cluster "test" (JSON), or NULL. */
static cJSON *etcd_record(sh_etcd *et, const char *name)
{
	char key[256], why[256];
	snprintf(key, sizeof(key), "/shoal/test/names/%s", name);
	cJSON *req = cJSON_CreateObject(), *ans = NULL;
	sh_json_b64(req, "key", key, strlen(key));
	CHECK_OK(sh_etcd_call(et, "/v3/kv/range", req, shoal_deadline_in(5000 * MS), &ans, why,
			      sizeof(why)));
	cJSON_Delete(req);
	const cJSON *kv = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "kvs"), 0),
		    *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
	unsigned char *dec = NULL;
	size_t n;
	cJSON *rec = NULL;
	if (cJSON_IsString(v) && sh_b64_decode(v->valuestring, &dec, &n) == 0)
		rec = cJSON_Parse((char *)dec);
	free(dec);
	cJSON_Delete(ans);
	return rec;
}

static void etcd_put_record(sh_etcd *et, const char *name, const cJSON *rec)
{
	char key[256], why[256], *text = cJSON_PrintUnformatted(rec);
	snprintf(key, sizeof(key), "/shoal/test/names/%s", name);
	cJSON *req = cJSON_CreateObject(), *ans = NULL;
	sh_json_b64(req, "key", key, strlen(key));
	sh_json_b64(req, "value", text, strlen(text));
	CHECK_OK(sh_etcd_call(et, "/v3/kv/put", req, shoal_deadline_in(5000 * MS), &ans, why,
			      sizeof(why)));
	cJSON_Delete(req);
	cJSON_Delete(ans);
	free(text);
}

/* The record's mac as SECURITY.md says any holder of the secret makes it:
 * HMAC-SHA256 of the fields, one a line. */
static void sign_record(cJSON *rec)
{
	const char *secret = SECRET + strlen("SHOAL_SECRET=");
	char buf[2048], mac[65];
	int n = snprintf(buf, sizeof(buf), "shoal-registry-record-1\n%s\n%s\n%s\n%s\n%s\n%.0f\n%s",
			 cJSON_GetObjectItem(rec, "name")->valuestring,
			 cJSON_GetObjectItem(rec, "peer")->valuestring,
			 cJSON_GetObjectItem(rec, "id")->valuestring,
			 cJSON_GetObjectItem(rec, "sig")->valuestring,
			 cJSON_GetObjectItem(rec, "type")->valuestring,
			 cJSON_GetObjectItem(rec, "bytes")->valuedouble,
			 cJSON_GetObjectItem(rec, "meta")->valuestring);
	unsigned char d[32];
	char why[128];
	CHECK_OK(sh_ossl_load(false, why, sizeof(why)));
	CHECK_OK(sh_hmac_sha256(secret, strlen(secret), buf, (size_t)n, d));
	for (int i = 0; i < 32; i++)
		sprintf(mac + 2 * i, "%02x", d[i]);
	cJSON_ReplaceItemInObject(rec, "mac", cJSON_CreateString(mac));
}

/* issue 31.2: a name's record in etcd is signed with the cluster's
 * secret and says what the object is: one that anyone who may write etcd
 * forged (unsigned, or signed for another name) is refused, and an object
 * that is not what its signed record says (another tree: what a lying
 * source would send) is refused before a byte of it is taken. */
SH_TEST_T(the_registrys_records_are_signed, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "5");
	node_start_etcd(&b, "b", &e, "5");
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	put_dict(&a, "model", 20);
	put_dict(&a, "spare", 20);
	char why[256], ep[64];
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", e.cport);
	sh_etcd *et;
	CHECK_OK(sh_etcd_open(ep, &et, why, sizeof(why)));
	cJSON *good = etcd_record(et, "model");
	CHECK(good != NULL);
	CHECK(cJSON_GetObjectItem(good, "mac") && cJSON_GetObjectItem(good, "meta"));
	shoal_client *cb = client_of(&b);
	shoal_object *o;
	/* 1. forged: the mac of nothing */
	cJSON *forged = cJSON_Duplicate(good, 1);
	cJSON_ReplaceItemInObject(forged, "mac",
				  cJSON_CreateString("00000000000000000000000000000"
						     "00000000000000000000000000000"
						     "000000"));
	etcd_put_record(et, "model", forged);
	CHECK_RC(shoal_get_by_name(cb, "model", &o), SHOAL_EPERM);
	CHECK_HAS(shoal_client_error(cb), "not signed with this cluster's secret");
	/* 2. signed, but for another name (a record copied under this one) */
	cJSON *other = etcd_record(et, "spare");
	etcd_put_record(et, "model", other);
	CHECK_RC(shoal_get_by_name(cb, "model", &o), SHOAL_EPERM);
	CHECK_HAS(shoal_client_error(cb), "names spare");
	/* 3. signed for it, but another tree than the source sends */
	cJSON *lie = cJSON_Duplicate(good, 1);
	cJSON_ReplaceItemInObject(lie, "meta",
				  cJSON_CreateString("11111111111111111111111111111111"
						     "11111111111111111111111111111111"));
	sign_record(lie);
	etcd_put_record(et, "model", lie);
	CHECK_RC(shoal_get_by_name(cb, "model", &o), SHOAL_EPROTO);
	CHECK_HAS(shoal_client_error(cb), "another metadata (its digest) than the registry's");
	CHECK_EQ(stat_of(&b).objects, 0u);
	/* the true record: the get migrates it */
	etcd_put_record(et, "model", good);
	CHECK_OK(shoal_get_by_name(cb, "model", &o));
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(cb);
	cJSON_Delete(good), cJSON_Delete(forged), cJSON_Delete(other), cJSON_Delete(lie);
	sh_etcd_close(et);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	etcd_kill(&e);
	cleanup();
}

SH_TEST_T(names_are_the_clusters_and_a_get_migrates, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b, c3;
	node_start_etcd(&a, "a", &e, "5");
	node_start_etcd(&b, "b", &e, "5");
	node_start_etcd(&c3, "c", &e, "5");
	CHECK_EQ(STAT_UNTIL(&c3, peers, 3u, 10000).peers, 3u);
	CHECK_EQ(stat_of(&a).registry, 1u);
	shoal_id id = put_dict(&a, "model", 200);
	shoal_client *ca = client_of(&a);
	shoal_object *o;
	CHECK_OK(shoal_get(ca, id, &o));
	uint64_t sig = shoal_object_signature(o);
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(ca);

	/* the name is taken in the whole cluster */
	shoal_client *cb = client_of(&b);
	shoal_id other;
	CHECK_RC(shoal_put_bytes(cb, "model", "x", 1, SHOAL_PERSIST, &other), SHOAL_EEXIST);
	CHECK_HAS(shoal_client_error(cb), "taken in the cluster");
	CHECK_HAS(shoal_client_error(cb), a.peer);
	/* a transient name stays this store's */
	CHECK_OK(shoal_put_bytes(cb, "scratch", "x", 1, 0, &other));
	shoal_disconnect(cb);

	/* a get of it elsewhere migrates it: by name, and by id */
	check_dict(&b, "model", 200, id, sig);
	CHECK_EQ(stat_of(&b).fetched, 1u);
	shoal_client *cc = client_of(&c3);
	CHECK_OK(shoal_get(cc, id, &o));
	CHECK_EQ(shoal_object_signature(o), sig);
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(cc);
	check_dict(&c3, "model", 200, id, sig);
	CHECK_EQ(stat_of(&a).sent, 2u);

	/* deleted at its owner: the name is free in the cluster again */
	ca = client_of(&a);
	CHECK_OK(shoal_delete(ca, "model"));
	shoal_disconnect(ca);
	shoal_client *cb2 = client_of(&b);
	CHECK_OK(shoal_delete(cb2, "model")); /* b's copy, a local name */
	CHECK_OK(shoal_put_bytes(cb2, "model", "y", 1, SHOAL_PERSIST, &other));
	shoal_disconnect(cb2);
	CHECK_EQ(node_stop(&c3), 0);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	etcd_kill(&e);
	cleanup();
}

/* issue 33: a name deleted at its store and bound there again to another
 * object names that one everywhere: a store holding a copy fetched under
 * the old binding fetches the new one (it served its stale copy), a name
 * dropped in the cluster is dropped from the copy too, and with the
 * registry away the copy serves under its name. */
SH_TEST_T(a_name_bound_again_names_its_new_object_everywhere, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "5");
	node_start_etcd(&b, "b", &e, "5");
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	shoal_id first = put_blob(&a, "weights", 100000, 1);
	check_blob(&b, "weights", 100000, 1);
	check_blob(&b, "weights", 100000, 1);
	CHECK_EQ(stat_of(&b).fetched, 1u); /* the registry asked, no second copy */

	shoal_client *ca = client_of(&a);
	CHECK_OK(shoal_delete(ca, "weights"));
	shoal_disconnect(ca);
	shoal_id second = put_blob(&a, "weights", 200000, 2);
	CHECK(second != first);
	check_blob(&b, "weights", 200000, 2);
	CHECK_EQ(stat_of(&b).fetched, 2u);
	shoal_client *cb = client_of(&b);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(cb, "weights", &o));
	CHECK_EQ(shoal_object_id(o), second);
	CHECK_OK(shoal_object_release(o));

	/* dropped in the cluster: not found by it here either, though the
	 * copy stays, by its id */
	ca = client_of(&a);
	CHECK_OK(shoal_delete(ca, "weights"));
	shoal_disconnect(ca);
	CHECK_RC(shoal_get_by_name(cb, "weights", &o), SHOAL_ENOENT);
	CHECK_OK(shoal_get(cb, second, &o));
	CHECK_OK(shoal_object_release(o));
	/* a name of b's own is b's, whatever the registry says (a transient
	 * object lives as long as its creator's connection) */
	shoal_id mine;
	CHECK_OK(shoal_put_bytes(cb, "scratch", "b", 1, 0, &mine));
	put_blob(&a, "scratch", 3000, 5); /* the cluster's "scratch" is a's */
	CHECK_OK(shoal_get_by_name(cb, "scratch", &o));
	CHECK_EQ(shoal_object_id(o), mine);
	CHECK_OK(shoal_object_release(o));

	put_blob(&a, "kept", 5000, 3);
	check_blob(&b, "kept", 5000, 3);
	etcd_kill(&e);
	check_blob(&b, "kept", 5000, 3);
	CHECK_OK(shoal_get_by_name(cb, "scratch", &o));
	CHECK_EQ(shoal_object_id(o), mine);
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(cb);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* A get that may not fetch (SHOAL_GET_LOCAL, Python's get without
 * fetch=True) says where the object is and copies nothing; names bound
 * and let go of with NAME are the cluster's for persistent objects. */
SH_TEST_T(a_local_get_says_where_the_object_is_and_fetches_nothing, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "5");
	node_start_etcd(&b, "b", &e, "5");
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	shoal_id id = put_blob(&a, "weights", 100000, 1);
	shoal_client *cb = client_of(&b);
	shoal_object *o;
	CHECK_RC(shoal_get_with(cb, "weights", 0, SHOAL_GET_LOCAL, &o), SHOAL_ENOENT);
	const char *err = shoal_client_error(cb);
	if (!strstr(err, a.peer) || !strstr(err, "fetch"))
		sh_test_fail(__FILE__, __LINE__, "the error names no store at %s: %s", a.peer, err);
	CHECK_RC(shoal_get_with(cb, NULL, id, SHOAL_GET_LOCAL, &o), SHOAL_ENOENT);
	CHECK(strstr(shoal_client_error(cb), a.peer) != NULL);
	CHECK_EQ(stat_of(&b).fetched, 0u);
	CHECK_RC(shoal_get_with(cb, "nowhere", 0, SHOAL_GET_LOCAL, &o), SHOAL_ENOENT);
	/* fetched on purpose, then local */
	check_blob(&b, "weights", 100000, 1);
	CHECK_EQ(stat_of(&b).fetched, 1u);
	CHECK_OK(shoal_get_with(cb, "weights", 0, SHOAL_GET_LOCAL, &o));
	CHECK_EQ(shoal_object_id(o), id);
	CHECK_OK(shoal_object_release(o));
	/* the name bound again in a: the copy here no longer answers to it */
	shoal_client *ca = client_of(&a);
	CHECK_OK(shoal_unname(ca, "weights"));
	shoal_id other;
	CHECK_OK(shoal_put_bytes(ca, NULL, "v2", 2, SHOAL_PERSIST, &other));
	CHECK_OK(shoal_name(ca, other, "weights", false));
	CHECK_RC(shoal_get_with(cb, "weights", 0, SHOAL_GET_LOCAL, &o), SHOAL_ENOENT);
	CHECK(strstr(shoal_client_error(cb), a.peer) != NULL);
	/* a name let go of in a is let go of in the cluster */
	CHECK_OK(shoal_unname(ca, "weights"));
	CHECK_RC(shoal_get_by_name(cb, "weights", &o), SHOAL_ENOENT);
	/* and one bound with NAME is the cluster's: b fetches by it */
	CHECK_OK(shoal_name(ca, id, "renamed", false));
	CHECK_OK(shoal_get_by_name(cb, "renamed", &o));
	CHECK_EQ(shoal_object_id(o), id);
	CHECK_OK(shoal_object_release(o));
	/* b's own persistent names are the cluster's too: a name taken
	 * there refuses, or moves with replace */
	CHECK_RC(shoal_name(cb, id, "taken", false), SHOAL_EEXIST); /* the copy has "renamed" */
	shoal_id mine;
	CHECK_OK(shoal_put_bytes(cb, NULL, "b's", 3, SHOAL_PERSIST, &mine));
	CHECK_RC(shoal_name(cb, mine, "renamed", false), SHOAL_EEXIST);
	shoal_disconnect(ca);
	shoal_disconnect(cb);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

SH_TEST_T(a_dead_stores_names_vanish_with_its_lease, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "3");
	node_start_etcd(&b, "b", &e, "3");
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	put_blob(&a, "x", 1000, 4);
	kill(a.pid, SIGKILL);
	waitpid(a.pid, NULL, 0);
	/* seen through the watch within the lease's time-to-live and a bit */
	int64_t t0 = shoal_now_ns();
	CHECK_EQ(STAT_UNTIL(&b, peers, 1u, 6000).peers, 1u);
	CHECK((shoal_now_ns() - t0) / MS < 5000);
	/* and its names gone with it: a get finds nothing, anywhere */
	shoal_client *cb = client_of(&b);
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(cb, "x", &o), SHOAL_ENOENT);
	/* the name is free for another store */
	shoal_id id;
	CHECK_OK(shoal_put_bytes(cb, "x", "y", 1, SHOAL_PERSIST, &id));
	shoal_disconnect(cb);
	CHECK_EQ(node_stop(&b), 0);
	etcd_kill(&e);
	cleanup();
}

SH_TEST_T(with_etcd_down_local_work_goes_on, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "10");
	node_start_etcd(&b, "b", &e, "10");
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	shoal_id big = put_blob(&a, "big", 64u << 20, 8);
	etcd_kill(&e);
	shoal_client *ca = client_of(&a);
	shoal_id id;
	/* what needs etcd fails, naming it, soon */
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_put_bytes(ca, "named", "x", 1, SHOAL_PERSIST, &id), SHOAL_EAGAIN);
	CHECK_HAS(shoal_client_error(ca), "etcd");
	CHECK((shoal_now_ns() - t0) / MS < 4000);
	t0 = shoal_now_ns();
	CHECK_RC(shoal_put_bytes(ca, "named", "x", 1, SHOAL_PERSIST, &id), SHOAL_EAGAIN);
	CHECK((shoal_now_ns() - t0) / MS < 500); /* at once, now that it is known down */
	/* local puts and gets go on */
	CHECK_OK(shoal_put_bytes(ca, "local", "x", 1, 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(ca, "big", &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_EQ(stat_of(&a).registry, 2u);
	shoal_disconnect(ca);
	/* and a migration from a named store */
	shoal_id got;
	char err[512];
	CHECK_OK(migrate(&b, "big", 0, &a, NULL, &got, err, sizeof(err)));
	CHECK_EQ(got, big);
	/* etcd back: the names work again */
	etcd_start(&e);
	CHECK_EQ(STAT_UNTIL(&a, registry, 1u, 10000).registry, 1u);
	ca = client_of(&a);
	CHECK_OK(shoal_put_bytes(ca, "named", "x", 1, SHOAL_PERSIST, &id));
	shoal_disconnect(ca);
	shoal_client *cb = client_of(&b);
	CHECK_OK(shoal_get_by_name(cb, "named", &o));
	CHECK_EQ(shoal_object_id(o), id);
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(cb);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	etcd_kill(&e);
	cleanup();
}

SH_TEST_T(a_static_peer_list_finds_what_is_elsewhere, 120)
{
	setup();
	node a, a2, b;
	node_start(&a, "a", "256M", SECRET, NULL);
	node_start(&a2, "a2", "256M", SECRET, NULL);
	shoal_id id = put_blob(&a2, "far", 300000, 12);
	/* b asks a (which has nothing), a dead address, then a2 */
	char list[256];
	snprintf(list, sizeof(list), "%s/peers", dir);
	FILE *f = fopen(list, "w");
	CHECK(f != NULL);
	fprintf(f, "# the other stores\n%s\n127.0.0.1:1\n  %s  # this one has it\n", a.peer,
		a2.peer);
	fclose(f);
	const char *x[] = {"--peers-file", list, NULL};
	node_start_argv(&b, "b", "256M", SECRET, x);
	check_blob(&b, "far", 300000, 12);
	shoal_client *cb = client_of(&b);
	shoal_object *o;
	CHECK_OK(shoal_get(cb, id, &o));
	CHECK_OK(shoal_object_release(o));
	CHECK_RC(shoal_get_by_name(cb, "nowhere", &o), SHOAL_ENOENT);
	shoal_disconnect(cb);
	CHECK_EQ(stat_of(&b).fetched, 1u);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a2), 0);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* ---- the task farm across hosts ---- */

SH_TEST_T(a_tasks_argument_comes_from_the_clients_store_not_the_controller, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "10"); /* the client's host */
	node_start_etcd(&b, "b", &e, "10"); /* the engine's host */
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	setenv("SHOAL_SECRET", SECRET + strlen("SHOAL_SECRET="), 1);
	unsetenv("SHOAL_SECRET_FILE");
	/* a sanitizer in the engine would take its signals over */
	setenv("ASAN_OPTIONS", "handle_segv=0:handle_abort=0:detect_leaks=0", 1);
	shoal_controller_opts co;
	shoal_controller_opts_init(&co);
	co.tcp = "127.0.0.1:0";
	shoal_controller *ctl;
	CHECK_OK(shoal_controller_open(&ctl, &co));
	char addr[128], engine_bin[4096], sample[4096];
	snprintf(addr, sizeof(addr), "tcp://%s", shoal_controller_tcp(ctl));
	sh_test_bin(engine_bin, sizeof(engine_bin), "tools/shoal-engine");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	pid_t epid;
	CHECK_OK(shoal_engine_spawn_store(addr, sample, engine_bin, b.sock, &epid));
	shoal_controller_stat cs;
	for (int i = 0; i < 1000; i++) {
		CHECK_OK(shoal_controller_stat_get(ctl, &cs));
		if (cs.engines == 1)
			break;
		usleep(10000);
	}
	CHECK_EQ(cs.engines, 1u);
	shoal_farm *f;
	CHECK_OK(shoal_farm_connect(&f, addr));
	CHECK_OK(shoal_farm_use_store(f, a.sock));
	shoal_vbuf *vb, *out;
	CHECK_OK(shoal_vbuf_create(&vb));
	CHECK_OK(shoal_vbuf_create(&out));
	size_t n = 64u << 20;
	unsigned char *mem = malloc(n);
	CHECK(mem != NULL);
	for (size_t i = 0; i < n; i++)
		mem[i] = (unsigned char)(i * 13 + 1);
	shoal_value *blob = shoal_v_blob(vb, mem, n);
	shoal_task id;
	CHECK_OK(shoal_farm_submit(f, "echo", blob, NULL, &id));
	const shoal_value *r;
	int rc = shoal_farm_wait(f, id, out, &r, shoal_deadline_in(60000 * MS));
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "the task: %s: %s", shoal_strerror(rc),
			     shoal_farm_error(f));
	CHECK_EQ(r->type, SHOAL_V_BLOB);
	CHECK(shoal_v_equal(r, blob));
	/* the bytes went from a to b, store to store, and never through the
	 * controller, which held nothing of them */
	CHECK_OK(shoal_controller_stat_get(ctl, &cs));
	CHECK(cs.held_peak < (1u << 20));
	CHECK(stat_of(&b).fetched_bytes >= n);
	CHECK(stat_of(&a).sent_bytes >= n);
	shoal_vbuf_free(out);
	shoal_vbuf_free(vb);
	free(mem);
	shoal_farm_close(f);
	kill(epid, SIGTERM);
	waitpid(epid, NULL, 0);
	shoal_controller_close(ctl);
	unsetenv("SHOAL_SECRET");
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	etcd_kill(&e);
	cleanup();
}

/* ---- remote clients (shoal/remote.h) ---- */

static shoal_remote *remote_of(const node *n)
{
	setenv("SHOAL_SECRET", SECRET + strlen("SHOAL_SECRET="), 1);
	shoal_remote *r;
	char why[512];
	int rc = shoal_remote_connect(&r, n->peer, shoal_deadline_in(10000 * MS), why, sizeof(why));
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "connect: %s: %s", shoal_strerror(rc), why);
	return r;
}

static int64_t far(void)
{
	return shoal_deadline_in(60000 * MS);
}

/* The blob of put_blob, as got through a remote client. */
static void check_bytes(const shoal_object *o, size_t size, int seed)
{
	const void *d;
	size_t got;
	CHECK_STR(shoal_node_type(shoal_object_root(o)), "bytes");
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &d, &got));
	CHECK_EQ(got, size);
	const unsigned char *p = d;
	for (size_t i = 0; i < size; i++)
		if (p[i] != (unsigned char)((i * 131 + (size_t)seed) & 0xff))
			sh_test_fail(__FILE__, __LINE__, "byte %zu differs", i);
}

static int count_names(const shoal_entry *e, void *ctx)
{
	char *seen = ctx;
	strcat(seen, e->name);
	strcat(seen, ",");
	return 0;
}

/* Gets by id and by name of what a local client put (bytes in the arena
 * and in a segment, a dict of tensors in both), byte for byte, into this
 * process; puts of bytes, a tensor and a dict that a local client then
 * reads there; names, delete; what it put without persist goes with it. */
SH_TEST_T(remote_client_gets_and_puts, 180)
{
	setup();
	node a;
	node_start(&a, "a", "256M", SECRET, NULL);
	shoal_id small = put_blob(&a, "small", 1000, 3);
	put_blob(&a, "big", 3u << 20, 4);
	shoal_id did = put_dict(&a, "dict", 23);
	shoal_remote *r = remote_of(&a);
	shoal_object *o;
	CHECK_OK(shoal_remote_get(r, NULL, small, far(), &o));
	CHECK_EQ(shoal_object_id(o), small);
	check_bytes(o, 1000, 3);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_remote_get(r, "big", 0, far(), &o));
	check_bytes(o, 3u << 20, 4);
	/* the bytes are this process's: writable, its own view */
	shoal_object *view;
	CHECK_OK(shoal_object_cow(o, &view));
	CHECK(view == o);
	CHECK_OK(shoal_object_release(view));
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_remote_get(r, "dict", 0, far(), &o));
	CHECK_EQ(shoal_object_id(o), did);
	const shoal_node *root = shoal_object_root(o);
	CHECK_STR(shoal_node_type(root), "tensor_dict");
	CHECK_EQ(shoal_node_nmembers(root), 23u);
	for (int t = 0; t < 23; t++) {
		char nm[64];
		snprintf(nm, sizeof(nm), "layers.%d.weight", t);
		shoal_tensor ts;
		CHECK_OK(shoal_node_tensor(shoal_node_find(root, nm), &ts));
		CHECK_EQ(ts.shape[0], elems_of(t));
		const uint32_t *p = ts.data;
		for (int64_t i = 0; i < ts.shape[0]; i++)
			CHECK_EQ(p[i], value_of(t, i));
	}
	CHECK_OK(shoal_object_release(o));
	CHECK_RC(shoal_remote_get(r, "none", 0, far(), &o), SHOAL_ENOENT);
	CHECK_HAS(shoal_remote_error(r), "no object named \"none\"");

	/* puts, read back through the store's local socket */
	size_t n = 5u << 20;
	unsigned char *mem = malloc(n);
	CHECK(mem != NULL);
	for (size_t i = 0; i < n; i++)
		mem[i] = (unsigned char)((i * 131 + 9) & 0xff);
	shoal_id pid;
	CHECK_OK(shoal_remote_put_bytes(r, "rb", mem, n, SHOAL_PERSIST, far(), &pid));
	check_blob(&a, "rb", n, 9);
	CHECK_RC(shoal_remote_put_bytes(r, "rb", mem, 10, 0, far(), NULL), SHOAL_EEXIST);
	CHECK_HAS(shoal_remote_error(r), "taken");
	float f[6] = {1, 2, 3, 4, 5, 6};
	shoal_tensor t = {
		.dtype = SHOAL_DT_F32, .ndim = 2, .shape = {2, 3}, .data = f, .nbytes = sizeof(f)};
	CHECK_OK(shoal_remote_put_tensor(r, "rt", &t, SHOAL_PERSIST, far(), NULL));
	shoal_client *c = client_of(&a);
	CHECK_OK(shoal_get_by_name(c, "rt", &o));
	shoal_tensor got;
	CHECK_OK(shoal_node_tensor(shoal_object_root(o), &got));
	CHECK(got.dtype == SHOAL_DT_F32 && got.ndim == 2 && got.shape[1] == 3);
	CHECK(memcmp(got.data, f, sizeof(f)) == 0);
	CHECK_OK(shoal_object_release(o));
	const char *keys[2] = {"w", "b"};
	int64_t big[1] = {(int64_t)(n / 4)};
	shoal_tensor ts[2] = {
		{.dtype = SHOAL_DT_U32, .ndim = 1, .shape = {big[0]}, .data = mem, .nbytes = n},
		{.dtype = SHOAL_DT_F32, .ndim = 1, .shape = {6}, .data = f, .nbytes = sizeof(f)}};
	const char *meta[2] = {"format", "pt"};
	CHECK_OK(shoal_remote_put_tensor_dict(r, "rd", keys, ts, 2, meta, 1, SHOAL_PERSIST, far(),
					      NULL));
	CHECK_OK(shoal_get_by_name(c, "rd", &o));
	const char *fmt;
	size_t fl;
	CHECK_OK(shoal_node_get_str(shoal_object_root(o), "format", &fmt, &fl));
	CHECK(fl == 2 && !memcmp(fmt, "pt", 2));
	CHECK_OK(shoal_node_tensor(shoal_node_find(shoal_object_root(o), "w"), &got));
	CHECK(got.nbytes == n && memcmp(got.data, mem, n) == 0);
	CHECK_OK(shoal_object_release(o));
	/* and back through the remote client */
	CHECK_OK(shoal_remote_get(r, "rd", 0, far(), &o));
	CHECK_OK(shoal_node_tensor(shoal_node_find(shoal_object_root(o), "b"), &got));
	CHECK(memcmp(got.data, f, sizeof(f)) == 0);
	CHECK_OK(shoal_object_release(o));
	/* a bad tensor is refused here, before a byte goes */
	shoal_tensor bad = t;
	bad.nbytes = 5;
	CHECK_RC(shoal_remote_put_tensor(r, "bad", &bad, 0, far(), NULL), SHOAL_EINVAL);

	char seen[4096] = "";
	CHECK_OK(shoal_remote_list(r, "r", count_names, seen, far()));
	CHECK_STR(seen, "rb,rd,rt,");
	CHECK_OK(shoal_remote_delete(r, "rt", 0, far()));
	CHECK_RC(shoal_get_by_name(c, "rt", &o), SHOAL_ENOENT);
	CHECK_RC(shoal_remote_delete(r, "rt", 0, far()), SHOAL_ENOENT);

	/* transient: there while the client is, gone with it */
	CHECK_OK(shoal_remote_put_bytes(r, "tr", mem, 1000, 0, far(), NULL));
	CHECK_OK(shoal_get_by_name(c, "tr", &o));
	CHECK_OK(shoal_object_release(o));
	shoal_remote_close(r);
	int rc = 0;
	for (int i = 0; i < 500 && (rc = shoal_get_by_name(c, "tr", &o)) == 0; i++) {
		CHECK_OK(shoal_object_release(o));
		usleep(10000);
	}
	CHECK_EQ(rc, SHOAL_ENOENT);
	shoal_disconnect(c);
	free(mem);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

SH_TEST(remote_client_with_a_wrong_secret_is_refused)
{
	setup();
	node a;
	node_start(&a, "a", "64M", SECRET, NULL);
	setenv("SHOAL_SECRET", "not-the-clusters-secret-at-all", 1);
	shoal_remote *r = NULL;
	char why[512];
	CHECK_RC(shoal_remote_connect(&r, a.peer, shoal_deadline_in(10000 * MS), why, sizeof(why)),
		 SHOAL_EACCES);
	CHECK(r == NULL);
	CHECK_HAS(why, "secret");
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* A link of the peer protocol with the right secret, speaking raw frames. */
static sh_channel *raw_link(const node *n, int *fd)
{
	setenv("SHOAL_SECRET", SECRET + strlen("SHOAL_SECRET="), 1);
	sh_channel *ch;
	char why[256];
	CHECK_OK(sh_tcp_connect_auth(n->peer, SH_PEER_PROTO, shoal_deadline_in(10000 * MS), fd, &ch,
				     why, sizeof(why)));
	return ch;
}

static void raw_send(sh_channel *ch, uint16_t op, const void *body, size_t len)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	CHECK_OK(sh_wbuf_append(&w, body, len));
	sh_frame f = {.op = op, .seq = 1};
	CHECK_OK(sh_wbuf_frame_end(&w, &f));
	CHECK_OK(sh_channel_write(ch, w.p, w.len, false, shoal_deadline_in(10000 * MS)));
	sh_wbuf_fini(&w);
}

/* The status of the store's answer to op (0, or its failure). */
static int raw_answer(sh_channel *ch, uint16_t op)
{
	unsigned char *in = NULL;
	size_t cap = 0, len;
	int rc = sh_channel_read_frame(ch, &in, &cap, &len, 1u << 20, false,
				       shoal_deadline_in(10000 * MS));
	if (rc == 0) {
		sh_frame f;
		char why[200];
		CHECK_OK(sh_frame_decode(in, len, &f, why, sizeof(why)));
		CHECK_EQ(f.op, op);
		rc = f.status;
	}
	if (in)
		shoal_free(in, cap);
	return rc;
}

/* A PUT of a "bytes" object of size bytes at offset off of region bytes,
 * packed as a remote client packs one (the tree may lie). */
static void raw_put(sh_channel *ch, uint64_t region, uint64_t off, uint64_t size)
{
	sh_blobref b = {.seg = 1, .off = off, .size = size};
	shoal_node n = {.type = "bytes", .nblobs = 1, .blobs = &b};
	sh_wbuf w;
	sh_wbuf_init(&w);
	CHECK_OK(sh_peer_pack_put(&w, "hostile", 0, region, &n));
	CHECK_OK(sh_channel_write(ch, w.p, w.len, false, shoal_deadline_in(10000 * MS)));
	sh_wbuf_fini(&w);
}

static void wait_used(const node *n, uint64_t used, uint64_t objects)
{
	shoal_store_stat st = stat_of(n);
	for (int i = 0; i < 1000 && (st.used != used || st.objects != objects); i++) {
		usleep(10000);
		st = stat_of(n);
	}
	CHECK_EQ(st.used, used);
	CHECK_EQ(st.objects, objects);
}

/* A client with the secret that misbehaves: garbage after the handshake,
 * a PUT of a tree that lies (a blob outside its region), of more than the
 * store has, a frame over the bound, an op no store knows, and a PUT
 * that stops halfway (the link cut): refused, answered or cut, the
 * store serving on, no object and no room left behind. */
SH_TEST_T(remote_hostile_clients_leave_nothing, 120)
{
	setup();
	node a;
	node_start(&a, "a", "64M", SECRET, NULL);
	put_blob(&a, "x", 100000, 1);
	shoal_store_stat st0 = stat_of(&a);
	int fd;

	sh_channel *ch = raw_link(&a, &fd);
	raw_send(ch, 99, "\x90", 1);
	CHECK_EQ(raw_answer(ch, 99), SHOAL_ENOTSUP);
	/* a blob past the region's end */
	raw_put(ch, 1000, 900, 200);
	CHECK_EQ(raw_answer(ch, SH_PEER_PUT), SHOAL_EBADMSG);
	/* more than the store's room */
	raw_put(ch, 1ull << 40, 0, 1ull << 40);
	CHECK_EQ(raw_answer(ch, SH_PEER_PUT), SHOAL_ENOSPC);
	/* a region past any store's */
	raw_put(ch, UINT64_MAX, 0, 10);
	CHECK_EQ(raw_answer(ch, SH_PEER_PUT), SHOAL_EBADMSG);
	/* not msgpack at all */
	raw_send(ch, SH_PEER_PUT, "\xc1\xc1\xc1", 3);
	CHECK_EQ(raw_answer(ch, SH_PEER_PUT), SHOAL_EBADMSG);
	raw_send(ch, SH_PEER_DELETE, "\x91\xc0", 2);
	CHECK_EQ(raw_answer(ch, SH_PEER_DELETE), SHOAL_EBADMSG);
	/* a frame header announcing more than the bound: the link is cut */
	unsigned char hdr[SH_FRAME_HDR] = {0};
	sh_frame f = {.op = SH_PEER_PUT, .seq = 1, .body_len = SH_PEER_REQ_MAX};
	sh_frame_encode(&f, hdr);
	CHECK_OK(sh_channel_write(ch, hdr, sizeof(hdr), false, shoal_deadline_in(10000 * MS)));
	CHECK(raw_answer(ch, SH_PEER_PUT) != 0);
	sh_channel_free(ch);
	close(fd);

	/* half a PUT's bytes, then gone */
	ch = raw_link(&a, &fd);
	raw_put(ch, 8u << 20, 0, 8u << 20);
	CHECK_EQ(raw_answer(ch, SH_PEER_PUT), 0);
	unsigned char *half = calloc(1, 4u << 20);
	CHECK(half != NULL);
	sh_bulk_part part = {.p = half, .fd = -1, .len = 4u << 20};
	CHECK_OK(sh_channel_send_bulk(ch, &part, 1, shoal_deadline_in(10000 * MS)));
	/* the room is held while the bytes come */
	shoal_store_stat mid = stat_of(&a);
	CHECK(mid.used >= st0.used + (8u << 20));
	sh_channel_free(ch);
	close(fd);
	free(half);
	wait_used(&a, st0.used, st0.objects);

	/* plain garbage after the handshake */
	ch = raw_link(&a, &fd);
	char junk[256];
	memset(junk, 0x5a, sizeof(junk));
	CHECK_OK(sh_channel_write(ch, junk, sizeof(junk), false, shoal_deadline_in(10000 * MS)));
	CHECK(raw_answer(ch, 0) != 0);
	sh_channel_free(ch);
	close(fd);

	/* it serves on */
	shoal_remote *r = remote_of(&a);
	shoal_object *o;
	CHECK_OK(shoal_remote_get(r, "x", 0, far(), &o));
	check_bytes(o, 100000, 1);
	CHECK_OK(shoal_object_release(o));
	shoal_remote_close(r);
	wait_used(&a, st0.used, st0.objects);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

/* A store of peer protocol 1 closes the link at PUT: the remote client
 * says that is what such a store does, and the link is over. A source
 * that answers a get of "model" with another object fails the get, saying
 * what came. */
SH_TEST(remote_client_names_an_old_store_and_a_lying_one)
{
	setenv("SHOAL_SECRET", SECRET + strlen("SHOAL_SECRET="), 1);
	liar l = {.answer_name = "model", .old = true};
	liar_run(&l);
	shoal_remote *r;
	char why[512];
	CHECK_OK(shoal_remote_connect(&r, l.addr, shoal_deadline_in(10000 * MS), why, sizeof(why)));
	CHECK_RC(shoal_remote_put_bytes(r, "x", "abc", 3, 0, far(), NULL), SHOAL_ECLOSED);
	CHECK_HAS(shoal_remote_error(r), "peer protocol 1");
	CHECK_HAS(shoal_remote_error(r), "PUT");
	shoal_object *o;
	CHECK_RC(shoal_remote_get(r, "model", 0, far(), &o), SHOAL_ECLOSED);
	CHECK_HAS(shoal_remote_error(r), "connect again");
	shoal_remote_close(r);
	liar_end(&l);

	liar_start(&l, "other", 0);
	CHECK_OK(shoal_remote_connect(&r, l.addr, shoal_deadline_in(10000 * MS), why, sizeof(why)));
	CHECK_RC(shoal_remote_get(r, "model", 0, far(), &o), SHOAL_EPROTO);
	CHECK_HAS(shoal_remote_error(r), "expected the object asked for");
	shoal_remote_close(r);
	liar_end(&l);
}

/* A remote put of a persistent named object into a store whose names are
 * the cluster's takes the name in the registry: another store gets it by
 * that name; a name the cluster has already is refused, and nothing stays. */
SH_TEST_T(remote_persistent_put_names_in_the_registry, 180)
{
	setup();
	etcd_proc e = {0};
	etcd_start(&e);
	node a, b;
	node_start_etcd(&a, "a", &e, "5");
	node_start_etcd(&b, "b", &e, "5");
	CHECK_EQ(STAT_UNTIL(&b, peers, 2u, 10000).peers, 2u);
	shoal_store_stat st0 = stat_of(&a);
	shoal_remote *r = remote_of(&a);
	shoal_id id;
	CHECK_OK(shoal_remote_put_bytes(r, "remote-named", "abcdef", 6, SHOAL_PERSIST, far(), &id));
	shoal_client *cb = client_of(&b);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(cb, "remote-named", &o)); /* through the registry */
	CHECK_EQ(shoal_object_id(o), id);
	CHECK_OK(shoal_object_release(o));
	put_blob(&b, "b-has-it", 1000, 3);
	CHECK_RC(shoal_remote_put_bytes(r, "b-has-it", "x", 1, SHOAL_PERSIST, far(), NULL),
		 SHOAL_EEXIST);
	shoal_remote_close(r);
	shoal_store_stat st = stat_of(&a);
	CHECK_EQ(st.objects, st0.objects + 1); /* the refused one did not stay */
	shoal_disconnect(cb);
	CHECK_EQ(node_stop(&b), 0);
	CHECK_EQ(node_stop(&a), 0);
	etcd_kill(&e);
	cleanup();
}

/* A remote put of a persistent object into a store that keeps them in a
 * state directory writes its file, as a local put does: the object comes
 * back when the store starts again; a transient one does not. */
SH_TEST(remote_persistent_put_into_a_state_directory_comes_back)
{
	setup();
	char sd[128], opt[160];
	snprintf(sd, sizeof(sd), "%s/state", dir);
	snprintf(opt, sizeof(opt), "--state-dir=%s", sd);
	node a;
	node_start(&a, "a", "64M", SECRET, opt);
	shoal_remote *r = remote_of(&a);
	CHECK_OK(shoal_remote_put_bytes(r, "p", "abc", 3, SHOAL_PERSIST, far(), NULL));
	CHECK_OK(shoal_remote_put_bytes(r, "t", "xyz", 3, 0, far(), NULL));
	shoal_remote_close(r);
	CHECK_EQ(node_stop(&a), 0);
	node_start(&a, "a-again", "64M", SECRET, opt); /* (a log of its own: not a's old one) */
	r = remote_of(&a);
	shoal_object *o;
	CHECK_OK(shoal_remote_get(r, "p", 0, far(), &o));
	const void *d;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &d, &n));
	CHECK(n == 3 && memcmp(d, "abc", 3) == 0);
	CHECK_OK(shoal_object_release(o));
	CHECK_RC(shoal_remote_get(r, "t", 0, far(), &o), SHOAL_ENOENT);
	shoal_remote_close(r);
	CHECK_EQ(node_stop(&a), 0);
	cleanup();
}

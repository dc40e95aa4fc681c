/* shoal-test: threaded */
/* Tests of spilling (shoald --spill-dir) with real shoald processes and a
 * spill directory on a disk: one client puts several times the store's
 * size, large objects and small ones, and gets every one back byte for
 * byte under its id, name, type and signature; small objects share a few
 * files; an object a client holds is never spilled; a spill file that was
 * corrupted or cut short is never served; the directory is checked as the
 * state directory is (another uid's, a symlink, tmpfs refused); a restore
 * lands in the spare its spill left, and no spill file stays cached. */
#include "test.h"
#include "store_blob.h"

#include "shm/shm.h"
#include "store/record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct spilld {
	pid_t pid;
	char dir[64], sock[128], spill[128], log[128];
} spilld;

/* The socket and log in /tmp, the spill directory on a disk: /var/tmp is
 * one wherever /tmp is tmpfs. */
static void spilld_init(spilld *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/var/tmp/shoal-spill-test-XXXXXX");
	CHECK(mkdtemp(d->dir) != NULL);
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->spill, sizeof(d->spill), "%s/spill", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
}

/* shoald on d with --size size and --spill-dir d->spill (or dir when
 * not NULL), extra arguments after; 0 once it serves, else its status. */
static int spilld_start_with(spilld *d, size_t size, const char *dir, const char *const *extra)
{
	char sz[32];
	snprintf(sz, sizeof(sz), "%zu", size);
	const char *head[] = {"--socket",	    d->sock,	"--size", sz,  "--spill-dir",
			      dir ? dir : d->spill, "--spares", "0",	  NULL};
	return shoald_start(head, extra, d->log, &d->pid);
}

static void spilld_start(spilld *d, size_t size)
{
	CHECK_EQ(spilld_start_with(d, size, NULL, NULL), 0);
}

static void spilld_fini(spilld *d)
{
	if (d->pid > 0) {
		CHECK_EQ(kill(d->pid, SIGTERM), 0);
		int st;
		CHECK(waitpid(d->pid, &st, 0) == d->pid);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			sh_test_fail(__FILE__, __LINE__, "shoald: status 0x%x", st);
	}
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	CHECK_EQ(system(cmd), 0);
}

/* Puts n objects PREFIX-K of size bytes (pattern K), ids[k] their ids. */
static void put_many(shoal_client *c, const char *prefix, int n, size_t size, shoal_id *ids)
{
	char name[32];
	for (int k = 0; k < n; k++) {
		snprintf(name, sizeof(name), "%s-%d", prefix, k);
		ids[k] = put_pattern(c, name, k, size, 0);
	}
}

/* Gets name and checks it: its id, type, size and every byte. */
static void check_pattern(shoal_client *c, const char *name, shoal_id id, int k, size_t size)
{
	shoal_object *o;
	int rc = shoal_get_by_name(c, name, &o);
	if (rc)
		sh_test_fail(__FILE__, __LINE__, "get %s: %s: %s", name, shoal_strerror(rc),
			     shoal_client_error(c));
	CHECK_EQ(shoal_object_id(o), id);
	CHECK_EQ(shoal_object_signature(o), id); /* a put's signature is its id */
	CHECK_STR(shoal_node_type(shoal_object_root(o)), "bytes");
	const void *data;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &data, &n));
	CHECK_EQ(n, size);
	const unsigned char *b = data;
	for (size_t i = 0; i < size; i++)
		if (b[i] != pattern(k, i))
			sh_test_fail(__FILE__, __LINE__, "%s: byte %zu is %u, expected %u", name, i,
				     b[i], pattern(k, i));
	CHECK_OK(shoal_object_release(o));
}

/* Calls fn with the path of every spill file in dir; how many there are. */
static int each_spill_file(const char *dir, void (*fn)(const char *path, void *arg), void *arg)
{
	DIR *d = opendir(dir);
	CHECK(d != NULL);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (l < 7 || strcmp(e->d_name + l - 6, ".spill") != 0)
			continue;
		char p[400];
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		fn(p, arg);
		n++;
	}
	closedir(d);
	return n;
}

static void add_size(const char *path, void *arg)
{
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	*(uint64_t *)arg += (uint64_t)st.st_size;
}

/* The spill files in dir, and their bytes. */
static int spill_files(const char *dir, uint64_t *bytes)
{
	*bytes = 0;
	return each_spill_file(dir, add_size, bytes);
}

SH_TEST(one_client_puts_three_times_the_store_and_gets_all_back)
{
	spilld d;
	spilld_init(&d);
	enum { N = 24, SIZE = 2 << 20 };
	spilld_start(&d, (size_t)16 << 20);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id ids[N];
	char name[32];
	put_many(c, "big", N, SIZE, ids);
	shoal_store_stat st = stat_of(c);
	CHECK(st.used <= st.capacity);
	CHECK(st.spilled >= N - 8);
	CHECK(st.spill_objects >= N - 8);
	CHECK(st.spill_bytes >= (uint64_t)(N - 8) * SIZE);
	uint64_t on_disk;
	CHECK(spill_files(d.spill, &on_disk) >= 1);
	CHECK_EQ(on_disk, st.spill_file_bytes);
	/* every one back, the oldest first: each get may spill others */
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "big-%d", k);
		check_pattern(c, name, ids[k], k, SIZE);
	}
	st = stat_of(c);
	CHECK(st.restored >= N - 8);
	CHECK(st.restored_bytes >= (uint64_t)(N - 8) * SIZE);
	CHECK(st.spill_rate > 0 && st.restore_rate > 0);
	/* and again: a second spill of an object writes nothing */
	uint64_t written = st.spilled;
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "big-%d", k);
		check_pattern(c, name, ids[k], k, SIZE);
	}
	CHECK_EQ(stat_of(c).spilled, written);
	/* a delete takes the object's record with it: the files go */
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "big-%d", k);
		CHECK_OK(shoal_delete(c, name));
	}
	st = stat_of(c);
	CHECK_EQ(st.spill_objects, 0);
	CHECK_EQ(st.spill_file_bytes, 0);
	CHECK_EQ(spill_files(d.spill, &on_disk), 0);
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

SH_TEST(small_objects_share_files_and_come_back_alone)
{
	spilld d;
	spilld_init(&d);
	enum { N = 6000, SIZE = 4000 };
	spilld_start(&d, (size_t)4 << 20);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id *ids = malloc(N * sizeof(*ids));
	char name[32];
	put_many(c, "small", N, SIZE, ids);
	shoal_store_stat st = stat_of(c);
	CHECK(st.spill_objects > N / 2);
	/* fused: a file of many objects, not a file each */
	uint64_t bytes;
	int files = spill_files(d.spill, &bytes);
	CHECK(files >= 1 && files <= 2);
	CHECK(bytes < (uint64_t)N * (SIZE + 512)); /* tight: no page each */
	/* one from the middle of a file comes back alone */
	uint64_t restored = st.restored_bytes;
	check_pattern(c, "small-100", ids[100], 100, SIZE);
	st = stat_of(c);
	CHECK_EQ(st.restored, 1);
	CHECK(st.restored_bytes - restored < 8192);
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "small-%d", k);
		check_pattern(c, name, ids[k], k, SIZE);
	}
	free(ids);
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

SH_TEST(a_held_object_is_not_spilled)
{
	spilld d;
	spilld_init(&d);
	enum { SIZE = 2 << 20 };
	spilld_start(&d, (size_t)16 << 20);
	shoal_client *c, *reader;
	CHECK_OK(shoal_connect(&c, d.sock));
	CHECK_OK(shoal_connect(&reader, d.sock));
	shoal_id held = put_pattern(c, "held", 0, SIZE, 0);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(reader, "held", &o));
	char name[32];
	for (int k = 1; k < 20; k++) {
		snprintf(name, sizeof(name), "other-%d", k);
		put_pattern(c, name, k, SIZE, 0);
	}
	shoal_store_stat st = stat_of(c);
	CHECK(st.spilled >= 10);
	/* it was in memory all along: getting it brings nothing back */
	check_pattern(c, "held", held, 0, SIZE);
	CHECK_EQ(stat_of(c).restored, st.restored);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(reader));
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

static void keep_path(const char *path, void *arg)
{
	snprintf(arg, 400, "%s", path);
}

/* The only spill file in dir (the last listed, were there more), into p. */
static void the_spill_file(const char *dir, char p[400])
{
	CHECK(each_spill_file(dir, keep_path, p) >= 1);
}

/* Flips a byte at off of the only spill file in dir. */
static void corrupt(const char *dir, uint64_t off)
{
	char p[400];
	the_spill_file(dir, p);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	unsigned char b;
	CHECK_EQ(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x40;
	CHECK_EQ(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

SH_TEST(a_corrupt_spill_record_is_never_served)
{
	spilld d;
	spilld_init(&d);
	enum { SIZE = 2 << 20 };
	spilld_start(&d, (size_t)8 << 20);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	/* the first spill writes "a" then "b" into the first file */
	shoal_id ids[8];
	char name[32];
	for (int k = 0; k < 8; k++) {
		snprintf(name, sizeof(name), "o-%d", k);
		ids[k] = put_pattern(c, name, k, SIZE, 0);
	}
	CHECK(stat_of(c).spill_objects >= 4);
	/* a byte in the middle of o-0's bytes (its record is the first) */
	corrupt(d.spill, 4096 + SIZE / 2);
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(c, "o-0", &o), SHOAL_EIO);
	CHECK_HAS(shoal_client_error(c), "do not match its hash");
	/* never served, and gone: not half an object */
	CHECK_RC(shoal_get_by_name(c, "o-0", &o), SHOAL_ENOENT);
	CHECK_HAS(read_text(d.log), "restoring object");
	for (int k = 1; k < 8; k++) {
		snprintf(name, sizeof(name), "o-%d", k);
		check_pattern(c, name, ids[k], k, SIZE);
	}
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

/* A uid no account has: nothing of anyone's is borrowed. */
static uid_t unused_uid(void)
{
	for (uid_t u = 4000123;; u++)
		if (!getpwuid(u))
			return u;
}

SH_TEST(the_spill_directory_is_checked)
{
	spilld d;
	spilld_init(&d);
	/* of another uid: refused, whoever we are */
	CHECK_EQ(mkdir(d.spill, 0700), 0);
	if (geteuid() == 0) {
		CHECK_EQ(chown(d.spill, unused_uid(), unused_uid()), 0);
		CHECK(spilld_start_with(&d, 16 << 20, NULL, NULL) != 0);
		CHECK_HAS(read_text(d.log), "spill directory");
		CHECK_EQ(chown(d.spill, 0, 0), 0);
	}
	/* others may enter it: refused */
	CHECK_EQ(chmod(d.spill, 0755), 0);
	CHECK(spilld_start_with(&d, 16 << 20, NULL, NULL) != 0);
	CHECK_EQ(chmod(d.spill, 0700), 0);
	/* a symlink to it: refused, not followed */
	char link[200];
	snprintf(link, sizeof(link), "%s/link", d.dir);
	CHECK_EQ(symlink(d.spill, link), 0);
	CHECK(spilld_start_with(&d, 16 << 20, link, NULL) != 0);
	/* tmpfs: refused, unless allowed */
	char shm[64];
	snprintf(shm, sizeof(shm), "/dev/shm/shoal-spill-XXXXXX");
	CHECK(mkdtemp(shm) != NULL);
	CHECK(spilld_start_with(&d, 16 << 20, shm, NULL) != 0);
	CHECK_HAS(read_text(d.log), "is on tmpfs");
	const char *any[] = {"--spill-any-fs", NULL};
	CHECK_EQ(spilld_start_with(&d, 16 << 20, shm, any), 0);
	CHECK_EQ(kill(d.pid, SIGTERM), 0);
	CHECK(waitpid(d.pid, NULL, 0) == d.pid);
	d.pid = 0;
	rmdir(shm);
	/* what an earlier store left is removed at start */
	char left[200];
	snprintf(left, sizeof(left), "%s/00000000.spill", d.spill);
	int fd = open(left, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "x", 1), 1);
	close(fd);
	spilld_start(&d, 16 << 20);
	CHECK(access(left, F_OK) != 0);
	spilld_fini(&d);
}

/* Gets name expecting it absent. */
static void check_gone(shoal_client *c, const char *name)
{
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(c, name, &o), SHOAL_ENOENT);
}

/* Waits (a bound of 60 s) until the store has spilled at least n objects
 * (the spill has no event a client can wait on). */
static void wait_spilled(const spilld *d, uint64_t n)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d->sock));
	int64_t end = shoal_now_ns() + 60 * 1000000000ll;
	while (stat_of(c).spilled < n) {
		CHECK(shoal_now_ns() < end);
		usleep(1000);
	}
	CHECK_OK(shoal_disconnect(c));
}

static void kill9(spilld *d)
{
	CHECK_EQ(kill(d->pid, SIGKILL), 0);
	int st;
	CHECK(waitpid(d->pid, &st, 0) == d->pid);
	CHECK(WIFSIGNALED(st));
	d->pid = 0;
}

/* A client process putting persistent objects p-K and transient ones t-K
 * (SIZE bytes, pattern K) until the store goes; it writes K to fd once
 * p-K's put returned. */
static void putter(const char *sock, int n, size_t size, int fd)
{
	shoal_client *c;
	if (shoal_connect(&c, sock) != 0)
		_exit(1);
	unsigned char *b = malloc(size);
	char name[32];
	for (int k = 0; k < n; k++) {
		for (size_t i = 0; i < size; i++)
			b[i] = pattern(k, i);
		snprintf(name, sizeof(name), "t-%d", k);
		if (shoal_put_bytes(c, name, b, size, 0, NULL) != 0)
			_exit(0);
		snprintf(name, sizeof(name), "p-%d", k);
		if (shoal_put_bytes(c, name, b, size, SHOAL_PERSIST, NULL) != 0)
			_exit(0);
		if (write(fd, &k, sizeof(k)) != sizeof(k))
			_exit(1);
	}
	_exit(0);
}

SH_TEST(kill9_during_spills_and_restores_loses_no_persistent_object)
{
	spilld d;
	spilld_init(&d);
	enum { N = 48, SIZE = 1 << 20 };
	char state[128];
	snprintf(state, sizeof(state), "%s/state", d.dir);
	const char *with_state[] = {"--state-dir", state, NULL};
	CHECK_EQ(spilld_start_with(&d, (size_t)8 << 20, NULL, with_state), 0);
	int p[2];
	CHECK_EQ(pipe(p), 0);
	pid_t kid = fork();
	if (kid == 0) {
		close(p[0]);
		putter(d.sock, N, SIZE, p[1]);
	}
	close(p[1]);
	/* killed while spilling: transient objects are being written out */
	wait_spilled(&d, 6);
	kill9(&d);
	int st;
	CHECK(waitpid(kid, &st, 0) == kid);
	bool put[N] = {false};
	int k, confirmed = 0;
	while (read(p[0], &k, sizeof(k)) == sizeof(k)) {
		CHECK(k >= 0 && k < N);
		put[k] = true;
		confirmed++;
	}
	close(p[0]);
	CHECK(confirmed >= 2);
	/* every persistent object sealed is served again; no transient one */
	CHECK_EQ(spilld_start_with(&d, (size_t)8 << 20, NULL, with_state), 0);
	uint64_t left;
	CHECK_EQ(spill_files(d.spill, &left), 0);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	CHECK(stat_of(c).spill_objects >= (uint64_t)confirmed); /* back at their first get */
	char name[32];
	for (k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "t-%d", k);
		check_gone(c, name);
		if (!put[k])
			continue;
		shoal_object *o;
		snprintf(name, sizeof(name), "p-%d", k);
		CHECK_OK(shoal_get_by_name(c, name, &o));
		CHECK_OK(shoal_object_release(o));
	}
	CHECK_OK(shoal_disconnect(c));
	/* killed while bringing them back */
	kid = fork();
	if (kid == 0) {
		shoal_client *r;
		if (shoal_connect(&r, d.sock) != 0)
			_exit(1);
		for (int i = N - 1; i >= 0; i--) {
			char nm[32];
			shoal_object *o;
			snprintf(nm, sizeof(nm), "p-%d", i);
			if (shoal_get_by_name(r, nm, &o) == 0)
				shoal_object_release(o);
		}
		_exit(0);
	}
	CHECK_OK(shoal_connect(&c, d.sock));
	int64_t end = shoal_now_ns() + 60 * 1000000000ll;
	while (stat_of(c).restored < 2 && shoal_now_ns() < end)
		usleep(500);
	shoal_disconnect(c);
	kill9(&d);
	CHECK(waitpid(kid, &st, 0) == kid);
	CHECK_EQ(spilld_start_with(&d, (size_t)8 << 20, NULL, with_state), 0);
	CHECK_OK(shoal_connect(&c, d.sock));
	for (k = 0; k < N; k++) {
		if (!put[k])
			continue;
		snprintf(name, sizeof(name), "p-%d", k);
		shoal_object *o;
		CHECK_OK(shoal_get_by_name(c, name, &o));
		const void *data;
		size_t n;
		CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &data, &n));
		CHECK_EQ(n, SIZE);
		const unsigned char *b = data;
		for (size_t i = 0; i < SIZE; i += 997)
			if (b[i] != pattern(k, i))
				sh_test_fail(__FILE__, __LINE__, "%s: byte %zu", name, i);
		CHECK_OK(shoal_object_release(o));
	}
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

SH_TEST(a_full_disk_fails_the_spill_and_loses_nothing)
{
	/* A disk of 5 MiB: a tmpfs with a size limit, in a mount namespace
	 * of this test's own (nothing outside sees it), standing in for a
	 * full disk in this test only. */
	if (geteuid() != 0)
		sh_test_skip("mounting a small tmpfs needs root (a mount namespace)");
	if (unshare(CLONE_NEWNS) != 0)
		sh_test_skip("unshare(CLONE_NEWNS): %s", strerror(errno));
	CHECK_EQ(mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
	spilld d;
	spilld_init(&d);
	CHECK_EQ(mkdir(d.spill, 0700), 0);
	CHECK_EQ(mount("tmpfs", d.spill, "tmpfs", 0, "size=5m,mode=0700"), 0);
	enum { N = 12, SIZE = 2 << 20 };
	const char *any[] = {"--spill-any-fs", NULL};
	CHECK_EQ(spilld_start_with(&d, (size_t)8 << 20, NULL, any), 0);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id ids[N];
	bool in[N] = {false};
	char name[32];
	int refused = 0;
	unsigned char *b = malloc(SIZE);
	for (int k = 0; k < N; k++) {
		for (size_t i = 0; i < SIZE; i++)
			b[i] = pattern(k, i);
		snprintf(name, sizeof(name), "o-%d", k);
		int rc = shoal_put_bytes(c, name, b, SIZE, 0, &ids[k]);
		if (rc == 0) {
			in[k] = true;
			continue;
		}
		/* the store is full once the disk is: said, not crashed */
		CHECK_EQ(rc, SHOAL_ENOSPC);
		CHECK_HAS(shoal_client_error(c), "store full");
		refused++;
	}
	free(b);
	CHECK(refused > 0);
	CHECK_HAS(read_text(d.log), "no space left");
	CHECK_HAS(read_text(d.log), "stay in memory");
	/* What was put is all there, spilled or not: those in memory first;
	 * a spilled one comes back once they leave it room (the disk being
	 * full, nothing more spills for it). */
	bool later[N] = {false};
	int nlater = 0;
	for (int k = 0; k < N; k++) {
		if (!in[k])
			continue;
		snprintf(name, sizeof(name), "o-%d", k);
		shoal_object *o;
		int rc = shoal_get_by_name(c, name, &o);
		if (rc == SHOAL_ENOSPC) {
			CHECK_HAS(shoal_client_error(c), "to bring it back");
			later[k] = true;
			nlater++;
			continue;
		}
		CHECK_OK(rc);
		CHECK_OK(shoal_object_release(o));
		check_pattern(c, name, ids[k], k, SIZE);
	}
	for (int k = 0; k < N && nlater; k++)
		if (in[k] && !later[k]) {
			snprintf(name, sizeof(name), "o-%d", k);
			CHECK_OK(shoal_delete(c, name));
		}
	for (int k = 0; k < N; k++) {
		if (!later[k])
			continue;
		snprintf(name, sizeof(name), "o-%d", k);
		check_pattern(c, name, ids[k], k, SIZE);
	}
	CHECK_OK(shoal_disconnect(c));
	CHECK_EQ(kill(d.pid, SIGTERM), 0);
	int st;
	CHECK(waitpid(d.pid, &st, 0) == d.pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	d.pid = 0;
	CHECK_EQ(umount(d.spill), 0);
	/* --spill-limit fails the same way, on a disk with room */
	const char *limit[] = {"--spill-limit", "5M", NULL};
	CHECK_EQ(spilld_start_with(&d, (size_t)8 << 20, NULL, limit), 0);
	CHECK_OK(shoal_connect(&c, d.sock));
	refused = 0;
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "l-%d", k);
		int rc = shoal_put_bytes(c, name, "x", 1, 0, NULL);
		CHECK_OK(rc);
		unsigned char *big = calloc(1, SIZE);
		rc = shoal_put_bytes(c, name + 1, big, SIZE, 0, NULL); /* "-K": unnamed */
		free(big);
		refused += rc == SHOAL_ENOSPC;
	}
	CHECK(refused > 0);
	CHECK_HAS(read_text(d.log), "the spill limit");
	uint64_t files;
	spill_files(d.spill, &files);
	CHECK(files <= (uint64_t)5 << 20);
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

SH_TEST(a_truncated_spill_file_is_never_served)
{
	spilld d;
	spilld_init(&d);
	enum { N = 8, SIZE = 2 << 20 };
	spilld_start(&d, (size_t)8 << 20);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id ids[N];
	char name[32];
	put_many(c, "o", N, SIZE, ids);
	uint64_t spilled = stat_of(c).spill_objects;
	CHECK(spilled >= 3);
	/* cut in the middle of the first record's bytes: every record is
	 * short or gone */
	char p[400];
	the_spill_file(d.spill, p);
	CHECK_EQ(truncate(p, 4096 + SIZE / 2), 0);
	uint64_t refused = 0;
	for (int k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "o-%d", k);
		shoal_object *o;
		int rc = shoal_get_by_name(c, name, &o);
		if (rc == SHOAL_EIO) {
			refused++;
			continue;
		}
		CHECK_OK(rc);
		CHECK_OK(shoal_object_release(o));
		check_pattern(c, name, ids[k], k, SIZE);
	}
	/* those spilled before the cut at least (the spiller may have gone on
	 * a little after the puts); never one in memory */
	CHECK(refused >= spilled && refused < N);
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

typedef struct squat {
	const char *spill; /* root's: "another user's" for the one who runs this */
} squat;

/* As an unprivileged uid: a store of one's own refuses a spill directory
 * another user (root) made. */
static void squatted_as_user(void *arg)
{
	const squat *q = arg;
	spilld d = {0};
	snprintf(d.dir, sizeof(d.dir), "/tmp/shoal-spill-user-XXXXXX");
	CHECK(mkdtemp(d.dir) != NULL);
	snprintf(d.sock, sizeof(d.sock), "%s/s.sock", d.dir);
	snprintf(d.log, sizeof(d.log), "%s/log", d.dir);
	d.spill[0] = 0;
	CHECK(spilld_start_with(&d, 16 << 20, q->spill, NULL) != 0);
	CHECK_HAS(read_text(d.log), "spill directory");
	d.pid = 0;
	spilld_fini(&d);
}

SH_TEST(a_spill_directory_squatted_by_another_user_is_refused)
{
	if (geteuid() != 0)
		sh_test_skip("needs root: to be another user for an unprivileged one");
	spilld d;
	spilld_init(&d);
	CHECK_EQ(chmod(d.dir, 0755), 0); /* the unprivileged uid reaches the path */
	CHECK_EQ(mkdir(d.spill, 0700), 0);
	squat q = {.spill = d.spill};
	CHECK_EQ(sh_test_run_as(unused_uid(), NULL, 0, squatted_as_user, &q), 0);
	spilld_fini(&d);
}

SH_TEST(a_rewritten_spill_record_cannot_overflow_the_store)
{
	/* Whoever can write the directory can write a record whose hashes
	 * hold (they are a checksum, not a seal): one that says it has more
	 * segments than the object had must be refused before a byte of it
	 * is read into arrays sized for the object's. */
	spilld d;
	spilld_init(&d);
	enum { N = 8, SIZE = 2 << 20 };
	spilld_start(&d, (size_t)8 << 20);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id ids[N];
	char name[32];
	put_many(c, "o", N, SIZE, ids);
	CHECK(stat_of(c).spill_objects >= 3);
	/* o-0's record is the file's first: rewritten with three segments */
	int segs[3];
	uint64_t sizes[3] = {4096, 4096, 4096};
	for (int i = 0; i < 3; i++) {
		CHECK_OK(sh_memfd_create("seg", 4096, true, &segs[i]));
		CHECK_OK(sh_memfd_seal(segs[i]));
	}
	static const unsigned char meta[] = {0x92, 0xc0, 0xc0}; /* [nil, nil] */
	sh_state_rec r = {.id = ids[0],
			  .sig = ids[0],
			  .meta = meta,
			  .meta_len = sizeof(meta),
			  .nsegs = 3,
			  .seg_fds = segs,
			  .seg_sizes = sizes};
	char p[400];
	the_spill_file(d.spill, p);
	int fd = open(p, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_OK(sh_rec_write(fd, 0, &r, true));
	close(fd);
	for (int i = 0; i < 3; i++)
		close(segs[i]);
	shoal_object *o;
	CHECK_RC(shoal_get_by_name(c, "o-0", &o), SHOAL_EIO);
	CHECK_HAS(shoal_client_error(c), "3 segments, expected at most 1");
	for (int k = 1; k < N; k++) {
		snprintf(name, sizeof(name), "o-%d", k);
		check_pattern(c, name, ids[k], k, SIZE);
	}
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

static void add_cached(const char *path, void *arg)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	size_t pages = ((size_t)st.st_size + 4095) / 4096;
	if (pages) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		CHECK(m != MAP_FAILED);
		unsigned char *v = malloc(pages);
		CHECK(v != NULL);
		CHECK_EQ(mincore(m, (size_t)st.st_size, v), 0);
		for (size_t i = 0; i < pages; i++)
			*(size_t *)arg += v[i] & 1;
		free(v);
		munmap(m, (size_t)st.st_size);
	}
	close(fd);
}

/* Pages of the spill files in dir that the page cache holds. */
static size_t cached_pages(const char *dir)
{
	size_t n = 0;
	each_spill_file(dir, add_cached, &n);
	return n;
}

/* The inode of the store's segment memfds of size bytes in process pid;
 * *count: how many there are; *path: one's name in /proc. */
static ino_t segment_of_size(pid_t pid, uint64_t size, int *count, char *path, size_t len)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *dd = opendir(dir);
	CHECK(dd != NULL);
	ino_t ino = 0;
	*count = 0;
	struct dirent *e;
	while ((e = readdir(dd)) != NULL) {
		char p[320], link[256];
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		ssize_t n = readlink(p, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		struct stat st;
		if (strstr(link, "memfd:shoal-segment") && stat(p, &st) == 0 &&
		    (uint64_t)st.st_size == size) {
			ino = st.st_ino;
			snprintf(path, len, "%s", p);
			(*count)++;
		}
	}
	closedir(dd);
	return ino;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Whether the kernel touches pages for a madvise (before 5.14 a store's
 * spares are only allocated). */
static bool kernel_populates(void)
{
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED);
	bool ok = madvise(m, 4096, MADV_POPULATE_WRITE) == 0;
	munmap(m, 4096);
	return ok;
}

/* Whether this process maps the file of inode ino. */
static bool mapped_here(ino_t ino)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f != NULL);
	char line[512];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long long in = 0;
		if (sscanf(line, "%*s %*s %*s %*s %llu", &in) == 1 && in == (unsigned long long)ino)
			found = true;
	}
	fclose(f);
	return found;
}

/* When an object goes to disk, a spare of its segment's size is made from
 * the memory it gave back, its pages touched (a restore meets no page the
 * host took back); a put and delete of another size, whose spare would
 * push the oldest out, leaves it; the get lands in it. Neither the spill
 * nor the restore leaves the file's pages in the page cache. */
SH_TEST(a_restore_lands_in_the_spare_its_spill_made)
{
	spilld d;
	spilld_init(&d);
	enum { SIZE = 16 << 20, FILL = 17 << 20, OTHER = 6 << 20 };
	/* 40 MiB: a and the filler pass the high mark (32), a goes to disk;
	 * spares may hold 16 MiB, one of a's size */
	const char *extra[] = {"--spares", "16777216", NULL};
	CHECK_EQ(spilld_start_with(&d, (size_t)40 << 20, NULL, extra), 0);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id a = put_pattern(c, "a", 1, SIZE, 0);
	put_pattern(c, "filler", 2, FILL, 0);
	shoal_store_stat st = stat_of(c);
	for (int i = 0; i < 500 && (st.spill_objects < 1 || st.spare_bytes < SIZE); i++) {
		usleep(10000);
		st = stat_of(c);
	}
	CHECK_EQ(st.spill_objects, 1);
	CHECK(st.spare_bytes >= SIZE);
	uint64_t spare = st.spare_bytes;
	CHECK_EQ(cached_pages(d.spill), 0);

	put_pattern(c, "other", 3, OTHER, 0);
	CHECK_OK(shoal_delete(c, "other"));
	usleep(300000); /* time for a spare of OTHER to be made, were it let */
	CHECK_EQ(stat_of(c).spare_bytes, spare);
	int n;
	char path[320];
	ino_t ino = segment_of_size(d.pid, spare, &n, path, sizeof(path));
	CHECK_EQ(n, 1);
	/* its pages touched already: data, not the holes fallocate leaves */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	if (kernel_populates()) {
		CHECK_EQ(lseek(fd, 0, SEEK_DATA), 0);
		CHECK_EQ(lseek(fd, 0, SEEK_HOLE), (off_t)spare);
	}
	close(fd);

	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "a", &o));
	if (!mapped_here(ino))
		sh_test_fail(__FILE__, __LINE__, "a came back into a fresh segment, not the spare");
	CHECK_OK(shoal_object_release(o));
	check_pattern(c, "a", a, 1, SIZE);
	CHECK_EQ(stat_of(c).restored, 1);
	CHECK_EQ(cached_pages(d.spill), 0);
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

SH_TEST(a_large_segment_is_hashed_beside_its_copy)
{
	/* Segments of 16 MiB and more are hashed by a thread of their own
	 * while the kernel copies them, out and back in. */
	spilld d;
	spilld_init(&d);
	enum { N = 2, SIZE = 20 << 20 };
	spilld_start(&d, (size_t)32 << 20);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d.sock));
	shoal_id ids[N];
	put_many(c, "large", N, SIZE, ids);
	CHECK_EQ(stat_of(c).spill_objects, 1);
	check_pattern(c, "large-0", ids[0], 0, SIZE); /* the other spills for it */
	CHECK_EQ(stat_of(c).restored, 1);
	check_pattern(c, "large-1", ids[1], 1, SIZE);
	CHECK_OK(shoal_disconnect(c));
	spilld_fini(&d);
}

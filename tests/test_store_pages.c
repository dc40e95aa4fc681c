/* shoal-test: threaded. A store's pages (shoal_store_opts.huge_pages,
 * shoald --huge-pages): each kind chosen from what the system allows, and
 * said with its reason (hugetlb from the pool, shmem's transparent huge
 * pages, 4 KiB pages with what would enable better ones); objects on each
 * byte for byte; a pool too small for a segment falls back to 4 KiB pages;
 * the seals hold on huge pages against root's own writes; a hugetlb
 * object persists to a state directory and comes back; a copy from
 * another store lands on huge pages byte for byte and by signature. The
 * cases set the pool (vm.nr_hugepages) and shmem_enabled themselves, as
 * root, and a guard process outside the case puts them back whatever
 * becomes of it; without root they skip with that reason. */
#include "test.h"

#include "store/pages.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define NR "/proc/sys/vm/nr_hugepages"
#define FREE SH_HUGETLB_DIR "free_hugepages"
#define SHMEM SH_SHMEM_THP
#define HUGETLBFS_MAGIC 0x958458f6
#define MB (1u << 20)

static void write_str(const char *p, const char *v)
{
	FILE *f = fopen(p, "w");
	CHECK(f != NULL);
	CHECK(fputs(v, f) >= 0);
	CHECK(fclose(f) == 0);
}

static void shmem_mode(char *out, size_t n)
{
	sh_pages_shmem_mode(out, n);
	CHECK(out[0] != 0);
}

/* Root, a pool of 2 MiB pages and shmem's THP switch, or the case skips;
 * then a guard in a session of its own (the case's process group is
 * killed when it ends) that puts both back once the case is gone. */
static void settings_guarded(void)
{
	if (geteuid() != 0)
		SH_SKIP("the pool and shmem_enabled are set by root only");
	if (sh_read_long(NR, -1) < 0 || access(SHMEM, W_OK) != 0)
		SH_SKIP("this kernel has no pool of 2 MiB pages or no THP for shmem");
	/* the guard of the case before may still be putting them back: its
	 * lock goes when it has */
	int lk = open("/tmp/shoal-test-pages.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHECK(lk >= 0);
	while (flock(lk, LOCK_EX) != 0)
		CHECK(errno == EINTR);
	long nr = sh_read_long(NR, -1);
	char mode[32];
	shmem_mode(mode, sizeof(mode));
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	fflush(NULL);
	pid_t g = fork();
	CHECK(g >= 0);
	if (g == 0) {
		setsid();
		close(p[1]);
		char x;
		while (read(p[0], &x, 1) != 0 && errno == EINTR)
			;
		char b[32];
		snprintf(b, sizeof(b), "%ld", nr);
		FILE *f = fopen(NR, "w");
		if (f)
			fputs(b, f), fclose(f);
		if ((f = fopen(SHMEM, "w")))
			fputs(mode, f), fclose(f);
		_exit(0); /* the lock, shared with the case, goes with both */
	}
	close(p[0]); /* p[1] stays open until this process ends */
}

static void set_pool(long pages)
{
	char b[32];
	snprintf(b, sizeof(b), "%ld", pages);
	write_str(NR, b);
	if (sh_read_long(FREE, -1) < pages)
		SH_SKIP("the pool did not grow to %ld pages of 2 MiB (%ld free): memory too "
			"fragmented",
			pages, sh_read_long(FREE, -1));
}

static shoal_store *open_huge(size_t size, bool huge, const char *state_dir)
{
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.size = size;
	o.huge_pages = huge;
	o.spares = 0; /* what a create gets, not a spare made beside it */
	o.state_dir = state_dir;
	shoal_store *s;
	CHECK_OK(shoal_store_open_embedded(&s, &o));
	return s;
}

static shoal_store_stat stat_of(shoal_client *c)
{
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	return st;
}

static void expect_why(shoal_client *c, shoal_pages kind, const char *a, const char *b)
{
	shoal_store_stat st = stat_of(c);
	if (st.pages != kind || !strstr(st.pages_why, a) || (b && !strstr(st.pages_why, b)))
		sh_test_fail(__FILE__, __LINE__,
			     "pages %s (%s); expected %s, its reason naming '%s'%s%s",
			     shoal_pages_name(st.pages), st.pages_why, shoal_pages_name(kind), a,
			     b ? " and " : "", b ? b : "");
}

static unsigned char byte_at(size_t i, int seed)
{
	return (unsigned char)((i * 131 + (size_t)seed) >> 3);
}

static shoal_id put(shoal_client *c, const char *name, size_t size, int seed, unsigned flags)
{
	unsigned char *d = malloc(size);
	CHECK(d != NULL);
	for (size_t i = 0; i < size; i++)
		d[i] = byte_at(i, seed);
	shoal_id id;
	CHECK_OK(shoal_put_bytes(c, name, d, size, flags, &id));
	free(d);
	return id;
}

/* The object's blob, byte for byte, and what its file is: 1 hugetlbfs,
 * 0 shmem (on the blob's mapping, through /proc/self/map_files). Through a
 * connection of its own: a client keeps the mappings of segments it read
 * for a while, and with them their pages. */
static char last_map[512]; /* the maps line of the blob check_bytes looked at */

static int check_bytes(const char *sock, const char *name, size_t size, int seed)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, sock));
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, name, &o));
	const void *v;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &v, &n));
	CHECK_EQ(n, size);
	const unsigned char *p = v;
	for (size_t i = 0; i < size; i++)
		if (p[i] != byte_at(i, seed))
			sh_test_fail(__FILE__, __LINE__, "%s: byte %zu is %u, expected %u", name, i,
				     p[i], byte_at(i, seed));
	char path[128];
	sh_test_mapping_of(p, path, sizeof(path), last_map, sizeof(last_map));
	struct statfs fs;
	CHECK(statfs(path, &fs) == 0);
	int kind = (unsigned long)fs.f_type == HUGETLBFS_MAGIC;
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_disconnect(c));
	return kind;
}

SH_TEST(the_kind_is_said_with_its_reason)
{
	settings_guarded();
	write_str(NR, "0");
	write_str(SHMEM, "never");
	shoal_store *s = open_huge(64 * MB, false, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	expect_why(c, SHOAL_PAGES_4K, "--huge-pages", NULL);
	const char *why;
	CHECK_EQ(shoal_store_pages(s, &why), SHOAL_PAGES_4K);
	shoal_disconnect(c);
	shoal_store_close(s);
	/* asked for, but nothing allows them: what would */
	s = open_huge(64 * MB, true, NULL);
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	expect_why(c, SHOAL_PAGES_4K, "vm.nr_hugepages", "shmem_enabled is never");
	put(c, "a", 4 * MB, 1, 0);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "a", 4 * MB, 1), 0);
	shoal_disconnect(c);
	shoal_store_close(s);
}

SH_TEST(hugetlb_pages_hold_objects_and_fall_back_when_the_pool_is_short)
{
	settings_guarded();
	write_str(SHMEM, "never");
	set_pool(8); /* 16 MiB */
	shoal_store *s = open_huge(256 * MB, true, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	expect_why(c, SHOAL_PAGES_HUGETLB, "8 of the pool's 8 free", NULL);
	/* 3 MiB takes two pages, charged whole; 1 MiB stays on 4 KiB pages */
	put(c, "three", 3 * MB, 2, 0);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "three", 3 * MB, 2), 1);
	CHECK_EQ(sh_read_long(FREE, -1), 6);
	CHECK_EQ(stat_of(c).used, 4 * MB);
	put(c, "one", 1 * MB, 3, 0);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "one", 1 * MB, 3), 0);
	/* 14 MiB more than the pool has left: on 4 KiB pages, said in the log */
	put(c, "big", 14 * MB, 4, 0);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "big", 14 * MB, 4), 0);
	CHECK_EQ(sh_read_long(FREE, -1), 6);
	/* a delete gives the pages back to the pool */
	CHECK_OK(shoal_delete(c, "three"));
	for (int i = 0; i < 500 && sh_read_long(FREE, -1) != 8; i++)
		usleep(10000);
	CHECK_EQ(sh_read_long(FREE, -1), 8);
	shoal_disconnect(c);
	shoal_store_close(s);
}

SH_TEST(thp_pages_hold_objects)
{
	settings_guarded();
	write_str(NR, "0");
	write_str(SHMEM, "advise");
	shoal_store *s = open_huge(256 * MB, true, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	expect_why(c, SHOAL_PAGES_THP, "shmem_enabled is advise", NULL);
	long before = -1, after = -1;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "ShmemHugePages: %ld kB", &before);
	fclose(f);
	put(c, "a", 32 * MB, 5, 0);
	f = fopen("/proc/meminfo", "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "ShmemHugePages: %ld kB", &after);
	fclose(f);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "a", 32 * MB, 5), 0);
	/* the kernel may give fewer when memory is fragmented, not none */
	if (after - before < 2048)
		sh_test_fail(__FILE__, __LINE__,
			     "ShmemHugePages grew by %ld kB for a 32 MiB object on THP",
			     after - before);
	shoal_disconnect(c);
	shoal_store_close(s);
}

SH_TEST(seals_hold_on_hugetlb_pages)
{
	settings_guarded();
	set_pool(4);
	shoal_store *s = open_huge(64 * MB, true, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	put(c, "sealed", 4 * MB, 6, 0);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "sealed", 4 * MB, 6), 1);
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "sealed", &o));
	const void *v;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &v, &n));
	/* root's own attempts, through the mapping and the file behind it */
	void *huge = (void *)((uintptr_t)v & ~(uintptr_t)(2 * MB - 1));
	CHECK(mprotect(huge, 2 * MB, PROT_READ | PROT_WRITE) != 0);
	char path[128];
	sh_test_mapping_of(v, path, sizeof(path), NULL, 0);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	CHECK(mmap(NULL, 4 * MB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
	CHECK(pwrite(fd, "x", 1, 0) < 0);
	CHECK(ftruncate(fd, 0) != 0);
	CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 2 * MB) != 0);
	close(fd);
	CHECK_OK(shoal_object_release(o));
	CHECK_EQ(check_bytes(shoal_store_socket(s), "sealed", 4 * MB, 6), 1);
	shoal_disconnect(c);
	shoal_store_close(s);
}

/* A copy-on-write view of a hugetlb object: a private mapping reserves its
 * pages in the pool, and a pool without them gives the view a copy; a
 * write through either is the writer's, and nobody is killed. */
static void cow_write(shoal_client *c, const char *name, size_t size, int seed)
{
	shoal_object *o, *v;
	CHECK_OK(shoal_get_by_name(c, name, &o));
	CHECK_OK(shoal_object_cow(o, &v));
	const void *p;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(v), 0, &p, &n));
	CHECK_EQ(n, size);
	const unsigned char *b = p;
	for (size_t i = 0; i < size; i += 4093)
		CHECK_EQ(b[i], byte_at(i, seed));
	memset((void *)p, 0xee, size);
	CHECK_EQ(b[size / 2], 0xee);
	CHECK_OK(shoal_object_release(o));
	CHECK_OK(shoal_object_release(v));
}

SH_TEST(a_copy_on_write_view_of_hugetlb_pages_writes_without_a_crash)
{
	settings_guarded();
	set_pool(6);
	shoal_store *s = open_huge(64 * MB, true, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	put(c, "h", 4 * MB, 7, 0); /* 2 of the pool's 6 */
	CHECK_EQ(check_bytes(shoal_store_socket(s), "h", 4 * MB, 7), 1);
	cow_write(c, "h", 4 * MB, 7); /* 4 free: reserved, private */
	CHECK_EQ(check_bytes(shoal_store_socket(s), "h", 4 * MB, 7), 1);
	CHECK_EQ(sh_read_long(FREE, -1), 4);
	put(c, "fill", 8 * MB, 8, 0); /* the pool is empty now */
	CHECK_EQ(sh_read_long(FREE, -1), 0);
	cow_write(c, "h", 4 * MB, 7); /* nothing to reserve: a copy */
	CHECK_EQ(check_bytes(shoal_store_socket(s), "h", 4 * MB, 7), 1);
	shoal_disconnect(c);
	shoal_store_close(s);
}

SH_TEST(a_hugetlb_object_persists_and_comes_back)
{
	settings_guarded();
	set_pool(8);
	char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/shoal-pages-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	char state[96];
	snprintf(state, sizeof(state), "%s/state", dir);
	shoal_store *s = open_huge(64 * MB, true, state);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	put(c, "kept", 6 * MB, 7, SHOAL_PERSIST);
	CHECK_EQ(check_bytes(shoal_store_socket(s), "kept", 6 * MB, 7), 1);
	shoal_disconnect(c);
	shoal_store_close(s);
	/* back on 4 KiB pages, from the file the hugetlb segment was copied to */
	s = open_huge(64 * MB, false, state);
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	CHECK_EQ(check_bytes(shoal_store_socket(s), "kept", 6 * MB, 7), 0);
	shoal_disconnect(c);
	shoal_store_close(s);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

/* A safetensors file's data read into a region of hugetlb pages (which
 * take no write(2)) through its mapping: the tensor byte for byte. */
SH_TEST(a_safetensors_file_imports_into_hugetlb_pages)
{
	settings_guarded();
	set_pool(8);
	char dir[64], file[96];
	snprintf(dir, sizeof(dir), "/tmp/shoal-pages-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(file, sizeof(file), "%s/t.safetensors", dir);
	const size_t size = 6 * MB;
	char head[128];
	int hl = snprintf(head, sizeof(head),
			  "{\"t\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}",
			  size, size);
	while (hl % 8)
		head[hl++] = ' ';
	FILE *f = fopen(file, "w");
	CHECK(f != NULL);
	uint64_t n = (uint64_t)hl; /* little-endian, as on every machine this runs on */
	CHECK(fwrite(&n, 8, 1, f) == 1 && fwrite(head, 1, (size_t)hl, f) == (size_t)hl);
	for (size_t i = 0; i < size; i++)
		CHECK(fputc(byte_at(i, 9), f) != EOF);
	CHECK(fclose(f) == 0);
	shoal_store *s = open_huge(64 * MB, true, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	shoal_id id;
	CHECK_OK(shoal_import_safetensors(c, file, "st", 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, "st", &o));
	const shoal_node *m = shoal_node_find(shoal_object_root(o), "t");
	CHECK(m != NULL);
	shoal_tensor ts;
	CHECK_OK(shoal_node_tensor(m, &ts));
	CHECK_EQ(ts.shape[0], (int64_t)size);
	const unsigned char *p = ts.data;
	for (size_t i = 0; i < size; i++)
		if (p[i] != byte_at(i, 9))
			sh_test_fail(__FILE__, __LINE__, "byte %zu is %u, expected %u", i, p[i],
				     byte_at(i, 9));
	char path[128];
	sh_test_mapping_of(p, path, sizeof(path), NULL, 0);
	struct statfs fs;
	CHECK(statfs(path, &fs) == 0 && (unsigned long)fs.f_type == HUGETLBFS_MAGIC);
	CHECK_OK(shoal_object_release(o));
	shoal_disconnect(c);
	shoal_store_close(s);
	CHECK(unlink(file) == 0 && rmdir(dir) == 0);
}

/* shoald on DIR/NAME.sock with peers on loopback and the secret, x its
 * other options; n_peer gets where its peers connect. */
static pid_t node_start(const char *dir, const char *name, const char *x, char *sock, size_t slen,
			char *peer, size_t plen)
{
	char log[128];
	snprintf(sock, slen, "%s/%s.sock", dir, name);
	snprintf(log, sizeof(log), "%s/%s.log", dir, name);
	const char *args[] = {"--socket", sock, "--size", "256M", "--peer", "127.0.0.1:0", x, NULL};
	const char *env[] = {"SHOAL_SECRET=pages-test-secret-0123456789abcdef", "SHOAL_SECRET_FILE",
			     NULL};
	pid_t pid;
	int st = sh_test_shoald(args, env, log, O_TRUNC, &pid);
	char text[4096] = "";
	FILE *f = fopen(log, "r");
	if (f) {
		text[fread(text, 1, sizeof(text) - 1, f)] = 0;
		fclose(f);
	}
	/* it said where its peers connect before it said it serves */
	const char *p = strstr(text, "peers on ");
	char fmt[16];
	snprintf(fmt, sizeof(fmt), "%%%zu[0-9.:]", plen - 1);
	if (st != 0 || !p || sscanf(p + 9, fmt, peer) != 1)
		sh_test_fail(__FILE__, __LINE__, "shoald %s did not start (%d):\n%s", name, st,
			     text);
	return pid;
}

SH_TEST_T(a_copy_from_another_store_lands_on_huge_pages, 120)
{
	settings_guarded();
	/* 200 MiB: the object at a and a spare beside it, the copy at b, and
	 * room beside it for the spare its pages make when it is deleted */
	set_pool(100);
	char dir[64], sa[128], sb[128], pa[64], pb[64];
	snprintf(dir, sizeof(dir), "/tmp/shoal-pages-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	/* the source reads from huge pages, the destination receives into them */
	pid_t a = node_start(dir, "a", "--huge-pages", sa, sizeof(sa), pa, sizeof(pa));
	pid_t b = node_start(dir, "b", "--huge-pages", sb, sizeof(sb), pb, sizeof(pb));
	shoal_client *ca, *cb;
	CHECK_OK(shoal_connect(&ca, sa));
	CHECK_OK(shoal_connect(&cb, sb));
	expect_why(cb, SHOAL_PAGES_HUGETLB, "hugetlb", NULL);
	shoal_id id = put(ca, "model", 40 * MB, 8, SHOAL_PERSIST);
	CHECK_EQ(check_bytes(sa, "model", 40 * MB, 8), 1);
	shoal_object *o;
	CHECK_OK(shoal_get(ca, id, &o));
	uint64_t sig = shoal_object_signature(o);
	CHECK_OK(shoal_object_release(o));
	for (int k = 0; k < 2; k++) {
		/* a copy, then another after the first was deleted: its pages
		 * went back to the pool */
		shoal_migrate_opts mo = {.from = pa};
		shoal_id got;
		CHECK_OK(shoal_migrate(cb, "model", 0, &mo, &got));
		CHECK_EQ(got, id);
		shoal_client *cr; /* its own: a client keeps what it mapped a while */
		CHECK_OK(shoal_connect(&cr, sb));
		CHECK_OK(shoal_get(cr, id, &o));
		CHECK_EQ(shoal_object_signature(o), sig);
		CHECK_OK(shoal_object_release(o));
		CHECK_OK(shoal_disconnect(cr));
		if (check_bytes(sb, "model", 40 * MB, 8) != 1)
			sh_test_fail(__FILE__, __LINE__,
				     "copy %d is not on hugetlb pages (%ld free)", k + 1,
				     sh_read_long(FREE, -1));
		/* the second copy landed in the spare the first one's pages made */
		if (k == 1 && !strstr(last_map, "shoal-segment"))
			sh_test_fail(__FILE__, __LINE__, "the second copy is not in a spare: %s",
				     last_map);
		CHECK_OK(shoal_delete(cb, "model"));
		for (int i = 0; i < 500 && stat_of(cb).objects; i++)
			usleep(10000);
		/* its pages come back as a spare of its size (a fresh memfd) */
		for (int i = 0; i < 500 && stat_of(cb).spare_bytes < 40 * MB; i++)
			usleep(10000);
		if (stat_of(cb).spare_bytes < 40 * MB)
			sh_test_fail(__FILE__, __LINE__, "no spare made of the freed copy's pages");
	}
	shoal_disconnect(ca);
	shoal_disconnect(cb);
	kill(a, SIGTERM);
	kill(b, SIGTERM);
	int st;
	CHECK(waitpid(a, &st, 0) == a && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

/* A copy whose region the pool cannot hold (its pages are reserved when
 * the receiver maps it) lands on 4 KiB pages, whole, rather than failing
 * or leaving a reader a page the pool cannot give. */
SH_TEST_T(a_copy_the_pool_cannot_hold_lands_on_4k_pages, 120)
{
	settings_guarded();
	set_pool(30);
	char dir[64], sa[128], sb[128], pa[64], pb[64];
	snprintf(dir, sizeof(dir), "/tmp/shoal-pages-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	pid_t a = node_start(dir, "a", NULL, sa, sizeof(sa), pa, sizeof(pa));
	pid_t b = node_start(dir, "b", "--huge-pages", sb, sizeof(sb), pb, sizeof(pb));
	shoal_client *ca, *cb;
	CHECK_OK(shoal_connect(&ca, sa));
	CHECK_OK(shoal_connect(&cb, sb));
	expect_why(cb, SHOAL_PAGES_HUGETLB, "hugetlb", NULL);
	/* half the pool taken here, so 40 MiB more do not fit */
	put(cb, "local", 30 * MB, 3, SHOAL_PERSIST);
	CHECK_EQ(check_bytes(sb, "local", 30 * MB, 3), 1);
	shoal_id id = put(ca, "model", 40 * MB, 8, SHOAL_PERSIST);
	shoal_migrate_opts mo = {.from = pa};
	shoal_id got;
	CHECK_OK(shoal_migrate(cb, "model", 0, &mo, &got));
	CHECK_EQ(got, id);
	CHECK_EQ(check_bytes(sb, "model", 40 * MB, 8), 0);
	CHECK_EQ(check_bytes(sb, "local", 30 * MB, 3), 1);
	shoal_disconnect(ca);
	shoal_disconnect(cb);
	kill(a, SIGTERM);
	kill(b, SIGTERM);
	int st;
	CHECK(waitpid(a, &st, 0) == a && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

typedef struct creator {
	const char *sock;
	_Atomic int state; /* 0 before, 1 creating, 2 done */
	int64_t ns;
} creator;

static void *create_main(void *arg)
{
	creator *k = arg;
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, k->sock));
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	atomic_store(&k->state, 1);
	int64_t t0 = shoal_now_ns();
	CHECK_OK(shoal_builder_reserve(b, (size_t)1 << 30)); /* its CREATE: 512 pages zeroed */
	k->ns = shoal_now_ns() - t0;
	atomic_store(&k->state, 2);
	shoal_builder_abort(b);
	shoal_disconnect(c);
	return NULL;
}

/* The huge pages of a large create are allocated off the store's thread:
 * its other clients are served meanwhile, not after. */
SH_TEST_T(a_large_create_on_huge_pages_holds_no_one_up, 120)
{
	settings_guarded();
	set_pool(520);
	shoal_store *s = open_huge((size_t)1100 << 20, true, NULL);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, shoal_store_socket(s)));
	creator k = {.sock = shoal_store_socket(s)};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, create_main, &k), 0);
	while (atomic_load(&k.state) == 0)
		sched_yield();
	int64_t worst = 0;
	int during = 0;
	while (atomic_load(&k.state) == 1) {
		int64_t t0 = shoal_now_ns();
		shoal_store_stat st;
		CHECK_OK(shoal_store_stat_get(c, &st));
		int64_t t = shoal_now_ns() - t0;
		if (atomic_load(&k.state) == 1) {
			during++;
			worst = t > worst ? t : worst;
		}
	}
	pthread_join(th, NULL);
	if (k.ns < 20 * MS)
		SH_SKIP("1 GiB of huge pages came in %.1f ms: no time to look at anyone else",
			(double)k.ns / 1e6);
	if (during == 0 || worst > k.ns / 2)
		sh_test_fail(__FILE__, __LINE__,
			     "during a create of %.0f ms, %d requests, the slowest %.1f ms: "
			     "expected several, each well within it",
			     (double)k.ns / 1e6, during, (double)worst / 1e6);
	shoal_disconnect(c);
	shoal_store_close(s);
}

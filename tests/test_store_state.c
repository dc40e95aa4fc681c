/* Tests of the store's state directory (shoald --state-dir) with real
 * shoald processes, killed with SIGKILL or stopped with SIGTERM and started
 * again on the same directory: persistent objects (arena blobs, large
 * blobs, a tensor dict, one made persistent after its seal, one without a
 * name) come back byte-identical under their ids and names, zero-copy;
 * transient ones do not; deletes and replaces reach the files; --size holds
 * across a restart; corrupted, truncated, symlinked, foreign and hostile
 * (well-hashed but malformed) files are set aside, and the rest is served;
 * the directory itself is checked; and a client, root or nobody, cannot
 * write what it maps of a restored object. */
#include "test.h"
#include "store_blob.h"
#include "store_dict.h"

#include "store/proto.h"
#include "store/state.h"
#include "wire/wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

typedef struct shoald_proc {
	pid_t pid;
	char dir[64], sock[128], state[128], log[128];
} shoald_proc;

/* A fresh directory for the socket, the log and the state directory
 * (under /dev/shm: tmpfs, as the docs advise). */
static void daemon_init(shoald_proc *d)
{
	snprintf(d->dir, sizeof(d->dir), "/dev/shm/shoal-state-test-XXXXXX");
	CHECK(mkdtemp(d->dir) != NULL);
	CHECK_EQ(chmod(d->dir, 0755), 0); /* nobody reaches the socket, not the state */
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->state, sizeof(d->state), "%s/state", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
}

/* Starts shoald on d's socket and state directory (its stderr appended to
 * d->log); extra: more arguments, NULL-terminated. Returns 0 once it
 * serves, else its exit status. */
static int daemon_start_with(shoald_proc *d, size_t size, const char *const *extra)
{
	char sz[32];
	snprintf(sz, sizeof(sz), "%zu", size);
	const char *head[] = {"--socket", d->sock, "--size", sz, "--state-dir", d->state, NULL};
	return shoald_start(head, extra, d->log, &d->pid);
}

static void daemon_start(shoald_proc *d, size_t size)
{
	CHECK_EQ(daemon_start_with(d, size, NULL), 0);
}

static void daemon_kill9(shoald_proc *d)
{
	CHECK_EQ(kill(d->pid, SIGKILL), 0);
	int st;
	CHECK(waitpid(d->pid, &st, 0) == d->pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	d->pid = 0;
}

/* SIGTERM: it must exit 0 (and, under ASan, leak nothing). */
static void daemon_stop(shoald_proc *d)
{
	CHECK_EQ(kill(d->pid, SIGTERM), 0);
	int st;
	CHECK(waitpid(d->pid, &st, 0) == d->pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		sh_test_fail(__FILE__, __LINE__, "shoald: status 0x%x", st);
	d->pid = 0;
}

static void rm_tree(const char *path)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	CHECK_EQ(system(cmd), 0);
}

static void daemon_fini(shoald_proc *d)
{
	if (d->pid > 0)
		daemon_stop(d);
	rm_tree(d->dir);
}

static shoal_client *connect_to(const shoald_proc *d)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, d->sock));
	return c;
}

/* Whether p lies in a mapping of a store segment (a memfd mapped
 * read-only, shared): the get did not copy. */
static bool in_segment_mapping(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f != NULL);
	char line[512];
	bool yes = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo &&
		    (uintptr_t)p < hi)
			yes = strstr(line, "memfd:shoal-segment") && perms[1] == '-' &&
			      perms[3] == 's';
	}
	fclose(f);
	return yes;
}

static void check_pattern(shoal_client *c, const char *name, shoal_id id, int k, size_t size,
			  bool segment)
{
	shoal_object *o;
	if (name) {
		int rc = shoal_get_by_name(c, name, &o);
		if (rc)
			sh_test_fail(__FILE__, __LINE__, "get %s: %s: %s", name, shoal_strerror(rc),
				     shoal_client_error(c));
	} else {
		CHECK_OK(shoal_get(c, id, &o));
	}
	CHECK_EQ(shoal_object_id(o), id);
	const void *p;
	size_t n;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &p, &n));
	CHECK_EQ(n, size);
	const unsigned char *b = p;
	for (size_t i = 0; i < size; i++)
		if (b[i] != pattern(k, i))
			sh_test_fail(__FILE__, __LINE__, "%s: byte %zu is %u, expected %u",
				     name ? name : "(by id)", i, b[i], pattern(k, i));
	if (segment)
		CHECK(in_segment_mapping(p));
	CHECK_OK(shoal_object_release(o));
}

static shoal_id put_dict(shoal_client *c, const char *name, int n, unsigned flags)
{
	return put_dict_of(c, name, n, 1024, flags);
}

static void check_dict(shoal_client *c, const char *name, shoal_id id, int n)
{
	shoal_object *o;
	CHECK_OK(shoal_get_by_name(c, name, &o));
	CHECK_EQ(shoal_object_id(o), id);
	const shoal_node *r = shoal_object_root(o);
	CHECK_STR(shoal_node_type(r), "tensor_dict");
	CHECK_EQ(shoal_node_nmembers(r), n);
	for (int t = 0; t < n; t++) {
		char want[64];
		snprintf(want, sizeof(want), "layers.%d.weight", t);
		const shoal_node *m = shoal_node_find(r, want);
		CHECK(m != NULL);
		shoal_tensor tv;
		CHECK_OK(shoal_node_tensor(m, &tv));
		CHECK_EQ(tv.dtype, SHOAL_DT_F32);
		CHECK_EQ(tv.shape[0], t % 7 + 1);
		CHECK_EQ(tv.shape[1], 1024);
		CHECK(in_segment_mapping(tv.data));
		const float *p = tv.data;
		for (int i = 0; i < tv.shape[0] * 1024; i++)
			if (p[i] != (float)(t * 1000 + i))
				CHECK_EQ(p[i], t * 1000 + i);
	}
	CHECK_OK(shoal_object_release(o));
}

static int count_files(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name), sl = strlen(suffix);
		if (e->d_name[0] != '.' && l >= sl && !strcmp(e->d_name + l - sl, suffix))
			n++;
	}
	closedir(d);
	return n;
}

static void file_of(char *buf, size_t len, const char *dir, shoal_id id)
{
	snprintf(buf, len, "%s/%016" PRIx64 ".obj", dir, id);
}

#define SMALL 1000
#define LARGE ((size_t)3 << 20)

typedef struct objs {
	shoal_id small, large, dict, later, unnamed;
} objs;

static void check_objs(shoal_client *c, const objs *o)
{
	check_pattern(c, "small", o->small, 1, SMALL, false);
	check_pattern(c, "large", o->large, 2, LARGE, true);
	check_dict(c, "sd", o->dict, 40);
	check_pattern(c, "later", o->later, 3, 5000, false);
	check_pattern(c, NULL, o->unnamed, 4, 70000, true);
	shoal_object *x;
	CHECK_RC(shoal_get_by_name(c, "transient", &x), SHOAL_ENOENT);
	CHECK_RC(shoal_get_by_name(c, "gone-with-its-client", &x), SHOAL_ENOENT);
}

SH_TEST(persistent_objects_survive_restarts)
{
	shoald_proc d;
	daemon_init(&d);
	daemon_start(&d, 256u << 20);
	shoal_client *c = connect_to(&d);
	objs o;
	o.small = put_pattern(c, "small", 1, SMALL, SHOAL_PERSIST);
	o.large = put_pattern(c, "large", 2, LARGE, SHOAL_PERSIST);
	o.dict = put_dict(c, "sd", 40, SHOAL_PERSIST);
	o.later = put_pattern(c, "later", 3, 5000, 0);
	CHECK_OK(shoal_persist(c, o.later)); /* persistent after its seal */
	o.unnamed = put_pattern(c, NULL, 4, 70000, SHOAL_PERSIST);
	put_pattern(c, "transient", 5, 100, 0);
	shoal_client *c2 = connect_to(&d);
	put_pattern(c2, "gone-with-its-client", 6, 200000, 0);
	CHECK_OK(shoal_disconnect(c2));
	for (int i = 0; i < 1000 && stat_of(c).clients > 1; i++)
		usleep(2000); /* the store drops c2's objects once it sees it go */
	CHECK_EQ(stat_of(c).clients, 1);
	CHECK_EQ(count_files(d.state, ".obj"), 5);
	uint64_t used = stat_of(c).used;
	/* what a restart must give back: the store's count less the transient */
	uint64_t want_used = used - 128;
	CHECK_OK(shoal_disconnect(c));

	/* killed: nothing written at exit */
	daemon_kill9(&d);
	daemon_start(&d, 256u << 20);
	c = connect_to(&d);
	check_objs(c, &o);
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.objects, 5);
	CHECK_EQ(st.names, 4);
	CHECK_EQ(st.used, want_used);
	/* new objects get ids no restored one has */
	shoal_id fresh = put_pattern(c, "fresh", 7, 100, SHOAL_PERSIST);
	CHECK(fresh != o.small && fresh != o.large && fresh != o.dict && fresh != o.later &&
	      fresh != o.unnamed);
	CHECK_OK(shoal_disconnect(c));

	/* stopped cleanly */
	daemon_stop(&d);
	daemon_start(&d, 256u << 20);
	c = connect_to(&d);
	check_objs(c, &o);
	check_pattern(c, "fresh", fresh, 7, 100, false);
	/* a delete removes the file at once, even while a reader holds it */
	shoal_object *held;
	CHECK_OK(shoal_get_by_name(c, "large", &held));
	char path[256];
	file_of(path, sizeof(path), d.state, o.large);
	CHECK_EQ(access(path, F_OK), 0);
	CHECK_OK(shoal_delete(c, "large"));
	CHECK(access(path, F_OK) != 0 && errno == ENOENT);
	CHECK_OK(shoal_delete_id(c, o.unnamed));
	CHECK_OK(shoal_object_release(held));
	CHECK_EQ(count_files(d.state, ".obj"), 4);
	CHECK_OK(shoal_disconnect(c));
	daemon_kill9(&d);
	daemon_start(&d, 256u << 20);
	c = connect_to(&d);
	CHECK_RC(shoal_get_by_name(c, "large", &held), SHOAL_ENOENT);
	CHECK_RC(shoal_get(c, o.unnamed, &held), SHOAL_ENOENT);
	check_pattern(c, "small", o.small, 1, SMALL, false);
	check_dict(c, "sd", o.dict, 40);
	CHECK_EQ(stat_of(c).objects, 4);
	CHECK_OK(shoal_disconnect(c));
	const char *log = read_text(d.log);
	CHECK(strstr(log, "refused") == NULL);
	CHECK_HAS(log, ", state in ");
	CHECK_HAS(log, "4 persistent objects back");
	daemon_fini(&d);
}

static void copy_file(const char *from, const char *to)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "cp -p '%s' '%s'", from, to);
	CHECK_EQ(system(cmd), 0);
}

SH_TEST(a_replace_cut_short_keeps_the_newer)
{
	shoald_proc d;
	daemon_init(&d);
	daemon_start(&d, 64u << 20);
	shoal_client *c = connect_to(&d);
	shoal_id v1 = put_pattern(c, "x", 1, 100000, SHOAL_PERSIST);
	char f1[256], saved[256];
	file_of(f1, sizeof(f1), d.state, v1);
	snprintf(saved, sizeof(saved), "%s/v1.saved", d.dir);
	copy_file(f1, saved);
	shoal_id v2 = put_pattern(c, "x", 2, 300, SHOAL_PERSIST | SHOAL_REPLACE);
	CHECK(access(f1, F_OK) != 0); /* the replaced one's file went */
	CHECK_EQ(count_files(d.state, ".obj"), 1);
	CHECK_OK(shoal_disconnect(c));
	daemon_kill9(&d);
	/* as if the store had stopped between writing v2 and removing v1 */
	copy_file(saved, f1);
	CHECK_EQ(count_files(d.state, ".obj"), 2);
	daemon_start(&d, 64u << 20);
	c = connect_to(&d);
	check_pattern(c, "x", v2, 2, 300, false);
	shoal_object *o;
	CHECK_RC(shoal_get(c, v1, &o), SHOAL_ENOENT);
	CHECK_EQ(stat_of(c).objects, 1);
	CHECK_EQ(stat_of(c).used, 512); /* v1's segment is not charged */
	CHECK_EQ(count_files(d.state, ".obj"), 1);
	CHECK_OK(shoal_disconnect(c));
	daemon_fini(&d);
}

/* Flips the byte at off of path (from its end when off < 0). */
static void flip_byte(const char *path, long off)
{
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	struct stat sb;
	CHECK_EQ(fstat(fd, &sb), 0);
	off_t at = off >= 0 ? off : sb.st_size + off;
	unsigned char b;
	CHECK_EQ(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	CHECK_EQ(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

/* Writes a file with valid hashes but metadata meta (len bytes) and one
 * segment of seg_size bytes, as the store's own writer would. */
static void write_hostile(const char *state, shoal_id id, const void *meta, size_t len,
			  uint64_t seg_size)
{
	sh_state *st;
	char why[256];
	CHECK_OK(sh_state_open(state, &st, why, sizeof(why)));
	int fd = -1;
	if (seg_size) {
		fd = memfd_create("hostile", MFD_ALLOW_SEALING | MFD_CLOEXEC);
		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, (off_t)seg_size), 0);
	}
	sh_state_rec r = {.id = id,
			  .sig = id,
			  .meta = meta,
			  .meta_len = len,
			  .nsegs = seg_size ? 1 : 0,
			  .seg_fds = &fd,
			  .seg_sizes = &seg_size};
	if (sh_state_write(st, &r, why, sizeof(why)) != 0)
		sh_test_fail(__FILE__, __LINE__, "%s", why);
	if (fd >= 0)
		close(fd);
	sh_state_close(st);
}

/* [name, node] with a tensor whose blob is [seg, off, size]. */
static size_t hostile_tensor(char *buf, size_t cap, const char *name, uint64_t seg, uint64_t off,
			     uint64_t size, int64_t rows)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 2);
	sh_mp_pack_cstr(&pk, name);
	msgpack_pack_array(&pk, 4);
	sh_mp_pack_cstr(&pk, "tensor");
	msgpack_pack_map(&pk, 2);
	sh_mp_pack_cstr(&pk, "dtype");
	sh_mp_pack_cstr(&pk, "U8");
	sh_mp_pack_cstr(&pk, "shape");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int64(&pk, rows);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint64(&pk, seg);
	msgpack_pack_uint64(&pk, off);
	msgpack_pack_uint64(&pk, size);
	msgpack_pack_array(&pk, 0);
	CHECK(!w.err && w.len <= cap);
	memcpy(buf, w.p, w.len);
	size_t n = w.len;
	sh_wbuf_fini(&w);
	return n;
}

SH_TEST(bad_state_files_are_set_aside)
{
	shoald_proc d;
	daemon_init(&d);
	daemon_start(&d, 64u << 20);
	shoal_client *c = connect_to(&d);
	shoal_id id[8];
	for (int i = 0; i < 8; i++) {
		char nm[16];
		snprintf(nm, sizeof(nm), "o%d", i);
		id[i] = put_pattern(c, nm, i, i % 2 ? 200000 : 3000, SHOAL_PERSIST);
	}
	CHECK_OK(shoal_disconnect(c));
	daemon_stop(&d);
	char f[8][256];
	for (int i = 0; i < 8; i++)
		file_of(f[i], sizeof(f[i]), d.state, id[i]);
	/* o0: truncated */
	CHECK_EQ(truncate(f[0], 100), 0);
	/* o1: a bit flipped in its segment's data, o2 in its inline blob, o3 in
	 * its header */
	flip_byte(f[1], -5000);
	flip_byte(f[2], 200);
	flip_byte(f[3], 20);
	/* o4: a symlink swapped in for the file */
	char moved[256];
	snprintf(moved, sizeof(moved), "%s/o4.elsewhere", d.dir);
	CHECK_EQ(rename(f[4], moved), 0);
	CHECK_EQ(symlink(moved, f[4]), 0);
	/* o5: a file of another uid */
	CHECK_EQ(chown(f[5], NOBODY, NOBODY), 0);
	/* o6: grown by a page */
	CHECK_EQ(truncate(f[6], 200000 + 3 * 4096 + 4096 * 4), 0);
	/* well-hashed files whose metadata is hostile: a segment index out of
	 * range, a blob past its segment's end, a tensor whose shape disagrees
	 * with its blob, and garbage */
	char meta[512];
	size_t n = hostile_tensor(meta, sizeof(meta), "h1", 2, 0, 64, 64);
	write_hostile(d.state, 0x0abc000000000001ull, meta, n, 4096);
	n = hostile_tensor(meta, sizeof(meta), "h2", 1, 4000, 200, 200);
	write_hostile(d.state, 0x0abc000000000002ull, meta, n, 4096);
	n = hostile_tensor(meta, sizeof(meta), "h3", 1, 0, 64, 65);
	write_hostile(d.state, 0x0abc000000000003ull, meta, n, 4096);
	write_hostile(d.state, 0x0abc000000000004ull, "\x92\xc1\xff", 3, 0);
	/* a stray file, and a write a crash cut short */
	char junk[256];
	snprintf(junk, sizeof(junk), "%s/notes.txt", d.state);
	FILE *jf = fopen(junk, "w");
	CHECK(jf != NULL);
	fputs("hello", jf);
	fclose(jf);
	snprintf(junk, sizeof(junk), "%s/.00000000000000ff.obj.tmp", d.state);
	jf = fopen(junk, "w");
	CHECK(jf != NULL);
	fclose(jf);

	daemon_start(&d, 64u << 20);
	c = connect_to(&d);
	check_pattern(c, "o7", id[7], 7, 200000, true);
	shoal_object *o;
	for (int i = 0; i < 7; i++) {
		char nm[16];
		snprintf(nm, sizeof(nm), "o%d", i);
		CHECK_RC(shoal_get_by_name(c, nm, &o), SHOAL_ENOENT);
	}
	CHECK_RC(shoal_get_by_name(c, "h1", &o), SHOAL_ENOENT);
	CHECK_RC(shoal_get_by_name(c, "h2", &o), SHOAL_ENOENT);
	CHECK_RC(shoal_get_by_name(c, "h3", &o), SHOAL_ENOENT);
	shoal_store_stat st = stat_of(c);
	CHECK_EQ(st.objects, 1);
	CHECK_EQ(st.used, 200704); /* only o7's pages: nothing of the refused stayed charged */
	CHECK_OK(shoal_disconnect(c));
	const char *log = read_text(d.log);
	for (int i = 0; i < 7; i++)
		CHECK_HAS(log, strrchr(f[i], '/') + 1);
	CHECK_HAS(log, "truncated");
	CHECK_HAS(log, "do not match its hash");
	CHECK_HAS(log, "a symlink");
	CHECK_HAS(log, "owned by uid 65534");
	CHECK_HAS(log, "0abc000000000001.obj");
	CHECK_HAS(log, "0abc000000000004.obj");
	CHECK_HAS(log, "notes.txt");
	CHECK_HAS(log, "an unfinished write");
	/* moved aside, not lost; only o7 is left */
	char aside[200];
	snprintf(aside, sizeof(aside), "%s/aside", d.state);
	CHECK_EQ(count_files(aside, ".obj"), 11);
	CHECK_EQ(count_files(d.state, ".obj"), 1);
	CHECK_EQ(count_files(d.state, ".tmp"), 0);
	/* a second start finds only the good one, and complains of nothing */
	daemon_stop(&d);
	CHECK_EQ(truncate(d.log, 0), 0);
	daemon_start(&d, 64u << 20);
	c = connect_to(&d);
	check_pattern(c, "o7", id[7], 7, 200000, true);
	CHECK_OK(shoal_disconnect(c));
	CHECK(strstr(read_text(d.log), "refused") == NULL);
	daemon_fini(&d);
}

SH_TEST(the_state_directory_is_checked)
{
	shoald_proc d;
	daemon_init(&d);
	/* a symlink to a good directory */
	char real[200];
	snprintf(real, sizeof(real), "%s/real", d.dir);
	CHECK_EQ(mkdir(real, 0700), 0);
	CHECK_EQ(symlink(real, d.state), 0);
	CHECK_EQ(daemon_start_with(&d, 1u << 20, NULL), 1);
	CHECK_HAS(read_text(d.log), "is a symlink");
	CHECK_EQ(unlink(d.state), 0);
	/* open to others */
	CHECK_EQ(mkdir(d.state, 0755), 0);
	CHECK_EQ(daemon_start_with(&d, 1u << 20, NULL), 1);
	CHECK_HAS(read_text(d.log), "mode 755");
	/* of another uid */
	CHECK_EQ(chmod(d.state, 0700), 0);
	CHECK_EQ(chown(d.state, NOBODY, NOBODY), 0);
	CHECK_EQ(daemon_start_with(&d, 1u << 20, NULL), 1);
	CHECK_HAS(read_text(d.log), "owned by uid 65534");
	CHECK_EQ(rmdir(d.state), 0);
	/* a file */
	FILE *f = fopen(d.state, "w");
	CHECK(f != NULL);
	fclose(f);
	CHECK_EQ(daemon_start_with(&d, 1u << 20, NULL), 1);
	CHECK_HAS(read_text(d.log), "not a directory");
	CHECK_EQ(unlink(d.state), 0);
	/* missing: made 0700; and one store at a time */
	daemon_start(&d, 1u << 20);
	struct stat sb;
	CHECK_EQ(lstat(d.state, &sb), 0);
	CHECK(S_ISDIR(sb.st_mode));
	CHECK_EQ(sb.st_mode & 0777, 0700);
	shoald_proc other = d;
	snprintf(other.sock, sizeof(other.sock), "%s/other.sock", d.dir);
	CHECK_EQ(daemon_start_with(&other, 1u << 20, NULL), 1);
	CHECK_HAS(read_text(d.log), "another store uses it");
	daemon_fini(&d);
}

SH_TEST(the_size_limit_holds_across_restarts)
{
	shoald_proc d;
	daemon_init(&d);
	daemon_start(&d, 4u << 20);
	shoal_client *c = connect_to(&d);
	shoal_id big = put_pattern(c, "big", 1, (size_t)3 << 20, SHOAL_PERSIST);
	shoal_id small = put_pattern(c, "small", 2, 100, SHOAL_PERSIST);
	CHECK_OK(shoal_disconnect(c));
	daemon_kill9(&d);
	daemon_start(&d, 4u << 20);
	c = connect_to(&d);
	CHECK_EQ(stat_of(c).used, (3u << 20) + 128);
	CHECK_RC(shoal_put_bytes(c, "more", "x", 1, 0, NULL), 0);
	unsigned char *p = calloc(1, (size_t)1 << 20);
	CHECK(p != NULL);
	CHECK_RC(shoal_put_bytes(c, "too-much", p, (size_t)1 << 20, 0, NULL), SHOAL_ENOSPC);
	free(p);
	CHECK_OK(shoal_disconnect(c));
	daemon_stop(&d);
	/* a smaller store: what does not fit is set aside, the rest served */
	daemon_start(&d, 2u << 20);
	c = connect_to(&d);
	check_pattern(c, "small", small, 2, 100, false);
	shoal_object *o;
	CHECK_RC(shoal_get(c, big, &o), SHOAL_ENOENT);
	CHECK_EQ(stat_of(c).used, 128);
	CHECK_OK(shoal_disconnect(c));
	CHECK_HAS(read_text(d.log), "do not fit the store's size");
	daemon_fini(&d);
}

/* ---- a client cannot write what it maps of a restored object ---- */

static const char *attack_sock;

/* The file a mapping at p comes from, opened through /proc/self/map_files
 * (root only), or -1. */
static int open_mapping(const void *p, int flags)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[512];
	int fd = -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo &&
		    (uintptr_t)p < hi) {
			char path[128];
			snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", lo, hi);
			fd = open(path, flags);
			break;
		}
	}
	fclose(f);
	return fd;
}

/* Whether any write to fd got through: write, resize, punch, map. */
static bool try_writes(int fd)
{
	/* (fallocate within the size changes no byte: sealed files allow it) */
	struct stat sb;
	if (fstat(fd, &sb) != 0 || pwrite(fd, "x", 1, 0) >= 0 || ftruncate(fd, 0) == 0 ||
	    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0 ||
	    fallocate(fd, 0, sb.st_size, 4096) == 0)
		return true;
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return false;
	munmap(m, 4096);
	return true;
}
static char attack_file[256]; /* big's state file */

/* Every write to the descriptors this client holds and to what it maps
 * fails; returns through the exit status: 0 when all held. */
static void attack(void)
{
	shoal_client *c;
	if (shoal_connect(&c, attack_sock) != 0)
		_exit(10);
	shoal_object *big, *small;
	if (shoal_get_by_name(c, "big", &big) != 0 || shoal_get_by_name(c, "small", &small) != 0)
		_exit(11);
	const void *bp, *sp;
	size_t bn, sn;
	if (shoal_node_blob(shoal_object_root(big), 0, &bp, &bn) ||
	    shoal_node_blob(shoal_object_root(small), 0, &sp, &sn))
		_exit(12);
	/* the mappings */
	if (mprotect((void *)((uintptr_t)bp & ~(uintptr_t)4095), 4096, PROT_READ | PROT_WRITE) ==
		    0 ||
	    mprotect((void *)((uintptr_t)sp & ~(uintptr_t)4095), 4096, PROT_READ | PROT_WRITE) == 0)
		_exit(13);
	/* The reopen tricks: each mapping's file read-write through
	 * /proc/self/map_files (root only), and every descriptor it holds,
	 * as given and through /proc/self/fd. */
	int seen = 0;
	const void *maps[2] = {bp, sp};
	for (int i = 0; i < 2; i++) {
		int fd = open_mapping(maps[i], O_RDWR);
		if (getuid() != 0 && fd >= 0)
			_exit(14);
		if (fd >= 0) {
			seen++;
			if (try_writes(fd))
				_exit(15);
			close(fd);
		}
		if (madvise((void *)((uintptr_t)maps[i] & ~(uintptr_t)4095), 4096, MADV_REMOVE) ==
		    0)
			_exit(16);
	}
	DIR *dir = opendir("/proc/self/fd");
	if (!dir)
		_exit(14);
	struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		char link[300], target[256];
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(link, target, sizeof(target) - 1);
		if (k <= 0)
			continue;
		target[k] = 0;
		if (!strstr(target, "shoal-segment") && !strstr(target, "shoal-arena"))
			continue;
		int fd = atoi(e->d_name), rw = open(link, O_RDWR);
		if (try_writes(fd) || (rw >= 0 && try_writes(rw)))
			_exit(15);
		if (rw >= 0)
			close(rw);
	}
	closedir(dir);
	if (getuid() == 0 && seen != 2) /* root reopened both mappings' files */
		_exit(17);
	/* the state directory is closed to other users */
	if (getuid() != 0 && (open(attack_file, O_RDONLY) >= 0 || errno != EACCES))
		_exit(19);
	if (((const unsigned char *)bp)[0] != pattern(1, 0) ||
	    ((const unsigned char *)sp)[0] != pattern(2, 0))
		_exit(18);
	shoal_object_release(big);
	shoal_object_release(small);
	shoal_disconnect(c);
	_exit(0);
}

static int run_attack(uid_t uid)
{
	fflush(NULL);
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (uid != 0) {
			gid_t g = NOBODY;
			if (setgroups(1, &g) != 0 || setgid(NOBODY) != 0 || setuid(uid) != 0)
				_exit(99);
			if (setuid(0) == 0)
				_exit(98);
		}
		attack();
	}
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

SH_TEST(restored_objects_cannot_be_written)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP restored_objects_cannot_be_written: needs root, to attack "
				"as root and as nobody\n");
		return;
	}
	shoald_proc d;
	daemon_init(&d);
	const char *group[] = {"--group", "65534", NULL};
	CHECK_EQ(daemon_start_with(&d, 64u << 20, group), 0);
	shoal_client *c = connect_to(&d);
	shoal_id big = put_pattern(c, "big", 1, (size_t)1 << 20, SHOAL_PERSIST);
	put_pattern(c, "small", 2, 100, SHOAL_PERSIST);
	CHECK_OK(shoal_disconnect(c));
	daemon_kill9(&d);
	CHECK_EQ(daemon_start_with(&d, 64u << 20, group), 0);
	attack_sock = d.sock;
	file_of(attack_file, sizeof(attack_file), d.state, big);
	CHECK_EQ(run_attack(0), 0);
	CHECK_EQ(run_attack(NOBODY), 0);
	/* and the bytes are as they were, for everyone */
	c = connect_to(&d);
	check_pattern(c, "big", big, 1, (size_t)1 << 20, true);
	CHECK_OK(shoal_disconnect(c));
	daemon_fini(&d);
}

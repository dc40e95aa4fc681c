/* The store suite's spill rows (issue 36): an embedded store with a spill
 * directory on a disk (/var/tmp, not tmpfs), sized well below what one
 * client puts into it, so that cold objects go to disk and come back.
 *
 * - spill: 64 MiB objects, and 4 KiB ones, put past the store's size; the
 *   rate is the store's own (shoal_store_stat's spill_rate: bytes a second
 *   of the spiller's writes and syncs), against a plain sequential write of
 *   the same bytes into the same directory in the same run (write() of
 *   64 MiB buffers, then one fdatasync: `dd bs=64M conv=fdatasync`).
 * - restore: the get of a spilled object with the spill file cold
 *   (POSIX_FADV_DONTNEED once synced; mincore says how cold), timed from
 *   the call to its return, when the bytes are in memory; against 8 MiB
 *   preads of the same file, cold again.
 *
 * The plain write and read are baselines: when they fail (a full disk) the
 * run still passes; a put, a spill or a get that fails is shoal's own. */
#include "bench.h"

#include <shoal/shoal.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define SUITE "store"
#define PARENT "/var/tmp"
#define WRITE_CHUNK ((size_t)64 << 20)
#define READ_CHUNK ((size_t)8 << 20)

int sh_bench_spill_scratch(char *dir, size_t len, uint64_t need, char *why, size_t whylen)
{
	struct statfs f;
	struct statvfs v;
	if (statfs(PARENT, &f) != 0 || statvfs(PARENT, &v) != 0) {
		snprintf(why, whylen, "%s: %s", PARENT, strerror(errno));
		return -1;
	}
	if (f.f_type == TMPFS_MAGIC || f.f_type == RAMFS_MAGIC) {
		snprintf(why, whylen, "%s is in memory (%s), not on a disk", PARENT,
			 f.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs");
		return -1;
	}
	uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
	if (avail < need + (need >> 3)) {
		snprintf(why, whylen, "%s has %.1f GiB free, %.1f GiB needed", PARENT,
			 (double)avail / (1 << 30), (double)need / (1 << 30));
		return -1;
	}
	snprintf(dir, len, "%s/shoal-bench-spill-XXXXXX", PARENT);
	if (!mkdtemp(dir)) {
		snprintf(why, whylen, "mkdtemp in %s: %s", PARENT, strerror(errno));
		return -1;
	}
	return 0;
}

/* A store of size bytes spilling into base/spill. */
static int open_spilling(shoal_store **s, const char *base, uint64_t size, char *err, size_t len)
{
	char spill[200];
	snprintf(spill, sizeof(spill), "%s/spill", base);
	shoal_store_opts so;
	shoal_store_opts_init(&so);
	so.size = (size_t)size;
	so.spill_dir = spill;
	int rc = shoal_store_open_embedded(s, &so);
	if (rc)
		snprintf(err, len, "a store spilling into %s: %s", spill, shoal_strerror(rc));
	return rc;
}

/* Waits until the spiller is done: use under its high mark (the default,
 * 0.8 of --size) and at least min_objects on disk. */
static int wait_spilled(shoal_client *c, uint64_t min_objects, shoal_store_stat *st, char *err,
			size_t len)
{
	double until = sh_bench_now() + 300;
	for (;;) {
		int rc = shoal_store_stat_get(c, st);
		if (rc) {
			snprintf(err, len, "stat: %s", shoal_strerror(rc));
			return rc;
		}
		if (st->spill_objects >= min_objects &&
		    (double)st->used <= 0.8 * (double)st->capacity)
			return 0;
		if (sh_bench_now() > until) {
			snprintf(err, len,
				 "the spiller did not finish in 300 s: %llu of %llu bytes used, "
				 "%llu objects on disk",
				 (unsigned long long)st->used, (unsigned long long)st->capacity,
				 (unsigned long long)st->spill_objects);
			return SHOAL_ETIMEDOUT;
		}
		nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
}

/* A plain sequential write of bytes into dir: 64 MiB write()s, then one
 * fdatasync, timed from the open to the sync's end. Seconds, or < 0. */
static double plain_write(const char *dir, uint64_t bytes, char *err, size_t len)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/plain-write.bench", dir);
	unsigned char *buf = malloc(WRITE_CHUNK);
	if (!buf) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	memset(buf, 0x5a, WRITE_CHUNK);
	double t0 = sh_bench_now();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int e = fd < 0 ? errno : 0;
	for (uint64_t done = 0; e == 0 && done < bytes;) {
		size_t n = bytes - done < WRITE_CHUNK ? (size_t)(bytes - done) : WRITE_CHUNK;
		ssize_t k = write(fd, buf, n);
		if (k <= 0)
			e = k < 0 ? errno : ENOSPC;
		else
			done += (uint64_t)k;
	}
	if (e == 0 && fdatasync(fd) != 0)
		e = errno;
	double t = sh_bench_now() - t0;
	if (fd >= 0)
		close(fd);
	unlink(path);
	free(buf);
	if (e) {
		snprintf(err, len, "writing %s: %s", path, strerror(e));
		return -1;
	}
	return t;
}

/* Calls fn on every regular file of dir (its path); the number of files. */
static int each_file(const char *dir, void (*fn)(const char *path, void *arg), void *arg)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char p[1024];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		fn(p, arg);
		n++;
	}
	closedir(d);
	return n;
}

/* Drops path's pages from the page cache (clean ones: the store synced
 * them); the bench runs as the store's uid. */
static void drop_cache(const char *path, void *arg)
{
	(void)arg;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/* The pages of the files, and how many are in the page cache. */
struct residency {
	uint64_t pages, resident;
	int files;
	char path[1024]; /* the last file seen */
	uint64_t bytes;	 /* its size */
};

static void count_resident(const char *path, void *arg)
{
	struct residency *r = arg;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	r->files++;
	snprintf(r->path, sizeof(r->path), "%s", path);
	r->bytes = (uint64_t)st.st_size;
	size_t pages = ((size_t)st.st_size + 4095) / 4096;
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	unsigned char *vec = malloc(pages);
	if (m != MAP_FAILED && vec && mincore(m, (size_t)st.st_size, vec) == 0) {
		r->pages += pages;
		for (size_t i = 0; i < pages; i++)
			r->resident += vec[i] & 1;
	}
	free(vec);
	if (m != MAP_FAILED)
		munmap(m, (size_t)st.st_size);
	close(fd);
}

static double resident_pct(const char *dir, struct residency *r)
{
	memset(r, 0, sizeof(*r));
	each_file(dir, count_resident, r);
	return r->pages ? 100.0 * (double)r->resident / (double)r->pages : 0;
}

static sh_bench_result *spill_row(sh_bench_report *r, const char *label, int baseline, int n,
				  size_t bytes, uint64_t store_bytes)
{
	sh_bench_result *x = sh_bench_add(r, SUITE, "spill", label, baseline);
	sh_bench_param_num(x, "objects", n);
	sh_bench_param_num(x, "object_bytes", (double)bytes);
	sh_bench_param_num(x, "store_bytes", (double)store_bytes);
	sh_bench_param_str(x, "spill_dir", PARENT);
	return x;
}

static void set_rate(sh_bench_result *x, double mb_s)
{
	sh_bench_metric_set(x, "mb_s", mb_s);
	sh_bench_show_samples(x, &mb_s, 1, "MB/s");
	x->cmp_value = 1 / mb_s;
	x->cmp_word = "faster";
}

/* One spill row and its plain write: n objects of bytes each put by one
 * client into a store of store_bytes. Returns the row's mb_s, or 0. */
static double spill_case(sh_bench_report *r, int n, size_t bytes, uint64_t store_bytes,
			 double large_mb_s)
{
	size_t wi = r->n;
	spill_row(r, "plain write", 1, n, bytes, store_bytes);
	sh_bench_result *x = spill_row(r, "shoal", 0, n, bytes, store_bytes);
	sh_bench_result *w = &r->res[wi];
	snprintf(w->variant, sizeof(w->variant), "64 MiB + fdatasync");
	char base[256], err[1536] = "";
	uint64_t total = (uint64_t)n * bytes;
	if (sh_bench_spill_scratch(base, sizeof(base), 2 * total, err, sizeof(err)) != 0) {
		sh_bench_skip(w, "%s", err);
		sh_bench_skip(x, "%s", err);
		return 0;
	}
	shoal_store *s = NULL;
	shoal_client *c = NULL;
	unsigned char *buf = malloc(bytes);
	int rc = SHOAL_ENOMEM;
	if (!buf)
		snprintf(err, sizeof(err), "out of memory");
	else if ((rc = open_spilling(&s, base, store_bytes, err, sizeof(err))) == 0)
		memset(buf, 0x5a, bytes);
	if (rc == 0 && (rc = shoal_connect(&c, shoal_store_socket(s))) != 0)
		snprintf(err, sizeof(err), "connect: %s", shoal_strerror(rc));
	double t0 = sh_bench_now(), put_s = 0;
	for (int k = 0; k < n && rc == 0; k++) {
		memset(buf, k & 0xff, bytes < 4096 ? bytes : 4096);
		memcpy(buf, &k, sizeof(k));
		shoal_id id;
		if ((rc = shoal_put_bytes(c, NULL, buf, bytes, 0, &id)) != 0)
			snprintf(err, sizeof(err), "put %d of %d: %s: %s", k + 1, n,
				 shoal_strerror(rc), shoal_client_error(c));
	}
	put_s = sh_bench_now() - t0;
	shoal_store_stat st = {0};
	if (rc == 0)
		rc = wait_spilled(c, 1, &st, err, sizeof(err));
	if (rc == 0 && (st.spilled_bytes == 0 || st.spill_rate == 0)) {
		snprintf(err, sizeof(err), "nothing was spilled (%llu bytes used of %llu)",
			 (unsigned long long)st.used, (unsigned long long)st.capacity);
		rc = SHOAL_EPROTO;
	}
	double mb_s = 0;
	if (rc) {
		sh_bench_fail(x, "%s", err);
	} else {
		mb_s = (double)st.spill_rate / 1e6;
		set_rate(x, mb_s);
		sh_bench_metric_set(x, "spilled_bytes", (double)st.spilled_bytes);
		sh_bench_metric_set(x, "spilled_objects", (double)st.spilled);
		sh_bench_metric_set(x, "file_bytes", (double)st.spill_file_bytes);
		sh_bench_metric_set(x, "put_mb_s", (double)total / 1e6 / put_s);
		if (large_mb_s > 0) {
			sh_bench_metric_set(x, "ratio_vs_large", mb_s / large_mb_s);
			snprintf(x->aside, sizeof(x->aside), "%.2fx the 64 MiB objects' rate",
				 mb_s / large_mb_s);
		}
		/* the same bytes, plainly, into the same directory */
		char spill[300];
		snprintf(spill, sizeof(spill), "%s/spill", base);
		double t = plain_write(spill, st.spilled_bytes, err, sizeof(err));
		if (t <= 0) {
			sh_bench_fail(w, "%s", err);
		} else {
			double plain = (double)st.spilled_bytes / 1e6 / t;
			set_rate(w, plain);
			sh_bench_metric_set(w, "bytes", (double)st.spilled_bytes);
			sh_bench_metric_set(x, "ratio_vs_plain_write", mb_s / plain);
		}
	}
	if (rc)
		sh_bench_fail(w, "not run: the spill failed");
	if (c)
		shoal_disconnect(c);
	if (s)
		shoal_store_close(s);
	free(buf);
	sh_bench_rm_tree(base);
	return mb_s;
}

/* A tensor of bytes (u8) named name; each 4 KiB page starts with its
 * number, so that a restore can be checked without reading every byte. */
static int put_paged(shoal_client *c, const char *name, uint64_t bytes)
{
	shoal_builder *b;
	int rc = shoal_builder_create(c, "tensor", &b);
	if (rc)
		return rc;
	int64_t shape[1] = {(int64_t)bytes};
	void *p;
	if ((rc = shoal_node_set_tensor(shoal_builder_root(b), SHOAL_DT_U8, 1, shape, &p)) != 0) {
		shoal_builder_abort(b);
		return rc;
	}
	memset(p, 0xa5, bytes);
	for (uint64_t off = 0; off + 8 <= bytes; off += 4096)
		memcpy((unsigned char *)p + off, &off, 8);
	return shoal_builder_seal(b, name, 0, NULL);
}

static sh_bench_result *restore_row(sh_bench_report *r, const char *label, int baseline,
				    uint64_t bytes, uint64_t store_bytes)
{
	sh_bench_result *x = sh_bench_add(r, SUITE, "restore", label, baseline);
	sh_bench_param_num(x, "objects", 1);
	sh_bench_param_num(x, "object_bytes", (double)bytes);
	sh_bench_param_num(x, "store_bytes", (double)store_bytes);
	sh_bench_param_str(x, "spill_dir", PARENT);
	return x;
}

/* 8 MiB preads of path from its start to its end: into one buffer used
 * again and again, or (fresh) one after another into a new memfd of the
 * file's size, whose pages are touched for the first time as a restore's
 * segment's are. Seconds, or < 0. */
static double plain_read(const char *path, uint64_t bytes, bool fresh, char *err, size_t len)
{
	unsigned char *buf = NULL;
	int mfd = -1;
	double t0 = sh_bench_now();
	if (fresh) {
		mfd = memfd_create("bench-restore", MFD_CLOEXEC);
		if (mfd >= 0 && ftruncate(mfd, (off_t)bytes) == 0) {
			buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
			if (buf == MAP_FAILED)
				buf = NULL;
		}
	} else if ((buf = malloc(READ_CHUNK)) != NULL) {
		memset(buf, 0, READ_CHUNK);
		t0 = sh_bench_now();
	}
	int e = buf ? 0 : errno ? errno : ENOMEM;
	int fd = buf ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	if (buf && fd < 0)
		e = errno;
	for (uint64_t done = 0; e == 0 && done < bytes;) {
		size_t n = bytes - done < READ_CHUNK ? (size_t)(bytes - done) : READ_CHUNK;
		ssize_t k = pread(fd, fresh ? buf + done : buf, n, (off_t)done);
		if (k <= 0)
			e = k < 0 ? errno : EIO;
		else
			done += (uint64_t)k;
	}
	double t = sh_bench_now() - t0;
	if (fd >= 0)
		close(fd);
	if (fresh && buf)
		munmap(buf, bytes);
	else
		free(buf);
	if (mfd >= 0)
		close(mfd);
	if (e) {
		snprintf(err, len, "reading %s: %s", path, strerror(e));
		return -1;
	}
	return t;
}

/* A get of one spilled object of bytes, its file cold, against 8 MiB
 * preads of that file, cold again. The store holds twice the object: a
 * filler of 3/4 of it put after passes the high mark, the object (the
 * coldest) alone is spilled, the filler is deleted, and the get brings the
 * object back into the room that leaves. */
static void restore_case(sh_bench_report *r, uint64_t bytes)
{
	uint64_t store_bytes = 2 * bytes;
	size_t ri = r->n;
	restore_row(r, "plain read", 1, bytes, store_bytes);
	restore_row(r, "read into shm", 1, bytes, store_bytes);
	sh_bench_result *x = restore_row(r, "shoal", 0, bytes, store_bytes);
	sh_bench_result *pr = &r->res[ri], *pf = &r->res[ri + 1];
	snprintf(pr->variant, sizeof(pr->variant), "8 MiB preads");
	snprintf(pf->variant, sizeof(pf->variant), "8 MiB preads, fresh memfd");
	char base[256], spill[300], err[1536] = "";
	if (sh_bench_spill_scratch(base, sizeof(base), 2 * bytes, err, sizeof(err)) != 0) {
		sh_bench_skip(pr, "%s", err);
		sh_bench_skip(pf, "%s", err);
		sh_bench_skip(x, "%s", err);
		return;
	}
	snprintf(spill, sizeof(spill), "%s/spill", base);
	shoal_store *s = NULL;
	shoal_client *c = NULL;
	int rc = open_spilling(&s, base, store_bytes, err, sizeof(err));
	if (rc == 0 && (rc = shoal_connect(&c, shoal_store_socket(s))) != 0)
		snprintf(err, sizeof(err), "connect: %s", shoal_strerror(rc));
	if (rc == 0 && ((rc = put_paged(c, "restored", bytes)) != 0 ||
			(rc = put_paged(c, "filler", bytes / 4 * 3)) != 0))
		snprintf(err, sizeof(err), "put: %s: %s", shoal_strerror(rc),
			 shoal_client_error(c));
	shoal_store_stat st = {0};
	if (rc == 0)
		rc = wait_spilled(c, 1, &st, err, sizeof(err));
	if (rc == 0 && (st.spill_objects != 1 || st.spill_bytes < bytes)) {
		snprintf(err, sizeof(err),
			 "expected the older object alone on disk: %llu objects, %llu bytes",
			 (unsigned long long)st.spill_objects, (unsigned long long)st.spill_bytes);
		rc = SHOAL_EPROTO;
	}
	if (rc == 0 && (rc = shoal_delete(c, "filler")) != 0)
		snprintf(err, sizeof(err), "delete: %s", shoal_strerror(rc));
	struct residency res;
	double cold = 0, get_s = 0, before_s = 0;
	/* The plain read runs before the get as well as after it, and the
	 * faster counts: what each finds free on this VM (pages it backs or
	 * pages it took back) differs with what ran just before it. Before
	 * either, the file is read once untimed: the first read of a file
	 * just written runs at a fraction of the next ones here, whichever
	 * reader it is (the virtual disk's host caches what was read), and
	 * every timed read must find the disk alike. */
	if (rc == 0) {
		each_file(spill, drop_cache, NULL);
		resident_pct(spill, &res);
		before_s = res.files == 1 ? plain_read(res.path, res.bytes, false, err, sizeof(err))
					  : -1;
		each_file(spill, drop_cache, NULL);
		if (before_s > 0)
			before_s = plain_read(res.path, res.bytes, false, err, sizeof(err));
		if (res.files != 1)
			snprintf(err, sizeof(err), "%d spill files in %s, expected 1", res.files,
				 spill);
		if (before_s <= 0)
			rc = SHOAL_EIO;
	}
	if (rc == 0) {
		each_file(spill, drop_cache, NULL);
		cold = resident_pct(spill, &res);
		shoal_object *ob;
		double t0 = sh_bench_now();
		rc = shoal_get_by_name(c, "restored", &ob);
		get_s = sh_bench_now() - t0;
		if (rc) {
			snprintf(err, sizeof(err), "get: %s: %s", shoal_strerror(rc),
				 shoal_client_error(c));
		} else {
			/* after the clock: the object is the one put */
			shoal_tensor t;
			rc = shoal_node_tensor(shoal_object_root(ob), &t);
			for (uint64_t off = 0; rc == 0 && off + 8 <= bytes; off += 4096) {
				uint64_t v;
				memcpy(&v, (const unsigned char *)t.data + off, 8);
				if (v != off)
					rc = SHOAL_EPROTO;
			}
			if (rc == 0 && t.nbytes != bytes)
				rc = SHOAL_EPROTO;
			if (rc)
				snprintf(err, sizeof(err), "the object got back differs");
			shoal_object_release(ob);
		}
	}
	if (rc == 0 && (rc = shoal_store_stat_get(c, &st)) != 0)
		snprintf(err, sizeof(err), "stat: %s", shoal_strerror(rc));
	if (rc == 0 && st.restored != 1) {
		snprintf(err, sizeof(err), "%llu restores, expected 1",
			 (unsigned long long)st.restored);
		rc = SHOAL_EPROTO;
	}
	double mb_s = 0;
	if (rc) {
		sh_bench_fail(x, "%s", err);
		sh_bench_fail(pr, "not run: the restore failed");
		sh_bench_fail(pf, "not run: the restore failed");
	} else {
		mb_s = (double)bytes / 1e6 / get_s;
		set_rate(x, mb_s);
		sh_bench_metric_set(x, "get_s", get_s);
		sh_bench_metric_set(x, "store_restore_mb_s", (double)st.restore_rate / 1e6);
		sh_bench_metric_set(x, "resident_pct", cold);
		/* the object's record is the spill directory's one file */
		for (int fresh = 0; fresh < 2; fresh++) {
			sh_bench_result *b = fresh ? pf : pr;
			each_file(spill, drop_cache, NULL);
			double pcold = resident_pct(spill, &res);
			double t = res.files == 1 ? plain_read(res.path, res.bytes, fresh, err,
							       sizeof(err))
						  : -1;
			if (res.files != 1)
				snprintf(err, sizeof(err), "%d spill files in %s, expected 1",
					 res.files, spill);
			if (t <= 0) {
				sh_bench_fail(b, "%s", err);
				continue;
			}
			if (!fresh) {
				sh_bench_metric_set(b, "before_mb_s",
						    (double)res.bytes / 1e6 / before_s);
				sh_bench_metric_set(b, "after_mb_s", (double)res.bytes / 1e6 / t);
				if (before_s < t)
					t = before_s;
			}
			double plain = (double)res.bytes / 1e6 / t;
			set_rate(b, plain);
			sh_bench_metric_set(b, "bytes", (double)res.bytes);
			sh_bench_metric_set(b, "resident_pct", pcold);
			sh_bench_metric_set(
				x, fresh ? "ratio_vs_read_into_shm" : "ratio_vs_plain_read",
				mb_s / plain);
		}
	}
	if (c)
		shoal_disconnect(c);
	if (s)
		shoal_store_close(s);
	sh_bench_rm_tree(base);
}

void sh_bench_spill(const sh_bench_opts *o, sh_bench_report *r)
{
	int large_n = o->quick ? 8 : 64; /* of 64 MiB: 512 MiB, 4 GiB */
	int small_n = o->quick ? 20000 : 100000;
	if (sh_bench_wants(o, "spill")) { /* --only restore: the restore alone */
		double large = spill_case(r, large_n, (size_t)64 << 20,
					  o->quick ? (256ull << 20) : (1ull << 30), 0);
		spill_case(r, small_n, 4096, o->quick ? (16ull << 20) : (64ull << 20), large);
	}
	restore_case(r, o->quick ? (256ull << 20) : (1ull << 30));
	sh_bench_note(r, "spill: one client puts past the store's size (store_bytes); spill "
			 "files in " PARENT ", a disk; mb_s is the store's spill_rate (bytes a "
			 "second of the spiller's writes and syncs); against write() of 64 MiB "
			 "buffers and one fdatasync of the same bytes into the same directory. "
			 "restore: a get of a spilled object, its file dropped from the page "
			 "cache (resident_pct: what was left), timed to the get's return; against "
			 "8 MiB preads of the same file, dropped again, into one buffer (plain "
			 "read: once before the get and once after, the faster counts; "
			 "before_mb_s, after_mb_s) and into a fresh memfd (read into shm: the "
			 "first touch of its pages, as a restore's segment without a spare).");
}

void sh_bench_spill_summary(FILE *f, const sh_bench_report *r)
{
	double large = 0, large_q = 0, small = 0, small_q = 0, rest = 0, rest_q = 0, rest_shm = 0;
	double on[2] = {0, 0};
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || x->status != SH_BENCH_OK || x->baseline)
			continue;
		const char *ob = sh_bench_param_get(x, "object_bytes");
		const char *sp = sh_bench_param_get(x, "spill");
		if (!strcmp(x->test, "spill") && ob) {
			bool big = atof(ob) >= (1 << 20);
			*(big ? &large : &small) = sh_bench_metric_get(x, "mb_s", 0);
			*(big ? &large_q : &small_q) =
				sh_bench_metric_get(x, "ratio_vs_plain_write", 0);
		} else if (!strcmp(x->test, "restore")) {
			rest = sh_bench_metric_get(x, "mb_s", 0);
			rest_q = sh_bench_metric_get(x, "ratio_vs_plain_read", 0);
			rest_shm = sh_bench_metric_get(x, "ratio_vs_read_into_shm", 0);
		} else if (sp && !strcmp(sp, "true")) {
			on[strcmp(x->test, "get_small") == 0] =
				sh_bench_metric_get(x, "ratio_vs_spill_off", 0);
		}
	}
	fprintf(f,
		"spill: 64 MiB objects %.0f MB/s (%.2fx a plain write; goal >= 0.8), 4 KiB "
		"objects %.0f MB/s (%.2fx a plain write, %.2fx the large; goal >= 0.5); restore "
		"%.0f MB/s (%.2fx a plain read; goal >= 0.8; %.2fx a read into fresh shared "
		"memory); with spilling on, put_small p50 %.2fx, get_small %.2fx of off (goal "
		"within 5%%)\n\n",
		large, large_q, small, small_q, large > 0 ? small / large : 0, rest, rest_q,
		rest_shm, on[0], on[1]);
}

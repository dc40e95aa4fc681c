/* The spill directory's files (spill.h): opening and checking the
 * directory, appending records to numbered files with one sync a batch,
 * reading one record back, and removing a file when its last record is no
 * longer wanted. What is spilled, when, and what a get does meanwhile is
 * the server's (spilling.c). */
#include "store/spill.h"
#include "store/state.h"
#include "shm/shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u

typedef struct spill_file {
	uint32_t live;	/* records still wanted */
	uint64_t bytes; /* its size */
	bool present;
} spill_file;

struct sh_spill {
	char *dir;
	int dfd;
	uint64_t limit;
	pthread_mutex_t mu; /* the table, the totals and the file being written */
	spill_file *files;
	uint32_t nfiles, cap;
	uint32_t cur;	/* the file being appended to (nfiles: none yet) */
	int cur_fd;	/* or -1 */
	uint64_t total; /* bytes of all present files */
};

static void file_name(char *b, size_t n, uint32_t file)
{
	snprintf(b, n, "%08" PRIx32 ".spill", file);
}

/* What an earlier store left: every regular file of ours (the spill of
 * transient objects does not outlive the store that made it). */
static void sweep(sh_spill *sp)
{
	int d2 = openat(sp->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
	if (!d) {
		if (d2 >= 0)
			close(d2);
		return;
	}
	struct dirent *e;
	unsigned n = 0;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (l < 7 || strcmp(e->d_name + l - 6, ".spill") != 0)
			continue;
		if (unlinkat(sp->dfd, e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (n)
		sh_info("store", "spill %s: removed %u files an earlier store left", sp->dir, n);
}

int sh_spill_open(const char *dir, uint64_t limit, bool any_fs, sh_spill **out, char *why,
		  size_t whylen)
{
	int dfd;
	int rc = sh_state_dir_open(dir, "spill directory", &dfd, why, whylen);
	if (rc)
		return rc;
	struct statfs f;
	if (fstatfs(dfd, &f) != 0) {
		rc = shoal_errno();
		snprintf(why, whylen, "spill directory %s: %s", dir, shoal_strerror(rc));
		close(dfd);
		return rc;
	}
	if (!any_fs && (f.f_type == TMPFS_MAGIC || f.f_type == RAMFS_MAGIC)) {
		snprintf(why, whylen,
			 "spill directory %s is on %s: spilling memory into memory frees "
			 "nothing; expected a directory on a disk",
			 dir, f.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs");
		close(dfd);
		return SHOAL_EINVAL;
	}
	sh_spill *sp = SH_NEW(sh_spill);
	size_t n = strlen(dir) + 1;
	if (!sp || !(sp->dir = shoal_alloc(n))) {
		if (sp)
			SH_DELETE(sp);
		close(dfd);
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	memcpy(sp->dir, dir, n);
	sp->dfd = dfd;
	sp->limit = limit;
	sp->cur_fd = -1;
	pthread_mutex_init(&sp->mu, NULL);
	sweep(sp);
	*out = sp;
	return 0;
}

void sh_spill_close(sh_spill *sp)
{
	if (!sp)
		return;
	if (sp->cur_fd >= 0)
		close(sp->cur_fd);
	/* what is left is for no one: the next store would remove it */
	for (uint32_t i = 0; i < sp->nfiles; i++)
		if (sp->files[i].present) {
			char nm[32];
			file_name(nm, sizeof(nm), i);
			unlinkat(sp->dfd, nm, 0);
		}
	if (sp->files)
		shoal_free(sp->files, sp->cap * sizeof(*sp->files));
	close(sp->dfd);
	pthread_mutex_destroy(&sp->mu);
	shoal_free(sp->dir, strlen(sp->dir) + 1);
	SH_DELETE(sp);
}

const char *sh_spill_dir(const sh_spill *sp)
{
	return sp->dir;
}

uint64_t sh_spill_file_bytes(sh_spill *sp)
{
	pthread_mutex_lock(&sp->mu);
	uint64_t t = sp->total;
	pthread_mutex_unlock(&sp->mu);
	return t;
}

/* Removes file i once nothing in it is wanted (the file being written
 * too: the next write starts another). Under mu, which a write holds
 * throughout. */
static void maybe_remove(sh_spill *sp, uint32_t i)
{
	spill_file *f = &sp->files[i];
	if (!f->present || f->live)
		return;
	if (i == sp->cur && sp->cur_fd >= 0) {
		close(sp->cur_fd);
		sp->cur_fd = -1;
	}
	char nm[32];
	file_name(nm, sizeof(nm), i);
	if (unlinkat(sp->dfd, nm, 0) != 0)
		sh_error("store", "spill %s: removing %s: %s", sp->dir, nm, strerror(errno));
	f->present = false;
	sp->total -= f->bytes;
	f->bytes = 0;
}

/* Syncs the file being written, and drops its pages from the page cache:
 * a spill is there to free memory, and pages kept cached would hold the
 * objects' bytes a second time until the kernel needed them. */
static int sync_file(sh_spill *sp)
{
	if (fdatasync(sp->cur_fd) != 0)
		return shoal_errno();
	(void)posix_fadvise(sp->cur_fd, 0, 0, POSIX_FADV_DONTNEED);
	return 0;
}

/* Ends the file being written: synced, closed, and removed if nothing in
 * it is wanted. Under mu. */
static int end_file(sh_spill *sp)
{
	if (sp->cur_fd < 0)
		return 0;
	int rc = sync_file(sp);
	close(sp->cur_fd);
	sp->cur_fd = -1;
	maybe_remove(sp, sp->cur);
	return rc;
}

/* A fresh file to append to. Under mu. */
static int new_file(sh_spill *sp, char *why, size_t whylen)
{
	if (sh_grow_array((void **)&sp->files, &sp->cap, sp->nfiles, sizeof(*sp->files)) != 0) {
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	uint32_t i = sp->nfiles;
	char nm[32];
	file_name(nm, sizeof(nm), i);
	int fd = openat(sp->dfd, nm, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "spill %s: creating %s: %s", sp->dir, nm, shoal_strerror(rc));
		return rc;
	}
	sp->files[i] = (spill_file){.present = true};
	sp->nfiles++;
	sp->cur = i;
	sp->cur_fd = fd;
	return 0;
}

/* Small records are gathered into one buffer and written together: a
 * record of 4 KiB written alone costs a system call for 4 KiB. */
#define GATHER ((size_t)8 << 20)

typedef struct gather {
	unsigned char *buf;
	size_t len;
	size_t first, n; /* the records in it: recs[first..first+n) */
} gather;

/* Writes what g gathered at the end of the file being written. Under mu. */
static int gather_flush(sh_spill *sp, gather *g)
{
	if (!g->len)
		return 0;
	spill_file *f = &sp->files[sp->cur];
	int rc = sh_fd_pwrite_all(sp->cur_fd, g->buf, g->len, f->bytes);
	if (rc) {
		if (ftruncate(sp->cur_fd, (off_t)f->bytes) != 0)
			sh_warn("store", "spill %s: truncating after a failed write: %s", sp->dir,
				strerror(errno));
		return rc;
	}
	f->bytes += g->len;
	sp->total += g->len;
	f->live += (uint32_t)g->n;
	g->len = 0;
	g->n = 0;
	return 0;
}

size_t sh_spill_write(sh_spill *sp, sh_state_rec *recs, size_t n, sh_spill_loc *loc, int *rc,
		      char *why, size_t whylen)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t gen = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	gather g = {.buf = shoal_alloc(GATHER)};
	pthread_mutex_lock(&sp->mu);
	size_t done = 0, synced = 0;
	*rc = 0;
	for (; done < n; done++) {
		sh_state_rec *r = &recs[done];
		r->gen = gen;
		uint64_t len = sh_rec_len(r, true);
		bool small = r->nsegs == 0 && len <= GATHER && g.buf;
		spill_file *f = sp->cur_fd >= 0 ? &sp->files[sp->cur] : NULL;
		if (f &&
		    (!small || g.len + len > GATHER || f->bytes + g.len >= SH_SPILL_FILE_BYTES) &&
		    (*rc = gather_flush(sp, &g)) != 0) {
			done = g.first;
			snprintf(why, whylen, "spill %s: writing: %s", sp->dir,
				 shoal_strerror(*rc));
			break;
		}
		if (f && f->bytes >= SH_SPILL_FILE_BYTES) {
			if ((*rc = end_file(sp)) != 0) {
				snprintf(why, whylen, "spill %s: syncing: %s", sp->dir,
					 shoal_strerror(*rc));
				break;
			}
			synced = done;
			f = NULL;
		}
		if (!f) {
			if ((*rc = new_file(sp, why, whylen)) != 0)
				break;
			f = &sp->files[sp->cur];
		}
		uint64_t end = f->bytes + g.len;
		uint64_t off = r->nsegs ? (end + PAGE - 1) & ~(uint64_t)(PAGE - 1) : end;
		if (sp->limit && sp->total + g.len + (off - end) + len > sp->limit) {
			*rc = SHOAL_ENOSPC;
			snprintf(why, whylen,
				 "spill %s: the spill limit (%" PRIu64
				 " bytes) is reached: %" PRIu64 " bytes of files, %" PRIu64
				 " more asked",
				 sp->dir, sp->limit, sp->total + g.len, len);
			break;
		}
		loc[done] = (sh_spill_loc){.file = sp->cur, .off = off, .len = len};
		if (small) {
			if (!g.len)
				g.first = done;
			sh_rec_encode(r, g.buf + g.len);
			g.len += len;
			g.n++;
			continue;
		}
		/* the file keeps nothing of a record cut short (a full disk) */
		if ((*rc = sh_rec_write(sp->cur_fd, off, r, true)) != 0) {
			if (ftruncate(sp->cur_fd, (off_t)f->bytes) != 0)
				sh_warn("store", "spill %s: truncating after a failed write: %s",
					sp->dir, strerror(errno));
			snprintf(why, whylen, "spill %s: writing object %016" PRIx64 ": %s",
				 sp->dir, r->id, shoal_strerror(*rc));
			break;
		}
		sp->total += off + len - f->bytes;
		f->bytes = off + len;
		f->live++;
	}
	if (g.len && *rc == 0 && (*rc = gather_flush(sp, &g)) != 0)
		snprintf(why, whylen, "spill %s: writing: %s", sp->dir, shoal_strerror(*rc));
	if (g.len) /* not written: the records from the first gathered on */
		done = g.first;
	/* One sync for the batch: only then may the memory go. */
	int e;
	if (sp->cur_fd >= 0 && done > synced && (e = sync_file(sp)) != 0) {
		if (*rc == 0) {
			*rc = e;
			snprintf(why, whylen, "spill %s: syncing: %s", sp->dir, shoal_strerror(e));
		}
		for (size_t i = synced; i < done; i++)
			sp->files[loc[i].file].live--;
		done = synced;
		end_file(sp); /* what it holds is no one's */
	}
	pthread_mutex_unlock(&sp->mu);
	if (g.buf)
		shoal_free(g.buf, GATHER);
	return done;
}

int sh_spill_read(sh_spill *sp, const sh_spill_loc *loc, uint64_t id, sh_rec_reader *x,
		  sh_state_rec *r, char *why, size_t whylen)
{
	char nm[32];
	file_name(nm, sizeof(nm), loc->file);
	r->nsegs = 0;
	int fd = openat(sp->dfd, nm, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "spill %s: opening %s: %s", sp->dir, nm, shoal_strerror(rc));
		return rc;
	}
	/* the kernel reads ahead as far as the record goes */
	posix_fadvise(fd, (off_t)loc->off, (off_t)loc->len, POSIX_FADV_SEQUENTIAL);
	char w[256];
	int rc = sh_rec_read(x, fd, loc->off, loc->len, false, r, w, sizeof(w));
	/* read once into memory: its cached pages would be a second copy */
	posix_fadvise(fd, (off_t)loc->off, (off_t)loc->len, POSIX_FADV_DONTNEED);
	close(fd);
	if (rc == 0 && r->id != id) {
		snprintf(w, sizeof(w), "holds object %016" PRIx64 ", not %016" PRIx64, r->id, id);
		rc = SHOAL_EBADMSG;
	}
	if (rc)
		snprintf(why, whylen, "spill %s: %s at %" PRIu64 ": %s", sp->dir, nm, loc->off, w);
	return rc;
}

void sh_spill_drop(sh_spill *sp, const sh_spill_loc *loc)
{
	pthread_mutex_lock(&sp->mu);
	if (loc->file < sp->nfiles && sp->files[loc->file].live) {
		sp->files[loc->file].live--;
		maybe_remove(sp, loc->file);
	}
	pthread_mutex_unlock(&sp->mu);
}

/* The state directory of a store: the files of persistent objects, written
 * whole or not at all, and read back at start with every byte checked (the
 * format is in state.h). The store's server decides what the files hold
 * (server.c); this file keeps them: the directory's safety, the layout,
 * the atomic write, the removal, and setting bad files aside; the bytes
 * of a file are one record (record.c). */
#include "store/state.h"
#include "ring/link.h"
#include "shm/shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ASIDE "aside"

struct sh_state {
	char *dir;
	int dfd;   /* the directory, opened once: every name is resolved in it */
	int aside; /* aside/, made when first needed */
};

/* ---- the directory ---- */

int sh_state_dir_open(const char *dir, const char *what, int *out, char *why, size_t whylen)
{
	if (!dir || !*dir) {
		snprintf(why, whylen, "%s: an empty path", what);
		return SHOAL_EINVAL;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		int rc = shoal_errno();
		snprintf(why, whylen, "making the %s %s: %s", what, dir, shoal_strerror(rc));
		return rc;
	}
	/* Opened without following a symlink, then checked on what was
	 * opened: a symlink swapped in after a check would send our files, or
	 * take theirs, wherever it points. */
	int pfd = open(dir, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (pfd < 0 || fstat(pfd, &st) != 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "%s %s: %s", what, dir, shoal_strerror(rc));
		if (pfd >= 0)
			close(pfd);
		return rc;
	}
	int rc = sh_link_dir_check(&st, dir, what, why, whylen);
	int dfd = rc ? -1 : openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(pfd);
	if (rc)
		return rc;
	if (dfd < 0) {
		rc = shoal_errno();
		snprintf(why, whylen, "%s %s: %s", what, dir, shoal_strerror(rc));
		return rc;
	}
	/* Two stores on one directory would remove each other's files. */
	if (flock(dfd, LOCK_EX | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? SHOAL_EBUSY : shoal_errno();
		snprintf(why, whylen, "%s %s: %s", what, dir,
			 rc == SHOAL_EBUSY ? "another store uses it" : shoal_strerror(rc));
		close(dfd);
		return rc;
	}
	*out = dfd;
	return 0;
}

int sh_state_open(const char *dir, sh_state **out, char *why, size_t whylen)
{
	int dfd;
	int rc = sh_state_dir_open(dir, "state directory", &dfd, why, whylen);
	if (rc)
		return rc;
	sh_state *s = SH_NEW(sh_state);
	size_t n = strlen(dir) + 1;
	if (!s || !(s->dir = shoal_alloc(n))) {
		if (s)
			SH_DELETE(s);
		close(dfd);
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	memcpy(s->dir, dir, n);
	s->dfd = dfd;
	s->aside = -1;
	*out = s;
	return 0;
}

void sh_state_close(sh_state *st)
{
	if (!st)
		return;
	close(st->dfd);
	if (st->aside >= 0)
		close(st->aside);
	shoal_free(st->dir, strlen(st->dir) + 1);
	SH_DELETE(st);
}

const char *sh_state_dir(const sh_state *st)
{
	return st->dir;
}

static void file_name(char *buf, size_t len, uint64_t id)
{
	snprintf(buf, len, "%016" PRIx64 ".obj", id);
}

void sh_state_set_aside(sh_state *st, const char *file, const char *why)
{
	if (st->aside < 0) {
		if (mkdirat(st->dfd, ASIDE, 0700) != 0 && errno != EEXIST) {
			sh_error("store", "state %s: cannot make %s/: %s; removing %s (%s)",
				 st->dir, ASIDE, strerror(errno), file, why);
			unlinkat(st->dfd, file, 0);
			return;
		}
		st->aside = openat(st->dfd, ASIDE, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (st->aside >= 0 && renameat(st->dfd, file, st->aside, file) == 0) {
		sh_warn("store", "state %s: refused %s: %s (moved to %s/%s)", st->dir, file, why,
			ASIDE, file);
		return;
	}
	sh_warn("store", "state %s: refused %s: %s; cannot move it aside (%s): removed", st->dir,
		file, why, strerror(errno));
	unlinkat(st->dfd, file, 0);
}

/* ---- writing ---- */

int sh_state_write(sh_state *st, sh_state_rec *r, char *why, size_t whylen)
{
	char tmp[48];
	file_name(r->file, sizeof(r->file), r->id);
	snprintf(tmp, sizeof(tmp), ".%s.tmp", r->file);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	r->gen = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	/* A fresh file: one left by a write cut short goes first. */
	unlinkat(st->dfd, tmp, 0);
	int fd = openat(st->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "state %s: creating %s: %s", st->dir, tmp,
			 shoal_strerror(rc));
		return rc;
	}
	const char *step = "writing";
	int rc = sh_rec_write(fd, 0, r, false);
	if (rc == 0 && fsync(fd) != 0) {
		step = "syncing";
		rc = shoal_errno();
	}
	close(fd);
	if (rc == 0 && renameat(st->dfd, tmp, st->dfd, r->file) != 0) {
		step = "renaming";
		rc = shoal_errno();
	}
	if (rc) {
		snprintf(why, whylen, "state %s: %s %s: %s", st->dir, step, r->file,
			 shoal_strerror(rc));
		unlinkat(st->dfd, tmp, 0);
		return rc;
	}
	fsync(st->dfd); /* the rename itself */
	return 0;
}

void sh_state_remove(sh_state *st, uint64_t id)
{
	char name[40];
	file_name(name, sizeof(name), id);
	if (unlinkat(st->dfd, name, 0) != 0 && errno != ENOENT)
		sh_error("store", "state %s: removing %s: %s", st->dir, name, strerror(errno));
	else
		fsync(st->dfd);
}

/* ---- reading back ---- */

/* A state file's segments: plain sealable memfds (the store's pages kind
 * is for what clients put; these are read once at start). */
static int state_seg(void *ctx, uint64_t size, int *fd, uint64_t *map_len)
{
	(void)ctx;
	*map_len = size;
	return sh_memfd_create("shoal-segment", size, true, fd);
}

/* Reads and checks the file name (open as fd) into r: the file itself
 * (owner, kind, links), then its one record, exactly its size. */
static int read_file(sh_rec_reader *x, int fd, const char *name, sh_state_rec *r, char *why,
		     size_t whylen)
{
	struct stat sb;
	r->nsegs = 0;
	if (fstat(fd, &sb) != 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "fstat: %s", shoal_strerror(rc));
		return rc;
	}
	if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 077) ||
	    sb.st_nlink != 1) {
		snprintf(why, whylen,
			 "%s owned by uid %u, mode %03o, %u links; expected a regular file of "
			 "uid %u, mode 0600, one link",
			 S_ISREG(sb.st_mode) ? "a file" : "not a regular file", (unsigned)sb.st_uid,
			 (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_nlink,
			 (unsigned)geteuid());
		return SHOAL_EACCES;
	}
	int rc = sh_rec_read(x, fd, 0, (uint64_t)sb.st_size, true, r, why, whylen);
	char want[40];
	file_name(want, sizeof(want), r->id);
	if (rc == 0 && (strcmp(want, name) != 0 || r->id == 0)) {
		snprintf(why, whylen, "holds object %016" PRIx64 ", not the one its name says",
			 r->id);
		rc = SHOAL_EBADMSG;
	}
	return rc;
}

int sh_state_read(sh_state *st, uint64_t id, sh_rec_reader *x, sh_state_rec *r, char *why,
		  size_t whylen)
{
	file_name(r->file, sizeof(r->file), id);
	r->nsegs = 0;
	int fd = openat(st->dfd, r->file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "state %s: opening %s: %s", st->dir, r->file,
			 shoal_strerror(rc));
		return rc;
	}
	char w[256];
	int rc = read_file(x, fd, r->file, r, w, sizeof(w));
	close(fd);
	if (rc)
		snprintf(why, whylen, "state %s: %s: %s", st->dir, r->file, w);
	return rc;
}

static bool obj_file_name(const char *n)
{
	size_t len = strlen(n);
	if (len != 20 || strcmp(n + 16, ".obj") != 0)
		return false;
	for (int i = 0; i < 16; i++)
		if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
			return false;
	return true;
}

int sh_state_load(sh_state *st, bool lazy, sh_state_fit_fn fit, sh_state_fn fn, void *arg)
{
	sh_rec_reader x = {.make = state_seg, .fit = fit, .ctx = arg, .head_only = lazy};
	int dfd = openat(st->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		sh_error("store", "state %s: cannot list it: %s", st->dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return 0;
	}
	/* The names first: the loop below renames and removes entries. */
	char **names = NULL;
	uint32_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, ASIDE))
			continue;
		size_t l = strlen(e->d_name) + 1;
		char *c = shoal_alloc(l);
		if (!c || sh_grow_array((void **)&names, &cap, n, sizeof(char *)) != 0) {
			if (c)
				shoal_free(c, l);
			sh_error("store", "state %s: out of memory listing it", st->dir);
			break;
		}
		memcpy(c, e->d_name, l);
		names[n++] = c;
	}
	closedir(d);
	int kept = 0;
	char why[512];
	for (uint32_t i = 0; i < n; i++) {
		const char *nm = names[i];
		size_t l = strlen(nm);
		if (nm[0] == '.' && l > 4 && !strcmp(nm + l - 4, ".tmp")) {
			/* a write that a stop cut short: the object was never stored */
			sh_info("store", "state %s: removing %s, an unfinished write", st->dir, nm);
			unlinkat(st->dfd, nm, 0);
			continue;
		}
		if (!obj_file_name(nm)) {
			sh_state_set_aside(st, nm, "not a name the store writes (ID.obj)");
			continue;
		}
		int fd = openat(st->dfd, nm, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			snprintf(why, sizeof(why), "%s",
				 errno == ELOOP ? "a symlink" : strerror(errno));
			sh_state_set_aside(st, nm, why);
			continue;
		}
		/* The header first: it says how many segments to make room for. */
		unsigned char h[SH_REC_HDR];
		uint32_t ns = sh_fd_pread_all(fd, h, SH_REC_HDR, 0) == 0 ? sh_rec_nsegs(h) : 0;
		uint32_t room = ns > 1 ? ns : 1;
		uint64_t *sizes = shoal_alloc(room * sizeof(uint64_t));
		int *fds = shoal_alloc(room * sizeof(int));
		sh_state_rec r = {.seg_fds = fds, .seg_sizes = sizes, .seg_room = room};
		snprintf(r.file, sizeof(r.file), "%s", nm);
		why[0] = 0;
		int rc = sizes && fds ? read_file(&x, fd, nm, &r, why, sizeof(why)) : SHOAL_ENOMEM;
		close(fd);
		if (rc == 0) {
			rc = fn(arg, &r, why, sizeof(why));
			if (rc == 0)
				kept++;
		}
		if (rc == SHOAL_ENOMEM) {
			/* ours, not the file's: it stays for the next start */
			sh_error("store", "state %s: out of memory reading %s; left in place",
				 st->dir, nm);
		} else if (rc == SH_STATE_SUPERSEDED) {
			sh_info("store", "state %s: removing %s: %s", st->dir, nm, why);
			unlinkat(st->dfd, nm, 0);
		} else if (rc) {
			sh_state_set_aside(st, nm, why[0] ? why : shoal_strerror(rc));
		}
		if (rc && !lazy)
			for (uint32_t k = 0; k < r.nsegs; k++)
				close(r.seg_fds[k]);
		if (sizes)
			shoal_free(sizes, room * sizeof(uint64_t));
		if (fds)
			shoal_free(fds, room * sizeof(int));
	}
	for (uint32_t i = 0; i < n; i++)
		shoal_free(names[i], strlen(names[i]) + 1);
	if (names)
		shoal_free(names, cap * sizeof(char *));
	sh_rec_reader_fini(&x);
	return kept;
}

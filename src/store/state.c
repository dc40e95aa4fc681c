/* The state directory of a store: the files of persistent objects, written
 * whole or not at all, and read back at start with every byte checked (the
 * format is in state.h). The store's server decides what the files hold
 * (server.c); this file keeps them: the directory's safety, the layout,
 * the hashes, the atomic write, the removal, and setting bad files aside. */
#include "store/state.h"
#include "store/proto.h"
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "SHOALST1"
#define VERSION 1
#define HDR 64
#define PAGE 4096u
/* An object's metadata: what a get may return, plus its inline blobs. */
#define META_MAX ((uint64_t)SH_STORE_REPLY_MAX + SH_STORE_INLINE_TOTAL)
#define SEGS_MAX (1u << 20)
#define ASIDE "aside"

struct sh_state {
	char *dir;
	int dfd;   /* the directory, opened once: every name is resolved in it */
	int aside; /* aside/, made when first needed */
};

/* ---- the checksum ----
 * Against truncation, bit flips and torn copies, not against a forger (whoever
 * can write the directory is this uid or root). Four lanes of 64-bit
 * multiply-rotate, each step a bijection of the lane, so any change to one
 * word changes the result; several GB/s, so a start that reads back GBs
 * spends its time copying, not hashing. */
#define P1 0x9e3779b97f4a7c15ull
#define P2 0xc2b2ae3d27d4eb4full
#define P3 0x165667b19e3779f9ull

static inline uint64_t rotl(uint64_t v, int r)
{
	return v << r | v >> (64 - r);
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint64_t hash64(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *b = p;
	uint64_t h0 = seed ^ P1, h1 = seed ^ P2, h2 = seed ^ P3, h3 = ~seed;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		h0 = rotl(h0 ^ load64(b + i) * P1, 31) * P2;
		h1 = rotl(h1 ^ load64(b + i + 8) * P1, 31) * P2;
		h2 = rotl(h2 ^ load64(b + i + 16) * P1, 31) * P2;
		h3 = rotl(h3 ^ load64(b + i + 24) * P1, 31) * P2;
	}
	uint64_t t = seed ^ (uint64_t)n * P3;
	for (; i + 8 <= n; i += 8)
		t = rotl(t ^ load64(b + i) * P1, 27) * P2;
	for (; i < n; i++)
		t = rotl(t ^ b[i] * P3, 11) * P1;
	uint64_t r = t;
	r = rotl(r ^ h0 * P1, 29) * P2;
	r = rotl(r ^ h1 * P1, 29) * P2;
	r = rotl(r ^ h2 * P1, 29) * P2;
	r = rotl(r ^ h3 * P1, 29) * P2;
	r ^= r >> 33;
	r *= P3;
	return r ^ r >> 29;
}

/* The hash of len bytes of a sealed memfd (mapped: it cannot change;
 * populated at once, cheaper than a fault per few pages). */
static int hash_fd(int fd, uint64_t len, uint64_t *h)
{
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED)
		return shoal_errno();
	*h = hash64(p, len, *h);
	munmap(p, len);
	return 0;
}

static uint64_t page_up(uint64_t v)
{
	return (v + PAGE - 1) & ~(uint64_t)(PAGE - 1);
}

/* ---- the directory ---- */

int sh_state_open(const char *dir, sh_state **out, char *why, size_t whylen)
{
	if (!dir || !*dir) {
		snprintf(why, whylen, "state directory: an empty path");
		return SHOAL_EINVAL;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		int rc = shoal_errno();
		snprintf(why, whylen, "making the state directory %s: %s", dir, shoal_strerror(rc));
		return rc;
	}
	/* Opened without following a symlink, then checked on what was
	 * opened: a symlink swapped in after a check would send our files, or
	 * take theirs, wherever it points. */
	int pfd = open(dir, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (pfd < 0 || fstat(pfd, &st) != 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "state directory %s: %s", dir, shoal_strerror(rc));
		if (pfd >= 0)
			close(pfd);
		return rc;
	}
	int rc = sh_link_dir_check(&st, dir, "state directory", why, whylen);
	int dfd = rc ? -1 : openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(pfd);
	if (rc)
		return rc;
	if (dfd < 0) {
		rc = shoal_errno();
		snprintf(why, whylen, "state directory %s: %s", dir, shoal_strerror(rc));
		return rc;
	}
	/* Two stores on one directory would remove each other's objects. */
	if (flock(dfd, LOCK_EX | LOCK_NB) != 0) {
		rc = errno == EWOULDBLOCK ? SHOAL_EBUSY : shoal_errno();
		snprintf(why, whylen, "state directory %s: %s", dir,
			 rc == SHOAL_EBUSY ? "another store uses it" : shoal_strerror(rc));
		close(dfd);
		return rc;
	}
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

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8); /* the format is little-endian, as every host we build for */
}

static void header_pack(unsigned char h[HDR], const sh_state_rec *r, uint64_t data_hash)
{
	memset(h, 0, HDR);
	memcpy(h, MAGIC, 8);
	uint32_t v = VERSION, ns = r->nsegs;
	memcpy(h + 8, &v, 4);
	memcpy(h + 12, &ns, 4);
	put64(h + 16, r->id);
	put64(h + 24, r->sig);
	put64(h + 32, r->gen);
	put64(h + 40, r->meta_len);
	put64(h + 48, data_hash);
	put64(h + 56, hash64(h, 56, 0));
}

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
	size_t tlen = (size_t)r->nsegs * 8;
	unsigned char *table = tlen ? shoal_alloc(tlen) : NULL;
	int rc = tlen && !table ? SHOAL_ENOMEM : 0;
	uint64_t h = 0, off = page_up(HDR + tlen + r->meta_len);
	for (uint32_t i = 0; rc == 0 && i < r->nsegs; i++)
		put64(table + 8 * i, r->seg_sizes[i]);
	if (rc == 0) {
		h = hash64(table, tlen, 0);
		h = hash64(r->meta, r->meta_len, h);
		rc = sh_fd_pwrite_all(fd, table, tlen, HDR);
	}
	if (rc == 0)
		rc = sh_fd_pwrite_all(fd, r->meta, r->meta_len, HDR + tlen);
	for (uint32_t i = 0; rc == 0 && i < r->nsegs; i++) {
		if ((rc = sh_fd_copy(fd, off, r->seg_fds[i], 0, r->seg_sizes[i])) == 0)
			rc = hash_fd(r->seg_fds[i], r->seg_sizes[i], &h);
		off = page_up(off + r->seg_sizes[i]);
	}
	/* The exact size a reader expects, padding included. */
	if (rc == 0 && ftruncate(fd, (off_t)off) != 0)
		rc = shoal_errno();
	unsigned char hdr[HDR];
	header_pack(hdr, r, h);
	if (rc == 0)
		rc = sh_fd_pwrite_all(fd, hdr, HDR, 0);
	if (rc == 0 && fsync(fd) != 0) {
		step = "syncing";
		rc = shoal_errno();
	}
	close(fd);
	if (table)
		shoal_free(table, tlen);
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

typedef struct load_ctx {
	sh_state_fit_fn fit;
	void *arg;
	unsigned char *meta; /* the buffer each file's table and metadata are read into */
	size_t meta_cap;
} load_ctx;

/* Reads and checks the file name (open as fd, its header h) into r: the
 * table and metadata into x->meta, each segment into a memfd of ours,
 * sealed before it is hashed, so what was checked is what will be served. */

static int read_file(load_ctx *x, int fd, const char *name, const unsigned char h[HDR],
		     sh_state_rec *r, char *why, size_t whylen)
{
	unsigned char **meta = &x->meta;
	size_t *meta_cap = &x->meta_cap;
	struct stat sb;
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
	if ((uint64_t)sb.st_size < HDR) {
		snprintf(why, whylen, "%lld bytes, shorter than a header (%d)",
			 (long long)sb.st_size, HDR);
		return SHOAL_EBADMSG;
	}
	uint32_t ver, nsegs;
	memcpy(&ver, h + 8, 4);
	memcpy(&nsegs, h + 12, 4);
	if (memcmp(h, MAGIC, 8) != 0 || load64(h + 56) != hash64(h, 56, 0) || ver != VERSION) {
		snprintf(why, whylen,
			 "not a state file of version %d (bad magic, version or header hash)",
			 VERSION);
		return SHOAL_EBADMSG;
	}
	r->nsegs = 0; /* descriptors made so far */
	r->id = load64(h + 16);
	r->sig = load64(h + 24);
	r->gen = load64(h + 32);
	r->meta_len = load64(h + 40);
	char want[40];
	file_name(want, sizeof(want), r->id);
	if (strcmp(want, name) != 0 || r->id == 0) {
		snprintf(why, whylen, "holds object %016" PRIx64 ", not the one its name says",
			 r->id);
		return SHOAL_EBADMSG;
	}
	if (nsegs > SEGS_MAX || r->meta_len > META_MAX) {
		snprintf(why, whylen,
			 "%u segments, %zu bytes of metadata; expected at most %u and %" PRIu64,
			 nsegs, r->meta_len, SEGS_MAX, META_MAX);
		return SHOAL_EBADMSG;
	}
	size_t tlen = (size_t)nsegs * 8, need = tlen + r->meta_len;
	if (need > *meta_cap) {
		void *p = shoal_alloc(need);
		if (!p) {
			snprintf(why, whylen, "out of memory");
			return SHOAL_ENOMEM;
		}
		if (*meta)
			shoal_free(*meta, *meta_cap);
		*meta = p;
		*meta_cap = need;
	}
	uint64_t expect = page_up(HDR + need);
	if (need && sh_fd_pread_all(fd, *meta, need, HDR) != 0) {
		snprintf(why, whylen, "%lld bytes, shorter than its table and metadata",
			 (long long)sb.st_size);
		return SHOAL_EBADMSG;
	}
	for (uint32_t i = 0; i < nsegs; i++) {
		r->seg_sizes[i] = load64(*meta + 8 * i);
		if (r->seg_sizes[i] == 0 || r->seg_sizes[i] > (uint64_t)INT64_MAX / 4 ||
		    (expect += page_up(r->seg_sizes[i])) > (uint64_t)INT64_MAX / 2) {
			snprintf(why, whylen, "segment %u of %" PRIu64 " bytes", i + 1,
				 r->seg_sizes[i]);
			return SHOAL_EBADMSG;
		}
	}
	if ((uint64_t)sb.st_size != expect) {
		snprintf(why, whylen, "%lld bytes, expected %" PRIu64 " (truncated or grown)",
			 (long long)sb.st_size, expect);
		return SHOAL_EBADMSG;
	}
	int rc = x->fit(x->arg, nsegs, r->seg_sizes, why, whylen);
	if (rc)
		return rc;
	uint64_t hh = hash64(*meta, tlen, 0);
	hh = hash64(*meta + tlen, r->meta_len, hh);
	r->meta = *meta + tlen;
	uint64_t off = page_up(HDR + need);
	for (uint32_t i = 0; i < nsegs; i++) {
		int sfd = -1;
		rc = sh_memfd_create("shoal-segment", r->seg_sizes[i], true, &sfd);
		if (rc == 0)
			rc = sh_fd_copy(sfd, 0, fd, off, r->seg_sizes[i]);
		if (rc == 0)
			rc = sh_memfd_seal(sfd);
		if (rc == 0)
			rc = hash_fd(sfd, r->seg_sizes[i], &hh);
		if (rc) {
			if (sfd >= 0)
				close(sfd);
			snprintf(why, whylen, "segment %u: %s", i + 1, shoal_strerror(rc));
			return rc;
		}
		r->seg_fds[i] = sfd;
		r->nsegs = i + 1;
		off = page_up(off + r->seg_sizes[i]);
	}
	if (hh != load64(h + 48)) {
		snprintf(why, whylen, "its contents do not match its hash (corrupted)");
		return SHOAL_EBADMSG;
	}
	return 0;
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

int sh_state_load(sh_state *st, sh_state_fit_fn fit, sh_state_fn fn, void *arg)
{
	load_ctx x = {.fit = fit, .arg = arg};
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
		unsigned char h[HDR];
		uint32_t ns = 0;
		if (sh_fd_pread_all(fd, h, HDR, 0) == 0)
			memcpy(&ns, h + 12, 4);
		else
			memset(h, 0, HDR); /* fails the magic below */
		uint32_t room = ns > 1 && ns <= SEGS_MAX ? ns : 1;
		uint64_t *sizes = shoal_alloc(room * sizeof(uint64_t));
		int *fds = shoal_alloc(room * sizeof(int));
		sh_state_rec r = {.seg_fds = fds, .seg_sizes = sizes};
		snprintf(r.file, sizeof(r.file), "%s", nm);
		why[0] = 0;
		int rc = sizes && fds ? read_file(&x, fd, nm, h, &r, why, sizeof(why))
				      : SHOAL_ENOMEM;
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
		if (rc)
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
	if (x.meta)
		shoal_free(x.meta, x.meta_cap);
	return kept;
}

/* The page kind of a store's segments (see pages.h): reading what the
 * system allows (the hugetlb pool, shmem's THP setting), making segments
 * on it, and faulting huge ones in at once. */
#include "store/pages.h"
#include "fiber/waitq.h"
#include "shm/shm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <shoal/fiber.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

const char *shoal_pages_name(shoal_pages p)
{
	switch (p) {
	case SHOAL_PAGES_HUGETLB:
		return "hugetlb";
	case SHOAL_PAGES_THP:
		return "thp";
	default:
		return "4k";
	}
}

void sh_pages_shmem_mode(char *out, size_t n)
{
	out[0] = 0;
	char line[256] = "";
	FILE *f = fopen(SH_SHMEM_THP, "re");
	if (!f)
		return;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
	if (a && b && (size_t)(b - a - 1) < n) {
		memcpy(out, a + 1, (size_t)(b - a - 1));
		out[b - a - 1] = 0;
	}
}

static bool thp_allowed(const char *mode)
{
	return !strcmp(mode, "always") || !strcmp(mode, "within_size") || !strcmp(mode, "advise") ||
	       !strcmp(mode, "force");
}

void sh_pages_choose(sh_pages *p, bool want_huge)
{
	memset(p, 0, sizeof(*p));
	p->kind = SHOAL_PAGES_4K;
	char mode[32];
	sh_pages_shmem_mode(mode, sizeof(mode));
	long total = sh_read_long(SH_HUGETLB_DIR "nr_hugepages", -1),
	     free_ = sh_read_long(SH_HUGETLB_DIR "free_hugepages", -1);
	if (!want_huge) {
		snprintf(
			p->why, sizeof(p->why),
			"4 KiB pages, the default (--huge-pages asks for huge ones, which a put or "
			"a copy from another store fills several times faster on a VM)");
		return;
	}
	if (free_ > 0) {
		p->kind = SHOAL_PAGES_HUGETLB;
		snprintf(p->why, sizeof(p->why),
			 "hugetlb pages of 2 MiB for segments of 2 MiB and more: %ld of the pool's "
			 "%ld free now (a segment the pool cannot hold goes on 4 KiB pages)",
			 free_, total);
		return;
	}
	if (thp_allowed(mode)) {
		p->kind = SHOAL_PAGES_THP;
		snprintf(p->why, sizeof(p->why),
			 "transparent huge pages of shmem (shmem_enabled is %s); the hugetlb pool "
			 "is empty (vm.nr_hugepages=N reserves N pages of 2 MiB)",
			 mode);
		return;
	}
	snprintf(p->why, sizeof(p->why),
		 "4 KiB pages: --huge-pages asked for huge ones, but the hugetlb pool is empty "
		 "(vm.nr_hugepages=N reserves N pages of 2 MiB) and shmem's transparent huge "
		 "pages are off (shmem_enabled is %s; 'advise' allows them)",
		 mode[0] ? mode : "not there");
}

static uint64_t round_up(uint64_t x, uint64_t to)
{
	return (x + to - 1) & ~(to - 1);
}

uint64_t sh_pages_round(const sh_pages *p, uint64_t size)
{
	if (p->kind != SHOAL_PAGES_HUGETLB || size < SH_HUGE_MIN)
		return size;
	return round_up(size, SH_HUGE_PAGE);
}

/* Faults every page of fd in through a mapping of its own, advised huge:
 * shmem gives huge pages only to a fault through such a mapping (when
 * shmem_enabled is advise), and they stay in the file after the unmap. */
static int populate(int fd, uint64_t size, bool advise)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return shoal_errno();
	int rc = 0;
	if (advise)
		(void)madvise(m, size, MADV_HUGEPAGE); /* a kernel without: 4 KiB */
	if (madvise(m, size, MADV_POPULATE_WRITE) != 0)
		rc = shoal_errno();
	munmap(m, size);
	return rc;
}

int sh_pages_segment(const sh_pages *p, const char *name, uint64_t size, int *fd,
		     uint64_t *got_size, shoal_pages *kind)
{
	uint64_t want = sh_pages_round(p, size);
	if (p->kind == SHOAL_PAGES_HUGETLB && size >= SH_HUGE_MIN) {
		int h = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
		/* fallocate takes the pages from the pool now, or fails: a
		 * page taken at a client's fault instead would be SIGBUS there */
		if (h >= 0 && ftruncate(h, (off_t)want) == 0 &&
		    fallocate(h, 0, 0, (off_t)want) == 0) {
			*fd = h;
			*got_size = want;
			*kind = SHOAL_PAGES_HUGETLB;
			return 0;
		}
		if (h >= 0)
			close(h);
		/* the pool is short: this one on 4 KiB pages */
		want = size;
	}
	int rc = sh_memfd_create(name, want, true, fd);
	if (rc)
		return rc;
	*got_size = want;
	*kind = SHOAL_PAGES_4K;
	if (p->kind == SHOAL_PAGES_THP && size >= SH_HUGE_MIN) {
		if ((rc = populate(*fd, want, true)) != 0) {
			close(*fd);
			return rc;
		}
		*kind = SHOAL_PAGES_THP;
	}
	return 0;
}

/* ---- allocated ahead of a writer ---- */

#define AHEAD_CHUNK ((uint64_t)64 << 20)

/* Pages faulted in through the writer's own mapping, 64 MiB at a time: in
 * it they are then mapped already, as a populated mapping's are (on this
 * VM a fault of its own in a fresh mapping costs far more than the page's
 * zeroing, though another process allocated it), and a pool's pages are
 * taken as shmem's are. */
struct sh_pages_ahead {
	unsigned char *map;
	uint64_t size;
	_Atomic bool stop;
	pthread_t th;
};

static void *ahead_main(void *arg)
{
	sh_pages_ahead *a = arg;
	pthread_setname_np(pthread_self(), "shoal-pages");
	for (uint64_t off = 0; off < a->size && !atomic_load(&a->stop); off += AHEAD_CHUNK) {
		uint64_t n = a->size - off < AHEAD_CHUNK ? a->size - off : AHEAD_CHUNK;
		/* a failure leaves the rest to the writer's faults */
		if (madvise(a->map + off, n, MADV_POPULATE_WRITE) != 0)
			break;
	}
	return NULL;
}

int sh_pages_segment_ahead(const sh_pages *p, const char *name, uint64_t size, int *fd,
			   uint64_t *got_size, shoal_pages *kind, void **map, size_t *maplen,
			   sh_pages_ahead **ahead)
{
	*map = NULL;
	*ahead = NULL;
	uint64_t want = sh_pages_round(p, size);
	int h = -1;
	void *m = MAP_FAILED;
	if (p->kind == SHOAL_PAGES_HUGETLB && size >= SH_HUGE_MIN) {
		h = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
		/* the mapping reserves the file's pages in the pool, or fails */
		if (h >= 0 && ftruncate(h, (off_t)want) == 0)
			m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, h, 0);
		if (m != MAP_FAILED) {
			*kind = SHOAL_PAGES_HUGETLB;
		} else {
			if (h >= 0)
				close(h);
			h = -1;
			want = size; /* the pool is short: this one on 4 KiB pages */
		}
	}
	if (h < 0) {
		int rc = sh_memfd_create(name, want, true, &h);
		if (rc)
			return rc;
		*kind = SHOAL_PAGES_4K;
		if (p->kind == SHOAL_PAGES_THP && size >= SH_HUGE_MIN &&
		    (m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, h, 0)) !=
			    MAP_FAILED) {
			(void)madvise(m, want, MADV_HUGEPAGE); /* a kernel without: 4 KiB */
			*kind = SHOAL_PAGES_THP;
		}
	}
	*fd = h;
	*got_size = want;
	if (m == MAP_FAILED)
		return 0;
	*map = m;
	*maplen = want;
	sh_pages_ahead *a = SH_NEW(sh_pages_ahead);
	if (a) {
		a->map = m;
		a->size = want;
		if (pthread_create(&a->th, NULL, ahead_main, a) == 0)
			*ahead = a;
		else
			SH_DELETE(a); /* the writer's faults take them all */
	}
	return 0;
}

void sh_pages_ahead_end(sh_pages_ahead *a, bool stop)
{
	if (!a)
		return;
	if (stop)
		atomic_store(&a->stop, true);
	pthread_join(a->th, NULL);
	SH_DELETE(a);
}

typedef struct seg_job {
	const sh_pages *p;
	const char *name;
	uint64_t size, got;
	int fd, rc;
	shoal_pages kind;
} seg_job;

static void seg_main(void *arg)
{
	seg_job *j = arg;
	j->rc = sh_pages_segment(j->p, j->name, j->size, &j->fd, &j->got, &j->kind);
}

int sh_pages_segment_aside(const sh_pages *p, const char *name, uint64_t size, int *fd,
			   uint64_t *got_size, shoal_pages *kind)
{
	if (p->kind == SHOAL_PAGES_4K || size < SH_HUGE_MIN)
		return sh_pages_segment(p, name, size, fd, got_size, kind); /* no pages now */
	seg_job j = {.p = p, .name = name, .size = size, .fd = -1};
	int w = sh_run_aside("shoal-pages", seg_main, &j);
	if (w != 0) {
		if (j.rc == 0)
			close(j.fd);
		return w;
	}
	if (j.rc == 0) {
		*fd = j.fd;
		*got_size = j.got;
		*kind = j.kind;
	}
	return j.rc;
}

bool sh_pages_spare_room(const sh_pages *p, uint64_t size)
{
	if (p->kind != SHOAL_PAGES_HUGETLB || size < SH_HUGE_MIN)
		return true;
	long free_ = sh_read_long(SH_HUGETLB_DIR "free_hugepages", -1);
	uint64_t pages = round_up(size, SH_HUGE_PAGE) / SH_HUGE_PAGE;
	return free_ >= 0 && (uint64_t)free_ >= 2 * pages;
}

/* ---- warming ---- */

#define WARM_CHUNK ((uint64_t)64 << 20)

void sh_pages_warm(const sh_pages *p, uint64_t bytes)
{
	bool huge = p->kind == SHOAL_PAGES_HUGETLB;
	int fd = huge ? memfd_create("shoal-warm", MFD_CLOEXEC | MFD_HUGETLB)
		      : memfd_create("shoal-warm", MFD_CLOEXEC);
	uint64_t size = round_up(bytes, SH_HUGE_PAGE);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	void *m = huge ? NULL : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		m = NULL;
	if (m && p->kind == SHOAL_PAGES_THP)
		(void)madvise(m, size, MADV_HUGEPAGE);
	for (uint64_t off = 0; off < size; off += WARM_CHUNK) {
		uint64_t n = size - off < WARM_CHUNK ? size - off : WARM_CHUNK;
		/* a pool or memory that runs out ends it: what was touched is warm */
		if (huge ? fallocate(fd, 0, (off_t)off, (off_t)n) != 0
			 : !m || madvise((char *)m + off, n, MADV_POPULATE_WRITE) != 0)
			break;
	}
	if (m)
		munmap(m, size);
	close(fd); /* the pages go back, warm: the next segments take them */
}

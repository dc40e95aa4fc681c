/* Huge pages for the rows that measure them: as root, a suite may grow the
 * hugetlb pool (vm.nr_hugepages) or let shmem use transparent huge pages
 * (shmem_enabled=advise) for as long as those rows run. Whatever it changed
 * is put back when the rows are done, at exit, and on SIGINT/SIGTERM, so a
 * failed or interrupted run leaves the machine as it found it. */
#include "bench.h"
#include "store/pages.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#define NR "/proc/sys/vm/nr_hugepages"
#define FREE SH_HUGETLB_DIR "free_hugepages"

static long saved_nr = -1;
static char saved_shmem[32];
static bool hooked;

static int write_str(const char *p, const char *v)
{
	FILE *f = fopen(p, "w");
	if (!f)
		return -1;
	int rc = fputs(v, f) < 0 ? -1 : 0;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

static void put_back(void)
{
	char b[32];
	if (saved_nr >= 0) {
		snprintf(b, sizeof(b), "%ld", saved_nr);
		(void)write_str(NR, b);
		saved_nr = -1;
	}
	if (saved_shmem[0]) {
		(void)write_str(SH_SHMEM_THP, saved_shmem);
		saved_shmem[0] = 0;
	}
}

static void on_signal(int sig)
{
	put_back();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void hook(void)
{
	if (hooked)
		return;
	hooked = true;
	atexit(put_back);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
}

/* Every page of the pool touched once: the stores of a row share one
 * machine's pool here, where each --reserve (which touches its own
 * capacity) would take the pages the other just gave back. On hosts of
 * their own each store's --reserve does this. */
static void touch_pool(uint64_t bytes)
{
	int fd = memfd_create("bench-pool", MFD_CLOEXEC | MFD_HUGETLB);
	if (fd < 0)
		return;
	if (ftruncate(fd, (off_t)bytes) == 0)
		(void)fallocate(fd, 0, 0, (off_t)bytes);
	close(fd);
}

int sh_bench_pages_set(const char *kind, uint64_t bytes, char *why, size_t whylen)
{
	if (!strcmp(kind, "4k"))
		return 0;
	if (geteuid() != 0) {
		snprintf(why, whylen, "%s pages need root to be set up for the run", kind);
		return -1;
	}
	hook();
	if (!strcmp(kind, "hugetlb")) {
		long now = sh_read_long(NR, -1), free_ = sh_read_long(FREE, -1);
		long want = (long)((bytes + (2u << 20) - 1) >> 21);
		if (now < 0 || free_ < 0) {
			snprintf(why, whylen, "no hugetlb pool of 2 MiB pages on this kernel");
			return -1;
		}
		if (saved_nr < 0)
			saved_nr = now;
		char b[32];
		snprintf(b, sizeof(b), "%ld", now + (want > free_ ? want - free_ : 0));
		if (write_str(NR, b) != 0 || sh_read_long(FREE, -1) < want) {
			snprintf(why, whylen,
				 "the hugetlb pool did not grow to %ld free pages of 2 MiB (%ld "
				 "free): "
				 "memory too fragmented or too small",
				 want, sh_read_long(FREE, -1));
			put_back();
			return -1;
		}
		touch_pool((uint64_t)want << 21);
		return 0;
	}
	if (!strcmp(kind, "thp")) {
		char mode[sizeof(saved_shmem)];
		sh_pages_shmem_mode(mode, sizeof(mode));
		if (!mode[0]) {
			snprintf(why, whylen, "no transparent huge pages for shmem on this kernel");
			return -1;
		}
		if (!saved_shmem[0])
			snprintf(saved_shmem, sizeof(saved_shmem), "%s", mode);
		if (write_str(SH_SHMEM_THP, "advise") != 0) {
			snprintf(why, whylen, "shmem_enabled did not take 'advise'");
			put_back();
			return -1;
		}
		return 0;
	}
	snprintf(why, whylen, "no page kind '%s'", kind);
	return -1;
}

void sh_bench_pages_reset(void)
{
	put_back();
}

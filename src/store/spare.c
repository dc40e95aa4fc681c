/* Spare segments (see spare.h): a worker thread that makes them, a few
 * kept ready, and the accounting that keeps what they hold within the
 * store's budget and free capacity. Everything the server thread does here
 * is a list operation under the mutex; allocating, touching and freeing
 * pages (tens of ms a GiB; touching 0.1-0.3 s, seconds on memory the VM
 * took back) is the worker's. */
#include "store/spare.h"
#include "shm/shm.h"
#include "store/pages.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define SPARES_MAX 4
#define ROUND ((uint64_t)2 << 20)
#define CHUNK ((uint64_t)16 << 20) /* touched between looks at the cancel flag */

typedef struct spare {
	int fd;
	uint64_t size;
	bool restore; /* wanted for a spilled object's restore */
	bool touched; /* its pages zeroed already, not only allocated */
} spare;

struct sh_spares {
	const sh_pages *pages; /* the store's: spares are on the same pages */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t made; /* a spare is made, or its making ended */
	pthread_t thread;
	uint64_t budget;
	spare ready[SPARES_MAX]; /* oldest first */
	uint32_t nready;
	int *closing; /* given up, or freed segments: the worker closes them */
	uint32_t nclosing, cap_closing;
	uint64_t want, want_room; /* the next to make (0: none) */
	bool want_restore;
	uint64_t making; /* being made: counted in held */
	bool making_restore;
	atomic_bool cancel; /* what is being made is given up */
	uint64_t held;
	bool stop;
};

/* A spare of x bytes serves a create of size: not much larger, since the
 * rest is freed when it is cut to size. */
static bool fits(uint64_t x, uint64_t size)
{
	return x >= size && x - size <= size / 4 + ROUND;
}

/* Queues fd for the worker to close (closed here if the queue cannot
 * grow). Under mu. */
static void to_close(sh_spares *sp, int fd)
{
	if (sh_grow_array((void **)&sp->closing, &sp->cap_closing, sp->nclosing, sizeof(int))) {
		close(fd);
		return;
	}
	sp->closing[sp->nclosing++] = fd;
	pthread_cond_signal(&sp->cv);
}

/* Gives up ready[i]. Under mu. */
static void give_up(sh_spares *sp, uint32_t i)
{
	spare x = sp->ready[i];
	sp->held -= x.size;
	for (uint32_t j = i; j + 1 < sp->nready; j++)
		sp->ready[j] = sp->ready[j + 1];
	sp->nready--;
	to_close(sp, x.fd);
}

/* The oldest spare that may make way for a spare wanted (for a restore
 * when restore): a put's guess first; one kept for a restore makes way
 * only for another, since the object it waits for is still in the store,
 * only not in memory; -1 when none may. Under mu. */
static int yielding(const sh_spares *sp, bool restore)
{
	for (uint32_t i = 0; i < sp->nready; i++)
		if (!sp->ready[i].restore)
			return (int)i;
	return restore && sp->nready ? 0 : -1;
}

/* A ready spare kept for a restore whose pages were only allocated (it
 * was a put's guess, or being made as one, when a restore wanted it), or
 * -1. Under mu. */
static int untouched(const sh_spares *sp)
{
	for (uint32_t i = 0; i < sp->nready; i++)
		if (sp->ready[i].restore && !sp->ready[i].touched)
			return (int)i;
	return -1;
}

/* Touches every page of fd's size bytes, which allocates and zeroes them
 * now, in this thread: fallocate alone allocates without zeroing, which
 * leaves each page's first touch to the copy into it, and on a VM that
 * first touch costs when the page is one the host took back (it takes
 * back within seconds what the guest freed beyond about a GiB: 0.45 GB/s
 * against 5-10 for a page still backed). 1 when done (or cancelled), 0 when the kernel has no
 * MADV_POPULATE_WRITE (before 5.14) and nothing was touched, -1 out of
 * memory. */
static int touch(sh_spares *sp, int fd, uint64_t size)
{
	unsigned char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -1;
	int rc = 1;
	for (uint64_t off = 0; off < size; off += CHUNK) {
		if (atomic_load_explicit(&sp->cancel, memory_order_relaxed))
			break;
		uint64_t n = size - off < CHUNK ? size - off : CHUNK;
		if (madvise(m + off, n, MADV_POPULATE_WRITE) != 0) {
			rc = errno == EINVAL && off == 0 ? 0 : -1;
			break;
		}
	}
	munmap(m, size);
	return rc;
}

/* A spare for a put is only allocated: the pages it takes are most often
 * those the last delete gave back, still backed, and touching them too
 * made back-to-back puts of 1 MiB slower (the worker's mapping and its
 * work beside the client's). One for a restore is touched: it may wait
 * long for its get, which must not meet a page the host took back. */
static int make(sh_spares *sp, uint64_t size, bool restore)
{
	int fd;
	uint64_t got;
	shoal_pages kind;
	if (!sh_pages_spare_room(sp->pages, size) ||
	    sh_pages_segment(sp->pages, "shoal-segment", size, &fd, &got, &kind) != 0)
		return -1;
	if (kind == SHOAL_PAGES_4K && sp->pages->kind != SHOAL_PAGES_4K && size >= SH_HUGE_MIN) {
		close(fd); /* the pool was short: a spare on other pages than creates get */
		return -1;
	}
	if (kind != SHOAL_PAGES_4K)
		return fd; /* its pages exist already */
	int t = restore ? touch(sp, fd, size) : 0;
	if (t < 0) { /* out of memory: the creates allocate as without spares */
		close(fd);
		return -1;
	}
	for (uint64_t off = 0; t == 0 && off < size; off += CHUNK) {
		if (atomic_load_explicit(&sp->cancel, memory_order_relaxed))
			break;
		uint64_t n = size - off < CHUNK ? size - off : CHUNK;
		if (fallocate(fd, 0, (off_t)off, (off_t)n) != 0) {
			/* out of memory (or a kernel without it): no spare, the
			 * creates allocate as they would without spares */
			close(fd);
			return -1;
		}
	}
	return fd;
}

/* The spare being made is done (fd, or -1: it could not be), touched or
 * not: ready, unless given up meanwhile. A restore's want that came while
 * it was made leaves it untouched but kept for a restore: the worker
 * touches it next. Under mu. */
static void made(sh_spares *sp, int fd, uint64_t size, bool touched)
{
	bool restore = sp->making_restore;
	sp->making = 0;
	pthread_cond_broadcast(&sp->made);
	if (atomic_load(&sp->cancel)) { /* sh_spares_fit took it out of held */
		if (fd >= 0)
			to_close(sp, fd);
		return;
	}
	if (fd < 0 || sp->nready == SPARES_MAX) { /* the latter cannot be: room was kept */
		if (fd >= 0)
			to_close(sp, fd);
		sp->held -= size;
		return;
	}
	sp->ready[sp->nready++] = (spare){fd, size, restore, touched};
}

static void *worker(void *arg)
{
	sh_spares *sp = arg;
	pthread_setname_np(pthread_self(), "shoal-spares");
	pthread_mutex_lock(&sp->mu);
	while (!sp->stop) {
		if (sp->nclosing) {
			int fd = sp->closing[--sp->nclosing];
			pthread_mutex_unlock(&sp->mu);
			close(fd);
			pthread_mutex_lock(&sp->mu);
			continue;
		}
		int u = untouched(sp);
		if (u >= 0) {
			/* out of the list while touched: a taker seals it, which
			 * no writable mapping of ours may see */
			spare x = sp->ready[u];
			for (uint32_t j = (uint32_t)u; j + 1 < sp->nready; j++)
				sp->ready[j] = sp->ready[j + 1];
			sp->nready--;
			sp->making = x.size;
			sp->making_restore = true;
			atomic_store(&sp->cancel, false);
			pthread_mutex_unlock(&sp->mu);
			(void)touch(sp, x.fd, x.size); /* short of memory: as it is */
			pthread_mutex_lock(&sp->mu);
			made(sp, x.fd, x.size, true);
			continue;
		}
		if (!sp->want) {
			pthread_cond_wait(&sp->cv, &sp->mu);
			continue;
		}
		uint64_t size = sp->want, room = sp->want_room;
		bool restore = sp->want_restore;
		sp->want = 0;
		uint64_t limit = room < sp->budget ? room : sp->budget;
		/* the oldest spares make way for the newest size */
		int old;
		while ((sp->held + size > limit || sp->nready == SPARES_MAX) &&
		       (old = yielding(sp, restore)) >= 0)
			give_up(sp, (uint32_t)old);
		if (sp->held + size > limit || sp->nready == SPARES_MAX) {
			pthread_cond_broadcast(&sp->made); /* a taker waits no more */
			continue;
		}
		sp->making = size;
		sp->making_restore = restore;
		sp->held += size;
		atomic_store(&sp->cancel, false);
		pthread_mutex_unlock(&sp->mu);
		int fd = make(sp, size, restore);
		pthread_mutex_lock(&sp->mu);
		made(sp, fd, size, restore);
	}
	pthread_mutex_unlock(&sp->mu);
	return NULL;
}

int sh_spares_start(sh_spares **out, uint64_t budget, const sh_pages *pages)
{
	sh_spares *sp = SH_NEW(sh_spares);
	if (!sp)
		return SHOAL_ENOMEM;
	sp->budget = budget;
	sp->pages = pages;
	atomic_init(&sp->cancel, false);
	pthread_mutex_init(&sp->mu, NULL);
	pthread_cond_init(&sp->cv, NULL);
	pthread_cond_init(&sp->made, NULL);
	int rc = pthread_create(&sp->thread, NULL, worker, sp);
	if (rc) {
		pthread_cond_destroy(&sp->made);
		pthread_cond_destroy(&sp->cv);
		pthread_mutex_destroy(&sp->mu);
		SH_DELETE(sp);
		return -rc;
	}
	*out = sp;
	return 0;
}

void sh_spares_stop(sh_spares *sp)
{
	if (!sp)
		return;
	pthread_mutex_lock(&sp->mu);
	sp->stop = true;
	sp->want = 0;
	atomic_store(&sp->cancel, true);
	pthread_cond_broadcast(&sp->made);
	pthread_cond_signal(&sp->cv);
	pthread_mutex_unlock(&sp->mu);
	pthread_join(sp->thread, NULL);
	for (uint32_t i = 0; i < sp->nready; i++)
		close(sp->ready[i].fd);
	for (uint32_t i = 0; i < sp->nclosing; i++)
		close(sp->closing[i]);
	if (sp->closing)
		shoal_free(sp->closing, sp->cap_closing * sizeof(int));
	pthread_cond_destroy(&sp->made);
	pthread_cond_destroy(&sp->cv);
	pthread_mutex_destroy(&sp->mu);
	SH_DELETE(sp);
}

/* The smallest ready spare that serves size, or -1. Under mu. */
static int best_fit(const sh_spares *sp, uint64_t size)
{
	int best = -1;
	for (uint32_t i = 0; i < sp->nready; i++)
		if (fits(sp->ready[i].size, size) &&
		    (best < 0 || sp->ready[i].size < sp->ready[best].size))
			best = (int)i;
	return best;
}

static bool making_fits(const sh_spares *sp, uint64_t size)
{
	return sp->making && !atomic_load(&sp->cancel) && fits(sp->making, size);
}

/* Whether a spare that would serve size is being made, or is the next the
 * worker makes (it closes what was freed first). Under mu. */
static bool coming(const sh_spares *sp, uint64_t size)
{
	return making_fits(sp, size) || (sp->want && fits(sp->want, size));
}

static int take(sh_spares *sp, uint64_t size, bool wait)
{
	if (size < SH_SPARE_MIN)
		return -1;
	pthread_mutex_lock(&sp->mu);
	int best;
	while ((best = best_fit(sp, size)) < 0 && wait && coming(sp, size))
		pthread_cond_wait(&sp->made, &sp->mu);
	spare x = {.fd = -1};
	if (best >= 0) {
		x = sp->ready[best];
		sp->held -= x.size;
		for (uint32_t j = (uint32_t)best; j + 1 < sp->nready; j++)
			sp->ready[j] = sp->ready[j + 1];
		sp->nready--;
	}
	pthread_mutex_unlock(&sp->mu);
	/* cut to size: the tail's pages go back now (a few, by fits()) */
	if (x.fd >= 0 && x.size != size && ftruncate(x.fd, (off_t)size) != 0) {
		close(x.fd);
		return -1;
	}
	return x.fd;
}

int sh_spares_take(sh_spares *sp, uint64_t size)
{
	return take(sp, size, false);
}

int sh_spares_take_wait(sh_spares *sp, uint64_t size)
{
	return take(sp, size, true);
}

void sh_spares_want(sh_spares *sp, uint64_t size, uint64_t room, bool restore)
{
	if (size < SH_SPARE_MIN || size > sp->budget)
		return;
	uint64_t r = (size + ROUND - 1) & ~(ROUND - 1);
	pthread_mutex_lock(&sp->mu);
	bool have = making_fits(sp, size);
	if (have && restore)
		sp->making_restore = true;
	int i = have ? -1 : best_fit(sp, size);
	if (i >= 0 && restore && !sp->ready[i].restore) {
		sp->ready[i].restore = true;
		pthread_cond_signal(&sp->cv); /* the worker touches it */
	}
	/* a guess from a put's size does not push out a restore's want */
	if (!have && i < 0 && (restore || !sp->want || !sp->want_restore)) {
		if (sp->want && sp->want != r) /* a taker waiting for it waits no more */
			pthread_cond_broadcast(&sp->made);
		sp->want = r;
		sp->want_room = room;
		sp->want_restore = restore;
		pthread_cond_signal(&sp->cv);
	}
	pthread_mutex_unlock(&sp->mu);
}

/* The spare to give up first when room is needed: a put's guess before a
 * restore's, the largest first (the fewest give-ups); not the one that
 * serves keep (the one a take of keep would get). -1 when none may go.
 * Under mu. */
static int to_give_up(const sh_spares *sp, uint64_t keep)
{
	int kept = keep ? best_fit(sp, keep) : -1;
	int big = -1;
	for (uint32_t i = 0; i < sp->nready; i++) {
		const spare *x = &sp->ready[i];
		if ((int)i == kept)
			continue;
		if (big < 0 || (sp->ready[big].restore && !x->restore) ||
		    (sp->ready[big].restore == x->restore && x->size > sp->ready[big].size))
			big = (int)i;
	}
	return big;
}

void sh_spares_fit(sh_spares *sp, uint64_t room, uint64_t keep)
{
	pthread_mutex_lock(&sp->mu);
	/* a spare still to be made is held to the room there is now */
	if (sp->want && !(keep && fits(sp->want, keep))) {
		if (sp->held + sp->want > room) {
			sp->want = 0;
			pthread_cond_broadcast(&sp->made);
		} else if (sp->want_room > room) {
			sp->want_room = room;
		}
	}
	if (sp->held > room) {
		int big;
		while (sp->held > room && (big = to_give_up(sp, keep)) >= 0)
			give_up(sp, (uint32_t)big);
		if (sp->held > room && sp->making && !atomic_load(&sp->cancel) &&
		    !(keep && fits(sp->making, keep))) {
			atomic_store(&sp->cancel, true);
			sp->held -= sp->making;
		}
		pthread_cond_signal(&sp->cv);
	}
	pthread_mutex_unlock(&sp->mu);
}

void sh_spares_dispose(sh_spares *sp, int fd)
{
	pthread_mutex_lock(&sp->mu);
	to_close(sp, fd);
	pthread_mutex_unlock(&sp->mu);
}

uint64_t sh_spares_ready_bytes(sh_spares *sp)
{
	pthread_mutex_lock(&sp->mu);
	uint64_t n = 0;
	for (uint32_t i = 0; i < sp->nready; i++)
		n += sp->ready[i].size;
	pthread_mutex_unlock(&sp->mu);
	return n;
}

uint32_t sh_spares_fds(sh_spares *sp)
{
	pthread_mutex_lock(&sp->mu);
	uint32_t n = sp->nready + sp->nclosing + (sp->making ? 1 : 0);
	pthread_mutex_unlock(&sp->mu);
	return n;
}

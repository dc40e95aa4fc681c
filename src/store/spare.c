/* Spare segments (see spare.h): a worker thread that makes them, a few
 * kept ready, and the accounting that keeps what they hold within the
 * store's budget and free capacity. Everything the server thread does here
 * is a list operation under the mutex; allocating and freeing pages (tens
 * of ms for a GiB) is the worker's. */
#include "store/spare.h"
#include "shm/shm.h"
#include "store/pages.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define SPARES_MAX 4
#define ROUND ((uint64_t)2 << 20)
#define CHUNK ((uint64_t)16 << 20) /* allocated between looks at the cancel flag */

typedef struct spare {
	int fd;
	uint64_t size;
} spare;

struct sh_spares {
	const sh_pages *pages; /* the store's: spares are on the same pages */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	uint64_t budget;
	spare ready[SPARES_MAX]; /* oldest first */
	uint32_t nready;
	int *closing; /* given up, or freed segments: the worker closes them */
	uint32_t nclosing, cap_closing;
	uint64_t want, want_room; /* the next to make (0: none) */
	uint64_t making;	  /* being made: counted in held */
	atomic_bool cancel;	  /* what is being made is given up */
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

static int make(sh_spares *sp, uint64_t size)
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
	for (uint64_t off = 0; off < size; off += CHUNK) {
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
		if (!sp->want) {
			pthread_cond_wait(&sp->cv, &sp->mu);
			continue;
		}
		uint64_t size = sp->want, room = sp->want_room;
		sp->want = 0;
		uint64_t limit = room < sp->budget ? room : sp->budget;
		/* the oldest spares make way for the newest size */
		while (sp->nready && (sp->held + size > limit || sp->nready == SPARES_MAX))
			give_up(sp, 0);
		if (sp->held + size > limit)
			continue;
		sp->making = size;
		sp->held += size;
		atomic_store(&sp->cancel, false);
		pthread_mutex_unlock(&sp->mu);
		int fd = make(sp, size);
		pthread_mutex_lock(&sp->mu);
		sp->making = 0;
		if (atomic_load(&sp->cancel)) {
			/* sh_spares_fit took it out of held already */
			if (fd >= 0) {
				pthread_mutex_unlock(&sp->mu);
				close(fd);
				pthread_mutex_lock(&sp->mu);
			}
			continue;
		}
		if (fd < 0) {
			sp->held -= size;
			continue;
		}
		if (sp->nready == SPARES_MAX)
			give_up(sp, 0);
		sp->ready[sp->nready++] = (spare){fd, size};
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
	int rc = pthread_create(&sp->thread, NULL, worker, sp);
	if (rc) {
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
	atomic_store(&sp->cancel, true);
	pthread_cond_signal(&sp->cv);
	pthread_mutex_unlock(&sp->mu);
	pthread_join(sp->thread, NULL);
	for (uint32_t i = 0; i < sp->nready; i++)
		close(sp->ready[i].fd);
	for (uint32_t i = 0; i < sp->nclosing; i++)
		close(sp->closing[i]);
	if (sp->closing)
		shoal_free(sp->closing, sp->cap_closing * sizeof(int));
	pthread_cond_destroy(&sp->cv);
	pthread_mutex_destroy(&sp->mu);
	SH_DELETE(sp);
}

int sh_spares_take(sh_spares *sp, uint64_t size)
{
	if (size < SH_SPARE_MIN)
		return -1;
	pthread_mutex_lock(&sp->mu);
	int best = -1;
	for (uint32_t i = 0; i < sp->nready; i++)
		if (fits(sp->ready[i].size, size) &&
		    (best < 0 || sp->ready[i].size < sp->ready[best].size))
			best = (int)i;
	spare x = {-1, 0};
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

void sh_spares_want(sh_spares *sp, uint64_t size, uint64_t room)
{
	if (size < SH_SPARE_MIN || size > sp->budget)
		return;
	uint64_t r = (size + ROUND - 1) & ~(ROUND - 1);
	pthread_mutex_lock(&sp->mu);
	bool have = sp->making && !atomic_load(&sp->cancel) && fits(sp->making, size);
	for (uint32_t i = 0; !have && i < sp->nready; i++)
		have = fits(sp->ready[i].size, size);
	if (!have) {
		sp->want = r;
		sp->want_room = room;
		pthread_cond_signal(&sp->cv);
	}
	pthread_mutex_unlock(&sp->mu);
}

void sh_spares_fit(sh_spares *sp, uint64_t room)
{
	pthread_mutex_lock(&sp->mu);
	if (sp->held > room) {
		sp->want = 0;
		while (sp->held > room && sp->nready) {
			/* the largest first: the fewest give-ups */
			uint32_t big = 0;
			for (uint32_t i = 1; i < sp->nready; i++)
				if (sp->ready[i].size > sp->ready[big].size)
					big = i;
			give_up(sp, big);
		}
		if (sp->held > room && sp->making && !atomic_load(&sp->cancel)) {
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

/* Which pages a store's large segments live on: hugetlbfs pages from the
 * kernel's pool, transparent huge pages of shmem, or 4 KiB pages. On a VM
 * a fresh 4 KiB shared page costs more to fault in than to fill (a GiB
 * takes 0.5-2 s where its copy takes 0.1 s); a huge page costs one fault
 * for 512 of them. The choice is made once, from what the system allows
 * (the store never changes its settings), and said in words with what
 * would allow the better one. */
#ifndef SHOAL_STORE_PAGES_H
#define SHOAL_STORE_PAGES_H

#include "shoal_impl.h"

#include <shoal/store.h>

/* Segments smaller than this stay on 4 KiB pages: a huge page for less
 * would hold mostly nothing. */
#define SH_HUGE_MIN ((uint64_t)2 << 20)
#define SH_HUGE_PAGE ((uint64_t)2 << 20)

/* Where the system says what it allows: the pool of 2 MiB pages
 * (nr_hugepages, free_hugepages) and shmem's THP mode. */
#define SH_HUGETLB_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"
#define SH_SHMEM_THP "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

/* shmem_enabled's chosen word ("advise" of "always [advise] never"), or ""
 * when the kernel has none. */
void sh_pages_shmem_mode(char *out, size_t n);

typedef struct sh_pages {
	shoal_pages kind;
	char why[256];	 /* what was chosen, why, and how to enable a better kind */
	bool short_said; /* a segment the pool could not hold was logged */
} sh_pages;

/* Picks the kind: with want_huge, hugetlb when the pool has free pages,
 * else THP where shmem_enabled allows it, else 4 KiB; without it, 4 KiB. */
void sh_pages_choose(sh_pages *p, bool want_huge);

/* The size of a segment asked for size bytes: its file's size, whole
 * huge pages on hugetlb (which takes no other), else size. */
uint64_t sh_pages_round(const sh_pages *p, uint64_t size);

/* A sealable memfd of sh_pages_round(size) bytes (*got_size: size when
 * it fell back to 4 KiB pages), on the
 * chosen kind when size is large enough, its pages allocated (and zeroed)
 * now when they are huge: a huge page's fault costs little here, and a
 * hugetlb page the pool cannot give would be SIGBUS in a client later.
 * When the pool is empty, 4 KiB pages (*kind says which it got). */
int sh_pages_segment(const sh_pages *p, const char *name, uint64_t size, int *fd,
		     uint64_t *got_size, shoal_pages *kind);

/* sh_pages_segment for a fiber of the store's thread: a segment of huge
 * pages is made by a thread of its own while the fiber waits (blocks the
 * fiber, not the thread: allocating and zeroing a GiB of huge pages takes
 * 0.04-0.1 s here, seconds on memory the VM never touched, and the
 * store's other clients must not wait for it). SHOAL_ECANCELED when the
 * fiber is cancelled meanwhile (the store stops): nothing is left. */
int sh_pages_segment_aside(const sh_pages *p, const char *name, uint64_t size, int *fd,
			   uint64_t *got_size, shoal_pages *kind);

/* A segment for bytes about to come in through a mapping (a copy from
 * another store), mapped writable into *map (*maplen bytes; NULL on 4 KiB
 * pages, which are written with pwrite): its huge pages are allocated and
 * zeroed by a thread of their own, ahead of the writer, rather than all
 * before the first byte (a GiB takes 0.1 s here, on the copy's path
 * otherwise; the writer's own fault takes a page the thread has not come
 * to yet). The pool's pages are reserved for the whole file when it is
 * mapped, so no fault of a later reader can find the pool empty; when it
 * cannot hold them, 4 KiB pages as sh_pages_segment. *ahead (NULL when no
 * thread runs) must be ended with sh_pages_ahead_end before the mapping
 * goes: stop asks it to leave what it did not allocate yet (the copy
 * failed). */
typedef struct sh_pages_ahead sh_pages_ahead;
int sh_pages_segment_ahead(const sh_pages *p, const char *name, uint64_t size, int *fd,
			   uint64_t *got_size, shoal_pages *kind, void **map, size_t *maplen,
			   sh_pages_ahead **ahead);
void sh_pages_ahead_end(sh_pages_ahead *a, bool stop);

/* Whether a spare of size may be made on p's pages now: on hugetlb, only
 * while the pool would still hold a segment of that size beside it (a
 * spare in the making holds its pages, and a create that finds none must
 * not be pushed onto 4 KiB pages by it). */
bool sh_pages_spare_room(const sh_pages *p, uint64_t size);

/* Memory first touched now rather than in a put: makes a file of bytes on
 * p's kind of pages, faults it in and frees it (blocks: 0.1-0.7 s a GiB
 * here, seconds a GiB the first time). On a VM the first touch of memory
 * the guest never used costs that much (the host backs it then); pages
 * given back are taken again by the next segments (the hugetlb pool hands
 * out the last freed first). Ends early when memory or the pool runs out. */
void sh_pages_warm(const sh_pages *p, uint64_t bytes);

#endif

/* The arena: where the store keeps small objects' blobs (up to
 * SH_STORE_INLINE_MAX, which arrive inside the seal request and are copied
 * here). One memfd that only this process maps writable and clients map
 * read-only from a read-only descriptor, cut into power-of-two size classes
 * of 64 B to 16 KiB, each class with its own free list. */
#include "store/server.h"
#include "store/proto.h"
#include "shm/shm.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int sh_st_arena_class(uint64_t size)
{
	int c = 0;
	while ((1ull << (c + ARENA_MIN_CLASS)) < size)
		c++;
	return c;
}

int sh_st_arena_alloc(shoal_store *s, uint64_t size, uint64_t *off)
{
	int c = sh_st_arena_class(size);
	uint64_t bytes = 1ull << (c + ARENA_MIN_CLASS);
	if (s->used + bytes > s->capacity)
		return SHOAL_ENOSPC;
	void *p = sh_ptrstack_pop(&s->arena_free[c]);
	if (p) {
		*off = (uint64_t)(uintptr_t)p - 1;
	} else {
		if (s->arena_bump + bytes > s->arena_size)
			return SHOAL_ENOSPC;
		*off = s->arena_bump;
		s->arena_bump += bytes;
	}
	s->used += bytes;
	return 0;
}

void sh_st_arena_free(shoal_store *s, uint64_t off, int c)
{
	s->used -= 1ull << (c + ARENA_MIN_CLASS);
	/* +1: offset 0 is a valid slot, NULL means empty */
	if (sh_ptrstack_push(&s->arena_free[c], (void *)(uintptr_t)(off + 1)) != 0)
		sh_warn("store", "arena: lost a %d-byte slot (out of memory)",
			1 << (c + ARENA_MIN_CLASS));
}

int sh_st_arena_make(shoal_store *s)
{
	size_t sz = s->capacity < SH_STORE_ARENA_MAX ? s->capacity : SH_STORE_ARENA_MAX;
	sz = (sz + PAGE - 1) & ~(size_t)(PAGE - 1);
	s->arena_size = sz;
	int rc = sh_memfd_create("shoal-arena", sz, true, &s->arena_fd);
	if (rc)
		return rc;
	if ((rc = sh_shm_map(s->arena_fd, sz, true, (void **)&s->arena)) != 0)
		return rc;
	/* Clients get a read-only open of the same file, so they cannot map it
	 * writable and mprotect cannot change that. That alone is not enough: a
	 * client can reopen its descriptor read-write through /proc/self/fd.
	 * So, now that our own mapping exists, the kernel refuses every new
	 * write to the file from anyone (write(2), fallocate, a writable
	 * mapping), and the file's mode refuses a read-write open by anyone
	 * but root. */
	if ((rc = sh_memfd_freeze_others(s->arena_fd)) != 0)
		return rc;
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", s->arena_fd);
	s->arena_ro_fd = open(p, O_RDONLY | O_CLOEXEC);
	if (s->arena_ro_fd < 0 || fchmod(s->arena_fd, 0400) != 0)
		return shoal_errno();
	if (s->opts.reserve) {
		/* Fault every page in now, so puts never pay first touches. */
		for (size_t off = 0; off < sz; off += PAGE)
			s->arena[off] = 0;
	}
	return 0;
}

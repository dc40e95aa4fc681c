/* The internal umbrella header: every file under src/ includes it,
 * directly or through its layer's header, and gets with it what every
 * layer shares (src/base/: logging, panics, futexes and doorbells, the
 * hash map, the bump allocator, growing arrays). Public names are
 * shoal_/SHOAL_ (include/shoal/); internal non-static names are sh_/SH_;
 * static helpers are unprefixed. Nothing declared here is exported from
 * the shared library. */
#ifndef SHOAL_IMPL_H
#define SHOAL_IMPL_H

#include <shoal/shoal.h>

#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define sh_likely(x) __builtin_expect(!!(x), 1)
#define sh_unlikely(x) __builtin_expect(!!(x), 0)
#define sh_container_of(p, T, m) ((T *)(void *)((char *)(p)-offsetof(T, m)))
#define SH_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A prefetch the compiler keeps. GCC 12 drops __builtin_prefetch from some
 * inlined branches (the scheduler's look-ahead was compiled out entirely),
 * so where a prefetch matters it is written in asm. */
static inline __attribute__((always_inline)) void sh_prefetch(const void *p)
{
#if defined(__x86_64__)
	__asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#elif defined(__aarch64__)
	__asm__ volatile("prfm pldl1keep, %0" : : "Q"(*(const char *)p));
#else
	__builtin_prefetch(p);
#endif
}

/* The same, for a line about to be written: fetched exclusive, so the
 * stores find it owned instead of each waiting for its own request for
 * ownership. (x86 CPUs without PREFETCHW decode it as a no-op.) */
static inline __attribute__((always_inline)) void sh_prefetchw(const void *p)
{
#if defined(__x86_64__)
	__asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#elif defined(__aarch64__)
	__asm__ volatile("prfm pstl1keep, %0" : : "Q"(*(const char *)p));
#else
	__builtin_prefetch(p, 1);
#endif
}

/* memset(p, 0, n) for a small constant n on a hot path. For more than 64
 * bytes GCC 12 at -O2 emits `rep stos`, whose start-up cost was the largest
 * part of a fiber's spawn; 64 bytes at a time it emits plain stores. */
static inline __attribute__((always_inline)) void sh_zero(void *p, size_t n)
{
	char *q = p;
	for (; n >= 64; n -= 64, q += 64)
		memset(q, 0, 64);
	if (n)
		memset(q, 0, n);
}

/* Sanitizer detection, for gcc and clang alike. */
#if defined(__SANITIZE_ADDRESS__)
#define SH_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define SH_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(SH_ASAN)
#define SH_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(SH_TSAN)
#define SH_TSAN 1
#endif
#endif

/* Logging with a component tag; formatting is skipped below the level. */
#define sh_log(lvl, comp, ...)                                 \
	do {                                                   \
		if ((lvl) <= shoal_log_get_level())            \
			shoal_log((lvl), (comp), __VA_ARGS__); \
	} while (0)
#define sh_error(comp, ...) sh_log(SHOAL_LOG_ERROR, comp, __VA_ARGS__)
#define sh_warn(comp, ...) sh_log(SHOAL_LOG_WARN, comp, __VA_ARGS__)
#define sh_info(comp, ...) sh_log(SHOAL_LOG_INFO, comp, __VA_ARGS__)
#define sh_debug(comp, ...) sh_log(SHOAL_LOG_DEBUG, comp, __VA_ARGS__)

/* For programming errors only (never bad input or out-of-memory): prints
 * where and why, then aborts. */
void sh_panic(const char *file, int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));
#define SH_PANIC(...) sh_panic(__FILE__, __LINE__, __VA_ARGS__)
#define SH_ASSERT(e)                                                              \
	do {                                                                      \
		if (sh_unlikely(!(e)))                                            \
			sh_panic(__FILE__, __LINE__, "assertion failed: %s", #e); \
	} while (0)

/* The one way a handle reports its failures (shoal_client_error,
 * shoal_ext_error, shoal_farm_error, shoal_remote_error): errno's way.
 * Each thread has one slot; a call on handle h that fails fills it with
 * what was expected and what came (sh_err_set, returning the code), a
 * later call on h by the same thread clears it, and the getter reads it
 * for h ("" when this thread's last failure was on another handle). One
 * thread's failure never shows in another's, however a handle is shared,
 * and no lock is needed. */
#define SH_ERR_MAX 1280
int sh_err_set(const void *h, int code, const char *fmt, ...) SHOAL_PRINTF(3, 4);
int sh_err_vset(const void *h, int code, const char *fmt, va_list ap);
void sh_err_clear(const void *h);
const char *sh_err_get(const void *h);
/* The same for a call that reports into its caller's buffer (why,
 * whylen: may be NULL, 0): the message, cut to fit; returns code. */
int sh_say(char *why, size_t whylen, int code, const char *fmt, ...) SHOAL_PRINTF(4, 5);

/* The checksum of n bytes at p, chained through seed (hash.c): of the
 * files the library writes and reads back, against corruption, not forgery. */
uint64_t sh_hash64(const void *p, size_t n, uint64_t seed);
/* The same over n bytes that come in pieces (read from a file): every
 * piece but the last a multiple of 32 bytes; the result is sh_hash64's. */
typedef struct sh_hash {
	uint64_t h[4], t;
} sh_hash;
void sh_hash64_begin(sh_hash *x, uint64_t n, uint64_t seed);
void sh_hash64_add(sh_hash *x, const void *p, size_t n);
uint64_t sh_hash64_end(const sh_hash *x);

/* Writes a whole buffer to fd with write(2), retrying on EINTR and partial
 * writes; async-signal-safe. */
void sh_write_all(int fd, const void *buf, size_t len);

/* A library loaded when first used (dl.c): lib opened (RTLD_LOCAL) and
 * each of syms' names looked up into its slot (a function pointer's
 * address); SHOAL_ENOSYS with why when it is not there or lacks one (hint,
 * if not NULL, says what is needed). */
typedef struct sh_dl_sym {
	const char *name;
	void **slot;
} sh_dl_sym;
int sh_dl_load(const char *lib, const sh_dl_sym *syms, size_t n, const char *hint, char *why,
	       size_t whylen);

/* The path of a program installed with the library (shoal-ext,
 * shoal-engine): in the programs' directory of the prefix the library was
 * installed under (found from where libshoal.so, or the program linking
 * libshoal.a, lies), else beside it, else the build's install path. */
const char *sh_program_path(const char *name, char *out, size_t len);
/* The number a system file (/proc/sys/..., /sys/...) starts with, or def
 * when it cannot be read or holds none. */
long sh_read_long(const char *path, long def);

/* Inside a spin loop: lets the sibling hyperthread run and saves power. */
static inline void sh_cpu_relax(void)
{
#if defined(__x86_64__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#endif
}

/* Futexes (futex.c). shared: the word is in memory shared with other
 * processes. The wait returns SHOAL_ETIMEDOUT at the deadline, else 0 for a
 * wake, a changed word or a signal: callers re-check their condition. */
int sh_futex_wait(_Atomic uint32_t *addr, uint32_t val, int64_t deadline, bool shared);
void sh_futex_wake(_Atomic uint32_t *addr, bool shared);
/* Adds one to an eventfd / empties a non-blocking one (futex.c), for
 * eventfds no other process holds. */
void sh_eventfd_signal(int fd);
void sh_eventfd_drain(int fd);
/* Doorbells another process rings (futex.c): a pipe, whose read end only
 * its maker holds (non-blocking: a peer cannot change that, as it could on
 * an eventfd or an end it shares), and whose write end the peer gets.
 * Ringing never blocks, whatever the peer did to the write end's flags or
 * however full it keeps the pipe (vmsplice with SPLICE_F_NONBLOCK). */
int sh_bell_pair(int *wait_fd, int *ring_fd);
void sh_bell_ring(int fd);
void sh_bell_drain(int fd);

/* One piece of a message gathered from where it lies or scattered to where
 * it belongs (ring/msg.h's parts, net.h's channels). */
typedef struct sh_msg_part {
	void *p; /* reading: NULL discards the bytes */
	size_t n;
} sh_msg_part;

/* A LIFO of pointers in one array, for free lists: popping reads the dense
 * array, never the (possibly cold) freed object itself, so taking many in a
 * row does not chase pointers from one cache miss to the next. */
typedef struct sh_ptrstack {
	void **v;
	size_t n, cap;
} sh_ptrstack;

/* Makes room for at least `want` entries; SHOAL_ENOMEM leaves it as it was. */
int sh_ptrstack_reserve(sh_ptrstack *ps, size_t want);
void sh_ptrstack_fini(sh_ptrstack *ps);

static inline int sh_ptrstack_push(sh_ptrstack *ps, void *p)
{
	if (sh_unlikely(ps->n == ps->cap) && sh_ptrstack_reserve(ps, ps->n + 1) != 0)
		return SHOAL_ENOMEM;
	ps->v[ps->n++] = p;
	return 0;
}

static inline void *sh_ptrstack_pop(sh_ptrstack *ps)
{
	return ps->n ? ps->v[--ps->n] : NULL;
}

/* A hash table from nonzero 64-bit keys to pointers (map.c). Zeroed is
 * empty. Iterate with size_t it = 0; while (sh_map_next(m, &it, &k, &v)),
 * and do not change the map meanwhile. */
typedef struct sh_map_slot {
	uint64_t key; /* 0: empty */
	void *val;
} sh_map_slot;
typedef struct sh_map {
	sh_map_slot *slots;
	size_t n, cap;
} sh_map;
void *sh_map_get(const sh_map *m, uint64_t key);
int sh_map_put(sh_map *m, uint64_t key, void *val); /* insert or replace */
void *sh_map_del(sh_map *m, uint64_t key);	    /* the value, or NULL */
bool sh_map_next(const sh_map *m, size_t *it, uint64_t *key, void **val);
void sh_map_fini(sh_map *m);

/* A bump allocator (bump.c): trees built or decoded once and freed whole
 * live in one. Zeroed is empty. */
typedef struct sh_bump_chunk sh_bump_chunk;
typedef struct sh_bump {
	sh_bump_chunk *head;
	sh_bump_chunk *spare; /* a big chunk a reset kept for reuse */
	size_t used;	      /* in head */
	size_t total;
} sh_bump;
void *sh_bump_alloc(sh_bump *b, size_t size);	  /* 8-aligned, zeroed */
void *sh_bump_alloc_raw(sh_bump *b, size_t size); /* 8-aligned, not zeroed */
char *sh_bump_str(sh_bump *b, const char *s, size_t len);
/* Whether [p, p+n) lies inside one of b's chunks. */
bool sh_bump_holds(const sh_bump *b, const void *p, size_t n);
/* Frees all but the newest small chunk and the largest one, which the
 * next allocations reuse. */
void sh_bump_reset(sh_bump *b);
/* Frees the chunk a reset kept if it is larger than keep bytes. */
void sh_bump_trim(sh_bump *b, size_t keep);
/* Moves src's chunks into dst (what was allocated from src lives as long
 * as dst now) and leaves src empty. */
void sh_bump_adopt(sh_bump *dst, sh_bump *src);
void sh_bump_fini(sh_bump *b);

/* Makes room for element n of the array *p of *cap elements of elem bytes
 * (doubling it), through the one allocator. SHOAL_ENOMEM leaves it as it
 * was. Free the array with shoal_free(*p, *cap * elem). */
int sh_grow_array(void **p, uint32_t *cap, uint32_t n, size_t elem);
/* The same, with room for need elements in all (one reallocation). */
int sh_grow_to(void **p, uint32_t *cap, uint32_t need, size_t elem);

/* Allocate one T (zeroed) / free it, through the replaceable allocator. */
#define SH_NEW(T) ((T *)shoal_calloc(1, sizeof(T)))
#define SH_DELETE(p) shoal_free((p), sizeof(*(p)))

#endif

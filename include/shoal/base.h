/* shoal base layer: error codes, logging, monotonic time, checked size
 * arithmetic and the one replaceable allocator. Every other layer and every
 * user of the library starts here. */
#ifndef SHOAL_BASE_H
#define SHOAL_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SHOAL_API __attribute__((visibility("default")))
#define SHOAL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SHOAL_API
#define SHOAL_PRINTF(f, a)
#endif

/* Error codes. Functions return 0 or one of these (always negative). Where a
 * POSIX errno has the same meaning the code is its negation, so
 * -errno from a failed system call can be returned unchanged. Codes that
 * have no errno twin live below -10000. */
enum {
	SHOAL_OK = 0,
	SHOAL_EPERM = -1,
	SHOAL_ENOENT = -2,
	SHOAL_EINTR = -4,
	SHOAL_EIO = -5,
	SHOAL_EBADF = -9,
	SHOAL_EAGAIN = -11,
	SHOAL_ENOMEM = -12,
	SHOAL_EACCES = -13,
	SHOAL_EBUSY = -16,
	SHOAL_EEXIST = -17,
	SHOAL_EINVAL = -22,
	SHOAL_EMFILE = -24,
	SHOAL_ENOSPC = -28,
	SHOAL_EPIPE = -32,
	SHOAL_ERANGE = -34,
	SHOAL_EDEADLK = -35,
	SHOAL_ENAMETOOLONG = -36,
	SHOAL_ENOSYS = -38,
	SHOAL_EOVERFLOW = -75,
	SHOAL_EPROTO = -71,
	SHOAL_EMSGSIZE = -90,
	SHOAL_ENOTSUP = -95,
	SHOAL_EADDRINUSE = -98,
	SHOAL_ECONNRESET = -104,
	SHOAL_ETIMEDOUT = -110,
	SHOAL_ECONNREFUSED = -111,
	SHOAL_ECANCELED = -125,
	/* shoal's own codes */
	SHOAL_ECLOSED = -10001,	 /* the channel, endpoint or object was closed */
	SHOAL_ECRASHED = -10002, /* the peer process died */
	SHOAL_EBADMSG = -10003,	 /* input failed validation */
	SHOAL_ESEALED = -10004,	 /* the object is sealed and cannot change */
	SHOAL_EENGINE = -10005,	 /* a task's engine died and its retries are spent */
	SHOAL_EDEPFAIL = -10006, /* a task that this one depends on failed */
	SHOAL_ERAISED = -10007,	 /* a task's Python function raised (the message: the
				    exception as JSON: type, message, traceback) */
};

/* Every handle (a store client, an extension, a farm, a remote client)
 * says what went wrong in one way: shoal_HANDLE_error(h), the message of
 * the calling thread's last failed call on h, "" after a success, what was
 * expected and what came. Like errno, each thread sees its own failures,
 * however a handle is shared between threads; the string is valid until
 * that thread's next call on a shoal handle. */

/* The name of an error code ("SHOAL_ECLOSED: closed"), never NULL; unknown
 * codes get a generic text. Thread-safe; the string is static. */
SHOAL_API const char *shoal_strerror(int err);

/* Converts the current errno into a shoal code (-errno, or SHOAL_EIO when
 * errno is 0, so a failed call never reads as success). */
SHOAL_API int shoal_errno(void);

/* ---- logging -------------------------------------------------------- */

typedef enum {
	SHOAL_LOG_ERROR = 0,
	SHOAL_LOG_WARN = 1,
	SHOAL_LOG_INFO = 2,
	SHOAL_LOG_DEBUG = 3,
	SHOAL_LOG_TRACE = 4,
} shoal_log_level;

/* The threshold comes from the environment variable SHOAL_LOG (error, warn,
 * info, debug, trace or 0-4) the first time anything logs; default warn. */
SHOAL_API shoal_log_level shoal_log_get_level(void);
SHOAL_API void shoal_log_set_level(shoal_log_level level);

/* A sink receives each formatted line (without newline). The default sink
 * writes "shoal LEVEL [component] message" to stderr with one write(2), so
 * lines from several threads or processes never interleave. Passing NULL
 * restores the default. Must not be changed while other threads log. */
typedef void (*shoal_log_sink)(shoal_log_level level, const char *component, const char *line,
			       void *ctx);
SHOAL_API void shoal_log_set_sink(shoal_log_sink sink, void *ctx);

SHOAL_API void shoal_log(shoal_log_level level, const char *component, const char *fmt, ...)
	SHOAL_PRINTF(3, 4);
SHOAL_API void shoal_vlog(shoal_log_level level, const char *component, const char *fmt,
			  va_list ap);

/* ---- time ----------------------------------------------------------- */

/* Deadlines are absolute CLOCK_MONOTONIC nanoseconds. */
#define SHOAL_FOREVER ((int64_t)-1)
#define SHOAL_NOWAIT ((int64_t)0)

/* Monotonic time in nanoseconds (vDSO, no system call). */
SHOAL_API int64_t shoal_now_ns(void);
/* shoal_now_ns() + ns, saturating; a negative ns gives SHOAL_FOREVER. */
SHOAL_API int64_t shoal_deadline_in(int64_t ns);

/* ---- checked arithmetic --------------------------------------------- */

/* Each stores the result in *out and returns 0, or returns SHOAL_EOVERFLOW
 * and leaves *out unchanged. */
static inline int shoal_add_size(size_t a, size_t b, size_t *out)
{
	size_t r;
	if (__builtin_add_overflow(a, b, &r))
		return SHOAL_EOVERFLOW;
	*out = r;
	return 0;
}

static inline int shoal_mul_size(size_t a, size_t b, size_t *out)
{
	size_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return SHOAL_EOVERFLOW;
	*out = r;
	return 0;
}

/* Rounds a up to a multiple of align (a power of two). */
static inline int shoal_align_size(size_t a, size_t align, size_t *out)
{
	size_t r;
	if (align == 0 || (align & (align - 1)) != 0)
		return SHOAL_EINVAL;
	if (__builtin_add_overflow(a, align - 1, &r))
		return SHOAL_EOVERFLOW;
	*out = r & ~(align - 1);
	return 0;
}

/* ---- the allocator ---------------------------------------------------- */

/* All heap memory shoal uses goes through these hooks. Frees are sized, so
 * an allocator can count bytes without headers. realloc may be NULL; then
 * shoal uses alloc + copy + free. Install before any other shoal call, or
 * while no other thread uses shoal. Passing NULL restores libc. */
typedef struct shoal_allocator {
	void *(*alloc)(size_t size, void *ctx);
	void *(*realloc)(void *p, size_t old_size, size_t new_size, void *ctx);
	void (*free)(void *p, size_t size, void *ctx);
	void *ctx;
} shoal_allocator;

SHOAL_API void shoal_set_allocator(const shoal_allocator *a);

/* Bytes currently allocated through shoal_alloc (all threads). */
SHOAL_API size_t shoal_alloc_bytes(void);

/* Returns NULL on failure (never aborts). Size 0 returns a unique pointer. */
SHOAL_API void *shoal_alloc(size_t size);
SHOAL_API void *shoal_calloc(size_t n, size_t size);
SHOAL_API void *shoal_realloc(void *p, size_t old_size, size_t new_size);
SHOAL_API void shoal_free(void *p, size_t size);

#ifdef __cplusplus
}
#endif
#endif

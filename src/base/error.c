/* Error codes: names and texts for shoal_strerror, errno conversion, the
 * handles' failure messages (sh_err_*, one slot a thread), and the panic
 * used for programming errors. */
#include "shoal_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
	int code;
	const char *text;
} codes[] = {
	{SHOAL_OK, "SHOAL_OK: success"},
	{SHOAL_EPERM, "SHOAL_EPERM: operation not permitted"},
	{SHOAL_ENOENT, "SHOAL_ENOENT: no such entry"},
	{SHOAL_EINTR, "SHOAL_EINTR: interrupted"},
	{SHOAL_EIO, "SHOAL_EIO: input/output error"},
	{SHOAL_EBADF, "SHOAL_EBADF: bad file descriptor"},
	{SHOAL_EAGAIN, "SHOAL_EAGAIN: try again"},
	{SHOAL_ENOMEM, "SHOAL_ENOMEM: out of memory"},
	{SHOAL_EACCES, "SHOAL_EACCES: permission denied"},
	{SHOAL_EBUSY, "SHOAL_EBUSY: busy"},
	{SHOAL_EEXIST, "SHOAL_EEXIST: already exists"},
	{SHOAL_EINVAL, "SHOAL_EINVAL: invalid argument"},
	{SHOAL_EMFILE, "SHOAL_EMFILE: too many open files"},
	{SHOAL_ENOSPC, "SHOAL_ENOSPC: no space left"},
	{SHOAL_EPIPE, "SHOAL_EPIPE: broken pipe"},
	{SHOAL_ERANGE, "SHOAL_ERANGE: out of range"},
	{SHOAL_EDEADLK, "SHOAL_EDEADLK: would deadlock"},
	{SHOAL_ENAMETOOLONG, "SHOAL_ENAMETOOLONG: name too long"},
	{SHOAL_ENOSYS, "SHOAL_ENOSYS: not implemented by the system"},
	{SHOAL_EOVERFLOW, "SHOAL_EOVERFLOW: value too large (arithmetic overflow)"},
	{SHOAL_EPROTO, "SHOAL_EPROTO: protocol error"},
	{SHOAL_EMSGSIZE, "SHOAL_EMSGSIZE: message too long"},
	{SHOAL_EADDRINUSE, "SHOAL_EADDRINUSE: address in use"},
	{SHOAL_ENOTSUP, "SHOAL_ENOTSUP: not supported"},
	{SHOAL_ECONNRESET, "SHOAL_ECONNRESET: connection reset by peer"},
	{SHOAL_ETIMEDOUT, "SHOAL_ETIMEDOUT: deadline passed"},
	{SHOAL_ECONNREFUSED, "SHOAL_ECONNREFUSED: connection refused"},
	{SHOAL_ECANCELED, "SHOAL_ECANCELED: canceled"},
	{SHOAL_ECLOSED, "SHOAL_ECLOSED: closed"},
	{SHOAL_ECRASHED, "SHOAL_ECRASHED: peer process crashed"},
	{SHOAL_EENGINE, "SHOAL_EENGINE: the task's engine died"},
	{SHOAL_EDEPFAIL, "SHOAL_EDEPFAIL: a dependency failed"},
	{SHOAL_ERAISED, "SHOAL_ERAISED: the task's function raised an exception"},
	{SHOAL_EBADMSG, "SHOAL_EBADMSG: input failed validation"},
	{SHOAL_ESEALED, "SHOAL_ESEALED: object is sealed"},
};

const char *shoal_strerror(int err)
{
	for (size_t i = 0; i < SH_ARRAY_LEN(codes); i++)
		if (codes[i].code == err)
			return codes[i].text;
	if (err < 0 && err > -4096)
		return "SHOAL_E?: unnamed system error (see errno)";
	return "SHOAL_E?: unknown error code";
}

int shoal_errno(void)
{
	return errno > 0 ? -errno : SHOAL_EIO;
}

void sh_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		p += n;
		len -= (size_t)n;
	}
}

void sh_panic(const char *file, int line, const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "shoal PANIC %s:%d: ", file, line);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(buf))
		n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf) - 1)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	sh_write_all(2, buf, (size_t)n);
	abort();
}

/* The slot holds a pointer, its text allocated on a thread's first
 * failure: 1.3 KB of static TLS in every thread of every program (a
 * store's readers are many small processes) cost a page each, for a text
 * most threads never write. */
static _Thread_local struct {
	const void *owner;
	char *text;
} last_err;

static pthread_key_t err_key;
static bool err_key_ok;
static pthread_once_t err_once = PTHREAD_ONCE_INIT;

static void err_key_make(void)
{
	/* the destructor frees a thread's text when it ends */
	err_key_ok = pthread_key_create(&err_key, free) == 0;
}

int sh_err_vset(const void *h, int code, const char *fmt, va_list ap)
{
	/* formatted apart first: the arguments may hold the slot's own text
	 * (a farm's message quoting its store client's) */
	char text[SH_ERR_MAX];
	vsnprintf(text, sizeof(text), fmt, ap);
	if (!last_err.text) {
		pthread_once(&err_once, err_key_make);
		char *t = malloc(SH_ERR_MAX);
		if (!t || !err_key_ok || pthread_setspecific(err_key, t) != 0) {
			free(t);
			last_err.owner = h; /* sh_err_get says why it has no text */
			return code;
		}
		last_err.text = t;
	}
	memcpy(last_err.text, text, strlen(text) + 1);
	last_err.owner = h;
	return code;
}

int sh_err_set(const void *h, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sh_err_vset(h, code, fmt, ap);
	va_end(ap);
	return code;
}

void sh_err_clear(const void *h)
{
	if (last_err.owner == h)
		last_err.owner = NULL;
}

const char *sh_err_get(const void *h)
{
	if (!h || last_err.owner != h)
		return "";
	return last_err.text ? last_err.text : "(no memory for this failure's message)";
}

int sh_say(char *why, size_t whylen, int code, const char *fmt, ...)
{
	if (why && whylen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return code;
}

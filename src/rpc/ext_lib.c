/* Extension libraries: loading, the registry of functions, and what a
 * function gets to work with (see ext_lib.h). */
#include "rpc/ext_lib.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int shoal_ext_register(shoal_ext_registry *r, const char *name, shoal_ext_fn fn)
{
	if (!r || !name || !*name || !fn)
		return SHOAL_EINVAL;
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->fns[i].name, name) == 0)
			return SHOAL_EEXIST;
	if (r->n == r->cap) {
		size_t nc = r->cap ? r->cap * 2 : 16;
		sh_ext_fn_entry *p = shoal_realloc(r->fns, r->cap * sizeof(*p), nc * sizeof(*p));
		if (!p)
			return SHOAL_ENOMEM;
		r->fns = p;
		r->cap = nc;
	}
	size_t l = strlen(name) + 1;
	char *copy = shoal_alloc(l);
	if (!copy)
		return SHOAL_ENOMEM;
	memcpy(copy, name, l);
	r->fns[r->n].name = copy;
	r->fns[r->n++].fn = fn;
	return 0;
}

int shoal_ext_init_fail(shoal_ext_registry *r, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
	r->fail_code = code;
	return code;
}

shoal_vbuf *shoal_ext_vbuf(shoal_ext_ctx *ctx)
{
	return ctx->vb;
}

int shoal_ext_fail(shoal_ext_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx->msg, sizeof(ctx->msg), fmt, ap);
	va_end(ap);
	return code;
}

const char *shoal_ext_ctx_error(const shoal_ext_ctx *ctx)
{
	return ctx ? ctx->msg : "";
}

int sh_ext_lib_load(sh_ext_lib *lib, const char *so, int fd, char *why, size_t whylen)
{
	memset(lib, 0, sizeof(*lib));
	char by_fd[32];
	if (fd >= 0) {
		snprintf(by_fd, sizeof(by_fd), "/proc/self/fd/%d", fd);
	} else if (access(so, R_OK) != 0) {
		snprintf(why, whylen, "%s: %s", so, strerror(errno));
		return shoal_errno();
	}
	if (!(lib->handle = dlopen(fd >= 0 ? by_fd : so, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(why, whylen, "cannot load %s: %s", so, dlerror());
		return SHOAL_EBADMSG;
	}
	shoal_ext_init_fn init;
	*(void **)&init = dlsym(lib->handle, SHOAL_EXT_INIT_SYMBOL);
	if (!init) {
		snprintf(why, whylen, "%s has no %s(): not a shoal extension", so,
			 SHOAL_EXT_INIT_SYMBOL);
		sh_ext_lib_unload(lib);
		return SHOAL_EBADMSG;
	}
	return sh_ext_lib_init(lib, init, why, whylen);
}

int sh_ext_lib_init(sh_ext_lib *lib, shoal_ext_init_fn init, char *why, size_t whylen)
{
	int rc = init(&lib->reg);
	if (rc || lib->reg.fail_code) {
		rc = rc ? rc : lib->reg.fail_code;
		rc = rc < 0 ? rc : SHOAL_EIO;
		snprintf(why, whylen, "init failed: %s",
			 lib->reg.msg[0] ? lib->reg.msg : shoal_strerror(rc));
		sh_ext_lib_unload(lib);
		return rc;
	}
	return 0;
}

void sh_ext_lib_unload(sh_ext_lib *lib)
{
	for (size_t i = 0; i < lib->reg.n; i++)
		shoal_free(lib->reg.fns[i].name, strlen(lib->reg.fns[i].name) + 1);
	if (lib->reg.fns)
		shoal_free(lib->reg.fns, lib->reg.cap * sizeof(*lib->reg.fns));
	if (lib->handle)
		dlclose(lib->handle);
	memset(lib, 0, sizeof(*lib));
}

shoal_ext_fn sh_ext_lib_find(const sh_ext_lib *lib, const char *name, size_t len)
{
	for (size_t i = 0; i < lib->reg.n; i++)
		if (strlen(lib->reg.fns[i].name) == len &&
		    memcmp(lib->reg.fns[i].name, name, len) == 0)
			return lib->reg.fns[i].fn;
	return NULL;
}

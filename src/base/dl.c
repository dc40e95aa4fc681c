/* Libraries loaded when first used (libcrypto and libssl for TLS, libcurl
 * for etcd): one way to open one and look up a table of its functions, so
 * that shoal runs, and says what is missing, where they are not installed. */
#include "shoal_impl.h"

#include <dlfcn.h>
#include <stdio.h>

int sh_dl_load(const char *lib, const sh_dl_sym *syms, size_t n, const char *hint, char *why,
	       size_t whylen)
{
	/* RTLD_NODELETE: the functions stay valid whoever else closes it */
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h)
		return sh_say(why, whylen, SHOAL_ENOSYS, "%s", dlerror());
	for (size_t i = 0; i < n; i++)
		if (!(*syms[i].slot = dlsym(h, syms[i].name)))
			return sh_say(why, whylen, SHOAL_ENOSYS, "%s lacks %s%s%s%s", lib,
				      syms[i].name, hint ? " (" : "", hint ? hint : "",
				      hint ? ")" : "");
	return 0;
}

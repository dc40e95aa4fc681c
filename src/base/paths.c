/* Where the library finds the programs installed with it (the extension
 * runner, the task engine): beside the library itself, wherever its prefix
 * was, so that an install under any PREFIX works without a path baked in
 * at build time being right. And the numbers of the system's files the
 * library reads (vm settings, the hugetlb pool). */
#include "shoal_impl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by the build: the programs' directory relative to the library's
 * (e.g. "../bin"), and the absolute one as a last resort. */
#ifndef SHOAL_BINDIR_FROM_LIBDIR
#define SHOAL_BINDIR_FROM_LIBDIR "../bin"
#endif
#ifndef SHOAL_BINDIR
#define SHOAL_BINDIR "/usr/local/bin"
#endif

/* Whether dir/rel/name is an executable file; then it is in out. */
static bool found(char *out, size_t len, const char *dir, const char *rel, const char *name)
{
	int n = rel ? snprintf(out, len, "%s/%s/%s", dir, rel, name)
		    : snprintf(out, len, "%s/%s", dir, name);
	return n > 0 && (size_t)n < len && access(out, X_OK) == 0;
}

const char *sh_program_path(const char *name, char *out, size_t len)
{
	/* The object this code is in: libshoal.so, or the program that
	 * linked libshoal.a. */
	Dl_info info;
	char dir[PATH_MAX];
	if (dladdr((void *)sh_program_path, &info) && info.dli_fname &&
	    realpath(info.dli_fname, dir)) {
		char *slash = strrchr(dir, '/');
		if (slash) {
			*slash = 0;
			if (found(out, len, dir, SHOAL_BINDIR_FROM_LIBDIR, name) ||
			    found(out, len, dir, NULL, name))
				return out;
		}
	}
	snprintf(out, len, "%s/%s", SHOAL_BINDIR, name);
	return out;
}

long sh_read_long(const char *path, long def)
{
	FILE *f = fopen(path, "re");
	long v = def;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = def;
		fclose(f);
	}
	return v;
}

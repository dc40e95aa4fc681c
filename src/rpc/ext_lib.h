/* Extension libraries: loading a .so written against shoal/ext.h (or
 * taking the functions built into the process: the Python module's), its
 * registry of named functions, and running one of them. shoal-ext (the
 * extension runner) and shoal-engine (the task engine) both load and run
 * functions this way. */
#ifndef SHOAL_RPC_EXT_LIB_H
#define SHOAL_RPC_EXT_LIB_H

#include "rpc/ext_proto.h"

#include <shoal/ext.h>

typedef struct sh_ext_fn_entry {
	char *name;
	shoal_ext_fn fn;
} sh_ext_fn_entry;

struct shoal_ext_registry {
	sh_ext_fn_entry *fns;
	size_t n, cap;
	int fail_code;
	char msg[SH_EXT_MSG_MAX];
};

/* What a function gets as its context. runner: the extension runner's
 * state (NULL in a task engine: no host to call back). In an engine on
 * the controller's host, the task is asked to give up when *gone holds its
 * number (the controller writes it there when the task's client went). */
struct shoal_ext_ctx {
	void *runner;
	const _Atomic uint64_t *gone;
	uint64_t task;
	int depth;
	uint32_t seq; /* of the call it runs */
	shoal_vbuf *vb;
	char msg[SH_EXT_MSG_MAX];
};

typedef struct sh_ext_lib {
	void *handle;
	shoal_ext_registry reg;
} sh_ext_lib;

/* Loads so and runs its init: SHOAL_ENOENT (no such file), SHOAL_EBADMSG
 * (not loadable, or no init symbol), or the code its init failed with;
 * why says which. fd >= 0: so's bytes were read already (by a process
 * that could read them, before it became a uid that may not), into the
 * memfd fd, and are loaded from there; so only names it. */
int sh_ext_lib_load(sh_ext_lib *lib, const char *so, int fd, char *why, size_t whylen);
/* Runs init on lib (zeroed, or loaded with no init run yet): an extension
 * built into the runner's own process rather than loaded from a .so. */
int sh_ext_lib_init(sh_ext_lib *lib, shoal_ext_init_fn init, char *why, size_t whylen);
void sh_ext_lib_unload(sh_ext_lib *lib);
/* The function called name (len bytes), or NULL. */
shoal_ext_fn sh_ext_lib_find(const sh_ext_lib *lib, const char *name, size_t len);

#endif

/* shoal extensions: functions in a shared object that run in their own
 * process (shoal-ext) and that a host calls as if they were local.
 *
 * Extension side: the .so exports `int shoal_ext_init(shoal_ext_registry *)`,
 * which registers its functions by name. A function gets its arguments as
 * one value (usually an array), builds its result in the call's vbuf and
 * returns 0, or returns a SHOAL_E* code with a message (shoal_ext_fail),
 * which the host receives unchanged.
 *
 * Host side: shoal_ext_start runs an extension under a config (limits,
 * sandbox, deadlines, restart policy) and returns once its init has run,
 * or with its error; shoal_ext_call calls a function. A crash of the
 * extension fails the calls in flight at once with SHOAL_ECRASHED and a
 * message naming the signal or exit status and the function; it never
 * crashes the host. */
#ifndef SHOAL_EXT_H
#define SHOAL_EXT_H

#include <stdbool.h>
#include <sys/types.h>

#include <shoal/base.h>
#include <shoal/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- extension side ------------------------------------------------------ */

typedef struct shoal_ext_registry shoal_ext_registry;
typedef struct shoal_ext_ctx shoal_ext_ctx;

/* A function of an extension: args as the host sent them; *result built in
 * shoal_ext_vbuf(ctx) (left NULL: nil). */
typedef int (*shoal_ext_fn)(shoal_ext_ctx *ctx, const shoal_value *args, shoal_value **result);

/* The symbol every extension exports. */
#define SHOAL_EXT_INIT_SYMBOL "shoal_ext_init"
typedef int (*shoal_ext_init_fn)(shoal_ext_registry *r);
/* What the extension defines (declared here so that its definition is
 * checked against this type, and exported whatever its visibility):
 * registers its functions, or fails with shoal_ext_init_fail. */
SHOAL_API int shoal_ext_init(shoal_ext_registry *r);

SHOAL_API int shoal_ext_register(shoal_ext_registry *r, const char *name, shoal_ext_fn fn);
/* Where a call builds its result; freed once the result is sent. */
SHOAL_API shoal_vbuf *shoal_ext_vbuf(shoal_ext_ctx *ctx);
/* Sets the message the host gets with the code the function returns;
 * returns code, so: return shoal_ext_fail(ctx, SHOAL_EINVAL, "...", ...). */
SHOAL_API int shoal_ext_fail(shoal_ext_ctx *ctx, int code, const char *fmt, ...) SHOAL_PRINTF(3, 4);
/* True once the host has asked this call to give up (its deadline has
 * passed): a long function that checks it and returns is not killed. In a
 * task engine, true once the task's client has gone (nobody waits for its
 * result): within 10 ms over TCP, at once on the controller's host. */
SHOAL_API bool shoal_ext_cancelled(const shoal_ext_ctx *ctx);
/* Calls a method the host exposes (shoal_service_register), from inside a
 * function. The result lives until the function returns. The host may
 * call back into this extension meanwhile: calls nest both ways, on this
 * thread, to a depth of 128. On failure the message is the context's. */
SHOAL_API int shoal_ext_call_host(shoal_ext_ctx *ctx, const char *method, const shoal_value *args,
				  const shoal_value **result);
/* The extension's own connection to its host's store, or NULL (no
 * config store_socket; a task engine). A strict extension's is restricted
 * (shoal_restrict): it reads what its host holds (the objects passed to
 * it) and its own, makes objects of its own, deletes only those. */
SHOAL_API shoal_client *shoal_ext_store(shoal_ext_ctx *ctx);
/* The message of the last failure within this call (shoal_ext_fail, a
 * failed shoal_ext_call_host). */
SHOAL_API const char *shoal_ext_ctx_error(const shoal_ext_ctx *ctx);
/* In init: the reason it failed, sent to the host's start call. */
SHOAL_API int shoal_ext_init_fail(shoal_ext_registry *r, int code, const char *fmt, ...)
	SHOAL_PRINTF(3, 4);

/* ---- host side ------------------------------------------------------------- */

typedef struct shoal_ext shoal_ext;

/* A method of a host service (a "singleton"), callable by every extension
 * of this process: args as sent, *result built in out; a nonzero return
 * is a SHOAL_E* code with a message written to msg. It may call into
 * extensions itself (calls nest). */
typedef int (*shoal_service_fn)(void *self, const shoal_value *args, shoal_vbuf *out,
				shoal_value **result, char *msg, size_t msglen);
/* Exposes method ("Service.method" by convention) to extensions. */
SHOAL_API int shoal_service_register(const char *method, shoal_service_fn fn, void *self);
SHOAL_API int shoal_service_unregister(const char *method);

typedef enum shoal_sandbox {
	/* its own process tree (ended whole when it stops), nothing else */
	SHOAL_SANDBOX_NONE = 0,
	/* no inherited descriptors, cleared environment (plus config env and an
	 * allow-list), new session, dies with the host, no new privileges.
	 * Hygiene, not isolation: it keeps our uid, capabilities and /proc */
	SHOAL_SANDBOX_BASIC,
	/* basic, plus: namespaces of its own (mounts, with a /proc of its own
	 * pid namespace; cgroups; IPC; the network unless allow_network), no
	 * capabilities, uid 65534 when we are root (so the .so must be readable
	 * by it) or a user namespace of our own uid, and a seccomp allow-list
	 * (EPERM for the rest: ptrace, io_uring, mount, bpf, namespaces, sockets
	 * other than AF_UNIX unless allow_network...). Where the kernel refuses
	 * any of it, the start fails (SHOAL_EPERM) */
	SHOAL_SANDBOX_STRICT,
} shoal_sandbox;

/* How tensors travel: copied through the rings, or shared: put once into
 * a sealed store object that the other side maps read-only (the first
 * share of a private buffer copies it into one; a tensor already in the
 * store goes by reference at once). */
typedef enum shoal_payload {
	SHOAL_PAYLOAD_COPY = 0,
	SHOAL_PAYLOAD_SHARED,
} shoal_payload;

typedef enum shoal_restart {
	SHOAL_RESTART_NEVER = 0,
	SHOAL_RESTART_ON_CRASH, /* start it again at the next call after a crash */
} shoal_restart;

#define SHOAL_EXT_RUNNER_ARGS_MAX 16

typedef struct shoal_ext_config {
	const char *path;	  /* the extension's .so */
	const char *name;	  /* in messages; NULL: the file name */
	const char *runner;	  /* the shoal-ext program; NULL: $SHOAL_EXT_RUNNER, else the
				     one installed with this library */
	char *const *runner_args; /* NULL-terminated arguments put between the runner and
				     shoal-ext's options (at most SHOAL_EXT_RUNNER_ARGS_MAX),
				     for a runner that is an interpreter running shoal-ext's
				     code (shoal's Python module: `python3 -c ...`); NULL:
				     none */
	char *const *env;	  /* "NAME=value" entries added to its environment */
	const char *cwd;	  /* its working directory; NULL: ours */
	const char *library_path; /* its LD_LIBRARY_PATH */
	uint64_t mem_limit;	  /* bytes of address space (RLIMIT_AS); 0: none */
	uint64_t mem_max;	  /* bytes of memory it may use, the limit of its cgroup
				     (past it the kernel's OOM killer ends it: SHOAL_ECRASHED
				     says so); where no cgroup can be made, a warning and an
				     address-space limit instead. 0: none */
	uint32_t cpu_limit_s;	  /* seconds of CPU (RLIMIT_CPU); 0: none */
	uint32_t max_files;	  /* open descriptors (RLIMIT_NOFILE); 0: inherited */
	shoal_sandbox sandbox;
	bool allow_network;	  /* strict: still allow IP sockets */
	int64_t call_timeout_ns;  /* deadline of a call that gives none; 0: none */
	int64_t start_timeout_ns; /* 0: 5 s */
	shoal_restart restart;
	shoal_payload payload;	  /* the default of its calls */
	const char *store_socket; /* the store shared payloads go through */
	/* strict: the connection (its shoal_claim token) whose objects the
	 * extension may read besides its own, through its restricted one
	 * (shoal_restrict); 0: this host's own connection to store_socket,
	 * which shoal_v_share and shared calls put objects through */
	uint64_t store_grant;
	bool log_output; /* its stdout and stderr go into our log (shoal_log,
			    component "ext"), a line at a time prefixed with its
			    name: stdout at SHOAL_LOG_INFO, stderr at
			    SHOAL_LOG_WARN; control bytes show as '?'. false: they
			    are our own stdout and stderr, except at strict,
			    where they always go into our log. From basic on,
			    its stdin is /dev/null */
} shoal_ext_config;

SHOAL_API void shoal_ext_config_init(shoal_ext_config *c);

/* Starts the extension and returns when its init has run: SHOAL_ENOENT
 * (no such file), SHOAL_EBADMSG (not an extension: missing symbol), the
 * code its init failed with, SHOAL_ECRASHED (it died while loading),
 * SHOAL_ETIMEDOUT; shoal_ext_error says more. On failure *out is
 * still set when the config was valid, so that the message can be read:
 * shoal_ext_stop frees it. */
SHOAL_API int shoal_ext_start(shoal_ext **out, const shoal_ext_config *cfg);

/* Calls fn with args (NULL: nil); the result is decoded into out and
 * valid until out is reset. deadline: SHOAL_FOREVER, or absolute
 * (shoal_deadline_in); 0 uses the config's call_timeout_ns. Past it the
 * call is asked to give up (shoal_ext_cancelled); if it has not returned
 * 100 ms later the extension is killed (its state is unknown) and
 * restarted per policy. Either way the call fails with SHOAL_ETIMEDOUT. */
SHOAL_API int shoal_ext_call(shoal_ext *e, const char *fn, const shoal_value *args, shoal_vbuf *out,
			     const shoal_value **result, int64_t deadline);

enum {
	SHOAL_CALL_COPY = 1,   /* this call copies its payloads */
	SHOAL_CALL_SHARED = 2, /* this call shares them */
};
/* shoal_ext_call with the payload mode of this call in flags. */
SHOAL_API int shoal_ext_call_ex(shoal_ext *e, const char *fn, const shoal_value *args,
				shoal_vbuf *out, const shoal_value **result, int64_t deadline,
				unsigned flags);

/* Calls in flight: shoal_ext_call_async sends the call and returns; many
 * may be in flight on one extension, which runs them in order. Each future
 * must be waited for exactly once (that frees it); its result is decoded
 * into out. deadline (absolute, or 0: the call's own) bounds the wait; a
 * child that dies fails every call in flight with SHOAL_ECRASHED. From a
 * fiber, only the fiber waits. */
typedef struct shoal_future shoal_future;
SHOAL_API int shoal_ext_call_async(shoal_ext *e, const char *fn, const shoal_value *args,
				   int64_t deadline, unsigned flags, shoal_future **out);
SHOAL_API int shoal_future_wait(shoal_future *f, shoal_vbuf *out, const shoal_value **result,
				int64_t deadline);

/* Shares the tensors of v (a value of b) through e's store now: the first
 * share copies each into a store object that b owns from then on (until b
 * is reset or freed), and v refers to it, so later calls pass it by
 * reference. A call in shared mode does this itself for tensors not yet
 * shared, for that call only. */
SHOAL_API int shoal_v_share(shoal_ext *e, shoal_vbuf *b, shoal_value *v);

/* The message of this thread's last failed call on e ("" after a
 * success): each thread sees its own, like errno (base.h says more). */
SHOAL_API const char *shoal_ext_error(const shoal_ext *e);
/* Its process id (0 when not running). */
SHOAL_API pid_t shoal_ext_pid(const shoal_ext *e);
/* How many times it was started (1 + restarts). */
SHOAL_API uint32_t shoal_ext_starts(const shoal_ext *e);

/* Stops it (a polite request, then SIGTERM, then SIGKILL, each after a
 * short deadline), ends every process it started (its cgroup, else a
 * subreaper in the runner, or at strict its pid namespace) and frees e. */
SHOAL_API int shoal_ext_stop(shoal_ext *e);

#ifdef __cplusplus
}
#endif

#endif

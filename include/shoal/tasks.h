/* shoal task farm: a client floods tasks (a function name and argument
 * values) to a controller, which hands them to engine processes and sends
 * the results back; what ipyparallel's load-balanced view does.
 *
 * Engines (shoal-engine) load their functions from a .so written against
 * shoal/ext.h, as extensions do. The controller runs in a thread of some
 * process (shoal_controller_open: a host program, shoald, or `shoal
 * controller`); clients and engines on the host reach it over its unix
 * socket, through shared-memory rings.
 *
 * Submitting never waits for scheduling: tasks are batched on the client
 * and sent when the batch is full, on shoal_farm_flush, or when the client
 * waits. Results come back in batches too, and are kept until waited for.
 *
 * A client sees how the controller is doing with shoal_farm_stat (what
 * `shoal stat --socket CTL` shows), and a wait that times out while the
 * controller has no engine says so in its message.
 *
 * Blocking: each prototype says whether it blocks. A call that blocks
 * without a deadline of its own waits at most the client's timeout
 * (shoal_farm_set_timeout, 60 s by default) for the controller to take or
 * send anything, then fails with SHOAL_ETIMEDOUT; connecting has a
 * deadline (10 s for shoal_farm_connect). Engines give up connecting after
 * 10 s the same way.
 *
 * Schemes (how the controller picks an engine), as ipyparallel names them:
 * pure (round robin, no bookkeeping beyond what a retry needs), lru (the
 * engine given a task least recently), leastload (fewest tasks in flight:
 * the default), weighted (at random, weighted by free capacity), twobin
 * (the less loaded of two picked at random). */
#ifndef SHOAL_TASKS_H
#define SHOAL_TASKS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <shoal/base.h>
#include <shoal/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum shoal_scheme {
	SHOAL_SCHEME_LEASTLOAD = 0,
	SHOAL_SCHEME_PURE,
	SHOAL_SCHEME_LRU,
	SHOAL_SCHEME_WEIGHTED,
	SHOAL_SCHEME_TWOBIN,
} shoal_scheme;

/* "pure", "lru", ...: the scheme, or -1. */
SHOAL_API int shoal_scheme_parse(const char *name);
SHOAL_API const char *shoal_scheme_name(shoal_scheme s);

/* ---- the controller ---------------------------------------------------- */

typedef struct shoal_controller shoal_controller;

typedef struct shoal_controller_opts {
	const char *socket; /* NULL: a fresh path in shoal_socket_dir() */
	shoal_scheme scheme;
	/* Also serve engines and clients of other hosts over TCP here
	 * ("HOST:PORT"; port 0: any; NULL: not). Each must prove it knows the
	 * shared secret first; the controller will not listen without one. */
	const char *tcp;
	const void *secret; /* 16 bytes or more; NULL: $SHOAL_SECRET_FILE, else $SHOAL_SECRET */
	size_t secret_len;
	/* Every byte over TCP after the handshake is encrypted and
	 * authenticated (AES-256-GCM records, keys from the secret and the
	 * handshake). true: a link whose peer also asks for it
	 * ("tcp://HOST:PORT?encrypt=false") goes in clear, each record still
	 * authenticated: for a trusted network only. */
	bool no_encrypt;
	/* Tasks an engine holds at most, sent or on their way and not
	 * answered (ipyparallel's high-water mark); the rest wait in the
	 * controller, where a client that leaves drops them. 0: 1024 (enough
	 * for a flood of no-op tasks to keep engines busy); at most 1 << 20. */
	uint32_t window;
	/* How long a TCP peer may leave a message half sent or half read
	 * before its link is dropped: a peer frozen mid-upload would otherwise
	 * hold the engine its task is relayed to, for everyone. 0: 10 s. */
	int64_t stall_ns;
} shoal_controller_opts;

SHOAL_API void shoal_controller_opts_init(shoal_controller_opts *o);
/* Starts a controller in a thread of this process. Does not block (binds
 * its sockets and starts its thread). */
SHOAL_API int shoal_controller_open(shoal_controller **out, const shoal_controller_opts *o);
/* Its socket, for clients and engines. */
SHOAL_API const char *shoal_controller_socket(const shoal_controller *c);
/* Where it listens for TCP peers ("HOST:PORT"), or NULL. */
SHOAL_API const char *shoal_controller_tcp(const shoal_controller *c);
/* Stops it: clients and engines see their connection end. Blocks until
 * its thread has ended (it does not wait for peers). */
SHOAL_API void shoal_controller_close(shoal_controller *c);

typedef struct shoal_controller_stat {
	uint32_t engines, clients;
	uint64_t queued;  /* tasks waiting for an engine */
	uint64_t running; /* tasks on engines */
	uint64_t done;	  /* results sent, since it started */
	uint64_t retried; /* tasks sent again after their engine went */
	uint64_t failed;  /* tasks that ended in an error of the farm's own */
	/* Bytes of large tasks (16 KiB and more) held in memory until their
	 * results: now, and the most at once. Past 16 MiB the controller
	 * stops reading clients, whose submits then wait. */
	uint64_t held_bytes, held_peak;
} shoal_controller_stat;
/* Does not block. */
SHOAL_API int shoal_controller_stat_get(shoal_controller *c, shoal_controller_stat *st);

/* Starts a shoal-engine process that loads so and serves the controller
 * at socket (a unix socket, or "tcp://HOST:PORT" with the secret in the
 * environment as for clients); runner NULL: $SHOAL_ENGINE, else the one installed with this
 * library. The engine is ready once shoal_controller_stat counts it.
 * *pid is the caller's child, to wait for as any other: when it ends, a
 * controller of this process reads how (a signal is named in
 * SHOAL_EENGINE) but leaves it to be reaped. Does not block (the engine
 * connects on its own, and exits after 10 s if the controller does not
 * answer). */
SHOAL_API int shoal_engine_spawn(const char *socket, const char *so, const char *runner,
				 pid_t *pid);
/* The same, with the engine connected to the store at store_socket, so
 * that tensors and blobs of task arguments reach it by reference. */
SHOAL_API int shoal_engine_spawn_store(const char *socket, const char *so, const char *runner,
				       const char *store_socket, pid_t *pid);

/* ---- the client -------------------------------------------------------- */

typedef struct shoal_farm shoal_farm;
typedef uint64_t shoal_task; /* a task's id: 1, 2, 3 ... per farm */

/* socket: the controller's unix socket, or "tcp://HOST:PORT" for one on
 * another host (the secret comes from $SHOAL_SECRET_FILE or $SHOAL_SECRET;
 * "tcp://HOST:PORT?encrypt=false" asks for records in clear, still
 * authenticated, which only a controller opened with no_encrypt grants).
 * Blocks for the connection and the handshake: at most 10 s over TCP
 * (SHOAL_ETIMEDOUT). */
SHOAL_API int shoal_farm_connect(shoal_farm **out, const char *socket);
/* The same, until deadline. */
SHOAL_API int shoal_farm_connect_until(shoal_farm **out, const char *socket, int64_t deadline);
/* The client's timeout: how long a blocking call (submit of a large task,
 * flush, use_store; the flush in a wait) waits for the controller to take
 * anything, and a read for the rest of a batch it began, before
 * SHOAL_ETIMEDOUT. 60 s at first; 0: as long as it takes. Does not block.
 * After a timeout the tasks not sent stay queued: a later flush goes on. */
SHOAL_API void shoal_farm_set_timeout(shoal_farm *f, int64_t ns);
/* From now on, tensors and blobs in task arguments go by reference
 * through the store at store_socket (on this host: engines must use the
 * same store, shoal_engine_spawn_store): each not in the store yet is
 * copied into an object once, when it is submitted, and that object is
 * deleted when the task's result is taken (or the farm closed). Blocks
 * (the store's connect, then the client's timeout). */
SHOAL_API int shoal_farm_use_store(shoal_farm *f, const char *store_socket);
/* Closes the connection: the controller drops its tasks not yet run.
 * Does not block. */
SHOAL_API void shoal_farm_close(shoal_farm *f);
/* The message of this thread's last failed call on f ("" after a
 * success): each thread sees its own, like errno (base.h says more). */
SHOAL_API const char *shoal_farm_error(const shoal_farm *f);

typedef struct shoal_task_opts {
	int64_t timeout_ns; /* from submission; 0: none. Past it: SHOAL_ETIMEDOUT */
	uint32_t retries;   /* times it is sent again if its engine dies; then
			       SHOAL_EENGINE */
	/* Run only on this engine (its number); -1: any. A number no engine
	 * had yet waits for one; an engine that has gone (numbers are never
	 * given twice) fails the task with SHOAL_EENGINE, also those for it
	 * it had not started. */
	int32_t engine;
	/* Dependencies on earlier tasks of this client (the scheduled schemes
	 * only: pure refuses them with SHOAL_ENOTSUP). after: run once these
	 * succeeded; follow: once these succeeded, on the engine that ran
	 * them. A dependency that failed fails the task with SHOAL_EDEPFAIL,
	 * naming it. */
	const shoal_task *after;
	uint32_t nafter;
	const shoal_task *follow;
	uint32_t nfollow;
} shoal_task_opts;
SHOAL_API void shoal_task_opts_init(shoal_task_opts *o);

/* Queues a task (opts NULL: defaults); *id names it. The arguments are
 * encoded now: args may be freed when this returns. Does not block for a
 * task of small arguments (a full socket keeps the batch for later); one
 * with 16 KiB or more of bytes is sent before this returns, which blocks
 * (the client's timeout). */
SHOAL_API int shoal_farm_submit(shoal_farm *f, const char *fn, const shoal_value *args,
				const shoal_task_opts *opts, shoal_task *id);
/* n tasks of fn, one per item of args (an array); ids first .. first+n-1.
 * Blocks as submit does. */
SHOAL_API int shoal_farm_map(shoal_farm *f, const char *fn, const shoal_value *args,
			     const shoal_task_opts *opts, shoal_task *first);
/* Sends what is queued. Blocks until the socket or ring has it (the
 * client's timeout). */
SHOAL_API int shoal_farm_flush(shoal_farm *f);

/* Waits for a task's result (once per task): 0 and the result decoded
 * into out, or the task's error: the code its function returned with its
 * message, SHOAL_EENGINE (its engine died, retries spent), SHOAL_ETIMEDOUT,
 * SHOAL_ENOENT (no such function on the engine). Blocks until deadline
 * (SHOAL_FOREVER: until the result), sending what is queued first. When
 * the deadline passes, the wait asks the controller whether it has an
 * engine (up to 250 ms more): if not, shoal_farm_error says "no
 * engine is connected to the controller at ..." (and a warning is logged,
 * once per client). The same holds for wait_any and wait_all. */
SHOAL_API int shoal_farm_wait(shoal_farm *f, shoal_task id, shoal_vbuf *out,
			      const shoal_value **result, int64_t deadline);
/* Waits until some task not yet waited for has its result: *id. Blocks
 * until deadline, as shoal_farm_wait. */
SHOAL_API int shoal_farm_wait_any(shoal_farm *f, shoal_task *id, int64_t deadline);
/* Waits until some task not yet waited for has its result, then gives
 * the ids of up to cap of those whose results are here, oldest first, into
 * ids (*n of them), to take with shoal_farm_wait (which then does not
 * block). Blocks until deadline; unlike the other waits it does not ask
 * the controller about its engines when the deadline passes (a deadline
 * of now is a poll). */
SHOAL_API int shoal_farm_wait_some(shoal_farm *f, shoal_task *ids, uint32_t cap, uint32_t *n,
				   int64_t deadline);
/* on: the store objects made for a task whose result is taken (its shared
 * arguments, its result) are deleted only by shoal_farm_drop_taken, so
 * that the caller can take references of its own first (deleted, an
 * object cannot be got by id); off (the default): when the result is
 * taken. Neither blocks but drop_taken, for the store's answers. */
SHOAL_API void shoal_farm_defer_drops(shoal_farm *f, bool on);
SHOAL_API void shoal_farm_drop_taken(shoal_farm *f);
/* Waits until every task submitted so far has its result (they stay to
 * be taken with shoal_farm_wait). Blocks until deadline. */
SHOAL_API int shoal_farm_wait_all(shoal_farm *f, int64_t deadline);

/* One engine of a controller, as shoal_farm_stat reports it. */
typedef struct shoal_farm_engine {
	uint32_t num;	   /* its number (shoal_task_opts.engine) */
	uint32_t inflight; /* tasks sent to it and not answered */
	int32_t pid;	   /* its process, on the controller's host; 0 over TCP */
	char peer[96];	   /* where it is: "pid 1234", or its TCP address */
} shoal_farm_engine;

/* The controller's figures, as shoal_controller_stat_get gives them in its
 * own process (clients counts this one), and its engines: the first cap of
 * them into engines (NULL when cap is 0), how many there are into
 * *nengines (NULL: not wanted). The controller answers after the results
 * it has for this client, which are kept for the waits. Sends what is
 * queued first. Blocks until deadline (SHOAL_ETIMEDOUT). */
SHOAL_API int shoal_farm_stat(shoal_farm *f, shoal_controller_stat *st, shoal_farm_engine *engines,
			      uint32_t cap, uint32_t *nengines, int64_t deadline);

#ifdef __cplusplus
}
#endif

#endif

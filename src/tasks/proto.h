/* The task farm's protocol, between clients, the controller and engines.
 * On one host each connects to the controller's socket as a link
 * (ring/link.h) with its own protocol word, and frames (wire.h) go over
 * the rings; from another host over TCP, in the secure channel (net.h).
 * Each frame carries a batch:
 *
 *   client -> controller   SUBMIT  [[id, fn, args, timeout_ns, retries, engine,
 *                                     [after id...], [follow id...]] ...]
 *   client -> controller   OWNER   [token]  (once, before its tasks)
 *   controller -> client   RESULTS [[id, status, [result, [made id...]] | message] ...]
 *   controller -> engine   RUN     [[tid, owner, fn, args] ...]
 *   engine -> controller   DONE    [[tid, status, [result, [made id...]] | message] ...]
 *   engine -> controller   STARTED [seq]   (over TCP, before it starts its seq-th entry)
 *   controller -> engine   DROP    [seq...] (over TCP: entries whose client went)
 *   client -> controller   STATUS  []
 *   controller -> client   STATUS  [engines, clients, queued, running, done, retried,
 *                                   failed, held, held_peak, [[num, peer, pid, in flight] ...]]
 *
 * An engine holds at most the controller's window of tasks; the rest wait
 * there. A task of at least SH_TASKS_REF_MIN bytes goes alone in its
 * frame, [id, bytes, timeout_ns, ...], its fn and args out of band after
 * it. The controller passes it on in a RUN batch as any other (its bytes
 * written from where it holds them), or, relaying it from a client over
 * TCP to an engine over TCP, alone: RUN [[tid, owner, bytes]], the bytes
 * as they come, then a verdict (0: its client went, run nothing).
 *
 * A result is sent with the ids of the store objects its engine made for
 * it (its large tensors and blobs, by reference, when the engine has a
 * store, sealed for the owner its client gave): the client that takes the
 * result deletes them, so they live until its vbuf lets go; they are the
 * client's from the moment they are sent (the engine forgets them).
 *
 * The controller never decodes arguments or results: it forwards the
 * bytes of fn and args (and of a result) as the sender encoded them, and
 * reads only ids, options and statuses. Engines decode arguments with the
 * strict value decoder; clients decode results the same way. */
#ifndef SHOAL_TASKS_PROTO_H
#define SHOAL_TASKS_PROTO_H

#include "ring/link.h"
#include "ring/msg.h"
#include "wire/wire.h"

#include <shoal/ext.h>
#include <shoal/tasks.h>

#define SH_TASKS_CLIENT 0x544c4346u /* "FCLT": a client's link */
#define SH_TASKS_ENGINE 0x474e4546u /* "FENG": an engine's link */
#define SH_TASKS_VERSION 2
#define SH_TASKS_RING_CAP (1u << 20)
/* A batch is sent once it holds this many bytes (or when flushed). */
#define SH_TASKS_BATCH_BYTES (64u << 10)
/* Tasks of at least this many bytes go out of band (sh_tk_submit), and
 * into a RUN batch by reference, not copied; the controller passes those
 * bytes on from a client over TCP to an engine over TCP without them
 * entering it. */
#define SH_TASKS_REF_MIN (16u << 10)
/* How long a client or an engine waits, at most, for a connection and
 * the controller's handshake (shoal_farm_connect; shoal-engine). */
#define SH_TASKS_CONNECT_NS (10 * 1000000000LL)
/* The page an engine on this host shares with the controller: word 0 the
 * RUN entry it starts (it stores it first), then slots: the controller
 * drops an entry s the engine has not started (its client went) by
 * storing s in slot s % nslots, and the engine skips an entry whose
 * number it finds there. Twice the window of slots, at least: an entry's
 * slot is not reused while it may be in the window. */
static inline size_t sh_tk_page_bytes(uint32_t window)
{
	size_t n = 8 * (1 + 2 * (size_t)window);
	return (n + 4095) & ~(size_t)4095;
}
/* Tasks an engine holds at most, by default (shoal_controller_opts.window),
 * and the largest window a controller takes. */
#define SH_TASKS_WINDOW 1024
#define SH_TASKS_WINDOW_MAX (1u << 20)
/* How long a TCP peer may stall a message mid-way (controller default). */
#define SH_TASKS_STALL_NS (10 * 1000000000LL)
/* A client's timeout at first (shoal_farm_set_timeout). */
#define SH_TASKS_TIMEOUT_NS (60 * 1000000000LL)
/* The largest frame a side accepts. */
#define SH_TASKS_MSG_MAX ((size_t)256 << 20)
/* An engine with a store sends results' tensors and blobs of at least this
 * many bytes by reference; smaller ones inline. */
#define SH_TASKS_SHARE_MIN (64u << 10)

/* SH_TK_OWNER, from a client with a store: [token], its owner token
 * (shoal_claim), once, before its tasks. Engines seal large results for
 * it, so they are the client's whatever becomes of the engine; an engine
 * on another store (where no one claims it) sends them inline. */
/* SH_TK_STARTED, from an engine over TCP: [seq], written before it starts
 * the seq-th RUN entry it got (1, 2, ...), so that the controller knows
 * which of the tasks it had never started when it dies. An engine on this
 * host writes seq into the page the controller gave it with its link
 * instead (a 64-bit word at offset 0). */
/* SH_TK_DROP, to an engine over TCP: [seq...], RUN entries (numbered as
 * in STARTED) whose client went: the engine skips those it has not
 * reached, and asks the one it runs to give up (shoal_ext_cancelled). An
 * engine on this host finds them marked in its page instead. */
/* SH_TK_STATUS, from a client: [], a question (shoal_farm_stat); the
 * controller answers it after the results it has for that client, with its
 * figures (shoal_controller_stat) and a row per engine. */
enum {
	SH_TK_SUBMIT = 1,
	SH_TK_RESULTS,
	SH_TK_RUN,
	SH_TK_DONE,
	SH_TK_OWNER,
	SH_TK_STARTED,
	SH_TK_DROP,
	SH_TK_STATUS
};

/* A batch being built in w: a frame whose body opens with an array32
 * header, patched with the count when the batch is closed. */
void sh_tk_batch_begin(sh_wbuf *w);
/* Sets the count and the frame header. */
int sh_tk_batch_end(sh_wbuf *w, uint32_t n, uint16_t op);

/* One task of a SUBMIT batch, as it lies in the body (pointers into it):
 * [id, fn, args, timeout, retries, engine, after, follow]. A task with
 * large arguments comes alone in its frame, as [id, bytes, timeout, ...]:
 * its fn and args, that many bytes, follow the frame out of band (then
 * call is NULL). after and follow are cursors at the ids of those lists,
 * which are checked to be nafter and nfollow unsigned integers. */
typedef struct sh_tk_submit {
	uint64_t id;
	const unsigned char *call; /* fn and args as the client encoded them */
	size_t call_len;
	int64_t timeout_ns;
	uint32_t retries;
	int32_t engine;
	sh_mp after, follow;
	uint32_t nafter, nfollow;
} sh_tk_submit;

/* The readers of batch entries: each consumes one entry at m, or fails
 * with SHOAL_EPROTO on anything else (every peer may be hostile). */
int sh_tk_read_submit(sh_mp *m, sh_tk_submit *t);
/* [id, status, result | message] of a DONE or RESULTS batch; raw: the
 * result's (or message's) bytes. */
int sh_tk_read_result(sh_mp *m, uint64_t *id, int32_t *status, const unsigned char **raw,
		      size_t *len);
/* An entry of a RUN batch: [tid, owner, fn, args], read up to args (m
 * is left there). Or [tid, owner, bytes]: the task alone in its frame, its
 * fn and args out of band after it (fn NULL, oob that many bytes), then 8
 * bytes of verdict: SH_TK_RUN_IT, or 0 when its client went while they
 * were on their way (run nothing). owner: the store owner token of the
 * task's client (SH_TK_OWNER), for whom large results are sealed; 0: none,
 * results go inline. */
typedef struct sh_tk_run {
	uint64_t tid, owner, oob;
	const char *fn;
	uint32_t fn_len;
} sh_tk_run;
int sh_tk_read_run(sh_mp *m, sh_tk_run *r);
#define SH_TK_RUN_IT 1

/* What an engine is told (tools/lib/engine.c parses its command line
 * into it): the controller's unix socket (or "tcp://HOST:PORT") or connect
 * (HOST:PORT), the library, a store for shared arguments (or NULL), its
 * name in messages, and whether it dies with its parent. */
typedef struct sh_engine_cfg {
	const char *socket, *connect, *so, *store, *name;
	bool with_parent;
	/* Functions built into this process (the Python module's engine, in
	 * a python3 process) in place of loading so. */
	shoal_ext_init_fn init;
} sh_engine_cfg;
/* The engine's main: runs the controller's tasks until it goes; the
 * process's exit code. */
int sh_engine_main(const sh_engine_cfg *cfg);

#endif

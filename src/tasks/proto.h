/* The task farm's protocol, between clients, the controller and engines on
 * one host. Each connects to the controller's socket as a link
 * (ring/link.h) with its own protocol word, then frames (wire.h) go over
 * the rings, each carrying a batch:
 *
 *   client -> controller   SUBMIT  [[id, fn, args, timeout_ns, retries, engine,
 *                                     [after id...], [follow id...]] ...]
 *   controller -> client   RESULTS [[id, status, result | message] ...]
 *   controller -> engine   RUN     [[tid, fn, args] ...]
 *   engine -> controller   DONE    [[tid, status, result | message] ...]
 *
 * The controller never decodes arguments or results: it forwards the
 * bytes of fn and args (and of a result) as the sender encoded them, and
 * reads only ids, options and statuses. Engines decode arguments with the
 * strict value decoder; clients decode results the same way. Tasks carry
 * their payloads inline (no bytes out of band): a large payload goes as a
 * store object by reference. */
#ifndef SHOAL_TASKS_PROTO_H
#define SHOAL_TASKS_PROTO_H

#include "ring/link.h"
#include "ring/msg.h"
#include "wire/wire.h"

#include <shoal/tasks.h>

#define SH_TASKS_CLIENT 0x544c4346u /* "FCLT": a client's link */
#define SH_TASKS_ENGINE 0x474e4546u /* "FENG": an engine's link */
#define SH_TASKS_VERSION 1
#define SH_TASKS_RING_CAP (1u << 20)
/* A batch is sent once it holds this many bytes (or when flushed). */
#define SH_TASKS_BATCH_BYTES (64u << 10)
/* The largest frame a side accepts. */
#define SH_TASKS_MSG_MAX ((size_t)256 << 20)

enum { SH_TK_SUBMIT = 1, SH_TK_RESULTS, SH_TK_RUN, SH_TK_DONE };

/* A batch being built in w: a frame whose body opens with an array32
 * header, patched with the count when the batch is closed. */
void sh_tk_batch_begin(sh_wbuf *w);
/* Sets the count and the frame header. */
int sh_tk_batch_end(sh_wbuf *w, uint32_t n, uint16_t op);

/* The engine's main (tools/shoal-engine.c calls it). */
int sh_engine_main(int argc, char **argv);

#endif

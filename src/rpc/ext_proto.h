/* The protocol between a host and a shoal-ext process.
 *
 * The host makes a SOCK_SEQPACKET socketpair, a memfd holding two rings
 * (calls host -> extension first, then replies extension -> host, then the
 * control page; its size sealed, so the extension cannot make the host's
 * mapping fault) and the write end of a pipe the extension rings when the
 * host sleeps (only the host holds the read end; nor does it rely on the
 * ring alone: it re-checks the ring); it spawns the runner with them as
 * descriptors 3, 4 and 5 and the config in argv. The runner loads the .so
 * (or takes the extension built into it: a Python extension's), runs its
 * init and sends one ready message on the socket: SH_EXT_READY_MAGIC, a
 * status (0 or the init's SHOAL_E* code) and a message. Then frames
 * (wire.h) go over the rings:
 *   CALL   [function, args]     -> RETURN [result] | status < 0, [message]
 *   STOP   []                   (no reply: the runner exits 0)
 * and, while a call runs, the extension may CALL a host service [method,
 * args] on the reply ring, which the host answers with a RETURN on the
 * call ring (the service may call the extension again: calls nest). Large
 * payloads follow their frame out of band (SH_FRAME_OOB) or go by
 * reference to store objects (SH_FRAME_SHARED). In the control page the
 * host writes the number of a call past its deadline, which it asks to
 * give up (and kills SH_EXT_CANCEL_GRACE_NS later if it has not). The host
 * watches a pidfd of the child beside the reply ring, so a death wakes a
 * waiting call at once. */
#ifndef SHOAL_RPC_EXT_PROTO_H
#define SHOAL_RPC_EXT_PROTO_H

#include "rpc/value.h"

#include <shoal/ext.h>

#define SH_EXT_READY_MAGIC 0x79646572u /* "redy" */
#define SH_EXT_RING_CAP (1u << 20)
#define SH_EXT_FD_SOCK 3
#define SH_EXT_FD_RINGS 4
#define SH_EXT_FD_EFD 5
#define SH_EXT_MSG_MAX 1024
/* After the two rings, a page the host writes and the extension reads:
 * the sequence number of the call asked to give up (0: none). */
#define SH_EXT_CTRL_BYTES 4096
/* How long a call past its deadline has to give up before it is killed. */
#define SH_EXT_CANCEL_GRACE_NS 100000000

enum { SH_EXT_OP_CALL = 1, SH_EXT_OP_RETURN, SH_EXT_OP_STOP };

typedef struct sh_ext_ready {
	uint32_t magic;
	int32_t status;
	char msg[SH_EXT_MSG_MAX];
} sh_ext_ready;

/* Writes text into the existing file at path (a cgroup's knobs): 0 or
 * the error. Both sides use it: the host sets limits, the runner joins. */
int sh_ext_write_file(const char *path, const char *text);

/* Packs a CALL frame's body, [fn, args] (nil when args is NULL), into w;
 * payloads go by reference through the store when shared is set. Both
 * sides call: the host its extension, the runner a host service. */
void sh_ext_pack_call(sh_wbuf *w, const char *fn, const shoal_value *args, shoal_client *shared);

/* What the host tells its runner (tools/lib/ext_runner.c parses the command
 * line the host gives it into this): the extension, its name in messages,
 * its limits (0: none), its sandbox, and a store for shared payloads (or
 * NULL) and a memory cgroup to join (or NULL). */
typedef struct sh_ext_runner_cfg {
	const char *so, *name, *store, *cgroup;
	uint64_t mem, cpu, files;
	bool basic, strict, network;
	/* An extension built into this process (Python's runner: shoal's
	 * module in a python3 process), run after the sandbox in place of
	 * loading so, which then only names it. */
	shoal_ext_init_fn init;
} sh_ext_runner_cfg;
/* The runner's main; the process's exit code. */
int sh_ext_runner_main(const sh_ext_runner_cfg *cfg);

#endif

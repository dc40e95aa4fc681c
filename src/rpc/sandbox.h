/* The sandbox an extension's runner (ext_runner.c) puts itself in before
 * it loads the extension: limits, a cgroup, a tree of its own that dies
 * whole (none and basic), and strict's confinement: namespaces, a pid
 * namespace, a uid and gid of its own per extension (never an account's),
 * no capabilities, nothing of the host's files writable, and a syscall
 * filter. Each step fails closed: a start that cannot set one up fails,
 * saying which. The steps run in this order, in the runner's processes
 * (sandbox.c says which process does what). */
#ifndef SHOAL_RPC_SANDBOX_H
#define SHOAL_RPC_SANDBOX_H

#include "shoal_impl.h"

#include <sys/types.h>

/* setrlimit(res) to v, soft and hard. */
int sh_sb_limit(int res, uint64_t v);
/* Moves this process into the cgroup dir the host made for it. */
int sh_sb_join_cgroup(const char *dir);
/* none and basic without a cgroup: this process becomes a subreaper that
 * ends the extension's whole tree when it ends (or on SIGTERM), then
 * ends the same way; only the extension's process returns. */
void sh_sb_own_tree(const char *name);

/* ---- strict ---- */

/* Strict extensions of a root host run as uids of this range, one a live
 * extension (systemd's DynamicUser range: no account has them). */
#define SH_SB_UID_FIRST 61184u
#define SH_SB_UID_LAST 65519u
/* Where the uids in use are locked, one file a uid (root's, 0700). */
#define SH_SB_UID_DIR "/run/shoal/uid"
/* Processes (threads too) one strict extension may have at once. */
#define SH_SB_NPROC 4096
/* The size of each of its private, writable directories (tmpfs). */
#define SH_SB_TMP_BYTES ((uint64_t)256 << 20)

typedef struct sh_sb_strict {
	bool network; /* allow_network: the host's network, IP sockets */
	bool userns;  /* the runner is not root: ids mapped in a user namespace */
	uid_t uid;    /* what it runs as (gid: the same number) */
	bool own_uid; /* uid was taken for it (a root host) */
	int uid_lock; /* held open while a process of uid lives, or -1 */
} sh_sb_strict;

/* In the runner's first process: namespaces of its own for mounts,
 * cgroups, IPC, the host name and (unless network) the network; as root
 * directly, else inside a user namespace mapping only our own ids; then,
 * as root, a uid of its own: one of SH_SB_UID_FIRST..LAST that no
 * passwd or group entry names, no live process has and no other strict
 * extension holds (locked in SH_SB_UID_DIR while its processes live). */
int sh_sb_namespaces(sh_sb_strict *sb, char *why, size_t wl);
/* A pid namespace of its own. The calling process stays outside, the one
 * the host watches: it holds nothing but sb's lock on the uid, waits for
 * the namespace to end (all its processes gone) and ends the way the
 * extension did, letting the uid go. Only the extension's process returns,
 * holding nothing of the lock. */
int sh_sb_own_pids(sh_sb_strict *sb, char *why, size_t wl);
/* In the extension's process: a /proc of its namespace, every mount
 * read-only but private writable directories (/var/tmp, /dev/shm,
 * /run/lock: tmpfs of its own uid), no capabilities in any set, sb->uid
 * (as root; the mapping of our own in a user namespace), not dumpable for
 * good (no ptrace, /proc/<pid>/mem or fd of it for anyone, its own uid
 * too). Checked after: a capability or root left fails the start. */
int sh_sb_confine(const sh_sb_strict *sb, char *why, size_t wl);
/* The seccomp allow-list, last, just before the extension's code loads. */
int sh_sb_filter(bool network, char *why, size_t wl);

#endif

/* The extension side: what shoal-ext runs (its command line is
 * tools/lib/ext_runner.c), and a Python extension's python3 with the
 * module's functions built in (cfg->init). It applies the limits and the
 * sandbox (basic: a session of its own, no new privileges; strict:
 * namespaces and a pid namespace of its own, another uid without
 * capabilities, a syscall filter), loads the extension, reports ready (or
 * why not), then serves calls from the ring, and passes on the calls of
 * host services they make, nested, until told to stop or the host goes
 * (it dies with the host: PR_SET_PDEATHSIG). Nothing here trusts the host
 * more than any peer: frames and values are validated the same way. */
#include "ring/ring.h"
#include "rpc/ext_lib.h"
#include "ring/msg.h"
#include "shm/shm.h"

#include <shoal/ext.h>

#include <dlfcn.h>
#include <sched.h>
#include <seccomp.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

static void ready(int status, const char *fmt, ...) SHOAL_PRINTF(2, 3);
static void ready(int status, const char *fmt, ...)
{
	sh_ext_ready m = {.magic = SH_EXT_READY_MAGIC, .status = status};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m.msg, sizeof(m.msg), fmt, ap);
	va_end(ap);
	if (sh_fd_send(SH_EXT_FD_SOCK, &m, sizeof(m), NULL, 0) != 0)
		_exit(3); /* the host is gone */
}

static int limit(int res, uint64_t v)
{
	struct rlimit rl = {.rlim_cur = v, .rlim_max = v};
	return setrlimit(res, &rl) == 0 ? 0 : shoal_errno();
}

/* Calls nest both ways (host -> ext -> host -> ext ...): each level of
 * nesting has its own buffers, and a level waiting for a host's return
 * serves the host's calls that arrive meanwhile, on the same stack. */
#define MAX_DEPTH 128

typedef struct level {
	shoal_vbuf in, out; /* the call's arguments, its result */
	sh_wbuf w;
	unsigned char *copy; /* the last frame read at this level */
	size_t copy_cap;
	sh_oob oob; /* where its payloads out of band go */
} level;

typedef struct runner {
	const sh_ext_lib *lib;
	sh_ring *req, *rep;
	shoal_client *store;	  /* for shared payloads, when the host gave one */
	_Atomic uint32_t *cancel; /* shared with the host (ext_proto.h) */
	level lv[MAX_DEPTH + 1];
	uint32_t seq;
	bool stop;
} runner;

/* Reads the next frame from the host into level L. */
static int next_frame(runner *R, level *L, sh_frame *f, size_t *len, char *why, size_t wl)
{
	int rc = sh_msg_read(R->req, &L->copy, &L->copy_cap, len, SHOAL_FOREVER);
	return rc ? rc : sh_frame_decode(L->copy, *len, f, why, wl);
}

/* Memory the levels keep for the next payload of their size, beyond
 * which an idle extension gives it back. */
#define IDLE_KEEP ((size_t)64 << 20)
#define IDLE_AFTER_NS 1000000000

static size_t kept_bytes(const runner *R)
{
	size_t n = 0;
	for (int i = 0; i <= MAX_DEPTH; i++)
		n += R->lv[i].in.a.total + R->lv[i].out.a.total;
	return n;
}

/* Waits for the host's next call at level 0: an extension that keeps
 * large buffers from its last calls gives them back after a second with
 * nothing to do. */
static int next_call(runner *R, sh_frame *f, size_t *len, char *why, size_t wl)
{
	level *L = &R->lv[0];
	size_t got = 0, total = 0;
	int rc = SHOAL_ETIMEDOUT;
	if (kept_bytes(R) > IDLE_KEEP) {
		rc = sh_msg_read_part(R->req, &L->copy, &L->copy_cap, &got, &total, SH_MSG_MAX,
				      shoal_deadline_in(IDLE_AFTER_NS));
		if (rc == SHOAL_ETIMEDOUT)
			for (int i = 0; i <= MAX_DEPTH; i++) {
				sh_bump_trim(&R->lv[i].in.a, IDLE_KEEP);
				sh_bump_trim(&R->lv[i].out.a, IDLE_KEEP);
			}
	}
	if (rc == SHOAL_ETIMEDOUT)
		rc = sh_msg_read_part(R->req, &L->copy, &L->copy_cap, &got, &total, SH_MSG_MAX,
				      SHOAL_FOREVER);
	*len = total;
	return rc ? rc : sh_frame_decode(L->copy, *len, f, why, wl);
}

static int send_frame(runner *R, sh_wbuf *w, sh_frame *f)
{
	int rc = sh_wbuf_frame_end(w, f);
	if (rc == 0 && w->len > SH_MSG_MAX)
		return SHOAL_EMSGSIZE;
	rc = rc ? rc : sh_frame_send(R->rep, w, SHOAL_FOREVER);
	if (w->cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(w);
	sh_wbuf_reset(w); /* its parts point into values that go now */
	return rc;
}

/* Runs the call whose frame is in level d and sends its return. Nonzero
 * only when the rings fail. */
static int handle_call(runner *R, int d, const sh_frame *f)
{
	level *L = &R->lv[d];
	char why[SH_EXT_MSG_MAX + 64] = "";
	shoal_ext_ctx ctx = {.runner = R, .depth = d, .seq = f->seq, .vb = &L->out};
	const shoal_value *args = NULL;
	shoal_value *result = NULL;
	const char *fname = "?";
	uint32_t fl = 1, n;
	int status = 0;
	/* The last call's shared arguments are let go once this call's are
	 * decoded: a tensor passed again keeps its segment mapped. */
	sh_vbuf_reset_keep(&L->in);
	shoal_vbuf_reset(&L->out);
	L->in.store = L->out.store = R->store;
	bool shared = f->flags & SH_FRAME_SHARED;
	sh_mp m;
	sh_mp_init(&m, L->copy + SH_FRAME_HDR, f->body_len);
	sh_oob_reset(&L->oob, f->oob);
	shoal_value *a;
	if (sh_mp_array(&m, &n) || n != 2 || sh_mp_str(&m, &fname, &fl) || fl == 0) {
		status = SHOAL_EBADMSG;
		snprintf(why, sizeof(why), "expected a call [function, args]");
	} else if ((status = sh_value_decode(&m, &L->in, &L->oob, &a, why, sizeof(why))) == 0 &&
		   sh_mp_done(&m) != 0) {
		status = SHOAL_EBADMSG;
		snprintf(why, sizeof(why), "bytes after the arguments");
	} else {
		args = a;
	}
	sh_vbuf_let_go(&L->in);
	/* The payloads out of band, or, after a bad body, past them. */
	int rc = status == 0 ? sh_oob_read(&L->oob, R->req, SHOAL_FOREVER, why, sizeof(why))
			     : sh_oob_discard(&L->oob, R->req, SHOAL_FOREVER);
	if (rc == SHOAL_EBADMSG && status == 0)
		status = rc; /* a string that is not UTF-8: answered */
	else if (rc && rc != SHOAL_EBADMSG)
		return rc;
	shoal_ext_fn fn = status == 0 ? sh_ext_lib_find(R->lib, fname, fl) : NULL;
	if (status == 0 && !fn) {
		status = SHOAL_ENOENT;
		snprintf(why, sizeof(why), "no function %.*s in this extension", (int)fl, fname);
	}
	if (status == 0) {
		status = fn(&ctx, args, &result);
		if (status > 0)
			status = SHOAL_EIO; /* a positive code is not one of ours */
		if (status == 0 && L->out.err)
			status = L->out.err;
		if (status == 0 && shared && result)
			status = sh_value_share(&L->out, result, ctx.msg, sizeof(ctx.msg));
		if (status)
			snprintf(why, sizeof(why), "%s",
				 ctx.msg[0] ? ctx.msg : shoal_strerror(status));
	}
	if (R->stop)
		return SHOAL_ECLOSED;
	sh_wbuf_frame_begin(&L->w);
	msgpack_packer pk;
	sh_wbuf_packer(&L->w, &pk);
	msgpack_pack_array(&pk, 1);
	if (status == 0) {
		shoal_value nil = {.type = SHOAL_V_NIL};
		sh_value_pack(&pk, result ? result : &nil, shared ? R->store : NULL, &L->w);
	} else {
		sh_mp_pack_cstr(&pk, why);
	}
	sh_frame r = {.op = SH_EXT_OP_RETURN,
		      .seq = f->seq,
		      .status = status,
		      .flags = shared ? SH_FRAME_SHARED : 0};
	rc = send_frame(R, &L->w, &r);
	if (rc == SHOAL_EMSGSIZE) {
		/* Too big for one record: say so instead. */
		size_t big = L->w.len;
		sh_wbuf_frame_begin(&L->w);
		msgpack_pack_array(&pk, 1);
		char m2[160];
		snprintf(m2, sizeof(m2), "result of %zu bytes exceeds the %zu a reply can carry",
			 big, SH_MSG_MAX);
		sh_mp_pack_cstr(&pk, m2);
		r = (sh_frame){.op = SH_EXT_OP_RETURN, .seq = f->seq, .status = SHOAL_EMSGSIZE};
		rc = send_frame(R, &L->w, &r);
	}
	sh_msg_trim(&L->copy, &L->copy_cap);
	return rc;
}

bool shoal_ext_cancelled(const shoal_ext_ctx *ctx)
{
	if (ctx->gone)
		return atomic_load_explicit(ctx->gone, memory_order_acquire) == ctx->task;
	const runner *R = ctx->runner;
	return R && atomic_load_explicit(R->cancel, memory_order_acquire) == ctx->seq;
}

int shoal_ext_call_host(shoal_ext_ctx *ctx, const char *method, const shoal_value *args,
			const shoal_value **result)
{
	if (!ctx || !method || !*method || !result)
		return SHOAL_EINVAL;
	runner *R = ctx->runner;
	if (!R)
		return shoal_ext_fail(ctx, SHOAL_ENOTSUP,
				      "%s: no host to call here (a task engine runs this)", method);
	int d = ctx->depth;
	if (d + 1 >= MAX_DEPTH)
		return shoal_ext_fail(ctx, SHOAL_ERANGE, "calls nested deeper than %d", MAX_DEPTH);
	level *L = &R->lv[d], *next = &R->lv[d + 1];
	/* This level's writer is free while its function runs. Calls to the
	 * host copy their payloads: a host service that wants a tensor shared
	 * can take it from the store itself. */
	sh_ext_pack_call(&L->w, method, args, NULL);
	sh_frame f = {.op = SH_EXT_OP_CALL, .seq = ++R->seq};
	int rc = send_frame(R, &L->w, &f);
	if (rc)
		return shoal_ext_fail(ctx, rc, "calling %s on the host: %s", method,
				      shoal_strerror(rc));
	for (;;) {
		sh_frame g;
		size_t len;
		char why[256] = "";
		rc = next_frame(R, next, &g, &len, why, sizeof(why));
		if (rc == 0 && g.op == SH_EXT_OP_STOP) {
			R->stop = true;
			rc = SHOAL_ECLOSED;
		}
		if (rc)
			return shoal_ext_fail(ctx, rc, "waiting for the host's %s: %s", method,
					      why[0] ? why : shoal_strerror(rc));
		if (g.op == SH_EXT_OP_CALL) {
			if ((rc = handle_call(R, d + 1, &g)) != 0)
				return shoal_ext_fail(ctx, rc, "serving the host: %s",
						      shoal_strerror(rc));
			continue;
		}
		if (g.op != SH_EXT_OP_RETURN || g.seq != f.seq)
			return shoal_ext_fail(ctx, SHOAL_EPROTO,
					      "the host answered %s with op %u seq %u", method,
					      g.op, g.seq);
		sh_mp m;
		uint32_t n;
		sh_mp_init(&m, next->copy + SH_FRAME_HDR, g.body_len);
		sh_oob_reset(&next->oob, g.oob);
		if (g.status != 0) {
			const char *msg = "";
			uint32_t ml = 0;
			if (sh_mp_array(&m, &n) || n != 1 || sh_mp_str(&m, &msg, &ml))
				msg = "(no message)", ml = 12;
			rc = shoal_ext_fail(ctx, g.status, "%.*s", (int)ml, msg);
			return sh_oob_discard(&next->oob, R->req, SHOAL_FOREVER) ? SHOAL_EPROTO
										 : rc;
		}
		shoal_value *v;
		/* The result lives with this call's own result buffer. */
		if (sh_mp_array(&m, &n) || n != 1 ||
		    (rc = sh_value_decode(&m, ctx->vb, &next->oob, &v, why, sizeof(why))) != 0 ||
		    sh_mp_done(&m) != 0) {
			rc = shoal_ext_fail(ctx, rc ? rc : SHOAL_EPROTO, "%s: malformed result: %s",
					    method, why);
			return sh_oob_discard(&next->oob, R->req, SHOAL_FOREVER) ? SHOAL_EPROTO
										 : rc;
		}
		if ((rc = sh_oob_read(&next->oob, R->req, SHOAL_FOREVER, why, sizeof(why))) != 0)
			return shoal_ext_fail(ctx, rc, "%s: result: %s", method, why);
		*result = v;
		return 0;
	}
}

/* Serves the host's calls until STOP or the end of the rings. */
static int serve(runner *R)
{
	for (;;) {
		sh_frame f;
		size_t len;
		char why[256] = "";
		int rc = next_call(R, &f, &len, why, sizeof(why));
		if (rc == SHOAL_ECLOSED || (rc == 0 && f.op == SH_EXT_OP_STOP))
			return 0;
		if (rc == 0 && f.op != SH_EXT_OP_CALL)
			rc = SHOAL_EPROTO;
		if (rc == 0)
			rc = handle_call(R, 0, &f);
		if (rc == SHOAL_ECLOSED && R->stop)
			return 0;
		if (rc) {
			fprintf(stderr, "shoal-ext: %s%s%s\n", shoal_strerror(rc),
				why[0] ? ": " : "", why);
			return rc;
		}
	}
}

static void runner_free(runner *R)
{
	for (int i = 0; i <= MAX_DEPTH; i++) {
		sh_bump_fini(&R->lv[i].in.a);
		sh_bump_fini(&R->lv[i].out.a);
		sh_wbuf_fini(&R->lv[i].w);
		sh_oob_fini(&R->lv[i].oob);
		if (R->lv[i].copy)
			shoal_free(R->lv[i].copy, R->lv[i].copy_cap);
	}
}

/* The strict sandbox's filter, an allow-list: what a C or Python
 * extension needs (memory, threads, files through the descriptors and
 * paths it may open, time, signals, polling, local sockets) is allowed;
 * everything else fails with EPERM (not a kill, so an extension can
 * report what it was refused), io_uring included: its SOCKET op would
 * make sockets the socket() rule never sees. Sockets are AF_UNIX only
 * unless network; clone may not make namespaces, and clone3, whose flags
 * a filter cannot read, says ENOSYS, on which glibc falls back to clone.
 * Another architecture's system calls kill the process. */
static int strict_filter(bool network, char *why, size_t whylen)
{
	static const char *const allow[] = {
		/* descriptors and files */
		"read",
		"write",
		"readv",
		"writev",
		"pread64",
		"pwrite64",
		"preadv",
		"pwritev",
		"preadv2",
		"pwritev2",
		"lseek",
		"_llseek",
		"close",
		"close_range",
		"dup",
		"dup2",
		"dup3",
		"fcntl",
		"fcntl64",
		"open",
		"openat",
		"openat2",
		"creat",
		"stat",
		"fstat",
		"lstat",
		"newfstatat",
		"fstatat64",
		"stat64",
		"fstat64",
		"lstat64",
		"statx",
		"statfs",
		"fstatfs",
		"statfs64",
		"fstatfs64",
		"access",
		"faccessat",
		"faccessat2",
		"readlink",
		"readlinkat",
		"getdents",
		"getdents64",
		"getcwd",
		"chdir",
		"fchdir",
		"mkdir",
		"mkdirat",
		"rmdir",
		"unlink",
		"unlinkat",
		"rename",
		"renameat",
		"renameat2",
		"link",
		"linkat",
		"symlink",
		"symlinkat",
		"chmod",
		"fchmod",
		"fchmodat",
		"fchmodat2",
		"chown",
		"fchown",
		"lchown",
		"fchownat",
		"truncate",
		"ftruncate",
		"truncate64",
		"ftruncate64",
		"fallocate",
		"fsync",
		"fdatasync",
		"sync_file_range",
		"flock",
		"utime",
		"utimes",
		"utimensat",
		"futimesat",
		"umask",
		"getxattr",
		"lgetxattr",
		"fgetxattr",
		"listxattr",
		"llistxattr",
		"flistxattr",
		"sendfile",
		"sendfile64",
		"copy_file_range",
		"splice",
		"tee",
		"vmsplice", /* how the runner rings the host's doorbell */
		"readahead",
		"fadvise64",
		"fadvise64_64",
		"memfd_create",
		"pipe",
		"pipe2",
		"eventfd",
		"eventfd2",
		"inotify_init",
		"inotify_init1",
		"inotify_add_watch",
		"inotify_rm_watch",
		/* memory */
		"brk",
		"mmap",
		"mmap2",
		"munmap",
		"mremap",
		"mprotect",
		"madvise",
		"mlock",
		"mlock2",
		"munlock",
		"mlockall",
		"munlockall",
		"mincore",
		"msync",
		"membarrier",
		"get_mempolicy",
		"set_mempolicy",
		"mbind",
		"pkey_alloc",
		"pkey_free",
		"pkey_mprotect",
		/* processes and threads (their own: pids are of its namespace) */
		"fork",
		"vfork",
		"execve",
		"execveat",
		"exit",
		"exit_group",
		"wait4",
		"waitid",
		"kill",
		"tgkill",
		"tkill",
		"getpid",
		"getppid",
		"gettid",
		"getuid",
		"geteuid",
		"getgid",
		"getegid",
		"getgroups",
		"getresuid",
		"getresgid",
		"getuid32",
		"geteuid32",
		"getgid32",
		"getegid32",
		"getgroups32",
		"getresuid32",
		"getresgid32",
		"setsid",
		"getsid",
		"getpgid",
		"setpgid",
		"getpgrp",
		"set_tid_address",
		"set_robust_list",
		"get_robust_list",
		"rseq",
		"futex",
		"futex_time64",
		"futex_waitv",
		"futex_wait",
		"futex_wake",
		"futex_requeue",
		"sched_yield",
		"sched_getaffinity",
		"sched_setaffinity",
		"sched_getparam",
		"sched_getscheduler",
		"sched_get_priority_max",
		"sched_get_priority_min",
		"sched_getattr",
		"getpriority",
		"prctl",
		"arch_prctl",
		"capget",
		"uname",
		"sysinfo",
		"getrlimit",
		"ugetrlimit",
		"setrlimit",
		"getrusage",
		"times",
		"getcpu",
		"getrandom",
		"set_thread_area",
		"get_thread_area",
		/* signals and time */
		"rt_sigaction",
		"rt_sigprocmask",
		"rt_sigreturn",
		"sigreturn",
		"rt_sigsuspend",
		"rt_sigpending",
		"rt_sigtimedwait",
		"rt_sigtimedwait_time64",
		"rt_sigqueueinfo",
		"rt_tgsigqueueinfo",
		"sigaltstack",
		"signalfd",
		"signalfd4",
		"restart_syscall",
		"pause",
		"alarm",
		"clock_gettime",
		"clock_gettime64",
		"clock_getres",
		"clock_getres_time64",
		"clock_nanosleep",
		"clock_nanosleep_time64",
		"nanosleep",
		"gettimeofday",
		"time",
		"timer_create",
		"timer_settime",
		"timer_settime64",
		"timer_gettime",
		"timer_gettime64",
		"timer_getoverrun",
		"timer_delete",
		"timerfd_create",
		"timerfd_settime",
		"timerfd_settime64",
		"timerfd_gettime",
		"timerfd_gettime64",
		"getitimer",
		"setitimer",
		/* waiting */
		"poll",
		"ppoll",
		"ppoll_time64",
		"select",
		"_newselect",
		"pselect6",
		"pselect6_time64",
		"epoll_create",
		"epoll_create1",
		"epoll_ctl",
		"epoll_wait",
		"epoll_pwait",
		"epoll_pwait2",
		/* sockets it has or may make (socket() below) */
		"connect",
		"bind",
		"listen",
		"accept",
		"accept4",
		"sendto",
		"recvfrom",
		"sendmsg",
		"recvmsg",
		"sendmmsg",
		"recvmmsg",
		"recvmmsg_time64",
		"shutdown",
		"getsockname",
		"getpeername",
		"setsockopt",
		"getsockopt",
		/* System V IPC: the namespace's own */
		"shmget",
		"shmat",
		"shmdt",
		"shmctl",
		"semget",
		"semop",
		"semtimedop",
		"semctl",
		"msgget",
		"msgsnd",
		"msgrcv",
		"msgctl",
	};
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!f) {
		snprintf(why, whylen, "seccomp_init failed");
		return SHOAL_ENOMEM;
	}
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof(allow) / sizeof(allow[0]); i++) {
		int nr = seccomp_syscall_resolve_name(allow[i]);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
	}
	/* ioctl: its own session has no terminal to type into (TIOCSTI needs
	 * one, or CAP_SYS_ADMIN), so no command of it reaches the host */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 0);
	/* clone for threads and processes, without new namespaces */
	const scmp_datum_t newns = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
				   CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, newns, 0));
	int clone3 = seccomp_syscall_resolve_name("clone3");
	if (rc == 0 && clone3 != __NR_SCMP_ERROR)
		rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), clone3, 0);
	/* limits of itself only (pid 0) */
	int prlimit = seccomp_syscall_resolve_name("prlimit64");
	if (rc == 0 && prlimit != __NR_SCMP_ERROR)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, prlimit, 1, SCMP_A0(SCMP_CMP_EQ, 0, 0));
	/* sockets: local ones; IP ones only when the config allows them */
	static const int families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
	size_t nfam = network ? 4 : 1;
	for (size_t i = 0; rc == 0 && i < nfam; i++) {
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i], 0));
		if (rc == 0)
			rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1,
					      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i], 0));
	}
	if (rc == 0)
		rc = seccomp_load(f);
	seccomp_release(f);
	if (rc)
		snprintf(why, whylen, "loading the seccomp filter: %s", strerror(-rc));
	return rc;
}

/* strict, in the runner's first process: namespaces of its own for the
 * network (unless network), mounts, cgroups, System V IPC and the host
 * name; as root directly, else inside a new user namespace that maps
 * only our own ids. Where the kernel refuses them the start fails: a
 * security option fails closed. */
static int own_namespaces(bool network, bool *userns, char *why, size_t wl)
{
	int flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWIPC | CLONE_NEWUTS |
		    (network ? 0 : CLONE_NEWNET);
	uid_t uid = geteuid();
	gid_t gid = getegid();
	*userns = false;
	if (unshare(flags) != 0) {
		int direct = errno;
		if (unshare(CLONE_NEWUSER | flags) != 0) {
			snprintf(why, wl,
				 "the strict sandbox needs namespaces of its own (%smount, "
				 "cgroup), and the kernel refused them (%s; in a user "
				 "namespace: %s)%s",
				 network ? "" : "network, ", strerror(direct), strerror(errno),
				 network ? ""
					 : ": without allow_network it does not start where "
					   "it could reach the host's network");
			return SHOAL_EPERM;
		}
		*userns = true;
		char map[64];
		int rc;
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
		if ((rc = sh_ext_write_file("/proc/self/setgroups", "deny")) != 0 ||
		    (rc = sh_ext_write_file("/proc/self/uid_map", map)) != 0 ||
		    (snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid),
		     (rc = sh_ext_write_file("/proc/self/gid_map", map)) != 0)) {
			snprintf(why, wl, "mapping its ids in a user namespace: %s",
				 shoal_strerror(rc));
			return rc;
		}
	}
	/* Nothing it mounts reaches the host's namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		int rc = shoal_errno();
		snprintf(why, wl, "making its mounts private: %s", strerror(errno));
		return rc;
	}
	return 0;
}

/* strict, in the extension's process (inside its pid namespace): a /proc
 * of that namespace over the host's, so no host process is there to
 * open (/proc/<host>/mem, its fds); then no capabilities, in no set, and
 * another uid: 65534 when the runner is root, else the user namespace's
 * mapping of our own (whose capabilities go). Checked after: any left
 * is a failed start. */
#define STRICT_UID 65534
#define STRICT_NPROC 4096
static int confine(bool userns, char *why, size_t wl)
{
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
		int rc = shoal_errno();
		snprintf(why, wl, "mounting a /proc of its own: %s", strerror(errno));
		return rc;
	}
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) {
			int rc = shoal_errno();
			snprintf(why, wl, "dropping capability %d: %s", c, strerror(errno));
			return rc;
		}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (!userns && geteuid() == 0) {
		/* Processes (and threads) of uid 65534 are bounded: a fork bomb
		 * would otherwise take every pid of the host. The count is the
		 * uid's, across all strict extensions of every host. */
		struct rlimit np;
		if (getrlimit(RLIMIT_NPROC, &np) == 0 && np.rlim_cur > STRICT_NPROC) {
			np.rlim_cur = np.rlim_max = STRICT_NPROC;
			setrlimit(RLIMIT_NPROC, &np);
		}
		if (setgroups(0, NULL) != 0 || setresgid(STRICT_UID, STRICT_UID, STRICT_UID) != 0 ||
		    setresuid(STRICT_UID, STRICT_UID, STRICT_UID) != 0) {
			int rc = shoal_errno();
			snprintf(why, wl, "becoming uid %d: %s", STRICT_UID, strerror(errno));
			return rc;
		}
		/* A change of uid clears both: it still dies with the host, and
		 * its own /proc/self stays its own (a process that is not
		 * dumpable finds /proc/self/fd owned by root). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	}
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) != 0 || syscall(SYS_capget, &h, d) != 0) {
		int rc = shoal_errno();
		snprintf(why, wl, "clearing its capabilities: %s", strerror(errno));
		return rc;
	}
	if (d[0].effective | d[1].effective | d[0].permitted | d[1].permitted | d[0].inheritable |
		    d[1].inheritable ||
	    geteuid() == 0 || getuid() == 0) {
		snprintf(why, wl, "capabilities or root left after dropping them");
		return SHOAL_EPERM;
	}
	return 0;
}

/* Mirrors a wait status as this process's own end, so that the host
 * reads the extension's signal or exit code from its child. */
static _Noreturn void end_like(int st)
{
	if (WIFSIGNALED(st)) {
		struct rlimit none = {0, 0};
		setrlimit(RLIMIT_CORE, &none); /* the extension dumped its own */
		signal(WTERMSIG(st), SIG_DFL);
		sigset_t all;
		sigfillset(&all);
		sigprocmask(SIG_UNBLOCK, &all, NULL);
		raise(WTERMSIG(st));
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

/* A pid namespace of our own (or the start fails). This process stays
 * outside, the one the host watches; its child is the
 * namespace's init, which reaps and reports; the init's child runs the
 * extension (as pid 2: the init of a namespace ignores the signals it
 * raises itself, which would turn an abort() into something else). Only
 * the extension's process returns from here. */
static int own_pids(char *why, size_t wl)
{
	int p[2];
	if (unshare(CLONE_NEWPID) != 0 || pipe2(p, O_CLOEXEC) != 0) {
		int rc = shoal_errno();
		snprintf(why, wl, "the strict sandbox needs a pid namespace of its own: %s",
			 strerror(errno));
		return rc;
	}
	pid_t init = fork();
	if (init < 0) {
		int rc = shoal_errno();
		snprintf(why, wl, "starting its pid namespace: fork: %s", strerror(errno));
		return rc;
	}
	if (init > 0) {
		/* Outside: holds nothing of the connection, waits, reports. */
		close(p[1]);
		close_range(3, (unsigned)p[0] - 1, 0);
		close_range((unsigned)p[0] + 1, ~0u, 0);
		int st = 0, ext_st;
		while (waitpid(init, &st, 0) < 0 && errno == EINTR)
			;
		if (read(p[0], &ext_st, sizeof(ext_st)) == (ssize_t)sizeof(ext_st))
			st = ext_st;
		end_like(st);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close(p[0]);
	pid_t ext = fork();
	if (ext == 0) {
		close(p[1]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		return 0;
	}
	/* The init: no descriptor of the connection, reaps every orphan, and
	 * when the extension ends says how, then ends (which ends the rest). */
	close_range(3, (unsigned)p[1] - 1, 0);
	close_range((unsigned)p[1] + 1, ~0u, 0);
	for (;;) {
		int st;
		pid_t w = wait(&st);
		if (w == ext || (w < 0 && errno == ECHILD)) {
			if (w == ext && write(p[1], &st, sizeof(st)) < 0)
				_exit(1);
			_exit(0);
		}
	}
}

/* Without a cgroup (the host could not make one) and a pid namespace
 * (none or basic), the runner ends the extension's tree itself: its first
 * process, the one the host watches, becomes a subreaper that holds
 * nothing of the connection and runs nothing of the extension. Whatever
 * the extension forks, daemons that double-forked included, ends up its
 * child once its parent goes; when the extension ends, or the host asks
 * with SIGTERM, it kills its children until none is left, then ends the
 * way the extension did. Only the extension's process returns. */
static volatile sig_atomic_t tree_term;
static void on_term(int sig)
{
	(void)sig;
	tree_term = 1;
}

/* SIGKILL to every child of this (single-threaded) process: 0 when it
 * has none left to kill. */
static int kill_children(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
	FILE *f = fopen(path, "re");
	int n = 0, pid;
	while (f && fscanf(f, "%d", &pid) == 1)
		n += kill(pid, SIGKILL) == 0;
	if (f)
		fclose(f);
	return n;
}

static void own_tree(const char *name)
{
	struct sigaction sa = {.sa_handler = on_term}; /* no SA_RESTART: wakes waitpid */
	pid_t ext;
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 ||
	    (ext = fork()) < 0) {
		fprintf(stderr,
			"shoal-ext %s: warning: no subreaper (%s): what it forks may outlive it\n",
			name, strerror(errno));
		return;
	}
	if (ext == 0) {
		signal(SIGTERM, SIG_DFL);
		prctl(PR_SET_CHILD_SUBREAPER, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		return;
	}
	close_range(3, ~0u, 0);
	int ext_st = 0;
	bool ending = false;
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, 0);
		if (w == ext)
			ext_st = st, ending = true;
		if (tree_term && !ending) {
			kill(ext, SIGKILL);
			ending = true;
		}
		if (w < 0 && errno == ECHILD)
			break;
		if (ending)
			kill_children();
	}
	end_like(ext_st);
}

/* Moves this process into the cgroup the host made for it, before it
 * allocates anything that counts. */
static int join_cgroup(const char *dir)
{
	char path[512], pid[24];
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	return sh_ext_write_file(path, pid);
}

int sh_ext_runner_main(const sh_ext_runner_cfg *cfg)
{
	const char *so = cfg->so, *name = cfg->name ? cfg->name : "extension", *store = cfg->store,
		   *cgroup = cfg->cgroup;
	uint64_t mem = cfg->mem, cpu = cfg->cpu, files = cfg->files;
	bool basic = cfg->basic || cfg->strict, strict = cfg->strict, network = cfg->network;
	/* Die with the host; a basic sandbox also takes a session of its own
	 * and no new privileges, and keeps no descriptor but ours. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(3); /* the host died before we got here */
	if (basic) {
		setsid();
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		close_range(SH_EXT_FD_EFD + 1, ~0u, 0);
	}
	if (!so) {
		ready(SHOAL_EINVAL, "shoal-ext: --so PATH is required");
		return 2;
	}
	/* strict: the extension runs as a uid of its own, which may not read
	 * the file nor reach its directory (a build under a 0700 home); the
	 * host's user chose it, so it is read now into a sealed memfd (which
	 * any uid may open through /proc/self/fd) and loaded from there once
	 * confined. */
	int so_fd = -1;
	if (strict && !cfg->init) {
		int in = open(so, O_RDONLY | O_CLOEXEC);
		struct stat st;
		int rc = in < 0 || fstat(in, &st) != 0 ? shoal_errno() : 0;
		if (rc) {
			ready(rc, "%s: %s: %s", name, so, strerror(errno));
			return 1;
		}
		if (!S_ISREG(st.st_mode))
			rc = SHOAL_EINVAL;
		else if ((rc = sh_memfd_create("shoal-ext-so", (size_t)st.st_size, true, &so_fd)) ==
			 0)
			rc = sh_fd_copy(so_fd, 0, in, 0, (uint64_t)st.st_size);
		if (rc == 0)
			rc = sh_memfd_seal(so_fd);
		close(in);
		if (rc) {
			ready(rc, "%s: %s: %s", name, so,
			      rc == SHOAL_EINVAL ? "not a regular file" : shoal_strerror(rc));
			return 1;
		}
	}
	int rc = 0;
	if (cgroup && (rc = join_cgroup(cgroup)) != 0) {
		ready(rc, "%s: joining its memory cgroup %s: %s", name, cgroup, shoal_strerror(rc));
		return 1;
	}
	if (!strict && !cgroup)
		own_tree(name);
	if ((mem && (rc = limit(RLIMIT_AS, mem))) || (cpu && (rc = limit(RLIMIT_CPU, cpu))) ||
	    (files && (rc = limit(RLIMIT_NOFILE, files)))) {
		ready(rc, "%s: setting limits: %s", name, shoal_strerror(rc));
		return 1;
	}
	size_t one, bytes;
	void *mem_rings = NULL;
	sh_ring req, rep;
	if ((rc = sh_ring_bytes(SH_EXT_RING_CAP, &one)) != 0 ||
	    (rc = sh_shm_map(SH_EXT_FD_RINGS, bytes = 2 * one + SH_EXT_CTRL_BYTES, true,
			     &mem_rings)) != 0 ||
	    (rc = sh_ring_attach(&req, mem_rings, one, false)) != 0 ||
	    (rc = sh_ring_attach(&rep, (char *)mem_rings + one, one, true)) != 0) {
		ready(SHOAL_EPROTO, "%s: attaching the rings: %s", name, shoal_strerror(rc));
		return 1;
	}
	close(SH_EXT_FD_RINGS);
	/* the host sleeps on its doorbell, for replies and for room for calls */
	rep.wake_efd = req.wake_efd = SH_EXT_FD_EFD;
	/* strict, before the extension's code is loaded (its init is confined
	 * too): namespaces, then, in the extension's process, the store
	 * connection while it may still connect as us, then no privileges
	 * and the filter. */
	bool userns = false;
	char why[SH_EXT_MSG_MAX - 64];
	if (strict && ((rc = own_namespaces(network, &userns, why, sizeof(why))) != 0 ||
		       (rc = own_pids(why, sizeof(why))) != 0)) {
		ready(rc, "%s: %s", name, why);
		return 1;
	}
	shoal_client *sc = NULL;
	if (store && (rc = shoal_connect(&sc, store)) != 0) {
		ready(rc, "%s: no store at %s for shared payloads: %s", name, store,
		      shoal_strerror(rc));
		return 1;
	}
	if (strict && ((rc = confine(userns, why, sizeof(why))) != 0 ||
		       (rc = strict_filter(network, why, sizeof(why))) != 0)) {
		ready(rc < 0 ? rc : SHOAL_EIO, "%s: %s", name, why);
		return 1;
	}
	sh_ext_lib lib = {0};
	if ((rc = cfg->init ? sh_ext_lib_init(&lib, cfg->init, why, sizeof(why))
			    : sh_ext_lib_load(&lib, so, so_fd, why, sizeof(why))) != 0) {
		ready(rc, "%s: %s", name, why);
		return 1;
	}
	if (so_fd >= 0)
		close(so_fd);
	runner *R = SH_NEW(runner);
	if (!R) {
		ready(SHOAL_ENOMEM, "%s: out of memory", name);
		return 1;
	}
	R->store = sc;
	R->cancel = (_Atomic uint32_t *)((char *)mem_rings + 2 * one);
	ready(0, "%zu functions", lib.reg.n);
	R->lib = &lib;
	R->req = &req;
	R->rep = &rep;
	rc = serve(R);
	runner_free(R);
	if (R->store)
		shoal_disconnect(R->store);
	SH_DELETE(R);
	if (rc)
		fprintf(stderr, "shoal-ext %s: %s\n", name, shoal_strerror(rc));
	sh_shm_unmap(mem_rings, bytes);
	sh_ext_lib_unload(&lib);
	return rc ? 1 : 0;
}

/* The strict sandbox's system call filter (sandbox.h): the allow-list an
 * extension's process loads last, just before the extension's code, and
 * the calls allowed only with some arguments (sockets of some families,
 * clone without new namespaces).
 * The rest of the sandbox is sandbox.c's. */
#include "rpc/sandbox.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* The strict sandbox's filter, an allow-list: what a C or Python
 * extension needs (memory, threads, files through the descriptors and
 * paths it may open, time, signals, polling, local sockets) is allowed;
 * everything else fails with EPERM (not a kill, so an extension can
 * report what it was refused), io_uring included: its SOCKET op would
 * make sockets the socket() rule never sees. Sockets are AF_UNIX only
 * unless network; clone may not make namespaces, and clone3, whose flags
 * a filter cannot read, says ENOSYS, on which glibc falls back to clone.
 * Another architecture's system calls kill the process. */
int sh_sb_filter(bool network, char *why, size_t whylen)
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

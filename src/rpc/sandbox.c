/* The sandboxes of an extension's runner (sandbox.h): limits, a cgroup, a
 * tree that ends whole, and strict (its system call filter is seccomp.c's);
 * and the host's side of it: the child's cgroup, made, killed, removed.
 * Strict runs in three processes: the runner's first (namespaces, the
 * uid's lock, then outside the pid namespace, watched by the host), the
 * namespace's init (reaps, reports), and the extension's (pid 2: confined,
 * filtered, then the extension's code). A strict extension of a root host
 * gets a uid no account and no other extension has, so no process of the
 * machine's users (nobody's included) shares an identity with it; it is
 * not dumpable, so not even a process of its own uid may look into it;
 * and the only places it can write are tmpfs of its own. */
#include "rpc/sandbox.h"
#include "rpc/ext_host.h"
#include "rpc/ext_proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int sh_sb_limit(int res, uint64_t v)
{
	struct rlimit rl = {.rlim_cur = v, .rlim_max = v};
	return setrlimit(res, &rl) == 0 ? 0 : shoal_errno();
}

/* ---- a uid of its own ---- */

/* The directory of uid locks, made (root's, 0700) or checked: it must be
 * a directory of root's that nobody else may write. */
static int uid_dir(char *why, size_t wl)
{
	static const char *const dirs[] = {"/run/shoal", SH_SB_UID_DIR};
	for (size_t i = 0; i < 2; i++) {
		struct stat st;
		if (mkdir(dirs[i], i ? 0700 : 0755) != 0 && errno != EEXIST) {
			int rc = shoal_errno();
			snprintf(why, wl,
				 "a strict extension's uid is locked in %s, which could not be "
				 "made: %s",
				 dirs[i], strerror(errno));
			return rc;
		}
		if (lstat(dirs[i], &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
		    (st.st_mode & 022)) {
			snprintf(why, wl,
				 "%s is not a directory of root's that only root may write: "
				 "refused as the place of strict extensions' uid locks",
				 dirs[i]);
			return SHOAL_EPERM;
		}
	}
	return 0;
}

/* The uids of the range that a live process has (real, effective, saved
 * or file system; or as a gid), one bit each. */
#define NUIDS (SH_SB_UID_LAST - SH_SB_UID_FIRST + 1)
static void uids_of_processes(unsigned char used[(NUIDS + 7) / 8])
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	char path[64], buf[2048];
	while (d && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%.20s/status", e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		static const char *const keys[] = {"\nUid:", "\nGid:"};
		for (int k = 0; k < 2; k++) {
			const char *p = strstr(buf, keys[k]);
			unsigned long v[4];
			if (!p || sscanf(p + 5, "%lu %lu %lu %lu", &v[0], &v[1], &v[2], &v[3]) != 4)
				continue;
			for (int j = 0; j < 4; j++)
				if (v[j] >= SH_SB_UID_FIRST && v[j] <= SH_SB_UID_LAST)
					used[(v[j] - SH_SB_UID_FIRST) / 8] |=
						(unsigned char)(1u
								<< ((v[j] - SH_SB_UID_FIRST) % 8));
		}
	}
	if (d)
		closedir(d);
}

/* Whether an account or a group has id. */
static bool id_named(unsigned id)
{
	char buf[4096];
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	getpwuid_r((uid_t)id, &pw, buf, sizeof(buf), &pwp);
	if (pwp)
		return true;
	getgrgid_r((gid_t)id, &gr, buf, sizeof(buf), &grp);
	return grp != NULL;
}

/* A free uid of the range, locked: from a random place in it, the first
 * whose lock file this process could lock and that nothing else has. The
 * lock (an open file description with flock) lasts while any process
 * holds it: the one outside the extension's pid namespace keeps it until
 * the namespace is gone. */
static int uid_take(sh_sb_strict *sb, char *why, size_t wl)
{
	int rc = uid_dir(why, wl);
	if (rc)
		return rc;
	unsigned char used[(NUIDS + 7) / 8] = {0};
	uids_of_processes(used);
	uint32_t start = 0;
	if (getrandom(&start, sizeof(start), 0) != sizeof(start))
		start = (uint32_t)getpid();
	for (uint32_t i = 0; i < NUIDS; i++) {
		uint32_t k = (start + i) % NUIDS;
		unsigned uid = SH_SB_UID_FIRST + k;
		if (used[k / 8] & (1u << (k % 8)))
			continue;
		char path[64];
		snprintf(path, sizeof(path), "%s/%u", SH_SB_UID_DIR, uid);
		/* read-only: a file open for writing on a mount would keep
		 * sh_sb_confine from making that mount read-only */
		int fd = open(path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = shoal_errno();
			snprintf(why, wl, "locking uid %u (%s): %s", uid, path, strerror(errno));
			return rc;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) != 0 || id_named(uid)) {
			close(fd);
			continue;
		}
		sb->uid = uid;
		sb->uid_lock = fd;
		sb->own_uid = true;
		return 0;
	}
	snprintf(why, wl,
		 "no uid of %u..%u is free for a strict extension (each live one has its own)",
		 SH_SB_UID_FIRST, SH_SB_UID_LAST);
	return SHOAL_EBUSY;
}

/* ---- namespaces ---- */

int sh_sb_namespaces(sh_sb_strict *sb, char *why, size_t wl)
{
	bool network = sb->network;
	int flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWIPC | CLONE_NEWUTS |
		    (network ? 0 : CLONE_NEWNET);
	uid_t uid = geteuid();
	gid_t gid = getegid();
	sb->userns = false;
	sb->uid = uid;
	sb->uid_lock = -1;
	sb->own_uid = false;
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
		sb->userns = true;
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
	return sb->userns || uid != 0 ? 0 : uid_take(sb, why, wl);
}

/* ---- the extension's process ---- */

/* Its private writable directories: a tmpfs of its own over each that
 * exists, everything else read-only (recursively: every mount it sees). */
static const char *const private_dirs[] = {"/var/tmp", "/dev/shm", "/run/lock"};

static int read_only_but_its_own(const sh_sb_strict *sb, char *why, size_t wl)
{
	struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID};
	if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof(ro)) != 0) {
		int rc = shoal_errno();
		snprintf(why, wl,
			 "making the host's files read-only to it (mount_setattr, Linux 5.12): "
			 "%s",
			 strerror(errno));
		return rc;
	}
	for (size_t i = 0; i < sizeof(private_dirs) / sizeof(private_dirs[0]); i++) {
		struct stat st;
		char opts[128];
		if (stat(private_dirs[i], &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		snprintf(opts, sizeof(opts),
			 "mode=0700,uid=%u,gid=%u,size=%" PRIu64 ",nr_inodes=%u", (unsigned)sb->uid,
			 (unsigned)sb->uid, SH_SB_TMP_BYTES, 1u << 16);
		if (mount("tmpfs", private_dirs[i], "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
			int rc = shoal_errno();
			snprintf(why, wl, "a private %s: %s", private_dirs[i], strerror(errno));
			return rc;
		}
	}
	return 0;
}

int sh_sb_confine(const sh_sb_strict *sb, char *why, size_t wl)
{
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
		int rc = shoal_errno();
		snprintf(why, wl, "mounting a /proc of its own: %s", strerror(errno));
		return rc;
	}
	int rc = read_only_but_its_own(sb, why, wl);
	if (rc)
		return rc;
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) {
			rc = shoal_errno();
			snprintf(why, wl, "dropping capability %d: %s", c, strerror(errno));
			return rc;
		}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (!sb->userns && geteuid() == 0) {
		/* Its processes (and threads) are bounded: a fork bomb would
		 * otherwise take every pid of the host. The uid is its alone. */
		struct rlimit np;
		if (getrlimit(RLIMIT_NPROC, &np) == 0 && np.rlim_cur > SH_SB_NPROC) {
			np.rlim_cur = np.rlim_max = SH_SB_NPROC;
			setrlimit(RLIMIT_NPROC, &np);
		}
		if (!sb->own_uid || sb->uid < SH_SB_UID_FIRST || sb->uid > SH_SB_UID_LAST) {
			snprintf(why, wl, "no uid of its own was taken");
			return SHOAL_EPERM;
		}
		if (setgroups(0, NULL) != 0 || setresgid(sb->uid, sb->uid, sb->uid) != 0 ||
		    setresuid(sb->uid, sb->uid, sb->uid) != 0) {
			rc = shoal_errno();
			snprintf(why, wl, "becoming uid %u: %s", (unsigned)sb->uid,
				 strerror(errno));
			return rc;
		}
		/* A change of uid clears the death signal: it still dies with
		 * the host. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	}
	/* Not dumpable, set after the last change of uid (a change of uid
	 * sets it from fs.suid_dumpable): no process of another uid, nor of
	 * its own, may ptrace it or open its /proc/<pid>/mem, fd/ or
	 * map_files/ (its own /proc/self/fd stays open to it). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) {
		snprintf(why, wl, "making it not dumpable: %s", strerror(errno));
		return SHOAL_EPERM;
	}
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) != 0 || syscall(SYS_capget, &h, d) != 0) {
		rc = shoal_errno();
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

/* Closes every descriptor from 3 on but a and b (b may be -1). */
static void keep_only(int a, int b)
{
	int lo = a < b ? a : b, hi = a < b ? b : a;
	if (lo < 0) {
		close_range(3, (unsigned)hi - 1, 0);
		close_range((unsigned)hi + 1, ~0u, 0);
		return;
	}
	close_range(3, (unsigned)lo - 1, 0);
	if (hi > lo + 1)
		close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
	close_range((unsigned)hi + 1, ~0u, 0);
}

/* A pid namespace of our own (or the start fails). This process stays
 * outside, the one the host watches; its child is the
 * namespace's init, which reaps and reports; the init's child runs the
 * extension (as pid 2: the init of a namespace ignores the signals it
 * raises itself, which would turn an abort() into something else). Only
 * the extension's process returns from here. */
int sh_sb_own_pids(sh_sb_strict *sb, char *why, size_t wl)
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
		/* Outside: holds nothing of the connection but the uid's lock,
		 * waits until the namespace is gone (its init's end kills and
		 * reaps every process in it), reports, and lets the uid go. */
		close(p[1]);
		keep_only(p[0], sb->uid_lock);
		int st = 0, ext_st;
		while (waitpid(init, &st, 0) < 0 && errno == EINTR)
			;
		if (read(p[0], &ext_st, sizeof(ext_st)) == (ssize_t)sizeof(ext_st))
			st = ext_st;
		end_like(st);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close(p[0]);
	if (sb->uid_lock >= 0) {
		close(sb->uid_lock); /* the outside process's alone */
		sb->uid_lock = -1;
	}
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

void sh_sb_own_tree(const char *name)
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
int sh_sb_join_cgroup(const char *dir)
{
	char path[512], pid[24];
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	return sh_ext_write_file(path, pid);
}

/* ---- a memory cgroup of its own (mem_max) ---- */

int sh_ext_write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return shoal_errno();
	ssize_t n = write(fd, text, strlen(text));
	int rc = n == (ssize_t)strlen(text) ? 0 : n < 0 ? shoal_errno() : SHOAL_EIO;
	close(fd);
	return rc;
}

/* Reads the small file at path into buf (NUL-terminated, cut at len - 1
 * bytes): 0 or the error. No stdio: this runs at every start and end of
 * a child, which should cost no heap. */
static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return shoal_errno();
	size_t got = 0;
	for (ssize_t n; got + 1 < len; got += (size_t)n) {
		n = read(fd, buf + got, len - 1 - got);
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n <= 0)
			break;
	}
	buf[got] = 0;
	close(fd);
	return 0;
}

/* The directory of our own cgroup in a hierarchy with the memory
 * controller: v1's memory hierarchy, else the unified one. */
static int cg_base(char *dir, size_t len, bool *v2)
{
	char text[4096], v1path[256] = "", v2path[256] = "", *save = NULL;
	int rc = read_text("/proc/self/cgroup", text, sizeof(text));
	if (rc)
		return rc;
	bool have_v1 = false, have_v2 = false;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		const char *ctl = c1 + 1, *path = c2 + 1;
		bool mem = false;
		for (const char *p = ctl; *p; p += strcspn(p, ","), p += *p == ',')
			mem |= !strncmp(p, "memory", 6) && (p[6] == ',' || !p[6]);
		if (mem)
			have_v1 = true, snprintf(v1path, sizeof(v1path), "%s", path);
		else if (!*ctl)
			have_v2 = true, snprintf(v2path, sizeof(v2path), "%s", path);
	}
	if (have_v1) {
		*v2 = false;
		snprintf(dir, len, "/sys/fs/cgroup/memory%s", v1path);
		return 0;
	}
	if (!have_v2)
		return SHOAL_ENOTSUP;
	*v2 = true;
	const char *mnt = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0
				  ? "/sys/fs/cgroup"
				  : "/sys/fs/cgroup/unified";
	snprintf(dir, len, "%s%s", mnt, v2path);
	return 0;
}

/* Removes the cgroups that hosts which died without stopping their
 * extensions left under base (named for their pid, which no longer
 * runs): once a process, at its first extension. Only empty ones go
 * (rmdir refuses the rest), so a live tree is never touched. */
static void cg_sweep(const char *base)
{
	static atomic_flag swept = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&swept))
		return;
	DIR *d = opendir(base);
	for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
		int pid;
		unsigned n;
		if (sscanf(de->d_name, "shoal-ext-%d-%u", &pid, &n) != 2 || pid <= 0 ||
		    pid == (int)getpid() || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", base, de->d_name);
		rmdir(path);
	}
	if (d)
		closedir(d);
}

/* Makes e's cgroup (every extension gets one where we may make it: its
 * whole tree ends with it), with memory limited to cfg.mem_max if set. */
int sh_sb_cgroup_make(shoal_ext *e, char *why, size_t whylen)
{
	static _Atomic uint32_t counter;
	char base[200], path[300], limit[32];
	int rc = cg_base(base, sizeof(base), &e->cg_v2);
	if (rc) {
		snprintf(why, whylen, "no memory cgroup hierarchy");
		return rc;
	}
	cg_sweep(base);
	snprintf(e->cg, sizeof(e->cg), "%s/shoal-ext-%d-%u", strcmp(base, "/") ? base : "",
		 (int)getpid(), atomic_fetch_add(&counter, 1));
	if (mkdir(e->cg, 0700) != 0) {
		rc = shoal_errno();
		snprintf(why, whylen, "mkdir %s: %s", e->cg, strerror(errno));
		e->cg[0] = 0;
		return rc;
	}
	if (!e->cfg.mem_max)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", e->cg,
		 e->cg_v2 ? "memory.max" : "memory.limit_in_bytes");
	if (e->cg_v2 && access(path, F_OK) != 0) {
		/* the controller is not on for our children yet */
		char sub[300];
		snprintf(sub, sizeof(sub), "%s/cgroup.subtree_control", base);
		sh_ext_write_file(sub, "+memory");
	}
	snprintf(limit, sizeof(limit), "%" PRIu64, e->cfg.mem_max);
	if ((rc = sh_ext_write_file(path, limit)) != 0) {
		snprintf(why, whylen, "writing %s: %s", path, shoal_strerror(rc));
		rmdir(e->cg);
		e->cg[0] = 0;
		return rc;
	}
	/* no swapping past the limit either, where that is a knob */
	snprintf(path, sizeof(path), "%s/%s", e->cg,
		 e->cg_v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes");
	if (access(path, F_OK) == 0)
		sh_ext_write_file(path, e->cg_v2 ? "0" : limit);
	return 0;
}

/* The most processes of a cgroup waited for at once (sh_sb_cgroup_kill):
 * the rest are the next round's. */
#define CG_WAIT_MAX 64

/* Waits until every process of fds (pidfds) has ended, or the deadline;
 * closes them. */
static void cg_wait_gone(int *fds, int n, int64_t deadline)
{
	struct pollfd p[CG_WAIT_MAX];
	for (int i = 0; i < n; i++)
		p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	for (int left = n; left > 0;) {
		int64_t ns = deadline - shoal_now_ns();
		if (ns <= 0)
			break;
		int r = poll(p, (nfds_t)n, (int)((ns + 999999) / 1000000));
		if (r < 0 && errno != EINTR)
			break;
		for (int i = 0; r > 0 && i < n; i++)
			if (p[i].fd >= 0 && p[i].revents) {
				p[i].fd = -1; /* (poll skips it now) */
				left--;
			}
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Kills every process in e's cgroup: whatever the extension forked,
 * daemons included (they cannot leave it unless privileged: strict is
 * not). cgroup.kill where the kernel has it; else SIGKILL to each listed
 * process, again until none is left (what a killed process forked
 * meanwhile is listed the next round), for at most about a second. A
 * round waits on pidfds of the processes it killed until they are gone
 * (an ended process has left its cgroup's list when its pidfd says so). */
void sh_sb_cgroup_kill(shoal_ext *e)
{
	if (!e->cg[0])
		return;
	char path[300], text[8192];
	snprintf(path, sizeof(path), "%s/cgroup.kill", e->cg);
	bool killed = e->cg_v2 && sh_ext_write_file(path, "1") == 0;
	snprintf(path, sizeof(path), "%s/cgroup.procs", e->cg);
	int64_t deadline = shoal_deadline_in(1000000000);
	while (shoal_now_ns() < deadline) {
		/* (more than fit the buffer: the rest is read the next round) */
		int n = 0, fds[CG_WAIT_MAX], nfd = 0;
		if (read_text(path, text, sizeof(text)) != 0)
			return;
		char *last = strrchr(text, '\n'); /* a pid cut at the end is not one */
		if (!last)
			return;
		last[1] = 0;
		for (char *p = text, *end; *p; p = end) {
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			pid_t pid = (pid_t)v;
			/* (the child itself, a zombie till we reap it, may stay listed) */
			if (pid > 0 && (killed || kill(pid, SIGKILL) == 0) && pid != e->pid) {
				n++;
				int fd = nfd < CG_WAIT_MAX ? (int)syscall(SYS_pidfd_open, pid, 0)
							   : -1;
				if (fd >= 0)
					fds[nfd++] = fd;
			}
		}
		if (n == 0)
			return;
		if (nfd)
			cg_wait_gone(fds, nfd, deadline);
		else
			usleep(1000); /* no pidfd to be had (gone meanwhile, or none left) */
	}
	sh_warn("ext", "%s: processes left in %s after killing them for a second", e->name, e->cg);
}

/* Waits, until deadline, for e's cgroup (v2) to be left by its last
 * process: true when it was not empty and became so. cgroup.events says
 * "populated 0" then, and a poll of it (POLLPRI) wakes at its changes. */
static bool cg_wait_empty(const shoal_ext *e, int64_t deadline)
{
	char path[300], text[256];
	snprintf(path, sizeof(path), "%s/cgroup.events", e->cg);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool waited = false, empty = false;
	for (;;) {
		ssize_t got = lseek(fd, 0, SEEK_SET) == 0 ? read(fd, text, sizeof(text) - 1) : -1;
		if (got < 0)
			break;
		text[got] = 0;
		if (strstr(text, "populated 0")) {
			empty = waited;
			break;
		}
		int64_t ns = deadline - shoal_now_ns();
		if (ns <= 0)
			break;
		struct pollfd p = {.fd = fd, .events = POLLPRI};
		if (poll(&p, 1, (int)((ns + 999999) / 1000000)) < 0 && errno != EINTR)
			break;
		waited = true;
	}
	close(fd);
	return empty;
}

/* After the child is reaped: was it the OOM killer, and the cgroup goes
 * (its last tasks may take a moment to leave). */
void sh_sb_cgroup_done(shoal_ext *e)
{
	if (!e->cg[0])
		return;
	char path[300], text[1024];
	snprintf(path, sizeof(path), "%s/%s", e->cg,
		 e->cg_v2 ? "memory.events" : "memory.oom_control");
	unsigned long long n = 0;
	const char *at =
		read_text(path, text, sizeof(text)) == 0 ? strstr(text, "oom_kill ") : NULL;
	if (at)
		sscanf(at, "oom_kill %llu", &n);
	e->oom_killed = n > 0;
	/* Its last tasks may take a moment to leave it: on v2 cgroup.events
	 * says when the last has (cg_wait_empty); v1 has no event for it
	 * (only a release agent, a program of root's for the whole
	 * hierarchy), so there it is tried again every millisecond. A v2
	 * cgroup that is empty and still busy (the extension made one in it)
	 * stays, as it did after the 200 ms: no event would come for it. */
	int64_t deadline = shoal_deadline_in(200000000);
	for (int i = 0; i < 200 && rmdir(e->cg) != 0 && errno == EBUSY; i++) {
		if (!e->cg_v2)
			usleep(1000);
		else if (!cg_wait_empty(e, deadline))
			break;
	}
	e->cg[0] = 0;
}

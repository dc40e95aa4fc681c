/* The host side of extensions: starting the runner (shoal-ext, or the one
 * configured: a python3 for a Python extension) with its descriptors, in a
 * cgroup of its own where one can be made (its memory limited to mem_max,
 * its whole tree ending with it), its output in the log; the ready
 * handshake; calls over the rings, several in flight, each reply read when
 * someone waits for it; the host services an extension calls back; and
 * what happens when the child dies (started again before the next call,
 * when asked) or a call passes its deadline. A call sleeps on a doorbell
 * (a pipe) the child rings, polled together with a pidfd of the child, so
 * a crash fails the call the moment the child is gone, with its signal or
 * exit status in the message. */
#include "ring/ring.h"
#include "rpc/ext_proto.h"
#include "ring/msg.h"
#include "shm/shm.h"

#include <shoal/ext.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Carries an extension's stdout and stderr into our log (log_output): a
 * thread reads the two pipes and logs each line with the extension's
 * name. Its output is the extension's, so hostile: lines are cut at
 * PUMP_LINE bytes and control bytes are replaced. */
#define PUMP_LINE 2048
typedef struct pump {
	int fd[2]; /* read ends: stdout, stderr */
	char name[128];
	char buf[2][PUMP_LINE];
	size_t len[2];
	_Atomic bool stop; /* the child is gone: drain what is there and end */
	pthread_t thread;
} pump;

struct shoal_ext {
	shoal_ext_config cfg;
	pump *pump; /* log_output: the thread that logs its output */
	char *path, *name, *runner, *cwd, *libpath, *store_path; /* owned copies */
	char *rargs[SHOAL_EXT_RUNNER_ARGS_MAX + 1];		 /* owned copies, NULL-terminated */
	shoal_client *store;					 /* shared payloads go through it */
	char **env;
	size_t nenv;
	pid_t pid;
	int pidfd, sock, efd, efd_w; /* efd_w: the doorbell's write end */
	void *rings;
	size_t ring_bytes;
	sh_ring req, rep;
	uint32_t seq, starts;
	bool dead;		      /* the child is gone (or must go): restart before a call */
	struct shoal_future *pending; /* calls in flight, oldest first */
	_Atomic uint32_t *cancel;     /* shared: the call asked to give up */
	sh_wbuf out;
	unsigned char *in;
	size_t in_cap;
	sh_oob oob;	      /* where the frame just read puts its payloads */
	pthread_mutex_t lock; /* guards who is inside: owner, holder, depth */
	pthread_cond_t turn;
	pthread_t owner;     /* the thread inside (when depth > 0) */
	shoal_fiber *holder; /* the fiber inside, when a fiber is */
	uint32_t depth;	     /* how deep it is inside (nested calls) */
	char cg[256];	     /* its memory cgroup's directory ("": none) */
	bool cg_v2;	     /* in the unified hierarchy (else v1's memory one) */
	bool oom_killed;     /* the last child was killed for its memory limit */
	char err[1024];
};

/* ---- services: one registry for the process ---- */

typedef struct service {
	char *method;
	shoal_service_fn fn;
	void *self;
} service;

static pthread_mutex_t services_lock = PTHREAD_MUTEX_INITIALIZER;
static service *services;
static size_t nservices, cap_services;

int shoal_service_register(const char *method, shoal_service_fn fn, void *self)
{
	if (!method || !*method || !fn)
		return SHOAL_EINVAL;
	int rc = 0;
	pthread_mutex_lock(&services_lock);
	for (size_t i = 0; i < nservices && rc == 0; i++)
		if (strcmp(services[i].method, method) == 0)
			rc = SHOAL_EEXIST;
	if (rc == 0 && nservices == cap_services) {
		size_t nc = cap_services ? cap_services * 2 : 16;
		service *p = shoal_realloc(services, cap_services * sizeof(*p), nc * sizeof(*p));
		if (p) {
			services = p;
			cap_services = nc;
		} else {
			rc = SHOAL_ENOMEM;
		}
	}
	if (rc == 0) {
		size_t l = strlen(method) + 1;
		char *m = shoal_alloc(l);
		if (m) {
			memcpy(m, method, l);
			services[nservices++] = (service){m, fn, self};
		} else {
			rc = SHOAL_ENOMEM;
		}
	}
	pthread_mutex_unlock(&services_lock);
	return rc;
}

int shoal_service_unregister(const char *method)
{
	int rc = SHOAL_ENOENT;
	pthread_mutex_lock(&services_lock);
	for (size_t i = 0; i < nservices; i++)
		if (strcmp(services[i].method, method) == 0) {
			shoal_free(services[i].method, strlen(services[i].method) + 1);
			services[i] = services[--nservices];
			rc = 0;
			break;
		}
	if (nservices == 0 && services) {
		shoal_free(services, cap_services * sizeof(*services));
		services = NULL;
		cap_services = 0;
	}
	pthread_mutex_unlock(&services_lock);
	return rc;
}

static bool service_find(const char *method, uint32_t len, shoal_service_fn *fn, void **self)
{
	bool found = false;
	pthread_mutex_lock(&services_lock);
	for (size_t i = 0; i < nservices && !found; i++)
		if (strlen(services[i].method) == len &&
		    memcmp(services[i].method, method, len) == 0) {
			*fn = services[i].fn;
			*self = services[i].self;
			found = true;
		}
	pthread_mutex_unlock(&services_lock);
	return found;
}

void shoal_ext_config_init(shoal_ext_config *c)
{
	memset(c, 0, sizeof(*c));
}

SHOAL_PRINTF(3, 4)
static int fail(shoal_ext *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->err, sizeof(e->err), fmt, ap);
	va_end(ap);
	return code;
}

const char *shoal_ext_last_error(const shoal_ext *e)
{
	return e ? e->err : "";
}

pid_t shoal_ext_pid(const shoal_ext *e)
{
	return e && !e->dead ? e->pid : 0;
}

uint32_t shoal_ext_starts(const shoal_ext *e)
{
	return e ? e->starts : 0;
}

static char *dup_str(const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	char *p = shoal_alloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

static void free_str(char *s)
{
	if (s)
		shoal_free(s, strlen(s) + 1);
}

/* Describes how a child ended: "killed by SIGSEGV", "exited with status 3". */
static void describe(int st, char *buf, size_t len)
{
	if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by SIG%s%s", sigabbrev_np(WTERMSIG(st)) ?: "?",
			 WCOREDUMP(st) ? " (core dumped)" : "");
	else if (WIFEXITED(st))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
	else
		snprintf(buf, len, "ended (status 0x%x)", st);
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
static int cg_make(shoal_ext *e, char *why, size_t whylen)
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

/* Kills every process in e's cgroup: whatever the extension forked,
 * daemons included (they cannot leave it unless privileged: strict is
 * not). cgroup.kill where the kernel has it; else SIGKILL to each listed
 * process, again until none is left (what a killed process forked
 * meanwhile is listed the next round), for at most about a second. */
static void cg_kill(shoal_ext *e)
{
	if (!e->cg[0])
		return;
	char path[300], text[8192];
	snprintf(path, sizeof(path), "%s/cgroup.kill", e->cg);
	bool killed = e->cg_v2 && sh_ext_write_file(path, "1") == 0;
	snprintf(path, sizeof(path), "%s/cgroup.procs", e->cg);
	for (int round = 0; round < 1000; round++) {
		/* (more than fit the buffer: the rest is read the next round) */
		int n = 0;
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
			if (pid > 0 && (killed || kill(pid, SIGKILL) == 0) && pid != e->pid)
				n++;
		}
		if (n == 0)
			return;
		usleep(1000);
	}
	sh_warn("ext", "%s: processes left in %s after killing them for a second", e->name, e->cg);
}

/* After the child is reaped: was it the OOM killer, and the cgroup goes
 * (its last tasks may take a moment to leave). */
static void cg_done(shoal_ext *e)
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
	for (int i = 0; i < 200 && rmdir(e->cg) != 0 && errno == EBUSY; i++)
		usleep(1000);
	e->cg[0] = 0;
}

static void pump_line(pump *p, int i)
{
	char *b = p->buf[i];
	for (size_t k = 0; k < p->len[i]; k++)
		if (((unsigned char)b[k] < 0x20 && b[k] != '\t') || b[k] == 0x7f)
			b[k] = '?';
	shoal_log(i ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "ext", "%s%s: %.*s", p->name,
		  i ? " (stderr)" : "", (int)p->len[i], b);
	p->len[i] = 0;
}

static void *pump_main(void *arg)
{
	pump *p = arg;
	struct pollfd pf[2] = {{.fd = p->fd[0], .events = POLLIN},
			       {.fd = p->fd[1], .events = POLLIN}};
	/* Once stopped, a bounded drain: a process that escaped the tree and
	 * keeps writing does not hold the host's stop. */
	for (int open = 2, after = 0; open > 0 && after < 20;) {
		int n = poll(pf, 2, 50);
		if (atomic_load(&p->stop))
			after++;
		if (n <= 0) {
			if (after)
				break;
			continue;
		}
		for (int i = 0; i < 2; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			ssize_t got = read(pf[i].fd, p->buf[i] + p->len[i], PUMP_LINE - p->len[i]);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got <= 0) {
				pf[i].fd = -1;
				open--;
				continue;
			}
			size_t end = p->len[i] + (size_t)got, from = 0;
			for (size_t k = p->len[i]; k < end; k++)
				if (p->buf[i][k] == '\n') {
					memmove(p->buf[i], p->buf[i] + from, k - from);
					p->len[i] = k - from;
					pump_line(p, i);
					from = k + 1;
				}
			memmove(p->buf[i], p->buf[i] + from, end - from);
			p->len[i] = end - from;
			if (p->len[i] == PUMP_LINE)
				pump_line(p, i); /* a line that long goes in pieces */
		}
	}
	for (int i = 0; i < 2; i++) {
		if (p->len[i])
			pump_line(p, i);
		close(p->fd[i]);
	}
	return NULL;
}

/* Starts the pump on the read ends of two pipes (it owns them then). */
static int pump_start(shoal_ext *e, int out_fd, int err_fd)
{
	pump *p = SH_NEW(pump);
	if (!p) {
		close(out_fd);
		close(err_fd);
		return SHOAL_ENOMEM;
	}
	p->fd[0] = out_fd;
	p->fd[1] = err_fd;
	snprintf(p->name, sizeof(p->name), "%s", e->name);
	int rc = -pthread_create(&p->thread, NULL, pump_main, p);
	if (rc) {
		close(out_fd);
		close(err_fd);
		SH_DELETE(p);
		return rc;
	}
	e->pump = p;
	return 0;
}

static void pump_stop(shoal_ext *e)
{
	if (!e->pump)
		return;
	atomic_store(&e->pump->stop, true);
	pthread_join(e->pump->thread, NULL);
	SH_DELETE(e->pump);
	e->pump = NULL;
}

/* Tears the current child down: kill, reap, close everything of it. */
static void child_reap(shoal_ext *e, bool kill_it, int *status)
{
	int st = 0;
	if (e->pid > 0) {
		if (kill_it && !e->cg[0] && e->cfg.sandbox != SHOAL_SANDBOX_STRICT &&
		    e->pidfd >= 0) {
			/* No cgroup: the runner's subreaper ends the tree when asked,
			 * which a SIGKILL of it would orphan. */
			struct pollfd p = {.fd = e->pidfd, .events = POLLIN};
			kill(e->pid, SIGTERM);
			while (poll(&p, 1, 1000) < 0 && errno == EINTR)
				;
		}
		if (kill_it) {
			kill(e->pid, SIGKILL);
			cg_kill(e);
		}
		while (waitpid(e->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (status)
		*status = st;
	cg_kill(e); /* what it left behind */
	cg_done(e);
	pump_stop(e); /* after its tree: the last lines of all of it are in */
	if (e->rings)
		sh_shm_unmap(e->rings, e->ring_bytes);
	if (e->pidfd >= 0)
		close(e->pidfd);
	if (e->sock >= 0)
		close(e->sock);
	if (e->efd >= 0)
		close(e->efd);
	if (e->efd_w >= 0)
		close(e->efd_w);
	e->rings = NULL;
	e->cancel = NULL;
	e->pidfd = e->sock = e->efd = e->efd_w = -1;
	e->pid = 0;
	e->dead = true;
}

static int spawn_child(shoal_ext *e)
{
	int sv[2] = {-1, -1}, rfd = -1, rc;
	size_t one;
	e->dead = true;
	if ((rc = sh_ring_bytes(SH_EXT_RING_CAP, &one)) != 0)
		return fail(e, rc, "ring size");
	e->ring_bytes = 2 * one + SH_EXT_CTRL_BYTES;
	/* The doorbell the extension rings is a pipe whose read end only we
	 * hold: on an eventfd both hold, the extension could clear O_NONBLOCK
	 * and empty it between our poll and our read, which would then block
	 * the calling thread for good. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		rc = shoal_errno();
		goto out;
	}
	if ((rc = sh_bell_pair(&e->efd, &e->efd_w)) != 0)
		goto out;
	/* The size is sealed before the child sees the memfd: an extension
	 * that truncates it (through fd 4, /proc/self/fd or map_files) would
	 * make the host's next touch of the rings or the control page after
	 * them a SIGBUS. */
	if ((rc = sh_memfd_create("shoal-ext-rings", e->ring_bytes, true, &rfd)) != 0 ||
	    (rc = sh_memfd_fix_size(rfd)) != 0 ||
	    (rc = sh_shm_map(rfd, e->ring_bytes, true, &e->rings)) != 0)
		goto out;
	sh_ring_format(e->rings, one);
	sh_ring_format((char *)e->rings + one, one);
	sh_ring_attach(&e->req, e->rings, one, true);
	sh_ring_attach(&e->rep, (char *)e->rings + one, one, false);
	e->cancel = (_Atomic uint32_t *)((char *)e->rings + 2 * one);
	/* Both rings sleep on the doorbell and watch the child (its pidfd, set
	 * below): a call waiting for room in a full request ring notices the
	 * child's death as a reply does. */
	e->rep.wait_efd = e->req.wait_efd = e->efd;
	e->rep.wait_wfd = e->req.wait_wfd = e->efd_w;
	e->rep.spin_ns = 50000; /* a call round trip is a few us when both spin */

	char mem[32], cpu[32], files[32];
	uint64_t as = e->cfg.mem_limit;
	e->oom_killed = false;
	char why[400];
	if (cg_make(e, why, sizeof(why)) != 0) {
		/* The runner ends its tree itself then (a subreaper); only a
		 * memory limit has nothing to stand in for it but rlimits. */
		if (e->cfg.mem_max) {
			sh_warn("ext",
				"%s: no memory cgroup (%s): its memory is bounded by address space "
				"instead (RLIMIT_AS), where allocations fail past it",
				e->name, why);
			if (!as || as > e->cfg.mem_max)
				as = e->cfg.mem_max;
		}
	}
	snprintf(mem, sizeof(mem), "%" PRIu64, as);
	snprintf(cpu, sizeof(cpu), "%u", e->cfg.cpu_limit_s);
	snprintf(files, sizeof(files), "%u", e->cfg.max_files);
	char *argv[SHOAL_EXT_RUNNER_ARGS_MAX + 24] = {e->runner};
	size_t nr = 0;
	while (e->rargs[nr]) {
		argv[1 + nr] = e->rargs[nr];
		nr++;
	}
	char *opts[] = {"--so",
			e->path,
			"--name",
			e->name,
			"--mem",
			mem,
			"--cpu",
			cpu,
			"--files",
			files,
			"--sandbox",
			e->cfg.sandbox == SHOAL_SANDBOX_STRICT	? "strict"
			: e->cfg.sandbox == SHOAL_SANDBOX_BASIC ? "basic"
								: "none",
			"--network",
			e->cfg.allow_network ? "1" : "0",
			e->cg[0] ? "--cgroup" : NULL,
			e->cg,
			NULL};
	memcpy(argv + 1 + nr, opts, sizeof(opts));
	if (e->store_path) {
		char **tail = argv;
		while (*tail)
			tail++;
		tail[0] = "--store";
		tail[1] = e->store_path;
	}
	int outp[2] = {-1, -1}, errp[2] = {-1, -1};
	/* A strict extension never gets our stdout and stderr (a terminal's
	 * settings, O_NONBLOCK on a description we write): its output comes
	 * through the log pump, whatever log_output says. */
	bool pumped = e->cfg.log_output || e->cfg.sandbox == SHOAL_SANDBOX_STRICT;
	if (pumped && (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0)) {
		rc = shoal_errno();
		fail(e, rc, "%s: pipes for its output: %s", e->name, strerror(errno));
		for (int i = 0; i < 2; i++)
			if (outp[i] >= 0)
				close(outp[i]);
		goto out;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	if (pumped) {
		posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
		posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
	}
	/* nor our stdin, from basic on: it could read what is typed to us */
	if (e->cfg.sandbox != SHOAL_SANDBOX_NONE)
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, sv[1], SH_EXT_FD_SOCK);
	posix_spawn_file_actions_adddup2(&fa, rfd, SH_EXT_FD_RINGS);
	posix_spawn_file_actions_adddup2(&fa, e->efd_w, SH_EXT_FD_EFD);
	if (e->cwd)
		posix_spawn_file_actions_addchdir_np(&fa, e->cwd);
	rc = -posix_spawn(&e->pid, e->runner, &fa, NULL, argv, e->env);
	posix_spawn_file_actions_destroy(&fa);
	if (pumped) {
		close(outp[1]);
		close(errp[1]);
	}
	if (rc) {
		e->pid = 0;
		if (pumped) {
			close(outp[0]);
			close(errp[0]);
		}
		fail(e, rc, "%s: cannot run %s: %s", e->name, e->runner, shoal_strerror(rc));
		goto out;
	}
	if (pumped && (rc = pump_start(e, outp[0], errp[0])) != 0) {
		fail(e, rc, "%s: a thread for its output: %s", e->name, shoal_strerror(rc));
		goto out;
	}
	e->pidfd = (int)syscall(SYS_pidfd_open, e->pid, 0);
	if (e->pidfd < 0) {
		rc = shoal_errno();
		goto out;
	}
	e->rep.peer_fd = e->req.peer_fd = e->pidfd;
	e->sock = sv[0];
	sv[0] = -1;
	e->starts++;
out:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (rfd >= 0)
		close(rfd);
	if (rc) {
		if (!e->err[0])
			fail(e, rc, "%s: starting: %s", e->name, shoal_strerror(rc));
		child_reap(e, true, NULL);
	}
	return rc;
}

/* Waits for the ready message: the init's result, or the child's death. */
static int await_ready(shoal_ext *e)
{
	int64_t ns = e->cfg.start_timeout_ns ? e->cfg.start_timeout_ns : 5000000000LL;
	int64_t deadline = shoal_deadline_in(ns);
	sh_ext_ready m;
	for (;;) {
		struct pollfd p[2] = {{.fd = e->sock, .events = POLLIN},
				      {.fd = e->pidfd, .events = POLLIN}};
		int64_t left = deadline - shoal_now_ns();
		if (left <= 0) {
			child_reap(e, true, NULL);
			return fail(e, SHOAL_ETIMEDOUT, "%s: not ready after %" PRId64 " ms",
				    e->name, ns / 1000000);
		}
		int n = poll(p, 2, (int)((left + 999999) / 1000000));
		if (n < 0 && errno != EINTR)
			return fail(e, shoal_errno(), "%s: poll: %s", e->name, strerror(errno));
		if (n > 0 && (p[0].revents & POLLIN)) {
			size_t got = 0;
			int rc = sh_fd_recv(e->sock, &m, sizeof(m), &got, NULL, 0, NULL);
			if (rc == 0 && got == sizeof(m) && m.magic == SH_EXT_READY_MAGIC &&
			    m.status <= 0) {
				m.msg[sizeof(m.msg) - 1] = 0;
				if (m.status == 0) {
					e->dead = false;
					return 0;
				}
				/* it may say so and live on: not waited for alive */
				child_reap(e, true, NULL);
				return fail(e, m.status, "%s", m.msg);
			}
			if (rc == 0 && got == 0)
				p[1].revents = POLLIN; /* closed: it is gone or going */
			else if (rc != SHOAL_EAGAIN) {
				child_reap(e, true, NULL);
				return fail(e, SHOAL_EPROTO, "%s: malformed ready message",
					    e->name);
			}
		}
		if (n > 0 && (p[1].revents || (p[0].revents & (POLLHUP | POLLERR)))) {
			int st;
			char how[96];
			child_reap(e, false, &st);
			describe(st, how, sizeof(how));
			return fail(e, SHOAL_ECRASHED, "%s: %s while loading", e->name, how);
		}
	}
}

static void ext_free(shoal_ext *e)
{
	free_str(e->path);
	free_str(e->name);
	free_str(e->runner);
	for (size_t i = 0; e->rargs[i]; i++)
		free_str(e->rargs[i]);
	free_str(e->cwd);
	free_str(e->libpath);
	free_str(e->store_path);
	if (e->store)
		shoal_disconnect(e->store);
	if (e->env) {
		for (size_t i = 0; i < e->nenv; i++)
			free_str(e->env[i]);
		shoal_free(e->env, (e->nenv + 1) * sizeof(char *));
	}
	sh_wbuf_fini(&e->out);
	sh_oob_fini(&e->oob);
	if (e->in)
		shoal_free(e->in, e->in_cap);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->turn);
	SH_DELETE(e);
}

/* The child's environment: ours (sandbox none) or an allow-list (basic),
 * then the config's entries and library path. Strict writes only its own
 * private directories (sandbox.h): its TMPDIR is /var/tmp, one of them,
 * unless the config says otherwise. */
static int build_env(shoal_ext *e)
{
	static const char *const allow[] = {"PATH", "HOME",   "LANG",	   "LC_ALL",
					    "TZ",   "TMPDIR", "SHOAL_LOG", NULL};
	size_t n = 0, cap = 0;
	for (char **p = environ; *p; p++)
		cap++;
	for (char *const *p = e->cfg.env; p && *p; p++)
		cap++;
	cap += 4; /* TMPDIR, LD_LIBRARY_PATH, SHOAL_EXT_STORE_GRANT (env_add) */
	e->env = shoal_calloc(cap + 1, sizeof(char *));
	if (!e->env)
		return SHOAL_ENOMEM;
	bool strict = e->cfg.sandbox == SHOAL_SANDBOX_STRICT, own_tmp = false;
	for (char *const *q = e->cfg.env; q && *q; q++)
		own_tmp |= strncmp(*q, "TMPDIR=", 7) == 0;
	for (char **p = environ; *p; p++) {
		bool keep = e->cfg.sandbox == SHOAL_SANDBOX_NONE;
		for (size_t i = 0; !keep && allow[i]; i++) {
			size_t l = strlen(allow[i]);
			keep = strncmp(*p, allow[i], l) == 0 && (*p)[l] == '=';
		}
		if (strict && strncmp(*p, "TMPDIR=", 7) == 0)
			keep = false;
		/* The config's entries win over ours of the same name. */
		size_t nl = strcspn(*p, "=");
		for (char *const *q = e->cfg.env; keep && q && *q; q++)
			keep = !(strncmp(*q, *p, nl) == 0 && (*q)[nl] == '=');
		if (keep && !(e->env[n++] = dup_str(*p)))
			return SHOAL_ENOMEM;
	}
	for (char *const *p = e->cfg.env; p && *p; p++)
		if (!(e->env[n++] = dup_str(*p)))
			return SHOAL_ENOMEM;
	if (strict && !own_tmp && !(e->env[n++] = dup_str("TMPDIR=/var/tmp")))
		return SHOAL_ENOMEM;
	if (e->libpath) {
		size_t l = strlen(e->libpath) + 20;
		if (!(e->env[n] = shoal_alloc(l)))
			return SHOAL_ENOMEM;
		snprintf(e->env[n], l, "LD_LIBRARY_PATH=%s", e->libpath);
		/* sized for free_str */
		char *exact = dup_str(e->env[n]);
		shoal_free(e->env[n], l);
		if (!(e->env[n++] = exact))
			return SHOAL_ENOMEM;
	}
	e->nenv = cap; /* the array's size for the free; unused slots are NULL */
	return 0;
}

/* One more entry in the child's environment (build_env left room). */
static int env_add(shoal_ext *e, const char *entry)
{
	size_t n = 0;
	while (n < e->nenv && e->env[n])
		n++;
	if (n == e->nenv)
		return SHOAL_ENOMEM;
	return (e->env[n] = dup_str(entry)) ? 0 : SHOAL_ENOMEM;
}

int shoal_ext_start(shoal_ext **out, const shoal_ext_config *cfg)
{
	if (!out || !cfg || !cfg->path)
		return SHOAL_EINVAL;
	shoal_ext *e = SH_NEW(shoal_ext);
	if (!e)
		return SHOAL_ENOMEM;
	e->cfg = *cfg;
	e->pidfd = e->sock = e->efd = e->efd_w = -1;
	e->dead = true;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->turn, NULL);
	sh_wbuf_init(&e->out);
	const char *base = strrchr(cfg->path, '/');
	const char *runner = cfg->runner ? cfg->runner : getenv("SHOAL_EXT_RUNNER");
	/* Absolute paths: the child may start in another directory (cwd). */
	char abs_so[PATH_MAX], abs_run[PATH_MAX], installed[PATH_MAX];
	runner = runner && *runner ? runner
				   : sh_program_path("shoal-ext", installed, sizeof(installed));
	e->path = dup_str(realpath(cfg->path, abs_so) ? abs_so : cfg->path);
	e->name = dup_str(cfg->name ? cfg->name : base ? base + 1 : cfg->path);
	/* an absolute path as given: a venv's python is a symlink whose own
	 * place says which venv it runs */
	e->runner = dup_str(runner[0] == '/' || !realpath(runner, abs_run) ? runner : abs_run);
	size_t nr = 0;
	for (; cfg->runner_args && cfg->runner_args[nr]; nr++)
		if (nr == SHOAL_EXT_RUNNER_ARGS_MAX ||
		    !(e->rargs[nr] = dup_str(cfg->runner_args[nr]))) {
			ext_free(e);
			return nr == SHOAL_EXT_RUNNER_ARGS_MAX ? SHOAL_EINVAL : SHOAL_ENOMEM;
		}
	e->cwd = dup_str(cfg->cwd);
	e->libpath = dup_str(cfg->library_path);
	e->store_path = dup_str(cfg->store_socket);
	e->cfg.env = NULL;
	int rc = (!e->path || !e->name || !e->runner || (cfg->cwd && !e->cwd) ||
		  (cfg->library_path && !e->libpath))
			 ? SHOAL_ENOMEM
			 : 0;
	e->cfg.env = cfg->env;
	if (rc == 0)
		rc = build_env(e);
	e->cfg.env = NULL;
	if (rc) {
		ext_free(e);
		return rc;
	}
	*out = e;
	if (e->store_path && (rc = shoal_connect(&e->store, e->store_path)) != 0)
		return fail(e, rc, "%s: no store at %s for shared payloads: %s", e->name,
			    e->store_path, shoal_strerror(rc));
	/* A strict extension's runner restricts its own store connection to
	 * what this one holds (shoal_restrict): the token that names this
	 * connection goes in its environment, which only it (and root) reads. */
	uint64_t grant = e->cfg.store_grant;
	char entry[64];
	if (e->store && e->cfg.sandbox == SHOAL_SANDBOX_STRICT &&
	    ((!grant && (rc = shoal_claim(e->store, &grant)) != 0) ||
	     (snprintf(entry, sizeof(entry), "SHOAL_EXT_STORE_GRANT=%016" PRIx64, grant),
	      (rc = env_add(e, entry)) != 0)))
		return fail(e, rc, "%s: a grant of the store for it: %s", e->name,
			    shoal_strerror(rc));
	rc = spawn_child(e);
	if (rc == 0)
		rc = await_ready(e);
	return rc;
}

/* After a crash or a kill: the call's error, and the child reaped. */
static int crashed(shoal_ext *e, const char *fn)
{
	int st;
	char how[96];
	/* Killed first: "crashed" may also be an extension that closed its
	 * rings and lives on, which a plain wait would wait for forever. */
	child_reap(e, true, &st);
	describe(st, how, sizeof(how));
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && e->oom_killed)
		return fail(e, SHOAL_ECRASHED,
			    "%s: killed by the OOM killer: over its memory limit of %" PRIu64
			    " MiB (mem_max) in %s()",
			    e->name, e->cfg.mem_max >> 20, fn);
	return fail(e, SHOAL_ECRASHED, "%s: %s in %s()", e->name, how, fn);
}

/* Runs the service call in e->in and sends its return. Nonzero only when
 * the extension must go (the rings failed, it broke the protocol, or the
 * bytes that follow its call did not come by the waiting call's
 * deadline). */
static int serve_service(shoal_ext *e, const sh_frame *f, int64_t deadline)
{
	shoal_vbuf *vin = NULL, *vout = NULL;
	char msg[SH_EXT_MSG_MAX] = "";
	const char *method = "";
	uint32_t ml = 0, n;
	shoal_value *args = NULL, *result = NULL;
	int status = shoal_vbuf_create(&vin);
	if (status == 0)
		status = shoal_vbuf_create(&vout);
	bool shared = f->flags & SH_FRAME_SHARED;
	if (status == 0)
		vin->store = vout->store = e->store;
	sh_mp m;
	sh_mp_init(&m, e->in + SH_FRAME_HDR, f->body_len);
	sh_oob_reset(&e->oob, f->oob);
	if (status == 0 && (sh_mp_array(&m, &n) || n != 2 || sh_mp_str(&m, &method, &ml) || !ml)) {
		status = SHOAL_EBADMSG;
		snprintf(msg, sizeof(msg), "expected a call [method, args]");
	}
	/* Copied out: a nested call reuses e->in. */
	char mname[256];
	snprintf(mname, sizeof(mname), "%.*s", (int)(ml < 255 ? ml : 255), method);
	if (status == 0 &&
	    (status = sh_value_decode(&m, vin, &e->oob, &args, msg, sizeof(msg))) == 0 &&
	    sh_mp_done(&m) != 0) {
		status = SHOAL_EBADMSG;
		snprintf(msg, sizeof(msg), "bytes after the arguments");
	}
	/* What follows the frame is read (or dropped) before anything else:
	 * the method may call the extension back. */
	int rc = status == 0 ? sh_oob_read(&e->oob, &e->rep, deadline, msg, sizeof(msg))
			     : sh_oob_discard(&e->oob, &e->rep, deadline);
	if (rc && (rc != SHOAL_EBADMSG || status == 0)) {
		shoal_vbuf_free(vin);
		shoal_vbuf_free(vout);
		return fail(e, SHOAL_EPROTO, "%s: its call of %s: %s", e->name, mname,
			    rc == SHOAL_EBADMSG ? msg : shoal_strerror(rc));
	}
	shoal_service_fn fn = NULL;
	void *self = NULL;
	if (status == 0 && !service_find(mname, (uint32_t)strlen(mname), &fn, &self)) {
		status = SHOAL_ENOENT;
		snprintf(msg, sizeof(msg), "the host has no service method %s", mname);
	}
	uint32_t gen = e->starts;
	if (status == 0) {
		status = fn(self, args, vout, &result, msg, sizeof(msg));
		if (status > 0)
			status = SHOAL_EIO;
		if (status == 0 && shared && result)
			status = sh_value_share(vout, result, msg, sizeof(msg));
		if (status && !msg[0])
			snprintf(msg, sizeof(msg), "%s: %s", mname, shoal_strerror(status));
	}
	/* The service may have called the extension back, and that call
	 * found it out of step and killed it (or it died, or was started
	 * again): its rings are unmapped or another process's, and this
	 * return has no caller left. The failure is that call's, said by it. */
	if (e->dead || e->starts != gen) {
		shoal_vbuf_free(vin);
		shoal_vbuf_free(vout);
		return SHOAL_ECRASHED;
	}
	sh_wbuf_frame_begin(&e->out);
	msgpack_packer pk;
	sh_wbuf_packer(&e->out, &pk);
	msgpack_pack_array(&pk, 1);
	shoal_value nil = {.type = SHOAL_V_NIL};
	if (status == 0)
		sh_value_pack(&pk, result ? result : &nil, shared ? e->store : NULL, &e->out);
	else
		sh_mp_pack_cstr(&pk, msg);
	sh_frame r = {.op = SH_EXT_OP_RETURN,
		      .seq = f->seq,
		      .status = status,
		      .flags = shared ? SH_FRAME_SHARED : 0};
	rc = sh_wbuf_frame_end(&e->out, &r);
	if (rc == 0 && e->out.len > SH_MSG_MAX) {
		sh_wbuf_frame_begin(&e->out);
		msgpack_pack_array(&pk, 1);
		sh_mp_pack_cstr(&pk, "the service's result is larger than a message can be");
		r = (sh_frame){.op = SH_EXT_OP_RETURN, .seq = f->seq, .status = SHOAL_EMSGSIZE};
		rc = sh_wbuf_frame_end(&e->out, &r);
	}
	if (rc == 0)
		rc = sh_frame_send(&e->req, &e->out, SHOAL_FOREVER);
	shoal_vbuf_free(vin);
	shoal_vbuf_free(vout);
	if (rc)
		fail(e, rc, "%s: answering its call of %s: %s", e->name, mname, shoal_strerror(rc));
	return rc;
}

int shoal_v_share(shoal_ext *e, shoal_vbuf *b, shoal_value *v)
{
	if (!e || !b || !v)
		return SHOAL_EINVAL;
	if (!e->store)
		return fail(e, SHOAL_EINVAL, "%s: sharing needs a store (config store_socket)",
			    e->name);
	if (b->store && b->store != e->store)
		return fail(e, SHOAL_EINVAL, "the vbuf holds objects of another store connection");
	b->store = e->store;
	char why[256];
	int rc = sh_value_share(b, v, why, sizeof(why));
	return rc ? fail(e, rc, "%s", why) : 0;
}

/* Entering an extension: one caller at a time, a thread or one fiber of
 * a thread; the same caller may come back in (a service it serves calls
 * again). The mutex guards only who is inside: nobody holds it across a
 * call, so a fiber asleep in a call blocks nothing but its turn. A waiting
 * thread sleeps on the condition; a waiting fiber sleeps in short slices,
 * so that the fiber inside, on the same thread, can finish. */
static void ext_enter(shoal_ext *e)
{
	shoal_fiber *me = shoal_sched_current() ? shoal_self() : NULL;
	pthread_t self = pthread_self();
	pthread_mutex_lock(&e->lock);
	while (e->depth && !(pthread_equal(e->owner, self) && e->holder == me)) {
		if (me) {
			pthread_mutex_unlock(&e->lock);
			shoal_sleep_until(shoal_deadline_in(50000));
			pthread_mutex_lock(&e->lock);
		} else {
			pthread_cond_wait(&e->turn, &e->lock);
		}
	}
	e->owner = self;
	e->holder = me;
	e->depth++;
	pthread_mutex_unlock(&e->lock);
}

static void ext_leave(shoal_ext *e)
{
	pthread_mutex_lock(&e->lock);
	if (--e->depth == 0) {
		e->holder = NULL;
		pthread_cond_broadcast(&e->turn);
	}
	pthread_mutex_unlock(&e->lock);
}

/* ---- calls: sent now, their replies read when someone waits ---- */

struct shoal_future {
	shoal_ext *e;
	shoal_future *next; /* e's calls in flight, oldest first */
	uint32_t seq, gen;  /* gen: the start of the child it went to */
	int64_t deadline;
	shoal_vbuf *hold; /* shared arguments put into the store for this call */
	/* A reply read while waiting for another call: decoded at once (its
	 * payloads must leave the ring), kept for this call's wait. */
	bool replied;
	int status;	  /* its code */
	shoal_vbuf *kept; /* its result's memory, until the wait takes it */
	shoal_value *result;
	char *msg;  /* its message, when status < 0 */
	int failed; /* the child went with this call in flight: the code */
	char fn[64];
};

/* What a call record owns (not the record). */
static void future_fini(shoal_future *f)
{
	shoal_vbuf_free(f->kept);
	shoal_vbuf_free(f->hold);
	if (f->msg)
		shoal_free(f->msg, strlen(f->msg) + 1);
	f->kept = f->hold = NULL;
	f->msg = NULL;
}

static void future_free(shoal_future *f)
{
	future_fini(f);
	SH_DELETE(f);
}

static void unlink_future(shoal_ext *e, shoal_future *f)
{
	for (shoal_future **p = &e->pending; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			return;
		}
}

/* The child is gone (or killed): every call in flight fails with code. */
static void fail_pending(shoal_ext *e, int code)
{
	for (shoal_future *f = e->pending; f; f = f->next)
		if (!f->failed && !f->replied)
			f->failed = code;
}

static int wait_call(shoal_future *f, shoal_vbuf *out, const shoal_value **result,
		     int64_t deadline);
static shoal_future *oldest_unanswered(shoal_ext *e);

/* Reads the reply to p, a call in flight, now, and keeps it for p's wait. */
static void keep_reply(shoal_ext *e, shoal_future *p)
{
	const shoal_value *res = NULL;
	int rc = p->kept ? 0 : shoal_vbuf_create(&p->kept);
	if (rc == 0)
		rc = wait_call(p, p->kept, &res, 0);
	p->replied = true;
	p->status = rc;
	p->result = (shoal_value *)res;
	if (rc && (p->msg = shoal_alloc(strlen(e->err) + 1)) != NULL)
		memcpy(p->msg, e->err, strlen(e->err) + 1);
}

/* Whether the call packed in e->out fits the request ring's free room
 * now, with a record's slack for each piece and one for the wrap. */
static bool call_fits(shoal_ext *e)
{
	size_t need = e->out.len + e->out.oob_bytes + 16 * ((size_t)e->out.noob + 2) +
		      (e->out.len + e->out.oob_bytes) / 1024 + SH_EXT_RING_CAP / 8;
	return need <= sh_ring_room(&e->req);
}

void sh_ext_pack_call(sh_wbuf *w, const char *fn, const shoal_value *args, shoal_client *shared)
{
	sh_wbuf_frame_begin(w);
	msgpack_packer pk;
	sh_wbuf_packer(w, &pk);
	msgpack_pack_array(&pk, 2);
	sh_mp_pack_cstr(&pk, fn);
	shoal_value nil = {.type = SHOAL_V_NIL};
	sh_value_pack(&pk, args ? args : &nil, shared, w);
}

/* Sends a call; f (zeroed by the caller) becomes its record in flight. */
static int send_call(shoal_ext *e, const char *fn, const shoal_value *args, int64_t deadline,
		     unsigned flags, shoal_future *f)
{
	if (!e || !fn || !*fn || (flags & ~(unsigned)(SHOAL_CALL_COPY | SHOAL_CALL_SHARED)) ||
	    (flags & SHOAL_CALL_COPY && flags & SHOAL_CALL_SHARED))
		return SHOAL_EINVAL;
	int rc = 0;
	e->err[0] = 0;
	bool shared = (flags & SHOAL_CALL_SHARED) ||
		      (!(flags & SHOAL_CALL_COPY) && e->cfg.payload == SHOAL_PAYLOAD_SHARED);
	if (shared && !e->store)
		return fail(e, SHOAL_EINVAL, "%s: shared mode needs a store (config store_socket)",
			    e->name);
	f->e = e;
	snprintf(f->fn, sizeof(f->fn), "%s", fn);
	if (shared && args && sh_value_needs_share(args)) {
		if (shoal_vbuf_create(&f->hold) != 0)
			return fail(e, SHOAL_ENOMEM, "out of memory");
		f->hold->store = e->store;
		/* Tensors not in the store yet go into one for this call: a copy
		 * of the tree (not of the data), shared, held by the call. */
		shoal_value *c = sh_value_clone(f->hold, args);
		char why[256];
		if (!c) {
			rc = fail(e, SHOAL_ENOMEM, "out of memory");
			goto fail;
		}
		if ((rc = sh_value_share(f->hold, c, why, sizeof(why))) != 0) {
			fail(e, rc, "%s", why);
			goto fail;
		}
		args = c;
	}
	/* A call that does not fit the ring's room behind calls in flight
	 * waits for their replies first: else we could block writing it
	 * while the extension blocks writing a reply we do not read. Reading
	 * them may serve the extension's calls, which use e->out: the call is
	 * packed again after that. */
	for (shoal_future *p;;) {
		sh_ext_pack_call(&e->out, fn, args, shared ? e->store : NULL);
		if (e->dead || e->out.err || (p = oldest_unanswered(e)) == NULL || call_fits(e))
			break;
		keep_reply(e, p);
	}
	if (e->dead) {
		if (e->cfg.restart != SHOAL_RESTART_ON_CRASH || e->starts == 0) {
			rc = fail(e, SHOAL_ECRASHED, "%s is not running", e->name);
			goto fail;
		}
		if ((rc = spawn_child(e)) != 0 || (rc = await_ready(e)) != 0)
			goto fail;
	}
	if (deadline == 0)
		deadline = e->cfg.call_timeout_ns ? shoal_deadline_in(e->cfg.call_timeout_ns)
						  : SHOAL_FOREVER;
	f->deadline = deadline;
	sh_frame fr = {
		.op = SH_EXT_OP_CALL, .seq = ++e->seq, .flags = shared ? SH_FRAME_SHARED : 0};
	if ((rc = sh_wbuf_frame_end(&e->out, &fr)) != 0) {
		fail(e, rc, "%s(): arguments: %s", fn, shoal_strerror(rc));
		goto fail;
	}
	if (e->out.len > SH_MSG_MAX) {
		rc = fail(e, SHOAL_EMSGSIZE, "%s(): %zu bytes of arguments, at most %zu fit a call",
			  fn, e->out.len, SH_MSG_MAX);
		goto fail;
	}
	rc = sh_frame_send(&e->req, &e->out, deadline);
	if (e->out.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&e->out);
	sh_wbuf_reset(&e->out); /* its parts point into args */
	if (rc) {
		/* a ring full past the deadline, or a dead child: out of step */
		fail_pending(e, SHOAL_ECRASHED);
		int crc = rc == SHOAL_ETIMEDOUT ? SHOAL_ETIMEDOUT : SHOAL_ECRASHED;
		if (rc == SHOAL_ETIMEDOUT) {
			child_reap(e, true, NULL);
			fail(e, crc, "%s: %s() could not be sent before its deadline; killed",
			     e->name, fn);
		} else {
			crashed(e, fn);
		}
		rc = crc;
		goto fail;
	}
	f->seq = fr.seq;
	f->gen = e->starts;
	shoal_future **tail = &e->pending;
	while (*tail)
		tail = &(*tail)->next;
	*tail = f;
	return 0;
fail:
	shoal_vbuf_free(f->hold);
	f->hold = NULL;
	return rc;
}

/* Decodes the RETURN frame r (its body in e->in) into b and reads its
 * payloads out of band. Returns the call's code, with its message in msg;
 * *fatal when the extension broke the protocol or died meanwhile (it must
 * go: the rings are out of step). */
static int decode_reply(shoal_ext *e, const sh_frame *r, shoal_vbuf *b, shoal_value **v,
			int64_t deadline, char *msg, size_t msglen, bool *fatal)
{
	sh_mp m;
	uint32_t n;
	int rc = 0;
	*fatal = false;
	sh_mp_init(&m, e->in + SH_FRAME_HDR, r->body_len);
	sh_oob_reset(&e->oob, r->oob);
	if (r->status != 0) {
		const char *s = "";
		uint32_t sl = 0;
		if (sh_mp_array(&m, &n) || n != 1 || sh_mp_str(&m, &s, &sl))
			s = "(no message)", sl = 12;
		snprintf(msg, msglen, "%.*s", (int)sl, s);
		*fatal = sh_oob_discard(&e->oob, &e->rep, deadline) != 0;
		return r->status;
	}
	msg[0] = 0;
	if (sh_mp_array(&m, &n) || n != 1 ||
	    (rc = sh_value_decode(&m, b, &e->oob, v, msg, msglen)) != 0 || sh_mp_done(&m) != 0) {
		if (rc != SHOAL_ENOMEM || sh_oob_discard(&e->oob, &e->rep, deadline) != 0)
			*fatal = true;
		if (rc == SHOAL_ENOMEM)
			snprintf(msg, msglen, "no memory for the result");
		else if (!msg[0])
			snprintf(msg, msglen, "malformed");
		return rc == SHOAL_ENOMEM ? rc : SHOAL_EPROTO;
	}
	if ((rc = sh_oob_read(&e->oob, &e->rep, deadline, msg, msglen)) != 0) {
		*fatal = true;
		return rc == SHOAL_EBADMSG ? SHOAL_EPROTO : rc;
	}
	return 0;
}

/* The call the extension is running now: the oldest without a reply. */
static shoal_future *oldest_unanswered(shoal_ext *e)
{
	for (shoal_future *p = e->pending; p; p = p->next)
		if (!p->replied && !p->failed)
			return p;
	return NULL;
}

static int wait_call(shoal_future *f, shoal_vbuf *out, const shoal_value **result, int64_t deadline)
{
	shoal_ext *e = f->e;
	int rc = 0;
	e->err[0] = 0;
	if (out->store && out->store != e->store)
		return fail(e, SHOAL_EINVAL, "out holds objects of another store connection");
	out->store = e->store;
	if (deadline == 0)
		deadline = f->deadline;
	bool cancelling = false;
	for (;;) {
		if (f->replied) {
			if (f->status)
				return fail(e, f->status, "%s", f->msg ? f->msg : "");
			if ((rc = sh_vbuf_adopt(out, f->kept)) != 0)
				return fail(e, rc, "no memory to hand over the result of %s()",
					    f->fn);
			*result = f->result;
			return 0;
		}
		if (f->failed || f->gen != e->starts || e->dead) {
			rc = f->failed ? f->failed : SHOAL_ECRASHED;
			if (!e->err[0] || f->failed)
				fail(e, rc, "%s: %s() was in flight when the extension %s", e->name,
				     f->fn, rc == SHOAL_ETIMEDOUT ? "was killed" : "went");
			return rc;
		}
		size_t len = 0;
		rc = sh_msg_read(&e->rep, &e->in, &e->in_cap, &len, deadline);
		if (rc == SHOAL_ECONNRESET || rc == SHOAL_ECLOSED) {
			/* It ran the oldest call without a reply when it went. */
			const char *running = f->fn;
			for (shoal_future *p = e->pending; p; p = p->next)
				if (!p->replied && !p->failed) {
					running = p->fn;
					break;
				}
			char fn[64];
			snprintf(fn, sizeof(fn), "%s", running);
			fail_pending(e, SHOAL_ECRASHED);
			f->failed = 0;
			return crashed(e, fn);
		}
		if (rc == SHOAL_ETIMEDOUT && !cancelling && oldest_unanswered(e) == f) {
			/* Ask it to give up (shoal_ext_cancelled), and give it a
			 * moment: a function that answers is not killed. */
			atomic_store_explicit(e->cancel, f->seq, memory_order_release);
			cancelling = true;
			deadline = shoal_deadline_in(SH_EXT_CANCEL_GRACE_NS);
			continue;
		}
		if (rc == SHOAL_ETIMEDOUT) {
			/* Its state is unknown now: it goes, and comes back per policy. */
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
			return fail(e, SHOAL_ETIMEDOUT,
				    "%s: %s() did not return before its deadline%s; killed",
				    e->name, f->fn,
				    cancelling ? ", nor when asked to give up" : "");
		}
		if (rc) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL); /* out of step now */
			return fail(e, rc, "%s: reading the reply to %s(): %s; killed", e->name,
				    f->fn, shoal_strerror(rc));
		}
		sh_frame r;
		char why[256] = "";
		if (sh_frame_decode(e->in, len, &r, why, sizeof(why)) == 0 &&
		    r.op == SH_EXT_OP_CALL) {
			/* The extension calls one of our services while we wait. */
			if ((rc = serve_service(e, &r, deadline)) != 0) {
				fail_pending(e, SHOAL_ECRASHED);
				child_reap(e, true, NULL); /* out of step with us now */
				return rc;
			}
			continue;
		}
		shoal_future *to = NULL;
		for (shoal_future *p = e->pending; p && !why[0]; p = p->next)
			if (p->seq == r.seq && p->gen == e->starts && !p->replied)
				to = p;
		if (why[0] || r.op != SH_EXT_OP_RETURN || !to) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
			return fail(e, SHOAL_EPROTO, "%s: malformed reply to %s(): %s; killed",
				    e->name, f->fn, why[0] ? why : "wrong op or sequence");
		}
		/* Another call's reply is decoded into a vbuf of its own, which
		 * its wait hands over. */
		if (to != f && !to->kept && shoal_vbuf_create(&to->kept) != 0) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
			return fail(e, SHOAL_ENOMEM, "no memory to keep the reply to %s()", to->fn);
		}
		if (to != f)
			to->kept->store = e->store;
		char msg[SH_EXT_MSG_MAX];
		shoal_value *v = NULL;
		bool fatal;
		int status = decode_reply(e, &r, to == f ? out : to->kept, &v, deadline, msg,
					  sizeof(msg), &fatal);
		if (fatal) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
			return fail(e, status == SHOAL_EPROTO ? status : SHOAL_ECRASHED,
				    "%s: reply to %s(): %s; killed", e->name, to->fn,
				    status == SHOAL_EPROTO ? msg : shoal_strerror(status));
		}
		if (to == f && cancelling) {
			atomic_store_explicit(e->cancel, 0, memory_order_release);
			return fail(e, SHOAL_ETIMEDOUT,
				    "%s: %s() did not return before its deadline; it gave up when "
				    "asked",
				    e->name, f->fn);
		}
		if (to == f) {
			if (status)
				return fail(e, status, "%s", msg);
			*result = v;
			return 0;
		}
		to->replied = true;
		to->status = status;
		to->result = v;
		if (status && !(to->msg = shoal_alloc(strlen(msg) + 1))) {
			to->status = SHOAL_ENOMEM; /* its message is lost, not its code */
		} else if (status) {
			memcpy(to->msg, msg, strlen(msg) + 1);
		}
	}
}

int shoal_ext_call_async(shoal_ext *e, const char *fn, const shoal_value *args, int64_t deadline,
			 unsigned flags, shoal_future **out)
{
	if (!e || !out)
		return SHOAL_EINVAL;
	shoal_future *f = SH_NEW(shoal_future);
	if (!f)
		return SHOAL_ENOMEM;
	ext_enter(e);
	int rc = send_call(e, fn, args, deadline, flags, f);
	ext_leave(e);
	if (rc)
		SH_DELETE(f);
	else
		*out = f;
	return rc;
}

int shoal_future_wait(shoal_future *f, shoal_vbuf *out, const shoal_value **result,
		      int64_t deadline)
{
	if (!f || !out || !result)
		return SHOAL_EINVAL;
	shoal_ext *e = f->e;
	ext_enter(e);
	int rc = wait_call(f, out, result, deadline);
	unlink_future(e, f);
	future_free(f);
	sh_msg_trim(&e->in, &e->in_cap);
	ext_leave(e);
	return rc;
}

int shoal_ext_call(shoal_ext *e, const char *fn, const shoal_value *args, shoal_vbuf *out,
		   const shoal_value **result, int64_t deadline)
{
	return shoal_ext_call_ex(e, fn, args, out, result, deadline, 0);
}

int shoal_ext_call_ex(shoal_ext *e, const char *fn, const shoal_value *args, shoal_vbuf *out,
		      const shoal_value **result, int64_t deadline, unsigned flags)
{
	if (!e || !out || !result)
		return SHOAL_EINVAL;
	ext_enter(e);
	shoal_future f = {0}; /* a synchronous call's record lives here */
	int rc = send_call(e, fn, args, deadline, flags, &f);
	if (rc == 0) {
		rc = wait_call(&f, out, result, 0);
		unlink_future(e, &f);
		future_fini(&f);
	}
	sh_msg_trim(&e->in, &e->in_cap);
	ext_leave(e);
	return rc;
}

int shoal_ext_stop(shoal_ext *e)
{
	if (!e)
		return SHOAL_EINVAL;
	ext_enter(e);
	if (!e->dead && e->pid > 0) {
		/* Politely, then SIGTERM, then SIGKILL, 200 ms apart. */
		sh_frame f = {.op = SH_EXT_OP_STOP, .seq = ++e->seq};
		sh_wbuf_frame_begin(&e->out);
		msgpack_packer pk;
		sh_wbuf_packer(&e->out, &pk);
		msgpack_pack_array(&pk, 0);
		if (sh_wbuf_frame_end(&e->out, &f) == 0)
			sh_msg_write(&e->req, e->out.p, e->out.len, shoal_deadline_in(200000000));
		for (int step = 0; step < 3; step++) {
			struct pollfd p = {.fd = e->pidfd, .events = POLLIN};
			if (poll(&p, 1, 200) == 1)
				break;
			kill(e->pid, step == 0 ? SIGTERM : SIGKILL);
		}
	}
	child_reap(e, false, NULL);
	/* Futures not waited for are the caller's leak to fix: drop them. */
	while (e->pending) {
		shoal_future *f = e->pending;
		e->pending = f->next;
		future_free(f);
	}
	ext_leave(e);
	ext_free(e);
	return 0;
}

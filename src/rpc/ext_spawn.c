/* Starting an extension's child: the runner (shoal-ext, or the one
 * configured: a python3 for a Python extension) with its argv, its
 * environment and its descriptors (the socket of the handshake, the rings,
 * the doorbell), in a cgroup of its own where one can be made (its memory
 * limited to mem_max, its whole tree ending with it: sandbox.c), its
 * output in the log; then the ready handshake, until the child says it
 * loaded or dies. */
#include "base/proc.h"
#include "rpc/ext_host.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

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
	struct pollfd pf[3] = {{.fd = p->fd[0], .events = POLLIN},
			       {.fd = p->fd[1], .events = POLLIN},
			       {.fd = p->stop_fd, .events = POLLIN}};
	/* Once stopped, a bounded drain: a process that escaped the tree and
	 * keeps writing does not hold the host's stop. Until then it sleeps
	 * until output comes or the stop rings. */
	bool stopped = false;
	for (int open = 2, after = 0; open > 0 && after < 20;) {
		int n = poll(pf, stopped ? 2 : 3, stopped ? 50 : -1);
		if (n > 0 && !stopped && pf[2].revents) {
			stopped = true; /* (output that came with it: the next poll) */
			continue;
		}
		if (stopped)
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
	p->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (p->stop_fd < 0) {
		int rc = shoal_errno();
		close(out_fd);
		close(err_fd);
		SH_DELETE(p);
		return rc;
	}
	snprintf(p->name, sizeof(p->name), "%s", e->name);
	int rc = -pthread_create(&p->thread, NULL, pump_main, p);
	if (rc) {
		close(out_fd);
		close(err_fd);
		close(p->stop_fd);
		SH_DELETE(p);
		return rc;
	}
	e->pump = p;
	return 0;
}

void sh_ext_pump_stop(shoal_ext *e)
{
	if (!e->pump)
		return;
	uint64_t one = 1;
	while (write(e->pump->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(e->pump->thread, NULL);
	close(e->pump->stop_fd);
	SH_DELETE(e->pump);
	e->pump = NULL;
}

int sh_ext_spawn(shoal_ext *e)
{
	int sv[2] = {-1, -1}, rfd = -1, rc;
	size_t one;
	e->dead = true;
	if ((rc = sh_ring_bytes(SH_EXT_RING_CAP, &one)) != 0)
		return sh_err_set(e, rc, "ring size");
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
	if (sh_sb_cgroup_make(e, why, sizeof(why)) != 0) {
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
		sh_err_set(e, rc, "%s: pipes for its output: %s", e->name, strerror(errno));
		for (int i = 0; i < 2; i++)
			if (outp[i] >= 0)
				close(outp[i]);
		goto out;
	}
	sh_proc_opts o;
	sh_proc_opts_init(&o, argv);
	o.env = e->env;
	o.cwd = e->cwd;
	if (pumped) {
		o.stdio[1] = outp[1];
		o.stdio[2] = errp[1];
	}
	/* nor our stdin, from basic on: it could read what is typed to us */
	if (e->cfg.sandbox != SHOAL_SANDBOX_NONE)
		o.stdio[0] = SH_PROC_DEVNULL;
	o.from[0] = sv[1], o.to[0] = SH_EXT_FD_SOCK;
	o.from[1] = rfd, o.to[1] = SH_EXT_FD_RINGS;
	o.from[2] = e->efd_w, o.to[2] = SH_EXT_FD_EFD;
	o.nfds = 3;
	sh_proc child;
	rc = sh_proc_spawn(&child, &o, why, sizeof(why));
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
		sh_err_set(e, rc, "%s: %s", e->name, why);
		goto out;
	}
	e->pid = child.pid;
	e->pidfd = child.pidfd;
	if (pumped && (rc = pump_start(e, outp[0], errp[0])) != 0) {
		sh_err_set(e, rc, "%s: a thread for its output: %s", e->name, shoal_strerror(rc));
		goto out;
	}
	if (e->pidfd < 0) {
		rc = SHOAL_ENOSYS;
		sh_err_set(e, rc, "%s: no pidfd for its process (Linux 5.3 or later is needed)",
			   e->name);
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
		if (!sh_err_get(e)[0])
			sh_err_set(e, rc, "%s: starting: %s", e->name, shoal_strerror(rc));
		sh_ext_reap(e, true, NULL);
	}
	return rc;
}

/* Waits for the ready message: the init's result, or the child's death. */
int sh_ext_await_ready(shoal_ext *e)
{
	int64_t ns = e->cfg.start_timeout_ns ? e->cfg.start_timeout_ns : 5000000000LL;
	int64_t deadline = shoal_deadline_in(ns);
	sh_ext_ready m;
	for (;;) {
		struct pollfd p[2] = {{.fd = e->sock, .events = POLLIN},
				      {.fd = e->pidfd, .events = POLLIN}};
		int64_t left = deadline - shoal_now_ns();
		if (left <= 0) {
			sh_ext_reap(e, true, NULL);
			return sh_err_set(e, SHOAL_ETIMEDOUT, "%s: not ready after %" PRId64 " ms",
					  e->name, ns / 1000000);
		}
		int n = poll(p, 2, (int)((left + 999999) / 1000000));
		if (n < 0 && errno != EINTR)
			return sh_err_set(e, shoal_errno(), "%s: poll: %s", e->name,
					  strerror(errno));
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
				sh_ext_reap(e, true, NULL);
				return sh_err_set(e, m.status, "%s", m.msg);
			}
			if (rc == 0 && got == 0)
				p[1].revents = POLLIN; /* closed: it is gone or going */
			else if (rc != SHOAL_EAGAIN) {
				sh_ext_reap(e, true, NULL);
				return sh_err_set(e, SHOAL_EPROTO, "%s: malformed ready message",
						  e->name);
			}
		}
		if (n > 0 && (p[1].revents || (p[0].revents & (POLLHUP | POLLERR)))) {
			int st;
			char how[96];
			sh_ext_reap(e, false, &st);
			sh_ext_describe(st, how, sizeof(how));
			return sh_err_set(e, SHOAL_ECRASHED, "%s: %s while loading", e->name, how);
		}
	}
}

/* The child's environment: ours (sandbox none) or an allow-list (basic),
 * then the config's entries and library path. Strict writes only its own
 * private directories (sandbox.h): its TMPDIR is /var/tmp, one of them,
 * unless the config says otherwise. */
int sh_ext_build_env(shoal_ext *e)
{
	static const char *const allow[] = {"PATH", "HOME",   "LANG",	   "LC_ALL",
					    "TZ",   "TMPDIR", "SHOAL_LOG", NULL};
	size_t n = 0, cap = 0;
	for (char **p = environ; *p; p++)
		cap++;
	for (char *const *p = e->cfg.env; p && *p; p++)
		cap++;
	cap += 4; /* TMPDIR, LD_LIBRARY_PATH, SHOAL_EXT_STORE_GRANT (sh_ext_env_add) */
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
		if (keep && !(e->env[n++] = sh_ext_dup(*p)))
			return SHOAL_ENOMEM;
	}
	for (char *const *p = e->cfg.env; p && *p; p++)
		if (!(e->env[n++] = sh_ext_dup(*p)))
			return SHOAL_ENOMEM;
	if (strict && !own_tmp && !(e->env[n++] = sh_ext_dup("TMPDIR=/var/tmp")))
		return SHOAL_ENOMEM;
	if (e->libpath) {
		size_t l = strlen(e->libpath) + 20;
		if (!(e->env[n] = shoal_alloc(l)))
			return SHOAL_ENOMEM;
		snprintf(e->env[n], l, "LD_LIBRARY_PATH=%s", e->libpath);
		/* sized for sh_ext_free_str */
		char *exact = sh_ext_dup(e->env[n]);
		shoal_free(e->env[n], l);
		if (!(e->env[n++] = exact))
			return SHOAL_ENOMEM;
	}
	e->nenv = cap; /* the array's size for the free; unused slots are NULL */
	return 0;
}

/* One more entry in the child's environment (sh_ext_build_env left room). */
int sh_ext_env_add(shoal_ext *e, const char *entry)
{
	size_t n = 0;
	while (n < e->nenv && e->env[n])
		n++;
	if (n == e->nenv)
		return SHOAL_ENOMEM;
	return (e->env[n] = sh_ext_dup(entry)) ? 0 : SHOAL_ENOMEM;
}

/* The host side of extensions: starting shoal-ext with its descriptors,
 * the ready handshake, calls over the rings, and what happens when the
 * child dies or a call passes its deadline. A call sleeps on an eventfd
 * the child rings, polled together with a pidfd of the child, so a crash
 * fails the call the moment the child is gone, with its signal or exit
 * status in the message. */
#include "ring/ring.h"
#include "rpc/ext_proto.h"
#include "ring/msg.h"
#include "shm/shm.h"

#include <shoal/ext.h>

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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifndef SHOAL_EXT_RUNNER_DEFAULT
#define SHOAL_EXT_RUNNER_DEFAULT "/usr/local/bin/shoal-ext"
#endif

struct shoal_ext {
	shoal_ext_config cfg;
	char *path, *name, *runner, *cwd, *libpath, *store_path; /* owned copies */
	shoal_client *store;					 /* shared payloads go through it */
	char **env;
	size_t nenv;
	pid_t pid;
	int pidfd, sock, efd;
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
	pthread_mutex_t lock; /* guards who is inside: owner, holder, depth */
	pthread_cond_t turn;
	pthread_t owner;     /* the thread inside (when depth > 0) */
	shoal_fiber *holder; /* the fiber inside, when a fiber is */
	uint32_t depth;	     /* how deep it is inside (nested calls) */
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

/* Tears the current child down: kill, reap, close everything of it. */
static void child_reap(shoal_ext *e, bool kill_it, int *status)
{
	int st = 0;
	if (e->pid > 0) {
		if (kill_it)
			kill(e->pid, SIGKILL);
		while (waitpid(e->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (status)
		*status = st;
	if (e->rings)
		sh_shm_unmap(e->rings, e->ring_bytes);
	if (e->pidfd >= 0)
		close(e->pidfd);
	if (e->sock >= 0)
		close(e->sock);
	if (e->efd >= 0)
		close(e->efd);
	e->rings = NULL;
	e->cancel = NULL;
	e->pidfd = e->sock = e->efd = -1;
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
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0 ||
	    (e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = shoal_errno();
		goto out;
	}
	if ((rc = sh_memfd_create("shoal-ext-rings", e->ring_bytes, false, &rfd)) != 0 ||
	    (rc = sh_shm_map(rfd, e->ring_bytes, true, &e->rings)) != 0)
		goto out;
	sh_ring_format(e->rings, one);
	sh_ring_format((char *)e->rings + one, one);
	sh_ring_attach(&e->req, e->rings, one, true);
	sh_ring_attach(&e->rep, (char *)e->rings + one, one, false);
	e->cancel = (_Atomic uint32_t *)((char *)e->rings + 2 * one);
	e->rep.wait_efd = e->efd;
	e->rep.spin_ns = 50000; /* a call round trip is a few us when both spin */

	char mem[32], cpu[32], files[32];
	snprintf(mem, sizeof(mem), "%" PRIu64, e->cfg.mem_limit);
	snprintf(cpu, sizeof(cpu), "%u", e->cfg.cpu_limit_s);
	snprintf(files, sizeof(files), "%u", e->cfg.max_files);
	char *argv[] = {e->runner,
			"--so",
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
			e->store_path ? "--store" : NULL,
			e->store_path,
			NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv[1], SH_EXT_FD_SOCK);
	posix_spawn_file_actions_adddup2(&fa, rfd, SH_EXT_FD_RINGS);
	posix_spawn_file_actions_adddup2(&fa, e->efd, SH_EXT_FD_EFD);
	if (e->cwd)
		posix_spawn_file_actions_addchdir_np(&fa, e->cwd);
	rc = -posix_spawn(&e->pid, e->runner, &fa, NULL, argv, e->env);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		e->pid = 0;
		fail(e, rc, "%s: cannot run %s: %s", e->name, e->runner, shoal_strerror(rc));
		goto out;
	}
	e->pidfd = (int)syscall(SYS_pidfd_open, e->pid, 0);
	if (e->pidfd < 0) {
		rc = shoal_errno();
		goto out;
	}
	e->rep.peer_fd = e->pidfd;
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
				child_reap(e, false, NULL);
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
	if (e->in)
		shoal_free(e->in, e->in_cap);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->turn);
	SH_DELETE(e);
}

/* The child's environment: ours (sandbox none) or an allow-list (basic),
 * then the config's entries and library path. */
static int build_env(shoal_ext *e)
{
	static const char *const allow[] = {"PATH", "HOME",   "LANG",	   "LC_ALL",
					    "TZ",   "TMPDIR", "SHOAL_LOG", NULL};
	size_t n = 0, cap = 0;
	for (char **p = environ; *p; p++)
		cap++;
	for (char *const *p = e->cfg.env; p && *p; p++)
		cap++;
	cap += 2;
	e->env = shoal_calloc(cap + 1, sizeof(char *));
	if (!e->env)
		return SHOAL_ENOMEM;
	for (char **p = environ; *p; p++) {
		bool keep = e->cfg.sandbox == SHOAL_SANDBOX_NONE;
		for (size_t i = 0; !keep && allow[i]; i++) {
			size_t l = strlen(allow[i]);
			keep = strncmp(*p, allow[i], l) == 0 && (*p)[l] == '=';
		}
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

int shoal_ext_start(shoal_ext **out, const shoal_ext_config *cfg)
{
	if (!out || !cfg || !cfg->path)
		return SHOAL_EINVAL;
	shoal_ext *e = SH_NEW(shoal_ext);
	if (!e)
		return SHOAL_ENOMEM;
	e->cfg = *cfg;
	e->pidfd = e->sock = e->efd = -1;
	e->dead = true;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->turn, NULL);
	sh_wbuf_init(&e->out);
	const char *base = strrchr(cfg->path, '/');
	const char *runner = cfg->runner ? cfg->runner : getenv("SHOAL_EXT_RUNNER");
	/* Absolute paths: the child may start in another directory (cwd). */
	char abs_so[PATH_MAX], abs_run[PATH_MAX];
	runner = runner && *runner ? runner : SHOAL_EXT_RUNNER_DEFAULT;
	e->path = dup_str(realpath(cfg->path, abs_so) ? abs_so : cfg->path);
	e->name = dup_str(cfg->name ? cfg->name : base ? base + 1 : cfg->path);
	e->runner = dup_str(realpath(runner, abs_run) ? abs_run : runner);
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
	child_reap(e, false, &st);
	describe(st, how, sizeof(how));
	return fail(e, SHOAL_ECRASHED, "%s: %s in %s()", e->name, how, fn);
}

/* Runs the service call in e->in and sends its return. Nonzero only when
 * the extension must go (the rings failed). */
static int serve_service(shoal_ext *e, const sh_frame *f, size_t len)
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
	sh_mp_init(&m, e->in + SH_FRAME_HDR, len - SH_FRAME_HDR);
	if (status == 0 && (sh_mp_array(&m, &n) || n != 2 || sh_mp_str(&m, &method, &ml) || !ml)) {
		status = SHOAL_EBADMSG;
		snprintf(msg, sizeof(msg), "expected a call [method, args]");
	}
	/* Copied out: a nested call reuses e->in. */
	char mname[256];
	snprintf(mname, sizeof(mname), "%.*s", (int)(ml < 255 ? ml : 255), method);
	if (status == 0 && (status = sh_value_decode(&m, vin, &args, msg, sizeof(msg))) == 0 &&
	    sh_mp_done(&m) != 0) {
		status = SHOAL_EBADMSG;
		snprintf(msg, sizeof(msg), "bytes after the arguments");
	}
	shoal_service_fn fn = NULL;
	void *self = NULL;
	if (status == 0 && !service_find(mname, (uint32_t)strlen(mname), &fn, &self)) {
		status = SHOAL_ENOENT;
		snprintf(msg, sizeof(msg), "the host has no service method %s", mname);
	}
	if (status == 0) {
		status = fn(self, args, vout, &result, msg, sizeof(msg));
		if (status > 0)
			status = SHOAL_EIO;
		if (status == 0 && shared && result)
			status = sh_value_share(vout, result, msg, sizeof(msg));
		if (status && !msg[0])
			snprintf(msg, sizeof(msg), "%s: %s", mname, shoal_strerror(status));
	}
	sh_wbuf_frame_begin(&e->out);
	msgpack_packer pk;
	sh_wbuf_packer(&e->out, &pk);
	msgpack_pack_array(&pk, 1);
	shoal_value nil = {.type = SHOAL_V_NIL};
	if (status == 0)
		sh_value_pack(&pk, result ? result : &nil, shared ? e->store : NULL);
	else
		sh_mp_pack_cstr(&pk, msg);
	sh_frame r = {.op = SH_EXT_OP_RETURN,
		      .seq = f->seq,
		      .status = status,
		      .flags = shared ? SH_FRAME_SHARED : 0};
	int rc = sh_wbuf_frame_end(&e->out, &r);
	if (rc == 0 && e->out.len > SH_MSG_MAX) {
		sh_wbuf_frame_begin(&e->out);
		msgpack_pack_array(&pk, 1);
		sh_mp_pack_cstr(&pk, "the service's result is larger than a message can be");
		r.status = SHOAL_EMSGSIZE;
		rc = sh_wbuf_frame_end(&e->out, &r);
	}
	if (rc == 0)
		rc = sh_msg_write(&e->req, e->out.p, e->out.len, SHOAL_FOREVER);
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
	shoal_vbuf *hold;     /* shared arguments put into the store for this call */
	unsigned char *reply; /* read while waiting for another call */
	size_t reply_len;
	int failed; /* the child went with this call in flight: the code */
	char fn[64];
};

/* What a call record owns (not the record). */
static void future_fini(shoal_future *f)
{
	if (f->reply)
		shoal_free(f->reply, f->reply_len);
	shoal_vbuf_free(f->hold);
	f->reply = NULL;
	f->hold = NULL;
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
		if (!f->failed && !f->reply)
			f->failed = code;
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
	sh_wbuf_frame_begin(&e->out);
	msgpack_packer pk;
	sh_wbuf_packer(&e->out, &pk);
	msgpack_pack_array(&pk, 2);
	sh_mp_pack_cstr(&pk, fn);
	shoal_value nil = {.type = SHOAL_V_NIL};
	sh_value_pack(&pk, args ? args : &nil, shared ? e->store : NULL);
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
	rc = sh_msg_write(&e->req, e->out.p, e->out.len, deadline);
	if (e->out.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&e->out);
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

/* Decodes a RETURN frame (len bytes at buf) of call f into out. */
static int take_reply(shoal_ext *e, shoal_future *f, const unsigned char *buf, size_t len,
		      shoal_vbuf *out, const shoal_value **result)
{
	sh_frame r;
	char why[256] = "";
	sh_mp m;
	uint32_t n;
	sh_frame_decode(buf, len, &r, why, sizeof(why)); /* checked when it was read */
	sh_mp_init(&m, buf + SH_FRAME_HDR, r.body_len);
	if (r.status != 0) {
		const char *msg = "";
		uint32_t ml = 0;
		if (sh_mp_array(&m, &n) || n != 1 || sh_mp_str(&m, &msg, &ml))
			msg = "(no message)", ml = 12;
		return fail(e, r.status, "%.*s", (int)ml, msg);
	}
	shoal_value *v;
	int rc = 0;
	if (sh_mp_array(&m, &n) || n != 1 ||
	    (rc = sh_value_decode(&m, out, &v, why, sizeof(why))) != 0 || sh_mp_done(&m) != 0) {
		rc = rc == SHOAL_ENOMEM ? rc : SHOAL_EPROTO;
		if (rc == SHOAL_EPROTO) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
		}
		return fail(e, rc, "%s: result of %s(): %s", e->name, f->fn,
			    why[0] ? why : "malformed");
	}
	*result = v;
	return 0;
}

/* The call the extension is running now: the oldest without a reply. */
static shoal_future *oldest_unanswered(shoal_ext *e)
{
	for (shoal_future *p = e->pending; p; p = p->next)
		if (!p->reply && !p->failed)
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
		if (f->reply)
			return take_reply(e, f, f->reply, f->reply_len, out, result);
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
				if (!p->reply && !p->failed) {
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
			if ((rc = serve_service(e, &r, len)) != 0) {
				fail_pending(e, SHOAL_ECRASHED);
				child_reap(e, true, NULL); /* out of step with us now */
				return rc;
			}
			continue;
		}
		shoal_future *to = NULL;
		for (shoal_future *p = e->pending; p && !why[0]; p = p->next)
			if (p->seq == r.seq && p->gen == e->starts)
				to = p;
		if (why[0] || r.op != SH_EXT_OP_RETURN || !to) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
			return fail(e, SHOAL_EPROTO, "%s: malformed reply to %s(): %s; killed",
				    e->name, f->fn, why[0] ? why : "wrong op or sequence");
		}
		if (to == f && cancelling) {
			atomic_store_explicit(e->cancel, 0, memory_order_release);
			return fail(e, SHOAL_ETIMEDOUT,
				    "%s: %s() did not return before its deadline; it gave up when "
				    "asked",
				    e->name, f->fn);
		}
		if (to == f)
			return take_reply(e, f, e->in, len, out, result);
		/* Another call's reply: kept for its wait. */
		if (!(to->reply = shoal_alloc(len))) {
			fail_pending(e, SHOAL_ECRASHED);
			child_reap(e, true, NULL);
			return fail(e, SHOAL_ENOMEM, "no memory to keep a %zu-byte reply", len);
		}
		memcpy(to->reply, e->in, len);
		to->reply_len = len;
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

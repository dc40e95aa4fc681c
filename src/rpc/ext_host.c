/* The extension handle (shoal_ext): opening one (the config copied, the
 * child started by ext_spawn.c), its last error, pid and starts, taking
 * turns inside it (one thread or fiber at a time; the same caller may come
 * back in), tearing a child down (kill, reap, its cgroup and descriptors)
 * and stopping it. Calls are ext_call.c's, the host's services are
 * services.c's, the host's side of the sandbox is sandbox.c's. */
#include "fiber/waitq.h"
#include "rpc/ext_host.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void shoal_ext_config_init(shoal_ext_config *c)
{
	memset(c, 0, sizeof(*c));
}

const char *shoal_ext_error(const shoal_ext *e)
{
	return sh_err_get(e);
}

pid_t shoal_ext_pid(const shoal_ext *e)
{
	return e && !e->dead ? e->pid : 0;
}

uint32_t shoal_ext_starts(const shoal_ext *e)
{
	return e ? e->starts : 0;
}

char *sh_ext_dup(const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	char *p = shoal_alloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

void sh_ext_free_str(char *s)
{
	if (s)
		shoal_free(s, strlen(s) + 1);
}

/* Describes how a child ended: "killed by SIGSEGV", "exited with status 3". */
void sh_ext_describe(int st, char *buf, size_t len)
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
void sh_ext_reap(shoal_ext *e, bool kill_it, int *status)
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
			sh_sb_cgroup_kill(e);
		}
		while (waitpid(e->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (status)
		*status = st;
	sh_sb_cgroup_kill(e); /* what it left behind */
	sh_sb_cgroup_done(e);
	sh_ext_pump_stop(e); /* after its tree: the last lines of all of it are in */
	if (e->rings)
		sh_shm_unmap(e->rings, e->ring_bytes);
	/* a fiber's wait on the doorbell registered it with our poller */
	int fds[4] = {e->pidfd, e->sock, e->efd, e->efd_w};
	for (int i = 0; i < 4; i++)
		sh_fd_close(fds[i]);
	e->rings = NULL;
	e->cancel = NULL;
	e->pidfd = e->sock = e->efd = e->efd_w = -1;
	e->pid = 0;
	e->dead = true;
}

static void ext_free(shoal_ext *e)
{
	sh_ext_free_str(e->path);
	sh_ext_free_str(e->name);
	sh_ext_free_str(e->runner);
	for (size_t i = 0; e->rargs[i]; i++)
		sh_ext_free_str(e->rargs[i]);
	sh_ext_free_str(e->cwd);
	sh_ext_free_str(e->libpath);
	sh_ext_free_str(e->store_path);
	if (e->store)
		shoal_disconnect(e->store);
	if (e->env) {
		for (size_t i = 0; i < e->nenv; i++)
			sh_ext_free_str(e->env[i]);
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
	e->path = sh_ext_dup(realpath(cfg->path, abs_so) ? abs_so : cfg->path);
	e->name = sh_ext_dup(cfg->name ? cfg->name : base ? base + 1 : cfg->path);
	/* an absolute path as given: a venv's python is a symlink whose own
	 * place says which venv it runs */
	e->runner = sh_ext_dup(runner[0] == '/' || !realpath(runner, abs_run) ? runner : abs_run);
	size_t nr = 0;
	for (; cfg->runner_args && cfg->runner_args[nr]; nr++)
		if (nr == SHOAL_EXT_RUNNER_ARGS_MAX ||
		    !(e->rargs[nr] = sh_ext_dup(cfg->runner_args[nr]))) {
			ext_free(e);
			return nr == SHOAL_EXT_RUNNER_ARGS_MAX ? SHOAL_EINVAL : SHOAL_ENOMEM;
		}
	e->cwd = sh_ext_dup(cfg->cwd);
	e->libpath = sh_ext_dup(cfg->library_path);
	e->store_path = sh_ext_dup(cfg->store_socket);
	e->cfg.env = NULL;
	int rc = (!e->path || !e->name || !e->runner || (cfg->cwd && !e->cwd) ||
		  (cfg->library_path && !e->libpath))
			 ? SHOAL_ENOMEM
			 : 0;
	e->cfg.env = cfg->env;
	if (rc == 0)
		rc = sh_ext_build_env(e);
	e->cfg.env = NULL;
	if (rc) {
		ext_free(e);
		return rc;
	}
	*out = e;
	if (e->store_path && (rc = shoal_connect(&e->store, e->store_path)) != 0)
		return sh_err_set(e, rc, "%s: no store at %s for shared payloads: %s", e->name,
				  e->store_path, shoal_strerror(rc));
	/* A strict extension's runner restricts its own store connection to
	 * what this one holds (shoal_restrict): the token that names this
	 * connection goes in its environment, which only it (and root) reads. */
	uint64_t grant = e->cfg.store_grant;
	char entry[64];
	if (e->store && e->cfg.sandbox == SHOAL_SANDBOX_STRICT &&
	    ((!grant && (rc = shoal_claim(e->store, &grant)) != 0) ||
	     (snprintf(entry, sizeof(entry), "SHOAL_EXT_STORE_GRANT=%016" PRIx64, grant),
	      (rc = sh_ext_env_add(e, entry)) != 0)))
		return sh_err_set(e, rc, "%s: a grant of the store for it: %s", e->name,
				  shoal_strerror(rc));
	rc = sh_ext_spawn(e);
	if (rc == 0)
		rc = sh_ext_await_ready(e);
	return rc;
}

/* A fiber waiting for its turn inside an extension (sh_ext_enter). */
struct sh_ext_waiter {
	shoal_chan *wake; /* closed by the caller that leaves: from any thread,
			   * which never blocks it */
	sh_ext_waiter *next;
};

/* A lost wake-up (the close of a fiber's channel from another thread
 * found no memory) is noticed after this long: the waiter looks again. */
#define SH_EXT_TURN_GUARD_NS 1000000000LL

/* A fiber's wait for its turn, called and returning with e->lock held:
 * it sleeps on a channel of its own (so the fiber inside, on the same
 * thread perhaps, runs meanwhile) until the caller that leaves closes it.
 * first: it was woken and lost the turn to another, so it is next again. */
static void turn_wait(shoal_ext *e, bool first)
{
	sh_ext_waiter w = {0};
	if (shoal_chan_create(&w.wake, 1, 1) != 0) {
		/* no memory for a channel: a short sleep, then look again */
		pthread_mutex_unlock(&e->lock);
		shoal_sleep_until(shoal_deadline_in(50000));
		pthread_mutex_lock(&e->lock);
		return;
	}
	if (first || !e->waiters) {
		w.next = e->waiters;
		e->waiters = &w;
	} else {
		sh_ext_waiter *t = e->waiters;
		while (t->next)
			t = t->next;
		t->next = &w;
	}
	pthread_mutex_unlock(&e->lock);
	char c;
	shoal_chan_recv(w.wake, &c, shoal_deadline_in(SH_EXT_TURN_GUARD_NS));
	pthread_mutex_lock(&e->lock);
	/* not woken (the guard, a cancel): still in the queue */
	for (sh_ext_waiter **p = &e->waiters; *p; p = &(*p)->next)
		if (*p == &w) {
			*p = w.next;
			break;
		}
	pthread_mutex_unlock(&e->lock);
	/* (a close still in our inbox is taken first) */
	shoal_chan_destroy(w.wake);
	pthread_mutex_lock(&e->lock);
}

/* Entering an extension: one caller at a time, a thread or one fiber of
 * a thread; the same caller may come back in (a service it serves calls
 * again). The mutex guards only who is inside: nobody holds it across a
 * call, so a fiber asleep in a call blocks nothing but its turn. A waiting
 * thread sleeps on the condition, a waiting fiber on its channel
 * (turn_wait), so that the fiber inside, on the same thread, can finish;
 * the caller that leaves wakes the threads and the first fiber. */
void sh_ext_enter(shoal_ext *e)
{
	shoal_fiber *me = shoal_sched_current() ? shoal_self() : NULL;
	pthread_t self = pthread_self();
	bool woken = false;
	pthread_mutex_lock(&e->lock);
	while (e->depth && !(pthread_equal(e->owner, self) && e->holder == me)) {
		if (me) {
			turn_wait(e, woken);
			woken = true;
		} else {
			pthread_cond_wait(&e->turn, &e->lock);
		}
	}
	e->owner = self;
	e->holder = me;
	e->depth++;
	pthread_mutex_unlock(&e->lock);
}

void sh_ext_leave(shoal_ext *e)
{
	pthread_mutex_lock(&e->lock);
	if (--e->depth == 0) {
		e->holder = NULL;
		pthread_cond_broadcast(&e->turn);
		sh_ext_waiter *w = e->waiters;
		if (w) {
			e->waiters = w->next;
			shoal_chan_close(w->wake);
		}
	}
	pthread_mutex_unlock(&e->lock);
}

int shoal_ext_stop(shoal_ext *e)
{
	if (!e)
		return SHOAL_EINVAL;
	sh_ext_enter(e);
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
	sh_ext_reap(e, false, NULL);
	sh_ext_drop_pending(e);
	sh_ext_leave(e);
	ext_free(e);
	return 0;
}

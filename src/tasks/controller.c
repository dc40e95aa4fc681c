/* The task controller: a thread with a fiber scheduler, as the store's
 * server is. Clients and engines connect on this host as links (rings) or
 * from others over TCP; their connections (conn.c) read and write
 * batches. Tasks are routed by the scheme as they arrive, at most a window
 * of them on each engine, batched per engine, and their results batched
 * per client; dependencies (after, follow) and retries are sched.c's, the
 * bytes of large tasks relay.c's. Here: the books of tasks and the one way
 * a task leaves them (sh_task_end), deadlines, what the two listeners
 * (net/listener.h: the unix socket, TCP) take, starting and stopping, and
 * the API. */
#include "base/proc.h"
#include "tasks/controller.h"
#include "tasks/controller_impl.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- the books ---- */

static void task_free(tk_task *t)
{
	if (t->frame)
		sh_ctl_frame_unref(t->frame);
	else if (t->raw)
		shoal_free(t->raw, t->rawlen);
	if (t->follow)
		shoal_free(t->follow, t->nfollow * sizeof(*t->follow));
	SH_DELETE(t);
}

/* Every task leaves through here: once when it ends (why), and again each
 * time something that held it lets go of it (sh_task_let_go: a queue it
 * was in, a dependency it waited for, a writer sending its bytes). The
 * first time takes it off the books; it is freed once nothing holds it,
 * here and nowhere else. */
void sh_task_end(shoal_controller *ctl, tk_task *t, sh_task_why why)
{
	if (!t->over) {
		t->over = true;
		t->end = (uint8_t)why;
		if (t->deadline)
			ctl->with_deadline--;
		sh_map_del(&ctl->tasks, t->tid);
		if (t->on)
			sh_ctl_take_back(ctl, t);
		else if (t->queued) /* pending */
			atomic_fetch_sub_explicit(&ctl->n_queued, 1, memory_order_relaxed);
	}
	if (!t->queued && !t->unmet && !t->writing)
		task_free(t);
}

/* Something that held t let go of it: if t has ended, it may go now. */
void sh_task_let_go(shoal_controller *ctl, tk_task *t)
{
	if (t->over)
		sh_task_end(ctl, t, (sh_task_why)t->end);
}

static bool overdue(const tk_task *t, const void *now)
{
	return t->deadline && *(const int64_t *)now > t->deadline;
}

/* Fails what passed its deadline; trims the spares. A timer, not a wait
 * for an event: each 5 ms it sweeps the tasks that have a deadline (they
 * are in no order of deadlines to wait for the next one). */
static void *deadline_main(void *arg)
{
	shoal_controller *ctl = arg;
	while (shoal_sleep_until(shoal_deadline_in(5000000)) == SHOAL_ETIMEDOUT) {
		sh_ctl_spares_trim(ctl);
		if (!ctl->with_deadline)
			continue;
		int64_t now = shoal_now_ns();
		tk_sweep w;
		sh_ctl_sweep_begin(&w, ctl, overdue, &now);
		for (tk_task *t; (t = sh_ctl_sweep_next(&w)) != NULL;)
			sh_ctl_fail(ctl, t, SH_TASK_DEADLINE, SHOAL_ETIMEDOUT,
				    "task %llu did not finish before its deadline",
				    (unsigned long long)t->cid);
	}
	return NULL;
}

/* ---- accepting ---- */

/* Peers on other hosts: each proves it knows the secret first. Strangers
 * may not crowd out anyone: at most TCP_HELLOS of them at once in their
 * handshake (5 s each at most), TCP_HELLOS_PER_SOURCE from one address, a
 * silent one giving its place up to a newcomer when all are taken
 * (sh_hellos), and TCP takes no connection that would leave fewer than
 * LOCAL_SPARE descriptors' worth of local ones. */
#define TCP_HELLOS 64
#define TCP_HELLOS_PER_SOURCE 16
#define FDS_PER_CONN 7 /* 6 before the link's connector doorbell (efd_conn) */
#define LOCAL_SPARE 32

static bool tcp_room(void *arg, char *why, size_t whylen)
{
	shoal_controller *ctl = arg;
	uint64_t spare = ctl->conn_budget / 4 < LOCAL_SPARE ? ctl->conn_budget / 4 : LOCAL_SPARE;
	if ((uint64_t)ctl->nconns + spare < ctl->conn_budget)
		return true;
	snprintf(why, whylen, "out of descriptors");
	return false;
}

/* A connection the listener l took: its fiber (conn.c) learns whether it
 * is an engine or a client. Nonzero leaves a->fd to the listener. */
static int take(shoal_controller *ctl, sh_listener *l, const sh_accepted *a)
{
	bool tcp = l == &ctl->remote;
	tk_conn *h = SH_NEW(tk_conn);
	if (!h)
		return SHOAL_ENOMEM;
	h->ctl = ctl;
	h->pid = a->pid;
	h->tcp = tcp ? a->fd : -1;
	h->hello = a->hello;
	sh_link_init(&h->l, tcp ? -1 : a->fd);
	snprintf(h->peer, sizeof(h->peer), "%s", a->who);
	int rc = sh_listener_spawn(l, sh_ctl_conn_main, h, tcp ? "tasks-tcp" : "tasks-conn");
	if (rc) {
		SH_DELETE(h);
		return rc;
	}
	ctl->nconns++;
	return 0;
}

static int take_local(void *arg, sh_accepted *a, char *why, size_t whylen)
{
	(void)why, (void)whylen; /* nothing to log, as for a fiber that did not start */
	shoal_controller *ctl = arg;
	return take(ctl, &ctl->local, a);
}

static int take_tcp(void *arg, sh_accepted *a, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	shoal_controller *ctl = arg;
	return take(ctl, &ctl->remote, a);
}

/* ---- the thread ---- */

static int controller_start(void *arg)
{
	shoal_controller *ctl = arg;
	sh_listener_opts local = {
		.area = "tasks",
		.lsock = ctl->lsock,
		.group = (gid_t)-1,
		.take = take_local,
		.arg = ctl,
		.fiber_name = "tasks-accept",
	};
	sh_listener_opts remote = {
		.area = "tasks",
		.lsock = ctl->tcp_lsock,
		.tcp = true,
		.hellos = TCP_HELLOS,
		.hellos_per_source = TCP_HELLOS_PER_SOURCE,
		.room = tcp_room,
		.take = take_tcp,
		.arg = ctl,
		.fiber_name = "tasks-tcp-accept",
	};
	int rc;
	if ((rc = sh_listener_start(&ctl->local, &local)) ||
	    (rc = shoal_spawn(&ctl->deadlines, deadline_main, ctl,
			      &(shoal_fiber_opts){.name = "tasks-deadlines"})) ||
	    (ctl->tcp_lsock >= 0 && (rc = sh_listener_start(&ctl->remote, &remote))))
		sh_error("tasks", "fibers: %s", shoal_strerror(rc));
	return rc;
}

static void controller_stop(void *arg)
{
	shoal_controller *ctl = arg;
	sh_listener_close(&ctl->local);
	sh_listener_close(&ctl->remote);
	if (ctl->deadlines) {
		shoal_cancel(ctl->deadlines);
		shoal_join(ctl->deadlines, NULL);
		ctl->deadlines = NULL;
	}
	/* Closing a connection's rings ends its fiber, which frees it. */
	for (tk_engine *e = ctl->engines; e; e = e->next)
		sh_ctl_conn_shut(&e->c);
	for (tk_client *c = ctl->clients; c; c = c->next)
		sh_ctl_conn_shut(&c->c);
	/* No deadline, as ever: a connection is not cancelled halfway (a
	 * relay may be using it); each ends once its link is shut, or its
	 * handshake over. */
	sh_listener_stop(&ctl->local, false, SHOAL_FOREVER);
	sh_listener_stop(&ctl->remote, false, SHOAL_FOREVER);
	/* What is left had no engine and no client any more. */
	for (tk_task *t; (t = sh_ctl_q_pop(&ctl->pending)) != NULL ||
			 (t = sh_ctl_q_pop(&ctl->backlog)) != NULL;)
		sh_task_end(ctl, t, SH_TASK_STOP);
	shoal_fd_forget(ctl->lsock);
	if (ctl->tcp_lsock >= 0)
		shoal_fd_forget(ctl->tcp_lsock);
}

/* Until shoal_controller_close rings stop_efd. A write to a socket whose
 * peer went raises SIGPIPE where no MSG_NOSIGNAL can say otherwise: it is
 * blocked in this thread, and the call fails with EPIPE. */
static void *controller_thread(void *arg)
{
	sh_service_run(&(sh_service){.area = "tasks",
				     .stop_efd = ((shoal_controller *)arg)->stop_efd,
				     .start = controller_start,
				     .stop = controller_stop,
				     .arg = arg,
				     .block_sigpipe = true});
	return NULL;
}

/* ---- the API ---- */

static const char *const scheme_names[] = {
	[SHOAL_SCHEME_LEASTLOAD] = "leastload",
	[SHOAL_SCHEME_PURE] = "pure",
	[SHOAL_SCHEME_LRU] = "lru",
	[SHOAL_SCHEME_WEIGHTED] = "weighted",
	[SHOAL_SCHEME_TWOBIN] = "twobin",
};

int shoal_scheme_parse(const char *name)
{
	for (size_t i = 0; name && i < sizeof(scheme_names) / sizeof(scheme_names[0]); i++)
		if (!strcmp(name, scheme_names[i]))
			return (int)i;
	return -1;
}

const char *shoal_scheme_name(shoal_scheme s)
{
	return (unsigned)s < sizeof(scheme_names) / sizeof(scheme_names[0]) ? scheme_names[s] : "?";
}

void shoal_controller_opts_init(shoal_controller_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->scheme = SHOAL_SCHEME_LEASTLOAD;
	o->window = SH_TASKS_WINDOW;
}

static void controller_free(shoal_controller *ctl)
{
	sh_map_fini(&ctl->tasks);
	sh_ctl_spares_free(ctl);
	if (ctl->lsock >= 0) {
		close(ctl->lsock);
		unlink(ctl->path);
	}
	if (ctl->stop_efd >= 0)
		close(ctl->stop_efd);
	if (ctl->tcp_lsock >= 0)
		close(ctl->tcp_lsock);
	if (ctl->engines_efd >= 0)
		close(ctl->engines_efd);
	memset(ctl->key, 0, sizeof(ctl->key));
	SH_DELETE(ctl);
}

int shoal_controller_open(shoal_controller **out, const shoal_controller_opts *o)
{
	if (!out || (o && (unsigned)o->scheme > SHOAL_SCHEME_TWOBIN))
		return SHOAL_EINVAL;
	shoal_controller *ctl = SH_NEW(shoal_controller);
	if (!ctl)
		return SHOAL_ENOMEM;
	if (o)
		ctl->opts = *o;
	else
		shoal_controller_opts_init(&ctl->opts);
	ctl->lsock = ctl->stop_efd = ctl->tcp_lsock = ctl->engines_efd = -1;
	ctl->rng = (uint64_t)shoal_now_ns() | 1;
	ctl->window = ctl->opts.window ? ctl->opts.window : SH_TASKS_WINDOW;
	if (ctl->window > SH_TASKS_WINDOW_MAX) {
		sh_error("tasks", "a window of %u tasks: expected at most %u", ctl->window,
			 SH_TASKS_WINDOW_MAX);
		SH_DELETE(ctl);
		return SHOAL_EINVAL;
	}
	ctl->conn_budget = sh_link_fd_budget() / FDS_PER_CONN;
	int rc = 0;
	if (ctl->opts.tcp) {
		/* No TCP without a secret: nobody unauthenticated runs anything. */
		char why[160];
		if (ctl->opts.secret && ctl->opts.secret_len >= 16 &&
		    ctl->opts.secret_len <= SH_SECRET_MAX) {
			memcpy(ctl->key, ctl->opts.secret, ctl->opts.secret_len);
			ctl->klen = ctl->opts.secret_len;
		} else if (ctl->opts.secret) {
			snprintf(why, sizeof(why), "a secret of %zu bytes: expected 16 to %d",
				 ctl->opts.secret_len, SH_SECRET_MAX);
			rc = SHOAL_EINVAL;
		} else {
			rc = sh_secret_load(ctl->key, &ctl->klen, why, sizeof(why));
		}
		if (rc == 0)
			rc = sh_tcp_listen(ctl->opts.tcp, &ctl->tcp_lsock, ctl->tcp_bound,
					   sizeof(ctl->tcp_bound), why, sizeof(why));
		if (rc == 0 && ctl->opts.no_encrypt)
			sh_warn("tasks",
				"TCP at %s: links whose peers also ask for it go unencrypted "
				"(no_encrypt: a trusted network); each record is still "
				"authenticated",
				ctl->tcp_bound);
		if (rc) {
			sh_error("tasks", "TCP: %s", why);
			controller_free(ctl);
			return rc;
		}
	}
	rc = sh_link_listen(ctl->opts.socket, "tasks", (gid_t)-1, ctl->path, sizeof(ctl->path),
			    &ctl->lsock);
	if (rc == 0 && (ctl->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		rc = shoal_errno();
	if (rc == 0 && (ctl->engines_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		rc = shoal_errno();
	if (rc == 0 && (rc = -pthread_create(&ctl->thread, NULL, controller_thread, ctl)) != 0)
		sh_error("tasks", "thread: %s", shoal_strerror(rc));
	if (rc) {
		controller_free(ctl);
		return rc;
	}
	ctl->opts.socket = ctl->path;
	ctl->opts.tcp = ctl->tcp_lsock >= 0 ? ctl->tcp_bound : NULL;
	ctl->opts.secret = NULL; /* the caller's memory: our copy is in key */
	*out = ctl;
	return 0;
}

const char *shoal_controller_tcp(const shoal_controller *c)
{
	return c && c->tcp_lsock >= 0 ? c->tcp_bound : NULL;
}

const char *shoal_controller_socket(const shoal_controller *c)
{
	return c ? c->path : NULL;
}

void shoal_controller_close(shoal_controller *ctl)
{
	if (!ctl)
		return;
	sh_eventfd_signal(ctl->stop_efd);
	pthread_join(ctl->thread, NULL);
	controller_free(ctl);
}

int shoal_engine_spawn(const char *socket, const char *so, const char *runner, pid_t *pid)
{
	return shoal_engine_spawn_store(socket, so, runner, NULL, pid);
}

int shoal_engine_spawn_store(const char *socket, const char *so, const char *runner,
			     const char *store, pid_t *pid)
{
	if (!socket || !so || !pid)
		return SHOAL_EINVAL;
	char installed[PATH_MAX];
	if (!runner)
		runner = getenv("SHOAL_ENGINE");
	if (!runner)
		runner = sh_program_path("shoal-engine", installed, sizeof(installed));
	char *argv[] = {(char *)runner,
			"--socket",
			(char *)socket,
			"--so",
			(char *)so,
			"--die-with-parent",
			store ? "--store" : NULL,
			(char *)store,
			NULL};
	sh_proc p;
	sh_proc_opts po;
	sh_proc_opts_init(&po, argv);
	char why[PATH_MAX + 64];
	int rc = sh_proc_spawn(&p, &po, why, sizeof(why));
	if (rc) {
		sh_warn("tasks", "%s", why);
		return rc;
	}
	*pid = p.pid;
	sh_proc_fini(&p); /* the caller reaps it by its pid */
	return 0;
}

int sh_ctl_engines_fd(shoal_controller *ctl)
{
	return ctl->engines_efd;
}

void sh_ctl_engines_changed(shoal_controller *ctl)
{
	sh_eventfd_signal(ctl->engines_efd);
}

int shoal_controller_stat_get(shoal_controller *c, shoal_controller_stat *st)
{
	if (!c || !st)
		return SHOAL_EINVAL;
	st->engines = atomic_load_explicit(&c->n_engines, memory_order_relaxed);
	st->clients = atomic_load_explicit(&c->n_clients, memory_order_relaxed);
	st->queued = atomic_load_explicit(&c->n_queued, memory_order_relaxed);
	st->running = atomic_load_explicit(&c->n_running, memory_order_relaxed);
	st->done = atomic_load_explicit(&c->n_done, memory_order_relaxed);
	st->retried = atomic_load_explicit(&c->n_retried, memory_order_relaxed);
	st->failed = atomic_load_explicit(&c->n_failed, memory_order_relaxed);
	st->held_bytes = atomic_load_explicit(&c->n_held, memory_order_relaxed);
	st->held_peak = atomic_load_explicit(&c->n_held_peak, memory_order_relaxed);
	return 0;
}

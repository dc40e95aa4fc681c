/* The accept loop of every daemon (listener.h): accept, check, ask for
 * room, take a handshake slot, hand over; every refusal through one
 * bounded log. And the thread a daemon serves in (sh_service_run). */
#include "net/listener.h"
#include "fiber/waitq.h"
#include "ring/link.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void refuse(sh_listener *l, const char *who, const char *why)
{
	char named[128];
	if (l->o.tcp && l->o.label)
		snprintf(named, sizeof(named), "%s %s", l->o.label, who);
	else
		snprintf(named, sizeof(named), "%s", who);
	l->refused++;
	sh_refused(&l->refusals, l->o.area, named, l->o.tcp ? " over TCP" : "", why);
}

void sh_listener_refused(sh_listener *l, const char *who, const char *why)
{
	refuse(l, who, why);
}

void sh_listener_hello_done(sh_listener *l, int hello)
{
	if (hello >= 0)
		sh_hellos_drop(&l->hellos, hello);
}

/* The next connection on a unix socket, non-blocking; SHOAL_ECANCELED
 * when the fiber is cancelled. A transient failure (out of descriptors
 * or memory) is logged and tried again in 100 ms: nothing else says when
 * a descriptor is free again. */
static int unix_accept(sh_listener *l)
{
	for (;;) {
		int fd = accept4(l->o.lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			/* a flood of connects must not crowd out the thread's
			 * other fibers (sh_tcp_accept says more) */
			shoal_yield();
			return fd;
		}
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) {
			if (shoal_fd_wait(l->o.lsock, SHOAL_FD_IN, SHOAL_FOREVER, NULL) ==
			    SHOAL_ECANCELED)
				return SHOAL_ECANCELED;
			continue;
		}
		if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
			sh_warn(l->o.area, "accept: %s; retrying in 100 ms", strerror(errno));
			if (shoal_sleep_until(shoal_deadline_in(100000000)) == SHOAL_ECANCELED)
				return SHOAL_ECANCELED;
			continue;
		}
		int rc = shoal_errno();
		sh_error(l->o.area, "accept: %s", strerror(errno));
		return rc;
	}
}

static void *accept_main(void *arg)
{
	sh_listener *l = arg;
	for (;;) {
		sh_accepted a = {.fd = -1, .hello = -1};
		if (l->o.tcp) {
			a.fd = sh_tcp_accept(l->o.lsock, l->o.area, a.who, sizeof(a.who));
		} else {
			a.fd = unix_accept(l);
			if (a.fd >= 0 &&
			    !sh_link_peer_allowed(a.fd, l->o.group, l->o.area, &a.pid)) {
				close(a.fd); /* logged by sh_link_peer_allowed */
				l->refused++;
				continue;
			}
			snprintf(a.who, sizeof(a.who), "pid %d", (int)a.pid);
		}
		if (a.fd < 0)
			return NULL; /* cancelled, or the socket is broken (logged) */
		char why[256] = "";
		bool ok = !l->o.room || l->o.room(l->o.arg, why, sizeof(why));
		if (ok && l->o.tcp && l->o.hellos) {
			a.hello = sh_hellos_take(&l->hellos, a.fd, a.who, why, sizeof(why));
			ok = a.hello >= 0;
		}
		if (ok) {
			why[0] = 0;
			ok = l->o.take(l->o.arg, &a, why, sizeof(why)) == 0;
			if (!ok)
				sh_listener_hello_done(l, a.hello);
		}
		if (!ok) {
			close(a.fd);
			if (why[0])
				refuse(l, a.who, why);
			continue;
		}
		l->accepted++;
	}
}

int sh_listener_start(sh_listener *l, const sh_listener_opts *o)
{
	if (!o->take || o->lsock < 0)
		return SHOAL_EINVAL;
	*l = (sh_listener){.o = *o};
	sh_fgroup_init(&l->conns);
	if (o->tcp && o->hellos) {
		int rc = sh_hellos_init(&l->hellos, o->hellos,
					o->hellos_per_source ? o->hellos_per_source : o->hellos);
		if (rc)
			return rc;
	}
	int rc = shoal_spawn(&l->acceptor, accept_main, l,
			     &(shoal_fiber_opts){.name = o->fiber_name ? o->fiber_name : "accept"});
	if (rc)
		sh_hellos_fini(&l->hellos);
	return rc;
}

int sh_listener_spawn(sh_listener *l, shoal_fiber_fn fn, void *arg, const char *name)
{
	return sh_fgroup_spawn(&l->conns, NULL, fn, arg, &(shoal_fiber_opts){.name = name});
}

void sh_listener_close(sh_listener *l)
{
	if (l->acceptor) {
		shoal_cancel(l->acceptor);
		shoal_join(l->acceptor, NULL);
		l->acceptor = NULL;
	}
}

int sh_listener_stop(sh_listener *l, bool cancel, int64_t deadline)
{
	sh_listener_close(l);
	int rc = cancel ? sh_fgroup_stop(&l->conns, deadline) : sh_fgroup_join(&l->conns, deadline);
	if (rc == 0)
		sh_hellos_fini(&l->hellos);
	return rc;
}

void sh_service_run(const sh_service *sv)
{
	if (sv->block_sigpipe) {
		/* blocked in this thread, a SIGPIPE stays pending, harmless */
		sigset_t pipe_sig;
		sigemptyset(&pipe_sig);
		sigaddset(&pipe_sig, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe_sig, NULL);
	}
	shoal_sched *sched;
	int rc = shoal_sched_create(&sched, NULL);
	if (rc) {
		sh_error(sv->area, "scheduler: %s", shoal_strerror(rc));
		return;
	}
	if (sv->start(sv->arg) == 0)
		sh_efd_wait(sv->stop_efd, SHOAL_FOREVER);
	sv->stop(sv->arg);
	shoal_fd_forget(sv->stop_efd);
	shoal_sched_destroy(sched);
}

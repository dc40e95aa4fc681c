/* Listeners: the one accept loop every daemon serves through, on a unix
 * socket (local clients, engines) or a TCP port (peers on other hosts).
 * A listener accepts in a fiber of its own, checks each connection before
 * its owner sees it (a unix peer's credentials; a TCP stranger's place
 * among the handshakes in progress, sh_hellos), asks its owner whether
 * one more fits (descriptors), logs every refusal at a bounded rate
 * (sh_refusals), and runs each connection it takes in a fiber of its
 * group, so that stopping it ends them all. One thread: the listener and
 * its connections are fibers of the scheduler that started it. */
#ifndef SHOAL_NET_LISTENER_H
#define SHOAL_NET_LISTENER_H

#include "fiber/group.h"
#include "net/net.h"

#include <sys/types.h>

/* A connection the listener took. */
typedef struct sh_accepted {
	int fd;	      /* non-blocking, close-on-exec */
	pid_t pid;    /* unix: the peer's (its credentials passed); TCP: 0 */
	int hello;    /* TCP: its slot among the handshakes (sh_listener_hello_done), else -1 */
	char who[96]; /* "pid N", or "HOST:PORT" */
} sh_accepted;

typedef struct sh_listener_opts {
	const char *area; /* for the log: "store", "tasks" */
	int lsock;	  /* listening, non-blocking; the caller's to close */
	bool tcp;
	/* unix: who may connect beside our uid and root (sh_link_peer_allowed),
	 * (gid_t)-1 for nobody else */
	gid_t group;
	/* TCP: what a refused stranger is called in the log ("peer": "refused
	 * peer HOST:PORT over TCP: ..."); NULL for the address alone */
	const char *label;
	/* TCP: handshakes in progress at once, in all and from one address
	 * (0: no bound) */
	uint32_t hellos, hellos_per_source;
	/* Whether one more connection fits now; false with why (the
	 * connection is refused and logged). NULL: always. */
	bool (*room)(void *arg, char *why, size_t whylen);
	/* Takes a connection that passed every check, usually spawning its
	 * fiber with sh_listener_spawn. Nonzero: refused, with why (empty:
	 * nothing to log); the listener closes a->fd and frees its slot. */
	int (*take)(void *arg, sh_accepted *a, char *why, size_t whylen);
	void *arg;
	const char *fiber_name; /* the accepting fiber's */
} sh_listener_opts;

typedef struct sh_listener {
	sh_listener_opts o;
	shoal_fiber *acceptor;
	sh_fgroup conns; /* the connections' fibers */
	sh_hellos hellos;
	sh_refusals refusals;
	uint64_t accepted, refused;
} sh_listener;

/* A daemon's thread (the store's server, the task controller): a fiber
 * scheduler of its own; start(arg), which starts its listeners and
 * fibers (and logs what failed); a wait until its owner rings stop_efd
 * (sh_eventfd_signal, from any thread); then stop(arg), which ends them
 * (what is left, the scheduler cancels and joins). stop runs after a
 * failed start too. With block_sigpipe, a write to a socket whose peer
 * went fails with EPIPE where no MSG_NOSIGNAL can say so. */
typedef struct sh_service {
	const char *area;
	int stop_efd;
	int (*start)(void *arg);
	void (*stop)(void *arg);
	void *arg;
	bool block_sigpipe;
} sh_service;
void sh_service_run(const sh_service *sv);

/* Starts accepting (a fiber of the calling thread's scheduler). */
int sh_listener_start(sh_listener *l, const sh_listener_opts *o);

/* Runs a taken connection's fn(arg) in a fiber of the listener's group. */
int sh_listener_spawn(sh_listener *l, shoal_fiber_fn fn, void *arg, const char *name);

/* A refusal after the connection was taken (a failed handshake), logged
 * with the listener's others, at the same bounded rate. */
void sh_listener_refused(sh_listener *l, const char *who, const char *why);

/* The TCP connection in slot hello has proved itself or failed: its
 * place among the handshakes is free. Idempotent for -1. */
void sh_listener_hello_done(sh_listener *l, int hello);

/* Stops accepting (the acceptor is cancelled and joined). Blocks briefly:
 * the acceptor ends at once. The connections run on. */
void sh_listener_close(sh_listener *l);

/* Waits for the connections to end, after the owner told them to (shut
 * their links); with cancel, cancels them first. Blocks until deadline
 * (SHOAL_ETIMEDOUT: some still run). Then frees what the listener holds:
 * sh_listener_start may be called again. */
int sh_listener_stop(sh_listener *l, bool cancel, int64_t deadline);

#endif

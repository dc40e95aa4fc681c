/* The task controller's insides, shared by its files: controller.c (the
 * thread that ties the rest together, the books of tasks and how a task
 * leaves them), sched.c (queues, schemes, engines' windows, dependencies,
 * what happens to tasks when an engine or a client goes), conn.c (the
 * links to engines and clients: reading their frames, their writers) and
 * relay.c (the bytes of large tasks: hold buffers and the relay). All of
 * it runs on the controller thread's fibers, but for the counters that
 * shoal_controller_stat_get() reads. */
#ifndef SHOAL_TASKS_CONTROLLER_IMPL_H
#define SHOAL_TASKS_CONTROLLER_IMPL_H

#include "net/listener.h"
#include "net/net.h"
#include "tasks/proto.h"

#include <shoal/fiber.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct tk_task tk_task;

/* Why a task left the controller (sh_task_end). */
typedef enum sh_task_why {
	SH_TASK_RESULT = 1, /* its engine answered (a value, or the error its function raised) */
	SH_TASK_FAILED,	    /* failed here: no engine for it, a dependency, its engine went */
	SH_TASK_RETRIES,    /* its engine went while running it, and no retries were left */
	SH_TASK_DEADLINE,   /* its deadline passed */
	SH_TASK_GONE,	    /* its client went (or its bytes never came): nobody to answer */
	SH_TASK_STOP,	    /* the controller stops */
	SH_TASK_NOMEM,	    /* never got on the books */
} sh_task_why;

/* A hold buffer: the out-of-band bytes of a large task, read from its
 * client. Freed (or kept for the next large task, warm) with its last
 * reference. */
typedef struct tk_frame {
	shoal_controller *ctl;
	unsigned char *p;
	size_t cap;
	uint32_t refs;
	struct tk_frame *next;
} tk_frame;
typedef struct tk_engine tk_engine;
typedef struct tk_client tk_client;

struct tk_task {
	uint64_t tid;	    /* ours, across clients */
	uint64_t cid;	    /* the client's */
	tk_client *client;  /* NULL once the client is gone */
	tk_engine *on;	    /* assigned to (in its outbox or running), or NULL */
	tk_task *next;	    /* in an outbox or the pending queue */
	unsigned char *raw; /* fn and args, as the client encoded them */
	tk_frame *frame;    /* raw is this hold buffer's (else its own, or NULL: relayed) */
	uint32_t rawlen;
	uint32_t retries;
	int32_t engine_want; /* -1: any */
	int64_t deadline;    /* absolute; 0: none */
	uint64_t seq;	     /* its place in its engine's stream of RUN entries (1, 2, ...) */
	uint32_t unmet;	     /* dependencies not done yet (it waits in their lists) */
	uint32_t writing;    /* writers sending its bytes by reference right now */
	uint64_t *follow;    /* the client's ids it must run beside (where they ran) */
	uint32_t nfollow;
	bool queued; /* in an outbox or the pending queue */
	bool sent;   /* its engine has it */
	bool over;   /* ended (sh_task_end): freed once nothing holds it */
	uint8_t end; /* why it ended (sh_task_why) */
};

typedef struct tk_queue {
	tk_task *head, *tail;
} tk_queue;

/* What a connection has of its own, engine or client. */
typedef struct tk_conn {
	shoal_controller *ctl;
	sh_link l;
	int tcp;	/* a peer over TCP: its socket (then l is unused); else -1 */
	int hello;	/* over TCP: its handshake's slot (sh_hellos), until it is over */
	sh_channel *ch; /* and the secure channel on it, which all its bytes go through */
	char peer[96];	/* its address, for messages */
	pid_t pid;
	uint32_t num; /* engines: 0, 1, 2 ...; clients: 1, 2, ... */
	bool engine, gone, kick_pending;
	bool shut;	/* its traffic is over (conn_shut) */
	bool held_back; /* a client waiting in hold_back (conn.c) */
	bool hung_up;	/* its TCP peer hung up while it was held back */
	/* the right to write to it, a token that the writer fiber and relays
	 * pass around; relays using it (it is freed only once they are done) */
	shoal_chan *turn;
	uint32_t users;
	shoal_chan *kick;
	/* its reader's doorbell (sh_ctl_ring): the last relay to it is done,
	 * the held bytes went down, it was shut */
	shoal_chan *bell;
	shoal_fiber *writer, *watcher;
	unsigned char *in;
	size_t in_cap;
	sh_wbuf w; /* the writer's batch */
} tk_conn;

struct tk_engine {
	tk_conn c;
	tk_engine *next;
	/* large tasks in the RUN batch being written, by reference */
	tk_task **pinned;
	uint32_t npinned, cap_pinned;
	tk_queue outbox;   /* assigned, not sent yet */
	uint32_t inflight; /* assigned and not answered: at most the window */
	uint64_t last;	   /* lru: when it was last given a task */
	tk_queue waiting;  /* tasks for this engine alone, waiting for room in its window */
	/* RUN entries sent (the last one's seq), and the last the engine said
	 * it started: those after it never ran. An engine on this host says
	 * so in a page it shares with us (page[0]), one over TCP in STARTED
	 * frames. The page's other words are slots where we drop entries it
	 * has not started (SH_TASKS_PAGE). */
	uint64_t seq_out, started;
	_Atomic uint64_t *page;
	size_t page_len;
	/* Over TCP: entries of gone clients' tasks it holds, for its next DROP
	 * frame. */
	uint64_t *drops;
	uint32_t ndrops, cap_drops;
};

/* Tasks waiting for one task of their client. */
typedef struct tk_waiters {
	tk_task **v;
	uint32_t n, cap;
} tk_waiters;

struct tk_client {
	tk_conn c;
	tk_client *next;
	sh_wbuf res; /* results not sent yet (a batch being built) */
	uint32_t nres;
	/* For dependencies, by the client's ids (1, 2, ...): how each ended
	 * (0: not yet; > 0: done on engine fate - 1; < 0: failed), the
	 * largest id seen, and who waits for whom. */
	int32_t *fate;
	uint64_t cap_fate, max_id;
	uint64_t owner; /* its store owner token (SH_TK_OWNER), or 0 */
	sh_map waiters; /* id -> tk_waiters */
	uint32_t asks;	/* STATUS questions not answered yet */
};

struct shoal_controller {
	shoal_controller_opts opts;
	char path[108];
	int lsock, stop_efd;
	int tcp_lsock;	     /* -1: no TCP */
	char tcp_bound[128]; /* where it listens */
	unsigned char key[SH_SECRET_MAX];
	size_t klen;
	pthread_t thread;
	/* the controller thread's own */
	tk_engine *engines;
	tk_client *clients;
	shoal_fiber *deadlines;	   /* the deadline sweep (deadline_main) */
	sh_listener local, remote; /* the unix socket's; TCP's (its handshakes, its refusals) */
	uint32_t nconns, next_engine, next_client;
	uint32_t nheld_back;  /* clients waiting in hold_back */
	uint64_t conn_budget; /* connections the descriptor limit allows */
	sh_map tasks;	      /* tid -> tk_task */
	uint64_t next_tid, clock, rng;
	uint32_t rr;
	uint64_t with_deadline;	  /* tasks that have one */
	tk_frame *spare_frames;	  /* hold buffers let go, kept warm */
	size_t spare_bytes, held; /* in those; in buffers tasks hold */
	uint32_t nheld;		  /* those buffers */
	int64_t last_hold;	  /* when one was last let go */
	tk_queue pending;	  /* no engine can take them yet (none, or not theirs) */
	tk_queue backlog;	  /* for any engine, waiting for room in a window */
	uint32_t window;	  /* tasks an engine holds at most */
	/* read by other threads; engines_efd is bumped as an engine joins or
	 * leaves (sh_ctl_engines_fd) */
	int engines_efd;
	_Atomic uint32_t n_engines, n_clients;
	_Atomic uint64_t n_queued, n_running, n_done, n_retried, n_failed, n_held, n_held_peak;
};

/* Bytes of large tasks held in buffers (tk_frame) beyond which, once
 * there are two for each engine, the controller stops reading clients: a
 * flood of large tasks then waits in the clients' rings or sockets (their
 * submits block), and the buffers are reused, warm and in the caches,
 * rather than fresh memory faulting in (a fresh MiB costs 256 page faults
 * here). */
#define HELD_MAX ((size_t)16 << 20)
/* Spare buffers, kept for the next large tasks: at most this many bytes,
 * and given back after a second without large tasks. */
#define SPARE_MAX ((size_t)64 << 20)
#define SPARE_IDLE_NS 1000000000
/* Entries a DROP frame names at most (about 600 KiB). */
#define DROPS_PER_FRAME 65536u

/* The tasks on the books that match, to act on one by one. Acting on one
 * may take it or others off the books, and deleting from the map moves
 * its entries, so their ids are gathered before the first is acted on
 * (scanning again from the start after each made n of them cost n
 * scans), and each is looked up again when its turn comes. Out of memory
 * for the ids, the rest are found by rescanning. */
typedef bool (*tk_match)(const tk_task *t, const void *arg);

typedef struct tk_sweep {
	shoal_controller *ctl;
	tk_match match;
	const void *arg;
	uint64_t *tids;
	uint32_t n, cap;
	bool all; /* every match is in tids */
} tk_sweep;

/* controller.c: the one way out of the controller for a task */
void sh_task_end(shoal_controller *ctl, tk_task *t, sh_task_why why);
void sh_task_let_go(shoal_controller *ctl, tk_task *t);

/* sched.c */
tk_task *sh_ctl_q_pop(tk_queue *q);
void sh_ctl_give(shoal_controller *ctl, tk_task *t, tk_engine *e, bool sent);
void sh_ctl_take_back(shoal_controller *ctl, tk_task *t);
void sh_ctl_fill(shoal_controller *ctl, tk_engine *e);
void sh_ctl_answer(shoal_controller *ctl, tk_task *t, sh_task_why why, int32_t status,
		   const void *raw, size_t len, const char *msg);
void sh_ctl_fail(shoal_controller *ctl, tk_task *t, sh_task_why why, int code, const char *fmt, ...)
	SHOAL_PRINTF(5, 6);
tk_engine *sh_ctl_pick(shoal_controller *ctl, const tk_task *t);
void sh_ctl_assign_pending(shoal_controller *ctl);
void sh_ctl_release(shoal_controller *ctl, tk_task *t);
int sh_ctl_add_task(tk_client *c, const sh_tk_submit *v, int64_t now, const unsigned char *raw,
		    tk_frame *fr, bool route, tk_task **out);
void sh_ctl_sweep_begin(tk_sweep *w, shoal_controller *ctl, tk_match match, const void *arg);
tk_task *sh_ctl_sweep_next(tk_sweep *w);
void sh_ctl_client_gone(shoal_controller *ctl, tk_client *c);
void sh_ctl_client_fini(tk_client *c);
void sh_ctl_engine_gone(shoal_controller *ctl, tk_engine *e);

/* controller.c: n_engines changed */
void sh_ctl_engines_changed(shoal_controller *ctl);

/* conn.c */
void sh_ctl_ring(shoal_chan *bell);
void sh_ctl_wake_held(shoal_controller *ctl);
void sh_ctl_kick(tk_conn *c);
void sh_ctl_conn_shut(tk_conn *c);
uint64_t sh_ctl_owner_of(const tk_task *t);
int sh_ctl_take_turn(tk_conn *c);
void sh_ctl_give_turn(tk_conn *c);
void *sh_ctl_conn_main(void *arg);

/* relay.c */
void sh_ctl_frame_unref(tk_frame *fr);
int sh_ctl_on_large(tk_client *c, const sh_frame *f);
void sh_ctl_spares_free(shoal_controller *ctl);
void sh_ctl_spares_trim(shoal_controller *ctl);

#endif

/* The migrations' insides, shared by migrate.c (the store's side: asks,
 * MIGRATE and MIGWAIT, the copy served at the end, room, stop) and
 * mig_thread.c (a transfer's thread: links to the source, the pool of
 * idle ones, FETCH and the shares' JOINs). */
#ifndef SHOAL_CLUSTER_MIGRATE_IMPL_H
#define SHOAL_CLUSTER_MIGRATE_IMPL_H

#include "cluster/cluster.h"
#include "fiber/waitq.h"

#include <pthread.h>
#include <stdatomic.h>

#define MIG_CONNECT_NS (5 * 1000000000LL)
/* No byte for this long mid-transfer: the peer or the link is gone. */
#define MIG_STALL_NS (10 * 1000000000LL)
/* A finished transfer's outcome waits this long at most for the asks that
 * hold a ticket to collect it. */
#define MIG_LINGER_NS (60 * 1000000000LL)
#define MIG_WAIT_MAX_MS 10000

typedef struct mig mig;

/* Links to other stores kept after a fetch, for the next from the same
 * one: a task's arguments, fetched one by one, would otherwise each pay a
 * connection and a handshake (ms on this machine). */
#define POOL_MAX 16
#define POOL_IDLE_NS (30 * 1000000000LL)

typedef struct idle_link {
	char from[256];
	int fd;
	sh_channel *ch;
	int64_t since;
} idle_link;

struct sh_migs {
	mig *list;
	uint64_t next_ticket;
	uint32_t running; /* threads */
	sh_waitq ended;	  /* the stop, waiting for running to reach 0 */
	pthread_mutex_t pool_mu;
	idle_link pool[POOL_MAX];
	int npool;
};

enum { MIG_CONNECTING, MIG_META, MIG_BYTES, MIG_DONE };

struct mig {
	sh_cluster *cl;
	mig *next;
	uint64_t ticket;
	/* what was asked: from whom, and an id or a name */
	char from[256];
	uint64_t key_id;
	char *key_name;
	size_t key_len;
	/* the outcome: rc, and then id or why */
	int state, rc;
	uint64_t id, sig, region;
	uint64_t total;	       /* the blobs' bytes: the thread's, until on_meta */
	uint64_t region_total; /* the same, the store's */
	char why[512];
	_Atomic uint64_t received;
	int64_t bytes_at;   /* when its bytes began to come (MIG_BYTES) */
	uint64_t tickets;   /* asks told to come back */
	uint32_t users;	    /* requests waiting on it now */
	int64_t done_at;    /* when it finished */
	shoal_chan *done;   /* closed when it finishes: wakes every waiter */
	sh_store_room room; /* taken for the region (room.charged, until it is the copy's) */
	bool yielded;	    /* a local put took its room back: it is ended */
	uint32_t streams;   /* the most links asked for; 0: SHOAL_MIGRATE_STREAMS */
	bool in_step;	    /* the first link ended its exchange cleanly: it may be kept */
	/* the thread's */
	pthread_t thread;
	int fds[SH_PEER_STREAMS_MAX]; /* the links' sockets (under mu: a stop ends them) */
	bool cut;		      /* (under mu) one failed: no more links */
	sh_store_region region_of;    /* the region's file, and mapping (huge pages) */
	sh_channel *ch;
	sh_bump a;
	sh_mig_reply r;
	shoal_node *root;
	char *name; /* the name the copy is bound to (NUL-terminated), or NULL */
	/* what the registry says the object is (has_expect), checked before a
	 * byte of it is taken */
	bool has_expect;
	uint64_t x_sig, x_bytes;
	char x_type[SH_NODE_MAX_KEY + 1];
	unsigned char x_meta[32];
	unsigned char *in;
	size_t in_cap;
	/* the hand-over between the thread and the store's: verdict 0 go on,
	 * else stop (a copy is here already: 1, or a failure) */
	sh_st_mail mail;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool answered;
	int verdict;
};

/* migrate.c, in the store's thread (posted by the transfer's thread as
 * g->mail): the source's reply came (is a copy here already, is there
 * room?); the thread is over (serve the copy, or tell every waiter why
 * not). */
void sh_mig_on_meta(shoal_store *s, sh_st_mail *m);
void sh_mig_on_end(shoal_store *s, sh_st_mail *m);
/* mig_thread.c: a transfer's thread; ends every link of g (its other
 * shares fail at once). */
void *sh_mig_main(void *arg);
void sh_mig_cut(mig *g);

#endif

/* What the registry's files share (registry.c, registry_jobs.c,
 * registry_watch.c): the registry's state and the helpers that cross
 * them. Not for other files: they use cluster.h. */
#ifndef SHOAL_CLUSTER_REGISTRY_IMPL_H
#define SHOAL_CLUSTER_REGISTRY_IMPL_H

#include "cluster/cluster.h"
#include "cluster/etcd.h"

#include <pthread.h>
#include <stdint.h>

#define CALL_NS (2 * 1000000000LL) /* one etcd call at most */
#define RETRY_NS 1000000000LL	   /* while etcd is down */
#define PEERS_MAX 1024

typedef struct reg_name {
	struct reg_name *next;
	char *name;
	uint64_t id;
	char *record; /* the JSON value registered */
} reg_name;

struct sh_registry {
	sh_cluster *cl;
	char prefix[300];
	char peer[64]; /* this store's peer address */
	int64_t ttl_s;
	sh_etcd *jobs_etcd, *watch_etcd;
	pthread_t thread, watcher;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t stop_cv; /* the watcher's pause between asks: a stop ends it */
	sh_reg_job *head, *tail;
	_Atomic int stop;
	/* the registry thread's own */
	uint64_t lease;
	int64_t next_keepalive;
	reg_name *names;
	/* shared (under mu): whether etcd answers, and why not */
	int64_t down_since; /* 0: up */
	char down_why[300];
	uint32_t npeers;
	uint64_t peer_ids[PEERS_MAX];
	char peer_addrs[PEERS_MAX][64]; /* where each is: an id's owner without asking */
	int64_t peers_changed;		/* when the last peer came or went */
};

/* An etcd request's {"key", "value", "lease"} (value NULL: none, lease 0:
 * none), or NULL when out of memory. */
cJSON *sh_reg_kv_req(const char *key, size_t klen, const char *value, uint64_t lease);
/* The names this store registered (the jobs' thread's own, and before it
 * runs sh_reg_note's): registered again when etcd comes back. */
void sh_reg_remember_name(sh_registry *r, const char *name, size_t nl, uint64_t id,
			  const char *record);
void sh_reg_forget_name(sh_registry *r, const char *name, size_t nl);
/* The two threads (sh_reg_serve starts them, sh_reg_stop ends them): the
 * jobs' (registry_jobs.c) and the watch on peers/ (registry_watch.c). */
void *sh_reg_jobs_main(void *arg);
void *sh_reg_watch_main(void *arg);

#endif

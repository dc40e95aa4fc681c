/* The cluster's registry (--meta etcd://HOST:PORT[,...] --cluster NAME):
 * etcd holds, under /shoal/NAME/,
 *   peers/ID16     {"peer": "HOST:PORT", "pid": N}        this store, while it lives
 *   names/NAME     {"peer", "id", "sig", "type", "bytes", "name", "meta", "mac"}
 *                                                         a persistent named object:
 *                  meta the SHA-256 of its tree (sh_node_digest), mac the
 *                  HMAC-SHA256 of the rest under the cluster's secret (a
 *                  get checks both: record_mac)
 *   ids/ID16       the same, by id
 * all under a lease this store keeps alive, so a dead store's entries go
 * when the lease expires, and every store sees it through its watch on
 * peers/. A name is unique in the cluster: it is created only where it is
 * absent (one transaction with its id's key; no lock).
 *
 * A thread runs the calls one after another (jobs posted by the store's
 * request fibers, which wait without holding the store's thread) and keeps
 * the lease; another watches the peers. Every call has a deadline. While
 * etcd does not answer, what needs it fails at once, naming etcd, and the
 * thread tries again every second; when etcd is back (a new lease if the
 * old one expired) every name is registered again. Local gets, puts and
 * migrations never wait for etcd.
 *
 * This file is the store's side: start, serve, stop, and a request's job
 * handed to the jobs' thread (registry_jobs.c: the calls and the lease);
 * registry_watch.c watches the peers, registry_record.c signs and checks
 * a name's record. */
#include "cluster/registry_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sh_reg_start(sh_cluster *cl)
{
	const char *meta = cl->opts->meta;
	if (!meta || !strcmp(meta, "local"))
		return 0;
	if (strncmp(meta, "etcd://", 7) != 0) {
		sh_error("store", "--meta %s: expected local or etcd://HOST:PORT[,HOST:PORT...]",
			 meta);
		return SHOAL_EINVAL;
	}
	if (!cl->peers) {
		sh_error("store",
			 "--meta %s: the cluster's stores fetch objects from each other: "
			 "give --peer HOST:PORT too",
			 meta);
		return SHOAL_EINVAL;
	}
	const char *name = cl->opts->cluster ? cl->opts->cluster : "default";
	if (!*name || strlen(name) > 200 || strchr(name, '/')) {
		sh_error("store", "--cluster '%s': expected a name of 1 to 200 bytes without '/'",
			 name);
		return SHOAL_EINVAL;
	}
	sh_registry *r = calloc(1, sizeof(*r));
	if (!r)
		return SHOAL_ENOMEM;
	r->cl = cl;
	snprintf(r->prefix, sizeof(r->prefix), "/shoal/%s/", name);
	snprintf(r->peer, sizeof(r->peer), "%s", shoal_store_peer(cl->s));
	r->ttl_s = cl->opts->lease_ttl_s ? cl->opts->lease_ttl_s : 10;
	pthread_mutex_init(&r->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cv, &ca);
	pthread_cond_init(&r->stop_cv, &ca);
	pthread_condattr_destroy(&ca);
	char why[300];
	int rc = sh_etcd_open(meta + 7, &r->jobs_etcd, why, sizeof(why));
	if (rc == 0)
		rc = sh_etcd_open(meta + 7, &r->watch_etcd, why, sizeof(why));
	if (rc) {
		sh_error("store", "--meta %s: %s", meta, why);
		sh_etcd_close(r->jobs_etcd);
		free(r);
		return rc;
	}
	cl->reg = r;
	return 0;
}

void sh_reg_note(sh_cluster *cl, const char *name, uint64_t id, uint64_t sig, const char *type,
		 uint64_t bytes, const unsigned char meta[32])
{
	if (!cl->reg)
		return;
	sh_reg_job j = {.name = name, .nl = strlen(name), .id = id, .sig = sig, .bytes = bytes};
	snprintf(j.type, sizeof(j.type), "%s", type);
	memcpy(j.meta, meta, 32);
	char *rec = sh_reg_record(cl->key, cl->klen, &j, cl->reg->peer);
	if (rec)
		sh_reg_remember_name(cl->reg, name, j.nl, id, rec);
	free(rec);
}

/* Tells both threads to end: the jobs' thread on its condition, the
 * watcher in its pause between asks on stop_cv. */
static void tell_stop(sh_registry *r)
{
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	pthread_cond_broadcast(&r->stop_cv);
	pthread_mutex_unlock(&r->mu);
}

int sh_reg_serve(sh_cluster *cl)
{
	sh_registry *r = cl->reg;
	if (!r)
		return 0;
	int rc = -pthread_create(&r->thread, NULL, sh_reg_jobs_main, r);
	if (rc == 0 && (rc = -pthread_create(&r->watcher, NULL, sh_reg_watch_main, r)) != 0) {
		tell_stop(r);
		pthread_join(r->thread, NULL);
	}
	return rc;
}

void sh_reg_stop(sh_cluster *cl)
{
	sh_registry *r = cl->reg;
	if (!r)
		return;
	tell_stop(r);
	pthread_join(r->thread, NULL);
	pthread_join(r->watcher, NULL);
}

void sh_reg_free(sh_cluster *cl)
{
	sh_registry *r = cl->reg;
	if (!r)
		return;
	while (r->names)
		sh_reg_forget_name(r, r->names->name, strlen(r->names->name));
	sh_etcd_close(r->jobs_etcd);
	sh_etcd_close(r->watch_etcd);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	pthread_cond_destroy(&r->stop_cv);
	free(r);
	cl->reg = NULL;
}

static void job_over(shoal_store *s, sh_st_mail *m)
{
	(void)s;
	sh_reg_job *j = (sh_reg_job *)((char *)m - offsetof(sh_reg_job, mail));
	shoal_chan_close(j->done);
}

int sh_reg_run(sh_cluster *cl, sh_reg_job *j)
{
	sh_registry *r = cl->reg;
	int rc = shoal_chan_create(&j->done, 1, 0);
	if (rc) {
		snprintf(j->why, sizeof(j->why), "out of memory");
		return rc;
	}
	j->mail.fn = job_over;
	j->next = NULL;
	pthread_mutex_lock(&r->mu);
	if (r->stop) { /* no thread to run it any more */
		pthread_mutex_unlock(&r->mu);
		shoal_chan_destroy(j->done);
		j->done = NULL;
		snprintf(j->why, sizeof(j->why), "the store is stopping");
		return j->rc = SHOAL_ECANCELED;
	}
	if (r->tail)
		r->tail->next = j;
	else
		r->head = j;
	r->tail = j;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	char c;
	/* the registry's thread bounds every call: this ends */
	while (shoal_chan_recv(j->done, &c, SHOAL_FOREVER) == SHOAL_ECANCELED)
		;
	shoal_chan_destroy(j->done);
	j->done = NULL;
	return j->rc;
}

void sh_reg_stat(sh_cluster *cl, uint64_t *peers, bool *up)
{
	sh_registry *r = cl->reg;
	*peers = 0;
	*up = false;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	*peers = r->npeers;
	*up = !r->down_since;
	pthread_mutex_unlock(&r->mu);
}

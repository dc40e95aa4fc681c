/* The registry's jobs' thread: it runs the calls to etcd one after
 * another (names taken and let go, lookups: jobs posted by the store's
 * request fibers through sh_reg_run), keeps this store's lease alive, and
 * registers the store and every name again when etcd comes back. Each call
 * has a deadline; one that finds etcd away marks it down (sh_reg_stat). */
#include "cluster/registry_impl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- keys and requests ---- */

static void key_of(const sh_registry *r, char *out, size_t len, const char *kind, const char *name,
		   size_t nl)
{
	snprintf(out, len, "%s%s/%.*s", r->prefix, kind, (int)nl, name);
}

cJSON *sh_reg_kv_req(const char *key, size_t klen, const char *value, uint64_t lease)
{
	cJSON *o = cJSON_CreateObject();
	if (!o || sh_json_b64(o, "key", key, klen) ||
	    (value && sh_json_b64(o, "value", value, strlen(value)))) {
		cJSON_Delete(o);
		return NULL;
	}
	if (lease) {
		char l[24];
		snprintf(l, sizeof(l), "%" PRIu64, lease);
		cJSON_AddStringToObject(o, "lease", l);
	}
	return o;
}

/* ---- the registry's thread ---- */

static void set_down(sh_registry *r, int rc, const char *why)
{
	pthread_mutex_lock(&r->mu);
	if (rc == SHOAL_ECONNREFUSED || rc == SHOAL_ETIMEDOUT) {
		if (!r->down_since) {
			r->down_since = shoal_now_ns();
			sh_warn("store", "registry: %s; what needs it fails until etcd is back",
				why);
		}
		snprintf(r->down_why, sizeof(r->down_why), "%s", why);
	}
	pthread_mutex_unlock(&r->mu);
}

static void set_up(sh_registry *r)
{
	pthread_mutex_lock(&r->mu);
	if (r->down_since)
		sh_info("store", "registry: etcd at %s answers again",
			sh_etcd_endpoint(r->jobs_etcd));
	r->down_since = 0;
	pthread_mutex_unlock(&r->mu);
}

/* One call; a failure to reach etcd marks it down. */
static int call(sh_registry *r, const char *path, cJSON *req, cJSON **out, char *why, size_t whylen)
{
	if (!req) {
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	int rc =
		sh_etcd_call(r->jobs_etcd, path, req, shoal_deadline_in(CALL_NS), out, why, whylen);
	cJSON_Delete(req);
	if (rc == SHOAL_ECONNREFUSED || rc == SHOAL_ETIMEDOUT)
		set_down(r, rc, why);
	else if (rc == 0)
		set_up(r);
	return rc;
}

/* A txn putting name's and id's keys when name's is absent. *taken gets
 * the present record when it is not. */
static int put_name(sh_registry *r, const char *name, size_t nl, uint64_t id, const char *record,
		    bool overwrite, char **taken, char *why, size_t whylen)
{
	char nk[SH_NODE_MAX_NAME + 320], ik[340], idhex[17];
	key_of(r, nk, sizeof(nk), "names", name, nl);
	snprintf(idhex, sizeof(idhex), "%016" PRIx64, id);
	key_of(r, ik, sizeof(ik), "ids", idhex, 16);
	cJSON *req = cJSON_CreateObject(), *cmp = cJSON_AddArrayToObject(req, "compare"),
	      *ok = cJSON_AddArrayToObject(req, "success"),
	      *no = cJSON_AddArrayToObject(req, "failure");
	if (!overwrite) {
		cJSON *c = cJSON_CreateObject();
		sh_json_b64(c, "key", nk, strlen(nk));
		cJSON_AddStringToObject(c, "result", "EQUAL");
		cJSON_AddStringToObject(c, "target", "CREATE");
		cJSON_AddStringToObject(c, "create_revision", "0");
		cJSON_AddItemToArray(cmp, c);
	}
	cJSON *p1 = cJSON_CreateObject(), *p2 = cJSON_CreateObject(), *g = cJSON_CreateObject();
	cJSON_AddItemToObject(p1, "request_put", sh_reg_kv_req(nk, strlen(nk), record, r->lease));
	cJSON_AddItemToObject(p2, "request_put", sh_reg_kv_req(ik, strlen(ik), record, r->lease));
	cJSON_AddItemToObject(g, "request_range", sh_reg_kv_req(nk, strlen(nk), NULL, 0));
	cJSON_AddItemToArray(ok, p1);
	cJSON_AddItemToArray(ok, p2);
	cJSON_AddItemToArray(no, g);
	cJSON *ans;
	int rc = call(r, "/v3/kv/txn", req, &ans, why, whylen);
	if (rc)
		return rc;
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ans, "succeeded"))) {
		/* responses[0].response_range.kvs[0].value */
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(ans, "responses");
		v = cJSON_GetArrayItem(v, 0);
		v = cJSON_GetObjectItemCaseSensitive(v, "response_range");
		v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(v, "kvs"), 0);
		v = cJSON_GetObjectItemCaseSensitive(v, "value");
		unsigned char *dec = NULL;
		size_t n;
		if (cJSON_IsString(v) && sh_b64_decode(v->valuestring, &dec, &n) == 0)
			*taken = (char *)dec;
		rc = SHOAL_EEXIST;
	}
	cJSON_Delete(ans);
	return rc;
}

static int del_key(sh_registry *r, const char *kind, const char *name, size_t nl, char *why,
		   size_t whylen)
{
	char k[SH_NODE_MAX_NAME + 320];
	key_of(r, k, sizeof(k), kind, name, nl);
	cJSON *ans;
	int rc = call(r, "/v3/kv/deleterange", sh_reg_kv_req(k, strlen(k), NULL, 0), &ans, why,
		      whylen);
	cJSON_Delete(ans);
	return rc;
}

/* The record at kind/name, malloc'd, or SHOAL_ENOENT. */
static int get_key(sh_registry *r, const char *kind, const char *name, size_t nl, char **out,
		   char *why, size_t whylen)
{
	char k[SH_NODE_MAX_NAME + 320];
	key_of(r, k, sizeof(k), kind, name, nl);
	cJSON *ans;
	int rc = call(r, "/v3/kv/range", sh_reg_kv_req(k, strlen(k), NULL, 0), &ans, why, whylen);
	if (rc)
		return rc;
	const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ans, "kvs"), 0);
	v = cJSON_GetObjectItemCaseSensitive(v, "value");
	unsigned char *dec = NULL;
	size_t n;
	rc = cJSON_IsString(v) && sh_b64_decode(v->valuestring, &dec, &n) == 0 ? 0 : SHOAL_ENOENT;
	*out = (char *)dec;
	cJSON_Delete(ans);
	return rc;
}

void sh_reg_forget_name(sh_registry *r, const char *name, size_t nl)
{
	for (reg_name **p = &r->names; *p; p = &(*p)->next)
		if (strlen((*p)->name) == nl && !memcmp((*p)->name, name, nl)) {
			reg_name *x = *p;
			*p = x->next;
			free(x->name);
			free(x->record);
			free(x);
			return;
		}
}

void sh_reg_remember_name(sh_registry *r, const char *name, size_t nl, uint64_t id,
			  const char *record)
{
	sh_reg_forget_name(r, name, nl);
	reg_name *x = calloc(1, sizeof(*x));
	if (!x || !(x->name = strndup(name, nl)) || !(x->record = strdup(record))) {
		if (x)
			free(x->name);
		free(x);
		sh_warn("store", "registry: out of memory: %.*s will not be registered again",
			(int)nl, name);
		return;
	}
	x->id = id;
	x->next = r->names;
	r->names = x;
}

/* A lease, this store's key, and every name again: at start, and when
 * etcd comes back after the lease expired. */
static int register_all(sh_registry *r, char *why, size_t whylen)
{
	cJSON *req = cJSON_CreateObject(), *ans;
	cJSON_AddNumberToObject(req, "TTL", (double)r->ttl_s);
	int rc = call(r, "/v3/lease/grant", req, &ans, why, whylen);
	if (rc)
		return rc;
	r->lease = sh_json_u64(ans, "ID");
	cJSON_Delete(ans);
	if (!r->lease) {
		snprintf(why, whylen, "etcd granted no lease");
		return SHOAL_EPROTO;
	}
	char rec[200], idhex[17];
	snprintf(rec, sizeof(rec), "{\"peer\":\"%s\",\"pid\":%d}", r->peer, (int)getpid());
	snprintf(idhex, sizeof(idhex), "%016" PRIx64, sh_store_instance(r->cl->s));
	char k[340];
	key_of(r, k, sizeof(k), "peers", idhex, 16);
	if ((rc = call(r, "/v3/kv/put", sh_reg_kv_req(k, strlen(k), rec, r->lease), &ans, why,
		       whylen)))
		return rc;
	cJSON_Delete(ans);
	for (reg_name *x = r->names; x; x = x->next) {
		char *taken = NULL;
		rc = put_name(r, x->name, strlen(x->name), x->id, x->record, false, &taken, why,
			      whylen);
		if (rc == SHOAL_EEXIST)
			sh_warn("store",
				"registry: %s was named elsewhere while this store's lease "
				"lapsed (%s): it stays a local name here",
				x->name, taken ? taken : "?");
		free(taken);
		if (rc && rc != SHOAL_EEXIST)
			return rc;
	}
	r->next_keepalive = shoal_now_ns() + r->ttl_s * 1000000000LL / 3;
	sh_info("store", "registry: in cluster %s at etcd %s, lease %" PRIu64 " (%" PRId64 " s)",
		r->prefix, sh_etcd_endpoint(r->jobs_etcd), r->lease, r->ttl_s);
	return 0;
}

static void keepalive(sh_registry *r)
{
	char why[300];
	if (!r->lease) {
		if (register_all(r, why, sizeof(why)) != 0)
			r->next_keepalive = shoal_now_ns() + RETRY_NS;
		return;
	}
	cJSON *req = cJSON_CreateObject(), *ans;
	char l[24];
	snprintf(l, sizeof(l), "%" PRIu64, r->lease);
	cJSON_AddStringToObject(req, "ID", l);
	int rc = call(r, "/v3/lease/keepalive", req, &ans, why, sizeof(why));
	if (rc) {
		r->next_keepalive = shoal_now_ns() + RETRY_NS;
		return;
	}
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(ans, "result");
	bool alive = sh_json_u64(res, "TTL") > 0;
	cJSON_Delete(ans);
	if (!alive) { /* it expired while etcd was away: everything again */
		sh_warn("store", "registry: lease %" PRIu64 " expired; registering again",
			r->lease);
		r->lease = 0;
		keepalive(r);
		return;
	}
	r->next_keepalive = shoal_now_ns() + r->ttl_s * 1000000000LL / 3;
}

static void run_job(sh_registry *r, sh_reg_job *j)
{
	pthread_mutex_lock(&r->mu);
	int64_t down = r->down_since;
	char down_why[300];
	snprintf(down_why, sizeof(down_why), "%s", r->down_why);
	pthread_mutex_unlock(&r->mu);
	/* while etcd is down, at once */
	if (down || !r->lease) {
		j->rc = SHOAL_EAGAIN;
		snprintf(j->why, sizeof(j->why),
			 "the cluster's registry is unreachable (%s); try again when etcd is "
			 "back",
			 down ? down_why : "no lease yet");
		return;
	}
	char why[300];
	switch (j->kind) {
	case SH_REG_NAME: {
		char *taken = NULL, *rec = sh_reg_record(r->cl->key, r->cl->klen, j, r->peer);
		if (!rec) {
			j->rc = SHOAL_ENOMEM;
			snprintf(j->why, sizeof(j->why), "signing the name's record failed");
			break;
		}
		j->rc = put_name(r, j->name, j->nl, j->id, rec, false, &taken, why, sizeof(why));
		if (j->rc == SHOAL_EEXIST && taken) {
			sh_reg_job other = {0};
			char w2[300];
			/* ours (a replace): overwrite */
			if (sh_reg_parse_record(r->cl->key, r->cl->klen, taken, j->name, j->nl,
						&other, w2, sizeof(w2)) == 0 &&
			    !strcmp(other.peer, r->peer) && j->replace) {
				char oh[17];
				snprintf(oh, sizeof(oh), "%016" PRIx64, other.got_id);
				j->rc = put_name(r, j->name, j->nl, j->id, rec, true, NULL, why,
						 sizeof(why));
				if (j->rc == 0)
					del_key(r, "ids", oh, 16, why, sizeof(why));
			} else {
				snprintf(j->why, sizeof(j->why),
					 "name %.*s is taken in the cluster: %.300s", (int)j->nl,
					 j->name, taken);
			}
		} else if (j->rc) {
			snprintf(j->why, sizeof(j->why), "%s", why);
		}
		free(taken);
		if (j->rc == 0)
			sh_reg_remember_name(r, j->name, j->nl, j->id, rec);
		free(rec);
		break;
	}
	case SH_REG_UNNAME: {
		char idhex[17];
		snprintf(idhex, sizeof(idhex), "%016" PRIx64, j->id);
		j->rc = del_key(r, "names", j->name, j->nl, why, sizeof(why));
		if (j->rc == 0)
			j->rc = del_key(r, "ids", idhex, 16, why, sizeof(why));
		if (j->rc)
			snprintf(j->why, sizeof(j->why), "%s", why);
		else
			sh_reg_forget_name(r, j->name, j->nl);
		break;
	}
	case SH_REG_LOOKUP: {
		char idhex[17], *got = NULL;
		snprintf(idhex, sizeof(idhex), "%016" PRIx64, j->id);
		j->rc = j->name ? get_key(r, "names", j->name, j->nl, &got, why, sizeof(why))
				: get_key(r, "ids", idhex, 16, &got, why, sizeof(why));
		if (j->rc == SHOAL_ENOENT && !j->name) {
			/* not a registered name's: an id says which store made it
			 * (its top 24 bits), and that store says where it is */
			char inst[17];
			snprintf(inst, sizeof(inst), "%016" PRIx64,
				 (uint64_t)(j->id & ~(uint64_t)SH_STORE_ID_COUNTER));
			if ((j->rc = get_key(r, "peers", inst, 16, &got, why, sizeof(why))) == 0) {
				cJSON *o = cJSON_Parse(got);
				const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "peer");
				if (cJSON_IsString(p) && strlen(p->valuestring) < sizeof(j->peer)) {
					snprintf(j->peer, sizeof(j->peer), "%s", p->valuestring);
					j->got_id = j->id;
				} else {
					j->rc = SHOAL_EPROTO;
					snprintf(j->why, sizeof(j->why),
						 "a store's record in etcd that "
						 "is not ours");
				}
				cJSON_Delete(o);
				free(got);
				break;
			}
		}
		if (j->rc == 0 &&
		    (j->rc = sh_reg_parse_record(r->cl->key, r->cl->klen, got, j->name, j->nl, j,
						 why, sizeof(why))) != 0) {
			snprintf(j->why, sizeof(j->why), "%s", why);
		} else if (j->rc == SHOAL_ENOENT) {
			snprintf(j->why, sizeof(j->why), "not in the cluster's registry");
		} else if (j->rc) {
			snprintf(j->why, sizeof(j->why), "%s", why);
		}
		free(got);
		break;
	}
	}
}

/* A job that found etcd away says so as the ones after it will. */
static void run_job_said(sh_registry *r, sh_reg_job *j)
{
	run_job(r, j);
	if (j->rc == SHOAL_ECONNREFUSED || j->rc == SHOAL_ETIMEDOUT) {
		char tmp[400];
		snprintf(tmp, sizeof(tmp), "%.399s", j->why);
		snprintf(j->why, sizeof(j->why),
			 "the cluster's registry is unreachable (%s); try again when etcd is "
			 "back",
			 tmp);
		j->rc = SHOAL_EAGAIN;
	}
}

void *sh_reg_jobs_main(void *arg)
{
	sh_registry *r = arg;
	pthread_mutex_lock(&r->mu);
	while (!atomic_load(&r->stop)) {
		sh_reg_job *j = r->head;
		if (j) {
			r->head = j->next;
			if (!r->head)
				r->tail = NULL;
			pthread_mutex_unlock(&r->mu);
			run_job_said(r, j);
			sh_store_post(r->cl->s, &j->mail);
			pthread_mutex_lock(&r->mu);
			continue;
		}
		int64_t now = shoal_now_ns();
		if (now >= r->next_keepalive) {
			pthread_mutex_unlock(&r->mu);
			keepalive(r);
			pthread_mutex_lock(&r->mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		int64_t at =
			(int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (r->next_keepalive - now);
		ts.tv_sec = at / 1000000000LL;
		ts.tv_nsec = at % 1000000000LL;
		pthread_cond_timedwait(&r->cv, &r->mu, &ts);
	}
	/* the jobs left fail, so their waiters go on */
	while (r->head) {
		sh_reg_job *j = r->head;
		r->head = j->next;
		j->rc = SHOAL_ECANCELED;
		snprintf(j->why, sizeof(j->why), "the store is stopping");
		sh_store_post(r->cl->s, &j->mail);
	}
	r->tail = NULL;
	pthread_mutex_unlock(&r->mu);
	/* a clean stop: our names go now, not when the lease expires */
	if (r->lease) {
		cJSON *req = cJSON_CreateObject(), *ans = NULL;
		char l[24], why[300];
		snprintf(l, sizeof(l), "%" PRIu64, r->lease);
		cJSON_AddStringToObject(req, "ID", l);
		sh_etcd_call(r->jobs_etcd, "/v3/lease/revoke", req, shoal_deadline_in(1000000000LL),
			     &ans, why, sizeof(why));
		cJSON_Delete(req);
		cJSON_Delete(ans);
	}
	return NULL;
}

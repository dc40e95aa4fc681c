/* The registry's watch on peers/: a thread that reads which stores are in
 * the cluster, then follows them coming and going (a lease expiring takes
 * a dead store's key), and asks again a second after the watch ends. The
 * table it keeps says where an id's store is without a call to etcd
 * (sh_reg_peer_of). */
#include "cluster/registry_impl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct watch_ctx {
	sh_registry *r;
} watch_ctx;

static uint64_t peer_of_key(const sh_registry *r, const char *b64key)
{
	unsigned char *k = NULL;
	size_t n;
	uint64_t id = 0;
	char pre[340];
	snprintf(pre, sizeof(pre), "%speers/", r->prefix);
	if (sh_b64_decode(b64key, &k, &n) == 0 && n == strlen(pre) + 16 &&
	    !memcmp(k, pre, strlen(pre)))
		id = strtoull((char *)k + strlen(pre), NULL, 16);
	free(k);
	return id;
}

/* The address in a store's record (base64 of {"peer": ...}), or "". */
static void addr_of(const cJSON *kv, char *out, size_t len)
{
	out[0] = 0;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
	unsigned char *dec = NULL;
	size_t n;
	if (!cJSON_IsString(v) || sh_b64_decode(v->valuestring, &dec, &n) != 0)
		return;
	cJSON *o = cJSON_Parse((char *)dec);
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "peer");
	if (cJSON_IsString(p) && strlen(p->valuestring) < len)
		snprintf(out, len, "%s", p->valuestring);
	cJSON_Delete(o);
	free(dec);
}

static void peers_set(sh_registry *r, uint64_t id, const char *addr)
{
	pthread_mutex_lock(&r->mu);
	uint32_t i = 0;
	while (i < r->npeers && r->peer_ids[i] != id)
		i++;
	if (addr && i == r->npeers && r->npeers < PEERS_MAX) {
		r->peer_ids[r->npeers] = id;
		snprintf(r->peer_addrs[r->npeers++], sizeof(r->peer_addrs[0]), "%s", addr);
		r->peers_changed = shoal_now_ns();
	} else if (addr && i < r->npeers) {
		snprintf(r->peer_addrs[i], sizeof(r->peer_addrs[0]), "%s", addr);
	} else if (!addr && i < r->npeers) {
		r->peer_ids[i] = r->peer_ids[--r->npeers];
		memcpy(r->peer_addrs[i], r->peer_addrs[r->npeers], sizeof(r->peer_addrs[0]));
		r->peers_changed = shoal_now_ns();
		if (id != sh_store_instance(r->cl->s))
			sh_info("store",
				"registry: store %06" PRIx64 " left the cluster (its lease "
				"expired or it stopped)",
				id >> 40);
	}
	pthread_mutex_unlock(&r->mu);
}

bool sh_reg_peer_of(sh_cluster *cl, uint64_t id, char *out, size_t len)
{
	sh_registry *r = cl->reg;
	if (!r)
		return false;
	uint64_t inst = id & ~(uint64_t)SH_STORE_ID_COUNTER;
	bool found = false;
	pthread_mutex_lock(&r->mu);
	for (uint32_t i = 0; i < r->npeers && !found; i++)
		if (r->peer_ids[i] == inst && r->peer_addrs[i][0] &&
		    inst != sh_store_instance(cl->s)) {
			snprintf(out, len, "%s", r->peer_addrs[i]);
			found = true;
		}
	pthread_mutex_unlock(&r->mu);
	return found;
}

static int on_watch(void *arg, cJSON *msg)
{
	watch_ctx *w = arg;
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(msg, "result");
	const cJSON *ev;
	cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(res, "events"))
	{
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type"),
			    *kv = cJSON_GetObjectItemCaseSensitive(ev, "kv"),
			    *key = cJSON_GetObjectItemCaseSensitive(kv, "key");
		uint64_t id = cJSON_IsString(key) ? peer_of_key(w->r, key->valuestring) : 0;
		bool gone = cJSON_IsString(type) && !strcmp(type->valuestring, "DELETE");
		char a[64];
		addr_of(kv, a, sizeof(a));
		if (id)
			peers_set(w->r, id, gone ? NULL : a);
	}
	return 0;
}

void *sh_reg_watch_main(void *arg)
{
	sh_registry *r = arg;
	char pre[340], end[340], why[300];
	snprintf(pre, sizeof(pre), "%speers/", r->prefix);
	snprintf(end, sizeof(end), "%speers0", r->prefix); /* '/' + 1 */
	while (!r->stop) {
		/* who is there now, then what changes from there on */
		cJSON *req = sh_reg_kv_req(pre, strlen(pre), NULL, 0), *ans = NULL;
		sh_json_b64(req, "range_end", end, strlen(end));
		int rc = sh_etcd_call(r->watch_etcd, "/v3/kv/range", req,
				      shoal_deadline_in(CALL_NS), &ans, why, sizeof(why));
		cJSON_Delete(req);
		if (rc == 0) {
			pthread_mutex_lock(&r->mu);
			r->npeers = 0;
			pthread_mutex_unlock(&r->mu);
			const cJSON *kv;
			cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(ans, "kvs"))
			{
				const cJSON *key = cJSON_GetObjectItemCaseSensitive(kv, "key");
				uint64_t id =
					cJSON_IsString(key) ? peer_of_key(r, key->valuestring) : 0;
				char a[64];
				addr_of(kv, a, sizeof(a));
				if (id)
					peers_set(r, id, a);
			}
			uint64_t rev = sh_json_u64(cJSON_GetObjectItemCaseSensitive(ans, "header"),
						   "revision");
			cJSON *w = cJSON_CreateObject(),
			      *cr = cJSON_AddObjectToObject(w, "create_request");
			sh_json_b64(cr, "key", pre, strlen(pre));
			sh_json_b64(cr, "range_end", end, strlen(end));
			char rs[24];
			snprintf(rs, sizeof(rs), "%" PRIu64, rev + 1);
			cJSON_AddStringToObject(cr, "start_revision", rs);
			watch_ctx ctx = {r};
			sh_etcd_watch(r->watch_etcd, w, &r->stop, on_watch, &ctx, why, sizeof(why));
			cJSON_Delete(w);
		}
		cJSON_Delete(ans);
		/* a second before it asks again, unless the store stops first
		 * (sh_reg_stop rings stop_cv; cv is the jobs' thread's alone, so
		 * that a job's signal always wakes that thread) */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_mutex_lock(&r->mu);
		while (!r->stop && pthread_cond_timedwait(&r->stop_cv, &r->mu, &ts) == 0)
			;
		pthread_mutex_unlock(&r->mu);
	}
	return NULL;
}

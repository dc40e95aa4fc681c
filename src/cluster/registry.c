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
 * migrations never wait for etcd. */
#include "cluster/cluster.h"
#include "cluster/etcd.h"
#include "net/ossl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- keys and records ---- */

static void key_of(const sh_registry *r, char *out, size_t len, const char *kind, const char *name,
		   size_t nl)
{
	snprintf(out, len, "%s%s/%.*s", r->prefix, kind, (int)nl, name);
}

static cJSON *kv_req(const char *key, size_t klen, const char *value, uint64_t lease)
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
	cJSON_AddItemToObject(p1, "request_put", kv_req(nk, strlen(nk), record, r->lease));
	cJSON_AddItemToObject(p2, "request_put", kv_req(ik, strlen(ik), record, r->lease));
	cJSON_AddItemToObject(g, "request_range", kv_req(nk, strlen(nk), NULL, 0));
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
	int rc = call(r, "/v3/kv/deleterange", kv_req(k, strlen(k), NULL, 0), &ans, why, whylen);
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
	int rc = call(r, "/v3/kv/range", kv_req(k, strlen(k), NULL, 0), &ans, why, whylen);
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

static void forget_name(sh_registry *r, const char *name, size_t nl)
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

static void remember_name(sh_registry *r, const char *name, size_t nl, uint64_t id,
			  const char *record)
{
	forget_name(r, name, nl);
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
	if ((rc = call(r, "/v3/kv/put", kv_req(k, strlen(k), rec, r->lease), &ans, why, whylen)))
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

static void hex32(const unsigned char *d, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

/* The MAC of a name's record: HMAC-SHA256 under the cluster's secret of
 * every field but itself, in a fixed order; 64 hex digits into out. */
static int record_mac(const unsigned char *key, size_t klen, const char *name, size_t nl,
		      const char *peer, uint64_t id, uint64_t sig, const char *type, uint64_t bytes,
		      const char *meta, char *out)
{
	size_t cap = nl + strlen(peer) + strlen(type) + strlen(meta) + 200;
	char *buf = malloc(cap);
	if (!buf)
		return SHOAL_ENOMEM;
	int n = snprintf(buf, cap,
			 "shoal-registry-record-1\n%.*s\n%s\n%016" PRIx64 "\n%016" PRIx64
			 "\n%s\n%" PRIu64 "\n%s",
			 (int)nl, name, peer, id, sig, type, bytes, meta);
	unsigned char d[32];
	char why[200];
	int rc = n < 0 || (size_t)n >= cap ? SHOAL_EINVAL : sh_ossl_load(false, why, sizeof(why));
	if (rc == 0)
		rc = sh_hmac_sha256(key, klen, buf, (size_t)n, d);
	free(buf);
	if (rc == 0)
		hex32(d, out);
	return rc;
}

char *sh_reg_record(const unsigned char *key, size_t klen, const sh_reg_job *j, const char *peer)
{
	char idh[17], sigh[17], meta[65], mac[65];
	snprintf(idh, sizeof(idh), "%016" PRIx64, j->id);
	snprintf(sigh, sizeof(sigh), "%016" PRIx64, j->sig);
	hex32(j->meta, meta);
	if (record_mac(key, klen, j->name, j->nl, peer, j->id, j->sig, j->type, j->bytes, meta,
		       mac) != 0)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	char *name = strndup(j->name, j->nl), *out = NULL;
	if (o && name && cJSON_AddStringToObject(o, "peer", peer) &&
	    cJSON_AddStringToObject(o, "id", idh) && cJSON_AddStringToObject(o, "sig", sigh) &&
	    cJSON_AddStringToObject(o, "type", j->type) &&
	    cJSON_AddNumberToObject(o, "bytes", (double)j->bytes) &&
	    cJSON_AddStringToObject(o, "name", name) && cJSON_AddStringToObject(o, "meta", meta) &&
	    cJSON_AddStringToObject(o, "mac", mac))
		out = cJSON_PrintUnformatted(o);
	free(name);
	cJSON_Delete(o);
	return out;
}

static bool unhex32(const char *h, unsigned char *out)
{
	if (!h || strlen(h) != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return false;
		out[i] = (unsigned char)v;
	}
	return true;
}

static const char *str_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int sh_reg_parse_record(const unsigned char *key, size_t klen, const char *rec, const char *name,
			size_t nl, sh_reg_job *j, char *why, size_t whylen)
{
	cJSON *o = cJSON_Parse(rec);
	const char *peer = str_of(o, "peer"), *id = str_of(o, "id"), *sig = str_of(o, "sig"),
		   *type = str_of(o, "type"), *rname = str_of(o, "name"), *meta = str_of(o, "meta"),
		   *mac = str_of(o, "mac");
	const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(o, "bytes");
	int rc = SHOAL_EPROTO;
	snprintf(why, whylen, "a record in etcd that is not a shoal name's: %.200s", rec);
	if (peer && strlen(peer) < sizeof(j->peer) && id && sig && type &&
	    strlen(type) < sizeof(j->got_type) && rname && strlen(rname) <= SH_NODE_MAX_NAME &&
	    meta && strlen(meta) == 64 && mac && strlen(mac) == 64 && cJSON_IsNumber(bytes) &&
	    bytes->valuedouble >= 0 && bytes->valuedouble < 9007199254740992.0 /* 2^53 */ &&
	    bytes->valuedouble == (double)(uint64_t)bytes->valuedouble) {
		char want[65];
		uint64_t gid = strtoull(id, NULL, 16), gsig = strtoull(sig, NULL, 16),
			 gbytes = (uint64_t)bytes->valuedouble;
		if ((rc = record_mac(key, klen, rname, strlen(rname), peer, gid, gsig, type, gbytes,
				     meta, want)) != 0) {
			snprintf(why, whylen, "checking a record's signature: %s",
				 shoal_strerror(rc));
		} else if (CRYPTO_memcmp(want, mac, 64) != 0 || !unhex32(meta, j->got_meta) ||
			   gid == 0) {
			rc = SHOAL_EPERM;
			snprintf(why, whylen,
				 "the registry's record of %.200s is not signed with this "
				 "cluster's secret: refused",
				 rname);
		} else if (name && (strlen(rname) != nl || memcmp(rname, name, nl) != 0)) {
			rc = SHOAL_EPERM;
			snprintf(why, whylen,
				 "the registry's record for %.*s names %.200s: refused", (int)nl,
				 name, rname);
		} else {
			snprintf(j->peer, sizeof(j->peer), "%s", peer);
			snprintf(j->got_type, sizeof(j->got_type), "%s", type);
			j->got_id = gid;
			j->got_sig = gsig;
			j->got_bytes = gbytes;
			j->got_record = true;
			why[0] = 0;
			rc = 0;
		}
	}
	cJSON_Delete(o);
	return rc;
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
			remember_name(r, j->name, j->nl, j->id, rec);
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
			forget_name(r, j->name, j->nl);
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

static void *reg_main(void *arg)
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

/* ---- the watch on peers/ ---- */

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

static void *watch_main(void *arg)
{
	sh_registry *r = arg;
	char pre[340], end[340], why[300];
	snprintf(pre, sizeof(pre), "%speers/", r->prefix);
	snprintf(end, sizeof(end), "%speers0", r->prefix); /* '/' + 1 */
	while (!r->stop) {
		/* who is there now, then what changes from there on */
		cJSON *req = kv_req(pre, strlen(pre), NULL, 0), *ans = NULL;
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

/* ---- the store's side ---- */

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
		remember_name(cl->reg, name, j.nl, id, rec);
	free(rec);
}

int sh_reg_serve(sh_cluster *cl)
{
	sh_registry *r = cl->reg;
	if (!r)
		return 0;
	int rc = -pthread_create(&r->thread, NULL, reg_main, r);
	if (rc == 0 && (rc = -pthread_create(&r->watcher, NULL, watch_main, r)) != 0) {
		pthread_mutex_lock(&r->mu);
		r->stop = 1;
		pthread_cond_signal(&r->cv);
		pthread_cond_broadcast(&r->stop_cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	return rc;
}

void sh_reg_stop(sh_cluster *cl)
{
	sh_registry *r = cl->reg;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	pthread_cond_broadcast(&r->stop_cv);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->thread, NULL);
	pthread_join(r->watcher, NULL);
}

void sh_reg_free(sh_cluster *cl)
{
	sh_registry *r = cl->reg;
	if (!r)
		return;
	while (r->names)
		forget_name(r, r->names->name, strlen(r->names->name));
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

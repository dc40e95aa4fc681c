/* A store and the cluster layer over it: shoal_store_open_embedded makes
 * the store (store/extend.h), attaches this layer through the store's
 * hooks, and serves. The hooks are here: what the store asks of the
 * cluster (a get of what is not here, room copies on their way hold, a
 * persistent name the registry must agree to, STAT's figures, MIGRATE and
 * MIGWAIT) goes to peer.c, migrate.c and registry.c. */
#include "cluster/cluster.h"
#include "net/ossl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

sh_cluster *sh_cluster_of(const shoal_store *s)
{
	return sh_store_hooks_ctx(s);
}

/* ---- the hooks ---- */

static int hook_serve(void *ctx)
{
	sh_cluster *cl = ctx;
	int rc = sh_peers_serve(cl);
	if (rc)
		sh_error("store", "peers: %s", shoal_strerror(rc));
	if (rc == 0 && (rc = sh_reg_serve(cl)) != 0)
		sh_error("store", "registry: %s", shoal_strerror(rc));
	return rc;
}

static void hook_stop(void *ctx)
{
	sh_cluster *cl = ctx;
	sh_reg_stop(cl);
	sh_peers_stop(cl);
	sh_migs_stop(cl);
}

static void hook_free(void *ctx)
{
	sh_cluster *cl = ctx;
	sh_reg_free(cl);
	sh_peers_free(cl);
	sh_migs_free(cl);
	explicit_bzero(cl->key, sizeof(cl->key));
	SH_DELETE(cl);
}

static int hook_request(void *ctx, st_conn *c, const sh_frame *req, sh_mp *m)
{
	return sh_migs_request(ctx, c, req, m);
}

/* An object that is not here but in the cluster: its owner, from the
 * registry, or each store of the static list in turn; fetched here. */
static int hook_fetch(void *ctx, st_conn *c, const char *name, size_t nl, uint64_t id, char *why,
		      size_t whylen)
{
	(void)c;
	sh_cluster *cl = ctx;
	char owner[64];
	/* an id names the store that made it: where that one is, the watch
	 * knows (a task's arguments, asked for again and again) */
	if (cl->reg && !name && sh_reg_peer_of(cl, id, owner, sizeof(owner))) {
		int rc = sh_migs_fetch(cl, NULL, 0, id, owner, NULL, why, whylen);
		if (rc != SHOAL_ENOENT)
			return rc;
	}
	if (cl->reg) {
		sh_reg_job j = {.kind = SH_REG_LOOKUP, .name = name, .nl = nl, .id = id};
		int rc = sh_reg_run(cl, &j);
		if (rc) {
			snprintf(why, whylen, "%s", j.why);
			return rc;
		}
		if (!strcmp(j.peer, shoal_store_peer(cl->s))) {
			snprintf(why, whylen,
				 "the registry names this store, which has it no more");
			return SHOAL_ENOENT;
		}
		/* what comes must be what the (signed) record says */
		sh_mig_expect x = {.name = name,
				   .nl = nl,
				   .id = j.got_id,
				   .sig = j.got_sig,
				   .bytes = j.got_bytes,
				   .type = j.got_type};
		memcpy(x.meta, j.got_meta, 32);
		return sh_migs_fetch(cl, NULL, 0, j.got_id, j.peer, j.got_record ? &x : NULL, why,
				     whylen);
	}
	int rc = SHOAL_ENOENT;
	for (const char *p = cl->opts->peers; p && *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		char from[256];
		if (n && n < sizeof(from)) {
			memcpy(from, p, n);
			from[n] = 0;
			rc = sh_migs_fetch(cl, name, nl, id, from, NULL, why, whylen);
			if (rc != SHOAL_ENOENT && rc != SHOAL_ECONNREFUSED && rc != SHOAL_ETIMEDOUT)
				return rc;
		}
		p += n + (e ? 1 : 0);
	}
	return rc;
}

/* Where the registry says an object is, fetching nothing (a GET with
 * SH_GET_LOCAL). */
static int hook_locate(void *ctx, const char *name, size_t nl, uint64_t id, uint64_t *got_id,
		       char *where, size_t wherelen, char *why, size_t whylen)
{
	sh_cluster *cl = ctx;
	if (!name && sh_reg_peer_of(cl, id, where, wherelen)) {
		*got_id = id;
		return 0;
	}
	sh_reg_job j = {.kind = SH_REG_LOOKUP, .name = name, .nl = nl, .id = id};
	int rc = sh_reg_run(cl, &j);
	if (rc) {
		snprintf(why, whylen, "%s", j.why);
		return rc;
	}
	if (!strcmp(j.peer, shoal_store_peer(cl->s))) {
		snprintf(why, whylen, "the registry names this store, which has it no more");
		return SHOAL_ENOENT;
	}
	*got_id = j.got_id;
	snprintf(where, wherelen, "%s", j.peer);
	return 0;
}

static bool hook_yield_room(void *ctx, uint64_t bytes)
{
	return sh_migs_yield_room(ctx, bytes);
}

static void hook_stat(void *ctx, shoal_store_stat *st)
{
	sh_cluster *cl = ctx;
	bool up;
	sh_reg_stat(cl, &st->peers, &up);
	st->registry = cl->reg ? (up ? 1 : 2) : 0;
	sh_migs_progress(cl, &st->incoming_bytes, &st->incoming_total, &st->incoming_rate);
	st->sent = cl->sent;
	st->sent_bytes = cl->sent_bytes;
	st->fetched = cl->fetched;
	st->fetched_bytes = cl->fetched_bytes;
	st->migrating = cl->migrating;
}

/* A persistent name is the cluster's: taken in the registry first (a
 * signed record of what the object is), or let go of there. */
static int hook_name(void *ctx, bool drop, const char *name, size_t nl, uint64_t id,
		     const shoal_node *root, bool replace, char *why, size_t whylen)
{
	sh_cluster *cl = ctx;
	sh_reg_job j = {.kind = drop ? SH_REG_UNNAME : SH_REG_NAME,
			.name = name,
			.nl = nl,
			.id = id,
			.sig = id,
			.replace = replace};
	if (!drop) {
		int rc = sh_ossl_load(false, why, whylen);
		if (rc == 0 && (rc = sh_node_digest(root, j.meta)) != 0)
			snprintf(why, whylen, "digesting object %016" PRIx64 "'s tree: %s", id,
				 shoal_strerror(rc));
		if (rc)
			return rc;
		j.bytes = sh_node_bytes(root);
		snprintf(j.type, sizeof(j.type), "%s", root->type);
	}
	int rc = sh_reg_run(cl, &j);
	if (rc)
		snprintf(why, whylen, "%s", j.why);
	return rc;
}

/* What the state directory gave back is the cluster's too. */
static bool note_restored(void *arg, const sh_store_objinfo *i, const shoal_node *root)
{
	sh_cluster *cl = arg;
	unsigned char meta[32];
	char why[200];
	if (sh_ossl_load(false, why, sizeof(why)) != 0 || sh_node_digest(root, meta) != 0)
		return false;
	sh_reg_note(cl, i->name, i->id, i->sig, i->type, i->bytes, meta);
	return true;
}

/* ---- a store with its cluster ---- */

int shoal_store_open_embedded(shoal_store **out, const shoal_store_opts *opts)
{
	shoal_store *s;
	int rc = sh_store_create(&s, opts);
	if (rc)
		return rc;
	sh_cluster *cl = SH_NEW(sh_cluster);
	if (!cl) {
		sh_store_destroy(s);
		return SHOAL_ENOMEM;
	}
	cl->s = s;
	cl->opts = sh_store_opts(s);
	/* from here the store frees cl with itself (hook_free) */
	sh_store_hooks h = {.ctx = cl,
			    .serve = hook_serve,
			    .stop = hook_stop,
			    .free = hook_free,
			    .request = hook_request,
			    .fetch = hook_fetch,
			    .yield_room = hook_yield_room,
			    .stat = hook_stat,
			    .name = hook_name};
	sh_store_set_hooks(s, &h);
	if ((rc = sh_migs_start(cl)) == 0 && (rc = sh_peers_start(cl)) == 0 &&
	    (rc = sh_reg_start(cl)) == 0 && cl->reg)
		sh_store_each_persistent_named(s, note_restored, cl);
	if (rc == 0) {
		/* what the store asks of the cluster, now that it is known */
		h.fetch_missing = cl->reg || cl->opts->peers;
		h.locate = cl->reg ? hook_locate : NULL;
		h.global_names = cl->reg != NULL;
		sh_store_set_hooks(s, &h);
		rc = sh_store_serve(s);
	}
	if (rc) {
		sh_store_destroy(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* Store clients: the requests that name, delete and persist objects,
 * list the names and count what the store holds, claim a token and
 * restrict a connection to a grant, and migrate an object from another
 * store: each a round trip of client.c, its reply checked. */
#include "store/client.h"

#include <inttypes.h>
#include <string.h>

/* ---- names and the store ---- */

static int simple(shoal_client *c, uint16_t op, const char *name, shoal_id id)
{
	if (!c || (!name && !id))
		return SHOAL_EINVAL;
	sh_mp m;
	return sh_client_call_key(c, op, name, id, &m);
}

static int name_op(shoal_client *c, const char *key, shoal_id id, const char *name, bool replace)
{
	if (!c || (!key && !id) || (key && !*key) || (name && !*name))
		return SHOAL_EINVAL;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 3);
	if (key)
		sh_mp_pack_cstr(&pk, key);
	else
		msgpack_pack_uint64(&pk, id);
	if (name)
		sh_mp_pack_cstr(&pk, name);
	else
		msgpack_pack_nil(&pk);
	replace ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
	sh_mp m;
	return sh_client_call(c, SH_OP_NAME, false, &m);
}

int shoal_name(shoal_client *c, shoal_id id, const char *name, bool replace)
{
	if (!name)
		return SHOAL_EINVAL;
	return name_op(c, NULL, id, name, replace);
}

int shoal_unname(shoal_client *c, const char *name)
{
	if (!name)
		return SHOAL_EINVAL;
	return name_op(c, name, 0, NULL, false);
}

int shoal_delete(shoal_client *c, const char *name)
{
	return name ? simple(c, SH_OP_DELETE, name, 0) : SHOAL_EINVAL;
}

int shoal_delete_id(shoal_client *c, shoal_id id)
{
	return simple(c, SH_OP_DELETE, NULL, id);
}

int shoal_persist(shoal_client *c, shoal_id id)
{
	return simple(c, SH_OP_PERSIST, NULL, id);
}

int shoal_claim(shoal_client *c, uint64_t *token)
{
	if (!c || !token)
		return SHOAL_EINVAL;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 0);
	sh_mp m;
	uint32_t n;
	int rc = sh_client_call(c, SH_OP_CLAIM, false, &m);
	if (rc == 0 && (sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, token) || *token == 0))
		rc = sh_err_set(c, SHOAL_EPROTO, "CLAIM reply: expected [token]");
	return rc;
}

int shoal_restrict(shoal_client *c, uint64_t grant)
{
	if (!c)
		return SHOAL_EINVAL;
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, grant);
	sh_mp m;
	uint32_t n;
	int rc = sh_client_call(c, SH_OP_RESTRICT, false, &m);
	if (rc == 0 && (sh_mp_array(&m, &n) || n != 0 || sh_mp_done(&m)))
		rc = sh_err_set(c, SHOAL_EPROTO, "RESTRICT reply: expected []");
	return rc;
}

/* One ask at a time, each answered within wait_ms: the whole wait is the
 * connection's timeout, and a progress callback hears between asks. */
int shoal_migrate(shoal_client *c, const char *name, shoal_id id, const shoal_migrate_opts *opts,
		  shoal_id *out)
{
	if (!c || !out || (!name && !id) || (name && !*name) ||
	    (opts && opts->streams > SH_STORE_MIGRATE_STREAMS_MAX))
		return SHOAL_EINVAL;
	shoal_migrate_opts none = {0};
	if (!opts)
		opts = &none;
	int64_t deadline =
		c->timeout_ns == SHOAL_FOREVER ? SHOAL_FOREVER : shoal_deadline_in(c->timeout_ns);
	uint64_t ticket = 0;
	for (;;) {
		/* each ask well within the connection's timeout */
		int64_t left = deadline == SHOAL_FOREVER ? INT64_MAX : deadline - shoal_now_ns();
		uint64_t wait_ms = opts->progress ? 100 : 1000;
		if (left / 2000000 < (int64_t)wait_ms)
			wait_ms = left > 0 ? (uint64_t)(left / 2000000) : 0;
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		if (ticket) {
			msgpack_pack_array(&pk, 2);
			msgpack_pack_uint64(&pk, ticket);
		} else {
			msgpack_pack_array(&pk, 4);
			if (name)
				sh_mp_pack_cstr(&pk, name);
			else
				msgpack_pack_uint64(&pk, id);
			if (opts->from)
				sh_mp_pack_cstr(&pk, opts->from);
			else
				msgpack_pack_nil(&pk);
			msgpack_pack_uint32(&pk, opts->streams);
		}
		msgpack_pack_uint64(&pk, wait_ms);
		sh_mp m;
		int rc = sh_client_call(c, ticket ? SH_OP_MIGWAIT : SH_OP_MIGRATE, false, &m);
		if (rc)
			return rc;
		uint32_t n;
		bool done;
		uint64_t got, total;
		if (sh_mp_array(&m, &n) || sh_mp_bool(&m, &done) ||
		    (done ? n != 2 || sh_mp_uint(&m, out) || *out == 0
			  : n != 4 || sh_mp_uint(&m, &ticket) || ticket == 0 ||
				     sh_mp_uint(&m, &got) || sh_mp_uint(&m, &total)))
			return sh_err_set(c, SHOAL_EPROTO,
					  "MIGRATE reply: expected [true, id] or [false, "
					  "ticket, received, total]");
		if (done)
			return 0;
		if (opts->progress)
			opts->progress(opts->progress_arg, got, total);
		if (deadline != SHOAL_FOREVER && shoal_now_ns() >= deadline)
			return sh_err_set(c, SHOAL_ETIMEDOUT,
					  "the migration did not finish within %lld ms (the "
					  "connection's timeout): %" PRIu64 " of %" PRIu64
					  " bytes came; it goes on in the store",
					  (long long)(c->timeout_ns / 1000000), got, total);
	}
}

int shoal_store_stat_get(shoal_client *c, shoal_store_stat *st)
{
	msgpack_packer pk;
	sh_client_begin(c, &pk);
	msgpack_pack_array(&pk, 0);
	sh_mp m;
	int rc = sh_client_call(c, SH_OP_STAT, false, &m);
	if (rc)
		return rc;
	uint32_t n;
	uint64_t kind;
	const char *why;
	uint32_t wl;
	if (sh_mp_array(&m, &n) || n != 28 || sh_mp_uint(&m, &st->capacity) ||
	    sh_mp_uint(&m, &st->used) || sh_mp_uint(&m, &st->objects) ||
	    sh_mp_uint(&m, &st->names) || sh_mp_uint(&m, &st->clients) ||
	    sh_mp_uint(&m, &st->pending_frees) || sh_mp_uint(&m, &st->sent) ||
	    sh_mp_uint(&m, &st->sent_bytes) || sh_mp_uint(&m, &st->fetched) ||
	    sh_mp_uint(&m, &st->fetched_bytes) || sh_mp_uint(&m, &st->migrating) ||
	    sh_mp_uint(&m, &st->peers) || sh_mp_uint(&m, &st->registry) ||
	    sh_mp_uint(&m, &st->incoming_bytes) || sh_mp_uint(&m, &st->incoming_total) ||
	    sh_mp_uint(&m, &st->incoming_rate) || sh_mp_uint(&m, &st->spare_bytes) ||
	    sh_mp_uint(&m, &kind) || kind > SHOAL_PAGES_HUGETLB || sh_mp_str(&m, &why, &wl) ||
	    wl >= sizeof(st->pages_why))
		return sh_err_set(c, SHOAL_EPROTO,
				  "STAT reply: expected 17 counters, a page kind and its reason, "
				  "then 9 of spilling");
	st->pages = (shoal_pages)kind;
	memcpy(st->pages_why, why, wl);
	st->pages_why[wl] = 0;
	uint64_t *spill[9] = {&st->spill_objects,  &st->spill_bytes,   &st->spill_file_bytes,
			      &st->spilled,	   &st->spilled_bytes, &st->restored,
			      &st->restored_bytes, &st->spill_rate,    &st->restore_rate};
	for (int i = 0; i < 9; i++)
		if (sh_mp_uint(&m, spill[i]))
			return sh_err_set(c, SHOAL_EPROTO,
					  "STAT reply: expected 9 counters of spilling at its end");
	return 0;
}

int shoal_list(shoal_client *c, const char *prefix, int (*fn)(const shoal_entry *e, void *ctx),
	       void *ctx)
{
	if (!c || !fn)
		return SHOAL_EINVAL;
	char after[SH_NODE_MAX_NAME + 1];
	bool have_after = false;
	for (;;) {
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		msgpack_pack_array(&pk, 3);
		sh_mp_pack_cstr(&pk, prefix ? prefix : "");
		sh_mp_pack_cstr(&pk, have_after ? after : NULL);
		msgpack_pack_uint64(&pk, SH_STORE_LIST_MAX);
		sh_mp m;
		int rc = sh_client_call(c, SH_OP_LIST, false, &m);
		if (rc)
			return rc;
		uint32_t n, k;
		if (sh_mp_array(&m, &n) || n != 2 || sh_mp_array(&m, &k))
			return sh_err_set(c, SHOAL_EPROTO, "LIST reply: malformed");
		/* Entries point into c->in, which the next call reuses: hand
		 * each out before asking again. */
		for (uint32_t i = 0; i < k; i++) {
			const char *name, *type;
			uint32_t nl, tl, four;
			shoal_entry e;
			if (sh_mp_array(&m, &four) || four != 4 || sh_mp_str(&m, &name, &nl) ||
			    nl > SH_NODE_MAX_NAME || sh_mp_uint(&m, &e.id) ||
			    sh_mp_str(&m, &type, &tl) || tl > SH_NODE_MAX_KEY ||
			    sh_mp_uint(&m, &e.bytes))
				return sh_err_set(c, SHOAL_EPROTO, "LIST reply: malformed entry");
			char tbuf[SH_NODE_MAX_KEY + 1];
			memcpy(after, name, nl);
			after[nl] = 0;
			memcpy(tbuf, type, tl);
			tbuf[tl] = 0;
			have_after = true;
			e.name = after;
			e.type = tbuf;
			if ((rc = fn(&e, ctx)) != 0)
				return rc;
		}
		bool more;
		if (sh_mp_bool(&m, &more))
			return sh_err_set(c, SHOAL_EPROTO, "LIST reply: malformed");
		if (!more)
			return 0;
	}
}

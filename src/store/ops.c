/* The store's requests: decoding one (sh_st_handle), answering it (the
 * replies, the descriptors that go with them) and the handlers of GET,
 * RELEASE, DELETE, PERSIST, CLAIM, RESTRICT, LIST and STAT, with the checks
 * of a restricted connection. CREATE, ABORT and SEAL are segments.c's, NAME
 * is names.c's, what the layer above knows goes to its hooks. */
#include "store/server.h"
#include "store/proto.h"
#include "store/spare.h"
#include "shm/shm.h"
#include "ring/msg.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* How long a client may leave a reply, or descriptors, unread: one that
 * does not read holds its request's buffer, and its fiber, until then. */
#define REPLY_NS (10 * 1000000000LL)

static int send_frame(st_conn *c, sh_frame *f)
{
	int rc = sh_wbuf_frame_end(&c->out, f);
	if (rc == 0)
		rc = sh_msg_write(&c->l.down, c->out.p, c->out.len, shoal_deadline_in(REPLY_NS));
	if (rc == SHOAL_ETIMEDOUT)
		sh_warn("store", "client %u (pid %d): left a reply unread for %lld s; closing",
			c->id, (int)c->pid, REPLY_NS / 1000000000LL);
	return rc;
}

void sh_st_begin_reply(st_conn *c, msgpack_packer *pk)
{
	sh_wbuf_frame_begin(&c->out);
	sh_wbuf_packer(&c->out, pk);
}

/* Sends an error reply whose message says what was asked and what we had;
 * the message also goes to the debug log. */
int sh_st_reply_err(st_conn *c, const sh_frame *req, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sh_debug("store", "client %u: op %u failed: %s: %s", c->id, req->op, shoal_strerror(code),
		 msg);
	if (req->flags & SH_FRAME_NOREPLY)
		return 0;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 1);
	sh_mp_pack_cstr(&pk, msg);
	sh_frame f = {.op = req->op, .seq = req->seq, .status = code};
	return send_frame(c, &f);
}

int sh_st_reply_ok(st_conn *c, const sh_frame *req, msgpack_packer *pk_unused)
{
	(void)pk_unused;
	sh_frame f = {.op = req->op, .seq = req->seq};
	return send_frame(c, &f);
}

/* Sends the descriptors of segments to the client, SH_FD_MAX a message,
 * each message the count and the ids of what it carries. */
int sh_st_send_fds(st_conn *c, st_seg **g, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = n - i < SH_FD_MAX ? n - i : SH_FD_MAX;
		uint64_t msg[1 + SH_FD_MAX];
		int fds[SH_FD_MAX];
		msg[0] = k;
		for (size_t j = 0; j < k; j++) {
			msg[1 + j] = g[i + j]->id;
			fds[j] = g[i + j]->fd;
		}
		int rc;
		int64_t deadline = shoal_deadline_in(REPLY_NS);
		while ((rc = sh_fd_send(c->l.sock, msg, (1 + k) * 8, fds, (int)k)) == SHOAL_EAGAIN)
			if ((rc = shoal_fd_wait(c->l.sock, SHOAL_FD_OUT, deadline, NULL)) != 0) {
				if (rc == SHOAL_ETIMEDOUT)
					sh_warn("store",
						"client %u (pid %d): left descriptors unread for "
						"%lld s; closing",
						c->id, (int)c->pid, REPLY_NS / 1000000000LL);
				return rc;
			}
		if (rc)
			return rc;
		i += k;
	}
	return 0;
}

/* Whether restricted c may read o (write: delete it): its own always; to
 * read, also what its grantor holds or made. */
static bool restricted_may(st_conn *c, const st_obj *o, bool write)
{
	if (sh_map_get(&c->created, o->id) || (!write && sh_map_get(&c->refs, o->id)))
		return true;
	st_conn *g = write ? NULL : sh_map_get(&c->srv->claims, c->grant);
	return g && (sh_map_get(&g->refs, o->id) || sh_map_get(&g->created, o->id));
}

static int restricted_refuse(st_conn *c, const sh_frame *req, const char *what)
{
	return sh_st_reply_err(c, req, SHOAL_EPERM,
			       "%s: this connection is restricted (a strict extension's): it reads "
			       "only what its host holds and its own objects, and deletes only its "
			       "own",
			       what);
}

/* An object by [id | name] (GET, DELETE), or with flags by [id | name,
 * flags] too. */
int sh_st_lookup_flags(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, uint64_t *flags,
		       st_obj **out)
{
	shoal_store *s = c->srv;
	uint32_t n;
	if (flags)
		*flags = 0;
	if (sh_mp_array(m, &n) || (n != 1 && !(flags && n == 2)))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "%s: expected [id or name%s]", what,
				       flags ? "] or [id or name, flags" : "");
	const char *name = NULL;
	uint32_t len = 0;
	uint64_t id = 0;
	if (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &len) : sh_mp_uint(m, &id))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "%s: expected [id or name]", what);
	if ((n == 2 && (sh_mp_uint(m, flags) || (*flags & ~(uint64_t)SH_GET_LOCAL))) ||
	    sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "%s: trailing bytes, or flags other than LOCAL", what);
	if (name) {
		if (!(*out = sh_st_name_find(s, name, len)))
			return sh_st_reply_err(c, req, SHOAL_ENOENT, "%s: no object named \"%.*s\"",
					       what, (int)(len > 200 ? 200 : len), name);
		return 0;
	}
	st_obj *o = id ? sh_map_get(&s->objs, id) : NULL;
	if (!o || o->deleted)
		return sh_st_reply_err(c, req, SHOAL_ENOENT, "%s: no object %016" PRIx64 "%s", what,
				       id, o ? " (deleted)" : "");
	*out = o;
	return 0;
}

int sh_st_lookup(st_conn *c, const sh_frame *req, sh_mp *m, const char *what, st_obj **out)
{
	return sh_st_lookup_flags(c, req, m, what, NULL, out);
}

/* A GET with SH_GET_LOCAL of what is not here, or of a copy the registry
 * named: where the cluster has it, said in the error; nothing fetched.
 * *replied false: the lookup answers (here, nowhere, or a copy that still
 * has the name or serves while the registry cannot be asked). */
static int get_local_only(st_conn *c, const sh_frame *req, const char *name, uint32_t nl,
			  uint64_t id, st_obj *here, bool *replied)
{
	*replied = false;
	shoal_store *s = c->srv;
	bool cached = here && here->name_cached;
	if ((here && !cached) || !s->hooks.locate)
		return 0;
	uint64_t got = 0;
	char where[256] = "";
	int rc = s->hooks.locate(s->hooks.ctx, name, nl, id, &got, where, sizeof(where), c->why,
				 sizeof(c->why));
	if (cached) {
		/* the wait let others in: the name's copy is looked for again */
		here = sh_st_name_find(s, name, nl);
		if (!here || !here->name_cached)
			return 0;
		if ((rc == 0 && got == here->id) || (rc && rc != SHOAL_ENOENT))
			return 0;	    /* still this copy's, or the registry away: it serves */
		sh_st_name_unbind(s, here); /* no longer what the cluster calls so */
	}
	if (rc == SHOAL_ENOENT)
		return 0;
	*replied = true;
	int nlen = name ? (int)(nl > 200 ? 200 : nl) : 0;
	if (rc)
		return sh_st_reply_err(c, req, rc,
				       "GET: %s%.*s%s is not in this store, and the cluster could "
				       "not be asked where it is: %s",
				       name ? "\"" : "", nlen, name ? name : "", name ? "\"" : "",
				       c->why);
	if (name)
		return sh_st_reply_err(
			c, req, SHOAL_ENOENT,
			"GET: \"%.*s\" is object %016" PRIx64 " in the store at %s, "
			"not in this one: get it with fetch (a copy into this store)",
			nlen, name, got, where);
	return sh_st_reply_err(c, req, SHOAL_ENOENT,
			       "GET: object %016" PRIx64 " is in the store at %s, not in this one: "
			       "get it with fetch (a copy into this store)",
			       id, where);
}

static int op_get(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	st_obj *o = NULL;
	if (s->hooks.fetch_missing && !s->stopping && !c->restricted) {
		/* not here: from the cluster first, then as any get */
		sh_mp k = *m;
		uint32_t n, nl = 0;
		const char *name = NULL;
		uint64_t id = 0, flags = 0;
		if (!sh_mp_array(&k, &n) && (n == 1 || n == 2) &&
		    (sh_mp_kind(&k) == SH_MP_STR ? !sh_mp_str(&k, &name, &nl) && nl
						 : !sh_mp_uint(&k, &id) && id) &&
		    (n == 1 || !sh_mp_uint(&k, &flags))) {
			st_obj *here =
				name ? sh_st_name_find(s, name, nl) : sh_map_get(&s->objs, id);
			if (flags & SH_GET_LOCAL) {
				bool replied;
				int rc = get_local_only(c, req, name, nl, id,
							here && !here->deleted ? here : NULL,
							&replied);
				if (replied)
					return rc;
				goto lookup;
			}
			/* a name the registry gave a copy here may have been bound
			 * again to another object since, or dropped: asked again */
			bool cached = here && !here->deleted && here->name_cached;
			if (!here || here->deleted || cached) {
				int rc = s->hooks.fetch(s->hooks.ctx, c, name, nl, id, c->why,
							sizeof(c->why));
				if (cached && rc == SHOAL_ENOENT &&
				    (here = sh_st_name_find(s, name, nl)) && here->name_cached)
					sh_st_name_unbind(s, here); /* no longer the cluster's */
				else if (rc && rc != SHOAL_ENOENT && !cached)
					return sh_st_reply_err(c, req, rc, "GET: %s", c->why);
				/* cached, the registry away: the copy here serves */
			}
		}
	}
lookup:;
	uint64_t flags;
	int rc = sh_st_lookup_flags(c, req, m, "GET", &flags, &o);
	if (!o)
		return rc;
	if (c->restricted && !restricted_may(c, o, false))
		return restricted_refuse(c, req, "GET");
	uintptr_t held = (uintptr_t)sh_map_get(&c->refs, o->id);
	if (sh_map_put(&c->refs, o->id, (void *)(held + 1)) != 0)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "GET: out of memory");
	o->refs++;
	o->last_get = shoal_now_ns();
	/* A spilled object comes back within this get: the client sees only
	 * the time it took. */
	if (o->spilled && (rc = sh_st_restore(s, o, c->why, sizeof(c->why))) != 0) {
		held = (uintptr_t)sh_map_get(&c->refs, o->id);
		if (held <= 1)
			sh_map_del(&c->refs, o->id);
		else
			sh_map_put(&c->refs, o->id, (void *)(held - 1));
		uint64_t id = o->id;
		if (rc == SHOAL_EBADMSG) /* never served: gone, as a lost file's would be */
			sh_st_obj_delete(s, o);
		sh_st_obj_unref(s, o, 1);
		return sh_st_reply_err(c, req, rc == SHOAL_EBADMSG ? SHOAL_EIO : rc,
				       "GET: object %016" PRIx64 " could not be brought back from "
				       "disk: %s",
				       id, c->why);
	}
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 5);
	msgpack_pack_uint64(&pk, o->id);
	msgpack_pack_uint64(&pk, o->sig);
	uint32_t nnew = 0;
	for (uint32_t i = 0; i < o->nsegs; i++)
		nnew += !sh_map_get(&c->sent, o->segs[i]->id);
	/* The reply goes first, then the descriptors it lists: the client
	 * reads them after the reply, so an object of thousands of segments
	 * cannot fill the socket while the client still waits on the ring. */
	st_seg **fresh = nnew ? shoal_alloc(nnew * sizeof(*fresh)) : NULL;
	if (nnew && !fresh)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "GET: out of memory");
	size_t nfresh = 0;
	msgpack_pack_array(&pk, nnew);
	for (uint32_t i = 0; i < o->nsegs; i++) {
		st_seg *g = o->segs[i];
		if (sh_map_get(&c->sent, g->id))
			continue;
		if (sh_map_put(&c->sent, g->id, (void *)1) != 0)
			rc = SHOAL_ENOMEM;
		else
			g->mapped++; /* not spilled while it is */
		msgpack_pack_array(&pk, 2);
		msgpack_pack_uint64(&pk, g->id);
		msgpack_pack_uint64(&pk, g->size);
		fresh[nfresh++] = g;
	}
	if (rc == 0) {
		msgpack_pack_uint64(&pk, sh_st_spill_short(s) ? SH_GET_SHORT : 0);
		sh_wbuf_append(&c->out, o->meta, o->meta_len);
		rc = sh_st_reply_ok(c, req, &pk);
	}
	if (rc == 0 && nfresh)
		rc = sh_st_send_fds(c, fresh, nfresh);
	if (fresh)
		shoal_free(fresh, nnew * sizeof(*fresh));
	return rc; /* not 0: the socket, the ring or our memory failed: the connection ends */
}

static int op_release(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n, k;
	if (sh_mp_array(m, &n) || n != 2 || sh_mp_array(m, &k))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "RELEASE: expected [[id...], [segment...]]");
	for (uint32_t i = 0; i < k; i++) {
		uint64_t id;
		if (sh_mp_uint(m, &id) || id == 0)
			return sh_st_reply_err(c, req, SHOAL_EBADMSG,
					       "RELEASE: ids must be nonzero");
		uintptr_t held = (uintptr_t)sh_map_get(&c->refs, id);
		if (!held)
			return sh_st_reply_err(c, req, SHOAL_EINVAL,
					       "RELEASE: object %016" PRIx64 " is not held", id);
		if (held == 1)
			sh_map_del(&c->refs, id);
		else
			sh_map_put(&c->refs, id, (void *)(held - 1)); /* replaces: cannot fail */
		sh_st_obj_unref(s, sh_map_get(&s->objs, id), 1);
	}
	if (sh_mp_array(m, &k))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "RELEASE: segments must be an array");
	for (uint32_t i = 0; i < k; i++) {
		uint64_t id;
		if (sh_mp_uint(m, &id) || id == 0)
			return sh_st_reply_err(c, req, SHOAL_EBADMSG,
					       "RELEASE: segments must be nonzero");
		st_seg *g = sh_map_del(&c->sent, id) ? sh_map_get(&s->segs, id) : NULL;
		if (g)
			g->mapped--;
	}
	if (sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "RELEASE: trailing bytes");
	if (req->flags & SH_FRAME_NOREPLY)
		return 0;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

static int op_delete(st_conn *c, const sh_frame *req, sh_mp *m)
{
	st_obj *o = NULL;
	int rc = sh_st_lookup(c, req, m, "DELETE", &o);
	if (!o)
		return rc;
	if (c->restricted && !restricted_may(c, o, true))
		return restricted_refuse(c, req, "DELETE");
	shoal_store *s = c->srv;
	if (o->global && o->name && s->hooks.global_names) {
		/* the cluster's name goes first: while etcd is away, the
		 * object stays, named here and there alike */
		uint64_t id = o->id;
		if ((rc = sh_st_name_global(s, o, o->name, strlen(o->name), true, false, c->why,
					    sizeof(c->why))) != 0)
			return sh_st_reply_err(c, req, rc, "DELETE: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted) /* gone meanwhile */
			o = NULL;
	}
	if (o)
		sh_st_obj_delete(s, o);
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

static int op_persist(st_conn *c, const sh_frame *req, sh_mp *m)
{
	st_obj *o = NULL;
	int rc = sh_st_lookup(c, req, m, "PERSIST", &o);
	if (!o)
		return rc;
	shoal_store *s = c->srv;
	if (!o->persistent && o->name && s->hooks.global_names && !o->global) {
		uint64_t id = o->id;
		if ((rc = sh_st_name_global(s, o, o->name, strlen(o->name), false, false, c->why,
					    sizeof(c->why))) != 0)
			return sh_st_reply_err(c, req, rc, "PERSIST: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted)
			return sh_st_reply_err(
				c, req, SHOAL_ENOENT,
				"PERSIST: object %016" PRIx64 " was deleted meanwhile", id);
		o->global = true;
	}
	if (!o->persistent && s->state && o->spilled) {
		/* its file is written from its bytes: back from the spill first */
		uint64_t id = o->id;
		o->refs++;
		rc = sh_st_restore(s, o, c->why, sizeof(c->why));
		sh_st_obj_unref(s, o, 1);
		if (rc)
			return sh_st_reply_err(c, req, rc == SHOAL_EBADMSG ? SHOAL_EIO : rc,
					       "PERSIST: bringing it back from disk: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted)
			return sh_st_reply_err(
				c, req, SHOAL_ENOENT,
				"PERSIST: object %016" PRIx64 " was deleted meanwhile", id);
	}
	if (!o->persistent && s->state &&
	    (rc = sh_st_persist_obj(s, o, o->name, o->name ? strlen(o->name) : 0, c->why,
				    sizeof(c->why))) != 0)
		return sh_st_reply_err(c, req, rc, "PERSIST: %s", c->why);
	o->persistent = true;
	if (o->creator) {
		sh_map_del(&o->creator->created, o->id);
		o->creator = NULL;
	}
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

/* CLAIM []: a fresh owner token for this connection, which others name
 * when they seal objects for it (its results, say): those go when it
 * does, whoever made them. */
static int op_claim(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n;
	if (sh_mp_array(m, &n) || n != 0 || sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "CLAIM: expected []");
	if (!c->claim) {
		uint64_t t = 0;
		while (t == 0 || sh_map_get(&s->claims, t))
			if (getrandom(&t, sizeof(t), 0) != sizeof(t))
				return sh_st_reply_err(c, req, SHOAL_EIO, "CLAIM: no random bytes");
		if (sh_map_put(&s->claims, t, c) != 0)
			return sh_st_reply_err(c, req, SHOAL_ENOMEM, "CLAIM: out of memory");
		c->claim = t;
	}
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, c->claim);
	return sh_st_reply_ok(c, req, &pk);
}

/* RESTRICT [grant]: this connection is restricted from now on (a strict
 * extension's runner makes its connection so, naming its host's): see
 * st_conn. Once only. */
static int op_restrict(st_conn *c, const sh_frame *req, sh_mp *m)
{
	uint32_t n;
	uint64_t grant;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_uint(m, &grant) || grant == 0 || sh_mp_done(m))
		return sh_st_reply_err(
			c, req, SHOAL_EBADMSG,
			"RESTRICT: expected [grant] (another connection's CLAIM token)");
	if (!sh_map_get(&c->srv->claims, grant) || grant == c->claim)
		return sh_st_reply_err(c, req, SHOAL_ENOENT,
				       "RESTRICT: no other connection claims %016" PRIx64, grant);
	c->restricted = true;
	c->grant = grant;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

static int cmp_obj_name(const void *a, const void *b)
{
	return strcmp((*(st_obj *const *)a)->name, (*(st_obj *const *)b)->name);
}

static int op_list(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n, plen, alen = 0;
	const char *prefix, *after = NULL;
	uint64_t max;
	if (sh_mp_array(m, &n) || n != 3 || sh_mp_str(m, &prefix, &plen) ||
	    (!sh_mp_take_nil(m) && sh_mp_str(m, &after, &alen)) || sh_mp_uint(m, &max) ||
	    sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG,
				       "LIST: expected [prefix, after, max]");
	if (max == 0 || max > SH_STORE_LIST_MAX)
		max = SH_STORE_LIST_MAX;
	char aftbuf[SH_NODE_MAX_NAME + 1], *aft = NULL;
	if (after) {
		if (alen > SH_NODE_MAX_NAME)
			return sh_st_reply_err(c, req, SHOAL_EBADMSG, "LIST: after is too long");
		memcpy(aftbuf, after, alen);
		aftbuf[alen] = 0;
		aft = aftbuf;
	}
	st_obj **v = s->nnames ? shoal_alloc(s->nnames * sizeof(*v)) : NULL;
	if (s->nnames && !v)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "LIST: out of memory");
	size_t k = 0, it = 0;
	uint64_t key;
	void *val;
	while (sh_map_next(&s->names, &it, &key, &val))
		for (st_obj *o = val; o; o = o->name_next)
			if (strncmp(o->name, prefix, plen) == 0 &&
			    (!aft || strcmp(o->name, aft) > 0) && k < s->nnames)
				v[k++] = o;
	qsort(v, k, sizeof(*v), cmp_obj_name);
	/* As many as fit one reply (names are up to 4 KiB each). */
	size_t out = 0, bytes = 64;
	while (out < k && out < max &&
	       (bytes += strlen(v[out]->name) + strlen(v[out]->type) + 40) < SH_STORE_REPLY_MAX)
		out++;
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_array(&pk, out);
	for (size_t i = 0; i < out; i++) {
		msgpack_pack_array(&pk, 4);
		sh_mp_pack_cstr(&pk, v[i]->name);
		msgpack_pack_uint64(&pk, v[i]->id);
		sh_mp_pack_cstr(&pk, v[i]->type);
		msgpack_pack_uint64(&pk, v[i]->bytes);
	}
	k > out ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
	if (v)
		shoal_free(v, s->nnames * sizeof(*v));
	return sh_st_reply_ok(c, req, &pk);
}

static int op_stat(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n;
	if (sh_mp_array(m, &n) || n != 0 || sh_mp_done(m))
		return sh_st_reply_err(c, req, SHOAL_EBADMSG, "STAT: expected []");
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	shoal_store_stat st = {0}; /* the layer above's figures */
	if (s->hooks.stat)
		s->hooks.stat(s->hooks.ctx, &st);
	sh_st_spill_stat(s, &st);
	msgpack_pack_array(&pk, 28);
	msgpack_pack_uint64(&pk, s->capacity);
	msgpack_pack_uint64(&pk, s->used);
	msgpack_pack_uint64(&pk, s->nobjs);
	msgpack_pack_uint64(&pk, s->nnames);
	msgpack_pack_uint64(&pk, s->nclients);
	msgpack_pack_uint64(&pk, s->pending);
	msgpack_pack_uint64(&pk, st.sent);
	msgpack_pack_uint64(&pk, st.sent_bytes);
	msgpack_pack_uint64(&pk, st.fetched);
	msgpack_pack_uint64(&pk, st.fetched_bytes);
	msgpack_pack_uint64(&pk, st.migrating);
	msgpack_pack_uint64(&pk, st.peers);
	msgpack_pack_uint64(&pk, st.registry);
	msgpack_pack_uint64(&pk, st.incoming_bytes);
	msgpack_pack_uint64(&pk, st.incoming_total);
	msgpack_pack_uint64(&pk, st.incoming_rate);
	msgpack_pack_uint64(&pk, s->spares ? sh_spares_ready_bytes(s->spares) : 0);
	msgpack_pack_uint64(&pk, (uint64_t)s->pages.kind);
	size_t wl = strlen(s->pages.why);
	msgpack_pack_str(&pk, wl);
	msgpack_pack_str_body(&pk, s->pages.why, wl);
	const uint64_t spill[9] = {st.spill_objects,  st.spill_bytes,	st.spill_file_bytes,
				   st.spilled,	      st.spilled_bytes, st.restored,
				   st.restored_bytes, st.spill_rate,	st.restore_rate};
	for (int i = 0; i < 9; i++)
		msgpack_pack_uint64(&pk, spill[i]);
	return sh_st_reply_ok(c, req, &pk);
}

/* What the layer above handles (MIGRATE, MIGWAIT): the hooks' request. */
static int op_above(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	if (!s->hooks.request)
		return sh_st_reply_err(c, req, SHOAL_ENOSYS,
				       "op %u: this store copies nothing from other stores (it "
				       "was opened without the cluster's layer)",
				       req->op);
	return s->hooks.request(s->hooks.ctx, c, req, m);
}

typedef int (*op_fn)(st_conn *c, const sh_frame *req, sh_mp *m);
static const op_fn ops[SH_OP_MAX_] = {
	[SH_OP_CREATE] = sh_st_op_create, [SH_OP_SEAL] = sh_st_op_seal,
	[SH_OP_ABORT] = sh_st_op_abort,	  [SH_OP_GET] = op_get,
	[SH_OP_RELEASE] = op_release,	  [SH_OP_DELETE] = op_delete,
	[SH_OP_PERSIST] = op_persist,	  [SH_OP_LIST] = op_list,
	[SH_OP_STAT] = op_stat,		  [SH_OP_CLAIM] = op_claim,
	[SH_OP_MIGRATE] = op_above,	  [SH_OP_MIGWAIT] = op_above,
	[SH_OP_RESTRICT] = op_restrict,	  [SH_OP_NAME] = sh_st_op_name,
};

/* Handles one request record. A nonzero return ends the connection: only
 * for failures of the transport itself, never for a bad request, which
 * gets an error reply. */
int sh_st_handle(st_conn *c, size_t len)
{
	sh_frame f;
	char why[160];
	if (sh_frame_decode(c->in, len, &f, why, sizeof(why)) != 0) {
		/* Answer what we could read of the header, so a client waiting
		 * on that sequence number learns why. */
		sh_frame g = {0};
		if (len >= 16)
			memcpy(&g.seq, c->in + 12, 4);
		return sh_st_reply_err(c, &g, SHOAL_EBADMSG, "%s", why);
	}
	if (f.status != 0)
		return sh_st_reply_err(c, &f, SHOAL_EBADMSG, "request with status %d, expected 0",
				       f.status);
	if (f.oob) {
		/* Bytes would follow that we cannot read as requests: the
		 * connection is out of step, so it ends. */
		sh_st_reply_err(c, &f, SHOAL_EBADMSG,
				"out-of-band bytes, which store requests never have");
		return SHOAL_EPROTO;
	}
	if (f.op == 0 || f.op >= SH_OP_MAX_ || !ops[f.op])
		return sh_st_reply_err(c, &f, SHOAL_EBADMSG, "unknown op %u, expected 1 to %d",
				       f.op, SH_OP_MAX_ - 1);
	/* a restricted connection asks only what a strict extension needs */
	static const char *const refused[SH_OP_MAX_] = {
		[SH_OP_PERSIST] = "PERSIST",   [SH_OP_LIST] = "LIST",
		[SH_OP_MIGRATE] = "MIGRATE",   [SH_OP_MIGWAIT] = "MIGWAIT",
		[SH_OP_RESTRICT] = "RESTRICT", [SH_OP_NAME] = "NAME",
	};
	if (c->restricted && refused[f.op])
		return sh_st_reply_err(c, &f, SHOAL_EPERM,
				       "%s: this connection is restricted (a strict extension's): "
				       "it may not list, persist, name, migrate or restrict again",
				       refused[f.op]);
	sh_mp m;
	sh_mp_init(&m, c->in + SH_FRAME_HDR, f.body_len);
	return ops[f.op](c, &f, &m);
}

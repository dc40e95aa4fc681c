/* Names in a store: the table from a name to its object (one name an
 * object, set at its seal, by NAME, or by the cluster's registry for a
 * copy), and the NAME request, which binds a name to an object that
 * exists or lets go of one without deleting the object (vineyard's
 * put_name and drop_name). A persistent object's name is the cluster's
 * where the store has one (hooks.global_names): taken or let go of there
 * first, as SEAL and DELETE do; and its record in the state directory is
 * written again with its new name. */
#include "store/server.h"
#include "store/proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static uint64_t name_hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
	return h ? h : 1;
}

st_obj *sh_st_name_find(shoal_store *s, const char *name, size_t n)
{
	for (st_obj *o = sh_map_get(&s->names, name_hash(name, n)); o; o = o->name_next)
		if (strlen(o->name) == n && memcmp(o->name, name, n) == 0)
			return o;
	return NULL;
}

void sh_st_name_unbind(shoal_store *s, st_obj *o)
{
	if (!o->name)
		return;
	uint64_t h = name_hash(o->name, strlen(o->name));
	st_obj *head = sh_map_get(&s->names, h);
	if (head == o) {
		if (o->name_next)
			sh_map_put(&s->names, h, o->name_next); /* replaces: cannot fail */
		else
			sh_map_del(&s->names, h);
	} else {
		for (st_obj *p = head; p; p = p->name_next)
			if (p->name_next == o) {
				p->name_next = o->name_next;
				break;
			}
	}
	shoal_free(o->name, strlen(o->name) + 1);
	o->name = NULL;
	o->name_next = NULL;
	o->name_cached = false;
	s->nnames--;
}

int sh_st_name_bind(shoal_store *s, st_obj *o, const char *name, size_t n)
{
	char *copy = shoal_alloc(n + 1);
	if (!copy)
		return SHOAL_ENOMEM;
	memcpy(copy, name, n);
	copy[n] = 0;
	uint64_t h = name_hash(name, n);
	st_obj *head = sh_map_get(&s->names, h);
	if (sh_map_put(&s->names, h, o) != 0) {
		shoal_free(copy, n + 1);
		return SHOAL_ENOMEM;
	}
	o->name = copy;
	o->name_next = head;
	s->nnames++;
	return 0;
}

/* o's record in the state directory with its name now: the newer record
 * wins at the next start. */
static int rewrite_state(shoal_store *s, st_obj *o, char *why, size_t whylen)
{
	if (!o->persistent || !s->state)
		return 0;
	return sh_st_persist_obj(s, o, o->name, o->name ? strlen(o->name) : 0, why, whylen);
}

static int reply_empty(st_conn *c, const sh_frame *req)
{
	msgpack_packer pk;
	sh_st_begin_reply(c, &pk);
	msgpack_pack_array(&pk, 0);
	return sh_st_reply_ok(c, req, &pk);
}

/* NAME [key, nil, _]: o keeps living, without its name. */
static int unname(st_conn *c, const sh_frame *req, st_obj *o)
{
	shoal_store *s = c->srv;
	if (!o->name)
		return sh_st_reply_err(c, req, SHOAL_ENOENT,
				       "NAME: object %016" PRIx64 " has no name to let go of",
				       o->id);
	uint64_t id = o->id;
	if (o->global && s->hooks.global_names) {
		int rc = sh_st_name_global(s, o, o->name, strlen(o->name), true, false, c->why,
					   sizeof(c->why));
		if (rc)
			return sh_st_reply_err(c, req, rc, "NAME: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted || !o->name)
			return reply_empty(c, req); /* gone or unnamed meanwhile */
	}
	sh_st_name_unbind(s, o);
	o->global = false;
	int rc = rewrite_state(s, o, c->why, sizeof(c->why));
	if (rc)
		return sh_st_reply_err(c, req, rc, "NAME: %s", c->why);
	return reply_empty(c, req);
}

int sh_st_op_name(st_conn *c, const sh_frame *req, sh_mp *m)
{
	shoal_store *s = c->srv;
	uint32_t n, kl = 0, nl = 0;
	const char *key = NULL, *name = NULL;
	uint64_t id = 0;
	bool replace;
	if (sh_mp_array(m, &n) || n != 3 ||
	    (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &key, &kl) || !kl : sh_mp_uint(m, &id)) ||
	    (!sh_mp_take_nil(m) && (sh_mp_str(m, &name, &nl) || nl == 0 || nl > SH_NODE_MAX_NAME ||
				    memchr(name, 0, nl))) ||
	    sh_mp_bool(m, &replace) || sh_mp_done(m))
		return sh_st_reply_err(
			c, req, SHOAL_EBADMSG,
			"NAME: expected [id or name, a name of 1 to %d bytes without "
			"NUL or nil, replace]",
			SH_NODE_MAX_NAME);
	st_obj *o = key ? sh_st_name_find(s, key, kl) : id ? sh_map_get(&s->objs, id) : NULL;
	if (!o || o->deleted) {
		if (key)
			return sh_st_reply_err(c, req, SHOAL_ENOENT,
					       "NAME: no object named \"%.*s\"",
					       (int)(kl > 200 ? 200 : kl), key);
		return sh_st_reply_err(c, req, SHOAL_ENOENT, "NAME: no object %016" PRIx64, id);
	}
	if (!name)
		return unname(c, req, o);
	if (o->name) {
		if (strlen(o->name) == nl && memcmp(o->name, name, nl) == 0)
			return reply_empty(c, req);
		return sh_st_reply_err(c, req, SHOAL_EEXIST,
				       "NAME: object %016" PRIx64
				       " is named \"%.200s\" already: an "
				       "object has one name in a store (let go of that one first)",
				       o->id, o->name);
	}
	st_obj *other = sh_st_name_find(s, name, nl);
	if (other && !replace)
		return sh_st_reply_err(c, req, SHOAL_EEXIST,
				       "NAME: \"%.*s\" names object %016" PRIx64 " (replace to "
				       "move the name; that object stays)",
				       (int)(nl > 200 ? 200 : nl), name, other->id);
	id = o->id;
	bool global = o->persistent && s->hooks.global_names;
	if (global) {
		/* the cluster's first, as a seal's: the wait lets others in */
		int rc = sh_st_name_global(s, o, name, nl, false, replace, c->why, sizeof(c->why));
		if (rc)
			return sh_st_reply_err(c, req, rc, "NAME: %s", c->why);
		if (!(o = sh_map_get(&s->objs, id)) || o->deleted || o->name ||
		    ((other = sh_st_name_find(s, name, nl)) && !replace)) {
			char w2[600];
			st_obj *held = sh_map_get(&s->objs, id);
			if (held)
				sh_st_name_global(s, held, name, nl, true, false, w2, sizeof(w2));
			return sh_st_reply_err(c, req, SHOAL_EAGAIN,
					       "NAME: object %016" PRIx64 " or the name \"%.*s\" "
					       "changed while the cluster was asked: try again",
					       id, (int)(nl > 200 ? 200 : nl), name);
		}
	}
	if (other) {
		/* the name moves; the object it named stays, unnamed */
		sh_st_name_unbind(s, other);
		other->global = false;
		int rc = rewrite_state(s, other, c->why, sizeof(c->why));
		if (rc)
			sh_warn("store", "object %016" PRIx64 " lost its name; its record: %s",
				other->id, c->why);
	}
	if (sh_st_name_bind(s, o, name, nl) != 0)
		return sh_st_reply_err(c, req, SHOAL_ENOMEM, "NAME: out of memory");
	o->global = global;
	int rc = rewrite_state(s, o, c->why, sizeof(c->why));
	if (rc)
		return sh_st_reply_err(c, req, rc, "NAME: %s", c->why);
	return reply_empty(c, req);
}

/* Names (or, with drop, lets go of) o's name in the cluster (the hooks'
 * global names): o is held meanwhile, so that a delete by another client
 * cannot free it under us. */
int sh_st_name_global(shoal_store *s, st_obj *o, const char *name, size_t nl, bool drop,
		      bool replace, char *why, size_t whylen)
{
	sh_bump a = {0};
	shoal_node *root = NULL;
	int rc = drop ? 0 : sh_store_tree(o, &a, &root, why, whylen);
	if (rc == 0) {
		o->refs++;
		rc = s->hooks.name(s->hooks.ctx, drop, name, nl, o->id, root, replace, why, whylen);
		sh_st_obj_unref(s, o, 1);
	}
	sh_bump_fini(&a);
	return rc;
}

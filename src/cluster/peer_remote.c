/* A remote client's requests on the peer port (shoal_remote_*): PUT, its
 * bytes received by a thread into a region charged against the store's
 * room, an object only once every byte came (what a link put without
 * persist goes when the link does); DELETE; NAMES. */
#include "cluster/peer_impl.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void *recv_main(void *arg)
{
	peer_conn *pc = arg;
	_Atomic uint64_t got = 0;
	pc->rc = sh_peer_recv_blobs(pc->ch, pc->put->blobs, pc->put->nblobs, 0, pc->put->total,
				    pc->dst, pc->cl->opts->peer_min_rate, SHOAL_FOREVER, &got);
	sh_store_post(pc->cl->s, &pc->mail);
	return NULL;
}

/* A PUT: checked, room taken, "go" ([]), the bytes into a region of their
 * own, then the object: [id, signature]. A failure before the bytes is
 * answered and the link goes on; one while they come ends the link (it is
 * out of step), and the region and its room go with it. */
int sh_peer_op_put(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	sh_cluster *cl = pc->cl;
	shoal_store *s = cl->s;
	sh_bump a = {0};
	sh_peer_put p;
	char why[400];
	sh_store_room room = {.spare_fd = -1};
	sh_store_region dst = {.fd = -1};
	int rc = sh_peer_parse_put(m, &p, &a, why, sizeof(why));
	size_t nl = p.name ? strlen(p.name) : 0;
	if (rc == 0)
		rc = sh_store_put_allowed(s, p.name, nl, p.flags, why, sizeof(why));
	if (rc == 0 && pc->nputs == pc->cap_puts) {
		size_t nc = pc->cap_puts ? pc->cap_puts * 2 : 8;
		uint64_t *q = shoal_realloc(pc->puts, pc->cap_puts * 8, nc * 8);
		if (q)
			pc->puts = q, pc->cap_puts = nc;
		else
			rc = SHOAL_ENOMEM, snprintf(why, sizeof(why), "out of memory");
	}
	if (rc == 0)
		rc = sh_store_room_for_copy(s, p.region, &room, why, sizeof(why));
	if (rc == 0 && (rc = sh_store_copy_region(s, p.region, &room, &dst)) != 0)
		snprintf(why, sizeof(why), "a region of %" PRIu64 " bytes: %s", p.region,
			 shoal_strerror(rc));
	bool answered = rc != 0;
	if (rc)
		rc = sh_peer_send_error(pc, req, rc, "PUT: %s", why);
	else if ((rc = sh_peer_send_ok(pc, req, NULL)) == 0) {
		pc->put = &p;
		pc->dst = &dst;
		if ((rc = sh_peer_in_thread(pc, recv_main)) != 0)
			sh_warn("store", "peer %s: a PUT's bytes broke off: %s%s%s", pc->addr,
				shoal_strerror(rc), sh_channel_error(pc->ch)[0] ? ": " : "",
				sh_channel_error(pc->ch));
		pc->put = NULL;
		pc->dst = NULL;
	}
	if (dst.fd >= 0)
		sh_store_copy_region_done(&dst, rc != 0);
	if (rc == 0 && !answered && (rc = sh_memfd_seal(dst.fd)) != 0) {
		snprintf(why, sizeof(why), "sealing its region: %s", shoal_strerror(rc));
		rc = sh_peer_send_error(pc, req, rc, "PUT: %s", why);
		answered = true;
	}
	/* the room a copy holds goes back; adopt counts the region itself */
	sh_store_room_release(s, room.charged);
	if (room.spare_fd >= 0)
		close(room.spare_fd);
	st_obj *o = NULL;
	if (rc == 0 && !answered) {
		int arc = sh_store_adopt_put(s, p.root, &dst.fd, dst.size, p.name, nl, p.flags, &o,
					     why, sizeof(why));
		if (arc)
			rc = sh_peer_send_error(pc, req, arc, "PUT: %s", why);
	}
	if (dst.fd >= 0)
		close(dst.fd);
	sh_bump_fini(&a);
	if (!o)
		return rc;
	sh_store_objinfo oi = sh_store_info(o);
	if (!(p.flags & SHOAL_PERSIST))
		pc->puts[pc->nputs++] = oi.id;
	sh_debug("store", "peer %s: put object %016" PRIx64 ", %" PRIu64 " bytes", pc->addr, oi.id,
		 oi.bytes);
	sh_wbuf body;
	sh_wbuf_init(&body);
	msgpack_packer pk;
	sh_wbuf_packer(&body, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, oi.id);
	msgpack_pack_uint64(&pk, oi.sig);
	rc = sh_peer_send_ok(pc, req, &body);
	sh_wbuf_fini(&body);
	return rc;
}

/* [id | name], as FETCH names an object: it, or an answer saying why
 * not (*o NULL then). */
static int find_key(peer_conn *pc, const sh_frame *req, sh_mp *m, const char *op, st_obj **o)
{
	uint32_t n, len = 0;
	const char *name = NULL;
	uint64_t id = 0;
	*o = NULL;
	if (sh_mp_array(m, &n) || n != 1 ||
	    (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &len) : sh_mp_uint(m, &id)) ||
	    sh_mp_done(m) || (name ? len == 0 || len > SH_NODE_MAX_NAME : id == 0))
		return sh_peer_send_error(pc, req, SHOAL_EBADMSG,
					  "%s: expected [id or name (1 to %d bytes)]", op,
					  SH_NODE_MAX_NAME);
	if ((*o = sh_store_find(pc->cl->s, name, len, id)) != NULL)
		return 0;
	return name ? sh_peer_send_error(pc, req, SHOAL_ENOENT, "no object named \"%.*s\" at %s",
					 (int)(len > 200 ? 200 : len), name, pc->cl->peers->bound)
		    : sh_peer_send_error(pc, req, SHOAL_ENOENT, "no object %016" PRIx64 " at %s",
					 id, pc->cl->peers->bound);
}

int sh_peer_op_delete(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	st_obj *o;
	int rc = find_key(pc, req, m, "DELETE", &o);
	if (!o)
		return rc;
	char why[400];
	if ((rc = sh_store_delete_obj(pc->cl->s, o, why, sizeof(why))) != 0)
		return sh_peer_send_error(pc, req, rc, "DELETE: %s", why);
	return sh_peer_send_ok(pc, req, NULL);
}

typedef struct names_walk {
	msgpack_packer pk;
	sh_wbuf items;
	uint64_t n;
	bool more;
} names_walk;

static bool name_one(void *arg, const sh_store_objinfo *i)
{
	names_walk *w = arg;
	/* as many as fit one answer (names are up to 4 KiB each) */
	if (w->items.len + strlen(i->name) + strlen(i->type) + 64 > SH_PEER_META_MAX) {
		w->more = true;
		return false;
	}
	msgpack_pack_array(&w->pk, 4);
	sh_mp_pack_cstr(&w->pk, i->name);
	msgpack_pack_uint64(&w->pk, i->id);
	sh_mp_pack_cstr(&w->pk, i->type);
	msgpack_pack_uint64(&w->pk, i->bytes);
	w->n++;
	return true;
}

int sh_peer_op_names(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	uint32_t n, plen;
	const char *prefix;
	if (sh_mp_array(m, &n) || n != 1 || sh_mp_str(m, &prefix, &plen) || sh_mp_done(m) ||
	    plen > SH_NODE_MAX_NAME)
		return sh_peer_send_error(pc, req, SHOAL_EBADMSG, "NAMES: expected [prefix]");
	names_walk w = {.n = 0};
	sh_wbuf_init(&w.items);
	sh_wbuf_packer(&w.items, &w.pk);
	sh_store_each_name(pc->cl->s, prefix, plen, name_one, &w);
	sh_wbuf body;
	sh_wbuf_init(&body);
	msgpack_packer pk;
	sh_wbuf_packer(&body, &pk);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_array(&pk, (uint32_t)w.n);
	sh_wbuf_append(&body, w.items.p, w.items.len);
	w.more ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
	int rc = w.items.err || body.err
			 ? sh_peer_send_error(pc, req, SHOAL_ENOMEM, "NAMES: out of memory")
			 : sh_peer_send_ok(pc, req, &body);
	sh_wbuf_fini(&w.items);
	sh_wbuf_fini(&body);
	return rc;
}

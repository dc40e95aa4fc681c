/* The source side of a migration: FETCH lays the object's tree out for
 * the copy's one region and answers with it, then sends share 0 of the
 * blobs' bytes; each link that JOINs the transfer by its token sends one
 * more. The bytes go from a thread per share, read where they lie, while
 * the store goes on serving; the object is held until its last byte is
 * in the socket. */
#include "cluster/peer_impl.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The least bytes a share is worth another link for. */
#define SHARE_MIN (32ull << 20)

/* Rewrites the blobs of o's tree for the copy's one region, in the order
 * of the tree, noting where each one's bytes are here. */
static int layout(shoal_store *s, shoal_node *n, xfer *x, uint64_t *end)
{
	for (uint32_t i = 0; i < n->nblobs; i++) {
		sh_blobref *b = &n->blobs[i];
		sh_store_place at;
		sh_store_blob_place(s, x->o, b, &at);
		if (x->npieces == x->cap) {
			size_t nc = x->cap ? x->cap * 2 : 16;
			piece *q = shoal_realloc(x->pieces, x->cap * sizeof(piece),
						 nc * sizeof(piece));
			if (!q)
				return SHOAL_ENOMEM;
			x->pieces = q;
			x->cap = nc;
		}
		x->pieces[x->npieces++] = (piece){at.mem, at.seg, at.off, b->size};
		x->total += b->size;
		*end = (*end + SH_STORE_BLOB_ALIGN - 1) & ~(uint64_t)(SH_STORE_BLOB_ALIGN - 1);
		b->seg = 1;
		b->off = *end;
		b->inline_data = NULL;
		*end += b->size;
	}
	for (uint32_t i = 0; i < n->nmembers; i++) {
		int rc = layout(s, n->members[i], x, end);
		if (rc)
			return rc;
	}
	return 0;
}

/* Lets go of x once no link sends it: the object with it. */
static void xfer_drop(sh_cluster *cl, xfer *x)
{
	if (--x->holds)
		return;
	if (x->token)
		sh_map_del(&cl->peers->xfers, x->token);
	if (x->all_in)
		shoal_chan_destroy(x->all_in);
	if (x->pieces)
		shoal_free(x->pieces, x->cap * sizeof(piece));
	sh_store_unhold(cl->s, x->o);
	SH_DELETE(x);
}

/* The share's bytes: [lo, hi) of the blobs' bytes laid end to end: from
 * the memory the store has mapped (its arena's small blobs), from segments
 * of huge pages mapped here (populated over what is sent), from the
 * others' files (a mapping would fault 4 KiB pages in one by one: see
 * sh_channel_send_bulk). */
static void *send_main(void *arg)
{
	peer_conn *pc = arg;
	xfer *x = pc->x;
	uint64_t lo, hi, at = 0;
	sh_peer_share(x->total, x->k, pc->share, &lo, &hi);
	uint32_t nsegs = sh_store_nsegs(x->o);
	size_t np = x->npieces ? x->npieces : 1, ns = nsegs ? nsegs : 1;
	sh_bulk_part *v = shoal_alloc(np * sizeof(*v));
	void **maps = shoal_alloc(ns * sizeof(*maps));
	size_t *lens = shoal_alloc(ns * sizeof(*lens));
	int *fds = shoal_alloc(ns * sizeof(*fds));
	size_t n = 0;
	int rc = v && maps && lens && fds ? 0 : SHOAL_ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < nsegs; i++)
		maps[i] = NULL;
	for (uint32_t i = 0; rc == 0 && i < nsegs; i++) {
		uint64_t size;
		bool huge;
		sh_store_seg(pc->cl->s, x->o, i, &fds[i], &size, &huge);
		lens[i] = size;
		if (huge && size)
			rc = sh_shm_map_len(fds[i], &lens[i], false, &maps[i]);
	}
	for (size_t i = 0; rc == 0 && i < x->npieces && at < hi; i++) {
		const piece *q = &x->pieces[i];
		uint64_t a = lo > at ? lo : at, b = at + q->len < hi ? at + q->len : hi;
		at += q->len;
		if (a >= b)
			continue;
		uint64_t off = q->off + (a - (at - q->len));
		if (q->mem) {
			v[n++] = (sh_bulk_part){.p = q->mem + (a - (at - q->len)), .len = b - a};
		} else if (maps[q->seg]) {
			sh_shm_populate_read(maps[q->seg], lens[q->seg], off, b - a);
			v[n++] = (sh_bulk_part){.p = (unsigned char *)maps[q->seg] + off,
						.len = b - a};
		} else {
			v[n++] = (sh_bulk_part){.fd = fds[q->seg], .off = off, .len = b - a};
		}
	}
	/* bounded by the stall */
	if (rc == 0)
		rc = sh_channel_send_bulk(pc->ch, v, n, SHOAL_FOREVER);
	pc->rc = rc;
	for (uint32_t i = 0; maps && lens && i < nsegs; i++)
		sh_shm_unmap(maps[i], lens[i]);
	if (v)
		shoal_free(v, np * sizeof(*v));
	if (maps)
		shoal_free(maps, ns * sizeof(*maps));
	if (lens)
		shoal_free(lens, ns * sizeof(*lens));
	if (fds)
		shoal_free(fds, ns * sizeof(*fds));
	sh_store_post(pc->cl->s, &pc->mail);
	return NULL;
}

/* Sends share pc->share of pc->x from a thread, waiting for it here. */
static int send_share(peer_conn *pc)
{
	xfer *x = pc->x;
	uint64_t lo, hi;
	sh_peer_share(x->total, x->k, pc->share, &lo, &hi);
	if (lo == hi)
		return 0;
	int rc = sh_peer_in_thread(pc, send_main);
	if (rc)
		sh_warn("store",
			"peer %s: sending share %u of %u of object %016" PRIx64 " failed: %s%s%s",
			pc->addr, pc->share, x->k, sh_store_info(x->o).id, shoal_strerror(rc),
			sh_channel_error(pc->ch)[0] ? ": " : "", sh_channel_error(pc->ch));
	return rc;
}

int sh_peer_op_fetch(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	sh_cluster *cl = pc->cl;
	shoal_store *s = cl->s;
	sh_peers *p = cl->peers;
	uint32_t n;
	uint64_t k;
	st_obj *o = NULL;
	const char *name = NULL;
	uint32_t len = 0;
	uint64_t id = 0;
	if (sh_mp_array(m, &n) || n != 2 ||
	    (sh_mp_kind(m) == SH_MP_STR ? sh_mp_str(m, &name, &len) : sh_mp_uint(m, &id)) ||
	    sh_mp_uint(m, &k) || k == 0 || k > SH_PEER_STREAMS_MAX || sh_mp_done(m))
		return sh_peer_send_error(pc, req, SHOAL_EBADMSG,
					  "FETCH: expected [id or name, streams (1 to %d)]",
					  SH_PEER_STREAMS_MAX);
	if (!(o = sh_store_find(s, name, len, id)))
		return name ? sh_peer_send_error(pc, req, SHOAL_ENOENT,
						 "no object named \"%.*s\" at %s",
						 (int)(len > 200 ? 200 : len), name, p->bound)
			    : sh_peer_send_error(pc, req, SHOAL_ENOENT,
						 "no object %016" PRIx64 " at %s", id, p->bound);
	sh_store_objinfo oi = sh_store_info(o);
	xfer *x = SH_NEW(xfer);
	if (!x)
		return sh_peer_send_error(pc, req, SHOAL_ENOMEM, "FETCH: out of memory");
	x->o = o;
	x->holds = 1;
	sh_store_hold(s, o); /* until its last byte left: the pieces name its segments */
	sh_bump a = {0};
	shoal_node *root;
	char why[256];
	uint64_t end = 0;
	int rc = sh_store_resident(s, o, why, sizeof(why));
	if (rc == 0)
		rc = sh_store_tree(o, &a, &root, why, sizeof(why));
	if (rc == 0)
		rc = layout(s, root, x, &end);
	/* as many links as asked, each with a share worth a link's set-up */
	x->k = (uint32_t)(x->total / SHARE_MIN < k ? x->total / SHARE_MIN : k);
	x->k = x->k ? x->k : 1;
	if (rc == 0 && x->k > 1) {
		x->token = ++p->next_token;
		if ((rc = shoal_chan_create(&x->all_in, 1, 0)) == 0 &&
		    sh_map_put(&p->xfers, x->token, x) != 0)
			rc = SHOAL_ENOMEM;
	}
	if (rc == 0) {
		sh_wbuf_reset(&pc->out);
		sh_peer_fetch_reply r = {.id = oi.id,
					 .sig = oi.sig,
					 .region = end,
					 .name = oi.name,
					 .root = root,
					 .token = x->token,
					 .k = x->k};
		rc = sh_peer_pack_reply(&pc->out, req->seq, &r);
	}
	sh_bump_fini(&a);
	if (rc) {
		xfer_drop(cl, x);
		return sh_peer_send_error(pc, req, rc, "FETCH: %s", shoal_strerror(rc));
	}
	rc = sh_channel_write(pc->ch, pc->out.p, pc->out.len, true,
			      shoal_deadline_in(PEER_STALL_NS));
	if (rc == 0) {
		pc->x = x;
		pc->share = 0;
		rc = send_share(pc);
		pc->x = NULL;
	}
	/* the other shares' links may still be on their way: the object
	 * stays for them a while, then no more may join */
	if (x->all_in && x->joined + 1 < x->k && rc == 0) {
		char c;
		shoal_chan_recv(x->all_in, &c, shoal_deadline_in(PEER_STALL_NS));
	}
	if (x->token) {
		sh_map_del(&p->xfers, x->token);
		x->token = 0;
	}
	if (rc == 0 && x->joined + 1 == x->k) {
		cl->sent++;
		cl->sent_bytes += oi.bytes;
		sh_debug("store",
			 "peer %s: sent object %016" PRIx64 ", %" PRIu64 " bytes in %u "
			 "shares",
			 pc->addr, oi.id, oi.bytes, x->k);
	}
	xfer_drop(cl, x);
	return rc;
}

int sh_peer_op_join(peer_conn *pc, const sh_frame *req, sh_mp *m)
{
	sh_cluster *cl = pc->cl;
	uint32_t n;
	uint64_t token, i;
	if (sh_mp_array(m, &n) || n != 2 || sh_mp_uint(m, &token) || sh_mp_uint(m, &i) ||
	    sh_mp_done(m))
		return sh_peer_send_error(pc, req, SHOAL_EBADMSG, "JOIN: expected [token, share]");
	xfer *x = token ? sh_map_get(&cl->peers->xfers, token) : NULL;
	if (!x || i == 0 || i >= x->k || x->joined + 1 >= x->k)
		return sh_peer_send_error(
			pc, req, SHOAL_ENOENT,
			"JOIN: no transfer %" PRIu64 " waiting for share %" PRIu64, token, i);
	x->holds++;
	if (++x->joined + 1 == x->k && !x->in_closed) {
		x->in_closed = true;
		shoal_chan_close(x->all_in);
	}
	sh_wbuf_reset(&pc->out);
	sh_wbuf_frame_begin(&pc->out);
	msgpack_packer pk;
	sh_wbuf_packer(&pc->out, &pk);
	msgpack_pack_array(&pk, 0);
	sh_frame f = {.op = req->op, .seq = req->seq};
	int rc = sh_wbuf_frame_end(&pc->out, &f);
	if (rc == 0)
		rc = sh_channel_write(pc->ch, pc->out.p, pc->out.len, true,
				      shoal_deadline_in(PEER_STALL_NS));
	if (rc == 0) {
		pc->x = x;
		pc->share = (uint32_t)i;
		rc = send_share(pc);
		pc->x = NULL;
	}
	xfer_drop(cl, x);
	return rc;
}

/* The peer protocol's messages (cluster.h) as they go: a FETCH's answer
 * and a PUT's request packed, and both decoded from outside bytes with
 * the checks of a client's seal request (fuzz/fuzz_peer_reply.c,
 * fuzz_peer_put.c), and a peer's failure read. Shared by the source
 * (peer.c), the fetching side (migrate.c) and remote clients (remote.c). */
#include "cluster/cluster.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The blobs' places in the region, in the tree's order: each inside it. */
static int check_layout(const shoal_node *n, uint64_t region, uint64_t *total, uint64_t *nblobs)
{
	for (uint32_t i = 0; i < n->nblobs; i++) {
		const sh_blobref *b = &n->blobs[i];
		if (b->inline_data || b->seg != 1 || b->off > region || b->size > region - b->off)
			return SHOAL_EBADMSG;
		*total += b->size;
		++*nblobs;
	}
	for (uint32_t i = 0; i < n->nmembers; i++)
		if (check_layout(n->members[i], region, total, nblobs))
			return SHOAL_EBADMSG;
	return 0;
}

static void list_blobs(const shoal_node *n, sh_mig_blob *v, uint64_t *k)
{
	for (uint32_t i = 0; i < n->nblobs; i++)
		v[(*k)++] = (sh_mig_blob){n->blobs[i].off, n->blobs[i].size};
	for (uint32_t i = 0; i < n->nmembers; i++)
		list_blobs(n->members[i], v, k);
}

int sh_peer_blobs(const shoal_node *root, uint64_t region, sh_bump *a, sh_mig_blob **blobs,
		  uint64_t *nblobs, uint64_t *total, char *why, size_t whylen)
{
	*nblobs = *total = 0;
	if (check_layout(root, region, total, nblobs)) {
		snprintf(why, whylen, "a blob outside the region of %" PRIu64 " bytes", region);
		return SHOAL_EBADMSG;
	}
	if (!(*blobs = sh_bump_alloc(a, (*nblobs ? *nblobs : 1) * sizeof(sh_mig_blob)))) {
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	uint64_t j = 0;
	list_blobs(root, *blobs, &j);
	return 0;
}

/* The tree at mm (a FETCH's answer's, a PUT's: outside bytes) into *root,
 * checked as a client's seal request is (the same decoder and checks),
 * every blob inside the one region of region bytes (their places into
 * *blobs); name (nl bytes, or NULL) copied NUL-terminated into *name_out.
 * All from a. */
static int read_tree(sh_mp *mm, uint64_t region, const char *name, uint32_t nl, sh_bump *a,
		     shoal_node **root, sh_mig_blob **blobs, uint64_t *nblobs, uint64_t *total,
		     char **name_out, char *why, size_t whylen)
{
	int rc = sh_node_decode(mm, a, root, why, whylen);
	if (rc == 0 && sh_mp_done(mm))
		rc = SHOAL_EBADMSG, snprintf(why, whylen, "trailing bytes after the node");
	if (rc == 0)
		rc = sh_node_check_types(*root, why, whylen);
	if (rc == 0)
		rc = sh_peer_blobs(*root, region, a, blobs, nblobs, total, why, whylen);
	if (rc == 0 && name && !(*name_out = sh_bump_alloc(a, nl + 1)))
		rc = SHOAL_ENOMEM, snprintf(why, whylen, "out of memory");
	if (rc == 0 && name) {
		memcpy(*name_out, name, nl);
		(*name_out)[nl] = 0;
	}
	return rc;
}

int sh_peer_failure(int status, sh_mp *m, char *why, size_t whylen)
{
	uint32_t n, ml;
	const char *msg;
	if (status > 0 || sh_mp_array(m, &n) || n != 1 || sh_mp_str(m, &msg, &ml)) {
		snprintf(why, whylen, "a failure without a message");
		return SHOAL_EPROTO;
	}
	if (sh_mp_done(m)) {
		snprintf(why, whylen,
			 "a failure (%s) with bytes after its message: expected [message]",
			 shoal_strerror(status));
		return SHOAL_EPROTO;
	}
	/* its own codes only: a peer's status goes on to our clients */
	if (!strncmp(shoal_strerror(status), "SHOAL_E?", 8))
		status = SHOAL_EPROTO;
	if (ml == 0 || msg[0] == 0)
		snprintf(why, whylen, "it failed (%s) without a message", shoal_strerror(status));
	else
		snprintf(why, whylen, "%.*s", (int)(ml > 400 ? 400 : ml), msg);
	return status;
}

int sh_mig_parse_reply(const void *buf, size_t len, sh_mig_reply *out, sh_bump *a, char *why,
		       size_t whylen)
{
	memset(out, 0, sizeof(*out));
	sh_frame r;
	sh_mp m;
	why[0] = 0;
	if (sh_frame_decode(buf, len, &r, why, whylen) != 0 || r.op != SH_PEER_FETCH ||
	    r.seq != 1 || r.oob) {
		if (!why[0])
			snprintf(why, whylen,
				 "an answer out of step (op, sequence or out-of-band)");
		return SHOAL_EPROTO;
	}
	sh_mp_init(&m, (const unsigned char *)buf + SH_FRAME_HDR, r.body_len);
	uint32_t n, ml;
	if (r.status)
		return sh_peer_failure(r.status, &m, why, whylen);
	const void *meta;
	uint64_t k;
	if (sh_mp_array(&m, &n) || n != 6 || sh_mp_uint(&m, &out->id) ||
	    sh_mp_uint(&m, &out->sig) || sh_mp_uint(&m, &out->region) ||
	    sh_mp_bin(&m, &meta, &ml) || sh_mp_uint(&m, &out->token) || sh_mp_uint(&m, &k) ||
	    sh_mp_done(&m) || out->id == 0 || k == 0 || k > SH_PEER_STREAMS_MAX ||
	    (k > 1) != (out->token != 0)) {
		snprintf(why, whylen,
			 "FETCH answered with something else than [id, signature, "
			 "bytes, metadata, token, streams]");
		return SHOAL_EPROTO;
	}
	/* a region no store has: its rounding to pages (the room it is
	 * charged) must not wrap */
	if (out->region > SH_PEER_REGION_MAX) {
		snprintf(why, whylen,
			 "FETCH answered with a region of %" PRIu64 " bytes: expected at most %llu",
			 out->region, (unsigned long long)SH_PEER_REGION_MAX);
		return SHOAL_EBADMSG;
	}
	out->k = (uint32_t)k;
	/* the metadata is as hostile as a client's seal request: the same
	 * decoder and checks, and every blob inside the one region */
	sh_mp mm;
	sh_mp_init(&mm, meta, ml);
	const char *name = NULL;
	uint32_t nl = 0;
	if (sh_mp_array(&mm, &n) || n != 2 ||
	    (!sh_mp_take_nil(&mm) && (sh_mp_str(&mm, &name, &nl) || nl == 0 ||
				      nl > SH_NODE_MAX_NAME || memchr(name, 0, nl)))) {
		snprintf(why, whylen, "bad metadata: expected [name or nil, node]");
		return SHOAL_EBADMSG;
	}
	return read_tree(&mm, out->region, name, nl, a, &out->root, &out->blobs, &out->nblobs,
			 &out->total, &out->name, why, whylen);
}

int sh_peer_pack_reply(sh_wbuf *w, uint32_t seq, const sh_peer_fetch_reply *r)
{
	sh_wbuf meta;
	sh_wbuf_init(&meta);
	msgpack_packer pk;
	sh_wbuf_packer(&meta, &pk);
	msgpack_pack_array(&pk, 2);
	if (r->name)
		sh_mp_pack_cstr(&pk, r->name);
	else
		msgpack_pack_nil(&pk);
	sh_node_pack(&pk, r->root);
	sh_wbuf_frame_begin(w);
	sh_wbuf_packer(w, &pk);
	msgpack_pack_array(&pk, 6);
	msgpack_pack_uint64(&pk, r->id);
	msgpack_pack_uint64(&pk, r->sig);
	msgpack_pack_uint64(&pk, r->region);
	msgpack_pack_bin(&pk, meta.len);
	msgpack_pack_bin_body(&pk, meta.p, meta.len);
	msgpack_pack_uint64(&pk, r->token);
	msgpack_pack_uint32(&pk, r->k);
	sh_frame f = {.op = SH_PEER_FETCH, .seq = seq};
	int rc = meta.err || w->err ? SHOAL_ENOMEM : sh_wbuf_frame_end(w, &f);
	sh_wbuf_fini(&meta);
	return rc;
}

int sh_peer_parse_put(sh_mp *m, sh_peer_put *out, sh_bump *a, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	uint32_t n, nl = 0, ml;
	const char *name = NULL;
	const void *meta;
	uint64_t flags;
	if (sh_mp_array(m, &n) || n != 4 ||
	    (!sh_mp_take_nil(m) && (sh_mp_str(m, &name, &nl) || nl == 0 || nl > SH_NODE_MAX_NAME ||
				    memchr(name, 0, nl))) ||
	    sh_mp_uint(m, &flags) || (flags & ~(uint64_t)(SHOAL_PERSIST | SHOAL_REPLACE)) ||
	    sh_mp_uint(m, &out->region) || sh_mp_bin(m, &meta, &ml) || sh_mp_done(m)) {
		snprintf(why, whylen,
			 "expected [name or nil (1 to %d bytes, no NUL), flags (PERSIST|REPLACE), "
			 "region bytes, metadata]",
			 SH_NODE_MAX_NAME);
		return SHOAL_EBADMSG;
	}
	/* a region no store has: its rounding to pages must not wrap */
	if (out->region > SH_PEER_REGION_MAX) {
		snprintf(why, whylen, "a region of %" PRIu64 " bytes: expected at most %llu",
			 out->region, (unsigned long long)SH_PEER_REGION_MAX);
		return SHOAL_EBADMSG;
	}
	out->flags = (unsigned)flags;
	/* the tree is as hostile as a client's seal request: the same
	 * decoder and checks, and every blob inside the one region */
	sh_mp mm;
	sh_mp_init(&mm, meta, ml);
	return read_tree(&mm, out->region, name, nl, a, &out->root, &out->blobs, &out->nblobs,
			 &out->total, &out->name, why, whylen);
}

int sh_peer_pack_put(sh_wbuf *w, const char *name, unsigned flags, uint64_t region,
		     const shoal_node *root)
{
	sh_wbuf meta;
	sh_wbuf_init(&meta);
	msgpack_packer pk;
	sh_wbuf_packer(&meta, &pk);
	sh_node_pack(&pk, root);
	sh_wbuf_frame_begin(w);
	sh_wbuf_packer(w, &pk);
	msgpack_pack_array(&pk, 4);
	if (name)
		sh_mp_pack_cstr(&pk, name);
	else
		msgpack_pack_nil(&pk);
	msgpack_pack_uint32(&pk, flags);
	msgpack_pack_uint64(&pk, region);
	msgpack_pack_bin(&pk, meta.len);
	msgpack_pack_bin_body(&pk, meta.p, meta.len);
	sh_frame f = {.op = SH_PEER_PUT, .seq = 1};
	int rc = meta.err || w->err ? SHOAL_ENOMEM : sh_wbuf_frame_end(w, &f);
	sh_wbuf_fini(&meta);
	return rc;
}

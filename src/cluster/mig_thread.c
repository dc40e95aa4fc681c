/* A migration's thread (migrate.c starts it): connects to the source, or
 * takes an idle link to it from the pool, proves the secret, sends FETCH,
 * has the store's thread check the answer and reserve the room, and
 * writes every blob straight into the new region as its records come,
 * beside a thread for each other share the source grants, which JOINs the
 * transfer on a link of its own. A link that ended its exchange cleanly
 * is kept for the next fetch from the same store. */
#include "cluster/migrate_impl.h"
#include "shm/shm.h"
#include "store/proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A link to the source, the secret proven: its socket is in fds[slot]
 * (under mu), which a stop or a failed share shuts down. */
typedef struct link_slot {
	mig *g;
	uint32_t slot;
} link_slot;

/* The link's socket, where a stop can end it (sh_mig_cut). */
static void link_fd(int fd, void *arg)
{
	link_slot *ls = arg;
	mig *g = ls->g;
	pthread_mutex_lock(&g->mu);
	g->fds[ls->slot] = fd;
	if (g->cut && fd >= 0)
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&g->mu);
}

/* A link to the source: tried again with backoff while the source turns
 * strangers away (sh_tcp_open_auth), within MIG_CONNECT_NS. */
static int link_open(mig *g, uint32_t slot, sh_channel **ch, char *why, size_t whylen)
{
	sh_cluster *cl = g->cl;
	link_slot ls = {g, slot};
	int fd = -1;
	int rc = sh_tcp_open_auth(g->from, cl->key, cl->klen, SH_PEER_PROTO,
				  cl->opts->peer_no_encrypt, shoal_deadline_in(MIG_CONNECT_NS),
				  link_fd, &ls, &fd, ch, why, whylen);
	if (rc == 0)
		sh_channel_set_stall(*ch, MIG_STALL_NS);
	return rc;
}

static void link_close(mig *g, uint32_t slot, sh_channel *ch)
{
	sh_channel_free(ch);
	pthread_mutex_lock(&g->mu); /* a stop may be shutting it down */
	if (g->fds[slot] >= 0)
		close(g->fds[slot]);
	g->fds[slot] = -1;
	pthread_mutex_unlock(&g->mu);
}

/* Ends every link of g: its other shares fail at once. */
void sh_mig_cut(mig *g)
{
	pthread_mutex_lock(&g->mu);
	g->cut = true;
	for (uint32_t i = 0; i < SH_PEER_STREAMS_MAX; i++)
		if (g->fds[i] >= 0)
			shutdown(g->fds[i], SHUT_RDWR);
	pthread_mutex_unlock(&g->mu);
}

static int send_request(sh_channel *ch, uint16_t op, uint64_t a, const char *name, size_t nl,
			uint64_t b)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_wbuf_frame_begin(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_array(&pk, 2);
	if (name) {
		msgpack_pack_str(&pk, nl);
		msgpack_pack_str_body(&pk, name, nl);
	} else {
		msgpack_pack_uint64(&pk, a);
	}
	msgpack_pack_uint64(&pk, b);
	sh_frame f = {.op = op, .seq = 1};
	int rc = w.err ? SHOAL_ENOMEM : sh_wbuf_frame_end(&w, &f);
	if (rc == 0)
		rc = sh_channel_write(ch, w.p, w.len, false, shoal_deadline_in(MIG_STALL_NS));
	sh_wbuf_fini(&w);
	return rc;
}

/* A source must keep this rate while its bytes come (--peer-min-rate). */
#define MIG_RATE_WINDOW_NS (5 * 1000000000LL)
#define MIG_MIN_RATE 1000000u

int sh_peer_recv_blobs(sh_channel *ch, const sh_mig_blob *blobs, uint64_t nblobs, uint64_t lo,
		       uint64_t hi, const sh_store_region *dst, uint64_t min_rate, int64_t deadline,
		       _Atomic uint64_t *got)
{
	sh_channel_set_min_rate(ch, min_rate ? min_rate : MIG_MIN_RATE, MIG_RATE_WINDOW_NS);
	uint64_t at = 0;
	size_t n = 0, cap = 0;
	sh_fd_range *v = NULL;
	int rc = 0;
	for (uint64_t j = 0; rc == 0 && j < nblobs && at < hi; j++) {
		const sh_mig_blob *b = &blobs[j];
		uint64_t x = lo > at ? lo : at, y = at + b->size < hi ? at + b->size : hi;
		if (x < y) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				sh_fd_range *q =
					shoal_realloc(v, cap * sizeof(*v), nc * sizeof(*v));
				if (!q) {
					rc = SHOAL_ENOMEM;
					break;
				}
				v = q;
				cap = nc;
			}
			v[n++] = (sh_fd_range){b->off + (x - at), y - x};
		}
		at += b->size;
	}
	if (rc == 0)
		rc = sh_channel_recv_ranges(ch, dst->fd, dst->map, v, n, deadline, got);
	sh_channel_set_min_rate(ch, 0, 0); /* a link kept idle owes no rate */
	if (v)
		shoal_free(v, cap * sizeof(*v));
	return rc;
}

/* Share i of the blobs' bytes, written at their places in the region. */
static int recv_share(mig *g, sh_channel *ch, uint32_t i)
{
	const sh_mig_reply *r = &g->r;
	uint64_t lo, hi;
	sh_peer_share(r->total, r->k, i, &lo, &hi);
	return sh_peer_recv_blobs(ch, r->blobs, r->nblobs, lo, hi, &g->region_of,
				  g->cl->opts->peer_min_rate, SHOAL_FOREVER, &g->received);
}

typedef struct share {
	mig *g;
	uint32_t i;
	pthread_t th;
	int rc;
	char why[256];
} share;

/* Another link: JOIN the transfer, receive share i. */
static void *share_main(void *arg)
{
	share *sh = arg;
	mig *g = sh->g;
	sh_channel *ch = NULL;
	int rc = link_open(g, sh->i, &ch, sh->why, sizeof(sh->why));
	if (rc == 0)
		rc = send_request(ch, SH_PEER_JOIN, g->r.token, NULL, 0, sh->i);
	unsigned char *in = NULL;
	size_t cap = 0, len;
	if (rc == 0)
		rc = sh_channel_read_frame(ch, &in, &cap, &len, 4096, false,
					   shoal_deadline_in(MIG_STALL_NS));
	sh_frame f;
	if (rc == 0 && (sh_frame_decode(in, len, &f, sh->why, sizeof(sh->why)) != 0 ||
			f.op != SH_PEER_JOIN || f.seq != 1 || f.oob || f.status)) {
		rc = f.status < 0 ? f.status : SHOAL_EPROTO;
		snprintf(sh->why, sizeof(sh->why), "JOIN refused");
	}
	if (in)
		shoal_free(in, cap);
	if (rc == 0 && (rc = recv_share(g, ch, sh->i)) != 0)
		snprintf(sh->why, sizeof(sh->why), "%s", sh_channel_error(ch));
	if (rc == 0 && sh_channel_pending(ch)) {
		rc = SHOAL_EPROTO;
		snprintf(sh->why, sizeof(sh->why),
			 "bytes came after share %u's: expected it to end there", sh->i);
	}
	if (rc)
		sh_mig_cut(g);
	link_close(g, sh->i, ch);
	sh->rc = rc;
	return NULL;
}

/* An idle link to g->from, as slot 0 of g's: true if there was one. */
static bool link_take(mig *g, sh_channel **ch)
{
	sh_migs *ms = g->cl->migs;
	int64_t now = shoal_now_ns();
	int fd = -1;
	pthread_mutex_lock(&ms->pool_mu);
	for (int i = ms->npool - 1; i >= 0 && fd < 0; i--) {
		idle_link *l = &ms->pool[i];
		bool stale = now - l->since > POOL_IDLE_NS;
		if (!stale && strcmp(l->from, g->from))
			continue;
		if (!stale) {
			fd = l->fd;
			*ch = l->ch;
		} else {
			sh_channel_free(l->ch);
			close(l->fd);
		}
		ms->pool[i] = ms->pool[--ms->npool];
	}
	pthread_mutex_unlock(&ms->pool_mu);
	if (fd < 0)
		return false;
	pthread_mutex_lock(&g->mu);
	g->fds[0] = fd;
	pthread_mutex_unlock(&g->mu);
	return true;
}

/* Keeps g's first link for the next fetch from the same store. */
static void link_keep(mig *g, sh_channel *ch)
{
	sh_migs *ms = g->cl->migs;
	pthread_mutex_lock(&g->mu);
	int fd = g->fds[0];
	g->fds[0] = -1;
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_lock(&ms->pool_mu);
	if (ms->npool == POOL_MAX) { /* the oldest goes */
		int old = 0;
		for (int i = 1; i < ms->npool; i++)
			if (ms->pool[i].since < ms->pool[old].since)
				old = i;
		sh_channel_free(ms->pool[old].ch);
		close(ms->pool[old].fd);
		ms->pool[old] = ms->pool[--ms->npool];
	}
	idle_link *l = &ms->pool[ms->npool++];
	snprintf(l->from, sizeof(l->from), "%s", g->from);
	l->fd = fd;
	l->ch = ch;
	l->since = shoal_now_ns();
	pthread_mutex_unlock(&ms->pool_mu);
}

/* FETCH on a link, its answer into g->in: a kept link the source may
 * have closed meanwhile is replaced by a fresh one, once. */
static int ask(mig *g, size_t *len, char *why, size_t whylen)
{
	sh_channel *ch = NULL;
	bool kept = link_take(g, &ch);
	for (;;) {
		int rc = 0;
		if (!kept && (rc = link_open(g, 0, &ch, why, whylen)) != 0) {
			g->ch = ch;
			return sh_say(g->why, sizeof(g->why), rc,
				      "cannot reach the store at %s: %s", g->from, why);
		}
		g->ch = ch;
		rc = send_request(ch, SH_PEER_FETCH, g->key_id, g->key_name, g->key_len,
				  g->streams ? g->streams : SHOAL_MIGRATE_STREAMS);
		if (rc == 0)
			rc = sh_channel_read_frame(ch, &g->in, &g->in_cap, len,
						   SH_PEER_META_MAX + 4096, false,
						   shoal_deadline_in(MIG_STALL_NS));
		if (rc == 0)
			return 0;
		if (kept && (rc == SHOAL_ECLOSED || rc == SHOAL_ECONNRESET || rc == SHOAL_EPROTO)) {
			link_close(g, 0, ch);
			g->ch = ch = NULL;
			kept = false;
			continue;
		}
		if (rc == SHOAL_EMSGSIZE)
			return sh_say(
				g->why, sizeof(g->why), rc,
				"the store at %s answered FETCH with a frame over %u bytes: "
				"expected an answer of at most %u (a metadata tree of at most "
				"%u bytes)",
				g->from, SH_PEER_META_MAX + 4096, SH_PEER_META_MAX + 4096,
				SH_PEER_META_MAX);
		return sh_say(g->why, sizeof(g->why), rc, "the store at %s: %s%s%s", g->from,
			      shoal_strerror(rc), sh_channel_error(ch)[0] ? ": " : "",
			      sh_channel_error(ch));
	}
}

/* What came against what the registry's signed record says: the same id,
 * signature, type, bytes and tree (its digest). */
static int expect_check(mig *g, char *why, size_t wl)
{
	if (!g->has_expect)
		return 0;
	unsigned char d[32];
	int rc = sh_node_digest(g->r.root, d);
	if (rc) {
		snprintf(why, wl, "the answer's tree could not be digested: %s",
			 shoal_strerror(rc));
		return rc;
	}
	const char *what = g->r.sig != g->x_sig			? "signature"
			   : strcmp(g->r.root->type, g->x_type) ? "type"
			   : g->r.total != g->x_bytes		? "bytes"
			   : memcmp(d, g->x_meta, 32) != 0	? "metadata (its digest)"
								: NULL;
	if (!what)
		return 0;
	snprintf(why, wl,
		 "object %016" PRIx64 " came with another %s than the registry's signed record "
		 "(type %.40s, %" PRIu64 " bytes; the record: %.40s, %" PRIu64 " bytes): refused",
		 g->r.id, what, g->r.root->type, g->r.total, g->x_type, g->x_bytes);
	return SHOAL_EPROTO;
}

static int fetch(mig *g)
{
	char why[256];
	size_t len = 0;
	int rc = ask(g, &len, why, sizeof(why));
	if (rc)
		return rc;
	sh_channel *ch = g->ch;
	if ((rc = sh_mig_parse_reply(g->in, len, &g->r, &g->a, why, sizeof(why))) != 0) {
		g->in_step = rc < 0 && rc != SHOAL_EPROTO && rc != SHOAL_EBADMSG;
		return g->in_step ? sh_say(g->why, sizeof(g->why), rc, "%s", why)
				  : sh_say(g->why, sizeof(g->why), rc, "the store at %s: %s",
					   g->from, why);
	}
	/* What comes is what was asked for: the id, or the name, which the
	 * copy is bound to (never a name the source gives instead) */
	if (g->key_id && g->r.id != g->key_id)
		return sh_say(g->why, sizeof(g->why), SHOAL_EPROTO,
			      "the store at %s sent object %016" PRIx64 " for %016" PRIx64
			      ": expected the object asked for",
			      g->from, g->r.id, g->key_id);
	if (g->key_name && (!g->r.name || strcmp(g->r.name, g->key_name) != 0))
		return sh_say(g->why, sizeof(g->why), SHOAL_EPROTO,
			      "the store at %s answered for \"%.200s\" with %s%.200s%s: expected "
			      "the object named \"%.200s\"",
			      g->from, g->key_name, g->r.name ? "\"" : "",
			      g->r.name ? g->r.name : "an unnamed object", g->r.name ? "\"" : "",
			      g->key_name);
	if ((rc = expect_check(g, why, sizeof(why))) != 0)
		return sh_say(g->why, sizeof(g->why), rc, "the store at %s: %s", g->from, why);
	g->id = g->r.id;
	g->sig = g->r.sig;
	g->region = g->r.region;
	g->root = g->r.root;
	g->total = g->r.total;
	if (g->key_name && !(g->name = shoal_alloc(g->key_len + 1)))
		return sh_say(g->why, sizeof(g->why), SHOAL_ENOMEM, "out of memory");
	if (g->key_name)
		memcpy(g->name, g->key_name, g->key_len + 1);
	/* is it here already, is there room? */
	g->answered = false;
	g->mail.fn = sh_mig_on_meta;
	sh_store_post(g->cl->s, &g->mail);
	pthread_mutex_lock(&g->mu);
	while (!g->answered)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	if (g->verdict == 1)
		return 0; /* a copy is here: nothing to receive (the link is out of step) */
	if (g->verdict)
		return g->verdict;
	/* the room's spare, or a fresh region: with a mapping (huge pages, a
	 * spare) the bytes are received into it, no fault a 4 KiB page, no
	 * write(2), which hugetlbfs has not; fresh 4 KiB pages would be faulted
	 * one by one there, the kernel's pwritev is cheaper */
	if ((rc = sh_store_copy_region(g->cl->s, g->region, &g->room, &g->region_of)) != 0)
		return sh_say(g->why, sizeof(g->why), rc,
			      "object %016" PRIx64 ": a region of %" PRIu64 " bytes: %s", g->id,
			      g->region, shoal_strerror(rc));
	share sh[SH_PEER_STREAMS_MAX];
	uint32_t started = 1;
	for (; started < g->r.k; started++) {
		sh[started] = (share){.g = g, .i = started};
		if (pthread_create(&sh[started].th, NULL, share_main, &sh[started]) != 0)
			break;
	}
	if (started < g->r.k)
		sh_mig_cut(g);
	rc = started < g->r.k ? SHOAL_ENOMEM : recv_share(g, ch, 0);
	const char *cause = rc && rc != SHOAL_ENOMEM ? sh_channel_error(ch) : "";
	if (rc)
		sh_mig_cut(g);
	for (uint32_t i = 1; i < started; i++) {
		pthread_join(sh[i].th, NULL);
		if (!rc && sh[i].rc) {
			rc = sh[i].rc;
			cause = sh[i].why;
		}
	}
	/* every page the copy needs exists, and no writable mapping may
	 * remain for the seal */
	sh_store_copy_region_done(&g->region_of, rc != 0);
	if (rc)
		return sh_say(g->why, sizeof(g->why), rc,
			      "object %016" PRIx64 " from %s: the transfer broke after %" PRIu64
			      " of %" PRIu64 " bytes: %s%s%s",
			      g->id, g->from, (uint64_t)atomic_load(&g->received), g->total,
			      shoal_strerror(rc), cause[0] ? ": " : "", cause);
	if (sh_channel_pending(ch))
		return sh_say(g->why, sizeof(g->why), SHOAL_EPROTO,
			      "object %016" PRIx64 " from %s: bytes came after the %" PRIu64
			      " its answer announced: expected the transfer to end there",
			      g->id, g->from, g->total);
	g->in_step = g->r.k == 1; /* every byte of the one link read */
	if ((rc = sh_memfd_seal(g->region_of.fd)) != 0)
		return sh_say(g->why, sizeof(g->why), rc,
			      "object %016" PRIx64 ": sealing its region: %s", g->id,
			      shoal_strerror(rc));
	return 0;
}

void *sh_mig_main(void *arg)
{
	mig *g = arg;
	g->rc = fetch(g);
	if ((g->rc || g->verdict == 1) && g->region_of.fd >= 0) {
		close(g->region_of.fd);
		g->region_of.fd = -1;
	}
	if (g->in_step && g->ch)
		link_keep(g, g->ch);
	else
		link_close(g, 0, g->ch);
	g->ch = NULL;
	if (g->in)
		shoal_free(g->in, g->in_cap);
	g->in = NULL;
	g->mail.fn = sh_mig_on_end;
	sh_store_post(g->cl->s, &g->mail);
	return NULL;
}

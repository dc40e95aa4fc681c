/* The task controller's links to engines and clients: on this host
 * links (rings), from others TCP (the secure channel of net.h). A fiber
 * per connection reads what it sends (clients' SUBMITs, engines' DONEs);
 * a writer fiber per connection sends its batches (RUNs to an engine,
 * RESULTS to a client), so that a reader never blocks on a full ring or
 * socket of another connection. Arguments and results are forwarded as
 * the bytes their sender encoded; only ids, options and statuses are read
 * (proto.h). Each connection's fiber is a member of its listener's group
 * (controller.c), which the controller joins as it stops. */
#include "shm/shm.h"
#include "store/proto.h"
#include "tasks/controller_impl.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the two transports: rings on this host, a stream over TCP ---- */

static int conn_send(tk_conn *c, const void *p, size_t n)
{
	return c->tcp >= 0 ? sh_channel_write(c->ch, p, n, true, SHOAL_FOREVER)
			   : sh_msg_write(&c->l.down, p, n, SHOAL_FOREVER);
}

static int conn_read(tk_conn *c, size_t *len)
{
	size_t got = 0;
	return c->tcp >= 0 ? sh_channel_read_frame(c->ch, &c->in, &c->in_cap, len, SH_TASKS_MSG_MAX,
						   true, SHOAL_FOREVER)
			   : sh_msg_read_part(&c->l.up, &c->in, &c->in_cap, &got, len,
					      SH_TASKS_MSG_MAX, SHOAL_FOREVER);
}

/* Ends the connection's traffic: its fibers wake and see it. */
void sh_ctl_conn_shut(tk_conn *c)
{
	c->shut = true;
	if (c->bell)
		sh_ctl_ring(c->bell);
	if (c->tcp >= 0)
		shutdown(c->tcp, SHUT_RDWR);
	else
		sh_link_shut(&c->l);
}

/* ---- writers ---- */

/* A doorbell is a channel of one byte and capacity one: ringing it twice
 * before its fiber looks is ringing it once. Its fiber, on this thread,
 * checks what it waits for after each ring. */
void sh_ctl_ring(shoal_chan *bell)
{
	char one = 1;
	if (shoal_chan_len(bell) == 0)
		shoal_chan_send(bell, &one, SHOAL_FOREVER); /* room for it: never waits */
}

/* The clients held back look again (fewer bytes held, or more engines). */
void sh_ctl_wake_held(shoal_controller *ctl)
{
	if (!ctl->nheld_back)
		return;
	for (tk_client *c = ctl->clients; c; c = c->next)
		if (c->c.held_back)
			sh_ctl_ring(c->c.bell);
}

void sh_ctl_kick(tk_conn *c)
{
	if (c->gone || c->kick_pending)
		return;
	c->kick_pending = true;
	char one = 1;
	/* capacity 1 and at most one in flight: never blocks */
	shoal_chan_send(c->kick, &one, SHOAL_FOREVER);
}

/* For whom the engine seals t's large results (0: nobody, inline). */
uint64_t sh_ctl_owner_of(const tk_task *t)
{
	return t->client && !t->client->c.gone ? t->client->owner : 0;
}

/* Waits for the right to write to c (its writer fiber's, or a relay's). */
int sh_ctl_take_turn(tk_conn *c)
{
	char token;
	return shoal_chan_recv(c->turn, &token, SHOAL_FOREVER);
}

void sh_ctl_give_turn(tk_conn *c)
{
	char token = 1;
	shoal_chan_send(c->turn, &token, SHOAL_FOREVER); /* capacity 1: never waits */
}

/* Sends the engine's outbox in RUN batches. Small tasks are copied into
 * the batch; large ones are written from their own bytes (pinned until
 * the write is done: a deadline may answer a task meanwhile). */
static int engine_flush(tk_engine *e)
{
	sh_wbuf *w = &e->c.w;
	int rc = 0;
	/* Drops first: they are of entries sent already. Copied into the
	 * frame before it is written, so that drops made meanwhile wait for
	 * the next. */
	while (e->ndrops && rc == 0 && (rc = sh_ctl_take_turn(&e->c)) == 0) {
		uint32_t n = e->ndrops < DROPS_PER_FRAME ? e->ndrops : DROPS_PER_FRAME;
		sh_tk_batch_begin(w);
		msgpack_packer pk;
		sh_wbuf_packer(w, &pk);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_uint64(&pk, e->drops[e->ndrops - n + i]);
		e->ndrops -= n;
		if ((rc = sh_tk_batch_end(w, n, SH_TK_DROP)) == 0)
			rc = conn_send(&e->c, w->p, w->len);
		sh_ctl_give_turn(&e->c);
	}
	while (e->outbox.head && rc == 0 && (rc = sh_ctl_take_turn(&e->c)) == 0) {
		sh_tk_batch_begin(w);
		msgpack_packer pk;
		sh_wbuf_packer(w, &pk);
		uint32_t n = 0;
		while (e->outbox.head && w->len + w->ref_bytes < 4 * SH_TASKS_BATCH_BYTES &&
		       rc == 0) {
			tk_task *t = sh_ctl_q_pop(&e->outbox);
			if (t->over) {
				sh_task_let_go(e->c.ctl, t);
				continue;
			}
			t->sent = true; /* a retry sends it again */
			t->seq = ++e->seq_out;
			msgpack_pack_array(&pk, 4);
			msgpack_pack_uint64(&pk, t->tid);
			msgpack_pack_uint64(&pk, sh_ctl_owner_of(t));
			if (t->rawlen < SH_TASKS_REF_MIN) {
				sh_wbuf_append(w, t->raw, t->rawlen);
			} else if ((rc = sh_wbuf_ref(w, t->raw, t->rawlen)) == 0 &&
				   (rc = sh_grow_array((void **)&e->pinned, &e->cap_pinned,
						       e->npinned, sizeof(*e->pinned))) == 0) {
				t->writing++;
				e->pinned[e->npinned++] = t;
			}
			n++;
		}
		if (rc == 0)
			rc = sh_tk_batch_end(w, n, SH_TK_RUN);
		if (rc == 0 && n && w->nrefs) {
			const sh_msg_part *parts;
			uint32_t np;
			if ((rc = sh_wbuf_gather(w, &parts, &np)) == 0)
				rc = e->c.tcp >= 0 ? sh_channel_writev(e->c.ch, parts, np, true,
								       SHOAL_FOREVER)
						   : sh_msg_write_parts(&e->c.l.down, parts, np,
									SHOAL_FOREVER);
		} else if (rc == 0 && n) {
			rc = conn_send(&e->c, w->p, w->len);
		}
		for (uint32_t i = 0; i < e->npinned; i++) {
			tk_task *t = e->pinned[i];
			t->writing--;
			sh_task_let_go(e->c.ctl, t);
		}
		e->npinned = 0;
		sh_ctl_give_turn(&e->c);
	}
	return rc;
}

/* The answer to a STATUS question, into w: the figures, then a row per
 * engine. */
static int status_frame(shoal_controller *ctl, sh_wbuf *w)
{
	shoal_controller_stat st;
	shoal_controller_stat_get(ctl, &st);
	uint32_t n = 0;
	for (tk_engine *e = ctl->engines; e; e = e->next)
		n++;
	msgpack_packer pk;
	sh_tk_batch_begin(w);
	sh_wbuf_packer(w, &pk);
	msgpack_pack_uint32(&pk, st.engines);
	msgpack_pack_uint32(&pk, st.clients);
	msgpack_pack_uint64(&pk, st.queued);
	msgpack_pack_uint64(&pk, st.running);
	msgpack_pack_uint64(&pk, st.done);
	msgpack_pack_uint64(&pk, st.retried);
	msgpack_pack_uint64(&pk, st.failed);
	msgpack_pack_uint64(&pk, st.held_bytes);
	msgpack_pack_uint64(&pk, st.held_peak);
	msgpack_pack_array(&pk, n);
	for (tk_engine *e = ctl->engines; e; e = e->next) {
		msgpack_pack_array(&pk, 4);
		msgpack_pack_uint32(&pk, e->c.num);
		sh_mp_pack_cstr(&pk, e->c.peer);
		msgpack_pack_int32(&pk, (int32_t)e->c.pid);
		msgpack_pack_uint32(&pk, e->inflight);
	}
	return sh_tk_batch_end(w, 10, SH_TK_STATUS);
}

/* Sends the client's results, swapping batches so that results arriving
 * while this one is written go into the next; then the answers to its
 * STATUS questions, which see those results done. */
static int client_flush(tk_client *c)
{
	while (c->nres) {
		uint32_t n = c->nres;
		sh_wbuf t = c->res;
		c->res = c->c.w;
		c->c.w = t;
		c->nres = 0;
		sh_tk_batch_begin(&c->res);
		int rc = sh_tk_batch_end(&c->c.w, n, SH_TK_RESULTS);
		if (rc == 0)
			rc = conn_send(&c->c, c->c.w.p, c->c.w.len);
		if (c->c.w.cap > SH_MSG_BUF_KEEP)
			sh_wbuf_fini(&c->c.w);
		if (rc)
			return rc;
	}
	for (; c->asks && !c->nres; c->asks--) {
		sh_wbuf_reset(&c->c.w);
		int rc = status_frame(c->c.ctl, &c->c.w);
		if (rc == 0)
			rc = conn_send(&c->c, c->c.w.p, c->c.w.len);
		if (rc)
			return rc;
	}
	return 0;
}

static void *writer_main(void *arg)
{
	tk_conn *c = arg;
	char one;
	while (shoal_chan_recv(c->kick, &one, SHOAL_FOREVER) == 0) {
		c->kick_pending = false;
		int rc = c->engine ? engine_flush((tk_engine *)c) : client_flush((tk_client *)c);
		if (rc) {
			if (rc != SHOAL_ECLOSED)
				sh_warn("tasks", "%s %u: sending: %s",
					c->engine ? "engine" : "client", c->num,
					shoal_strerror(rc));
			sh_ctl_conn_shut(c);
			break;
		}
	}
	return NULL;
}

/* Ends the connection when its socket does: the peer process is gone. */
static void *watch_main(void *arg)
{
	tk_conn *c = arg;
	for (;;) {
		char b;
		ssize_t n = recv(c->l.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (shoal_fd_wait(c->l.sock, SHOAL_FD_IN, SHOAL_FOREVER, NULL) == SHOAL_ECANCELED)
			return NULL;
	}
	sh_ctl_conn_shut(c);
	return NULL;
}

/* ---- frames read ---- */

/* A SUBMIT batch of small tasks: each is routed as it is read. */
static int on_submit(tk_client *c, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (sh_mp_array(&m, &n) != 0)
		return SHOAL_EPROTO;
	int64_t now = shoal_now_ns();
	for (uint32_t i = 0; i < n; i++) {
		sh_tk_submit v;
		tk_task *t;
		int rc;
		if (sh_tk_read_submit(&m, &v) || !v.call)
			return SHOAL_EPROTO;
		if ((rc = sh_ctl_add_task(c, &v, now, v.call, NULL, true, &t)) != 0)
			return rc;
	}
	return sh_mp_done(&m) == 0 ? 0 : SHOAL_EPROTO;
}

/* A DONE frame: results go to their clients. */
static int on_done(tk_engine *e, const sh_frame *f)
{
	shoal_controller *ctl = e->c.ctl;
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, e->c.in + SH_FRAME_HDR, f->body_len);
	if (f->op != SH_TK_DONE || f->oob || sh_mp_array(&m, &n) != 0)
		return SHOAL_EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t tid;
		int32_t status;
		const unsigned char *raw;
		size_t len;
		if (sh_tk_read_result(&m, &tid, &status, &raw, &len))
			return SHOAL_EPROTO;
		tk_task *t = sh_map_get(&ctl->tasks, tid);
		if (!t || t->on != e)
			continue; /* answered already (its deadline passed) */
		sh_ctl_answer(ctl, t, SH_TASK_RESULT, status, raw, len, NULL);
	}
	return sh_mp_done(&m) == 0 ? 0 : SHOAL_EPROTO;
}

/* A STARTED frame of an engine over TCP: [seq], the RUN entry it starts
 * now (it says so before). */
static int on_started(tk_engine *e, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	uint64_t seq;
	sh_mp_init(&m, e->c.in + SH_FRAME_HDR, f->body_len);
	if (f->oob || sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &seq) || sh_mp_done(&m) ||
	    seq > e->seq_out)
		return SHOAL_EPROTO;
	if (seq > e->started)
		e->started = seq;
	return 0;
}

/* SH_TK_OWNER: the client's store owner token, for its results. */
static int on_owner(tk_client *c, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (f->oob || sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &c->owner) || sh_mp_done(&m))
		return SHOAL_EPROTO;
	return 0;
}

/* SH_TK_STATUS: a question, answered by the client's writer after the
 * results it has (at most a few pending: each is one small frame). */
static int on_status(tk_client *c, const sh_frame *f)
{
	sh_mp m;
	uint32_t n;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (f->oob || sh_mp_array(&m, &n) || n != 0 || sh_mp_done(&m) || c->asks >= 16)
		return SHOAL_EPROTO;
	c->asks++;
	sh_ctl_kick(&c->c);
	return 0;
}

static int submit_frame(tk_client *c, const sh_frame *f)
{
	if (f->op == SH_TK_OWNER)
		return on_owner(c, f);
	if (f->op == SH_TK_STATUS)
		return on_status(c, f);
	if (f->op != SH_TK_SUBMIT)
		return SHOAL_EPROTO;
	return f->oob ? sh_ctl_on_large(c, f) : on_submit(c, f);
}

/* ---- connections ---- */

static void conn_fini(tk_conn *c)
{
	if (c->writer) {
		shoal_cancel(c->writer);
		shoal_join(c->writer, NULL);
	}
	if (c->watcher) {
		shoal_cancel(c->watcher);
		shoal_join(c->watcher, NULL);
	}
	if (c->kick)
		shoal_chan_destroy(c->kick);
	if (c->bell)
		shoal_chan_destroy(c->bell);
	if (c->turn)
		shoal_chan_destroy(c->turn);
	sh_link_fini(&c->l);
	sh_channel_free(c->ch);
	if (c->tcp >= 0) {
		shoal_fd_forget(c->tcp);
		close(c->tcp);
	}
	sh_wbuf_fini(&c->w);
	if (c->in)
		shoal_free(c->in, c->in_cap);
}

/* While a TCP client is held back nothing is read from it that would say
 * its peer hung up: this fiber looks at each edge of its socket, and
 * rings the client's bell when it did. */
static void *hangup_main(void *arg)
{
	tk_conn *c = arg;
	for (;;) {
		struct pollfd p = {.fd = c->tcp, .events = POLLRDHUP};
		if (poll(&p, 1, 0) == 1) {
			c->hung_up = true;
			sh_ctl_ring(c->bell);
			return NULL;
		}
		if (shoal_fd_wait(c->tcp, SHOAL_FD_IN, SHOAL_FOREVER, NULL) == SHOAL_ECANCELED)
			return NULL;
	}
}

static bool too_much_held(const shoal_controller *ctl)
{
	return ctl->held > HELD_MAX &&
	       ctl->nheld > 2 * atomic_load_explicit(&ctl->n_engines, memory_order_relaxed);
}

/* Waits, before reading more of a client, while the controller holds
 * HELD_MAX bytes of large tasks. What frees them (results, deadlines,
 * engines and clients leaving) is everywhere, but all of it goes through
 * sh_ctl_frame_unref, which rings the bells of the clients held back, as
 * does an engine joining and the client's connection ending. */
static int hold_back(tk_client *c)
{
	shoal_controller *ctl = c->c.ctl;
	if (!too_much_held(ctl))
		return 0;
	shoal_fiber *hangup = NULL;
	int rc = 0;
	if (c->c.tcp >= 0)
		rc = shoal_spawn(&hangup, hangup_main, &c->c,
				 &(shoal_fiber_opts){.name = "tasks-hangup"});
	c->c.held_back = true;
	ctl->nheld_back++;
	while (rc == 0 && too_much_held(ctl)) {
		char b;
		if (c->c.shut || c->c.hung_up)
			rc = SHOAL_ECLOSED;
		else if ((rc = shoal_chan_recv(c->c.bell, &b, SHOAL_FOREVER)) != 0)
			break; /* cancelled */
	}
	c->c.held_back = false;
	ctl->nheld_back--;
	if (hangup) {
		shoal_cancel(hangup);
		shoal_join(hangup, NULL);
	}
	return rc;
}

void *sh_ctl_conn_main(void *arg)
{
	tk_conn *hello = arg; /* a stand-in until we know what it is */
	shoal_controller *ctl = hello->ctl;
	uint32_t proto = 0, version = SH_TASKS_VERSION;
	int rc;
	if (hello->tcp >= 0) {
		char why[128];
		rc = sh_auth_server(hello->tcp, ctl->key, ctl->klen, ctl->opts.no_encrypt, &proto,
				    &hello->ch, why, sizeof(why));
		sh_listener_hello_done(&ctl->remote, hello->hello);
		if (rc != 0)
			sh_listener_refused(&ctl->remote, hello->peer, why);
		else /* a message half moved may not hold its peer (or an engine) */
			sh_channel_set_stall(hello->ch, ctl->opts.stall_ns ? ctl->opts.stall_ns
									   : SH_TASKS_STALL_NS);
	} else {
		rc = sh_link_hello(&hello->l, &proto, &version);
	}
	if (rc == 0 && proto == SH_STORE_PROTO) {
		/* `shoal stat` asks a socket whether it is a store's first */
		sh_debug("tasks", "pid %d: a store's client; not ours", (int)hello->pid);
		rc = SHOAL_EPROTO;
	} else if (rc == 0 && (version != SH_TASKS_VERSION ||
			       (proto != SH_TASKS_CLIENT && proto != SH_TASKS_ENGINE))) {
		sh_warn("tasks",
			"pid %d: hello (%08x, %u), expected a client or an engine of "
			"version %d",
			(int)hello->pid, proto, version, SH_TASKS_VERSION);
		rc = SHOAL_EPROTO;
	}
	tk_conn *c = NULL;
	tk_engine *e = NULL;
	tk_client *cl = NULL;
	bool joined = false;
	if (rc == 0 && proto == SH_TASKS_ENGINE && (e = SH_NEW(tk_engine)) != NULL)
		c = &e->c;
	else if (rc == 0 && proto == SH_TASKS_CLIENT && (cl = SH_NEW(tk_client)) != NULL)
		c = &cl->c;
	else if (rc == 0)
		rc = SHOAL_ENOMEM;
	if (c) {
		c->ctl = ctl;
		c->l = hello->l;
		c->tcp = hello->tcp;
		c->ch = hello->ch;
		hello->tcp = -1;
		hello->ch = NULL;
		memcpy(c->peer, hello->peer, sizeof(c->peer));
		c->pid = hello->pid;
		c->engine = e != NULL;
		sh_link_init(&hello->l, -1);
		sh_wbuf_init(&c->w);
		uint64_t info[1] = {e ? ctl->next_engine : ctl->next_client + 1};
		/* an engine on this host gets a page where it says which task
		 * it starts (its size fixed: no truncating it under us) */
		int page = -1;
		if (e)
			e->page_len = sh_tk_page_bytes(ctl->window);
		if (c->tcp < 0 && e &&
		    (rc = sh_memfd_create("shoal-engine-page", e->page_len, true, &page)) == 0 &&
		    (rc = sh_memfd_fix_size(page)) == 0)
			rc = sh_shm_map(page, e->page_len, true, (void **)&e->page);
		if (c->tcp < 0 && rc == 0)
			rc = sh_link_accept(&c->l, SH_TASKS_RING_CAP, info, 1, e ? &page : NULL,
					    e ? 1 : 0);
		if (page >= 0)
			close(page);
		if (rc == 0)
			rc = shoal_chan_create(&c->kick, 1, 1);
		if (rc == 0)
			rc = shoal_chan_create(&c->bell, 1, 1);
		if (rc == 0 && (rc = shoal_chan_create(&c->turn, 1, 1)) == 0)
			sh_ctl_give_turn(c);
		if (rc == 0)
			rc = shoal_spawn(&c->writer, writer_main, c,
					 &(shoal_fiber_opts){.name = "tasks-writer"});
		if (rc == 0 && c->tcp < 0)
			rc = shoal_spawn(&c->watcher, watch_main, c,
					 &(shoal_fiber_opts){.name = "tasks-watch"});
		c->l.up.spin_ns = 50000;
	}
	sh_link_fini(&hello->l);
	sh_channel_free(hello->ch);
	if (hello->tcp >= 0) {
		shoal_fd_forget(hello->tcp);
		close(hello->tcp);
	}
	SH_DELETE(hello);
	if (rc == 0 && e) {
		e->c.num = ctl->next_engine++;
		e->next = ctl->engines;
		ctl->engines = e;
		atomic_fetch_add_explicit(&ctl->n_engines, 1, memory_order_relaxed);
		sh_ctl_engines_changed(ctl);
		sh_info("tasks", "engine %u (%s) joined; %u engine%s now", e->c.num, e->c.peer,
			atomic_load_explicit(&ctl->n_engines, memory_order_relaxed),
			atomic_load_explicit(&ctl->n_engines, memory_order_relaxed) == 1 ? ""
											 : "s");
		joined = true;
		sh_ctl_wake_held(ctl); /* room for more held bytes */
		sh_ctl_assign_pending(ctl);
		sh_ctl_fill(ctl, e);
	} else if (rc == 0) {
		cl->c.num = ++ctl->next_client;
		sh_wbuf_init(&cl->res);
		sh_tk_batch_begin(&cl->res);
		cl->next = ctl->clients;
		ctl->clients = cl;
		atomic_fetch_add_explicit(&ctl->n_clients, 1, memory_order_relaxed);
		joined = true;
	}
	while (rc == 0) {
		size_t len = 0;
		sh_frame f;
		char why[160];
		if (cl && (rc = hold_back(cl)) != 0)
			break;
		rc = conn_read(c, &len);
		if (rc == 0 && (rc = sh_frame_decode(c->in, len, &f, why, sizeof(why))) != 0)
			sh_warn("tasks", "%s %u (%s): %s", e ? "engine" : "client", c->num, c->peer,
				why);
		if (rc == 0 && e)
			rc = f.op == SH_TK_STARTED && c->tcp >= 0 ? on_started(e, &f)
								  : on_done(e, &f);
		else if (rc == 0)
			rc = submit_frame(cl, &f);
		if (rc == SHOAL_EPROTO)
			sh_warn("tasks", "%s %u (%s): a malformed batch; connection ends",
				e ? "engine" : "client", c->num, c->peer);
		sh_msg_trim(&c->in, &c->in_cap);
	}
	if (c && c->ch && *sh_channel_error(c->ch))
		sh_warn("tasks", "%s %u (%s): %s; connection dropped", e ? "engine" : "client",
			c->num, c->peer, sh_channel_error(c->ch));
	if (c) {
		c->gone = true;
		sh_ctl_conn_shut(c);
		if (e && joined) {
			sh_ctl_engine_gone(ctl, e);
		} else if (cl && joined) {
			for (tk_client **p = &ctl->clients; *p; p = &(*p)->next)
				if (*p == cl) {
					*p = cl->next;
					break;
				}
			sh_ctl_client_gone(ctl, cl);
		}
		char b;
		while (c->users) /* relays to it, finding it gone; the last rings */
			shoal_chan_recv(c->bell, &b, SHOAL_FOREVER);
		conn_fini(c);
		if (e) {
			if (e->pinned)
				shoal_free(e->pinned, e->cap_pinned * sizeof(*e->pinned));
			if (e->page)
				sh_shm_unmap((void *)e->page, e->page_len);
			if (e->drops)
				shoal_free(e->drops, e->cap_drops * sizeof(*e->drops));
		}
		if (cl && joined)
			sh_wbuf_fini(&cl->res);
		if (cl)
			sh_ctl_client_fini(cl);
		/* counted out once nothing of theirs is open any more */
		if (joined)
			atomic_fetch_sub_explicit(e ? &ctl->n_engines : &ctl->n_clients, 1,
						  memory_order_relaxed);
		if (joined && e)
			sh_ctl_engines_changed(ctl);
		SH_DELETE(e ? (void *)e : (void *)cl);
	}
	ctl->nconns--;
	return NULL;
}

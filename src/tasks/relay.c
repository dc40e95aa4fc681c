/* The bytes of large tasks, which come out of band after their SUBMIT
 * frame: relayed as they come from a client over TCP to an engine over
 * TCP when nothing must be kept for a retry or a dependency; else held in
 * a buffer (tk_frame), kept warm for the next ones when let go. While the
 * buffers hold more than HELD_MAX bytes no client is read further
 * (conn.c). */
#include "tasks/controller_impl.h"

#include <string.h>

/* ---- hold buffers ---- */

void sh_ctl_frame_unref(tk_frame *fr)
{
	if (--fr->refs)
		return;
	shoal_controller *ctl = fr->ctl;
	ctl->held -= fr->cap;
	ctl->nheld--;
	atomic_store_explicit(&ctl->n_held, ctl->held, memory_order_relaxed);
	ctl->last_hold = shoal_now_ns();
	sh_ctl_wake_held(ctl);
	if (ctl->spare_bytes + fr->cap <= SPARE_MAX) {
		fr->next = ctl->spare_frames;
		ctl->spare_frames = fr;
		ctl->spare_bytes += fr->cap;
		return;
	}
	shoal_free(fr->p, fr->cap);
	SH_DELETE(fr);
}

/* A buffer for n bytes of a large task: a spare one, warm, or new. */
static tk_frame *hold_get(shoal_controller *ctl, size_t n)
{
	tk_frame **p = &ctl->spare_frames, *fr;
	while (*p && (*p)->cap < n)
		p = &(*p)->next;
	if ((fr = *p) != NULL) {
		*p = fr->next;
		ctl->spare_bytes -= fr->cap;
	} else if ((fr = SH_NEW(tk_frame)) == NULL) {
		return NULL;
	} else if ((fr->p = shoal_alloc(n)) == NULL) {
		SH_DELETE(fr);
		return NULL;
	} else {
		fr->cap = n;
		fr->ctl = ctl;
	}
	fr->refs = 1;
	fr->next = NULL;
	ctl->held += fr->cap;
	ctl->nheld++;
	atomic_store_explicit(&ctl->n_held, ctl->held, memory_order_relaxed);
	if (ctl->held > atomic_load_explicit(&ctl->n_held_peak, memory_order_relaxed))
		atomic_store_explicit(&ctl->n_held_peak, ctl->held, memory_order_relaxed);
	return fr;
}

void sh_ctl_spares_free(shoal_controller *ctl)
{
	for (tk_frame *fr; (fr = ctl->spare_frames) != NULL;) {
		ctl->spare_frames = fr->next;
		shoal_free(fr->p, fr->cap);
		SH_DELETE(fr);
	}
	ctl->spare_bytes = 0;
}

/* Spare buffers go back once no large task came for a second. */
void sh_ctl_spares_trim(shoal_controller *ctl)
{
	if (!ctl->nheld && ctl->spare_frames && shoal_now_ns() - ctl->last_hold >= SPARE_IDLE_NS)
		sh_ctl_spares_free(ctl);
}

/* ---- the relay ---- */

/* Reads and drops n bytes of a channel. */
static int discard(sh_channel *ch, uint64_t n)
{
	for (; n;) {
		const unsigned char *p;
		size_t k;
		int rc = sh_channel_peek(ch, &p, &k, true, SHOAL_FOREVER);
		if (rc)
			return rc;
		k = n < k ? (size_t)n : k;
		sh_channel_consume(ch, k);
		n -= k;
	}
	return 0;
}

/* Writes n zero bytes: the rest of a task whose client went on the way. */
static int pad(sh_channel *ch, uint64_t n)
{
	static const unsigned char zero[16384];
	int rc = 0;
	for (size_t k; rc == 0 && n; n -= k) {
		k = n < sizeof(zero) ? (size_t)n : sizeof(zero);
		rc = sh_channel_write(ch, zero, k, true, SHOAL_FOREVER);
	}
	return rc;
}

/* Passes the n bytes of t's fn and args from its client's channel on to
 * engine e's as they come, record by record (opened and sealed again:
 * each link has its own keys), without holding them. Over when the bytes are through; an engine
 * that goes on the way fails t (which has no retries: nothing is kept to send again) and the rest
 * of the bytes are dropped; a client that goes on the way leaves the engine a task padded with
 * zeros and a verdict of 0. */
static int relay(tk_client *c, tk_engine *e, tk_task *t, uint64_t n)
{
	shoal_controller *ctl = c->c.ctl;
	sh_ctl_give(ctl, t, e, true);
	t->writing++;
	e->c.users++;
	int crc = 0, erc = sh_ctl_take_turn(&e->c);
	bool turn = erc == 0;
	if (turn)
		t->seq = ++e->seq_out; /* its entry is next in the engine's stream */
	sh_wbuf w;
	sh_wbuf_init(&w);
	if (erc == 0) {
		msgpack_packer pk;
		sh_tk_batch_begin(&w);
		sh_wbuf_packer(&w, &pk);
		msgpack_pack_array(&pk, 3);
		msgpack_pack_uint64(&pk, t->tid);
		msgpack_pack_uint64(&pk, sh_ctl_owner_of(t));
		msgpack_pack_uint64(&pk, n);
		w.oob_bytes = n + 8; /* declared; they come from the client */
		erc = sh_tk_batch_end(&w, 1, SH_TK_RUN);
	}
	/* the frame, the bytes and the verdict go as one stream of records */
	uint64_t taken = 0, verdict = SH_TK_RUN_IT;
	if (erc == 0) {
		int failed;
		int rc = sh_channel_relay(c->c.ch, e->c.ch, w.p, w.len, n, &verdict, 8, &taken,
					  &failed);
		*(failed == 1 ? &crc : &erc) = rc;
	}
	sh_wbuf_fini(&w);
	if (crc == 0 && taken < n)
		crc = discard(c->c.ch, n - taken); /* the engine failed first */
	else if (crc && erc == 0) {
		verdict = 0; /* the client went: the engine runs nothing */
		if ((erc = pad(e->c.ch, n - taken)) == 0)
			erc = sh_channel_write(e->c.ch, &verdict, 8, true, SHOAL_FOREVER);
	}
	if (turn)
		sh_ctl_give_turn(&e->c);
	if (--e->c.users == 0 && e->c.gone)
		sh_ctl_ring(e->c.bell); /* its reader waits for the last relay */
	if (erc) {
		sh_ctl_conn_shut(&e->c);
		if (t->on == e)
			sh_ctl_fail(ctl, t, SH_TASK_FAILED, SHOAL_EENGINE,
				    "engine %u (%s) went while the task's arguments were on "
				    "their way: %s",
				    e->c.num, e->c.peer, shoal_strerror(erc));
	} else if (crc && t->on == e) {
		sh_task_end(ctl, t, SH_TASK_GONE); /* nobody to answer, and no answer coming */
	}
	t->writing--;
	sh_task_let_go(ctl, t);
	return crc;
}

/* A task with large arguments, alone in its frame: its bytes follow out
 * of band. From a client over TCP to an engine over TCP, with nothing to
 * keep for a retry or a dependency, they are relayed; else read into a
 * hold buffer (by reference from then on, as far as the engine). */
int sh_ctl_on_large(tk_client *c, const sh_frame *f)
{
	shoal_controller *ctl = c->c.ctl;
	sh_mp m;
	uint32_t k;
	sh_tk_submit v;
	sh_mp_init(&m, c->c.in + SH_FRAME_HDR, f->body_len);
	if (sh_mp_array(&m, &k) || k != 1 || sh_tk_read_submit(&m, &v) || v.call ||
	    v.call_len != f->oob || sh_mp_done(&m))
		return SHOAL_EPROTO;
	int64_t now = shoal_now_ns();
	tk_task *t = NULL;
	int rc;
	if (c->c.tcp >= 0 && v.retries == 0 && v.nafter == 0 && v.nfollow == 0) {
		if ((rc = sh_ctl_add_task(c, &v, now, NULL, NULL, false, &t)) != 0)
			return rc;
		tk_engine *e = t ? sh_ctl_pick(ctl, t) : NULL;
		if (e && e->c.tcp >= 0 && !e->c.shut)
			return relay(c, e, t, v.call_len);
		if (!t)
			return discard(c->c.ch, v.call_len); /* failed early */
		t->writing++;				     /* while it waits for its bytes */
	}
	tk_frame *fr = hold_get(ctl, v.call_len);
	if (!fr)
		rc = SHOAL_ENOMEM;
	else if (c->c.tcp >= 0)
		rc = sh_channel_read(c->c.ch, fr->p, v.call_len, true, SHOAL_FOREVER);
	else
		rc = sh_msg_read_parts(&c->c.l.up, &(sh_msg_part){fr->p, v.call_len}, 1,
				       SHOAL_FOREVER);
	if (rc == 0 && t) {
		/* routed now that its bytes are in (unless answered meanwhile) */
		t->raw = fr->p;
		t->frame = fr;
		fr->refs++;
		t->writing--;
		if (t->over)
			sh_task_let_go(ctl, t);
		else
			sh_ctl_release(ctl, t);
	} else if (rc == 0) {
		rc = sh_ctl_add_task(c, &v, now, NULL, fr, true, &t);
	} else if (t) { /* its bytes never came: the connection ends */
		t->writing--;
		sh_task_end(ctl, t, SH_TASK_GONE);
	}
	if (fr)
		sh_ctl_frame_unref(fr);
	return rc;
}

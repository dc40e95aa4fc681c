/* Calls into an extension: sent over the request ring, several in
 * flight, each reply read when someone waits for it, the extension's calls
 * back into the host served meanwhile (services.c); a call's deadline (the
 * extension asked to give up, then killed); and what happens when the
 * child dies (started again before the next call, when asked). A call
 * sleeps on a doorbell (a pipe) the child rings, polled together with a
 * pidfd of the child, so a crash fails the call the moment the child is
 * gone, with its signal or exit status in the message. */
#include "rpc/ext_host.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

/* After a crash or a kill: the call's error, and the child reaped. */
static int crashed(shoal_ext *e, const char *fn)
{
	int st;
	char how[96];
	/* Killed first: "crashed" may also be an extension that closed its
	 * rings and lives on, which a plain wait would wait for forever. */
	sh_ext_reap(e, true, &st);
	sh_ext_describe(st, how, sizeof(how));
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && e->oom_killed)
		return sh_err_set(e, SHOAL_ECRASHED,
				  "%s: killed by the OOM killer: over its memory limit of %" PRIu64
				  " MiB (mem_max) in %s()",
				  e->name, e->cfg.mem_max >> 20, fn);
	return sh_err_set(e, SHOAL_ECRASHED, "%s: %s in %s()", e->name, how, fn);
}

int shoal_v_share(shoal_ext *e, shoal_vbuf *b, shoal_value *v)
{
	if (!e || !b || !v)
		return SHOAL_EINVAL;
	if (!e->store)
		return sh_err_set(e, SHOAL_EINVAL,
				  "%s: sharing needs a store (config store_socket)", e->name);
	if (b->store && b->store != e->store)
		return sh_err_set(e, SHOAL_EINVAL,
				  "the vbuf holds objects of another store connection");
	b->store = e->store;
	char why[256];
	int rc = sh_value_share(b, v, why, sizeof(why));
	return rc ? sh_err_set(e, rc, "%s", why) : 0;
}

/* ---- calls: sent now, their replies read when someone waits ---- */

struct shoal_future {
	shoal_ext *e;
	shoal_future *next; /* e's calls in flight, oldest first */
	uint32_t seq, gen;  /* gen: the start of the child it went to */
	int64_t deadline;
	shoal_vbuf *hold; /* shared arguments put into the store for this call */
	/* A reply read while waiting for another call: decoded at once (its
	 * payloads must leave the ring), kept for this call's wait. */
	bool replied;
	int status;	  /* its code */
	shoal_vbuf *kept; /* its result's memory, until the wait takes it */
	shoal_value *result;
	char *msg;  /* its message, when status < 0 */
	int failed; /* the child went with this call in flight: the code */
	char fn[64];
};

/* What a call record owns (not the record). */
static void future_fini(shoal_future *f)
{
	shoal_vbuf_free(f->kept);
	shoal_vbuf_free(f->hold);
	if (f->msg)
		shoal_free(f->msg, strlen(f->msg) + 1);
	f->kept = f->hold = NULL;
	f->msg = NULL;
}

static void future_free(shoal_future *f)
{
	future_fini(f);
	SH_DELETE(f);
}

/* At the stop: futures not waited for are the caller's leak to fix:
 * drop them. */
void sh_ext_drop_pending(shoal_ext *e)
{
	while (e->pending) {
		shoal_future *f = e->pending;
		e->pending = f->next;
		future_free(f);
	}
}

static void unlink_future(shoal_ext *e, shoal_future *f)
{
	for (shoal_future **p = &e->pending; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			return;
		}
}

/* The child is gone (or killed): every call in flight fails with code. */
static void fail_pending(shoal_ext *e, int code)
{
	for (shoal_future *f = e->pending; f; f = f->next)
		if (!f->failed && !f->replied)
			f->failed = code;
}

static int wait_call(shoal_future *f, shoal_vbuf *out, const shoal_value **result,
		     int64_t deadline);
static shoal_future *oldest_unanswered(shoal_ext *e);

/* Reads the reply to p, a call in flight, now, and keeps it for p's wait. */
static void keep_reply(shoal_ext *e, shoal_future *p)
{
	const shoal_value *res = NULL;
	int rc = p->kept ? 0 : shoal_vbuf_create(&p->kept);
	if (rc == 0)
		rc = wait_call(p, p->kept, &res, 0);
	p->replied = true;
	p->status = rc;
	p->result = (shoal_value *)res;
	const char *msg = sh_err_get(e);
	if (rc && (p->msg = shoal_alloc(strlen(msg) + 1)) != NULL)
		memcpy(p->msg, msg, strlen(msg) + 1);
}

/* Whether the call packed in e->out fits the request ring's free room
 * now, with a record's slack for each piece and one for the wrap. */
static bool call_fits(shoal_ext *e)
{
	size_t need = e->out.len + e->out.oob_bytes + 16 * ((size_t)e->out.noob + 2) +
		      (e->out.len + e->out.oob_bytes) / 1024 + SH_EXT_RING_CAP / 8;
	return need <= sh_ring_room(&e->req);
}

void sh_ext_pack_call(sh_wbuf *w, const char *fn, const shoal_value *args, shoal_client *shared)
{
	sh_wbuf_frame_begin(w);
	msgpack_packer pk;
	sh_wbuf_packer(w, &pk);
	msgpack_pack_array(&pk, 2);
	sh_mp_pack_cstr(&pk, fn);
	shoal_value nil = {.type = SHOAL_V_NIL};
	sh_value_pack(&pk, args ? args : &nil, shared, w);
}

/* Sends a call; f (zeroed by the caller) becomes its record in flight. */
static int send_call(shoal_ext *e, const char *fn, const shoal_value *args, int64_t deadline,
		     unsigned flags, shoal_future *f)
{
	if (!e || !fn || !*fn || (flags & ~(unsigned)(SHOAL_CALL_COPY | SHOAL_CALL_SHARED)) ||
	    (flags & SHOAL_CALL_COPY && flags & SHOAL_CALL_SHARED))
		return SHOAL_EINVAL;
	int rc = 0;
	sh_err_clear(e);
	bool shared = (flags & SHOAL_CALL_SHARED) ||
		      (!(flags & SHOAL_CALL_COPY) && e->cfg.payload == SHOAL_PAYLOAD_SHARED);
	if (shared && !e->store)
		return sh_err_set(e, SHOAL_EINVAL,
				  "%s: shared mode needs a store (config store_socket)", e->name);
	f->e = e;
	snprintf(f->fn, sizeof(f->fn), "%s", fn);
	if (shared && args && sh_value_needs_share(args)) {
		if (shoal_vbuf_create(&f->hold) != 0)
			return sh_err_set(e, SHOAL_ENOMEM, "out of memory");
		f->hold->store = e->store;
		/* Tensors not in the store yet go into one for this call: a copy
		 * of the tree (not of the data), shared, held by the call. */
		shoal_value *c = sh_value_clone(f->hold, args);
		char why[256];
		if (!c) {
			rc = sh_err_set(e, SHOAL_ENOMEM, "out of memory");
			goto fail;
		}
		if ((rc = sh_value_share(f->hold, c, why, sizeof(why))) != 0) {
			sh_err_set(e, rc, "%s", why);
			goto fail;
		}
		args = c;
	}
	/* A call that does not fit the ring's room behind calls in flight
	 * waits for their replies first: else we could block writing it
	 * while the extension blocks writing a reply we do not read. Reading
	 * them may serve the extension's calls, which use e->out: the call is
	 * packed again after that. */
	for (shoal_future *p;;) {
		sh_ext_pack_call(&e->out, fn, args, shared ? e->store : NULL);
		if (e->dead || e->out.err || (p = oldest_unanswered(e)) == NULL || call_fits(e))
			break;
		keep_reply(e, p);
	}
	if (e->dead) {
		if (e->cfg.restart != SHOAL_RESTART_ON_CRASH || e->starts == 0) {
			rc = sh_err_set(e, SHOAL_ECRASHED, "%s is not running", e->name);
			goto fail;
		}
		if ((rc = sh_ext_spawn(e)) != 0 || (rc = sh_ext_await_ready(e)) != 0)
			goto fail;
	}
	if (deadline == 0)
		deadline = e->cfg.call_timeout_ns ? shoal_deadline_in(e->cfg.call_timeout_ns)
						  : SHOAL_FOREVER;
	f->deadline = deadline;
	sh_frame fr = {
		.op = SH_EXT_OP_CALL, .seq = ++e->seq, .flags = shared ? SH_FRAME_SHARED : 0};
	if ((rc = sh_wbuf_frame_end(&e->out, &fr)) != 0) {
		sh_err_set(e, rc, "%s(): arguments: %s", fn, shoal_strerror(rc));
		goto fail;
	}
	if (e->out.len > SH_MSG_MAX) {
		rc = sh_err_set(e, SHOAL_EMSGSIZE,
				"%s(): %zu bytes of arguments, at most %zu fit a call", fn,
				e->out.len, SH_MSG_MAX);
		goto fail;
	}
	rc = sh_frame_send(&e->req, &e->out, deadline);
	if (e->out.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&e->out);
	sh_wbuf_reset(&e->out); /* its parts point into args */
	if (rc) {
		/* a ring full past the deadline, or a dead child: out of step */
		fail_pending(e, SHOAL_ECRASHED);
		int crc = rc == SHOAL_ETIMEDOUT ? SHOAL_ETIMEDOUT : SHOAL_ECRASHED;
		if (rc == SHOAL_ETIMEDOUT) {
			sh_ext_reap(e, true, NULL);
			sh_err_set(e, crc, "%s: %s() could not be sent before its deadline; killed",
				   e->name, fn);
		} else {
			crashed(e, fn);
		}
		rc = crc;
		goto fail;
	}
	f->seq = fr.seq;
	f->gen = e->starts;
	shoal_future **tail = &e->pending;
	while (*tail)
		tail = &(*tail)->next;
	*tail = f;
	return 0;
fail:
	shoal_vbuf_free(f->hold);
	f->hold = NULL;
	return rc;
}

/* Decodes the RETURN frame r (its body in e->in) into b and reads its
 * payloads out of band. Returns the call's code, with its message in msg;
 * *fatal when the extension broke the protocol or died meanwhile (it must
 * go: the rings are out of step). */
static int decode_reply(shoal_ext *e, const sh_frame *r, shoal_vbuf *b, shoal_value **v,
			int64_t deadline, char *msg, size_t msglen, bool *fatal)
{
	sh_mp m;
	uint32_t n;
	int rc = 0;
	*fatal = false;
	sh_mp_init(&m, e->in + SH_FRAME_HDR, r->body_len);
	sh_oob_reset(&e->oob, r->oob);
	if (r->status != 0) {
		const char *s = "";
		uint32_t sl = 0;
		if (sh_mp_array(&m, &n) || n != 1 || sh_mp_str(&m, &s, &sl))
			s = "(no message)", sl = 12;
		snprintf(msg, msglen, "%.*s", (int)sl, s);
		*fatal = sh_oob_discard(&e->oob, &e->rep, deadline) != 0;
		return r->status;
	}
	msg[0] = 0;
	if (sh_mp_array(&m, &n) || n != 1 ||
	    (rc = sh_value_decode(&m, b, &e->oob, v, msg, msglen)) != 0 || sh_mp_done(&m) != 0) {
		if (rc != SHOAL_ENOMEM || sh_oob_discard(&e->oob, &e->rep, deadline) != 0)
			*fatal = true;
		if (rc == SHOAL_ENOMEM)
			snprintf(msg, msglen, "no memory for the result");
		else if (!msg[0])
			snprintf(msg, msglen, "malformed");
		return rc == SHOAL_ENOMEM ? rc : SHOAL_EPROTO;
	}
	if ((rc = sh_oob_read(&e->oob, &e->rep, deadline, msg, msglen)) != 0) {
		*fatal = true;
		return rc == SHOAL_EBADMSG ? SHOAL_EPROTO : rc;
	}
	return 0;
}

/* The call the extension is running now: the oldest without a reply. */
static shoal_future *oldest_unanswered(shoal_ext *e)
{
	for (shoal_future *p = e->pending; p; p = p->next)
		if (!p->replied && !p->failed)
			return p;
	return NULL;
}

static int wait_call(shoal_future *f, shoal_vbuf *out, const shoal_value **result, int64_t deadline)
{
	shoal_ext *e = f->e;
	int rc = 0;
	sh_err_clear(e);
	if (out->store && out->store != e->store)
		return sh_err_set(e, SHOAL_EINVAL, "out holds objects of another store connection");
	out->store = e->store;
	if (deadline == 0)
		deadline = f->deadline;
	bool cancelling = false;
	for (;;) {
		if (f->replied) {
			if (f->status)
				return sh_err_set(e, f->status, "%s", f->msg ? f->msg : "");
			if ((rc = sh_vbuf_adopt(out, f->kept)) != 0)
				return sh_err_set(
					e, rc, "no memory to hand over the result of %s()", f->fn);
			*result = f->result;
			return 0;
		}
		if (f->failed || f->gen != e->starts || e->dead) {
			rc = f->failed ? f->failed : SHOAL_ECRASHED;
			if (!sh_err_get(e)[0] || f->failed)
				sh_err_set(e, rc, "%s: %s() was in flight when the extension %s",
					   e->name, f->fn,
					   rc == SHOAL_ETIMEDOUT ? "was killed" : "went");
			return rc;
		}
		size_t len = 0;
		rc = sh_msg_read(&e->rep, &e->in, &e->in_cap, &len, deadline);
		if (rc == SHOAL_ECONNRESET || rc == SHOAL_ECLOSED) {
			/* It ran the oldest call without a reply when it went. */
			const char *running = f->fn;
			for (shoal_future *p = e->pending; p; p = p->next)
				if (!p->replied && !p->failed) {
					running = p->fn;
					break;
				}
			char fn[64];
			snprintf(fn, sizeof(fn), "%s", running);
			fail_pending(e, SHOAL_ECRASHED);
			f->failed = 0;
			return crashed(e, fn);
		}
		if (rc == SHOAL_ETIMEDOUT && !cancelling && oldest_unanswered(e) == f) {
			/* Ask it to give up (shoal_ext_cancelled), and give it a
			 * moment: a function that answers is not killed. */
			atomic_store_explicit(e->cancel, f->seq, memory_order_release);
			cancelling = true;
			deadline = shoal_deadline_in(SH_EXT_CANCEL_GRACE_NS);
			continue;
		}
		if (rc == SHOAL_ETIMEDOUT) {
			/* Its state is unknown now: it goes, and comes back per policy. */
			fail_pending(e, SHOAL_ECRASHED);
			sh_ext_reap(e, true, NULL);
			return sh_err_set(e, SHOAL_ETIMEDOUT,
					  "%s: %s() did not return before its deadline%s; killed",
					  e->name, f->fn,
					  cancelling ? ", nor when asked to give up" : "");
		}
		if (rc) {
			fail_pending(e, SHOAL_ECRASHED);
			sh_ext_reap(e, true, NULL); /* out of step now */
			return sh_err_set(e, rc, "%s: reading the reply to %s(): %s; killed",
					  e->name, f->fn, shoal_strerror(rc));
		}
		sh_frame r;
		char why[256] = "";
		if (sh_frame_decode(e->in, len, &r, why, sizeof(why)) == 0 &&
		    r.op == SH_EXT_OP_CALL) {
			/* The extension calls one of our services while we wait. */
			if ((rc = sh_ext_serve(e, &r, deadline)) != 0) {
				fail_pending(e, SHOAL_ECRASHED);
				sh_ext_reap(e, true, NULL); /* out of step with us now */
				return rc;
			}
			continue;
		}
		shoal_future *to = NULL;
		for (shoal_future *p = e->pending; p && !why[0]; p = p->next)
			if (p->seq == r.seq && p->gen == e->starts && !p->replied)
				to = p;
		if (why[0] || r.op != SH_EXT_OP_RETURN || !to) {
			fail_pending(e, SHOAL_ECRASHED);
			sh_ext_reap(e, true, NULL);
			return sh_err_set(e, SHOAL_EPROTO,
					  "%s: malformed reply to %s(): %s; killed", e->name, f->fn,
					  why[0] ? why : "wrong op or sequence");
		}
		/* Another call's reply is decoded into a vbuf of its own, which
		 * its wait hands over. */
		if (to != f && !to->kept && shoal_vbuf_create(&to->kept) != 0) {
			fail_pending(e, SHOAL_ECRASHED);
			sh_ext_reap(e, true, NULL);
			return sh_err_set(e, SHOAL_ENOMEM, "no memory to keep the reply to %s()",
					  to->fn);
		}
		if (to != f)
			to->kept->store = e->store;
		char msg[SH_EXT_MSG_MAX];
		shoal_value *v = NULL;
		bool fatal;
		int status = decode_reply(e, &r, to == f ? out : to->kept, &v, deadline, msg,
					  sizeof(msg), &fatal);
		if (fatal) {
			fail_pending(e, SHOAL_ECRASHED);
			sh_ext_reap(e, true, NULL);
			return sh_err_set(e, status == SHOAL_EPROTO ? status : SHOAL_ECRASHED,
					  "%s: reply to %s(): %s; killed", e->name, to->fn,
					  status == SHOAL_EPROTO ? msg : shoal_strerror(status));
		}
		if (to == f && cancelling) {
			atomic_store_explicit(e->cancel, 0, memory_order_release);
			return sh_err_set(
				e, SHOAL_ETIMEDOUT,
				"%s: %s() did not return before its deadline; it gave up when "
				"asked",
				e->name, f->fn);
		}
		if (to == f) {
			if (status)
				return sh_err_set(e, status, "%s", msg);
			*result = v;
			return 0;
		}
		to->replied = true;
		to->status = status;
		to->result = v;
		if (status && !(to->msg = shoal_alloc(strlen(msg) + 1))) {
			to->status = SHOAL_ENOMEM; /* its message is lost, not its code */
		} else if (status) {
			memcpy(to->msg, msg, strlen(msg) + 1);
		}
	}
}

int shoal_ext_call_async(shoal_ext *e, const char *fn, const shoal_value *args, int64_t deadline,
			 unsigned flags, shoal_future **out)
{
	if (!e || !out)
		return SHOAL_EINVAL;
	shoal_future *f = SH_NEW(shoal_future);
	if (!f)
		return SHOAL_ENOMEM;
	sh_ext_enter(e);
	int rc = send_call(e, fn, args, deadline, flags, f);
	sh_ext_leave(e);
	if (rc)
		SH_DELETE(f);
	else
		*out = f;
	return rc;
}

int shoal_future_wait(shoal_future *f, shoal_vbuf *out, const shoal_value **result,
		      int64_t deadline)
{
	if (!f || !out || !result)
		return SHOAL_EINVAL;
	shoal_ext *e = f->e;
	sh_ext_enter(e);
	int rc = wait_call(f, out, result, deadline);
	unlink_future(e, f);
	future_free(f);
	sh_msg_trim(&e->in, &e->in_cap);
	sh_ext_leave(e);
	return rc;
}

int shoal_ext_call(shoal_ext *e, const char *fn, const shoal_value *args, shoal_vbuf *out,
		   const shoal_value **result, int64_t deadline)
{
	return shoal_ext_call_ex(e, fn, args, out, result, deadline, 0);
}

int shoal_ext_call_ex(shoal_ext *e, const char *fn, const shoal_value *args, shoal_vbuf *out,
		      const shoal_value **result, int64_t deadline, unsigned flags)
{
	if (!e || !out || !result)
		return SHOAL_EINVAL;
	sh_ext_enter(e);
	shoal_future f = {0}; /* a synchronous call's record lives here */
	int rc = send_call(e, fn, args, deadline, flags, &f);
	if (rc == 0) {
		rc = wait_call(&f, out, result, 0);
		unlink_future(e, &f);
		future_fini(&f);
	}
	sh_msg_trim(&e->in, &e->in_cap);
	sh_ext_leave(e);
	return rc;
}

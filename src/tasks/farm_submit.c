/* The farm client's submissions: a task is encoded into the SUBMIT batch
 * being built (its arguments shared into the store first when the farm
 * has one), or, with large arguments, sent at once alone in its frame;
 * closed batches wait in a queue that drains into the ring or socket as
 * the controller takes them. */
#include "tasks/farm_impl.h"

#include <stdio.h>
#include <string.h>

/* Writes queued batches into the ring; without block, only as much as
 * fits now (the rest waits for the next call); with block, until deadline
 * at most, and no longer than the timeout without the controller taking
 * anything. A timeout leaves the queue as it is (a later call goes on). */
int sh_farm_drain(shoal_farm *f, bool block, int64_t deadline)
{
	while (f->nqueue) {
		sh_wbuf *b = &f->queue[0];
		int rc;
		if (f->tcp >= 0)
			rc = sh_channel_write_part(f->ch, b->p, b->len, &f->sent, block, false,
						   block ? deadline : SHOAL_NOWAIT);
		else
			rc = sh_msg_write_part(&f->l.up, b->p, b->len, &f->sent,
					       block ? sh_farm_ring_deadline(f, deadline)
						     : SHOAL_NOWAIT);
		if (rc == SHOAL_EAGAIN && !block)
			return 0;
		if (rc == SHOAL_ETIMEDOUT)
			return sh_err_set(
				f, rc,
				"sending tasks to the controller: it took none for %.0f s "
				"(shoal_farm_set_timeout), or the deadline passed",
				(double)f->timeout_ns / 1e9);
		if (rc)
			return sh_err_set(f, rc, "sending tasks to the controller: %s",
					  shoal_strerror(rc));
		sh_wbuf_fini(b);
		memmove(f->queue, f->queue + 1, (f->nqueue - 1) * sizeof(*f->queue));
		f->nqueue--;
		f->sent = 0;
	}
	return 0;
}

/* Appends the closed frame in w to the queue, which takes it over. */
int sh_farm_queue_frame(shoal_farm *f, sh_wbuf *w)
{
	int rc = sh_grow_array((void **)&f->queue, &f->cap_queue, f->nqueue, sizeof(*f->queue));
	if (rc)
		return sh_err_set(f, rc, "queueing tasks: %s", shoal_strerror(rc));
	f->queue[f->nqueue++] = *w;
	sh_wbuf_init(w);
	return 0;
}

/* Closes the batch being built and queues it; block: until all is sent
 * (or deadline). */
int sh_farm_send_batch(shoal_farm *f, bool block, int64_t deadline)
{
	if (f->nsub) {
		int rc = sh_tk_batch_end(&f->sub, f->nsub, SH_TK_SUBMIT);
		if (rc)
			return sh_err_set(f, rc, "queueing tasks: %s", shoal_strerror(rc));
		if ((rc = sh_farm_queue_frame(f, &f->sub)) != 0)
			return rc;
		f->nsub = 0;
		sh_tk_batch_begin(&f->sub);
	}
	return sh_farm_drain(f, block, deadline);
}

int shoal_farm_flush(shoal_farm *f)
{
	return f ? sh_farm_send_batch(f, true, SHOAL_FOREVER) : SHOAL_EINVAL;
}

/* Room for the result of id. */
static int track(shoal_farm *f, uint64_t id)
{
	size_t need = (size_t)(id - f->base + 1);
	if (need <= f->cap_res)
		return 0;
	size_t cap = f->cap_res ? f->cap_res : 1024;
	while (cap < need)
		cap *= 2;
	tk_res *r = shoal_realloc(f->res, f->cap_res * sizeof(*r), cap * sizeof(*r));
	if (!r)
		return SHOAL_ENOMEM;
	memset(r + f->cap_res, 0, (cap - f->cap_res) * sizeof(*r));
	f->res = r;
	f->cap_res = cap;
	return 0;
}

/* The bytes of v's payloads that would be packed inline (tensors and
 * blobs go by reference with a store), counted until enough. */
static uint64_t inline_bytes(const shoal_value *v, bool store, uint64_t enough)
{
	switch (v->type) {
	case SHOAL_V_STR:
	case SHOAL_V_BYTES:
		return v->n;
	case SHOAL_V_TENSOR:
	case SHOAL_V_BLOB:
		return store && v->v.t.obj ? 0 : v->v.t.nbytes;
	case SHOAL_V_ARRAY:
	case SHOAL_V_MAP: {
		uint64_t sum = 0;
		uint32_t k = v->type == SHOAL_V_MAP ? 2 * v->n : v->n;
		for (uint32_t i = 0; i < k && sum < enough; i++)
			sum += inline_bytes(&v->v.items[i], store, enough - sum);
		return sum;
	}
	default:
		return 0;
	}
}

static void pack_opts(msgpack_packer *pk, const shoal_task_opts *o)
{
	msgpack_pack_int64(pk, o->timeout_ns);
	msgpack_pack_uint32(pk, o->retries);
	msgpack_pack_int32(pk, o->engine);
	msgpack_pack_array(pk, o->after ? o->nafter : 0);
	for (uint32_t i = 0; o->after && i < o->nafter; i++)
		msgpack_pack_uint64(pk, o->after[i]);
	msgpack_pack_array(pk, o->follow ? o->nfollow : 0);
	for (uint32_t i = 0; o->follow && i < o->nfollow; i++)
		msgpack_pack_uint64(pk, o->follow[i]);
}

/* A task with large arguments goes alone in its frame, after the batches
 * before it, with its fn and args out of band, written from where they lie
 * before submit returns (so the caller may change them then): one copy on
 * this side, and over TCP none in the controller (proto.h). */
static int submit_large(shoal_farm *f, const char *fn, const shoal_value *args,
			const shoal_task_opts *o)
{
	sh_wbuf_reset(&f->call);
	msgpack_packer pk;
	sh_wbuf_packer(&f->call, &pk);
	sh_mp_pack_cstr(&pk, fn);
	sh_value_pack_ref(&pk, args, f->store, &f->call);
	const sh_msg_part *parts;
	uint32_t n;
	int rc = f->call.err ? f->call.err : sh_wbuf_gather(&f->call, &parts, &n);
	sh_tk_batch_begin(&f->one);
	sh_wbuf_packer(&f->one, &pk);
	msgpack_pack_array(&pk, 7);
	msgpack_pack_uint64(&pk, f->next_id + 1);
	msgpack_pack_uint64(&pk, f->call.len + f->call.ref_bytes);
	pack_opts(&pk, o);
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		rc = sh_wbuf_oob(&f->one, parts[i].p, parts[i].n);
	if (rc == 0)
		rc = sh_tk_batch_end(&f->one, 1, SH_TK_SUBMIT);
	if (rc)
		return sh_err_set(f, rc, "encoding the task: %s", shoal_strerror(rc));
	if ((rc = sh_farm_send_batch(f, true, SHOAL_FOREVER)) != 0)
		return rc;
	if (f->tcp < 0) {
		rc = sh_frame_send(&f->l.up, &f->one, sh_farm_ring_deadline(f, SHOAL_FOREVER));
	} else {
		rc = sh_grow_to((void **)&f->parts, &f->cap_parts, f->one.noob + 1,
				sizeof(*f->parts));
		if (rc == 0) {
			f->parts[0] = (sh_msg_part){f->one.p, f->one.len};
			memcpy(f->parts + 1, f->one.oob, f->one.noob * sizeof(*f->parts));
			rc = sh_channel_writev(f->ch, f->parts, f->one.noob + 1, false,
					       SHOAL_FOREVER);
		}
	}
	if (f->call.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&f->call);
	return rc ? sh_err_set(f, rc, "sending a task to the controller: %s", shoal_strerror(rc))
		  : 0;
}

static int submit_one(shoal_farm *f, const char *fn, const shoal_value *args,
		      const shoal_task_opts *o, shoal_task *id)
{
	shoal_task_opts d;
	if (!o) {
		shoal_task_opts_init(&d);
		o = &d;
	}
	int rc = track(f, f->next_id + 1);
	if (rc)
		return sh_err_set(f, rc, "no memory for another task");
	/* Tensors and blobs not in the store yet go into it now, once, as
	 * objects this task owns until its result is in. */
	tk_res *slot = &f->res[f->next_id + 1 - f->base];
	if (f->store && args && sh_value_needs_share(args)) {
		char why[256];
		shoal_vbuf_reset(f->share);
		shoal_value *c = sh_value_clone(f->share, args);
		if (!c)
			return sh_err_set(f, SHOAL_ENOMEM, "no memory to share the arguments");
		if ((rc = sh_value_share(f->share, c, why, sizeof(why))) != 0)
			return sh_err_set(f, rc, "sharing the arguments: %s", why);
		args = c;
		if (f->share->nmade) {
			if (!(slot->made = shoal_alloc(f->share->nmade * sizeof(*slot->made))))
				return sh_err_set(f, SHOAL_ENOMEM, "no memory for another task");
			memcpy(slot->made, f->share->made, f->share->nmade * sizeof(*slot->made));
			slot->nmade = f->share->nmade;
			f->share->nmade = 0; /* they are the task's now */
		}
	}
	if (args && inline_bytes(args, f->store != NULL, SH_TASKS_REF_MIN) >= SH_TASKS_REF_MIN) {
		rc = submit_large(f, fn, args, o);
		if (rc)
			sh_farm_drop_made(f, slot);
		else
			*id = ++f->next_id;
		if (f->share)
			shoal_vbuf_reset(f->share);
		return rc;
	}
	size_t mark = f->sub.len;
	msgpack_packer pk;
	sh_wbuf_packer(&f->sub, &pk);
	msgpack_pack_array(&pk, 8);
	msgpack_pack_uint64(&pk, f->next_id + 1);
	sh_mp_pack_cstr(&pk, fn);
	shoal_value nil = {.type = SHOAL_V_NIL};
	sh_value_pack(&pk, args ? args : &nil, f->store, NULL);
	pack_opts(&pk, o);
	if (f->sub.err) {
		rc = f->sub.err;
		f->sub.err = 0;
		f->sub.len = mark;
		sh_farm_drop_made(f, slot);
		return sh_err_set(f, rc, "encoding the task: %s", shoal_strerror(rc));
	}
	*id = ++f->next_id;
	f->nsub++;
	if (f->sub.len >= SH_TASKS_BATCH_BYTES)
		rc = sh_farm_send_batch(f, false,
					SHOAL_NOWAIT); /* a full ring or socket keeps it */
	if (f->share)
		shoal_vbuf_reset(f->share); /* its mappings; the objects live on */
	return rc;
}

int shoal_farm_submit(shoal_farm *f, const char *fn, const shoal_value *args,
		      const shoal_task_opts *opts, shoal_task *id)
{
	if (!f || !fn || !*fn || !id)
		return SHOAL_EINVAL;
	sh_err_clear(f);
	return submit_one(f, fn, args, opts, id);
}

int shoal_farm_map(shoal_farm *f, const char *fn, const shoal_value *args,
		   const shoal_task_opts *opts, shoal_task *first)
{
	if (!f || !fn || !*fn || !args || args->type != SHOAL_V_ARRAY || !first)
		return SHOAL_EINVAL;
	sh_err_clear(f);
	*first = f->next_id + 1;
	for (uint32_t i = 0; i < args->n; i++) {
		shoal_task id;
		int rc = submit_one(f, fn, &args->v.items[i], opts, &id);
		if (rc)
			return rc;
	}
	return 0;
}

/* The task farm's client: tasks are encoded into a SUBMIT batch as they
 * are submitted and sent when the batch is full or the client flushes or
 * waits, so submitting a small task never waits for the controller. A
 * task with large arguments goes at once, alone in its frame after the
 * batches before it, its bytes out of band from where they lie. With a
 * store (shoal_farm_use_store), tensors and blobs not in it yet are put
 * there first and go by reference. Results arrive in batches and are kept,
 * as the bytes the engine encoded, until waited for; a wait decodes its
 * result into the caller's vbuf.
 *
 * shoal_farm_stat asks the controller for its figures (a STATUS frame,
 * answered after the results it has for us). A wait that times out asks
 * the same, briefly, so that its message can say when no engine is there
 * to run anything: nothing is asked while results come. The handle's
 * files: this one (connecting, closing, the objects made for tasks),
 * farm_submit.c and farm_wait.c. */
#include "tasks/farm_impl.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *shoal_farm_error(const shoal_farm *f)
{
	return sh_err_get(f);
}

void shoal_task_opts_init(shoal_task_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->engine = -1;
}

/* A store object made for a task goes: now, or at shoal_farm_drop_taken
 * when deferred (the id kept, or deleted now when there is no room). */
static void drop_id(shoal_farm *f, shoal_id id)
{
	if (f->defer) {
		if (f->nlater == f->cap_later) {
			uint32_t nc = f->cap_later ? 2 * f->cap_later : 64;
			shoal_id *p =
				shoal_realloc(f->later, f->cap_later * sizeof(*p), nc * sizeof(*p));
			if (p) {
				f->later = p;
				f->cap_later = nc;
			}
		}
		if (f->nlater < f->cap_later) {
			f->later[f->nlater++] = id;
			return;
		}
	}
	shoal_delete_id(f->store, id);
}

/* The store objects an engine made for a result (the list after the
 * value, at m) are ours to delete. */
void sh_farm_drop_result_objects(shoal_farm *f, sh_mp *m)
{
	uint32_t n;
	if (!f->store || sh_mp_array(m, &n))
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t id;
		if (sh_mp_uint(m, &id) == 0)
			drop_id(f, id);
	}
}

void shoal_farm_defer_drops(shoal_farm *f, bool on)
{
	if (f)
		f->defer = on;
}

void shoal_farm_drop_taken(shoal_farm *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->nlater; i++)
		shoal_delete_id(f->store, f->later[i]);
	f->nlater = 0;
}

/* The objects made for a task's arguments go once its result is taken. */
void sh_farm_drop_made(shoal_farm *f, tk_res *r)
{
	for (uint32_t i = 0; i < r->nmade; i++)
		drop_id(f, r->made[i]);
	if (r->made)
		shoal_free(r->made, r->nmade * sizeof(*r->made));
	r->made = NULL;
	r->nmade = 0;
}

static void farm_free(shoal_farm *f)
{
	/* objects of results never taken are ours: they go when the store
	 * connection does */
	f->defer = false;
	for (size_t i = 0; f->res && i < f->cap_res; i++)
		sh_farm_drop_made(f, &f->res[i]);
	shoal_farm_drop_taken(f);
	if (f->later)
		shoal_free(f->later, f->cap_later * sizeof(*f->later));
	shoal_vbuf_free(f->share);
	if (f->store)
		shoal_disconnect(f->store);
	sh_link_fini(&f->l);
	sh_channel_free(f->ch);
	if (f->tcp >= 0)
		close(f->tcp);
	for (uint32_t i = 0; i < f->nqueue; i++)
		sh_wbuf_fini(&f->queue[i]);
	if (f->queue)
		shoal_free(f->queue, f->cap_queue * sizeof(*f->queue));
	sh_wbuf_fini(&f->sub);
	sh_wbuf_fini(&f->one);
	sh_wbuf_fini(&f->call);
	if (f->parts)
		shoal_free(f->parts, f->cap_parts * sizeof(*f->parts));
	if (f->res)
		shoal_free(f->res, f->cap_res * sizeof(*f->res));
	if (f->rbuf)
		shoal_free(f->rbuf, f->rcap);
	if (f->in)
		shoal_free(f->in, f->in_cap);
	if (f->eng)
		shoal_free(f->eng, f->cap_eng * sizeof(*f->eng));
	SH_DELETE(f);
}

int shoal_farm_connect(shoal_farm **out, const char *socket)
{
	return shoal_farm_connect_until(out, socket, shoal_deadline_in(SH_TASKS_CONNECT_NS));
}

void shoal_farm_set_timeout(shoal_farm *f, int64_t ns)
{
	if (!f)
		return;
	f->timeout_ns = ns > 0 ? ns : 0;
	if (f->ch)
		sh_channel_set_stall(f->ch, f->timeout_ns);
}

/* The deadline of a wait for the controller's ring: the caller's, or
 * sooner by the connection's timeout. */
int64_t sh_farm_ring_deadline(const shoal_farm *f, int64_t deadline)
{
	if (!f->timeout_ns)
		return deadline;
	int64_t t = shoal_deadline_in(f->timeout_ns);
	return deadline == SHOAL_FOREVER || t < deadline ? t : deadline;
}

int shoal_farm_connect_until(shoal_farm **out, const char *socket, int64_t deadline)
{
	if (!out || !socket)
		return SHOAL_EINVAL;
	shoal_farm *f = SH_NEW(shoal_farm);
	if (!f)
		return SHOAL_ENOMEM;
	sh_wbuf_init(&f->sub);
	sh_wbuf_init(&f->one);
	sh_wbuf_init(&f->call);
	sh_link_init(&f->l, -1);
	f->tcp = -1;
	uint64_t info[1];
	char why[256];
	int rc;
	if (!strncmp(socket, "tcp://", 6)) {
		rc = sh_tcp_connect_auth(socket + 6, SH_TASKS_CLIENT, deadline, &f->tcp, &f->ch,
					 why, sizeof(why));
	} else {
		rc = sh_link_connect(&f->l, socket, SH_TASKS_CLIENT, SH_TASKS_VERSION,
				     SH_TASKS_RING_CAP, info, 1, NULL, 0, why, sizeof(why));
	}
	if (rc) {
		sh_warn("tasks", "%s", why);
		farm_free(f);
		return rc;
	}
	f->l.down.spin_ns = 50000;
	/* A fiber's wait (a Python tasklet's) sleeps in its poller, on the
	 * doorbell the controller made for us; a thread's on the futex. One
	 * call at a time, so one doorbell serves both rings. A wait given up
	 * (cancelled) loses nothing: reads and writes resume (in_got, sent). */
	f->l.up.fiber_efd = f->l.down.fiber_efd = f->l.efd_conn;
	f->base = 1;
	snprintf(f->where, sizeof(f->where), "%s", socket);
	shoal_farm_set_timeout(f, SH_TASKS_TIMEOUT_NS);
	sh_tk_batch_begin(&f->sub);
	*out = f;
	return 0;
}

void shoal_farm_close(shoal_farm *f)
{
	if (f)
		farm_free(f);
}

int shoal_farm_use_store(shoal_farm *f, const char *store_socket)
{
	if (!f || !store_socket || f->store)
		return SHOAL_EINVAL;
	int rc = shoal_vbuf_create(&f->share);
	if (rc == 0 && (rc = shoal_connect(&f->store, store_socket)) != 0) {
		shoal_vbuf_free(f->share);
		f->share = NULL;
		return sh_err_set(f, rc, "no store at %s: %s", store_socket, shoal_strerror(rc));
	}
	f->share->store = f->store;
	/* Engines seal large results for us: ours from then on, whatever
	 * becomes of the engine (and freed with this connection). */
	uint64_t token;
	if ((rc = shoal_claim(f->store, &token)) != 0)
		return sh_err_set(f, rc, "claiming an owner token: %s",
				  shoal_client_error(f->store));
	sh_wbuf w;
	msgpack_packer pk;
	sh_wbuf_init(&w);
	sh_tk_batch_begin(&w);
	sh_wbuf_packer(&w, &pk);
	msgpack_pack_uint64(&pk, token);
	/* after the tasks submitted so far, as the next batch */
	if ((rc = sh_tk_batch_end(&w, 1, SH_TK_OWNER)) != 0)
		rc = sh_err_set(f, rc, "telling the controller our owner token: %s",
				shoal_strerror(rc));
	else if ((rc = sh_farm_send_batch(f, false, SHOAL_FOREVER)) == 0 &&
		 (rc = sh_farm_queue_frame(f, &w)) == 0)
		return sh_farm_drain(f, true, SHOAL_FOREVER);
	sh_wbuf_fini(&w);
	return rc;
}

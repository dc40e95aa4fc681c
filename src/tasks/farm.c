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
 * to run anything: nothing is asked while results come. */
#include "net/net.h"
#include "rpc/value.h"
#include "tasks/proto.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A task's result as it came. */
typedef struct tk_res {
	uint8_t state; /* 0: not yet, 1: here, 2: taken */
	int32_t status;
	uint64_t off; /* in rbuf */
	uint32_t len;
	uint32_t nmade; /* store objects made for its arguments (in made) */
	shoal_id *made;
} tk_res;

struct shoal_farm {
	sh_link l;
	int tcp;	/* the controller over TCP (then l is unused), or -1 */
	sh_channel *ch; /* the secure channel on tcp */
	/* how long a blocking call waits for the controller to take or send
	 * anything (shoal_farm_set_timeout); 0: as long as it takes */
	int64_t timeout_ns;
	sh_wbuf sub; /* the SUBMIT batch being built */
	/* a task with large arguments: its frame, and its fn and args */
	sh_wbuf one, call;
	sh_msg_part *parts;
	uint32_t cap_parts;
	uint32_t nsub;
	/* Batches closed but not yet in the ring or socket (it was full):
	 * sent as it drains, so that submitting never waits for the
	 * controller. sent: bytes of the first already written. */
	sh_wbuf *queue;
	uint32_t nqueue, cap_queue;
	size_t sent;
	uint64_t next_id; /* the last id given */
	/* results of tasks base .. next_id: res[id - base] */
	tk_res *res;
	uint64_t base;
	size_t cap_res;
	unsigned char *rbuf;
	size_t rlen, rcap;
	uint64_t here, taken; /* results in, and taken, of base .. next_id */
	uint64_t scan;	      /* every result before res[scan] is taken */
	unsigned char *in;
	size_t in_cap;
	/* A message read in part when a wait's deadline came: the next read
	 * goes on with it (begun again, it would read its middle as a start). */
	size_t in_got, in_len;
	/* shared arguments: the store, and a vbuf to share a submission in */
	shoal_client *store;
	/* objects of taken results left for shoal_farm_drop_taken */
	bool defer;
	shoal_id *later;
	uint32_t nlater, cap_later;
	shoal_vbuf *share;
	/* the controller's last STATUS answer, and how many came */
	shoal_controller_stat st;
	shoal_farm_engine *eng;
	uint32_t neng, cap_eng;
	uint64_t answers;
	bool asking;	 /* a timed-out wait asks (no asking within) */
	bool told;	 /* "no engine" has been logged once */
	char where[128]; /* the controller's socket, for messages */
};

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
static void drop_result_objects(shoal_farm *f, sh_mp *m)
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
static void drop_made(shoal_farm *f, tk_res *r)
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
		drop_made(f, &f->res[i]);
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
static int64_t ring_deadline(const shoal_farm *f, int64_t deadline)
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

static int queue_frame(shoal_farm *f, sh_wbuf *w);
static int send_batch(shoal_farm *f, bool block, int64_t deadline);
static int drain(shoal_farm *f, bool block, int64_t deadline);
static int pump(shoal_farm *f, int64_t deadline, bool ask);
static int timed_out(shoal_farm *f);

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
	else if ((rc = send_batch(f, false, SHOAL_FOREVER)) == 0 && (rc = queue_frame(f, &w)) == 0)
		return drain(f, true, SHOAL_FOREVER);
	sh_wbuf_fini(&w);
	return rc;
}

/* Writes queued batches into the ring; without block, only as much as
 * fits now (the rest waits for the next call); with block, until deadline
 * at most, and no longer than the timeout without the controller taking
 * anything. A timeout leaves the queue as it is (a later call goes on). */
static int drain(shoal_farm *f, bool block, int64_t deadline)
{
	while (f->nqueue) {
		sh_wbuf *b = &f->queue[0];
		int rc;
		if (f->tcp >= 0)
			rc = sh_channel_write_part(f->ch, b->p, b->len, &f->sent, block, false,
						   block ? deadline : SHOAL_NOWAIT);
		else
			rc = sh_msg_write_part(&f->l.up, b->p, b->len, &f->sent,
					       block ? ring_deadline(f, deadline) : SHOAL_NOWAIT);
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
static int queue_frame(shoal_farm *f, sh_wbuf *w)
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
static int send_batch(shoal_farm *f, bool block, int64_t deadline)
{
	if (f->nsub) {
		int rc = sh_tk_batch_end(&f->sub, f->nsub, SH_TK_SUBMIT);
		if (rc)
			return sh_err_set(f, rc, "queueing tasks: %s", shoal_strerror(rc));
		if ((rc = queue_frame(f, &f->sub)) != 0)
			return rc;
		f->nsub = 0;
		sh_tk_batch_begin(&f->sub);
	}
	return drain(f, block, deadline);
}

int shoal_farm_flush(shoal_farm *f)
{
	return f ? send_batch(f, true, SHOAL_FOREVER) : SHOAL_EINVAL;
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
	if ((rc = send_batch(f, true, SHOAL_FOREVER)) != 0)
		return rc;
	if (f->tcp < 0) {
		rc = sh_frame_send(&f->l.up, &f->one, ring_deadline(f, SHOAL_FOREVER));
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
			drop_made(f, slot);
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
		drop_made(f, slot);
		return sh_err_set(f, rc, "encoding the task: %s", shoal_strerror(rc));
	}
	*id = ++f->next_id;
	f->nsub++;
	if (f->sub.len >= SH_TASKS_BATCH_BYTES)
		rc = send_batch(f, false, SHOAL_NOWAIT); /* a full ring or socket keeps it */
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

/* A STATUS answer (proto.h), kept in f. */
static int read_status(shoal_farm *f, const unsigned char *p, size_t len)
{
	sh_mp m;
	uint32_t n, ne;
	uint64_t v[9];
	sh_mp_init(&m, p, len);
	if (sh_mp_array(&m, &n) || n != 10)
		return sh_err_set(f, SHOAL_EPROTO, "from the controller: a malformed status");
	for (int i = 0; i < 9; i++)
		if (sh_mp_uint(&m, &v[i]) || (i < 2 && v[i] > UINT32_MAX))
			return sh_err_set(f, SHOAL_EPROTO,
					  "from the controller: a malformed status");
	if (sh_mp_array(&m, &ne) ||
	    sh_grow_to((void **)&f->eng, &f->cap_eng, ne ? ne : 1, sizeof(*f->eng)) != 0)
		return sh_err_set(f, SHOAL_EPROTO, "from the controller: a malformed status");
	for (uint32_t i = 0; i < ne; i++) {
		uint32_t k, pl;
		uint64_t num, inflight;
		int64_t pid;
		const char *peer;
		if (sh_mp_array(&m, &k) || k != 4 || sh_mp_uint(&m, &num) || num > UINT32_MAX ||
		    sh_mp_str(&m, &peer, &pl) || sh_mp_int(&m, &pid) || pid < 0 ||
		    pid > INT32_MAX || sh_mp_uint(&m, &inflight) || inflight > UINT32_MAX)
			return sh_err_set(f, SHOAL_EPROTO,
					  "from the controller: a malformed status");
		shoal_farm_engine *e = &f->eng[i];
		e->num = (uint32_t)num;
		e->pid = (int32_t)pid;
		e->inflight = (uint32_t)inflight;
		size_t cut = pl < sizeof(e->peer) - 1 ? pl : sizeof(e->peer) - 1;
		memcpy(e->peer, peer, cut);
		e->peer[cut] = 0;
	}
	if (sh_mp_done(&m))
		return sh_err_set(f, SHOAL_EPROTO, "from the controller: a malformed status");
	f->st = (shoal_controller_stat){
		.engines = (uint32_t)v[0],
		.clients = (uint32_t)v[1],
		.queued = v[2],
		.running = v[3],
		.done = v[4],
		.retried = v[5],
		.failed = v[6],
		.held_bytes = v[7],
		.held_peak = v[8],
	};
	f->neng = ne;
	f->answers++;
	return 0;
}

/* Asks the controller for its figures and waits for the answer until
 * deadline (results that come first are kept). */
static int ask_status(shoal_farm *f, int64_t deadline)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	sh_tk_batch_begin(&w);
	int rc = sh_tk_batch_end(&w, 0, SH_TK_STATUS);
	if (rc) {
		sh_wbuf_fini(&w);
		return sh_err_set(f, rc, "asking the controller: %s", shoal_strerror(rc));
	}
	/* after the tasks queued so far, as the next frame */
	if ((rc = send_batch(f, false, SHOAL_NOWAIT)) != 0 || (rc = queue_frame(f, &w)) != 0) {
		sh_wbuf_fini(&w);
		return rc;
	}
	if ((rc = drain(f, true, deadline)) != 0)
		return rc;
	uint64_t had = f->answers;
	f->asking = true;
	while (rc == 0 && f->answers == had)
		rc = pump(f, deadline, true);
	f->asking = false;
	return rc;
}

/* A wait's deadline passed: when the controller has no engine, the
 * message says so (and the log, once), since then no deadline would have
 * been long enough. Asking costs a round trip, bounded by 250 ms. */
static int timed_out(shoal_farm *f)
{
	if (!f->asking) {
		int64_t soon = shoal_deadline_in(250 * 1000000LL);
		if (ask_status(f, soon) == 0 && f->st.engines == 0) {
			if (!f->told)
				sh_warn("tasks",
					"no engine is connected to the controller at %s: tasks "
					"wait until one is (shoal-engine --socket %s --so "
					"LIBRARY.so)",
					f->where, f->where);
			f->told = true;
			return sh_err_set(
				f, SHOAL_ETIMEDOUT,
				"no result before the deadline: no engine is connected to "
				"the controller at %s",
				f->where);
		}
	}
	return sh_err_set(f, SHOAL_ETIMEDOUT, "no result before the deadline");
}

int shoal_farm_stat(shoal_farm *f, shoal_controller_stat *st, shoal_farm_engine *engines,
		    uint32_t cap, uint32_t *nengines, int64_t deadline)
{
	if (!f || !st || (cap && !engines))
		return SHOAL_EINVAL;
	sh_err_clear(f);
	int rc = ask_status(f, deadline);
	if (rc == SHOAL_ETIMEDOUT)
		return sh_err_set(f, rc, "the controller at %s did not answer before the deadline",
				  f->where);
	if (rc)
		return rc;
	*st = f->st;
	for (uint32_t i = 0; i < f->neng && i < cap; i++)
		engines[i] = f->eng[i];
	if (nengines)
		*nengines = f->neng;
	return 0;
}

/* Reads one RESULTS batch, waiting until deadline; looks at the socket
 * between slices, so a controller that died is noticed. */
/* Reads one message from the controller by deadline; when none came, ask:
 * whether to ask the controller if it has an engine (for the message). */
static int pump(shoal_farm *f, int64_t deadline, bool ask)
{
	size_t len = 0;
	int rc;
	if (f->tcp >= 0)
		rc = sh_channel_read_frame(f->ch, &f->in, &f->in_cap, &len, SH_TASKS_MSG_MAX, false,
					   deadline);
	for (; f->tcp < 0;) {
		int64_t slice = shoal_deadline_in(100000000);
		rc = sh_msg_read_part(
			&f->l.down, &f->in, &f->in_cap, &f->in_got, &f->in_len, SH_TASKS_MSG_MAX,
			deadline != SHOAL_FOREVER && deadline < slice ? deadline : slice);
		if (rc == 0) {
			len = f->in_len;
			f->in_got = f->in_len = 0;
		}
		if (rc != SHOAL_ETIMEDOUT || (deadline != SHOAL_FOREVER && deadline <= slice))
			break;
		struct pollfd p = {.fd = f->l.sock, .events = POLLIN};
		if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) {
			rc = SHOAL_ECONNRESET;
			break;
		}
	}
	if (rc == SHOAL_ETIMEDOUT)
		return ask ? timed_out(f) : sh_err_set(f, rc, "no result before the deadline");
	if (rc)
		return sh_err_set(f, rc == SHOAL_ECLOSED ? SHOAL_ECONNRESET : rc,
				  "the controller's connection: %s%s%s", shoal_strerror(rc),
				  f->ch && *sh_channel_error(f->ch) ? ": " : "",
				  f->ch ? sh_channel_error(f->ch) : "");
	sh_frame fr;
	char why[160];
	sh_mp m;
	uint32_t n;
	why[0] = 0;
	if (sh_frame_decode(f->in, len, &fr, why, sizeof(why)) == 0 && fr.op == SH_TK_STATUS &&
	    !fr.oob) {
		rc = read_status(f, f->in + SH_FRAME_HDR, fr.body_len);
		sh_msg_trim(&f->in, &f->in_cap);
		return rc;
	}
	if (why[0] || fr.op != SH_TK_RESULTS || fr.oob)
		return sh_err_set(f, SHOAL_EPROTO, "from the controller: %s",
				  why[0] ? why : "not a batch of results");
	sh_mp_init(&m, f->in + SH_FRAME_HDR, fr.body_len);
	if (sh_mp_array(&m, &n))
		return sh_err_set(f, SHOAL_EPROTO, "from the controller: malformed results");
	for (uint32_t i = 0; i < n; i++) {
		uint64_t id;
		int32_t status;
		const unsigned char *from;
		size_t vl;
		if (sh_tk_read_result(&m, &id, &status, &from, &vl))
			return sh_err_set(f, SHOAL_EPROTO, "from the controller: malformed result");
		if (id < f->base || id > f->next_id || f->res[id - f->base].state != 0)
			continue; /* not ours, or twice: ignored */
		if (f->rlen + vl > f->rcap) {
			size_t cap = f->rcap ? f->rcap : 65536;
			while (cap < f->rlen + vl)
				cap *= 2;
			unsigned char *p = shoal_realloc(f->rbuf, f->rcap, cap);
			if (!p)
				return sh_err_set(f, SHOAL_ENOMEM, "no memory for results");
			f->rbuf = p;
			f->rcap = cap;
		}
		memcpy(f->rbuf + f->rlen, from, vl);
		tk_res *r = &f->res[id - f->base];
		r->state = 1;
		r->status = status;
		r->off = f->rlen;
		r->len = (uint32_t)vl;
		f->rlen += vl;
		f->here++;
	}
	sh_msg_trim(&f->in, &f->in_cap);
	return 0;
}

/* Once every result given out has been taken, the books start over. */
static void settle(shoal_farm *f)
{
	if (f->taken != f->next_id - f->base + 1)
		return;
	memset(f->res, 0, f->cap_res * sizeof(*f->res));
	f->base = f->next_id + 1;
	f->here = f->taken = f->scan = 0;
	f->rlen = 0;
}

int shoal_farm_wait(shoal_farm *f, shoal_task id, shoal_vbuf *out, const shoal_value **result,
		    int64_t deadline)
{
	if (!f || !out || !result)
		return SHOAL_EINVAL;
	sh_err_clear(f);
	if (id < f->base || id > f->next_id || f->res[id - f->base].state == 2)
		return sh_err_set(f, SHOAL_ENOENT, "no task %llu waiting to be taken",
				  (unsigned long long)id);
	int rc = send_batch(f, true, deadline);
	while (rc == 0 && f->res[id - f->base].state == 0)
		rc = pump(f, deadline, true);
	if (rc)
		return rc;
	tk_res *r = &f->res[id - f->base];
	sh_mp m;
	sh_mp_init(&m, f->rbuf + r->off, r->len);
	r->state = 2;
	f->taken++;
	if (r->status != 0) {
		const char *msg = "";
		uint32_t ml = 0;
		if (sh_mp_str(&m, &msg, &ml))
			msg = "(no message)", ml = 12;
		rc = sh_err_set(f, r->status, "%.*s", (int)ml, msg);
	} else if (f->store && out->store && out->store != f->store) {
		rc = sh_err_set(f, SHOAL_EINVAL, "out holds objects of another store connection");
	} else {
		shoal_value *v;
		char why[256] = "malformed";
		uint32_t two;
		if (f->store)
			out->store = f->store; /* large results are mapped from it */
		if (sh_mp_array(&m, &two) || two != 2 ||
		    (rc = sh_value_decode(&m, out, NULL, &v, why, sizeof(why))) != 0)
			rc = sh_err_set(f, rc == SHOAL_ENOMEM ? rc : SHOAL_EPROTO,
					"result of task %llu: %s", (unsigned long long)id, why);
		else
			*result = v;
		/* Objects made for it: deleted now, freed once out lets go. */
		drop_result_objects(f, &m);
	}
	/* and those made for its arguments (the result may have been one) */
	drop_made(f, r);
	settle(f);
	return rc;
}

static int wait_some(shoal_farm *f, shoal_task *ids, uint32_t cap, uint32_t *n, int64_t deadline,
		     bool ask);

int shoal_farm_wait_any(shoal_farm *f, shoal_task *id, int64_t deadline)
{
	uint32_t n;
	return wait_some(f, id, 1, &n, deadline, true);
}

int shoal_farm_wait_some(shoal_farm *f, shoal_task *ids, uint32_t cap, uint32_t *n,
			 int64_t deadline)
{
	return wait_some(f, ids, cap, n, deadline, false);
}

static int wait_some(shoal_farm *f, shoal_task *ids, uint32_t cap, uint32_t *n, int64_t deadline,
		     bool ask)
{
	if (!f || !ids || !cap || !n)
		return SHOAL_EINVAL;
	*n = 0;
	sh_err_clear(f);
	if (f->taken == f->next_id - f->base + 1)
		return sh_err_set(f, SHOAL_ENOENT, "no task waiting to be taken");
	int rc = send_batch(f, true, deadline);
	while (rc == 0 && f->here == f->taken)
		rc = pump(f, deadline, ask);
	if (rc)
		return rc;
	/* Results here and not taken, oldest first: from the first not
	 * taken on (a flood taken in order never scans a result twice). */
	uint64_t last = f->next_id - f->base, ready = f->here - f->taken;
	while (f->scan <= last && f->res[f->scan].state == 2)
		f->scan++;
	for (uint64_t i = f->scan; i <= last && *n < cap && ready; i++)
		if (f->res[i].state == 1) {
			ids[(*n)++] = f->base + i;
			ready--;
		}
	return 0;
}

int shoal_farm_wait_all(shoal_farm *f, int64_t deadline)
{
	if (!f)
		return SHOAL_EINVAL;
	sh_err_clear(f);
	int rc = send_batch(f, true, deadline);
	while (rc == 0 && f->here < f->next_id - f->base + 1)
		rc = pump(f, deadline, true);
	return rc;
}

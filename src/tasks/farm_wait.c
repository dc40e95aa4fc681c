/* The farm client's receiving side: results read from the controller
 * and kept as the engine encoded them until waited for, the controller's
 * STATUS (shoal_farm_stat, and the message of a wait that timed out), and
 * the waits for one task, some or all. */
#include "tasks/farm_impl.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

static int pump(shoal_farm *f, int64_t deadline, bool ask);

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
	if ((rc = sh_farm_send_batch(f, false, SHOAL_NOWAIT)) != 0 ||
	    (rc = sh_farm_queue_frame(f, &w)) != 0) {
		sh_wbuf_fini(&w);
		return rc;
	}
	if ((rc = sh_farm_drain(f, true, deadline)) != 0)
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
	int rc = sh_farm_send_batch(f, true, deadline);
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
		sh_farm_drop_result_objects(f, &m);
	}
	/* and those made for its arguments (the result may have been one) */
	sh_farm_drop_made(f, r);
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
	int rc = sh_farm_send_batch(f, true, deadline);
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
	int rc = sh_farm_send_batch(f, true, deadline);
	while (rc == 0 && f->here < f->next_id - f->base + 1)
		rc = pump(f, deadline, true);
	return rc;
}

/* The task farm's batches: building them, and reading their entries
 * (what clients, the controller and engines all parse; fuzz_tasks feeds
 * them hostile bytes). */
#include "tasks/proto.h"

void sh_tk_batch_begin(sh_wbuf *w)
{
	static const unsigned char array32[5] = {0xdd};
	sh_wbuf_frame_begin(w);
	sh_wbuf_append(w, array32, sizeof(array32));
}

int sh_tk_batch_end(sh_wbuf *w, uint32_t n, uint16_t op)
{
	if (w->err)
		return w->err;
	unsigned char *p = w->p + SH_FRAME_HDR + 1;
	p[0] = (unsigned char)(n >> 24), p[1] = (unsigned char)(n >> 16);
	p[2] = (unsigned char)(n >> 8), p[3] = (unsigned char)n;
	sh_frame f = {.op = op};
	return sh_wbuf_frame_end(w, &f);
}

/* A list of unsigned ids: the cursor at its first, and how many. */
static int read_list(sh_mp *m, sh_mp *at, uint32_t *n)
{
	if (sh_mp_array(m, n))
		return SHOAL_EPROTO;
	*at = *m;
	for (uint32_t i = 0; i < *n; i++) {
		uint64_t id;
		if (sh_mp_uint(m, &id))
			return SHOAL_EPROTO;
	}
	return 0;
}

int sh_tk_read_submit(sh_mp *m, sh_tk_submit *t)
{
	uint32_t k, fl;
	uint64_t retries;
	int64_t engine;
	const char *fn;
	if (sh_mp_array(m, &k) || (k != 8 && k != 7) || sh_mp_uint(m, &t->id) || t->id == 0)
		return SHOAL_EPROTO;
	if (k == 7) {
		uint64_t n;
		if (sh_mp_uint(m, &n) || n < SH_TASKS_REF_MIN || n > SH_TASKS_MSG_MAX)
			return SHOAL_EPROTO;
		t->call = NULL;
		t->call_len = (size_t)n;
	} else {
		t->call = m->p;
		if (sh_mp_str(m, &fn, &fl) || fl == 0 || sh_mp_skip(m))
			return SHOAL_EPROTO;
		t->call_len = (size_t)(m->p - t->call);
	}
	if (sh_mp_int(m, &t->timeout_ns) || sh_mp_uint(m, &retries) || sh_mp_int(m, &engine) ||
	    retries > UINT32_MAX || engine < -1 || engine > INT32_MAX ||
	    read_list(m, &t->after, &t->nafter) || read_list(m, &t->follow, &t->nfollow))
		return SHOAL_EPROTO;
	t->retries = (uint32_t)retries;
	t->engine = (int32_t)engine;
	return 0;
}

int sh_tk_read_result(sh_mp *m, uint64_t *id, int32_t *status, const unsigned char **raw,
		      size_t *len)
{
	uint32_t k;
	int64_t st;
	/* ids count from 1 on both sides: 0 is no task (and no map key) */
	if (sh_mp_array(m, &k) || k != 3 || sh_mp_uint(m, id) || *id == 0 || sh_mp_int(m, &st) ||
	    st > 0 || st < INT32_MIN)
		return SHOAL_EPROTO;
	*raw = m->p;
	if (sh_mp_skip(m))
		return SHOAL_EPROTO;
	*len = (size_t)(m->p - *raw);
	*status = (int32_t)st;
	return 0;
}

int sh_tk_read_run(sh_mp *m, sh_tk_run *r)
{
	uint32_t k;
	*r = (sh_tk_run){0};
	if (sh_mp_array(m, &k) || (k != 4 && k != 3) || sh_mp_uint(m, &r->tid) ||
	    sh_mp_uint(m, &r->owner))
		return SHOAL_EPROTO;
	if (k == 3)
		return sh_mp_uint(m, &r->oob) || r->oob == 0 || r->oob > SH_TASKS_MSG_MAX
			       ? SHOAL_EPROTO
			       : 0;
	if (sh_mp_str(m, &r->fn, &r->fn_len) || r->fn_len == 0)
		return SHOAL_EPROTO;
	return 0;
}

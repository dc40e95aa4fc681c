/* Fiber groups (group.h): each member runs through a trampoline that
 * links it into its group while it runs and unlinks it as it returns,
 * waking whoever waits for the group when the last one leaves. */
#include "fiber/group.h"

struct sh_fgroup_member {
	sh_fgroup_member *prev, *next;
	sh_fgroup *g;
	shoal_fiber *f;
	shoal_fiber_fn fn;
	void *arg;
};

static void unlink_member(sh_fgroup_member *m)
{
	sh_fgroup *g = m->g;
	if (m->prev)
		m->prev->next = m->next;
	else
		g->head = m->next;
	if (m->next)
		m->next->prev = m->prev;
	g->n--;
}

static void *member_main(void *arg)
{
	sh_fgroup_member *m = arg;
	sh_fgroup *g = m->g;
	void *r = m->fn(m->arg);
	unlink_member(m);
	SH_DELETE(m);
	if (g->n == 0)
		sh_waitq_wake_all(&g->ended);
	return r;
}

int sh_fgroup_spawn(sh_fgroup *g, shoal_fiber **out, shoal_fiber_fn fn, void *arg,
		    const shoal_fiber_opts *opts)
{
	if (!g || !fn)
		return SHOAL_EINVAL;
	if (g->stopping)
		return SHOAL_ECANCELED;
	sh_fgroup_member *m = SH_NEW(sh_fgroup_member);
	if (!m)
		return SHOAL_ENOMEM;
	*m = (sh_fgroup_member){.g = g, .fn = fn, .arg = arg};
	shoal_fiber_opts o = opts ? *opts : (shoal_fiber_opts){0};
	o.detached = 1;
	int rc = shoal_spawn(&m->f, member_main, m, &o);
	if (rc != 0) {
		SH_DELETE(m);
		return rc;
	}
	/* the member has not run yet: it starts at our next blocking point */
	m->next = g->head;
	if (g->head)
		g->head->prev = m;
	g->head = m;
	g->n++;
	if (out)
		*out = m->f;
	return 0;
}

void sh_fgroup_cancel(sh_fgroup *g)
{
	for (sh_fgroup_member *m = g->head; m; m = m->next)
		shoal_cancel(m->f);
}

int sh_fgroup_join(sh_fgroup *g, int64_t deadline)
{
	g->stopping = true;
	while (g->n > 0) {
		int rc = sh_waitq_wait(&g->ended, deadline);
		if (rc != 0)
			return g->n > 0 ? rc : 0;
	}
	return 0;
}

int sh_fgroup_stop(sh_fgroup *g, int64_t deadline)
{
	g->stopping = true;
	sh_fgroup_cancel(g);
	return sh_fgroup_join(g, deadline);
}

/* Fiber groups: the fibers a server runs for its connections, spawned into
 * one group that is cancelled and joined as a whole when the server stops
 * (libdill's bundles). A member is freed when it returns, so a daemon that
 * serves a million short connections does not keep a million fibers to
 * join; the group is what remembers the ones still running. A group and
 * its members belong to one scheduler: use it from that thread only. */
#ifndef SHOAL_FIBER_GROUP_H
#define SHOAL_FIBER_GROUP_H

#include "fiber/waitq.h"
#include "shoal_impl.h"

typedef struct sh_fgroup_member sh_fgroup_member;

typedef struct sh_fgroup {
	sh_fgroup_member *head;
	size_t n;	/* members still running */
	sh_waitq ended; /* who waits for n to reach 0 */
	bool stopping;	/* no new member may join */
} sh_fgroup;

static inline void sh_fgroup_init(sh_fgroup *g)
{
	*g = (sh_fgroup){0};
}

/* Runs fn(arg) in a new fiber of the group (opts->detached is ignored: a
 * member belongs to the group). *out, if not NULL, gets the fiber, valid
 * until it returns. Returns SHOAL_ECANCELED once the group is stopping
 * (fn will not run: the caller still owns arg), or shoal_spawn's errors. */
int sh_fgroup_spawn(sh_fgroup *g, shoal_fiber **out, shoal_fiber_fn fn, void *arg,
		    const shoal_fiber_opts *opts);

/* Waits until every member has returned, for a server that first told
 * its connections to end (shut their links); later spawns fail. Blocks
 * until the deadline: SHOAL_ETIMEDOUT leaves the members that did not end
 * yet running (still in the group: call again to wait for them),
 * SHOAL_ECANCELED if the caller is cancelled meanwhile. */
int sh_fgroup_join(sh_fgroup *g, int64_t deadline);

/* Cancels every member, then sh_fgroup_join. Blocks. */
int sh_fgroup_stop(sh_fgroup *g, int64_t deadline);

/* Cancels every member without waiting (they end at their next blocking
 * point); the group stays open to new members. */
void sh_fgroup_cancel(sh_fgroup *g);

#endif

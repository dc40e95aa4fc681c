/* Channels and select. A channel belongs to one scheduler, so its fast path
 * takes no lock: a send to a waiting receiver copies the element straight
 * into the receiver's buffer and makes it runnable. Other threads reach the
 * channel through cross-thread operations (sh_xop) posted to the owner's
 * inbox; the owner performs them as if they were local waiters. */
#include "switch.h"

#include <string.h>

/* What a send or a receive reads fills the first 64 bytes (sizes are 32-bit
 * for that), so a hop to a channel that left the caches fetches one pair of
 * lines, not the two or three of a layout with the list links in between. */
struct shoal_chan {
	shoal_sched *sched; /* NULL once the scheduler is gone (orphaned) */
	uint32_t elem_size, cap;
	uint32_t head, count;
	bool closed;
	_Atomic int xclosed; /* close requested (any thread may read it) */
	sh_wq recvq, sendq;
	shoal_chan *all_prev, *all_next; /* the scheduler's list of channels */
	char buf[];
};

_Static_assert(offsetof(struct shoal_chan, all_prev) == 64, "a channel's hot fields fill 64 bytes");

/* ---- wait queues ------------------------------------------------------------ */

static inline void wq_push(sh_wq *q, sh_waiter *w)
{
	w->next = NULL;
	w->prev = q->tail;
	if (q->tail)
		q->tail->next = w;
	else
		q->head = w;
	q->tail = w;
	w->linked = true;
}

static inline void wq_remove(sh_wq *q, sh_waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		q->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		q->tail = w->prev;
	w->linked = false;
}

/* prev and next of an unlinked waiter are stale; wq_push sets both. */
static inline sh_waiter *wq_pop(sh_wq *q)
{
	sh_waiter *w = q->head;
	if (w) {
		q->head = w->next;
		if (w->next)
			w->next->prev = NULL;
		else
			q->tail = NULL;
		w->linked = false;
	}
	return w;
}

/* Pops the first sender that still wants to send: a cross-thread sender
 * whose issuer gave up is dropped here. */
static inline sh_waiter *pop_sender(shoal_chan *c)
{
	for (;;) {
		sh_waiter *w = wq_pop(&c->sendq);
		if (!w || sh_likely(w->fiber != NULL))
			return w;
		sh_xop *op = sh_container_of(w, sh_xop, w);
		if (sh_xop_claim(op))
			return w;
		sh_xop_unref(op);
	}
}

/* The queue a waiter sits in; senders are the xops and SELECT_SEND cases. */
static sh_wq *waiter_queue(sh_waiter *w, bool is_send)
{
	return is_send ? &w->chan->sendq : &w->chan->recvq;
}

static inline void copy_elem(void *dst, const void *src, size_t n)
{
	if (n == sizeof(void *))
		memcpy(dst, src, sizeof(void *));
	else
		memcpy(dst, src, n);
}

/* The hot paths' copy: elements of 8 or 4 bytes only, each a fixed-size
 * move (copy_elem's memcpy of 4 would be a call). */
static inline void copy_word(void *dst, const void *src, size_t n)
{
	if (n == 8)
		memcpy(dst, src, 8);
	else
		memcpy(dst, src, 4);
}

void sh_chan_unlink_waiters(shoal_fiber *f)
{
	for (uint32_t i = 0; i < f->wait_n; i++) {
		sh_waiter *w = &f->wait_waiters[i];
		if (w->linked)
			wq_remove(waiter_queue(w, w->index & SH_W_SEND), w);
	}
}

/* Completes a waiter that was just popped from its queue. */
static inline void fire(sh_waiter *w, int rc)
{
	shoal_fiber *f = w->fiber;
	if (sh_unlikely(!f)) {
		/* Claimed when it was popped (pop_sender). */
		sh_xop_complete(sh_container_of(w, sh_xop, w), rc);
		return;
	}
	if (w->group) {
		for (uint32_t i = 0; i < w->ngroup; i++) {
			sh_waiter *o = &w->group[i];
			if (o->linked)
				wq_remove(waiter_queue(o, o->index & SH_W_SEND), o);
		}
		f->wake_index = w->index & ~SH_W_SEND; /* the select's case */
	}
	sh_wake(f, rc);
}

/* ---- the non-blocking halves ------------------------------------------------- */

static inline int try_send(shoal_chan *c, const void *elem)
{
	if (c->closed)
		return SHOAL_ECLOSED;
	sh_waiter *w = wq_pop(&c->recvq);
	if (w) {
		copy_elem(w->elem, elem, c->elem_size);
		fire(w, 0);
		return 0;
	}
	if (c->count < c->cap) {
		size_t tail = (size_t)c->head + c->count;
		if (tail >= c->cap)
			tail -= c->cap;
		copy_elem(c->buf + tail * c->elem_size, elem, c->elem_size);
		c->count++;
		return 0;
	}
	return SHOAL_EAGAIN;
}

static inline int try_recv(shoal_chan *c, void *elem)
{
	if (c->count) {
		copy_elem(elem, c->buf + (size_t)c->head * c->elem_size, c->elem_size);
		if (++c->head == c->cap)
			c->head = 0;
		c->count--;
		/* A blocked sender may now move into the freed slot. */
		sh_waiter *w = pop_sender(c);
		if (w) {
			size_t tail = (size_t)c->head + c->count;
			if (tail >= c->cap)
				tail -= c->cap;
			copy_elem(c->buf + tail * c->elem_size, w->elem, c->elem_size);
			c->count++;
			fire(w, 0);
		}
		return 0;
	}
	sh_waiter *w = pop_sender(c);
	if (w) {
		copy_elem(elem, w->elem, c->elem_size);
		fire(w, 0);
		return 0;
	}
	return c->closed ? SHOAL_ECLOSED : SHOAL_EAGAIN;
}

static int close_local(shoal_chan *c)
{
	if (c->closed)
		return SHOAL_ECLOSED;
	c->closed = true;
	sh_waiter *w;
	while ((w = wq_pop(&c->recvq)))
		fire(w, SHOAL_ECLOSED);
	while ((w = pop_sender(c)))
		fire(w, SHOAL_ECLOSED);
	return 0;
}

/* ---- cross-thread operations ------------------------------------------------ */

void sh_xop_unref(sh_xop *op)
{
	if (atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) == 1)
		shoal_free(op, op->bytes);
}

bool sh_xop_claim(sh_xop *op)
{
	uint32_t want = SH_XOP_PENDING;
	return atomic_compare_exchange_strong_explicit(&op->state, &want, SH_XOP_CLAIMED,
						       memory_order_acq_rel, memory_order_acquire);
}

void sh_xop_complete(sh_xop *op, int rc)
{
	op->rc = rc;
	if (op->fiber_sched) {
		/* The issuer's thread wakes its fiber; both hold a reference,
		 * so the op outlives whichever of us finishes first. */
		op->kind = SH_XOP_WAKE;
		sh_inbox_post(op->fiber_sched, op);
	} else {
		atomic_store_explicit(&op->state, SH_XOP_DONE, memory_order_release);
		sh_futex_wake(&op->state, false);
	}
	sh_xop_unref(op);
}

void sh_chan_xop(shoal_sched *s, sh_xop *op)
{
	(void)s;
	shoal_chan *c = op->chan;
	if (op->kind == SH_XOP_CLOSE) {
		close_local(c);
		sh_xop_unref(op);
		return;
	}
	SH_ASSERT(op->kind == SH_XOP_SEND);
	if (c->closed || c->recvq.head || c->count < c->cap) {
		if (!sh_xop_claim(op)) {
			sh_xop_unref(op);
			return;
		}
		sh_xop_complete(op, try_send(c, op->elem));
		return;
	}
	/* Queued like a blocked local sender; claimed when a receiver pops it. */
	memset(&op->w, 0, sizeof(op->w));
	op->w.chan = c;
	op->w.elem = op->elem;
	op->w.index = SH_W_SEND;
	wq_push(&c->sendq, &op->w);
}

/* A send from a thread that does not own the channel. A fiber of another
 * scheduler blocks only itself; a thread without one sleeps on the futex. */
static __attribute__((noinline)) int xsend(shoal_chan *c, const void *elem, int64_t deadline)
{
	shoal_sched *me = sh_tls_sched;
	size_t bytes;
	if (shoal_add_size(sizeof(sh_xop), c->elem_size, &bytes) != 0)
		return SHOAL_EOVERFLOW;
	sh_xop *op = shoal_alloc(bytes);
	if (!op)
		return SHOAL_ENOMEM;
	memset(op, 0, sizeof(*op));
	op->bytes = bytes;
	op->kind = SH_XOP_SEND;
	op->chan = c;
	atomic_init(&op->refs, 2);
	atomic_init(&op->state, SH_XOP_PENDING);
	memcpy(op->elem, elem, c->elem_size);
	if (me) {
		op->fiber = me->cur;
		op->fiber_sched = me;
	}
	sh_inbox_post(c->sched, op);
	int rc;
	if (me) {
		shoal_fiber *cur = me->cur;
		cur->wait_kind = SH_WAIT_XOP;
		rc = sh_block(me, deadline);
		if (op->woken) {
			rc = op->rc;
		} else {
			uint32_t want = SH_XOP_PENDING;
			if (!atomic_compare_exchange_strong(&op->state, &want, SH_XOP_ABANDONED)) {
				/* The owner is delivering it: wait for the word. */
				while (!op->woken) {
					cur->wait_kind = SH_WAIT_HARD;
					sh_block(me, SHOAL_FOREVER);
				}
				rc = op->rc;
			}
		}
	} else {
		for (;;) {
			uint32_t st = atomic_load_explicit(&op->state, memory_order_acquire);
			if (st == SH_XOP_DONE) {
				rc = op->rc;
				break;
			}
			uint32_t want = SH_XOP_PENDING;
			if (st == SH_XOP_PENDING && deadline != SHOAL_FOREVER &&
			    shoal_now_ns() >= deadline &&
			    atomic_compare_exchange_strong(&op->state, &want, SH_XOP_ABANDONED)) {
				rc = SHOAL_ETIMEDOUT;
				break;
			}
			sh_futex_wait(&op->state, st,
				      st == SH_XOP_PENDING ? deadline : SHOAL_FOREVER, false);
		}
	}
	sh_xop_unref(op);
	return rc;
}

/* A close from another thread takes effect when the owner next runs its
 * scheduler; the caller does not wait for that. */
static int xclose(shoal_chan *c)
{
	if (atomic_exchange(&c->xclosed, 1))
		return SHOAL_ECLOSED;
	sh_xop *op = shoal_alloc(sizeof(*op));
	if (!op) {
		atomic_store(&c->xclosed, 0);
		return SHOAL_ENOMEM;
	}
	memset(op, 0, sizeof(*op));
	op->bytes = sizeof(*op);
	op->kind = SH_XOP_CLOSE;
	op->chan = c;
	atomic_init(&op->refs, 1);
	sh_inbox_post(c->sched, op);
	return 0;
}

/* ---- allocation --------------------------------------------------------------- */

/* Programs that make a channel per fiber make and drop thousands at once;
 * small channels are recycled per scheduler instead of going to malloc. */
#define CHAN_CLASS 64
#define CHAN_CACHE_MAX 65536

static int chan_class(size_t total)
{
	size_t k = (total + CHAN_CLASS - 1) / CHAN_CLASS;
	return k >= 1 && k <= SH_CHAN_CLASSES ? (int)k - 1 : -1;
}

/* What shoal_alloc was asked for, so the sized free matches. */
static size_t chan_bytes(size_t total)
{
	int k = chan_class(total);
	return k < 0 ? total : (size_t)(k + 1) * CHAN_CLASS;
}

static shoal_chan *chan_alloc(shoal_sched *s, size_t total)
{
	int k = chan_class(total);
	if (k < 0)
		return shoal_alloc(total);
	shoal_chan *c = sh_ptrstack_pop(&s->chan_cache[k]);
	return c ? c : shoal_alloc((size_t)(k + 1) * CHAN_CLASS);
}

static void chan_free(shoal_sched *s, shoal_chan *c, size_t total)
{
	int k = chan_class(total);
	if (k < 0)
		shoal_free(c, total);
	else if (s->chan_cache[k].n >= CHAN_CACHE_MAX || s->destroying ||
		 sh_ptrstack_push(&s->chan_cache[k], c) != 0)
		shoal_free(c, (size_t)(k + 1) * CHAN_CLASS);
}

void sh_chan_orphan_all(shoal_sched *s)
{
	for (shoal_chan *c = s->chans; c; c = c->all_next) {
		/* Only other threads can still wait here (our fibers are all
		 * joined): closing completes their operations. */
		atomic_store(&c->xclosed, 1);
		close_local(c);
		c->sched = NULL;
	}
	s->chans = NULL;
}

void sh_chan_cache_fini(shoal_sched *s)
{
	for (int k = 0; k < SH_CHAN_CLASSES; k++) {
		void *c;
		while ((c = sh_ptrstack_pop(&s->chan_cache[k])))
			shoal_free(c, (size_t)(k + 1) * CHAN_CLASS);
		sh_ptrstack_fini(&s->chan_cache[k]);
	}
}

/* ---- public API ------------------------------------------------------------------ */

int shoal_chan_create(shoal_chan **out, size_t elem_size, size_t capacity)
{
	shoal_sched *s = sh_tls_sched;
	if (!out || !s || elem_size == 0 || elem_size > UINT32_MAX || capacity > UINT32_MAX)
		return SHOAL_EINVAL;
	size_t bytes, total;
	if (shoal_mul_size(elem_size, capacity, &bytes) != 0 ||
	    shoal_add_size(bytes, sizeof(shoal_chan), &total) != 0)
		return SHOAL_EOVERFLOW;
	shoal_chan *c = chan_alloc(s, total);
	if (!c)
		return SHOAL_ENOMEM;
	sh_zero(c, sizeof(*c));
	c->sched = s;
	c->elem_size = (uint32_t)elem_size;
	c->cap = (uint32_t)capacity;
	c->all_next = s->chans;
	if (s->chans)
		s->chans->all_prev = c;
	s->chans = c;
	*out = c;
	return 0;
}

int shoal_chan_destroy(shoal_chan *c)
{
	if (!c)
		return SHOAL_EINVAL;
	if (!c->sched) {
		/* Its scheduler was destroyed: nobody can wait on it now. */
		shoal_free(c, chan_bytes(sizeof(*c) + (size_t)c->elem_size * c->cap));
		return 0;
	}
	if (c->sched != sh_tls_sched)
		return SHOAL_EINVAL;
	/* Operations still in the inbox count as waiters too. */
	if (atomic_load_explicit(&c->sched->inbox_pending, memory_order_acquire))
		sh_inbox_drain(c->sched);
	/* Cross-thread senders whose issuers gave up hold nothing. */
	for (sh_waiter *w = c->sendq.head, *n; w; w = n) {
		n = w->next;
		if (!w->fiber &&
		    atomic_load(&sh_container_of(w, sh_xop, w)->state) == SH_XOP_ABANDONED) {
			wq_remove(&c->sendq, w);
			sh_xop_unref(sh_container_of(w, sh_xop, w));
		}
	}
	if (c->recvq.head || c->sendq.head)
		return SHOAL_EBUSY;
	shoal_sched *s = c->sched;
	if (c->all_prev)
		c->all_prev->all_next = c->all_next;
	else
		s->chans = c->all_next;
	if (c->all_next)
		c->all_next->all_prev = c->all_prev;
	chan_free(s, c, sizeof(*c) + (size_t)c->elem_size * c->cap);
	return 0;
}

size_t shoal_chan_len(const shoal_chan *c)
{
	return c ? c->count : 0;
}

/* A blocked fiber waits through the waiter and the small buffer inside its
 * own structure, so the fiber that completes the operation touches only the
 * channel and the (densely packed) fiber structures, never the sleeper's
 * stack: with thousands of fibers its lines have left the caches. */
static inline __attribute__((always_inline)) int block_on(shoal_sched *s, shoal_chan *c, sh_wq *q,
							  void *elem, bool send, int64_t deadline)
{
	shoal_fiber *cur = s->cur;
	sh_waiter *w = &cur->w1; /* fiber and group were set at spawn */
	bool small = c->elem_size <= sizeof(cur->xbuf);
	w->chan = c;
	w->index = send ? SH_W_SEND : 0;
	if (small) {
		if (send)
			copy_elem(cur->xbuf, elem, c->elem_size);
		w->elem = cur->xbuf;
	} else {
		w->elem = elem;
	}
	wq_push(q, w);
	cur->wait_kind = SH_WAIT_CHAN;
	cur->wait_waiters = w;
	cur->wait_n = 1;
	int rc = sh_block(s, deadline);
	if (rc == 0 && small && !send)
		copy_elem(elem, cur->xbuf, c->elem_size);
	return rc;
}

/* Everything but the hand-off to a fiber already waiting in a plain receive:
 * other threads, closed channels, buffering, select waiters, blocking. */
static __attribute__((noinline)) int send_slow(shoal_chan *c, const void *elem, int64_t deadline)
{
	shoal_sched *s = sh_tls_sched;
	if (sh_unlikely(!c->sched))
		return SHOAL_ECLOSED; /* its scheduler is gone */
	if (sh_unlikely(c->sched != s)) {
		if (s && s->cur->cancelled)
			return SHOAL_ECANCELED;
		if (atomic_load_explicit(&c->xclosed, memory_order_acquire))
			return SHOAL_ECLOSED;
		return xsend(c, elem, deadline);
	}
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	rc = try_send(c, elem);
	if (rc != SHOAL_EAGAIN)
		return rc;
	if (deadline == SHOAL_NOWAIT)
		return SHOAL_ETIMEDOUT;
	return block_on(s, c, &c->sendq, (void *)(uintptr_t)elem, true, deadline);
}

/* Makes the fiber of a plain (not select, not cross-thread) waiter that was
 * just taken off its queue runnable with success. */
static inline void wake_plain(shoal_sched *s, sh_waiter *w)
{
	shoal_fiber *f = w->fiber; /* blocked, since its waiter was queued */
	f->wake_rc = 0;
	f->state = SH_RUNNABLE;
	sh_runq_push(s, f);
}

/* The current fiber waits in a plain send or receive of a word-sized
 * element through its own waiter and buffer (see block_on), with no
 * deadline and no more live state than the switch needs. */
static inline __attribute__((always_inline)) int park_plain(shoal_sched *s, shoal_chan *c, sh_wq *q,
							    bool send)
{
	shoal_fiber *cur = s->cur;
	sh_waiter *w = &cur->w1;
	w->chan = c;
	w->index = send ? SH_W_SEND : 0;
	w->elem = cur->xbuf;
	wq_push(q, w);
	cur->wait_kind = SH_WAIT_CHAN;
	cur->wait_waiters = w;
	cur->wait_n = 1;
	cur->state = SH_BLOCKED;
	sh_schedule(s);
	cur->wait_kind = SH_WAIT_NONE;
	return cur->wake_rc;
}

/* The other half of a rendezvous: nobody receives yet and there is no room
 * to leave the element, so wait for a receiver to take it from this fiber's
 * buffer (a ping-pong's every send). Out of line, so that the hop above
 * stays a leaf that saves no registers. */
static __attribute__((noinline)) int send_park(shoal_sched *s, shoal_chan *c, const void *elem)
{
	copy_word(s->cur->xbuf, elem, c->elem_size);
	return park_plain(s, c, &c->sendq, true);
}

int shoal_chan_send(shoal_chan *c, const void *elem, int64_t deadline)
{
	if (sh_unlikely(!c || !elem))
		return SHOAL_EINVAL;
	shoal_sched *s = sh_tls_sched;
	if (sh_unlikely(c->sched != s || !s))
		return send_slow(c, elem, deadline); /* not ours: touch nothing */
	sh_waiter *w = c->recvq.head;
	size_t n = c->elem_size;
	if (sh_unlikely(s->cur->cancelled || c->closed || (n != 8 && n != 4)))
		return send_slow(c, elem, deadline);
	/* The channel hop: a receiver of this scheduler waits in a plain
	 * receive. Hand the element over and make it runnable, touching
	 * nothing else; this path calls nothing, so it saves no registers. */
	if (sh_likely(w && w->fiber && !w->group)) {
		wq_pop(&c->recvq);
		copy_word(w->elem, elem, n);
		wake_plain(s, w);
		return 0;
	}
	if (w || c->count < c->cap || deadline != SHOAL_FOREVER)
		return send_slow(c, elem, deadline);
	return send_park(s, c, elem);
}

/* Every receive but the channel hop's: with a deadline, from another
 * thread, with something to take at once, or of other element sizes. */
static __attribute__((noinline)) int recv_slow(shoal_chan *c, void *elem, int64_t deadline)
{
	shoal_sched *s = sh_tls_sched;
	if (sh_unlikely(!c->sched))
		return SHOAL_ECLOSED; /* its scheduler is gone */
	if (sh_unlikely(c->sched != s))
		return SHOAL_EINVAL;
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	if (c->count || c->sendq.head || c->closed) {
		rc = try_recv(c, elem);
		if (rc != SHOAL_EAGAIN)
			return rc;
	}
	if (deadline == SHOAL_NOWAIT)
		return SHOAL_ETIMEDOUT;
	return block_on(s, c, &c->recvq, elem, false, deadline);
}

int shoal_chan_recv(shoal_chan *c, void *elem, int64_t deadline)
{
	if (sh_unlikely(!c || !elem))
		return SHOAL_EINVAL;
	shoal_sched *s = sh_tls_sched;
	if (sh_unlikely(c->sched != s || !s))
		return recv_slow(c, elem, deadline);
	shoal_fiber *cur = s->cur;
	size_t n = c->elem_size;
	if (sh_unlikely(cur->cancelled || c->closed || c->count || (n != 8 && n != 4)))
		return recv_slow(c, elem, deadline);
	sh_waiter *w = c->sendq.head;
	if (w) {
		/* A sender of this scheduler waits in a plain send: take
		 * its element and make it runnable. */
		if (sh_unlikely(!w->fiber || w->group))
			return recv_slow(c, elem, deadline);
		wq_pop(&c->sendq);
		copy_word(elem, w->elem, n);
		wake_plain(s, w);
		return 0;
	}
	/* The channel hop: nothing to take, no deadline. */
	if (sh_unlikely(deadline != SHOAL_FOREVER))
		return recv_slow(c, elem, deadline);
	int rc = park_plain(s, c, &c->recvq, false);
	if (sh_likely(rc == 0))
		copy_word(elem, cur->xbuf, n);
	return rc;
}

int shoal_chan_close(shoal_chan *c)
{
	if (!c)
		return SHOAL_EINVAL;
	shoal_sched *s = sh_tls_sched;
	if (!c->sched)
		return SHOAL_ECLOSED;
	if (c->sched != s)
		return xclose(c);
	/* Another thread's close may be waiting in our inbox: close now, and
	 * whoever asked first gets 0. */
	int was = atomic_exchange(&c->xclosed, 1);
	close_local(c);
	return was ? SHOAL_ECLOSED : 0;
}

#define SELECT_STACK_CASES 8

int shoal_select(shoal_select_case *cases, size_t n, int64_t deadline, size_t *chosen)
{
	shoal_sched *s = sh_tls_sched;
	if (!s || (n && !cases) || !chosen || n > SH_SELECT_MAX)
		return SHOAL_EINVAL;
	for (size_t i = 0; i < n; i++) {
		shoal_select_case *k = &cases[i];
		if (!k->chan)
			continue;
		if (k->chan->sched != s || !k->elem ||
		    (k->op != SHOAL_SELECT_RECV && k->op != SHOAL_SELECT_SEND))
			return SHOAL_EINVAL;
	}
	int rc = sh_check_cancel(s);
	if (rc)
		return rc;
	size_t start = n ? (size_t)(sh_rand(s) % n) : 0;
	for (size_t j = 0; j < n; j++) {
		size_t i = start + j < n ? start + j : start + j - n;
		shoal_select_case *k = &cases[i];
		if (!k->chan)
			continue;
		rc = k->op == SHOAL_SELECT_RECV ? try_recv(k->chan, k->elem)
						: try_send(k->chan, k->elem);
		if (rc != SHOAL_EAGAIN) {
			*chosen = i;
			return rc;
		}
	}
	if (deadline == SHOAL_NOWAIT)
		return SHOAL_ETIMEDOUT;
	sh_waiter local[SELECT_STACK_CASES], *ws = local;
	if (n > SELECT_STACK_CASES) {
		ws = shoal_calloc(n, sizeof(sh_waiter));
		if (!ws)
			return SHOAL_ENOMEM;
	}
	shoal_fiber *cur = s->cur;
	for (size_t i = 0; i < n; i++) {
		sh_waiter *w = &ws[i];
		shoal_select_case *k = &cases[i];
		w->fiber = cur;
		w->elem = k->elem;
		w->chan = k->chan;
		w->group = ws;
		w->ngroup = (uint16_t)n;
		w->linked = false;
		bool send = k->op == SHOAL_SELECT_SEND;
		w->index = (uint32_t)i | (send ? SH_W_SEND : 0);
		if (k->chan)
			wq_push(send ? &k->chan->sendq : &k->chan->recvq, w);
	}
	cur->wait_kind = SH_WAIT_CHAN;
	cur->wait_waiters = ws;
	cur->wait_n = (uint32_t)n;
	rc = sh_block(s, deadline);
	if (rc == 0 || rc == SHOAL_ECLOSED)
		*chosen = cur->wake_index;
	if (ws != local)
		shoal_free(ws, n * sizeof(sh_waiter));
	return rc;
}

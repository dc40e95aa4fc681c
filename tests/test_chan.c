/* Tests for channels on one scheduler: rendezvous and buffered semantics,
 * FIFO order, exact element copies, close and destroy, and select (ready
 * cases, fairness among ready cases, send cases, nil cases, closed
 * channels, deadlines, and select satisfied or woken by other fibers). */
#include "test.h"

static size_t live_fibers(void)
{
	shoal_sched_stats st;
	shoal_sched_stats_get(shoal_sched_current(), &st);
	return st.live;
}

/* A fiber that sends one int (arg->v) and records the outcome. */
struct op {
	shoal_chan *c;
	int v;
	int rc;
	int done;
};
#define PENDING 12345

static void *send_op(void *arg)
{
	struct op *o = arg;
	o->rc = shoal_chan_send(o->c, &o->v, SHOAL_FOREVER);
	o->done = 1;
	return NULL;
}

static void *recv_op(void *arg)
{
	struct op *o = arg;
	o->rc = shoal_chan_recv(o->c, &o->v, SHOAL_FOREVER);
	o->done = 1;
	return NULL;
}

/* ---- basic semantics ------------------------------------------------------ */

SH_TEST(rendezvous_send_waits_for_receiver)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	int v = 1;
	/* nobody receives: a non-blocking send cannot complete */
	CHECK_RC(shoal_chan_send(c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_chan_recv(c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_EQ(shoal_chan_len(c), 0);

	struct op o = {.c = c, .v = 77, .rc = PENDING};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, send_op, &o, NULL));
	for (int i = 0; i < 5; i++)
		CHECK_OK(shoal_yield());
	CHECK_EQ(o.done, 0); /* blocked until someone takes it */
	CHECK_EQ(shoal_chan_len(c), 0);
	v = 0;
	CHECK_OK(shoal_chan_recv(c, &v, SHOAL_NOWAIT)); /* a blocked sender is ready */
	CHECK_EQ(v, 77);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(o.rc);

	/* and the other way: a blocked receiver makes a NOWAIT send succeed */
	o = (struct op){.c = c, .rc = PENDING};
	CHECK_OK(shoal_spawn(&f, recv_op, &o, NULL));
	CHECK_OK(shoal_yield());
	CHECK_EQ(o.done, 0);
	v = 88;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_NOWAIT));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(o.rc);
	CHECK_EQ(o.v, 88);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

static void *ping_pong(void *arg)
{
	shoal_chan **cs = arg;
	for (;;) {
		int v;
		int rc = shoal_chan_recv(cs[0], &v, SHOAL_FOREVER);
		if (rc == SHOAL_ECLOSED)
			return NULL;
		CHECK_OK(rc);
		v++;
		CHECK_OK(shoal_chan_send(cs[1], &v, SHOAL_FOREVER));
	}
}

SH_TEST(rendezvous_ping_pong)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *cs[2] = {sh_test_chan_new(sizeof(int), 0), sh_test_chan_new(sizeof(int), 0)};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, ping_pong, cs, NULL));
	int n = sh_test_sanitized() ? 2000 : 20000;
	for (int i = 0; i < n; i++) {
		int v = i * 2;
		CHECK_OK(shoal_chan_send(cs[0], &v, SHOAL_FOREVER));
		CHECK_OK(shoal_chan_recv(cs[1], &v, SHOAL_FOREVER));
		CHECK_EQ(v, i * 2 + 1);
	}
	CHECK_OK(shoal_chan_close(cs[0]));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(shoal_chan_destroy(cs[0]));
	CHECK_OK(shoal_chan_destroy(cs[1]));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(buffered_fifo_and_capacity)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 8);
	for (int i = 0; i < 8; i++) {
		CHECK_OK(shoal_chan_send(c, &i, SHOAL_NOWAIT));
		CHECK_EQ(shoal_chan_len(c), i + 1);
	}
	int v = 100;
	CHECK_RC(shoal_chan_send(c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_EQ(shoal_chan_len(c), 8);
	for (int i = 0; i < 8; i++) {
		CHECK_OK(shoal_chan_recv(c, &v, SHOAL_NOWAIT));
		CHECK_EQ(v, i);
	}
	CHECK_EQ(shoal_chan_len(c), 0);
	CHECK_RC(shoal_chan_recv(c, &v, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);

	/* wrap the ring many times with varying fill levels */
	int next_in = 0, next_out = 0;
	unsigned rnd = 12345;
	for (int round = 0; round < 2000; round++) {
		rnd = rnd * 1103515245 + 12345;
		int k = (int)((rnd >> 16) % 9);
		for (int i = 0; i < k; i++) {
			int rc = shoal_chan_send(c, &next_in, SHOAL_NOWAIT);
			if (next_in - next_out == 8) {
				CHECK_RC(rc, SHOAL_ETIMEDOUT);
				break;
			}
			CHECK_OK(rc);
			next_in++;
		}
		CHECK_EQ(shoal_chan_len(c), next_in - next_out);
		rnd = rnd * 1103515245 + 12345;
		k = (int)((rnd >> 16) % 9);
		for (int i = 0; i < k && next_out < next_in; i++) {
			CHECK_OK(shoal_chan_recv(c, &v, SHOAL_NOWAIT));
			CHECK_EQ(v, next_out);
			next_out++;
		}
	}
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(buffered_blocked_senders_keep_order)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 2);
	int v;
	for (v = 0; v < 2; v++)
		CHECK_OK(shoal_chan_send(c, &v, SHOAL_NOWAIT));
	struct op o[4];
	shoal_fiber *f[4];
	for (int i = 0; i < 4; i++) {
		o[i] = (struct op){.c = c, .v = 2 + i, .rc = PENDING};
		CHECK_OK(shoal_spawn(&f[i], send_op, &o[i], NULL));
		CHECK_OK(shoal_yield()); /* each blocks in turn, so their order is known */
	}
	for (int i = 0; i < 4; i++)
		CHECK_EQ(o[i].done, 0);
	CHECK_EQ(shoal_chan_len(c), 2);
	/* each receive makes room for the longest-waiting sender */
	for (int i = 0; i < 6; i++) {
		CHECK_OK(shoal_chan_recv(c, &v, SHOAL_FOREVER));
		CHECK_EQ(v, i);
	}
	for (int i = 0; i < 4; i++) {
		CHECK_OK(shoal_join(f[i], NULL));
		CHECK_OK(o[i].rc);
	}
	CHECK_EQ(shoal_chan_len(c), 0);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

static void *send_word_op(void *arg)
{
	struct op *o = arg;
	uint64_t w = 0x0123456789abcdefull + (uint64_t)o->v;
	o->rc = shoal_chan_send(o->c, &w, SHOAL_FOREVER);
	o->done = 1;
	return NULL;
}

/* Senders parked on a rendezvous channel hand over their words in the order
 * they came, whichever way the element is taken: a receive that would block,
 * a non-blocking one, or a select. Each sender then returns 0. */
SH_TEST(rendezvous_blocked_senders_taken_in_order)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(uint64_t), 0);
	struct op o[3];
	shoal_fiber *f[3];
	for (int i = 0; i < 3; i++) {
		o[i] = (struct op){.c = c, .v = i, .rc = PENDING};
		CHECK_OK(shoal_spawn(&f[i], send_word_op, &o[i], NULL));
		CHECK_OK(shoal_yield()); /* each parks in turn, so their order is known */
	}
	for (int i = 0; i < 3; i++)
		CHECK_EQ(o[i].done, 0);
	uint64_t w = 0;
	CHECK_OK(shoal_chan_recv(c, &w, SHOAL_FOREVER));
	CHECK_EQ(w, 0x0123456789abcdefull);
	CHECK_OK(shoal_chan_recv(c, &w, SHOAL_NOWAIT));
	CHECK_EQ(w, 0x0123456789abcdefull + 1);
	shoal_select_case sc = {c, SHOAL_SELECT_RECV, &w};
	size_t chosen = 9;
	CHECK_OK(shoal_select(&sc, 1, SHOAL_NOWAIT, &chosen));
	CHECK_EQ(chosen, 0);
	CHECK_EQ(w, 0x0123456789abcdefull + 2);
	CHECK_RC(shoal_chan_recv(c, &w, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	for (int i = 0; i < 3; i++) {
		CHECK_OK(shoal_join(f[i], NULL));
		CHECK_OK(o[i].rc);
	}
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(blocked_receivers_served_in_order)
{
	shoal_sched *s = sh_test_sched_new();
	static const size_t caps[] = {0, 3};
	for (int k = 0; k < 2; k++) {
		shoal_chan *c = sh_test_chan_new(sizeof(int), caps[k]);
		struct op o[5];
		shoal_fiber *f[5];
		for (int i = 0; i < 5; i++) {
			o[i] = (struct op){.c = c, .v = -1, .rc = PENDING};
			CHECK_OK(shoal_spawn(&f[i], recv_op, &o[i], NULL));
			CHECK_OK(shoal_yield());
		}
		for (int i = 0; i < 5; i++) {
			int v = 10 + i;
			CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
		}
		for (int i = 0; i < 5; i++) {
			CHECK_OK(shoal_join(f[i], NULL));
			CHECK_OK(o[i].rc);
			CHECK_EQ(o[i].v, 10 + i);
		}
		CHECK_OK(shoal_chan_destroy(c));
	}
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- element sizes ---------------------------------------------------------- */

struct sized {
	shoal_chan *c;
	size_t size;
	int n;
};

static void fill(unsigned char *p, size_t size, int seed)
{
	for (size_t i = 0; i < size; i++)
		p[i] = (unsigned char)(seed * 31 + (int)i * 7 + 1);
}

static void *sized_sender(void *arg)
{
	struct sized *z = arg;
	unsigned char *buf = malloc(z->size);
	CHECK(buf != NULL);
	for (int k = 0; k < z->n; k++) {
		fill(buf, z->size, k);
		CHECK_OK(shoal_chan_send(z->c, buf, SHOAL_FOREVER));
		/* the element was copied: reusing the buffer must not matter */
		memset(buf, 0xee, z->size);
	}
	free(buf);
	return NULL;
}

SH_TEST(element_sizes_copied_exactly)
{
	shoal_sched *s = sh_test_sched_new();
	static const size_t sizes[] = {1, 8, 24, 4096};
	static const size_t caps[] = {0, 1, 5};
	for (size_t si = 0; si < 4; si++) {
		for (size_t ci = 0; ci < 3; ci++) {
			size_t size = sizes[si];
			struct sized z = {sh_test_chan_new(size, caps[ci]), size, 12};
			shoal_fiber *f;
			CHECK_OK(shoal_spawn(&f, sized_sender, &z, NULL));
			/* receive into a larger buffer: bytes past the element
			 * must stay untouched */
			unsigned char *got = malloc(size + 64), *want = malloc(size);
			CHECK(got && want);
			for (int k = 0; k < z.n; k++) {
				memset(got, 0x5a, size + 64);
				CHECK_OK(shoal_chan_recv(z.c, got, SHOAL_FOREVER));
				fill(want, size, k);
				if (memcmp(got, want, size) != 0)
					sh_test_fail(__FILE__, __LINE__,
						     "size %zu cap %zu element %d differs", size,
						     caps[ci], k);
				for (size_t i = size; i < size + 64; i++)
					CHECK_EQ(got[i], 0x5a);
			}
			CHECK_OK(shoal_join(f, NULL));
			free(got);
			free(want);
			CHECK_OK(shoal_chan_destroy(z.c));
		}
	}
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- close and destroy ---------------------------------------------------- */

SH_TEST(close_drains_buffer_then_closed)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 4);
	for (int i = 0; i < 3; i++)
		CHECK_OK(shoal_chan_send(c, &i, SHOAL_NOWAIT));
	CHECK_OK(shoal_chan_close(c));
	int v = 9;
	CHECK_RC(shoal_chan_send(c, &v, SHOAL_NOWAIT), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_send(c, &v, SHOAL_FOREVER), SHOAL_ECLOSED);
	CHECK_EQ(shoal_chan_len(c), 3);
	for (int i = 0; i < 3; i++) {
		CHECK_OK(shoal_chan_recv(c, &v, SHOAL_FOREVER));
		CHECK_EQ(v, i);
	}
	CHECK_RC(shoal_chan_recv(c, &v, SHOAL_FOREVER), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_recv(c, &v, SHOAL_NOWAIT), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_close(c), SHOAL_ECLOSED);
	CHECK_OK(shoal_chan_destroy(c));

	shoal_chan *u = sh_test_chan_new(sizeof(int), 0);
	CHECK_OK(shoal_chan_close(u));
	CHECK_RC(shoal_chan_close(u), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_send(u, &v, SHOAL_FOREVER), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_recv(u, &v, SHOAL_FOREVER), SHOAL_ECLOSED);
	CHECK_OK(shoal_chan_destroy(u));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(close_wakes_blocked_receivers_and_senders)
{
	shoal_sched *s = sh_test_sched_new();
	/* receivers on an empty channel */
	shoal_chan *r = sh_test_chan_new(sizeof(int), 2);
	/* senders on a full one: their elements must not be delivered */
	shoal_chan *w = sh_test_chan_new(sizeof(int), 1);
	int v = 1000;
	CHECK_OK(shoal_chan_send(w, &v, SHOAL_NOWAIT));
	/* senders on a rendezvous channel */
	shoal_chan *z = sh_test_chan_new(sizeof(int), 0);
	struct op o[9];
	shoal_fiber *f[9];
	for (int i = 0; i < 9; i++) {
		shoal_chan *c = i < 3 ? r : i < 6 ? w : z;
		o[i] = (struct op){.c = c, .v = i, .rc = PENDING};
		CHECK_OK(shoal_spawn(&f[i], i < 3 ? recv_op : send_op, &o[i], NULL));
	}
	CHECK_OK(shoal_yield());
	CHECK_OK(shoal_yield());
	for (int i = 0; i < 9; i++)
		CHECK_EQ(o[i].done, 0);
	CHECK_OK(shoal_chan_close(r));
	CHECK_OK(shoal_chan_close(w));
	CHECK_OK(shoal_chan_close(z));
	for (int i = 0; i < 9; i++) {
		CHECK_OK(shoal_join(f[i], NULL));
		if (o[i].rc != SHOAL_ECLOSED)
			sh_test_fail(__FILE__, __LINE__, "%s %d: got %s, want SHOAL_ECLOSED",
				     i < 3 ? "receiver" : "sender", i, shoal_strerror(o[i].rc));
	}
	/* the buffered element survives, the blocked senders' do not */
	CHECK_OK(shoal_chan_recv(w, &v, SHOAL_NOWAIT));
	CHECK_EQ(v, 1000);
	CHECK_RC(shoal_chan_recv(w, &v, SHOAL_NOWAIT), SHOAL_ECLOSED);
	CHECK_RC(shoal_chan_recv(z, &v, SHOAL_NOWAIT), SHOAL_ECLOSED);
	CHECK_OK(shoal_chan_destroy(r));
	CHECK_OK(shoal_chan_destroy(w));
	CHECK_OK(shoal_chan_destroy(z));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

SH_TEST(destroy_with_waiters_is_busy)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	struct op o = {.c = c, .rc = PENDING};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, recv_op, &o, NULL));
	CHECK_OK(shoal_yield());
	CHECK_RC(shoal_chan_destroy(c), SHOAL_EBUSY);
	/* still a working channel */
	int v = 5;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_FOREVER));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_EQ(o.v, 5);

	/* a blocked sender counts too */
	o = (struct op){.c = c, .v = 6, .rc = PENDING};
	CHECK_OK(shoal_spawn(&f, send_op, &o, NULL));
	CHECK_OK(shoal_yield());
	CHECK_RC(shoal_chan_destroy(c), SHOAL_EBUSY);
	CHECK_OK(shoal_chan_close(c));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_RC(o.rc, SHOAL_ECLOSED);

	/* a fiber blocked in select counts too */
	shoal_chan *d = sh_test_chan_new(sizeof(int), 0);
	CHECK_OK(shoal_chan_destroy(c));
	o = (struct op){.c = d, .rc = PENDING};
	CHECK_OK(shoal_spawn(&f, recv_op, &o, NULL));
	CHECK_OK(shoal_yield());
	CHECK_OK(shoal_cancel(f));
	CHECK_OK(shoal_join(f, NULL));
	CHECK_RC(o.rc, SHOAL_ECANCELED);
	/* the cancelled waiter is gone: destroy works now */
	CHECK_OK(shoal_chan_destroy(d));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

SH_TEST(create_bad_arguments)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = NULL;
	CHECK(shoal_chan_create(&c, SIZE_MAX / 2, 4) < 0);
	CHECK(shoal_chan_create(&c, 4096, SIZE_MAX / 1024) < 0);
	CHECK_RC(shoal_chan_create(&c, 0, 4), SHOAL_EINVAL);
	CHECK_RC(shoal_chan_create(&c, (size_t)UINT32_MAX + 1, 0), SHOAL_EINVAL);
	CHECK_RC(shoal_chan_create(&c, 1, (size_t)UINT32_MAX + 1), SHOAL_EINVAL);
	CHECK(c == NULL);
	/* the largest of each still counts as valid (memory permitting) */
	int rc = shoal_chan_create(&c, UINT32_MAX, 0);
	CHECK(rc == 0 || rc == SHOAL_ENOMEM);
	if (rc == 0)
		CHECK_OK(shoal_chan_destroy(c));
	CHECK_EQ(live_fibers(), 0);
	CHECK_OK(shoal_sched_destroy(s));
}

/* ---- select ----------------------------------------------------------------- */

SH_TEST(select_picks_ready_case)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *a = sh_test_chan_new(sizeof(int), 1), *b = sh_test_chan_new(sizeof(int), 1);
	int v = 42, ra = -1, rb = -1;
	CHECK_OK(shoal_chan_send(b, &v, SHOAL_NOWAIT));
	shoal_select_case cs[2] = {{a, SHOAL_SELECT_RECV, &ra}, {b, SHOAL_SELECT_RECV, &rb}};
	size_t chosen = 99;
	CHECK_OK(shoal_select(cs, 2, SHOAL_FOREVER, &chosen));
	CHECK_EQ(chosen, 1);
	CHECK_EQ(rb, 42);
	CHECK_EQ(ra, -1);
	CHECK_EQ(shoal_chan_len(b), 0);
	/* nothing ready: NOWAIT times out, chosen unchanged */
	chosen = 99;
	CHECK_RC(shoal_select(cs, 2, SHOAL_NOWAIT, &chosen), SHOAL_ETIMEDOUT);
	CHECK_EQ(chosen, 99);
	/* send cases: a full channel is not ready, one with room is */
	CHECK_OK(shoal_chan_send(a, &v, SHOAL_NOWAIT));
	int sa = 1, sb = 2;
	shoal_select_case ss[2] = {{a, SHOAL_SELECT_SEND, &sa}, {b, SHOAL_SELECT_SEND, &sb}};
	CHECK_OK(shoal_select(ss, 2, SHOAL_NOWAIT, &chosen));
	CHECK_EQ(chosen, 1);
	CHECK_OK(shoal_chan_recv(b, &v, SHOAL_NOWAIT));
	CHECK_EQ(v, 2);
	/* mixed: a receive that can proceed beside a send that cannot */
	CHECK_OK(shoal_chan_send(b, &v, SHOAL_NOWAIT)); /* b full (cap 1) */
	shoal_select_case mx[2] = {{b, SHOAL_SELECT_SEND, &sb}, {a, SHOAL_SELECT_RECV, &ra}};
	CHECK_OK(shoal_select(mx, 2, SHOAL_NOWAIT, &chosen));
	CHECK_EQ(chosen, 1);
	CHECK_EQ(ra, 42);
	CHECK_OK(shoal_chan_destroy(a));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(select_random_among_ready)
{
	shoal_sched *s = sh_test_sched_new();
	enum { K = 3 };
	shoal_chan *c[K];
	int got[K];
	shoal_select_case cs[K];
	for (int i = 0; i < K; i++) {
		c[i] = sh_test_chan_new(sizeof(int), 1);
		int v = i;
		CHECK_OK(shoal_chan_send(c[i], &v, SHOAL_NOWAIT));
		cs[i] = (shoal_select_case){c[i], SHOAL_SELECT_RECV, &got[i]};
	}
	const int rounds = 3000;
	int count[K] = {0};
	int runs = 0, max_run = 0;
	size_t last = 99;
	for (int r = 0; r < rounds; r++) {
		size_t chosen = 99;
		CHECK_OK(shoal_select(cs, K, SHOAL_NOWAIT, &chosen));
		CHECK(chosen < K);
		CHECK_EQ(got[chosen], (int)chosen);
		count[chosen]++;
		runs = chosen == last ? runs + 1 : 1;
		if (runs > max_run)
			max_run = runs;
		last = chosen;
		int v = (int)chosen; /* refill so every case stays ready */
		CHECK_OK(shoal_chan_send(c[chosen], &v, SHOAL_NOWAIT));
	}
	/* expected 1000 each; a fair coin lands far inside these bounds */
	for (int i = 0; i < K; i++)
		if (count[i] < rounds / K / 2 || count[i] > rounds / K * 3 / 2)
			sh_test_fail(__FILE__, __LINE__, "case %d chosen %d of %d times", i,
				     count[i], rounds);
	/* and not in long streaks (P(run of 25) for p=1/3 is ~1e-9 per start) */
	CHECK(max_run < 25);

	/* send cases share fairly too */
	shoal_chan *d[2] = {sh_test_chan_new(sizeof(int), 1), sh_test_chan_new(sizeof(int), 1)};
	int one = 1, sc[2] = {0, 0};
	shoal_select_case ss[2] = {{d[0], SHOAL_SELECT_SEND, &one},
				   {d[1], SHOAL_SELECT_SEND, &one}};
	for (int r = 0; r < 2000; r++) {
		size_t chosen = 99;
		CHECK_OK(shoal_select(ss, 2, SHOAL_NOWAIT, &chosen));
		CHECK(chosen < 2);
		sc[chosen]++;
		int v;
		CHECK_OK(shoal_chan_recv(d[chosen], &v, SHOAL_NOWAIT));
	}
	CHECK(sc[0] > 600 && sc[1] > 600);
	for (int i = 0; i < K; i++)
		CHECK_OK(shoal_chan_destroy(c[i]));
	CHECK_OK(shoal_chan_destroy(d[0]));
	CHECK_OK(shoal_chan_destroy(d[1]));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(select_null_cases_never_chosen)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 1);
	int v = 3, r = 0;
	shoal_select_case cs[4] = {{NULL, SHOAL_SELECT_RECV, &r},
				   {NULL, SHOAL_SELECT_SEND, &v},
				   {c, SHOAL_SELECT_RECV, &r},
				   {NULL, SHOAL_SELECT_RECV, &r}};
	for (int i = 0; i < 200; i++) {
		CHECK_OK(shoal_chan_send(c, &i, SHOAL_NOWAIT));
		size_t chosen = 99;
		CHECK_OK(shoal_select(cs, 4, SHOAL_FOREVER, &chosen));
		CHECK_EQ(chosen, 2);
		CHECK_EQ(r, i);
	}
	/* only nil cases: never ready, so it waits out the deadline */
	size_t chosen = 99;
	CHECK_RC(shoal_select(cs, 2, SHOAL_NOWAIT, &chosen), SHOAL_ETIMEDOUT);
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_select(cs, 2, shoal_deadline_in(20000000), &chosen), SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 >= 20000000);
	CHECK_EQ(chosen, 99);
	/* zero cases likewise */
	CHECK_RC(shoal_select(cs, 0, SHOAL_NOWAIT, &chosen), SHOAL_ETIMEDOUT);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(select_closed_channels_return_at_once)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *a = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 2);
	CHECK_OK(shoal_chan_close(a));
	CHECK_OK(shoal_chan_close(b));
	int x, y;
	shoal_select_case cs[3] = {{a, SHOAL_SELECT_RECV, &x},
				   {NULL, SHOAL_SELECT_RECV, &x},
				   {b, SHOAL_SELECT_RECV, &y}};
	int seen[3] = {0};
	int64_t t0 = shoal_now_ns();
	for (int i = 0; i < 200; i++) {
		size_t chosen = 99;
		CHECK_RC(shoal_select(cs, 3, SHOAL_FOREVER, &chosen), SHOAL_ECLOSED);
		CHECK(chosen == 0 || chosen == 2);
		seen[chosen]++;
	}
	CHECK(shoal_now_ns() - t0 < 5000000000LL);
	CHECK(seen[0] > 0 && seen[2] > 0); /* closed counts as ready: random too */

	/* a send case on a closed channel */
	shoal_select_case sc[1] = {{a, SHOAL_SELECT_SEND, &x}};
	size_t chosen = 99;
	CHECK_RC(shoal_select(sc, 1, SHOAL_FOREVER, &chosen), SHOAL_ECLOSED);
	CHECK_EQ(chosen, 0);
	CHECK_OK(shoal_chan_destroy(a));
	CHECK_OK(shoal_chan_destroy(b));

	/* closed but with buffered elements: they are still received */
	shoal_chan *c = sh_test_chan_new(sizeof(int), 2);
	int v = 17;
	CHECK_OK(shoal_chan_send(c, &v, SHOAL_NOWAIT));
	CHECK_OK(shoal_chan_close(c));
	shoal_select_case rc1[1] = {{c, SHOAL_SELECT_RECV, &x}};
	x = 0;
	CHECK_OK(shoal_select(rc1, 1, SHOAL_FOREVER, &chosen));
	CHECK_EQ(x, 17);
	CHECK_RC(shoal_select(rc1, 1, SHOAL_FOREVER, &chosen), SHOAL_ECLOSED);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(select_deadline)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *a = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 1);
	int x, y = 1;
	CHECK_OK(shoal_chan_send(b, &y, SHOAL_NOWAIT)); /* b is full */
	shoal_select_case cs[2] = {{a, SHOAL_SELECT_RECV, &x}, {b, SHOAL_SELECT_SEND, &y}};
	size_t chosen = 99;
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_select(cs, 2, shoal_deadline_in(30000000), &chosen), SHOAL_ETIMEDOUT);
	int64_t dt = shoal_now_ns() - t0;
	CHECK(dt >= 30000000);
	CHECK(dt < 5000000000LL);
	CHECK_EQ(chosen, 99);
	/* the timed-out select left nothing behind: no stray waiter */
	CHECK_OK(shoal_chan_recv(b, &x, SHOAL_NOWAIT));
	CHECK_EQ(x, 1);
	CHECK_RC(shoal_chan_recv(b, &x, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_chan_send(a, &y, SHOAL_NOWAIT), SHOAL_ETIMEDOUT);
	CHECK_OK(shoal_chan_destroy(a));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
}

struct delayed {
	shoal_chan *c;
	int v;
	int yields;
	int rc;
	int close;
};

static void *delayed_send(void *arg)
{
	struct delayed *d = arg;
	for (int i = 0; i < d->yields; i++)
		CHECK_OK(shoal_yield());
	d->rc = d->close ? shoal_chan_close(d->c) : shoal_chan_send(d->c, &d->v, SHOAL_FOREVER);
	return NULL;
}

static void *delayed_recv(void *arg)
{
	struct delayed *d = arg;
	for (int i = 0; i < d->yields; i++)
		CHECK_OK(shoal_yield());
	d->rc = shoal_chan_recv(d->c, &d->v, SHOAL_FOREVER);
	return NULL;
}

SH_TEST(select_blocks_then_satisfied)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *a = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 0);
	int x = -1, y = -1;
	shoal_select_case cs[2] = {{a, SHOAL_SELECT_RECV, &x}, {b, SHOAL_SELECT_RECV, &y}};

	/* a receive case satisfied by a later send */
	struct delayed d = {.c = b, .v = 31, .yields = 3};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, delayed_send, &d, NULL));
	size_t chosen = 99;
	CHECK_OK(shoal_select(cs, 2, SHOAL_FOREVER, &chosen));
	CHECK_EQ(chosen, 1);
	CHECK_EQ(y, 31);
	CHECK_EQ(x, -1);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(d.rc);

	/* a send case satisfied by a later receive */
	int sv = 55;
	shoal_select_case ss[2] = {{a, SHOAL_SELECT_RECV, &x}, {b, SHOAL_SELECT_SEND, &sv}};
	d = (struct delayed){.c = b, .v = -1, .yields = 3};
	CHECK_OK(shoal_spawn(&f, delayed_recv, &d, NULL));
	chosen = 99;
	CHECK_OK(shoal_select(ss, 2, SHOAL_FOREVER, &chosen));
	CHECK_EQ(chosen, 1);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(d.rc);
	CHECK_EQ(d.v, 55);

	/* with a deadline that is not reached */
	d = (struct delayed){.c = a, .v = 8, .yields = 1};
	CHECK_OK(shoal_spawn(&f, delayed_send, &d, NULL));
	CHECK_OK(shoal_select(cs, 2, shoal_deadline_in(10000000000LL), &chosen));
	CHECK_EQ(chosen, 0);
	CHECK_EQ(x, 8);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(shoal_chan_destroy(a));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
}

/* A blocked select completes exactly one case: when two partners arrive,
 * the second must stay blocked with its element intact. */
SH_TEST(select_completes_only_one_case)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *a = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 0);
	for (int round = 0; round < 20; round++) {
		int x = -1, y = -1;
		shoal_select_case cs[2] = {{a, SHOAL_SELECT_RECV, &x}, {b, SHOAL_SELECT_RECV, &y}};
		struct delayed da = {.c = a, .v = 100 + round, .yields = 1, .rc = PENDING};
		struct delayed db = {.c = b, .v = 200 + round, .yields = 1, .rc = PENDING};
		shoal_fiber *fa, *fb;
		CHECK_OK(shoal_spawn(&fa, delayed_send, &da, NULL));
		CHECK_OK(shoal_spawn(&fb, delayed_send, &db, NULL));
		size_t chosen = 99;
		CHECK_OK(shoal_select(cs, 2, SHOAL_FOREVER, &chosen));
		CHECK(chosen < 2);
		for (int i = 0; i < 3; i++)
			CHECK_OK(shoal_yield());
		struct delayed *won = chosen == 0 ? &da : &db, *lost = chosen == 0 ? &db : &da;
		CHECK_OK(won->rc);
		CHECK_EQ(lost->rc, PENDING); /* still blocked in its send */
		CHECK_EQ(chosen == 0 ? x : y, won->v);
		CHECK_EQ(chosen == 0 ? y : x, -1);
		int v;
		CHECK_OK(shoal_chan_recv(lost->c, &v, SHOAL_FOREVER));
		CHECK_EQ(v, lost->v);
		CHECK_OK(shoal_join(fa, NULL));
		CHECK_OK(shoal_join(fb, NULL));
		CHECK_OK(lost->rc);
	}
	/* the same with two send cases and two receivers ready at once */
	for (int round = 0; round < 20; round++) {
		struct delayed ra = {.c = a, .v = -1, .rc = PENDING};
		struct delayed rb = {.c = b, .v = -1, .rc = PENDING};
		shoal_fiber *fa, *fb;
		CHECK_OK(shoal_spawn(&fa, delayed_recv, &ra, NULL));
		CHECK_OK(shoal_spawn(&fb, delayed_recv, &rb, NULL));
		CHECK_OK(shoal_yield()); /* both receivers now wait */
		int va = 1, vb = 2;
		shoal_select_case ss[2] = {{a, SHOAL_SELECT_SEND, &va},
					   {b, SHOAL_SELECT_SEND, &vb}};
		size_t chosen = 99;
		CHECK_OK(shoal_select(ss, 2, SHOAL_FOREVER, &chosen));
		CHECK(chosen < 2);
		CHECK_OK(shoal_yield());
		struct delayed *won = chosen == 0 ? &ra : &rb, *lost = chosen == 0 ? &rb : &ra;
		CHECK_OK(won->rc);
		CHECK_EQ(won->v, chosen == 0 ? 1 : 2);
		CHECK_EQ(lost->rc, PENDING);
		CHECK_OK(shoal_chan_close(lost->c));
		CHECK_OK(shoal_join(fa, NULL));
		CHECK_OK(shoal_join(fb, NULL));
		CHECK_RC(lost->rc, SHOAL_ECLOSED);
		CHECK_OK(shoal_chan_destroy(lost->c));
		if (lost->c == a)
			a = sh_test_chan_new(sizeof(int), 0);
		else
			b = sh_test_chan_new(sizeof(int), 0);
	}
	CHECK_OK(shoal_chan_destroy(a));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

/* A select with a send and a receive case on the same rendezvous channel
 * must not pair with itself. */
SH_TEST(select_does_not_match_itself)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *c = sh_test_chan_new(sizeof(int), 0);
	int in = -1, out = 5;
	shoal_select_case cs[2] = {{c, SHOAL_SELECT_RECV, &in}, {c, SHOAL_SELECT_SEND, &out}};
	size_t chosen = 99;
	CHECK_RC(shoal_select(cs, 2, SHOAL_NOWAIT, &chosen), SHOAL_ETIMEDOUT);
	CHECK_RC(shoal_select(cs, 2, shoal_deadline_in(10000000), &chosen), SHOAL_ETIMEDOUT);
	CHECK_EQ(chosen, 99);
	CHECK_EQ(in, -1);
	/* a real partner completes it */
	struct delayed d = {.c = c, .v = -1, .yields = 1, .rc = PENDING};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, delayed_recv, &d, NULL));
	CHECK_OK(shoal_select(cs, 2, SHOAL_FOREVER, &chosen));
	CHECK_EQ(chosen, 1);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_EQ(d.v, 5);
	CHECK_OK(shoal_chan_destroy(c));
	CHECK_OK(shoal_sched_destroy(s));
}

SH_TEST(select_woken_by_close)
{
	shoal_sched *s = sh_test_sched_new();
	shoal_chan *a = sh_test_chan_new(sizeof(int), 0), *b = sh_test_chan_new(sizeof(int), 3);
	int x = -1, y = 4;
	CHECK_OK(shoal_chan_send(b, &y, SHOAL_NOWAIT));
	CHECK_OK(shoal_chan_send(b, &y, SHOAL_NOWAIT));
	CHECK_OK(shoal_chan_send(b, &y, SHOAL_NOWAIT)); /* b full: send not ready */
	shoal_select_case cs[2] = {{a, SHOAL_SELECT_RECV, &x}, {b, SHOAL_SELECT_SEND, &y}};
	struct delayed d = {.c = a, .yields = 2, .close = 1, .rc = PENDING};
	shoal_fiber *f;
	CHECK_OK(shoal_spawn(&f, delayed_send, &d, NULL));
	size_t chosen = 99;
	CHECK_RC(shoal_select(cs, 2, SHOAL_FOREVER, &chosen), SHOAL_ECLOSED);
	CHECK_EQ(chosen, 0);
	CHECK_EQ(x, -1);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_OK(d.rc);

	/* the send side: closing the full channel wakes the send case */
	shoal_select_case ss[1] = {{b, SHOAL_SELECT_SEND, &y}};
	d = (struct delayed){.c = b, .yields = 2, .close = 1, .rc = PENDING};
	CHECK_OK(shoal_spawn(&f, delayed_send, &d, NULL));
	chosen = 99;
	CHECK_RC(shoal_select(ss, 1, SHOAL_FOREVER, &chosen), SHOAL_ECLOSED);
	CHECK_EQ(chosen, 0);
	CHECK_OK(shoal_join(f, NULL));
	CHECK_EQ(shoal_chan_len(b), 3);
	CHECK_OK(shoal_chan_destroy(a));
	CHECK_OK(shoal_chan_destroy(b));
	CHECK_OK(shoal_sched_destroy(s));
}

/* Many fibers selecting over shared channels with send and receive cases:
 * every element is received exactly once and nothing is lost when selects
 * race each other. */
enum { MNCH = 4, MNSEND = 6, MNRECV = 5 };
static shoal_chan *mch[MNCH];
static unsigned char *mseen;
static int mper, mreceived;

static void *many_sender(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int k = 0; k < mper; k++) {
		int v = id * mper + k;
		shoal_select_case cs[MNCH];
		for (int i = 0; i < MNCH; i++)
			cs[i] = (shoal_select_case){mch[i], SHOAL_SELECT_SEND, &v};
		size_t chosen = 99;
		CHECK_OK(shoal_select(cs, MNCH, SHOAL_FOREVER, &chosen));
		CHECK(chosen < MNCH);
		if (k % 7 == 0)
			CHECK_OK(shoal_yield());
	}
	return NULL;
}

static void *many_receiver(void *arg)
{
	int got[MNCH];
	shoal_select_case cs[MNCH];
	for (int i = 0; i < MNCH; i++)
		cs[i] = (shoal_select_case){mch[i], SHOAL_SELECT_RECV, &got[i]};
	int open = MNCH;
	while (open > 0) {
		size_t chosen = 99;
		int rc = shoal_select(cs, MNCH, SHOAL_FOREVER, &chosen);
		CHECK(chosen < MNCH);
		if (rc == SHOAL_ECLOSED) {
			cs[chosen].chan = NULL; /* drained and closed */
			open--;
			continue;
		}
		CHECK_OK(rc);
		int v = got[chosen];
		CHECK(v >= 0 && v < MNSEND * mper);
		if (mseen[v])
			sh_test_fail(__FILE__, __LINE__, "element %d received twice", v);
		mseen[v] = 1;
		mreceived++;
	}
	return NULL;
}

SH_TEST(select_many_fibers_no_loss)
{
	shoal_sched *s = sh_test_sched_new();
	mper = sh_test_sanitized() ? 300 : 3000;
	mseen = calloc((size_t)(MNSEND * mper), 1);
	CHECK(mseen != NULL);
	for (int i = 0; i < MNCH; i++)
		mch[i] = sh_test_chan_new(sizeof(int), (size_t)i); /* capacities 0..3 */
	shoal_fiber *sf[MNSEND], *rf[MNRECV];
	for (int i = 0; i < MNRECV; i++)
		CHECK_OK(shoal_spawn(&rf[i], many_receiver, NULL, NULL));
	for (int i = 0; i < MNSEND; i++)
		CHECK_OK(shoal_spawn(&sf[i], many_sender, (void *)(intptr_t)i, NULL));
	for (int i = 0; i < MNSEND; i++)
		CHECK_OK(shoal_join(sf[i], NULL));
	for (int i = 0; i < MNCH; i++)
		CHECK_OK(shoal_chan_close(mch[i]));
	for (int i = 0; i < MNRECV; i++)
		CHECK_OK(shoal_join(rf[i], NULL));
	CHECK_EQ(mreceived, MNSEND * mper);
	for (int v = 0; v < MNSEND * mper; v++)
		CHECK(mseen[v]);
	for (int i = 0; i < MNCH; i++)
		CHECK_OK(shoal_chan_destroy(mch[i]));
	free(mseen);
	CHECK_OK(shoal_sched_destroy(s));
	sh_test_leak_check();
}

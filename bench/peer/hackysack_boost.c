/* The second baseline of `shoal bench fibers`: the "C program on
 * boost.context", the hackysack benchmark (and its hop and switch variants)
 * written the way a C programmer would on boost.context's fcontext, with
 * none of shoal's code: a FIFO run queue, a direct switch from fiber to
 * fiber, rendezvous channels kept inside the sackers' array (one allocation,
 * where shoal and Go allocate each channel), 64 KiB stacks carved from large
 * mappings and reused LIFO (no guard pages: one mapping each would not hold
 * 100 000 fibers), their tops offset as shoal's are. Nothing a fiber library
 * needs beyond the benchmark (cancel, timers, select, names) costs it
 * anything. Same semantics, PRNG, seeds, command line and "ok ..." output as
 * bench/go/hackysack.go. Single-threaded, like one shoal scheduler. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* boost.context's own header is C++; these are its C-ABI entry points
 * (boost/context/detail/fcontext.hpp, extern "C"), in libboost_context. */
typedef void *fcontext_t;
typedef struct {
	fcontext_t fctx;
	void *data;
} transfer_t;
transfer_t jump_fcontext(fcontext_t const to, void *vp);
fcontext_t make_fcontext(void *sp, size_t size, void (*fn)(transfer_t));

#define STACK_SIZE (64 * 1024)
#define SLAB_STACKS 1024

typedef void *(*fiber_fn)(void *);

typedef struct fiber {
	fcontext_t ctx;
	struct fiber *next; /* run queue, a channel's waiters or the free list */
	struct fiber *joiner;
	void *wait_val; /* a blocked sender's value, or where a receiver wants it */
	void *result;
	fiber_fn fn;
	void *arg;
	char *stack;
	int dead;
} fiber;

typedef struct chan {
	fiber *recv_head, *recv_tail, *send_head, *send_tail;
} chan;

static fiber root_fiber;
static fiber *cur = &root_fiber, *runq_head, *runq_tail, *fiber_free;
static char **stacks_free, *slab;
static size_t nstacks_free, stacks_cap, slab_used = SLAB_STACKS;

static void die(const char *what)
{
	printf("error %s\n", what);
	exit(1);
}

static char *stack_get(void)
{
	if (nstacks_free)
		return stacks_free[--nstacks_free];
	if (slab_used == SLAB_STACKS) {
		slab = mmap(NULL, (size_t)SLAB_STACKS * STACK_SIZE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
		if (slab == MAP_FAILED)
			die("mmap of a stack slab failed");
		slab_used = 0;
	}
	return slab + (size_t)STACK_SIZE * slab_used++;
}

static void stack_put(char *s)
{
	if (nstacks_free == stacks_cap) {
		stacks_cap = stacks_cap ? stacks_cap * 2 : 1024;
		stacks_free = realloc(stacks_free, stacks_cap * sizeof(*stacks_free));
		if (!stacks_free)
			die("out of memory for the stack free list");
	}
	stacks_free[nstacks_free++] = s;
}

static void runq_push(fiber *f)
{
	f->next = NULL;
	if (runq_tail)
		runq_tail->next = f;
	else
		runq_head = f;
	runq_tail = f;
}

/* Whoever jumped here passed itself: keep its context, or, if it died,
 * take its stack back (we are off it now). */
static void arrived(transfer_t t)
{
	fiber *from = t.data;
	if (from->dead)
		stack_put(from->stack);
	else
		from->ctx = t.fctx;
}

static fiber *runq_pop(void)
{
	fiber *f = runq_head;
	if (!f)
		die("deadlock: nothing runnable");
	runq_head = f->next;
	if (!runq_head)
		runq_tail = NULL;
	return f;
}

/* The current fiber is queued somewhere already: run the next one. */
static void schedule(void)
{
	fiber *next = runq_pop();
	if (next == cur)
		return;
	fiber *me = cur;
	cur = next;
	arrived(jump_fcontext(next->ctx, me));
}

static void fiber_entry(transfer_t t)
{
	arrived(t);
	fiber *me = cur;
	me->result = me->fn(me->arg);
	me->dead = 1;
	if (me->joiner)
		runq_push(me->joiner);
	fiber *next = runq_pop();
	cur = next;
	jump_fcontext(next->ctx, me);
	abort(); /* a dead fiber is never resumed */
}

static fiber *spawn(fiber_fn fn, void *arg)
{
	fiber *f = fiber_free;
	if (f)
		fiber_free = f->next;
	else if (!(f = malloc(sizeof(*f))))
		die("out of memory for a fiber");
	memset(f, 0, sizeof(*f));
	f->fn = fn;
	f->arg = arg;
	f->stack = stack_get();
	/* Tops 0-31 lines below the stack's end, as shoal offsets its own:
	 * at one offset every fiber's hot frames would share a few cache
	 * sets, which would slow this baseline for a reason that is not
	 * boost.context's. */
	uintptr_t end = (uintptr_t)f->stack + STACK_SIZE;
	size_t color = (size_t)(((uint32_t)(end >> 12) * 0x9E3779B1u) >> 27) * 64;
	f->ctx = make_fcontext(f->stack + STACK_SIZE - color, STACK_SIZE - color, fiber_entry);
	runq_push(f);
	return f;
}

static void yield(void)
{
	runq_push(cur);
	schedule();
}

static void *join(fiber *f)
{
	if (!f->dead) {
		f->joiner = cur;
		schedule();
	}
	void *r = f->result;
	f->next = fiber_free;
	fiber_free = f;
	return r;
}

static void wait_on(fiber **head, fiber **tail)
{
	cur->next = NULL;
	if (*tail)
		(*tail)->next = cur;
	else
		*head = cur;
	*tail = cur;
	schedule();
}

static fiber *take(fiber **head, fiber **tail)
{
	fiber *f = *head;
	if (f) {
		*head = f->next;
		if (!*head)
			*tail = NULL;
	}
	return f;
}

static void chan_send(chan *c, void *v)
{
	fiber *r = take(&c->recv_head, &c->recv_tail);
	if (r) {
		*(void **)r->wait_val = v;
		runq_push(r);
		return;
	}
	cur->wait_val = v;
	wait_on(&c->send_head, &c->send_tail);
}

static void *chan_recv(chan *c)
{
	void *v;
	fiber *s = take(&c->send_head, &c->send_tail);
	if (s) {
		v = s->wait_val;
		runq_push(s);
		return v;
	}
	cur->wait_val = &v;
	wait_on(&c->recv_head, &c->recv_tail);
	return v;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long self_pss_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Pss: %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* ---- hackysack, as in hackysack.go ------------------------------------ */

struct run;
typedef struct {
	chan ch;
	fiber *f;
	struct run *run;
	uint32_t idx;
} sacker;

struct run {
	sacker *s;
	uint32_t total;
	uint64_t turns, counter, rng;
	int sample;
	long pss_kib;
	double pause_s;
};

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* xorshift64*, the generator of both other sides. */
static uint32_t pick(struct run *r)
{
	uint64_t x = r->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->rng = x;
	return (uint32_t)((((x * 0x2545F4914F6CDD1Dull) >> 32) * r->total) >> 32);
}

static void *sacker_main(void *arg)
{
	sacker *me = arg;
	struct run *run = me->run;
	for (;;) {
		sacker *msg = chan_recv(&me->ch);
		if (!msg) /* "exit" */
			return me;
		/* A rendezvous send to oneself would deadlock: draw again. */
		uint32_t to;
		do
			to = pick(run);
		while (to == me->idx);
		if (++run->counter >= run->turns) {
			if (run->sample) {
				double t = now_s();
				run->pss_kib = self_pss_kib();
				run->pause_s = now_s() - t;
			}
			for (uint32_t i = 0; i < run->total; i++)
				if (i != me->idx)
					chan_send(&run->s[i].ch, NULL);
			return me;
		}
		chan_send(&run->s[to].ch, me);
	}
}

static double runit(uint32_t n, uint64_t turns, uint64_t seed, int sample, long *pss_kib)
{
	double t0 = now_s();
	struct run run = {.total = n + 1, .turns = turns, .sample = sample, .pss_kib = -1};
	run.rng = splitmix64(seed);
	run.rng = run.rng ? run.rng : 1;
	/* One allocation for the sackers and their channels, as Go's
	 * make() and &sacker{} come from its warm heap. */
	run.s = calloc(run.total, sizeof(*run.s));
	if (!run.s)
		die("out of memory for the sackers");
	for (uint32_t i = 0; i < run.total; i++) {
		run.s[i].run = &run;
		run.s[i].idx = i;
	}
	for (uint32_t i = 0; i < run.total; i++)
		run.s[i].f = spawn(sacker_main, &run.s[i]);
	chan_send(&run.s[0].ch, &run.s[0]);
	for (uint32_t i = 0; i < run.total; i++)
		if (join(run.s[i].f) != &run.s[i])
			die("a sacker returned a wrong value");
	free(run.s);
	if (run.counter != turns) {
		printf("error counter %" PRIu64 " != turns %" PRIu64 "\n", run.counter, turns);
		exit(1);
	}
	*pss_kib = run.pss_kib;
	return now_s() - t0 - run.pause_s;
}

/* ---- two fibers ping-ponging ----------------------------------------- */

struct pingpong {
	uint64_t iters;
	chan ab, ba;
	int bad;
};

static void *yielder(void *arg)
{
	struct pingpong *p = arg;
	for (uint64_t i = 0; i < p->iters; i++)
		yield();
	return NULL;
}

static void *pinger(void *arg)
{
	struct pingpong *p = arg;
	for (uint64_t i = 0; i < p->iters; i++) {
		chan_send(&p->ab, (void *)(uintptr_t)(i + 1));
		if ((uintptr_t)chan_recv(&p->ba) != i + 1)
			p->bad = 1;
	}
	return NULL;
}

static void *ponger(void *arg)
{
	struct pingpong *p = arg;
	for (uint64_t i = 0; i < p->iters; i++)
		chan_send(&p->ba, chan_recv(&p->ab));
	return NULL;
}

static double pingpong(int use_chan, uint64_t iters)
{
	struct pingpong p = {.iters = iters};
	double t0 = now_s();
	fiber *a = spawn(use_chan ? pinger : yielder, &p);
	fiber *b = spawn(use_chan ? ponger : yielder, &p);
	join(a);
	join(b);
	double t = now_s() - t0;
	if (p.bad)
		die("ping-pong value mismatch");
	return t;
}

/* ---- command line, as hackysack.go's ---------------------------------- */

static uint64_t number(const char *flag, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-') {
		printf("error %s wants a whole number, not '%s'\n", flag, s);
		exit(1);
	}
	return v;
}

int main(int argc, char **argv)
{
	const char *test = "hackysack", *variant = "yield";
	uint64_t n = 10000, turns = 1000, reps = 3, switches = 1000000;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] == '-' && a[1] == '-')
			a++;
		if (i + 1 >= argc) {
			printf("error %s wants a value\n", argv[i]);
			return 1;
		}
		const char *v = argv[++i];
		if (strcmp(a, "-test") == 0)
			test = v;
		else if (strcmp(a, "-variant") == 0)
			variant = v;
		else if (strcmp(a, "-n") == 0)
			n = number(a, v);
		else if (strcmp(a, "-turns") == 0)
			turns = number(a, v);
		else if (strcmp(a, "-reps") == 0)
			reps = number(a, v);
		else if (strcmp(a, "-switches") == 0)
			switches = number(a, v);
		else {
			printf("error unknown flag %s (expected -test, -n, -turns, -reps, "
			       "-variant or -switches)\n",
			       argv[i - 1]);
			return 1;
		}
	}
	if (reps < 1 || reps > 1000) {
		printf("error need 1 <= reps <= 1000, not %" PRIu64 "\n", reps);
		return 1;
	}
	long pss = -1;
	double *t = calloc(reps, sizeof(*t));
	if (!t)
		die("out of memory for the times");
	if (strcmp(test, "hackysack") == 0 || strcmp(test, "hop") == 0) {
		if (n < 1 || turns < 1 || n > (1u << 31))
			die("need n >= 1 and turns >= 1");
		for (uint64_t i = 0; i < reps; i++) {
			long p = -1;
			/* Pss is sampled in the first (warm-up) run, as on
			 * the other sides. */
			t[i] = runit((uint32_t)n, turns, 0x5eed + i, i == 0, &p);
			if (p >= 0)
				pss = p;
		}
	} else if (strcmp(test, "switch") == 0) {
		int use_chan = strcmp(variant, "chan") == 0;
		if (!use_chan && strcmp(variant, "yield") != 0) {
			printf("error unknown variant '%s' (expected yield or chan)\n", variant);
			return 1;
		}
		for (uint64_t i = 0; i < reps; i++)
			t[i] = pingpong(use_chan, switches / 2);
	} else {
		printf("error unknown test '%s' (expected hackysack, hop or switch)\n", test);
		return 1;
	}
	printf("ok t=");
	for (uint64_t i = 0; i < reps; i++)
		printf("%s%.9g", i ? "," : "", t[i]);
	printf(" pss_kib=%ld\n", pss);
	free(t);
	return 0;
}

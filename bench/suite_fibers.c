/* The fibers suite: the hackysack benchmark of the Stackless/Fibra seed
 * (N+1 sackers, each a fiber with its own rendezvous channel, a random
 * target each kick, one global counter, everyone sent home at `turns`), the
 * cost of one hop, and a two-fiber context-switch ping-pong. Each case runs
 * in its own child process so its peak RSS is its own; Go goroutines run
 * the same cases from bench/go/hackysack.go as the baseline when `go` is
 * installed (with GOMAXPROCS=1 and its default for hackysack and hop), and
 * so does a C program on boost.context (bench/peer/hackysack_boost.c) when
 * it was built (libboost-context-dev).
 *
 * --json: go rows have "variant": "GOMAXPROCS=N" ("... default" for Go's
 * own); the faster is the baseline (baseline true), the slower has baseline
 * false (and, a peer's, fails no run when it fails). hackysack_first_run
 * rows: best_s, mean_s, max_s of the untimed warm-up runs, one per
 * process. */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/shoal.h>

#include "fiber/switch.h"

/* Timed as the seed's `timeit -n 3` does: REPS repeats of LOOPS runs each,
 * a repeat's figure the mean of its loops, the best repeat reported. Each
 * repeat is its own process, which makes one untimed warm-up run first (a
 * process's first run pays its page faults; timeit's first repeat pays
 * them too, and is seldom the best); shoal's, Go's and boost.context's
 * processes take turns, so a drift in the machine's speed (it is shared)
 * hits every side alike. */
#define REPS 3
#define LOOPS 3
#define RUNS (1 + LOOPS) /* runs in a process: the warm-up, then the loops */
#define SUITE "fibers"

/* A repeat's figure: the mean of its timed loops (t[1..RUNS-1]). */
static double loops_mean(const double *t)
{
	double sum = 0;
	for (int i = 1; i < RUNS; i++)
		sum += t[i];
	return sum / LOOPS;
}

/* ---- the PRNG, identical in hackysack.go -------------------------------- */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* xorshift64*: a few cycles a draw, so the benchmark measures the runtime
 * and not rand()'s lock. */
static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* ---- hackysack on shoal fibers ------------------------------------------ */

struct hs_run;

struct hs_sacker {
	shoal_chan *ch;
	shoal_fiber *f;
	struct hs_run *run;
	uint32_t idx;
};

/* One runit. counter and rng are touched only by the fiber holding the
 * sack, and fibers of one scheduler never run at once, so no locks. */
struct hs_run {
	struct hs_sacker *s;
	uint32_t total;
	uint64_t turns;
	uint64_t counter;
	uint64_t rng;
	int err;
	const char *err_op;
	int sample_pss;
	long pss_kib;
	double pause_s;
};

/* On a failed channel call the sack is lost and every sacker would wait
 * forever: close all channels so they wake with SHOAL_ECLOSED and return,
 * and the failure is reported instead of a hang. */
static void hs_abort(struct hs_run *run, int err, const char *op)
{
	if (run->err)
		return;
	run->err = err;
	run->err_op = op;
	for (uint32_t i = 0; i < run->total; i++)
		if (run->s[i].ch)
			shoal_chan_close(run->s[i].ch);
}

static uint32_t hs_pick(struct hs_run *run)
{
	return (uint32_t)(((xorshift(&run->rng) >> 32) * run->total) >> 32);
}

static void *hs_sacker_main(void *arg)
{
	struct hs_sacker *me = arg;
	struct hs_run *run = me->run;
	for (;;) {
		struct hs_sacker *msg;
		int rc = shoal_chan_recv(me->ch, &msg, SHOAL_FOREVER);
		if (rc != 0) {
			hs_abort(run, rc, "shoal_chan_recv");
			return NULL;
		}
		if (!msg) /* "exit" */
			return me;
		/* A rendezvous send to oneself would deadlock: draw again, as
		 * Stackless' original does. */
		uint32_t to;
		do
			to = hs_pick(run);
		while (to == me->idx);
		if (++run->counter >= run->turns) {
			if (run->sample_pss) {
				/* Everyone is alive now: the memory peak. */
				double t = sh_bench_now();
				run->pss_kib = sh_bench_self_pss_kib();
				run->pause_s = sh_bench_now() - t;
			}
			struct hs_sacker *bye = NULL;
			for (uint32_t i = 0; i < run->total; i++) {
				if (i == me->idx)
					continue;
				rc = shoal_chan_send(run->s[i].ch, &bye, SHOAL_FOREVER);
				if (rc != 0) {
					hs_abort(run, rc, "shoal_chan_send (exit)");
					return NULL;
				}
			}
			return me;
		}
		rc = shoal_chan_send(run->s[to].ch, &me, SHOAL_FOREVER);
		if (rc != 0) {
			hs_abort(run, rc, "shoal_chan_send");
			return NULL;
		}
	}
}

/* One whole runit, timed: channels, fibers, the game, joins, teardown.
 * A child process runs this, so on a setup error it returns without
 * unwinding and the process exit cleans up. */
static int hs_runit(uint32_t n, uint64_t turns, uint64_t seed, int sample_pss, double *elapsed,
		    long *pss_kib, char *err, size_t errlen)
{
	struct hs_run run;
	memset(&run, 0, sizeof(run));
	double t0 = sh_bench_now();
	run.total = n + 1;
	run.turns = turns;
	run.rng = splitmix64(seed);
	run.rng = run.rng ? run.rng : 1;
	run.sample_pss = sample_pss;
	run.pss_kib = -1;
	run.s = calloc(run.total, sizeof(*run.s));
	if (!run.s) {
		snprintf(err, errlen, "out of memory for %u sackers", run.total);
		return -1;
	}
	int rc;
	for (uint32_t i = 0; i < run.total; i++) {
		run.s[i].run = &run;
		run.s[i].idx = i;
		rc = shoal_chan_create(&run.s[i].ch, sizeof(struct hs_sacker *), 0);
		if (rc != 0) {
			snprintf(err, errlen, "shoal_chan_create #%u: %s", i, shoal_strerror(rc));
			return -1;
		}
	}
	for (uint32_t i = 0; i < run.total; i++) {
		rc = shoal_spawn(&run.s[i].f, hs_sacker_main, &run.s[i], NULL);
		if (rc != 0) {
			snprintf(err, errlen, "shoal_spawn #%u: %s", i, shoal_strerror(rc));
			return -1;
		}
	}
	struct hs_sacker *one = &run.s[0];
	rc = shoal_chan_send(one->ch, &one, SHOAL_FOREVER);
	if (rc != 0) {
		snprintf(err, errlen, "first kick: shoal_chan_send: %s", shoal_strerror(rc));
		return -1;
	}
	uint32_t bad_join = 0, bad_result = 0;
	int join_rc = 0;
	for (uint32_t i = 0; i < run.total; i++) {
		void *res = NULL;
		rc = shoal_join(run.s[i].f, &res);
		if (rc != 0) {
			bad_join++;
			join_rc = rc;
		} else if (res != &run.s[i]) {
			bad_result++;
		}
	}
	int destroy_rc = 0;
	for (uint32_t i = 0; i < run.total; i++) {
		rc = shoal_chan_destroy(run.s[i].ch);
		if (rc != 0)
			destroy_rc = rc;
	}
	free(run.s);
	*elapsed = sh_bench_now() - t0 - run.pause_s;
	*pss_kib = run.pss_kib;

	if (run.err) {
		snprintf(err, errlen, "a sacker's %s failed: %s", run.err_op,
			 shoal_strerror(run.err));
		return -1;
	}
	if (bad_join) {
		snprintf(err, errlen, "%u of %u joins failed (last: %s)", bad_join, run.total,
			 shoal_strerror(join_rc));
		return -1;
	}
	if (bad_result) {
		snprintf(err, errlen, "%u of %u sackers returned a wrong value", bad_result,
			 run.total);
		return -1;
	}
	if (destroy_rc) {
		snprintf(err, errlen, "shoal_chan_destroy: %s", shoal_strerror(destroy_rc));
		return -1;
	}
	if (run.counter != turns) {
		snprintf(err, errlen, "counter is %llu at the end, expected turns = %llu",
			 (unsigned long long)run.counter, (unsigned long long)turns);
		return -1;
	}
	return 0;
}

/* ---- two fibers ping-ponging -------------------------------------------- */

struct sw_run {
	uint64_t iters;
	shoal_chan *ab, *ba;
	int err;
	const char *err_op;
	const void *last;  /* which fiber ran last */
	uint64_t handoffs; /* control passed from one fiber to the other */
};

static void sw_note(struct sw_run *w, const void *me)
{
	w->handoffs += w->last && w->last != me;
	w->last = me;
}

static void *sw_yield_main(void *arg)
{
	struct sw_run *w = arg;
	int me;
	for (uint64_t i = 0; i < w->iters; i++) {
		sw_note(w, &me);
		int rc = shoal_yield();
		if (rc != 0) {
			w->err = rc;
			w->err_op = "shoal_yield";
			return NULL;
		}
	}
	return w;
}

static void *sw_ping_main(void *arg)
{
	struct sw_run *w = arg;
	for (uint64_t i = 0; i < w->iters; i++) {
		uint64_t back = 0;
		int rc = shoal_chan_send(w->ab, &i, SHOAL_FOREVER);
		if (rc == 0)
			rc = shoal_chan_recv(w->ba, &back, SHOAL_FOREVER);
		if (rc == 0 && back != i)
			rc = SHOAL_EBADMSG;
		if (rc != 0) {
			w->err = rc;
			w->err_op = "ping";
			shoal_chan_close(w->ab);
			shoal_chan_close(w->ba);
			return NULL;
		}
	}
	return w;
}

static void *sw_pong_main(void *arg)
{
	struct sw_run *w = arg;
	for (uint64_t i = 0; i < w->iters; i++) {
		uint64_t v;
		int rc = shoal_chan_recv(w->ab, &v, SHOAL_FOREVER);
		if (rc == 0)
			rc = shoal_chan_send(w->ba, &v, SHOAL_FOREVER);
		if (rc != 0) {
			if (!w->err) {
				w->err = rc;
				w->err_op = "pong";
			}
			shoal_chan_close(w->ab);
			shoal_chan_close(w->ba);
			return NULL;
		}
	}
	return w;
}

/* Times `switches` handoffs between two fibers (yield or a pair of
 * rendezvous channels). */
static int sw_run_once(int use_chan, uint64_t switches, double *elapsed, char *err, size_t errlen)
{
	struct sw_run w;
	memset(&w, 0, sizeof(w));
	w.iters = switches / 2;
	shoal_fiber *a, *b;
	int rc;
	double t0 = sh_bench_now();
	if (use_chan) {
		if ((rc = shoal_chan_create(&w.ab, sizeof(uint64_t), 0)) != 0 ||
		    (rc = shoal_chan_create(&w.ba, sizeof(uint64_t), 0)) != 0) {
			snprintf(err, errlen, "shoal_chan_create: %s", shoal_strerror(rc));
			return -1;
		}
		rc = shoal_spawn(&a, sw_ping_main, &w, NULL);
		if (rc == 0)
			rc = shoal_spawn(&b, sw_pong_main, &w, NULL);
	} else {
		rc = shoal_spawn(&a, sw_yield_main, &w, NULL);
		if (rc == 0)
			rc = shoal_spawn(&b, sw_yield_main, &w, NULL);
	}
	if (rc != 0) {
		snprintf(err, errlen, "shoal_spawn: %s", shoal_strerror(rc));
		return -1;
	}
	void *ra = NULL, *rb = NULL;
	int ja = shoal_join(a, &ra), jb = shoal_join(b, &rb);
	if (use_chan) {
		shoal_chan_destroy(w.ab);
		shoal_chan_destroy(w.ba);
	}
	*elapsed = sh_bench_now() - t0;
	if (w.err) {
		snprintf(err, errlen, "%s failed: %s", w.err_op, shoal_strerror(w.err));
		return -1;
	}
	if (ja != 0 || jb != 0 || ra != &w || rb != &w) {
		snprintf(err, errlen, "shoal_join: %s / %s", shoal_strerror(ja),
			 shoal_strerror(jb));
		return -1;
	}
	/* Two runnable fibers that yield must alternate; if they did not,
	 * the figure would not be a switch. */
	if (!use_chan && w.handoffs + 4 < 2 * w.iters) {
		snprintf(err, errlen,
			 "the two yielding fibers alternated %llu times in %llu yields each "
			 "(expected about %llu handoffs)",
			 (unsigned long long)w.handoffs, (unsigned long long)w.iters,
			 (unsigned long long)(2 * w.iters));
		return -1;
	}
	return 0;
}

/* ---- the floor: two visits to each of N guarded stacks --------------------- */

/* Every sacker's stack is visited at least twice in a hackysack run: its
 * first run (to its first receive) and its exit. With thousands of fibers
 * both visits find the stack's lines out of the caches (and its page out
 * of the TLB, though stacks on 2 MiB pages took no less time: the cost is
 * the lines). This measures those two visits with nothing else: stacks from the fiber
 * layer's own pool and layout (size, guard page, colour), entered and left
 * with its own context switch, in the order hackysack visits them,
 * prefetched ahead as the scheduler does, and no scheduler, channel or fiber
 * structure. No fiber runtime that keeps one
 * guarded stack per fiber can do a run in less, so it shows how much of
 * the hackysack time is the machine's and how much is ours. */
/* Sanitizers track stacks through the scheduler's announcements, which
 * these bare switches leave out: the row is skipped in their builds. */
#if defined(SH_ASAN) || defined(SH_TSAN)
#define FL_MEASURED 0
#else
#define FL_MEASURED 1

struct fl_run {
	void *main_sp;
	void **sps; /* saved stack pointer of each parked stack */
};

static struct fl_run *fl_cur;

static __attribute__((noinline)) void fl_park(void **sp)
{
	sh_ctx_switch(sp, fl_cur->main_sp);
}

/* A first frame that blocks once, then leaves for good when resumed. */
static void fl_body(void *arg)
{
	void **sp = arg;
	volatile char frame[64];
	frame[0] = 1;
	fl_park(sp);
	frame[1] = frame[0];
	sh_ctx_switch(sp, fl_cur->main_sp);
	__builtin_unreachable();
}

/* Visits prefetch the stacks ahead as the scheduler does (switch.h): every
 * 8 visits, the stacks of the 8 visits after the next, so that their misses
 * overlap. */
#define FL_ROUND 8

static void fl_run_once(struct fl_run *w, const sh_stack *st, uint32_t n, double *first,
			double *resume)
{
	fl_cur = w;
	double t0 = sh_bench_now();
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t j = i + 2; i % FL_ROUND == 0 && j < i + 2 + FL_ROUND && j < n; j++)
			sh_prefetch_first_frames(sh_stack_top(&st[j]));
		sh_ctx_start(&w->main_sp, sh_stack_top(&st[i]), &w->sps[i], fl_body);
	}
	double t1 = sh_bench_now();
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t j = i + 2; i % FL_ROUND == 0 && j < i + 2 + FL_ROUND && j < n; j++)
			sh_prefetch_frames(w->sps[j], 0);
		sh_ctx_switch(&w->main_sp, w->sps[i]);
	}
	double t2 = sh_bench_now();
	*first = t1 - t0;
	*resume = t2 - t1;
}

/* Runs the floor in this process: RUNS rounds over the same stacks, as the
 * hackysack runs reuse their pool's warm stacks. */
static int fl_job(shoal_sched *s, uint32_t n, double *t, double *first, double *resume, char *err,
		  size_t errlen)
{
	sh_stack *st = calloc(n, sizeof(*st));
	struct fl_run w = {.sps = calloc(n, sizeof(void *))};
	int rc = st && w.sps ? 0 : SHOAL_ENOMEM;
	uint32_t got = 0;
	for (; rc == 0 && got < n; got++)
		if ((rc = sh_stack_get(s->pools, s->stack_size, s->guard, &st[got])) != 0)
			break;
	uint32_t guarded = 0;
	for (uint32_t i = 0; i < got; i++)
		guarded += st[i].guarded;
	if (rc == 0 && guarded < n) {
		snprintf(err, errlen, "only %u of %u stacks have a guard page", guarded, n);
		rc = -1;
	} else if (rc != 0) {
		snprintf(err, errlen, "sh_stack_get #%u: %s", got, shoal_strerror(rc));
	}
	for (int i = 0; rc == 0 && i < RUNS; i++) {
		fl_run_once(&w, st, n, &first[i], &resume[i]);
		t[i] = first[i] + resume[i];
	}
	for (uint32_t i = 0; i < got; i++)
		sh_stack_put(s->pools, &st[i]);
	free(st);
	free(w.sps);
	return rc == 0 ? 0 : -1;
}
#endif

/* ---- the child process side --------------------------------------------- */

enum { JOB_HACKYSACK, JOB_SWITCH_YIELD, JOB_SWITCH_CHAN, JOB_STACKS };

struct job {
	int kind;
	uint32_t n;
	uint64_t turns; /* or switches */
};

/* A process's runs; for a side (struct side), its repeats' figures. */
struct job_out {
	int reps;
	double t[RUNS];
	long pss_kib;
	double sched_switches;		  /* scheduler switches over the whole job */
	double first[RUNS], resume[RUNS]; /* JOB_STACKS: the two visits */
	size_t stack_size;		  /* JOB_STACKS: bytes a stack */
};

static int job_child(void *arg, void *outp, size_t out_size, char *err, size_t errlen)
{
	const struct job *j = arg;
	struct job_out *out = outp;
	(void)out_size;
	out->pss_kib = -1;
	shoal_sched *s;
	int rc = shoal_sched_create(&s, NULL);
	if (rc != 0) {
		snprintf(err, errlen, "shoal_sched_create: %s", shoal_strerror(rc));
		return -1;
	}
#if FL_MEASURED
	if (j->kind == JOB_STACKS) {
		out->stack_size = s->stack_size;
		int r = fl_job(s, j->n, out->t, out->first, out->resume, err, errlen);
		out->reps = r == 0 ? RUNS : 0;
		shoal_sched_destroy(s);
		return r;
	}
#endif
	shoal_sched_stats st0, st1;
	shoal_sched_stats_get(s, &st0);
	for (int i = 0; i < RUNS; i++) {
		int r;
		if (j->kind == JOB_HACKYSACK) {
			long pss = -1;
			/* Pss is sampled in the warm-up run: reading smaps_rollup
			 * walks the page tables and would evict the caches and
			 * TLB right before a timed run's exits. */
			r = hs_runit(j->n, j->turns, 0x5eed + (uint64_t)i, i == 0, &out->t[i], &pss,
				     err, errlen);
			if (pss >= 0)
				out->pss_kib = pss;
		} else {
			r = sw_run_once(j->kind == JOB_SWITCH_CHAN, j->turns, &out->t[i], err,
					errlen);
		}
		if (r != 0)
			return -1;
		out->reps = i + 1;
	}
	shoal_sched_stats_get(s, &st1);
	out->sched_switches = (double)(st1.switches - st0.switches);
	if (st1.live != 0) {
		snprintf(err, errlen, "%zu fibers still live after every join", st1.live);
		return -1;
	}
	rc = shoal_sched_destroy(s);
	if (rc != 0) {
		snprintf(err, errlen, "shoal_sched_destroy: %s", shoal_strerror(rc));
		return -1;
	}
	return 0;
}

/* ---- Go, the baseline ----------------------------------------------------- */

/* The build lives from go_prepare() to go_cleanup(); version, state and
 * reason stay for the table, printed after the suite has cleaned up. */
static struct {
	int state;	/* 0 untried, 1 ready, -1 skip, -2 build failed */
	int last_state; /* state of the last suite run, for the summary */
	char dir[PATH_MAX];
	char bin[PATH_MAX + 32];
	char version[32];
	char why[256];
	int gomaxprocs;
} go;

/* The C program on boost.context (bench/peer/hackysack_boost.c), built
 * beside this program when libboost-context-dev was installed. */
static struct {
	int state; /* 0 untried, 1 ready, -1 skip */
	int last_state;
	char bin[PATH_MAX];
} bc;

#define BOOST_MISSING \
	"hackysack-boost not built (apt-get install libboost-context-dev, then build again)"

static void boost_prepare(void)
{
	if (bc.state == 0)
		bc.state = sh_bench_find_aux("hackysack-boost", X_OK, bc.bin, sizeof(bc.bin)) == 0
				   ? 1
				   : -1;
}

static void boost_cleanup(void)
{
	bc.last_state = bc.state;
	bc.state = 0;
}

static int on_path(const char *prog)
{
	const char *path = getenv("PATH");
	if (!path)
		return 0;
	char buf[PATH_MAX];
	while (*path) {
		size_t len = strcspn(path, ":");
		snprintf(buf, sizeof(buf), "%.*s/%s", (int)(len ? len : 1), len ? path : ".", prog);
		if (access(buf, X_OK) == 0)
			return 1;
		path += len + (path[len] == ':');
	}
	return 0;
}

static int copy_file(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
	char buf[8192];
	size_t k;
	int rc = in && out ? 0 : -1;
	while (rc == 0 && (k = fread(buf, 1, sizeof(buf), in)) > 0)
		rc = fwrite(buf, 1, k, out) == k ? 0 : -1;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		rc = -1;
	return rc;
}

static void go_cleanup(void)
{
	if (go.dir[0])
		sh_bench_rm_tree(go.dir);
	go.dir[0] = '\0';
	go.bin[0] = '\0';
	go.last_state = go.state;
	go.state = 0;
}

/* The last non-empty line of a program's output, for error messages. */
static const char *last_line(char *out)
{
	size_t n = strlen(out);
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
		out[--n] = '\0';
	char *nl = strrchr(out, '\n');
	return nl ? nl + 1 : out;
}

/* Builds hackysack.go once into a temporary directory, with its own Go
 * cache and no network, so the run leaves nothing behind. */
static void go_prepare(const sh_bench_opts *o)
{
	if (go.state != 0)
		return;
	char src[PATH_MAX], path[PATH_MAX + 64], out[8192], err[256];
	if (!on_path("go")) {
		go.state = -1;
		snprintf(go.why, sizeof(go.why), "go not installed (apt-get install golang-go)");
		return;
	}
	if (sh_bench_find_source("go/hackysack.go", src, sizeof(src)) != 0) {
		go.state = -1;
		snprintf(go.why, sizeof(go.why),
			 "bench/go/hackysack.go not found (set SHOAL_SRCDIR to the source tree)");
		return;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(go.dir, sizeof(go.dir), "%s/shoal-bench-go-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(go.dir)) {
		go.state = -2;
		snprintf(go.why, sizeof(go.why), "mkdtemp %.150s: %.60s", go.dir, strerror(errno));
		go.dir[0] = '\0';
		return;
	}
	if (o->progress)
		fprintf(stderr, "\r\033[K[fibers] building the Go baseline");
	char *ver_argv[] = {"go", "version", NULL};
	if (sh_bench_exec(ver_argv, NULL, NULL, out, sizeof(out), 60, NULL, err, sizeof(err)) == 0)
		sscanf(out, "go version %31s", go.version);
	snprintf(path, sizeof(path), "%s/src", go.dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/src/hackysack.go", go.dir);
	int rc = copy_file(src, path);
	snprintf(path, sizeof(path), "%s/src/go.mod", go.dir);
	FILE *f = rc == 0 ? fopen(path, "w") : NULL;
	if (!f || fputs("module shoalbench\n\ngo 1.19\n", f) < 0 || fclose(f) != 0) {
		go.state = -2;
		snprintf(go.why, sizeof(go.why), "cannot copy %.100s into %.100s", src, go.dir);
		return;
	}
	char e_cache[PATH_MAX + 16], e_path[PATH_MAX + 16], srcdir[PATH_MAX + 8];
	snprintf(e_cache, sizeof(e_cache), "GOCACHE=%s/cache", go.dir);
	snprintf(e_path, sizeof(e_path), "GOPATH=%s/gopath", go.dir);
	snprintf(srcdir, sizeof(srcdir), "%s/src", go.dir);
	snprintf(go.bin, sizeof(go.bin), "%s/hackysack-go", go.dir);
	char *env[] = {e_cache,		  e_path,
		       "GOPROXY=off",	  "GOENV=off",
		       "GOFLAGS=",	  "GO111MODULE=on",
		       "CGO_ENABLED=0",	  "GOTOOLCHAIN=local",
		       "GOTELEMETRY=off", NULL};
	char *build_argv[] = {"go", "build", "-o", go.bin, ".", NULL};
	rc = sh_bench_exec(build_argv, srcdir, env, out, sizeof(out), 300, NULL, err, sizeof(err));
	if (rc != 0) {
		go.state = -2;
		snprintf(go.why, sizeof(go.why), "go build failed: %.200s",
			 rc < 0 ? err : last_line(out));
		return;
	}
	go.state = 1;
}

/* Parses a baseline program's "ok t=T1,T2,T3 pss_kib=K [gomaxprocs=P go=V]". */
static int peer_parse(char *out, struct job_out *jo, int *procs, char *err, size_t errlen)
{
	char *line = strstr(out, "ok t=");
	memset(jo, 0, sizeof(*jo));
	jo->pss_kib = -1;
	if (!line || (line != out && line[-1] != '\n')) {
		snprintf(err, errlen, "%s", out[0] ? last_line(out) : "no output");
		return -1;
	}
	char *p = line + 5;
	while (jo->reps < RUNS) {
		char *end;
		double v = strtod(p, &end);
		if (end == p || v <= 0)
			break;
		jo->t[jo->reps++] = v;
		p = end;
		if (*p != ',')
			break;
		p++;
	}
	char *k = strstr(p, "pss_kib=");
	if (k)
		jo->pss_kib = strtol(k + 8, NULL, 10);
	k = strstr(p, "gomaxprocs=");
	if (k)
		*procs = (int)strtol(k + 11, NULL, 10);
	if (jo->reps != RUNS) {
		snprintf(err, errlen, "could not parse: %s", line);
		return -1;
	}
	return 0;
}

/* Runs one job in a baseline program (Go's or boost.context's: both take
 * the same flags) with the extra environment env (may be NULL); procs gets
 * its GOMAXPROCS when it says. */
static int peer_job(const char *bin, char *const env[], const struct job *j, int timeout_s,
		    struct job_out *jo, long *rss, int *procs, char *err, size_t errlen)
{
	char n[32], turns[32], reps[16];
	snprintf(n, sizeof(n), "%u", j->n);
	snprintf(turns, sizeof(turns), "%llu", (unsigned long long)j->turns);
	snprintf(reps, sizeof(reps), "%d", RUNS);
	char *argv[16];
	int a = 0;
	argv[a++] = (char *)bin;
	argv[a++] = "-reps";
	argv[a++] = reps;
	if (j->kind == JOB_HACKYSACK) {
		argv[a++] = "-test";
		argv[a++] = "hackysack";
		argv[a++] = "-n";
		argv[a++] = n;
		argv[a++] = "-turns";
		argv[a++] = turns;
	} else {
		argv[a++] = "-test";
		argv[a++] = "switch";
		argv[a++] = "-variant";
		argv[a++] = j->kind == JOB_SWITCH_CHAN ? "chan" : "yield";
		argv[a++] = "-switches";
		argv[a++] = turns;
	}
	argv[a] = NULL;
	char out[4096];
	int rc = sh_bench_exec(argv, NULL, env, out, sizeof(out), timeout_s, rss, err, errlen);
	if (rc < 0)
		return -1;
	if (peer_parse(out, jo, procs, err, errlen) != 0)
		return -1;
	if (j->kind != JOB_HACKYSACK)
		jo->pss_kib = -1;
	if (rc != 0) {
		snprintf(err, errlen, "exit status %d: %s", rc, last_line(out));
		return -1;
	}
	return 0;
}

/* ---- turning a job into result rows ---------------------------------------- */

enum { TEST_HACKYSACK, TEST_HOP, TEST_SWITCH, TEST_STACKS };

static const char *const test_names[] = {"hackysack", "hop", "switch", "stacks"};

static void set_params(sh_bench_result *x, int test, const struct job *j)
{
	if (test == TEST_SWITCH) {
		sh_bench_param_str(x, "variant", j->kind == JOB_SWITCH_CHAN ? "chan" : "yield");
		sh_bench_param_num(x, "switches", (double)j->turns);
	} else {
		sh_bench_param_num(x, "n", j->n);
		sh_bench_param_num(x, "turns", (double)j->turns);
	}
}

static void fill_result(sh_bench_result *x, int test, const struct job *j, const struct job_out *jo,
			long rss, int is_shoal)
{
	double mean, sd, min, max;
	sh_bench_stats(jo->t, jo->reps, &mean, &sd, &min, &max);
	double per = 1e9 / (double)j->turns, v[REPS];
	if (test == TEST_HACKYSACK) {
		sh_bench_metric_set(x, "best_s", min);
	} else if (test == TEST_HOP) {
		sh_bench_metric_set(x, "ns_per_hop", min * per);
	} else {
		sh_bench_metric_set(x, "ns_per_switch", min * per);
	}
	sh_bench_metric_set(x, "mean_s", mean);
	sh_bench_metric_set(x, "stddev_s", sd);
	sh_bench_metric_set(x, "min_s", min);
	sh_bench_metric_set(x, "max_s", max);
	sh_bench_metric_set(x, "reps", jo->reps);
	if (rss >= 0)
		sh_bench_metric_set(x, "peak_rss_kib", (double)rss);
	if (jo->pss_kib >= 0)
		sh_bench_metric_set(x, "pss_kib", (double)jo->pss_kib);
	if (is_shoal && test == TEST_HOP && jo->sched_switches > 0)
		sh_bench_metric_set(x, "sched_switches_per_hop",
				    jo->sched_switches / ((double)j->turns * jo->reps));
	x->peak_rss_kib = (double)rss;
	if (test == TEST_HACKYSACK) {
		sh_bench_show_samples(x, jo->t, jo->reps, "s");
		x->cmp_value = min;
		x->cmp_word = "faster";
	} else {
		for (int i = 0; i < jo->reps; i++)
			v[i] = jo->t[i] * per;
		sh_bench_show_samples(x, v, jo->reps, test == TEST_HOP ? "ns/hop" : "ns/switch");
		x->cmp_value = min * per;
		x->cmp_word = "cheaper";
	}
}

static void progress(const sh_bench_opts *o, int test, const char *who, const struct job *j)
{
	if (!o->progress)
		return;
	if (test == TEST_SWITCH)
		fprintf(stderr, "\r\033[K[fibers] switch %s %s", who,
			j->kind == JOB_SWITCH_CHAN ? "chan" : "yield");
	else if (test == TEST_STACKS)
		fprintf(stderr, "\r\033[K[fibers] stacks n=%u", j->n);
	else
		fprintf(stderr, "\r\033[K[fibers] %s %s n=%u turns=%llu", test_names[test], who,
			j->n, (unsigned long long)j->turns);
}

/* One side of a case: the timed runs gathered over the rounds. */
static double best_of(const struct job_out *jo);
_Static_assert(REPS <= RUNS, "a side's repeats fit in job_out.t");

struct side {
	struct job_out all;   /* t[] holds each repeat's figure */
	struct job_out first; /* t[] holds each process's warm-up run */
	long rss;	      /* the largest peak of its processes */
	int failed;
	int procs; /* Go: its GOMAXPROCS */
	char err[256];
};

static double best_of(const struct job_out *jo)
{
	double b = jo->reps ? jo->t[0] : 0;
	for (int i = 1; i < jo->reps; i++)
		b = jo->t[i] < b ? jo->t[i] : b;
	return b;
}

static void side_add(struct side *sd, int round, const struct job_out *jo, long rss)
{
	sd->first.t[sd->first.reps++] = jo->t[0];
	sd->all.t[sd->all.reps++] = loops_mean(jo->t);
	if (rss > sd->rss)
		sd->rss = rss;
	if (round == 0)
		sd->all.pss_kib = jo->pss_kib;
	sd->all.sched_switches += jo->sched_switches / RUNS;
}

/* The row of a side of a peer (a baseline unless it is the slower Go), or
 * why it has no figures. */
static void peer_row(sh_bench_report *r, int test, const struct job *j, const char *label,
		     int baseline, int state, const char *why, const struct side *sd)
{
	sh_bench_result *x = sh_bench_add(r, SUITE, test_names[test], label, baseline);
	x->own = 0; /* a peer's, baseline or not: its failure leaves the run passing */
	set_params(x, test, j);
	if (sd->procs > 0)
		snprintf(x->variant, sizeof(x->variant), "GOMAXPROCS=%d%s", sd->procs,
			 sd->procs == go.gomaxprocs && sd->procs > 1 ? " default" : "");
	if (state == -1)
		sh_bench_skip(x, "%s", why);
	else if (state != 1)
		sh_bench_fail(x, "%s", why);
	else if (sd->failed)
		sh_bench_fail(x, "%s", sd->err);
	else
		fill_result(x, test, j, &sd->all, sd->rss, 0);
}

/* One process of a baseline side, unless the side has failed already. */
static void peer_round(const sh_bench_opts *o, int test, const struct job *j, const char *label,
		       const char *bin, char *const env[], int timeout_s, int round,
		       struct side *sd, int *procs)
{
	struct job_out jo;
	long rss = -1;
	if (sd->failed)
		return;
	progress(o, test, label, j);
	if (peer_job(bin, env, j, timeout_s, &jo, &rss, procs, sd->err, sizeof(sd->err)) != 0)
		sd->failed = 1;
	else
		side_add(sd, round, &jo, rss);
}

/* The rows of a hackysack case's warm-up runs: the first run in a fresh
 * process (stacks, channels and pages made for the first time), which the
 * timed repeats leave out and a user's first spawn pays. */
static void first_run_rows(sh_bench_report *r, const struct job *j, const struct side *sh,
			   const struct side *g, const struct side *b)
{
	const struct side *sides[3] = {sh, g, b};
	static const char *const labels[3] = {"shoal", "go", "boost"};
	int states[3] = {1, go.state, bc.state};
	for (int k = 0; k < 3; k++) {
		const struct side *sd = sides[k];
		if (states[k] != 1 || sd->failed || sd->first.reps == 0)
			continue;
		sh_bench_result *x =
			sh_bench_add(r, SUITE, "hackysack_first_run", labels[k], k > 0);
		set_params(x, TEST_HACKYSACK, j);
		if (sd->procs > 0)
			snprintf(x->variant, sizeof(x->variant), "GOMAXPROCS=%d%s", sd->procs,
				 sd->procs == go.gomaxprocs && sd->procs > 1 ? " default" : "");
		double mean, sdv, mn, mx;
		sh_bench_stats(sd->first.t, sd->first.reps, &mean, &sdv, &mn, &mx);
		sh_bench_metric_set(x, "best_s", mn);
		sh_bench_metric_set(x, "mean_s", mean);
		sh_bench_metric_set(x, "max_s", mx);
		sh_bench_show_samples(x, sd->first.t, sd->first.reps, "s");
		x->cmp_value = mn;
	}
}

/* Runs one case on shoal, Go (GOMAXPROCS=1 and its default, for the cases
 * with many goroutines; switch sets 1 itself) and boost.context, their
 * processes taking turns, and appends the rows: shoal's, the faster Go's
 * (the baseline: a peer is judged in its best setting), the slower Go's,
 * boost's. */
static void run_case(const sh_bench_opts *o, sh_bench_report *r, int test, const struct job *j)
{
	int timeout_s = o->quick ? 120 : 900;
	struct side sh = {.rss = -1, .all.pss_kib = -1}, g = {.rss = -1, .all.pss_kib = -1},
		    g1 = {.rss = -1, .all.pss_kib = -1}, b = {.rss = -1, .all.pss_kib = -1};
	static char *const one_p[] = {"GOMAXPROCS=1", NULL};
	int both = j->kind == JOB_HACKYSACK;
	/* --quick: one process a side for the 100 000-fiber case, whose
	 * spawn alone takes seconds; its peak RSS is what that case is for */
	int rounds = o->quick && j->n >= 100000 ? 1 : REPS;
	for (int round = 0; round < rounds; round++) {
		struct job_out jo;
		long rss = -1;
		if (!sh.failed) {
			progress(o, test, "shoal", j);
			memset(&jo, 0, sizeof(jo));
			if (sh_bench_in_child(job_child, (void *)j, &jo, sizeof(jo), timeout_s,
					      &rss, sh.err, sizeof(sh.err)) != 0)
				sh.failed = 1;
			else
				side_add(&sh, round, &jo, rss);
		}
		int procs = 0;
		if (go.state == 1) {
			peer_round(o, test, j, "go", go.bin, NULL, timeout_s, round, &g, &g.procs);
			if (j->kind == JOB_HACKYSACK && g.procs > 0)
				go.gomaxprocs = g.procs;
		}
		if (go.state == 1 && both && go.gomaxprocs != 1)
			peer_round(o, test, j, "go", go.bin, one_p, timeout_s, round, &g1,
				   &g1.procs);
		if (bc.state == 1)
			peer_round(o, test, j, "boost", bc.bin, NULL, timeout_s, round, &b, &procs);
	}

	sh_bench_result *x = sh_bench_add(r, SUITE, test_names[test], "shoal", 0);
	set_params(x, test, j);
	if (sh.failed)
		sh_bench_fail(x, "%s", sh.err);
	else
		fill_result(x, test, j, &sh.all, sh.rss, 1);
	/* Go's faster setting first, as the baseline: shoal's ratio column is
	 * against it; the slower one is compared with it. */
	struct side *fast = &g, *slow = &g1;
	if (g1.all.reps > 0 && !g1.failed &&
	    (g.failed || g.all.reps == 0 || best_of(&g1.all) < best_of(&g.all)))
		fast = &g1, slow = &g;
	peer_row(r, test, j, "go", 1, go.state, go.why, fast);
	if (slow->all.reps > 0 || slow->failed)
		peer_row(r, test, j, "go", 0, go.state, go.why, slow);
	peer_row(r, test, j, "boost", 1, bc.state, BOOST_MISSING, &b);
	if (test == TEST_HACKYSACK)
		first_run_rows(r, j, &sh, fast, &b);
}

/* The floor row (see fl_job): best of REPS processes. Go has nothing to
 * set beside it, so it has no baseline row. */
static void run_stacks(const sh_bench_opts *o, sh_bench_report *r, uint32_t n)
{
	if (!FL_MEASURED) {
		sh_bench_result *x = sh_bench_add(r, SUITE, "stacks", "shoal", 0);
		sh_bench_param_num(x, "n", n);
		sh_bench_skip(x, "not measured under a sanitizer");
		return;
	}
	struct job j = {JOB_STACKS, n, 0};
	double t[REPS], first[REPS], resume[REPS];
	int reps = 0, failed = 0;
	size_t stack_size = 0;
	long peak = -1;
	char err[256] = "";
	for (int round = 0; round < REPS && !failed; round++) {
		struct job_out jo;
		long rss = -1;
		progress(o, TEST_STACKS, "shoal", &j);
		memset(&jo, 0, sizeof(jo));
		if (sh_bench_in_child(job_child, &j, &jo, sizeof(jo), o->quick ? 120 : 900, &rss,
				      err, sizeof(err)) != 0) {
			failed = 1;
			break;
		}
		t[reps] = loops_mean(jo.t);
		first[reps] = loops_mean(jo.first);
		resume[reps] = loops_mean(jo.resume);
		stack_size = jo.stack_size;
		peak = rss > peak ? rss : peak;
		reps++;
	}
	sh_bench_result *x = sh_bench_add(r, SUITE, "stacks", "shoal", 0);
	sh_bench_param_num(x, "n", n);
	if (failed) {
		sh_bench_fail(x, "%s", err);
		return;
	}
	sh_bench_param_num(x, "stack_kib", (double)(stack_size / 1024));
	int b = 0;
	for (int i = 1; i < reps; i++)
		b = t[i] < t[b] ? i : b;
	sh_bench_metric_set(x, "best_s", t[b]);
	sh_bench_metric_set(x, "ns_first_run", first[b] / n * 1e9);
	sh_bench_metric_set(x, "ns_resume", resume[b] / n * 1e9);
	sh_bench_metric_set(x, "peak_rss_kib", (double)peak);
	x->peak_rss_kib = (double)peak;
	sh_bench_show_samples(x, t, reps, "s");
}

static void suite_notes(sh_bench_report *r)
{
	sh_bench_note(
		r,
		"min (best) is the best of %d repeats of %d loops, as the seed's timeit -n %d "
		"reports: a repeat's figure is the mean of its loops, and each repeat runs in "
		"its own process after an untimed warm-up run (--quick: n=100000 runs 100000 "
		"turns, one repeat a side, shown as a value); shoal's, Go's and boost's "
		"processes take turns so all see the same machine; peak RSS is the largest "
		"ru_maxrss of those processes (pss_kib in --json: Pss when the last kick "
		"lands in the warm-up run, every sacker alive).",
		REPS, LOOPS, LOOPS);
	sh_bench_note(
		r, "stacks: the floor under hackysack n=10000: each of its n+1 stacks (the "
		   "scheduler's own pool, size and guard page) entered to a first frame "
		   "and resumed once more to finish, with the fiber layer's context switch, "
		   "stacks prefetched ahead as the scheduler does, and nothing else (no scheduler, "
		   "channel or fiber structure). Every sacker needs at least these two "
		   "visits, each to stack lines that have left the caches.");
	if (bc.state == 1)
		sh_bench_note(
			r, "boost: bench/peer/hackysack_boost.c, the same benchmark as a C program "
			   "on boost.context's fcontext with only what it needs: a FIFO run queue, "
			   "a direct switch, channels inside the sackers' array, 64 KiB stacks "
			   "without guard pages reused LIFO, their tops offset as shoal's are; "
			   "single-threaded.");
	if (go.state == 1 && go.gomaxprocs > 0)
		sh_bench_note(r,
			      "go: %s, hackysack and hop run with GOMAXPROCS=1 and with its "
			      "default here (%d); the faster of the two, per case, is the baseline "
			      "shoal is compared with, the slower is shown against it. switch: "
			      "GOMAXPROCS=1 (a handoff on one thread, as on one shoal scheduler).",
			      go.version[0] ? go.version : "version unknown", go.gomaxprocs);
	sh_bench_note(r,
		      "hackysack_first_run: the untimed warm-up run of each repeat's process "
		      "(best, mean, max of the %d processes): the first spawn of n fibers in a "
		      "fresh process, which makes its stacks and touches its pages; a user's "
		      "first run pays it.",
		      REPS);
}

int sh_bench_fibers(const sh_bench_opts *o, sh_bench_report *r)
{
	static const struct {
		uint32_t n;
		uint64_t turns;
	} cases[] = {{10000, 1000}, {1000, 1000}, {10000, 100000}, {100000, 1000000}};
	/* --quick: the 100 000-fiber case (the memory goal) with 100 000
	 * kicks, not 1 000 000, in one process a side (run_case): its peak
	 * RSS is the fibers', whatever the kicks, and the full case alone took
	 * over a minute on each side. */
	go_prepare(o);
	boost_prepare();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct job j = {JOB_HACKYSACK, cases[i].n, cases[i].turns};
		if (o->quick && j.n == 100000)
			j.turns = 100000;
		run_case(o, r, TEST_HACKYSACK, &j);
	}
	run_stacks(o, r, cases[0].n + 1);
	struct job hop = {JOB_HACKYSACK, 100, o->quick ? 1000000 : 10000000};
	run_case(o, r, TEST_HOP, &hop);
	uint64_t switches = o->quick ? 1000000 : 10000000;
	struct job yield = {JOB_SWITCH_YIELD, 0, switches};
	struct job chan = {JOB_SWITCH_CHAN, 0, switches};
	run_case(o, r, TEST_SWITCH, &yield);
	run_case(o, r, TEST_SWITCH, &chan);
	if (o->progress)
		fprintf(stderr, "\r\033[K");
	suite_notes(r);
	go_cleanup();
	boost_cleanup();
	return 0;
}

int sh_bench_hackysack_case(const sh_bench_opts *o, sh_bench_report *r, uint32_t n, uint64_t turns)
{
	go_prepare(o);
	boost_prepare();
	struct job j = {JOB_HACKYSACK, n, turns};
	run_case(o, r, TEST_HACKYSACK, &j);
	if (o->progress)
		fprintf(stderr, "\r\033[K");
	suite_notes(r);
	go_cleanup();
	boost_cleanup();
	return 0;
}

/* ---- table and plot --------------------------------------------------------- */

/* The successful row of implementation `who` ("shoal", "go", "boost"). */
static const sh_bench_result *find(const sh_bench_report *r, const char *test, const char *who,
				   const char *pname, const char *pval)
{
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) != 0 || strcmp(x->test, test) != 0 ||
		    strcmp(x->label, who) != 0 || x->status != SH_BENCH_OK)
			continue;
		const char *v = sh_bench_param_get(x, pname);
		if (v && strcmp(v, pval) == 0)
			return x;
	}
	return NULL;
}

static const sh_bench_result *find_hs(const sh_bench_report *r, const char *who, const char *n,
				      const char *turns)
{
	for (size_t i = 0; i < r->n; i++) {
		const sh_bench_result *x = &r->res[i];
		if (strcmp(x->suite, SUITE) == 0 && strcmp(x->test, "hackysack") == 0 &&
		    strcmp(x->label, who) == 0 && x->status == SH_BENCH_OK && x->nparams == 2 &&
		    strcmp(x->params[0].text, n) == 0 && strcmp(x->params[1].text, turns) == 0)
			return x;
	}
	return NULL;
}

static const char *met(int ok)
{
	return ok ? "met" : "NOT met";
}

void sh_bench_fibers_table(FILE *f, const sh_bench_report *r)
{
	char title[256];
	snprintf(title, sizeof(title),
		 "shoal bench fibers: hackysack (Stackless seed), hop and switch costs, "
		 "shoal fibers vs %s goroutines and a C program on boost.context",
		 go.version[0] ? go.version : "Go");
	sh_bench_print_table(f, r, SUITE, title);

	/* The goals of the issue, checked against this run's own baseline. */
	char sum[1024];
	size_t k = (size_t)snprintf(sum, sizeof(sum), "summary:");
	const sh_bench_result *s = find_hs(r, "shoal", "10000", "1000"),
			      *g = find_hs(r, "go", "10000", "1000"),
			      *b = find_hs(r, "boost", "10000", "1000");
	if (s && g)
		k += (size_t)snprintf(
			sum + k, sizeof(sum) - k,
			" hackysack 10000x1000 best %.2f ms (mean %.2f ms), %.1fx faster than go's "
			"best %.2f ms (mean %.2f ms) (goal >= 6x: %s);",
			s->cmp_value * 1e3, s->mean * 1e3, g->cmp_value / s->cmp_value,
			g->cmp_value * 1e3, g->mean * 1e3, met(g->cmp_value >= 6 * s->cmp_value));
	/* The issue set 6x from Go at 12-25 ms and a C program on
	 * boost.context at about 2 ms: how far apart those two are here. */
	if (s && b && k < sizeof(sum)) {
		char vs_go[64] = "";
		if (g)
			snprintf(vs_go, sizeof(vs_go), ", itself %.1fx faster than go",
				 g->cmp_value / b->cmp_value);
		k += (size_t)snprintf(
			sum + k, sizeof(sum) - k,
			" boost.context best %.2f ms (mean %.2f ms; shoal %.2fx its speed)%s;",
			b->cmp_value * 1e3, b->mean * 1e3, b->cmp_value / s->cmp_value, vs_go);
	}
	const sh_bench_result *fl = find(r, "stacks", "shoal", "n", "10001");
	if (fl && g && k < sizeof(sum))
		k += (size_t)snprintf(sum + k, sizeof(sum) - k,
				      " its floor (two visits to each stack) %.2f ms, where 6x "
				      "go allows %.2f ms in all;",
				      sh_bench_metric_get(fl, "best_s", 0) * 1e3,
				      g->cmp_value / 6 * 1e3);
	s = find(r, "hop", "shoal", "n", "100");
	g = find(r, "hop", "go", "n", "100");
	if (s && g && k < sizeof(sum))
		k += (size_t)snprintf(
			sum + k, sizeof(sum) - k,
			" hop best %.1f ns (mean %.1f) vs go %.1f ns (mean %.1f), %.1fx "
			"cheaper (goal >= 10x: %s);",
			s->cmp_value, s->mean, g->cmp_value, g->mean, g->cmp_value / s->cmp_value,
			met(g->cmp_value >= 10 * s->cmp_value));
	s = find(r, "hackysack", "shoal", "n", "100000");
	g = find(r, "hackysack", "go", "n", "100000");
	if (s && k < sizeof(sum)) {
		double mb = s->peak_rss_kib * 1024 / 1e6;
		k += (size_t)snprintf(sum + k, sizeof(sum) - k,
				      " 100000 fibers peak RSS %.0f MB (goal < 500 MB: %s", mb,
				      met(mb < 500));
		if (g && k < sizeof(sum))
			k += (size_t)snprintf(sum + k, sizeof(sum) - k, "; go %.0f MB",
					      g->peak_rss_kib * 1024 / 1e6);
		if (k < sizeof(sum))
			k += (size_t)snprintf(sum + k, sizeof(sum) - k, ");");
	}
	s = find(r, "switch", "shoal", "variant", "yield");
	if (s && k < sizeof(sum))
		k += (size_t)snprintf(sum + k, sizeof(sum) - k,
				      " switch best %.1f ns (mean %.1f) (yield)", s->cmp_value,
				      s->mean);
	s = find(r, "switch", "shoal", "variant", "chan");
	if (s && k < sizeof(sum))
		k += (size_t)snprintf(sum + k, sizeof(sum) - k, ", %.1f ns (mean %.1f) (chan)",
				      s->cmp_value, s->mean);
	if (k == strlen("summary:")) {
		/* None of the cases ran (a custom case): plain ratios. */
		for (size_t i = 0; i < r->n && k < sizeof(sum); i++) {
			const sh_bench_result *x = &r->res[i];
			char vs[96];
			if (strcmp(x->suite, SUITE) != 0 || strcmp(x->label, "shoal") != 0 ||
			    x->status != SH_BENCH_OK)
				continue;
			sh_bench_fmt_vs(vs, sizeof(vs), r, x);
			if (vs[0])
				k += (size_t)snprintf(sum + k, sizeof(sum) - k,
						      " %s %s=%s %s=%s %s;", x->test,
						      x->params[0].name, x->params[0].text,
						      x->nparams > 1 ? x->params[1].name : "",
						      x->nparams > 1 ? x->params[1].text : "", vs);
		}
	}
	if (bc.last_state == -1 && k < sizeof(sum))
		k += (size_t)snprintf(sum + k, sizeof(sum) - k,
				      " (boost.context baseline skipped)");
	if (go.last_state == -1 && k < sizeof(sum))
		snprintf(sum + k, sizeof(sum) - k,
			 " (go baseline skipped: goals against go not checked)");
	else if (go.last_state == -2 && k < sizeof(sum))
		snprintf(sum + k, sizeof(sum) - k,
			 " (go baseline failed: goals against go not checked)");
	fprintf(f, "\n%s\n", sum);
}

void sh_bench_fibers_plot(FILE *f, const sh_bench_report *r)
{
	int y = sh_bench_svg_begin(f, 760, 600, "hackysack: shoal fibers vs Go goroutines");
	y += sh_bench_svg_bars(f, r, SUITE, "hackysack", "best_s", 1e3,
			       "time of one run, best of 3 repeats (ms)", 0, y, 760, 280);
	sh_bench_svg_bars(f, r, SUITE, "hackysack", "peak_rss_kib", 1024 / 1e6,
			  "peak resident memory of the process (MB)", 0, y + 10, 760, 280);
	sh_bench_svg_end(f);
}

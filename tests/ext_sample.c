/* A test extension: arithmetic, echo, errors, crashes of each kind, sleeps,
 * and probes of its own process (environment, descriptors, limits). */
#include <shoal/ext.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int shoal_ext_init(shoal_ext_registry *r);

static int int_arg(const shoal_value *a, uint32_t i, int64_t *v)
{
	if (!a || a->type != SHOAL_V_ARRAY || i >= a->n || a->v.items[i].type != SHOAL_V_INT)
		return -1;
	*v = a->v.items[i].v.i;
	return 0;
}

static int add(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t x, y;
	if (int_arg(a, 0, &x) || int_arg(a, 1, &y))
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "add: expected [int, int]");
	*out = shoal_v_int(shoal_ext_vbuf(ctx), x + y);
	return 0;
}

static int echo(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	*out = (shoal_value *)a; /* lives until the reply is sent */
	return 0;
}

static int fail(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)out;
	return shoal_ext_fail(ctx, SHOAL_ERANGE, "bad input: %s",
			      a && a->type == SHOAL_V_STR ? a->v.s : "?");
}

static int crash(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	(void)a;
	(void)out;
	raise(SIGSEGV);
	return 0;
}

static int do_abort(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	(void)a;
	(void)out;
	abort();
}

static int do_exit(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	(void)out;
	_exit(a && a->type == SHOAL_V_INT ? (int)a->v.i : 7);
}

/* Calls of sleep this process ran: what a test asks an engine (naps). */
static _Atomic uint64_t n_naps;

static int nap(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	(void)out;
	n_naps++;
	int64_t ms = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	return 0;
}

static int naps(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	*out = shoal_v_int(shoal_ext_vbuf(ctx), (int64_t)n_naps);
	return 0;
}

/* Works (sleeps) until asked to give up, for at most 10 s. */
static int patient(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	(void)out;
	for (int i = 0; i < 10000 && !shoal_ext_cancelled(ctx); i++) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return shoal_ext_fail(ctx, SHOAL_ECANCELED, "gave up");
}

static int alloc(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t mb = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	void *p = malloc((size_t)mb << 20);
	if (!p)
		return shoal_ext_fail(ctx, SHOAL_ENOMEM, "malloc of %lld MiB failed",
				      (long long)mb);
	memset(p, 1, (size_t)mb << 20);
	free(p);
	*out = shoal_v_bool(shoal_ext_vbuf(ctx), true);
	return 0;
}

static int env(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	const char *v = a && a->type == SHOAL_V_STR ? getenv(a->v.s) : NULL;
	*out = v ? shoal_v_cstr(shoal_ext_vbuf(ctx), v) : shoal_v_nil(shoal_ext_vbuf(ctx));
	return 0;
}

static int cwd(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	char b[4096];
	(void)a;
	*out = shoal_v_cstr(shoal_ext_vbuf(ctx), getcwd(b, sizeof(b)) ? b : "?");
	return 0;
}

static int fds(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	DIR *d = opendir("/proc/self/fd");
	int64_t n = -1; /* the DIR's own descriptor */
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	*out = shoal_v_int(shoal_ext_vbuf(ctx), n - 2); /* minus . and .. */
	return 0;
}

static int open_many(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t want = a && a->type == SHOAL_V_INT ? a->v.i : 0, got = 0;
	int fd[256];
	while (got < want && got < 256 && (fd[got] = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0)
		got++;
	for (int64_t i = 0; i < got; i++)
		close(fd[i]);
	*out = shoal_v_int(shoal_ext_vbuf(ctx), got);
	return 0;
}

/* make_tensor(n): f32 [n] with element i = i. */
static int make_tensor(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t n = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	shoal_value *bytes = shoal_v_bytes(vb, NULL, 0);
	float *f = malloc((size_t)n * sizeof(float) + 1);
	if (!f || !bytes)
		return shoal_ext_fail(ctx, SHOAL_ENOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++)
		f[i] = (float)i;
	bytes = shoal_v_bytes(vb, f, (size_t)n * sizeof(float)); /* the vbuf keeps the bytes */
	free(f);
	*out = bytes ? shoal_v_tensor(vb, SHOAL_DT_F32, 1, &n, bytes->v.bytes) : NULL;
	return *out ? 0 : SHOAL_ENOMEM;
}

/* Returns a string that is not UTF-8: what a broken or hostile extension
 * might send; the host must refuse it and go on. */
/* A string that is not UTF-8: two bytes, or with an int n, n bytes
 * (large enough to go out of band) whose last is wrong. */
static int bad_utf8(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	if (!a || a->type != SHOAL_V_INT || a->v.i < 2) {
		*out = shoal_v_str(shoal_ext_vbuf(ctx), "\xff\xfe", 2);
		return 0;
	}
	size_t n = (size_t)a->v.i;
	char *s = malloc(n);
	if (!s)
		return SHOAL_ENOMEM;
	memset(s, 'a', n);
	s[n - 1] = (char)0xff;
	*out = shoal_v_str(shoal_ext_vbuf(ctx), s, n);
	free(s);
	return 0;
}

/* Tries what a strict sandbox forbids; returns 0 or the errno. */
static int tcp(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	*out = shoal_v_int(shoal_ext_vbuf(ctx), fd >= 0 ? 0 : errno);
	if (fd >= 0)
		close(fd);
	return 0;
}

static int trace_host(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	pid_t host = a && a->type == SHOAL_V_INT ? (pid_t)a->v.i : getppid();
	long rc = ptrace(PTRACE_ATTACH, host, NULL, NULL);
	*out = shoal_v_int(shoal_ext_vbuf(ctx), rc == 0 ? 0 : errno);
	if (rc == 0)
		ptrace(PTRACE_DETACH, host, NULL, NULL);
	return 0;
}

/* crash_once(path): the first caller (anywhere: the mark is a file)
 * crashes; later ones return 1. */
static int crash_once(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	if (!a || a->type != SHOAL_V_STR)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "crash_once: expected a path");
	int fd = open(a->v.s, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		raise(SIGSEGV);
	}
	*out = shoal_v_int(shoal_ext_vbuf(ctx), 1);
	return 0;
}

/* hog(n): takes n MiB and writes every page of it. */
static int hog(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t mib = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	for (int64_t i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p)
			return shoal_ext_fail(ctx, SHOAL_ENOMEM, "hog: no memory after %lld MiB",
					      (long long)i);
		memset(p, 1, 1 << 20);
	}
	*out = shoal_v_int(shoal_ext_vbuf(ctx), mib);
	return 0;
}

/* [its pid, 0 or the errno of signal 0 to the pid in args]: what it sees
 * of the process tree. */
static int pids(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	int rc = a && a->type == SHOAL_V_INT ? kill((pid_t)a->v.i, 0) : -1;
	*out = shoal_v_array(vb, 2);
	shoal_v_set(*out, 0, shoal_v_int(vb, getpid()));
	shoal_v_set(*out, 1, shoal_v_int(vb, rc == 0 ? 0 : errno));
	return 0;
}

/* nested(d): the host's test.down(d), which calls nested(d - 1) back;
 * 0 at the bottom. Returns the depth reached. */
static int nested(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t d = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	if (d <= 0) {
		*out = shoal_v_int(shoal_ext_vbuf(ctx), 0);
		return 0;
	}
	const shoal_value *r;
	int rc = shoal_ext_call_host(ctx, "test.down", shoal_v_int(shoal_ext_vbuf(ctx), d), &r);
	if (rc)
		return rc; /* the message is the context's already */
	*out = shoal_v_int(shoal_ext_vbuf(ctx), r->type == SHOAL_V_INT ? r->v.i + 1 : -1000);
	return 0;
}

/* Calls the host method named by args[0] with args[1] and returns its
 * result. */
static int call_host(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	if (!a || a->type != SHOAL_V_ARRAY || a->n != 2 || a->v.items[0].type != SHOAL_V_STR)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "expected [method, args]");
	const shoal_value *r;
	int rc = shoal_ext_call_host(ctx, a->v.items[0].v.s, &a->v.items[1], &r);
	if (rc)
		return rc;
	*out = (shoal_value *)r;
	return 0;
}

int shoal_ext_init(shoal_ext_registry *r)
{
	const char *why = getenv("EXT_SAMPLE_INIT");
	if (why && !strcmp(why, "fail"))
		return shoal_ext_init_fail(r, SHOAL_EACCES, "init refused: EXT_SAMPLE_INIT=fail");
	if (why && !strcmp(why, "crash"))
		raise(SIGSEGV);
	int rc = 0;
	rc |= shoal_ext_register(r, "add", add);
	rc |= shoal_ext_register(r, "echo", echo);
	rc |= shoal_ext_register(r, "fail", fail);
	rc |= shoal_ext_register(r, "crash", crash);
	rc |= shoal_ext_register(r, "abort", do_abort);
	rc |= shoal_ext_register(r, "exit", do_exit);
	rc |= shoal_ext_register(r, "sleep", nap);
	rc |= shoal_ext_register(r, "naps", naps);
	rc |= shoal_ext_register(r, "patient", patient);
	rc |= shoal_ext_register(r, "alloc", alloc);
	rc |= shoal_ext_register(r, "getenv", env);
	rc |= shoal_ext_register(r, "cwd", cwd);
	rc |= shoal_ext_register(r, "fds", fds);
	rc |= shoal_ext_register(r, "open_many", open_many);
	rc |= shoal_ext_register(r, "nested", nested);
	rc |= shoal_ext_register(r, "call_host", call_host);
	rc |= shoal_ext_register(r, "tcp", tcp);
	rc |= shoal_ext_register(r, "make_tensor", make_tensor);
	rc |= shoal_ext_register(r, "bad_utf8", bad_utf8);
	rc |= shoal_ext_register(r, "ptrace_host", trace_host);
	rc |= shoal_ext_register(r, "pids", pids);
	rc |= shoal_ext_register(r, "hog", hog);
	rc |= shoal_ext_register(r, "crash_once", crash_once);
	return rc;
}

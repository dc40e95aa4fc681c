/* The extension `shoal bench rpc` calls, and the library of the task
 * engines of `shoal bench tasks` and `cluster`: echo hands back what it
 * gets, as pyisolate's benchmark extensions do, so a call measures the
 * trip there and back; nop does nothing (an idle extension's one call, a
 * no-op task); nested and singleton call the host's singletons back; touch
 * reads every page of a tensor, as a reader holding it would. */
#include <shoal/ext.h>

int shoal_ext_init(shoal_ext_registry *r);

static int echo(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	*out = (shoal_value *)a;
	return 0;
}

static int nop(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	(void)a;
	(void)out;
	return 0;
}

/* nested(d): two calls of host singletons per level, as pyisolate's
 * nested tests: bench.ping, then bench.down(d), which calls nested(d - 1)
 * back. */
static int nested(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t d = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	if (d <= 0) {
		*out = shoal_v_int(vb, 0);
		return 0;
	}
	const shoal_value *r;
	int rc = shoal_ext_call_host(ctx, "bench.ping", NULL, &r);
	if (rc == 0)
		rc = shoal_ext_call_host(ctx, "bench.down", shoal_v_int(vb, d), &r);
	if (rc)
		return rc;
	*out = shoal_v_int(vb, r->type == SHOAL_V_INT ? r->v.i + 1 : -1);
	return 0;
}

/* singleton: one proxied call of a host singleton. */
static int singleton(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	const shoal_value *r;
	int rc = shoal_ext_call_host(ctx, "bench.ping", a, &r);
	if (rc == 0)
		*out = (shoal_value *)r;
	return rc;
}

/* touch(tensor): reads one byte of every page of it, as a reader would,
 * and returns their sum. */
static int touch(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	if (!a || a->type != SHOAL_V_TENSOR)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "touch: expected a tensor");
	const volatile unsigned char *p = a->v.t.data;
	int64_t sum = 0;
	for (size_t i = 0; i < a->v.t.nbytes; i += 4096)
		sum += p[i];
	*out = shoal_v_int(shoal_ext_vbuf(ctx), sum);
	return 0;
}

int shoal_ext_init(shoal_ext_registry *r)
{
	int rc = shoal_ext_register(r, "echo", echo);
	rc = rc ? rc : shoal_ext_register(r, "nop", nop);
	rc = rc ? rc : shoal_ext_register(r, "nested", nested);
	rc = rc ? rc : shoal_ext_register(r, "touch", touch);
	return rc ? rc : shoal_ext_register(r, "singleton", singleton);
}

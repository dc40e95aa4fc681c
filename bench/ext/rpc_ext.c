/* The extension `shoal bench rpc` calls: functions that hand back what
 * they get, as pyisolate's benchmark extensions do, so a call measures the
 * trip there and back. */
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

int shoal_ext_init(shoal_ext_registry *r)
{
	int rc = shoal_ext_register(r, "echo", echo);
	return rc ? rc : shoal_ext_register(r, "nop", nop);
}

/* The functions task engines run (shoal-engine --so farm_funcs.so): an
 * engine loads them as the extension runner loads an extension.
 *
 *   cc -shared -fPIC farm_funcs.c -o farm_funcs.so $(pkg-config --cflags shoal)
 */
#include <shoal/ext.h>

/* square(n): n * n. */
static int square(shoal_ext_ctx *ctx, const shoal_value *args, shoal_value **result)
{
	if (!args || args->type != SHOAL_V_INT)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "square takes an int");
	int64_t n = args->v.i;
	if (n > 3037000499 || n < -3037000499)
		return shoal_ext_fail(ctx, SHOAL_ERANGE, "%lld squared overflows", (long long)n);
	*result = shoal_v_int(shoal_ext_vbuf(ctx), n * n);
	return 0;
}

int shoal_ext_init(shoal_ext_registry *r)
{
	return shoal_ext_register(r, "square", square);
}

/* An extension: functions that run in their own process (shoal-ext) and
 * that a host calls as if they were local (see ext_host.c). It links
 * nothing: the runner that loads it provides the shoal_ext_* functions.
 *
 *   cc -shared -fPIC ext_greet.c -o ext_greet.so $(pkg-config --cflags shoal)
 */
#include <shoal/ext.h>

#include <stdio.h>

/* greet([name, times]): "hello NAME" times times, as one string. */
static int greet(shoal_ext_ctx *ctx, const shoal_value *args, shoal_value **result)
{
	/* Arguments come as one value: here an array of a string and an int,
	 * checked before use (they are the host's, not ours). */
	if (!args || args->type != SHOAL_V_ARRAY || args->n != 2 ||
	    args->v.items[0].type != SHOAL_V_STR || args->v.items[1].type != SHOAL_V_INT)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "greet takes [name, times]");
	const shoal_value *name = &args->v.items[0];
	int64_t times = args->v.items[1].v.i;
	if (times < 1 || times > 100)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "times must be 1 to 100, not %lld",
				      (long long)times);
	char out[4096];
	size_t len = 0;
	for (int64_t i = 0; i < times && len < sizeof(out); i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%shello %.*s", i ? ", " : "",
					(int)name->n, name->v.s);
	if (len >= sizeof(out))
		return shoal_ext_fail(ctx, SHOAL_ERANGE, "the greeting is over %zu bytes",
				      sizeof(out) - 1);
	/* The result is built in the call's buffer, freed once it is sent. */
	*result = shoal_v_str(shoal_ext_vbuf(ctx), out, len);
	return 0;
}

int shoal_ext_init(shoal_ext_registry *r)
{
	return shoal_ext_register(r, "greet", greet);
}

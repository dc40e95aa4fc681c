/* Monotonic time for deadlines. clock_gettime goes through the vDSO, so
 * reading the clock costs no system call. */
#include "shoal_impl.h"

#include <time.h>

int64_t shoal_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t shoal_deadline_in(int64_t ns)
{
	if (ns < 0)
		return SHOAL_FOREVER;
	int64_t now = shoal_now_ns(), r;
	if (__builtin_add_overflow(now, ns, &r))
		return INT64_MAX;
	return r;
}

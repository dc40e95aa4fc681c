/* Leveled logging. The level is read from SHOAL_LOG once; each line goes out
 * in one write(2) so concurrent writers never interleave within a line. */
#include "shoal_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Atomic int level = -1;
static shoal_log_sink sink;
static void *sink_ctx;

static const char *names[] = {"error", "warn", "info", "debug", "trace"};

static int parse_level(const char *s)
{
	if (!s || !*s)
		return SHOAL_LOG_WARN;
	for (int i = 0; i < (int)SH_ARRAY_LEN(names); i++)
		if (strcasecmp(s, names[i]) == 0)
			return i;
	if (strcasecmp(s, "warning") == 0)
		return SHOAL_LOG_WARN;
	if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
		return s[0] - '0';
	return SHOAL_LOG_WARN;
}

shoal_log_level shoal_log_get_level(void)
{
	int l = atomic_load_explicit(&level, memory_order_relaxed);
	if (sh_unlikely(l < 0)) {
		l = parse_level(getenv("SHOAL_LOG"));
		atomic_store_explicit(&level, l, memory_order_relaxed);
	}
	return (shoal_log_level)l;
}

void shoal_log_set_level(shoal_log_level l)
{
	if ((int)l < 0)
		l = SHOAL_LOG_ERROR;
	if ((int)l > SHOAL_LOG_TRACE)
		l = SHOAL_LOG_TRACE;
	atomic_store_explicit(&level, (int)l, memory_order_relaxed);
}

void shoal_log_set_sink(shoal_log_sink s, void *ctx)
{
	sink = s;
	sink_ctx = ctx;
}

void shoal_vlog(shoal_log_level l, const char *component, const char *fmt, va_list ap)
{
	if ((int)l > (int)shoal_log_get_level())
		return;
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (!component)
		component = "shoal";
	if (sink) {
		sink(l, component, msg, sink_ctx);
		return;
	}
	char line[1200];
	int idx = (int)l < 0 ? 0 : ((int)l > SHOAL_LOG_TRACE ? SHOAL_LOG_TRACE : (int)l);
	int n = snprintf(line, sizeof(line), "shoal %s [%s] %s\n", names[idx], component, msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	sh_write_all(2, line, (size_t)n);
}

void shoal_log(shoal_log_level l, const char *component, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	shoal_vlog(l, component, fmt, ap);
	va_end(ap);
}

/* Fuzzes the readers of the task farm's batches: SUBMIT entries (what a
 * client, maybe hostile, sends the controller), DONE and RESULTS entries
 * (from engines and the controller) and RUN entries (what an engine gets).
 * Any bytes must be read as entries or refused; what is read must lie
 * within the input. */
#include "tasks/proto.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);

static void inside(const uint8_t *in, size_t n, const unsigned char *p, size_t len)
{
	if (p < in || p + len > in + n)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	sh_mp m;
	sh_mp_init(&m, in, n);
	sh_tk_submit t;
	while (sh_tk_read_submit(&m, &t) == 0) {
		if (t.call)
			inside(in, n, t.call, t.call_len);
		else if (t.call_len < SH_TASKS_REF_MIN || t.call_len > SH_TASKS_MSG_MAX)
			abort(); /* out of band: only a count the controller can take */
		uint64_t id;
		for (uint32_t i = 0; i < t.nafter; i++)
			if (sh_mp_uint(&t.after, &id))
				abort(); /* the reader said they were ids */
		for (uint32_t i = 0; i < t.nfollow; i++)
			if (sh_mp_uint(&t.follow, &id))
				abort();
	}
	sh_mp_init(&m, in, n);
	uint64_t id;
	int32_t status;
	const unsigned char *raw;
	size_t len;
	while (sh_tk_read_result(&m, &id, &status, &raw, &len) == 0) {
		inside(in, n, raw, len);
		if (status > 0)
			abort();
	}
	sh_mp_init(&m, in, n);
	sh_tk_run run;
	while (sh_tk_read_run(&m, &run) == 0) {
		if (run.fn)
			inside(in, n, (const unsigned char *)run.fn, run.fn_len);
		else if (run.oob == 0 || run.oob > SH_TASKS_MSG_MAX)
			abort();
		if (run.fn && sh_mp_skip(&m))
			break;
	}
	return 0;
}

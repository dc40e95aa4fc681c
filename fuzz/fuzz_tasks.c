/* Fuzzes the readers of the task farm's batches: SUBMIT entries (what a
 * client, maybe hostile, sends the controller), DONE and RESULTS entries
 * (from engines and the controller) and RUN entries (what an engine gets).
 * Any bytes must be read as entries or refused; what is read must lie
 * within the input.
 *
 * Seeds: batches of entries of each kind laid out as farm.c (SUBMIT),
 * engine.c (DONE) and controller.c (RESULTS, RUN) pack them, with their
 * arguments and results packed by the value encoder; each is read back by
 * its reader before it is kept. */
#include "rpc/value.h"
#include "tasks/proto.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

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

/* ---- seeds ---------------------------------------------------------------- */

enum { K_SUBMIT, K_RESULT, K_RUN };

static shoal_vbuf *tk_vb;
static shoal_value *tk_args[6];

/* The arguments of task i: nil, an int, a string, a tensor, a map, an
 * array of all of them. */
static void tk_make_args(void)
{
	static float w[64];
	static const int64_t shape[] = {8, 8};
	for (int i = 0; i < 64; i++)
		w[i] = (float)i * 0.5f;
	if (shoal_vbuf_create(&tk_vb))
		seed_die("out of memory", "vbuf");
	tk_args[0] = shoal_v_nil(tk_vb);
	tk_args[1] = shoal_v_int(tk_vb, 41);
	tk_args[2] = shoal_v_cstr(tk_vb, "caf\xc3\xa9");
	tk_args[3] = shoal_v_tensor(tk_vb, SHOAL_DT_F32, 2, shape, w);
	tk_args[4] = shoal_v_map(tk_vb, 2);
	shoal_v_map_set(tk_args[4], 0, shoal_v_cstr(tk_vb, "x"), tk_args[1]);
	shoal_v_map_set(tk_args[4], 1, shoal_v_cstr(tk_vb, "w"), tk_args[3]);
	tk_args[5] = shoal_v_array(tk_vb, 5);
	for (uint32_t i = 0; i < 5; i++)
		shoal_v_set(tk_args[5], i, tk_args[i]);
}

/* farm.c's pack_opts: timeout, retries, engine, after, follow. */
static void tk_opts(msgpack_packer *pk, uint32_t i)
{
	msgpack_pack_int64(pk, i % 2 ? 0 : (int64_t)i * 1000000000);
	msgpack_pack_uint32(pk, i % 3);
	msgpack_pack_int32(pk, i % 4 == 3 ? (int32_t)i : -1);
	msgpack_pack_array(pk, i % 3 == 2 ? 2 : 0);
	if (i % 3 == 2) {
		msgpack_pack_uint64(pk, i - 1);
		msgpack_pack_uint64(pk, i - 2);
	}
	msgpack_pack_array(pk, i % 5 == 4 ? 1 : 0);
	if (i % 5 == 4)
		msgpack_pack_uint64(pk, i - 1);
}

/* Entry i of a batch of kind k; large: the out-of-band form. */
static void tk_entry(msgpack_packer *pk, int k, uint32_t i, bool large)
{
	const shoal_value *args = tk_args[i % 6];
	uint64_t id = 1 + i;
	switch (k) {
	case K_SUBMIT:
		msgpack_pack_array(pk, large ? 7 : 8);
		msgpack_pack_uint64(pk, id);
		if (large) {
			msgpack_pack_uint64(pk, SH_TASKS_REF_MIN + i);
		} else {
			sh_mp_pack_cstr(pk, i % 2 ? "mod.fn" : "add");
			sh_value_pack(pk, args, NULL, NULL);
		}
		tk_opts(pk, i);
		break;
	case K_RESULT:
		msgpack_pack_array(pk, 3);
		msgpack_pack_uint64(pk, id);
		if (i % 4 == 3) { /* a failure, with its message */
			msgpack_pack_int32(pk, i % 8 == 3 ? SHOAL_EENGINE : SHOAL_ETIMEDOUT);
			sh_mp_pack_cstr(pk, "task 4: engine 2 died");
		} else {
			msgpack_pack_int32(pk, 0);
			msgpack_pack_array(pk, 2);
			sh_value_pack(pk, args, NULL, NULL);
			msgpack_pack_array(pk, i % 4);
			for (uint32_t j = 0; j < i % 4; j++)
				msgpack_pack_uint64(pk, 0x40895d0000000001ull + j);
		}
		break;
	case K_RUN:
		msgpack_pack_array(pk, large ? 3 : 4);
		msgpack_pack_uint64(pk, id << 8);
		msgpack_pack_uint64(pk, i % 2 ? 0 : 0x1234567890abcdefull);
		if (large) {
			msgpack_pack_uint64(pk, SH_TASKS_REF_MIN + i);
		} else {
			sh_mp_pack_cstr(pk, i % 2 ? "mod.fn" : "add");
			sh_value_pack(pk, args, NULL, NULL);
		}
		break;
	}
}

/* How many entries of kind k the readers take from the n bytes at p. */
static uint32_t tk_count(int k, const unsigned char *p, size_t n)
{
	sh_mp m;
	sh_mp_init(&m, p, n);
	uint32_t got = 0;
	sh_tk_submit t;
	sh_tk_run r;
	uint64_t id;
	int32_t st;
	const unsigned char *raw;
	size_t len;
	for (;;) {
		if (k == K_SUBMIT   ? sh_tk_read_submit(&m, &t)
		    : k == K_RESULT ? sh_tk_read_result(&m, &id, &st, &raw, &len)
				    : sh_tk_read_run(&m, &r))
			break;
		got++;
		if (k == K_RUN && r.fn && sh_mp_skip(&m))
			break;
	}
	return sh_mp_left(&m) ? 0 : got;
}

/* A batch's entries (the body after its array header, as the readers
 * take them): n entries of kind k starting with entry first; every
 * large-th one (0: none) in the out-of-band form. */
static void tk_seed(const char *name, int k, uint32_t first, uint32_t n, uint32_t large)
{
	sh_wbuf w;
	sh_wbuf_init(&w);
	msgpack_packer pk;
	sh_wbuf_packer(&w, &pk);
	for (uint32_t i = first; i < first + n; i++)
		tk_entry(&pk, k, i, large && i % large == large - 1);
	if (w.err || tk_count(k, w.p, w.len) != n)
		seed_die("the reader does not take it back", name);
	seed_write(name, w.p, w.len);
	sh_wbuf_fini(&w);
}

static void tk_seeds(void)
{
	tk_make_args();
	static const char *kinds[] = {"submit", "result", "run"};
	char name[64];
	for (int k = 0; k < 3; k++) {
		for (uint32_t i = 0; i < 6; i++) {
			snprintf(name, sizeof(name), "%s-one-%u", kinds[k], i);
			tk_seed(name, k, i, 1, 0);
		}
		snprintf(name, sizeof(name), "%s-batch-8", kinds[k]);
		tk_seed(name, k, 0, 8, 0);
		snprintf(name, sizeof(name), "%s-batch-64", kinds[k]);
		tk_seed(name, k, 3, 64, 0);
		if (k != K_RESULT) {
			snprintf(name, sizeof(name), "%s-large", kinds[k]);
			tk_seed(name, k, 0, 1, 1);
			snprintf(name, sizeof(name), "%s-mixed-large", kinds[k]);
			tk_seed(name, k, 0, 12, 4);
		}
	}
	shoal_vbuf_free(tk_vb);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_tasks", tk_seeds);
	return 0;
}

/* Fuzzes what a store reads back from etcd about a name
 * (src/cluster/registry_record.c, sh_reg_parse_record): a record's JSON, written by
 * whoever may write etcd's keys. What parses must be signed under the
 * cluster's secret and be the name asked for: the fuzzer cannot forge a
 * record that is accepted, only ones refused with a reason (and none may
 * crash the store). A record is accepted only when the fuzzer's input
 * keeps a signed seed's signed fields as they were.
 *
 * Input: the record's bytes; the name asked for is "model".
 *
 * Seeds: records made by the registry's own writer (sh_reg_record) for
 * "model" and another name, a forged mac, fields missing or of the wrong
 * kind, a name that needs escaping. */
#include "net/ossl.h"
#include "cluster/cluster.h"

#include "seed.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const unsigned char key[] = "a fuzzing cluster secret, long enough";

static int parse(const uint8_t *in, size_t n)
{
	char *rec = malloc(n + 1), why[600];
	if (!rec)
		return 0;
	memcpy(rec, in, n);
	rec[n] = 0;
	sh_reg_job j = {0};
	int rc = sh_reg_parse_record(key, sizeof(key) - 1, rec, "model", 5, &j, why, sizeof(why));
	if (rc > 0 || (rc && !why[0]))
		abort(); /* a refusal says why */
	if (rc == 0 && (!j.got_record || !j.got_id || !j.peer[0]))
		abort();
	free(rec);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
	parse(in, n);
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static void seed_text(const char *name, const char *text, int want)
{
	int rc = parse((const uint8_t *)text, strlen(text));
	if ((rc == 0) != (want == 0) || (want && rc != want))
		seed_die("not read back as meant", name);
	seed_write(name, text, strlen(text));
}

static void seed_record(const char *seed, const char *name, int want)
{
	sh_reg_job j = {.name = name,
			.nl = strlen(name),
			.id = 0x40895d0000000001ull,
			.sig = 0x40895d0000000001ull,
			.bytes = 1u << 20};
	snprintf(j.type, sizeof(j.type), "tensor_dict");
	memset(j.meta, 0xab, sizeof(j.meta));
	char *rec = sh_reg_record(key, sizeof(key) - 1, &j, "10.0.0.7:7000");
	if (!rec)
		seed_die("the writer failed", seed);
	seed_text(seed, rec, want);
	free(rec);
}

static void registry_seeds(void)
{
	char why[200];
	if (sh_ossl_load(false, why, sizeof(why)) != 0)
		seed_die(why, "libcrypto");
	seed_record("signed", "model", 0);
	seed_record("signed-another-name", "spare", SHOAL_EPERM);
	seed_text("forged-mac",
		  "{\"peer\":\"10.0.0.7:7000\",\"id\":\"40895d0000000001\",\"sig\":"
		  "\"40895d0000000001\",\"type\":\"bytes\",\"bytes\":5,\"name\":\"model\",\"meta\":"
		  "\"abababababababababababababababababababababababababababababababab\",\"mac\":"
		  "\"0000000000000000000000000000000000000000000000000000000000000000\"}",
		  SHOAL_EPERM);
	seed_text("fields-missing", "{\"peer\":\"10.0.0.7:7000\",\"id\":\"40895d0000000001\"}",
		  SHOAL_EPROTO);
	seed_text("wrong-kinds",
		  "{\"peer\":7,\"id\":[],\"sig\":{},\"type\":null,\"bytes\":\"5\",\"name\":1}",
		  SHOAL_EPROTO);
	seed_text("not-json", "peer=10.0.0.7", SHOAL_EPROTO);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	seed_main("fuzz_registry_record", registry_seeds);
	return 0;
}

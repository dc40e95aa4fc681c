/* A name's record in the cluster's registry: the JSON etcd keeps under
 * names/ and ids/, signed with HMAC-SHA256 under the cluster's secret
 * (sh_reg_record), and read back, signature and name checked, from what
 * etcd gives (sh_reg_parse_record: outside bytes; fuzz_registry_record). */
#include "cluster/cluster.h"
#include "cluster/etcd.h"
#include "net/ossl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void hex32(const unsigned char *d, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

/* The MAC of a name's record: HMAC-SHA256 under the cluster's secret of
 * every field but itself, in a fixed order; 64 hex digits into out. */
static int record_mac(const unsigned char *key, size_t klen, const char *name, size_t nl,
		      const char *peer, uint64_t id, uint64_t sig, const char *type, uint64_t bytes,
		      const char *meta, char *out)
{
	size_t cap = nl + strlen(peer) + strlen(type) + strlen(meta) + 200;
	char *buf = malloc(cap);
	if (!buf)
		return SHOAL_ENOMEM;
	int n = snprintf(buf, cap,
			 "shoal-registry-record-1\n%.*s\n%s\n%016" PRIx64 "\n%016" PRIx64
			 "\n%s\n%" PRIu64 "\n%s",
			 (int)nl, name, peer, id, sig, type, bytes, meta);
	unsigned char d[32];
	char why[200];
	int rc = n < 0 || (size_t)n >= cap ? SHOAL_EINVAL : sh_ossl_load(false, why, sizeof(why));
	if (rc == 0)
		rc = sh_hmac_sha256(key, klen, buf, (size_t)n, d);
	free(buf);
	if (rc == 0)
		hex32(d, out);
	return rc;
}

char *sh_reg_record(const unsigned char *key, size_t klen, const sh_reg_job *j, const char *peer)
{
	char idh[17], sigh[17], meta[65], mac[65];
	snprintf(idh, sizeof(idh), "%016" PRIx64, j->id);
	snprintf(sigh, sizeof(sigh), "%016" PRIx64, j->sig);
	hex32(j->meta, meta);
	if (record_mac(key, klen, j->name, j->nl, peer, j->id, j->sig, j->type, j->bytes, meta,
		       mac) != 0)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	char *name = strndup(j->name, j->nl), *out = NULL;
	if (o && name && cJSON_AddStringToObject(o, "peer", peer) &&
	    cJSON_AddStringToObject(o, "id", idh) && cJSON_AddStringToObject(o, "sig", sigh) &&
	    cJSON_AddStringToObject(o, "type", j->type) &&
	    cJSON_AddNumberToObject(o, "bytes", (double)j->bytes) &&
	    cJSON_AddStringToObject(o, "name", name) && cJSON_AddStringToObject(o, "meta", meta) &&
	    cJSON_AddStringToObject(o, "mac", mac))
		out = cJSON_PrintUnformatted(o);
	free(name);
	cJSON_Delete(o);
	return out;
}

static bool unhex32(const char *h, unsigned char *out)
{
	if (!h || strlen(h) != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return false;
		out[i] = (unsigned char)v;
	}
	return true;
}

static const char *str_of(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int sh_reg_parse_record(const unsigned char *key, size_t klen, const char *rec, const char *name,
			size_t nl, sh_reg_job *j, char *why, size_t whylen)
{
	cJSON *o = cJSON_Parse(rec);
	const char *peer = str_of(o, "peer"), *id = str_of(o, "id"), *sig = str_of(o, "sig"),
		   *type = str_of(o, "type"), *rname = str_of(o, "name"), *meta = str_of(o, "meta"),
		   *mac = str_of(o, "mac");
	const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(o, "bytes");
	int rc = SHOAL_EPROTO;
	snprintf(why, whylen, "a record in etcd that is not a shoal name's: %.200s", rec);
	if (peer && strlen(peer) < sizeof(j->peer) && id && sig && type &&
	    strlen(type) < sizeof(j->got_type) && rname && strlen(rname) <= SH_NODE_MAX_NAME &&
	    meta && strlen(meta) == 64 && mac && strlen(mac) == 64 && cJSON_IsNumber(bytes) &&
	    bytes->valuedouble >= 0 && bytes->valuedouble < 9007199254740992.0 /* 2^53 */ &&
	    bytes->valuedouble == (double)(uint64_t)bytes->valuedouble) {
		char want[65];
		uint64_t gid = strtoull(id, NULL, 16), gsig = strtoull(sig, NULL, 16),
			 gbytes = (uint64_t)bytes->valuedouble;
		if ((rc = record_mac(key, klen, rname, strlen(rname), peer, gid, gsig, type, gbytes,
				     meta, want)) != 0) {
			snprintf(why, whylen, "checking a record's signature: %s",
				 shoal_strerror(rc));
		} else if (CRYPTO_memcmp(want, mac, 64) != 0 || !unhex32(meta, j->got_meta) ||
			   gid == 0) {
			rc = SHOAL_EPERM;
			snprintf(why, whylen,
				 "the registry's record of %.200s is not signed with this "
				 "cluster's secret: refused",
				 rname);
		} else if (name && (strlen(rname) != nl || memcmp(rname, name, nl) != 0)) {
			rc = SHOAL_EPERM;
			snprintf(why, whylen,
				 "the registry's record for %.*s names %.200s: refused", (int)nl,
				 name, rname);
		} else {
			snprintf(j->peer, sizeof(j->peer), "%s", peer);
			snprintf(j->got_type, sizeof(j->got_type), "%s", type);
			j->got_id = gid;
			j->got_sig = gsig;
			j->got_bytes = gbytes;
			j->got_record = true;
			why[0] = 0;
			rc = 0;
		}
	}
	cJSON_Delete(o);
	return rc;
}

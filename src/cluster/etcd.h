/* A client of etcd's HTTP/JSON gateway (etcd.c): the cluster's registry
 * speaks to etcd through it. */
#ifndef SHOAL_CLUSTER_ETCD_H
#define SHOAL_CLUSTER_ETCD_H

#include "shoal_impl.h"

#include <cjson/cJSON.h>

typedef struct sh_etcd sh_etcd;

/* A client of the etcd cluster at "HOST:PORT[,HOST:PORT...]" (nothing is
 * sent yet). SHOAL_ENOSYS when libcurl cannot be loaded. */
int sh_etcd_open(const char *endpoints, sh_etcd **out, char *why, size_t whylen);
void sh_etcd_close(sh_etcd *e);
/* The endpoint spoken to last ("HOST:PORT"). */
const char *sh_etcd_endpoint(const sh_etcd *e);
/* POSTs req to path ("/v3/kv/range", ...) and parses the answer into *out
 * (the caller deletes it), trying each endpoint until deadline. Fails with
 * SHOAL_ECONNREFUSED or SHOAL_ETIMEDOUT when no endpoint answers,
 * SHOAL_ENOENT when etcd says "not found" (a lease), SHOAL_EIO or
 * SHOAL_EPROTO for other answers; why names etcd and says what. */
int sh_etcd_call(sh_etcd *e, const char *path, cJSON *req, int64_t deadline, cJSON **out, char *why,
		 size_t whylen);
/* Opens a watch (req: {"create_request": ...}) and calls line with each
 * message of its stream until the stream ends, line returns nonzero, or
 * *stop becomes nonzero (then SHOAL_ECANCELED). */
int sh_etcd_watch(sh_etcd *e, cJSON *req, _Atomic int *stop, int (*line)(void *arg, cJSON *msg),
		  void *arg, char *why, size_t whylen);

/* base64 (RFC 4648, padded), malloc'd; decode NUL-terminates too. */
char *sh_b64_encode(const void *p, size_t n);
int sh_b64_decode(const char *s, unsigned char **out, size_t *n);
/* o[key] = base64 of n bytes at p. */
int sh_json_b64(cJSON *o, const char *key, const void *p, size_t n);
/* o[key] as an unsigned int64 (a string, as etcd sends them), or 0. */
uint64_t sh_json_u64(const cJSON *o, const char *key);

#endif

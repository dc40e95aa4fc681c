/* A client of etcd 3.4's HTTP/JSON gateway (/v3/...), over libcurl: the
 * calls the cluster's registry needs (put, range, delete, a transaction,
 * leases, a watch), every one with a deadline, and the endpoints of the
 * cluster tried in turn. Keys and values travel in base64, int64s as
 * strings (proto3's JSON mapping). libcurl is loaded at the first use, not
 * linked: every program of the library would otherwise load it and its
 * dozen libraries at start (an extension's start included), though only a
 * store with --meta etcd speaks to etcd. Not thread-safe: one sh_etcd per
 * thread. */
#include "cluster/etcd.h"

/* the functions are called through pointers: no type-checking macros */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CURL_FNS(X)          \
	X(curl_global_init)  \
	X(curl_easy_init)    \
	X(curl_easy_setopt)  \
	X(curl_easy_perform) \
	X(curl_easy_getinfo) \
	X(curl_easy_cleanup) \
	X(curl_easy_strerror)

static struct {
#define X(f) __typeof__(f) *f;
	CURL_FNS(X)
#undef X
} K;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_err[200];

#define X(f) {#f, (void **)&K.f},
static const sh_dl_sym curl_syms[] = {CURL_FNS(X)};
#undef X

static void curl_load(void)
{
	sh_dl_load("libcurl.so.4", curl_syms, sizeof(curl_syms) / sizeof(curl_syms[0]), NULL,
		   curl_err, sizeof(curl_err));
	if (!curl_err[0] && K.curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		snprintf(curl_err, sizeof(curl_err), "curl_global_init failed");
}

struct sh_etcd {
	char **eps; /* "http://HOST:PORT" */
	size_t neps, cur;
	CURL *h;
	char *body;
	size_t len, cap;
	bool oom;
	/* a watch: called per line of the stream; nonzero stops it */
	int (*line)(void *arg, cJSON *msg);
	void *line_arg;
	_Atomic int *stop;
	bool halt; /* line said stop */
	size_t line_at;
};

/* ---- base64 ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *sh_b64_encode(const void *p, size_t n)
{
	const unsigned char *s = p;
	char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? s[i + 2] : 0);
		*q++ = b64[v >> 18 & 63];
		*q++ = b64[v >> 12 & 63];
		*q++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
		*q++ = i + 2 < n ? b64[v & 63] : '=';
	}
	*q = 0;
	return o;
}

int sh_b64_decode(const char *s, unsigned char **out, size_t *n)
{
	size_t len = strlen(s);
	unsigned char *o = malloc(len / 4 * 3 + 3);
	if (!o)
		return SHOAL_ENOMEM;
	uint32_t v = 0;
	int bits = 0;
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		const char *c = s[i] == '=' ? NULL : strchr(b64, s[i]);
		if (s[i] == '=')
			break;
		if (!c || !s[i]) {
			free(o);
			return SHOAL_EBADMSG;
		}
		v = v << 6 | (uint32_t)(c - b64);
		if ((bits += 6) >= 8) {
			bits -= 8;
			o[k++] = (unsigned char)(v >> bits);
		}
	}
	o[k] = 0;
	*out = o;
	*n = k;
	return 0;
}

/* ---- the client ---- */

int sh_etcd_open(const char *endpoints, sh_etcd **out, char *why, size_t whylen)
{
	pthread_once(&curl_once, curl_load);
	if (curl_err[0]) {
		snprintf(why, whylen, "etcd needs libcurl (libcurl4): %s", curl_err);
		return SHOAL_ENOSYS;
	}
	sh_etcd *e = calloc(1, sizeof(*e));
	if (!e || !(e->h = K.curl_easy_init())) {
		free(e);
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	/* "HOST:PORT[,HOST:PORT...]" */
	for (const char *p = endpoints; *p;) {
		const char *c = strchr(p, ',');
		size_t n = c ? (size_t)(c - p) : strlen(p);
		if (n == 0 || n > 200 || !memchr(p, ':', n)) {
			snprintf(why, whylen, "etcd endpoint '%.*s': expected HOST:PORT",
				 (int)(n > 200 ? 200 : n), p);
			sh_etcd_close(e);
			return SHOAL_EINVAL;
		}
		char **v = realloc(e->eps, (e->neps + 1) * sizeof(*v));
		if (!v || !(v[e->neps] = malloc(n + 8))) {
			if (v)
				e->eps = v;
			sh_etcd_close(e);
			return SHOAL_ENOMEM;
		}
		e->eps = v;
		snprintf(e->eps[e->neps++], n + 8, "http://%.*s", (int)n, p);
		p += n + (c ? 1 : 0);
	}
	if (!e->neps) {
		snprintf(why, whylen, "no etcd endpoint: expected HOST:PORT[,HOST:PORT...]");
		sh_etcd_close(e);
		return SHOAL_EINVAL;
	}
	*out = e;
	return 0;
}

void sh_etcd_close(sh_etcd *e)
{
	if (!e)
		return;
	if (e->h)
		K.curl_easy_cleanup(e->h);
	for (size_t i = 0; i < e->neps; i++)
		free(e->eps[i]);
	free(e->eps);
	free(e->body);
	free(e);
}

const char *sh_etcd_endpoint(const sh_etcd *e)
{
	return e->eps[e->cur] + 7; /* past "http://" */
}

/* What the last line of a stream (a watch) says, one JSON object a line. */
static void stream_lines(sh_etcd *e)
{
	for (;;) {
		char *nl = memchr(e->body + e->line_at, '\n', e->len - e->line_at);
		if (!nl)
			break;
		*nl = 0;
		cJSON *m = cJSON_Parse(e->body + e->line_at);
		int stop = m ? e->line(e->line_arg, m) : 0;
		cJSON_Delete(m);
		e->line_at = (size_t)(nl - e->body) + 1;
		if (stop)
			e->halt = true;
	}
	if (e->line_at == e->len)
		e->len = e->line_at = 0;
}

static size_t on_data(char *p, size_t sz, size_t n, void *arg)
{
	sh_etcd *e = arg;
	size_t k = sz * n;
	/* an answer or a line larger than this is not etcd's */
	if (e->len + k + 1 > (64u << 20)) {
		e->oom = true;
		return 0;
	}
	if (e->len + k + 1 > e->cap) {
		size_t nc = e->cap ? e->cap : 4096;
		while (nc < e->len + k + 1)
			nc *= 2;
		char *q = realloc(e->body, nc);
		if (!q) {
			e->oom = true;
			return 0;
		}
		e->body = q;
		e->cap = nc;
	}
	memcpy(e->body + e->len, p, k);
	e->len += k;
	e->body[e->len] = 0;
	if (e->line)
		stream_lines(e);
	return k;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	sh_etcd *e = arg;
	(void)a, (void)b, (void)c, (void)d;
	return e->halt || (e->stop && atomic_load(e->stop)); /* nonzero aborts */
}

/* POSTs body to path at one endpoint until deadline (SHOAL_FOREVER: no
 * bound; then only *stop ends it). */
static int post(sh_etcd *e, const char *path, const char *body, int64_t deadline, char *why,
		size_t whylen)
{
	char url[320];
	snprintf(url, sizeof(url), "%s%s", e->eps[e->cur], path);
	e->len = e->line_at = 0;
	e->oom = false;
	CURL *h = e->h;
	K.curl_easy_setopt(h, CURLOPT_URL, url);
	K.curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	K.curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	K.curl_easy_setopt(h, CURLOPT_WRITEDATA, e);
	K.curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	K.curl_easy_setopt(h, CURLOPT_NOPROXY, "*"); /* etcd is never behind a proxy of ours */
	K.curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	K.curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	K.curl_easy_setopt(h, CURLOPT_XFERINFODATA, e);
	K.curl_easy_setopt(h, CURLOPT_NOPROGRESS, e->stop ? 0L : 1L);
	long ms = 0;
	if (deadline != SHOAL_FOREVER) {
		int64_t left = deadline - shoal_now_ns();
		ms = left > 1000000 ? (long)(left / 1000000) : 1;
	}
	K.curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
	K.curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms && ms < 2000 ? ms : 2000L);
	CURLcode cc = K.curl_easy_perform(h);
	long status = 0;
	K.curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (cc != CURLE_OK) {
		snprintf(why, whylen, "etcd at %s: %s", sh_etcd_endpoint(e),
			 e->oom ? "an answer too large" : K.curl_easy_strerror(cc));
		return cc == CURLE_OPERATION_TIMEDOUT	 ? SHOAL_ETIMEDOUT
		       : cc == CURLE_ABORTED_BY_CALLBACK ? SHOAL_ECANCELED
							 : SHOAL_ECONNREFUSED;
	}
	if (status != 200) {
		snprintf(why, whylen, "etcd at %s answered HTTP %ld: %.200s", sh_etcd_endpoint(e),
			 status, e->body ? e->body : "");
		return SHOAL_EIO;
	}
	return 0;
}

int sh_etcd_call(sh_etcd *e, const char *path, cJSON *req, int64_t deadline, cJSON **out, char *why,
		 size_t whylen)
{
	*out = NULL;
	char *body = cJSON_PrintUnformatted(req);
	if (!body) {
		snprintf(why, whylen, "out of memory");
		return SHOAL_ENOMEM;
	}
	int rc = SHOAL_ECONNREFUSED;
	/* each endpoint in turn, from the one that answered last */
	for (size_t i = 0; i < e->neps; i++) {
		rc = post(e, path, body, deadline, why, whylen);
		if (rc != SHOAL_ECONNREFUSED && rc != SHOAL_ETIMEDOUT)
			break;
		if (deadline != SHOAL_FOREVER && shoal_now_ns() >= deadline)
			break;
		e->cur = (e->cur + 1) % e->neps;
	}
	free(body);
	if (rc)
		return rc;
	cJSON *m = cJSON_Parse(e->body ? e->body : "");
	if (!m || !cJSON_IsObject(m)) {
		cJSON_Delete(m);
		snprintf(why, whylen, "etcd at %s: an answer that is not JSON",
			 sh_etcd_endpoint(e));
		return SHOAL_EPROTO;
	}
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(m, "error");
	if (cJSON_IsString(err)) {
		snprintf(why, whylen, "etcd at %s: %.200s", sh_etcd_endpoint(e), err->valuestring);
		bool gone = strstr(err->valuestring, "not found") != NULL;
		cJSON_Delete(m);
		return gone ? SHOAL_ENOENT : SHOAL_EIO;
	}
	*out = m;
	return 0;
}

int sh_etcd_watch(sh_etcd *e, cJSON *req, _Atomic int *stop, int (*line)(void *arg, cJSON *msg),
		  void *arg, char *why, size_t whylen)
{
	char *body = cJSON_PrintUnformatted(req);
	if (!body)
		return SHOAL_ENOMEM;
	e->line = line;
	e->line_arg = arg;
	e->stop = stop;
	e->halt = false;
	int rc = post(e, "/v3/watch", body, SHOAL_FOREVER, why, whylen);
	if (rc == SHOAL_ECONNREFUSED)
		e->cur = (e->cur + 1) % e->neps;
	e->line = NULL;
	e->stop = NULL;
	free(body);
	return rc;
}

/* ---- JSON helpers ---- */

int sh_json_b64(cJSON *o, const char *key, const void *p, size_t n)
{
	char *s = sh_b64_encode(p, n);
	bool ok = s && cJSON_AddStringToObject(o, key, s);
	free(s);
	return ok ? 0 : SHOAL_ENOMEM;
}

uint64_t sh_json_u64(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (cJSON_IsString(v))
		return strtoull(v->valuestring, NULL, 10);
	if (cJSON_IsNumber(v) && v->valuedouble > 0)
		return (uint64_t)v->valuedouble;
	return 0;
}

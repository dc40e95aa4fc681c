/* The host's services, which an extension calls back while a call of
 * ours waits for its reply (shoal_service_register): one registry for the
 * process, and serving one such call, whose method may call the extension
 * again (calls nest). */
#include "rpc/ext_host.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- services: one registry for the process ---- */

typedef struct service {
	char *method;
	shoal_service_fn fn;
	void *self;
} service;

static pthread_mutex_t services_lock = PTHREAD_MUTEX_INITIALIZER;
static service *services;
static size_t nservices, cap_services;

int shoal_service_register(const char *method, shoal_service_fn fn, void *self)
{
	if (!method || !*method || !fn)
		return SHOAL_EINVAL;
	int rc = 0;
	pthread_mutex_lock(&services_lock);
	for (size_t i = 0; i < nservices && rc == 0; i++)
		if (strcmp(services[i].method, method) == 0)
			rc = SHOAL_EEXIST;
	if (rc == 0 && nservices == cap_services) {
		size_t nc = cap_services ? cap_services * 2 : 16;
		service *p = shoal_realloc(services, cap_services * sizeof(*p), nc * sizeof(*p));
		if (p) {
			services = p;
			cap_services = nc;
		} else {
			rc = SHOAL_ENOMEM;
		}
	}
	if (rc == 0) {
		size_t l = strlen(method) + 1;
		char *m = shoal_alloc(l);
		if (m) {
			memcpy(m, method, l);
			services[nservices++] = (service){m, fn, self};
		} else {
			rc = SHOAL_ENOMEM;
		}
	}
	pthread_mutex_unlock(&services_lock);
	return rc;
}

int shoal_service_unregister(const char *method)
{
	int rc = SHOAL_ENOENT;
	pthread_mutex_lock(&services_lock);
	for (size_t i = 0; i < nservices; i++)
		if (strcmp(services[i].method, method) == 0) {
			shoal_free(services[i].method, strlen(services[i].method) + 1);
			services[i] = services[--nservices];
			rc = 0;
			break;
		}
	if (nservices == 0 && services) {
		shoal_free(services, cap_services * sizeof(*services));
		services = NULL;
		cap_services = 0;
	}
	pthread_mutex_unlock(&services_lock);
	return rc;
}

static bool service_find(const char *method, uint32_t len, shoal_service_fn *fn, void **self)
{
	bool found = false;
	pthread_mutex_lock(&services_lock);
	for (size_t i = 0; i < nservices && !found; i++)
		if (strlen(services[i].method) == len &&
		    memcmp(services[i].method, method, len) == 0) {
			*fn = services[i].fn;
			*self = services[i].self;
			found = true;
		}
	pthread_mutex_unlock(&services_lock);
	return found;
}

/* Runs the service call in e->in and sends its return. Nonzero only when
 * the extension must go (the rings failed, it broke the protocol, or the
 * bytes that follow its call did not come by the waiting call's
 * deadline). */
int sh_ext_serve(shoal_ext *e, const sh_frame *f, int64_t deadline)
{
	shoal_vbuf *vin = NULL, *vout = NULL;
	char msg[SH_EXT_MSG_MAX] = "";
	const char *method = "";
	uint32_t ml = 0, n;
	shoal_value *args = NULL, *result = NULL;
	int status = shoal_vbuf_create(&vin);
	if (status == 0)
		status = shoal_vbuf_create(&vout);
	bool shared = f->flags & SH_FRAME_SHARED;
	if (status == 0)
		vin->store = vout->store = e->store;
	sh_mp m;
	sh_mp_init(&m, e->in + SH_FRAME_HDR, f->body_len);
	sh_oob_reset(&e->oob, f->oob);
	if (status == 0 && (sh_mp_array(&m, &n) || n != 2 || sh_mp_str(&m, &method, &ml) || !ml)) {
		status = SHOAL_EBADMSG;
		snprintf(msg, sizeof(msg), "expected a call [method, args]");
	}
	/* Copied out: a nested call reuses e->in. */
	char mname[256];
	snprintf(mname, sizeof(mname), "%.*s", (int)(ml < 255 ? ml : 255), method);
	if (status == 0 &&
	    (status = sh_value_decode(&m, vin, &e->oob, &args, msg, sizeof(msg))) == 0 &&
	    sh_mp_done(&m) != 0) {
		status = SHOAL_EBADMSG;
		snprintf(msg, sizeof(msg), "bytes after the arguments");
	}
	/* What follows the frame is read (or dropped) before anything else:
	 * the method may call the extension back. */
	int rc = status == 0 ? sh_oob_read(&e->oob, &e->rep, deadline, msg, sizeof(msg))
			     : sh_oob_discard(&e->oob, &e->rep, deadline);
	if (rc && (rc != SHOAL_EBADMSG || status == 0)) {
		shoal_vbuf_free(vin);
		shoal_vbuf_free(vout);
		return sh_err_set(e, SHOAL_EPROTO, "%s: its call of %s: %s", e->name, mname,
				  rc == SHOAL_EBADMSG ? msg : shoal_strerror(rc));
	}
	shoal_service_fn fn = NULL;
	void *self = NULL;
	if (status == 0 && !service_find(mname, (uint32_t)strlen(mname), &fn, &self)) {
		status = SHOAL_ENOENT;
		snprintf(msg, sizeof(msg), "the host has no service method %s", mname);
	}
	uint32_t gen = e->starts;
	if (status == 0) {
		status = fn(self, args, vout, &result, msg, sizeof(msg));
		if (status > 0)
			status = SHOAL_EIO;
		if (status == 0 && shared && result)
			status = sh_value_share(vout, result, msg, sizeof(msg));
		if (status && !msg[0])
			snprintf(msg, sizeof(msg), "%s: %s", mname, shoal_strerror(status));
	}
	/* The service may have called the extension back, and that call
	 * found it out of step and killed it (or it died, or was started
	 * again): its rings are unmapped or another process's, and this
	 * return has no caller left. The failure is that call's, said by it. */
	if (e->dead || e->starts != gen) {
		shoal_vbuf_free(vin);
		shoal_vbuf_free(vout);
		return SHOAL_ECRASHED;
	}
	sh_wbuf_frame_begin(&e->out);
	msgpack_packer pk;
	sh_wbuf_packer(&e->out, &pk);
	msgpack_pack_array(&pk, 1);
	shoal_value nil = {.type = SHOAL_V_NIL};
	if (status == 0)
		sh_value_pack(&pk, result ? result : &nil, shared ? e->store : NULL, &e->out);
	else
		sh_mp_pack_cstr(&pk, msg);
	sh_frame r = {.op = SH_EXT_OP_RETURN,
		      .seq = f->seq,
		      .status = status,
		      .flags = shared ? SH_FRAME_SHARED : 0};
	rc = sh_wbuf_frame_end(&e->out, &r);
	if (rc == 0 && e->out.len > SH_MSG_MAX) {
		sh_wbuf_frame_begin(&e->out);
		msgpack_pack_array(&pk, 1);
		sh_mp_pack_cstr(&pk, "the service's result is larger than a message can be");
		r = (sh_frame){.op = SH_EXT_OP_RETURN, .seq = f->seq, .status = SHOAL_EMSGSIZE};
		rc = sh_wbuf_frame_end(&e->out, &r);
	}
	if (rc == 0)
		rc = sh_frame_send(&e->req, &e->out, SHOAL_FOREVER);
	shoal_vbuf_free(vin);
	shoal_vbuf_free(vout);
	if (rc)
		sh_err_set(e, rc, "%s: answering its call of %s: %s", e->name, mname,
			   shoal_strerror(rc));
	return rc;
}

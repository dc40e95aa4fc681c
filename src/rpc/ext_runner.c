/* The extension side: what shoal-ext runs (its command line is
 * tools/lib/ext_runner.c), and a Python extension's python3 with the
 * module's functions built in (cfg->init). It puts itself in its sandbox
 * (sandbox.c: limits, a cgroup, basic's session and no new privileges,
 * strict's namespaces, uid of its own and filter), loads the extension,
 * reports ready (or why not), then serves calls from the ring, and passes
 * on the calls of host services they make, nested, until told to stop or
 * the host goes (it dies with the host: PR_SET_PDEATHSIG). Nothing here
 * trusts the host more than any peer: frames and values are validated
 * the same way. */
#include "ring/ring.h"
#include "rpc/ext_lib.h"
#include "rpc/sandbox.h"
#include "ring/msg.h"
#include "shm/shm.h"

#include <shoal/ext.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

static void ready(int status, const char *fmt, ...) SHOAL_PRINTF(2, 3);
static void ready(int status, const char *fmt, ...)
{
	sh_ext_ready m = {.magic = SH_EXT_READY_MAGIC, .status = status};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m.msg, sizeof(m.msg), fmt, ap);
	va_end(ap);
	if (sh_fd_send(SH_EXT_FD_SOCK, &m, sizeof(m), NULL, 0) != 0)
		_exit(3); /* the host is gone */
}

/* Calls nest both ways (host -> ext -> host -> ext ...): each level of
 * nesting has its own buffers, and a level waiting for a host's return
 * serves the host's calls that arrive meanwhile, on the same stack. */
#define MAX_DEPTH 128

typedef struct level {
	shoal_vbuf in, out; /* the call's arguments, its result */
	sh_wbuf w;
	unsigned char *copy; /* the last frame read at this level */
	size_t copy_cap;
	sh_oob oob; /* where its payloads out of band go */
} level;

typedef struct runner {
	const sh_ext_lib *lib;
	sh_ring *req, *rep;
	shoal_client *store;	  /* for shared payloads, when the host gave one */
	_Atomic uint32_t *cancel; /* shared with the host (ext_proto.h) */
	level lv[MAX_DEPTH + 1];
	uint32_t seq;
	bool stop;
} runner;

/* Reads the next frame from the host into level L. */
static int next_frame(runner *R, level *L, sh_frame *f, size_t *len, char *why, size_t wl)
{
	int rc = sh_msg_read(R->req, &L->copy, &L->copy_cap, len, SHOAL_FOREVER);
	return rc ? rc : sh_frame_decode(L->copy, *len, f, why, wl);
}

/* Memory the levels keep for the next payload of their size, beyond
 * which an idle extension gives it back. */
#define IDLE_KEEP ((size_t)64 << 20)
#define IDLE_AFTER_NS 1000000000

static size_t kept_bytes(const runner *R)
{
	size_t n = 0;
	for (int i = 0; i <= MAX_DEPTH; i++)
		n += R->lv[i].in.a.total + R->lv[i].out.a.total;
	return n;
}

/* Waits for the host's next call at level 0: an extension that keeps
 * large buffers from its last calls gives them back after a second with
 * nothing to do. */
static int next_call(runner *R, sh_frame *f, size_t *len, char *why, size_t wl)
{
	level *L = &R->lv[0];
	size_t got = 0, total = 0;
	int rc = SHOAL_ETIMEDOUT;
	if (kept_bytes(R) > IDLE_KEEP) {
		rc = sh_msg_read_part(R->req, &L->copy, &L->copy_cap, &got, &total, SH_MSG_MAX,
				      shoal_deadline_in(IDLE_AFTER_NS));
		if (rc == SHOAL_ETIMEDOUT)
			for (int i = 0; i <= MAX_DEPTH; i++) {
				sh_bump_trim(&R->lv[i].in.a, IDLE_KEEP);
				sh_bump_trim(&R->lv[i].out.a, IDLE_KEEP);
			}
	}
	if (rc == SHOAL_ETIMEDOUT)
		rc = sh_msg_read_part(R->req, &L->copy, &L->copy_cap, &got, &total, SH_MSG_MAX,
				      SHOAL_FOREVER);
	*len = total;
	return rc ? rc : sh_frame_decode(L->copy, *len, f, why, wl);
}

static int send_frame(runner *R, sh_wbuf *w, sh_frame *f)
{
	int rc = sh_wbuf_frame_end(w, f);
	if (rc == 0 && w->len > SH_MSG_MAX)
		return SHOAL_EMSGSIZE;
	rc = rc ? rc : sh_frame_send(R->rep, w, SHOAL_FOREVER);
	if (w->cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(w);
	sh_wbuf_reset(w); /* its parts point into values that go now */
	return rc;
}

/* Runs the call whose frame is in level d and sends its return. Nonzero
 * only when the rings fail. */
static int handle_call(runner *R, int d, const sh_frame *f)
{
	level *L = &R->lv[d];
	char why[SH_EXT_MSG_MAX + 64] = "";
	shoal_ext_ctx ctx = {.runner = R, .depth = d, .seq = f->seq, .vb = &L->out};
	const shoal_value *args = NULL;
	shoal_value *result = NULL;
	const char *fname = "?";
	uint32_t fl = 1, n;
	int status = 0;
	/* The last call's shared arguments are let go once this call's are
	 * decoded: a tensor passed again keeps its segment mapped. */
	sh_vbuf_reset_keep(&L->in);
	shoal_vbuf_reset(&L->out);
	L->in.store = L->out.store = R->store;
	bool shared = f->flags & SH_FRAME_SHARED;
	sh_mp m;
	sh_mp_init(&m, L->copy + SH_FRAME_HDR, f->body_len);
	sh_oob_reset(&L->oob, f->oob);
	shoal_value *a;
	if (sh_mp_array(&m, &n) || n != 2 || sh_mp_str(&m, &fname, &fl) || fl == 0) {
		status = SHOAL_EBADMSG;
		snprintf(why, sizeof(why), "expected a call [function, args]");
	} else if ((status = sh_value_decode(&m, &L->in, &L->oob, &a, why, sizeof(why))) == 0 &&
		   sh_mp_done(&m) != 0) {
		status = SHOAL_EBADMSG;
		snprintf(why, sizeof(why), "bytes after the arguments");
	} else {
		args = a;
	}
	sh_vbuf_let_go(&L->in);
	/* The payloads out of band, or, after a bad body, past them. */
	int rc = status == 0 ? sh_oob_read(&L->oob, R->req, SHOAL_FOREVER, why, sizeof(why))
			     : sh_oob_discard(&L->oob, R->req, SHOAL_FOREVER);
	if (rc == SHOAL_EBADMSG && status == 0)
		status = rc; /* a string that is not UTF-8: answered */
	else if (rc && rc != SHOAL_EBADMSG)
		return rc;
	shoal_ext_fn fn = status == 0 ? sh_ext_lib_find(R->lib, fname, fl) : NULL;
	if (status == 0 && !fn) {
		status = SHOAL_ENOENT;
		snprintf(why, sizeof(why), "no function %.*s in this extension", (int)fl, fname);
	}
	if (status == 0) {
		status = fn(&ctx, args, &result);
		if (status > 0)
			status = SHOAL_EIO; /* a positive code is not one of ours */
		if (status == 0 && L->out.err)
			status = L->out.err;
		if (status == 0 && shared && result)
			status = sh_value_share(&L->out, result, ctx.msg, sizeof(ctx.msg));
		if (status)
			snprintf(why, sizeof(why), "%s",
				 ctx.msg[0] ? ctx.msg : shoal_strerror(status));
	}
	if (R->stop)
		return SHOAL_ECLOSED;
	sh_wbuf_frame_begin(&L->w);
	msgpack_packer pk;
	sh_wbuf_packer(&L->w, &pk);
	msgpack_pack_array(&pk, 1);
	if (status == 0) {
		shoal_value nil = {.type = SHOAL_V_NIL};
		sh_value_pack(&pk, result ? result : &nil, shared ? R->store : NULL, &L->w);
	} else {
		sh_mp_pack_cstr(&pk, why);
	}
	sh_frame r = {.op = SH_EXT_OP_RETURN,
		      .seq = f->seq,
		      .status = status,
		      .flags = shared ? SH_FRAME_SHARED : 0};
	rc = send_frame(R, &L->w, &r);
	if (rc == SHOAL_EMSGSIZE) {
		/* Too big for one record: say so instead. */
		size_t big = L->w.len;
		sh_wbuf_frame_begin(&L->w);
		msgpack_pack_array(&pk, 1);
		char m2[160];
		snprintf(m2, sizeof(m2), "result of %zu bytes exceeds the %zu a reply can carry",
			 big, SH_MSG_MAX);
		sh_mp_pack_cstr(&pk, m2);
		r = (sh_frame){.op = SH_EXT_OP_RETURN, .seq = f->seq, .status = SHOAL_EMSGSIZE};
		rc = send_frame(R, &L->w, &r);
	}
	sh_msg_trim(&L->copy, &L->copy_cap);
	return rc;
}

bool shoal_ext_cancelled(const shoal_ext_ctx *ctx)
{
	if (ctx->gone)
		return atomic_load_explicit(ctx->gone, memory_order_acquire) == ctx->task;
	const runner *R = ctx->runner;
	return R && atomic_load_explicit(R->cancel, memory_order_acquire) == ctx->seq;
}

shoal_client *shoal_ext_store(shoal_ext_ctx *ctx)
{
	runner *R = ctx ? ctx->runner : NULL;
	return R ? R->store : NULL;
}

int shoal_ext_call_host(shoal_ext_ctx *ctx, const char *method, const shoal_value *args,
			const shoal_value **result)
{
	if (!ctx || !method || !*method || !result)
		return SHOAL_EINVAL;
	runner *R = ctx->runner;
	if (!R)
		return shoal_ext_fail(ctx, SHOAL_ENOTSUP,
				      "%s: no host to call here (a task engine runs this)", method);
	int d = ctx->depth;
	if (d + 1 >= MAX_DEPTH)
		return shoal_ext_fail(ctx, SHOAL_ERANGE, "calls nested deeper than %d", MAX_DEPTH);
	level *L = &R->lv[d], *next = &R->lv[d + 1];
	/* This level's writer is free while its function runs. Calls to the
	 * host copy their payloads: a host service that wants a tensor shared
	 * can take it from the store itself. */
	sh_ext_pack_call(&L->w, method, args, NULL);
	sh_frame f = {.op = SH_EXT_OP_CALL, .seq = ++R->seq};
	int rc = send_frame(R, &L->w, &f);
	if (rc)
		return shoal_ext_fail(ctx, rc, "calling %s on the host: %s", method,
				      shoal_strerror(rc));
	for (;;) {
		sh_frame g;
		size_t len;
		char why[256] = "";
		rc = next_frame(R, next, &g, &len, why, sizeof(why));
		if (rc == 0 && g.op == SH_EXT_OP_STOP) {
			R->stop = true;
			rc = SHOAL_ECLOSED;
		}
		if (rc)
			return shoal_ext_fail(ctx, rc, "waiting for the host's %s: %s", method,
					      why[0] ? why : shoal_strerror(rc));
		if (g.op == SH_EXT_OP_CALL) {
			if ((rc = handle_call(R, d + 1, &g)) != 0)
				return shoal_ext_fail(ctx, rc, "serving the host: %s",
						      shoal_strerror(rc));
			continue;
		}
		if (g.op != SH_EXT_OP_RETURN || g.seq != f.seq)
			return shoal_ext_fail(ctx, SHOAL_EPROTO,
					      "the host answered %s with op %u seq %u", method,
					      g.op, g.seq);
		sh_mp m;
		uint32_t n;
		sh_mp_init(&m, next->copy + SH_FRAME_HDR, g.body_len);
		sh_oob_reset(&next->oob, g.oob);
		if (g.status != 0) {
			const char *msg = "";
			uint32_t ml = 0;
			if (sh_mp_array(&m, &n) || n != 1 || sh_mp_str(&m, &msg, &ml))
				msg = "(no message)", ml = 12;
			rc = shoal_ext_fail(ctx, g.status, "%.*s", (int)ml, msg);
			return sh_oob_discard(&next->oob, R->req, SHOAL_FOREVER) ? SHOAL_EPROTO
										 : rc;
		}
		shoal_value *v;
		/* The result lives with this call's own result buffer. */
		if (sh_mp_array(&m, &n) || n != 1 ||
		    (rc = sh_value_decode(&m, ctx->vb, &next->oob, &v, why, sizeof(why))) != 0 ||
		    sh_mp_done(&m) != 0) {
			rc = shoal_ext_fail(ctx, rc ? rc : SHOAL_EPROTO, "%s: malformed result: %s",
					    method, why);
			return sh_oob_discard(&next->oob, R->req, SHOAL_FOREVER) ? SHOAL_EPROTO
										 : rc;
		}
		if ((rc = sh_oob_read(&next->oob, R->req, SHOAL_FOREVER, why, sizeof(why))) != 0)
			return shoal_ext_fail(ctx, rc, "%s: result: %s", method, why);
		*result = v;
		return 0;
	}
}

/* Serves the host's calls until STOP or the end of the rings. */
static int serve(runner *R)
{
	for (;;) {
		sh_frame f;
		size_t len;
		char why[256] = "";
		int rc = next_call(R, &f, &len, why, sizeof(why));
		if (rc == SHOAL_ECLOSED || (rc == 0 && f.op == SH_EXT_OP_STOP))
			return 0;
		if (rc == 0 && f.op != SH_EXT_OP_CALL)
			rc = SHOAL_EPROTO;
		if (rc == 0)
			rc = handle_call(R, 0, &f);
		if (rc == SHOAL_ECLOSED && R->stop)
			return 0;
		if (rc) {
			fprintf(stderr, "shoal-ext: %s%s%s\n", shoal_strerror(rc),
				why[0] ? ": " : "", why);
			return rc;
		}
	}
}

static void runner_free(runner *R)
{
	for (int i = 0; i <= MAX_DEPTH; i++) {
		sh_bump_fini(&R->lv[i].in.a);
		sh_bump_fini(&R->lv[i].out.a);
		sh_wbuf_fini(&R->lv[i].w);
		sh_oob_fini(&R->lv[i].oob);
		if (R->lv[i].copy)
			shoal_free(R->lv[i].copy, R->lv[i].copy_cap);
	}
}

/* Restricts sc to its host's grant ($SHOAL_EXT_STORE_GRANT: the host's
 * connection's token, which the host sets for a strict extension). */
static int restrict_store(shoal_client *sc, char *why, size_t wl)
{
	const char *g = getenv("SHOAL_EXT_STORE_GRANT");
	char *end = NULL;
	uint64_t grant = g ? strtoull(g, &end, 16) : 0;
	if (!g || !*g || *end || !grant) {
		snprintf(why, wl,
			 "expected SHOAL_EXT_STORE_GRANT (16 hex digits) from its host, got %s",
			 g ? "something else" : "nothing");
		return SHOAL_EINVAL;
	}
	int rc = shoal_restrict(sc, grant);
	if (rc)
		snprintf(why, wl, "%s", shoal_client_error(sc));
	return rc;
}

/* The bytes of the library at so, read as this process's user, into a
 * sealed memfd (*fd) that any uid may open through /proc/self/fd. */
static int so_into_memfd(const char *so, int *fd, char *why, size_t wl)
{
	int in = open(so, O_RDONLY | O_CLOEXEC);
	struct stat st;
	int rc = in < 0 || fstat(in, &st) != 0 ? shoal_errno() : 0;
	if (rc) {
		snprintf(why, wl, "%s: %s", so, strerror(errno));
		if (in >= 0)
			close(in);
		return rc;
	}
	if (!S_ISREG(st.st_mode))
		rc = SHOAL_EINVAL;
	else if ((rc = sh_memfd_create("shoal-ext-so", (size_t)st.st_size, true, fd)) == 0 &&
		 (rc = sh_fd_copy(*fd, 0, in, 0, (uint64_t)st.st_size)) == 0)
		rc = sh_memfd_seal(*fd);
	close(in);
	if (rc)
		snprintf(why, wl, "%s: %s", so,
			 rc == SHOAL_EINVAL ? "not a regular file" : shoal_strerror(rc));
	return rc;
}

int sh_ext_runner_main(const sh_ext_runner_cfg *cfg)
{
	const char *so = cfg->so, *name = cfg->name ? cfg->name : "extension", *store = cfg->store,
		   *cgroup = cfg->cgroup;
	uint64_t mem = cfg->mem, cpu = cfg->cpu, files = cfg->files;
	bool basic = cfg->basic || cfg->strict, strict = cfg->strict, network = cfg->network;
	/* Die with the host; a basic sandbox also takes a session of its own
	 * and no new privileges, and keeps no descriptor but ours. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(3); /* the host died before we got here */
	if (basic) {
		setsid();
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		close_range(SH_EXT_FD_EFD + 1, ~0u, 0);
	}
	if (!so) {
		ready(SHOAL_EINVAL, "shoal-ext: --so PATH is required");
		return 2;
	}
	/* strict: the extension runs as a uid of its own, which may not read
	 * the file nor reach its directory (a build under a 0700 home); the
	 * host's user chose it, so it is read now and loaded from that copy
	 * once confined. */
	int so_fd = -1;
	if (strict && !cfg->init) {
		char why[SH_EXT_MSG_MAX - 64];
		int rc = so_into_memfd(so, &so_fd, why, sizeof(why));
		if (rc) {
			ready(rc, "%s: %s", name, why);
			return 1;
		}
	}
	int rc = 0;
	if (cgroup && (rc = sh_sb_join_cgroup(cgroup)) != 0) {
		ready(rc, "%s: joining its memory cgroup %s: %s", name, cgroup, shoal_strerror(rc));
		return 1;
	}
	if (!strict && !cgroup)
		sh_sb_own_tree(name);
	if ((mem && (rc = sh_sb_limit(RLIMIT_AS, mem))) ||
	    (cpu && (rc = sh_sb_limit(RLIMIT_CPU, cpu))) ||
	    (files && (rc = sh_sb_limit(RLIMIT_NOFILE, files)))) {
		ready(rc, "%s: setting limits: %s", name, shoal_strerror(rc));
		return 1;
	}
	size_t one, bytes;
	void *mem_rings = NULL;
	sh_ring req, rep;
	if ((rc = sh_ring_bytes(SH_EXT_RING_CAP, &one)) != 0 ||
	    (rc = sh_shm_map(SH_EXT_FD_RINGS, bytes = 2 * one + SH_EXT_CTRL_BYTES, true,
			     &mem_rings)) != 0 ||
	    (rc = sh_ring_attach(&req, mem_rings, one, false)) != 0 ||
	    (rc = sh_ring_attach(&rep, (char *)mem_rings + one, one, true)) != 0) {
		ready(SHOAL_EPROTO, "%s: attaching the rings: %s", name, shoal_strerror(rc));
		return 1;
	}
	close(SH_EXT_FD_RINGS);
	/* the host sleeps on its doorbell, for replies and for room for calls */
	rep.wake_efd = req.wake_efd = SH_EXT_FD_EFD;
	/* As long as the host waits for a reply: between two calls the host
	 * decodes a reply and encodes the next call (a shared tensor: ~10 us
	 * of Python), and a runner asleep by then costs each call a futex
	 * wake-up (~20 us here), not a spin. */
	req.spin_ns = 50000;
	/* strict, before the extension's code is loaded (its init is confined
	 * too): namespaces, then, in the extension's process, the store
	 * connection while it may still connect as us, then no privileges
	 * and the filter. */
	sh_sb_strict sb = {.network = network, .uid_lock = -1};
	char why[SH_EXT_MSG_MAX - 64];
	if (strict && ((rc = sh_sb_namespaces(&sb, why, sizeof(why))) != 0 ||
		       (rc = sh_sb_own_pids(&sb, why, sizeof(why))) != 0)) {
		ready(rc, "%s: %s", name, why);
		return 1;
	}
	shoal_client *sc = NULL;
	if (store && (rc = shoal_connect(&sc, store)) != 0) {
		ready(rc, "%s: no store at %s for shared payloads: %s", name, store,
		      shoal_strerror(rc));
		return 1;
	}
	/* strict: the connection reads what the host holds and makes objects
	 * of its own, nothing more (shoal_restrict), before the extension's
	 * code can use it */
	if (sc && strict && (rc = restrict_store(sc, why, sizeof(why))) != 0) {
		ready(rc, "%s: restricting its store connection: %s", name, why);
		return 1;
	}
	if (strict && ((rc = sh_sb_confine(&sb, why, sizeof(why))) != 0 ||
		       (rc = sh_sb_filter(network, why, sizeof(why))) != 0)) {
		ready(rc < 0 ? rc : SHOAL_EIO, "%s: %s", name, why);
		return 1;
	}
	sh_ext_lib lib = {0};
	if ((rc = cfg->init ? sh_ext_lib_init(&lib, cfg->init, why, sizeof(why))
			    : sh_ext_lib_load(&lib, so, so_fd, why, sizeof(why))) != 0) {
		ready(rc, "%s: %s", name, why);
		return 1;
	}
	if (so_fd >= 0)
		close(so_fd);
	runner *R = SH_NEW(runner);
	if (!R) {
		ready(SHOAL_ENOMEM, "%s: out of memory", name);
		return 1;
	}
	R->store = sc;
	R->cancel = (_Atomic uint32_t *)((char *)mem_rings + 2 * one);
	ready(0, "%zu functions", lib.reg.n);
	R->lib = &lib;
	R->req = &req;
	R->rep = &rep;
	rc = serve(R);
	runner_free(R);
	if (R->store)
		shoal_disconnect(R->store);
	SH_DELETE(R);
	if (rc)
		fprintf(stderr, "shoal-ext %s: %s\n", name, shoal_strerror(rc));
	sh_shm_unmap(mem_rings, bytes);
	sh_ext_lib_unload(&lib);
	return rc ? 1 : 0;
}

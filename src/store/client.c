/* Store clients: connecting (a link, with the set-up of proto.h) and the
 * round trip of a request over the rings. A client is one thread's: it
 * sleeps on the reply ring's futex, in slices, looking at the socket
 * between them to notice a dead store, until the connection's timeout; a
 * request whose caller was cancelled has its reply read and undone before
 * the next. What the requests are for lives beside it: client_get.c
 * (objects got, mapped and released), client_node.c (reading their
 * trees), client_ops.c (names and the store's other requests), builder.c
 * (creating objects). */
#include "store/client.h"
#include "ring/msg.h"
#include "shm/shm.h"

#include <inttypes.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#define REPLY_SPIN_NS 30000	    /* a store round trip is a few us when both spin */
#define LIVENESS_SLICE_NS 100000000 /* how often a sleeping client checks the socket */

const char *shoal_client_error(const shoal_client *c)
{
	return sh_err_get(c);
}

static void client_free(shoal_client *c)
{
	sh_cow_forget(c, UINT64_MAX);
	size_t it = 0;
	uint64_t k;
	void *v;
	while (sh_map_next(&c->segs, &it, &k, &v)) {
		sh_cseg *g = v;
		sh_shm_unmap(g->addr, g->size);
		if (g->fd >= 0)
			close(g->fd);
		SH_DELETE(g);
	}
	sh_map_fini(&c->segs);
	sh_map_fini(&c->objs);
	if (c->arena)
		sh_shm_unmap((void *)c->arena, c->arena_size);
	if (c->arena_fd >= 0)
		close(c->arena_fd);
	sh_link_fini(&c->l);
	sh_wbuf_fini(&c->out);
	if (c->in)
		shoal_free(c->in, c->in_cap);
	SH_DELETE(c);
}

#define DEFAULT_TIMEOUT_NS (30 * 1000000000LL)

int shoal_socket_dir(char *buf, size_t len)
{
	char why[256];
	int rc = sh_link_private_dir(buf, len, why, sizeof(why));
	if (rc)
		sh_error("store", "%s", why);
	return rc;
}

void shoal_connect_opts_init(shoal_connect_opts *o)
{
	o->server_uid = (uid_t)-1;
	o->timeout_ns = DEFAULT_TIMEOUT_NS;
}

int shoal_connect(shoal_client **out, const char *path)
{
	return shoal_connect_with(out, path, NULL);
}

int shoal_connect_with(shoal_client **out, const char *path, const shoal_connect_opts *opts)
{
	if (!out || !path || (opts && opts->timeout_ns < 0 && opts->timeout_ns != SHOAL_FOREVER))
		return SHOAL_EINVAL;
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	if (opts) {
		o = *opts;
		if (o.timeout_ns == 0)
			o.timeout_ns = DEFAULT_TIMEOUT_NS;
	}
	shoal_client *c = SH_NEW(shoal_client);
	if (!c)
		return SHOAL_ENOMEM;
	c->arena_fd = -1;
	sh_link_init(&c->l, -1);
	sh_wbuf_init(&c->out);
	c->timeout_ns = o.timeout_ns;
	uint64_t info[4];
	int arena = -1;
	char why[320];
	int rc = sh_link_connect_to(&c->l, path, SH_STORE_PROTO, SH_STORE_VERSION,
				    SH_STORE_RING_CAP, info, 4, &arena, 1, o.server_uid,
				    shoal_deadline_in(o.timeout_ns), why, sizeof(why));
	if (rc) {
		sh_err_set(c, rc, "store: %s", why);
		goto fail;
	}
	if (info[0] != SH_STORE_VERSION || info[1] == 0 || info[1] > SH_STORE_ARENA_MAX) {
		rc = SHOAL_EPROTO;
		sh_err_set(c, rc,
			   "store set-up: version %" PRIu64 ", arena of %" PRIu64
			   " bytes; expected version %d, an arena of at most %llu",
			   info[0], info[1], SH_STORE_VERSION,
			   (unsigned long long)SH_STORE_ARENA_MAX);
		goto fail;
	}
	c->arena_size = info[1];
	c->id = (uint32_t)info[2];
	c->instance = info[3];
	struct stat st;
	if (fstat(arena, &st) != 0 || (uint64_t)st.st_size < c->arena_size) {
		rc = SHOAL_EPROTO;
		sh_err_set(c, rc, "store set-up: the arena is smaller than it says");
		goto fail;
	}
	if ((rc = sh_shm_map(arena, c->arena_size, false, (void **)&c->arena)) != 0) {
		c->arena = NULL;
		goto fail;
	}
	c->arena_fd = arena;
	arena = -1;
	/* Descriptors come ahead of replies on the socket: bounded as well. */
	if ((rc = sh_link_sock_timeouts(c->l.sock, shoal_deadline_in(c->timeout_ns))) != 0)
		goto fail;
	c->l.down.spin_ns = REPLY_SPIN_NS;
	/* A request from a fiber waits on the doorbell the store made for us,
	 * in the fiber's poller, so the thread's other fibers run meanwhile; a
	 * thread's still sleeps on the futex. One request at a time, so one
	 * doorbell serves both rings. */
	c->l.up.fiber_efd = c->l.down.fiber_efd = c->l.efd_conn;
	*out = c;
	return 0;
fail:
	if (arena >= 0)
		close(arena);
	if (!sh_err_get(c)[0])
		sh_err_set(c, rc, "connecting to %s: %s", path, shoal_strerror(rc));
	if (rc == SHOAL_EACCES) /* someone else serves the socket: say so */
		sh_warn("store", "%s", sh_err_get(c));
	else
		sh_debug("store", "%s", sh_err_get(c));
	client_free(c);
	return rc;
}

int shoal_disconnect(shoal_client *c)
{
	if (!c)
		return SHOAL_EINVAL;
	client_free(c);
	return 0;
}

/* ---- requests ---- */

static void drain(shoal_client *c);

void sh_client_begin(shoal_client *c, msgpack_packer *pk)
{
	if (sh_unlikely(c->pending))
		drain(c); /* before c->out is ours: undoing may send a request */
	sh_wbuf_frame_begin(&c->out);
	sh_wbuf_packer(&c->out, pk);
}

/* Between sleeps: is the store still there? */
static int check_live(shoal_client *c)
{
	struct pollfd p = {.fd = c->l.sock, .events = POLLRDHUP};
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) {
		c->broken = true;
		return sh_err_set(c, SHOAL_ECONNRESET, "the store closed the connection");
	}
	return 0;
}

/* A request that outlived the connection's timeout, or that its caller
 * interrupted: its reply may still come, so the rings are out of step and
 * the connection is done. */
static int check_deadline(shoal_client *c, int64_t deadline, uint16_t op)
{
	if (c->interrupt && c->interrupt(c->interrupt_arg)) {
		c->broken = true;
		return sh_err_set(c, SHOAL_EINTR,
				  "request op %u interrupted; the connection is closed", op);
	}
	if (deadline == SHOAL_FOREVER || shoal_now_ns() < deadline)
		return 0;
	c->broken = true;
	return sh_err_set(c, SHOAL_ETIMEDOUT,
			  "the store did not answer request op %u within %lld ms (the "
			  "connection's timeout); the connection is closed",
			  op, (long long)(c->timeout_ns / 1000000));
}

int64_t shoal_client_set_timeout(shoal_client *c, int64_t timeout_ns)
{
	if (!c || (timeout_ns < 0 && timeout_ns != SHOAL_FOREVER))
		return SHOAL_EINVAL;
	int64_t old = c->timeout_ns;
	c->timeout_ns = timeout_ns ? timeout_ns : DEFAULT_TIMEOUT_NS;
	return old;
}

void shoal_client_set_interrupt(shoal_client *c, shoal_interrupt_fn fn, void *arg)
{
	if (c) {
		c->interrupt = fn;
		c->interrupt_arg = arg;
	}
}

/* Reads the reply to request seq (op) into c->in, *got and *len carrying
 * the progress (sh_msg_read_part), in slices looking at the store, until
 * deadline, and checks its frame. SHOAL_ECANCELED leaves the connection
 * as it is (the caller keeps the progress); any other failure breaks it. */
static int read_reply(shoal_client *c, uint16_t op, uint32_t seq, size_t *got, size_t *len,
		      int64_t deadline, sh_frame *r)
{
	int rc;
	while ((rc = sh_msg_read_part(&c->l.down, &c->in, &c->in_cap, got, len,
				      SH_STORE_REPLY_MAX + 4096,
				      shoal_deadline_in(LIVENESS_SLICE_NS))) == SHOAL_ETIMEDOUT)
		if ((rc = check_live(c)) != 0 || (rc = check_deadline(c, deadline, op)) != 0)
			return rc;
	if (rc == SHOAL_ECANCELED)
		return rc;
	if (rc) {
		c->broken = true;
		return sh_err_set(c, rc == SHOAL_ECLOSED ? SHOAL_ECONNRESET : rc,
				  "waiting for the store: %s", shoal_strerror(rc));
	}
	c->in_len = *len;
	char why[160] = "";
	if (sh_frame_decode(c->in, *len, r, why, sizeof(why)) != 0 || r->seq != seq ||
	    r->op != op || r->oob) {
		c->broken = true;
		return sh_err_set(c, SHOAL_EPROTO, "reply to request %u (op %u): %s", seq, op,
				  why[0] ? why
					 : "wrong sequence number or op, or out-of-band bytes");
	}
	return 0;
}

int sh_client_call(shoal_client *c, uint16_t op, bool noreply, sh_mp *m)
{
	if (!noreply) /* fire-and-forget requests keep the last failure's message */
		sh_err_clear(c);
	if (c->broken)
		return sh_err_set(c, SHOAL_ECONNRESET, "the connection to the store is broken");
	if (c->pending) /* drain() was cancelled too */
		return sh_err_set(c, SHOAL_ECANCELED,
				  "cancelled while the reply to an earlier cancelled request "
				  "was read");
	sh_frame f = {.op = op, .seq = ++c->seq, .flags = noreply ? SH_FRAME_NOREPLY : 0};
	int rc = sh_wbuf_frame_end(&c->out, &f);
	if (rc)
		return sh_err_set(c, rc, "request: %s", shoal_strerror(rc));
	if (c->out.len > SH_STORE_REPLY_MAX)
		return sh_err_set(c, SHOAL_EMSGSIZE,
				  "request of %zu bytes, the most a request can have is %u",
				  c->out.len, SH_STORE_REPLY_MAX);
	/* In slices, looking at the store between them, until the request's
	 * deadline. */
	int64_t deadline = shoal_deadline_in(c->timeout_ns);
	size_t done = 0;
	while ((rc = sh_msg_write_part(&c->l.up, c->out.p, c->out.len, &done,
				       shoal_deadline_in(LIVENESS_SLICE_NS))) == SHOAL_ETIMEDOUT)
		if ((rc = check_live(c)) != 0 || (rc = check_deadline(c, deadline, op)) != 0)
			return rc;
	if (c->out.cap > SH_MSG_BUF_KEEP)
		sh_wbuf_fini(&c->out);
	if (rc == SHOAL_ECANCELED && done == 0) /* nothing of it went */
		return sh_err_set(c, rc, "request op %u cancelled before it was sent", op);
	if (rc) {
		c->broken = true;
		return sh_err_set(c, rc == SHOAL_ECLOSED ? SHOAL_ECONNRESET : rc,
				  "sending a request: %s", shoal_strerror(rc));
	}
	if (noreply)
		return 0;
	size_t got = 0, len = 0;
	sh_frame r;
	if ((rc = read_reply(c, op, f.seq, &got, &len, deadline, &r)) == SHOAL_ECANCELED) {
		/* The reply still comes: the next request reads it first. */
		c->pending = true;
		c->pend_op = op;
		c->pend_seq = f.seq;
		c->pend_got = got;
		c->pend_len = len;
		return sh_err_set(c, rc,
				  "request op %u cancelled; its reply is read and undone before "
				  "the next request",
				  op);
	}
	if (rc)
		return rc;
	sh_mp_init(m, c->in + SH_FRAME_HDR, r.body_len);
	if (r.status != 0) {
		const char *msg = "";
		uint32_t n, ml = 0;
		if (sh_mp_array(m, &n) || n != 1 || sh_mp_str(m, &msg, &ml))
			msg = "(no message)", ml = 12;
		return sh_err_set(c, r.status, "%.*s", (int)ml, msg);
	}
	return 0;
}

int sh_client_recv_fds(shoal_client *c, const uint64_t *ids, int *fds, size_t n)
{
	size_t have = 0;
	while (have < n) {
		uint64_t msg[1 + SH_FD_MAX];
		size_t got;
		int k = 0, rc = sh_fd_recv(c->l.sock, msg, sizeof(msg), &got, fds + have,
					   (int)(n - have < SH_FD_MAX ? n - have : SH_FD_MAX), &k);
		if (rc == 0 && got == 0)
			rc = SHOAL_ECONNRESET;
		if (rc == SHOAL_EAGAIN) /* SO_RCVTIMEO: the connection's timeout */
			rc = SHOAL_ETIMEDOUT;
		bool ok = rc == 0 && got >= 8 && msg[0] == (uint64_t)k && got == 8 + 8 * (size_t)k;
		for (int j = 0; ok && j < k; j++)
			ok = msg[1 + j] == ids[have + (size_t)j];
		if (!ok) {
			for (int j = 0; j < k; j++)
				close(fds[have + (size_t)j]);
			for (size_t j = 0; j < have; j++)
				close(fds[j]);
			c->broken = true;
			return sh_err_set(c, rc ? rc : SHOAL_EPROTO,
					  "receiving %zu segment descriptors: %s", n,
					  rc ? shoal_strerror(rc) : "ids out of step");
		}
		have += (size_t)k;
	}
	return 0;
}

/* Reads the reply of the request whose caller was cancelled and undoes
 * what the store did for it: a GET's object is taken (its segments'
 * descriptors are on the socket, ahead of the next reply's) and released,
 * a CREATE's region received and aborted; other replies change nothing of
 * ours and are dropped. Cancelled again, it is left for the next request. */
static void drain(shoal_client *c)
{
	c->pending = false;
	size_t got = c->pend_got, len = c->pend_len;
	uint16_t op = c->pend_op;
	sh_frame r;
	int rc = read_reply(c, op, c->pend_seq, &got, &len, shoal_deadline_in(c->timeout_ns), &r);
	if (rc == SHOAL_ECANCELED) {
		c->pending = true;
		c->pend_got = got;
		c->pend_len = len;
		return;
	}
	if (rc || r.status != 0)
		return; /* broken, or the store did nothing */
	sh_mp m;
	sh_mp_init(&m, c->in + SH_FRAME_HDR, r.body_len);
	if (op == SH_OP_GET) {
		shoal_object *o;
		if (sh_client_get_reply(c, &m, 0, &o) == 0)
			shoal_object_release(o);
	} else if (op == SH_OP_CREATE) {
		uint32_t n;
		uint64_t seg;
		int fd;
		if (sh_mp_array(&m, &n) || n != 1 || sh_mp_uint(&m, &seg) || seg == 0) {
			c->broken = true;
			sh_err_set(c, SHOAL_EPROTO, "CREATE reply: expected [segment]");
			return;
		}
		if (sh_client_recv_fds(c, &seg, &fd, 1) != 0)
			return;
		close(fd);
		msgpack_packer pk;
		sh_client_begin(c, &pk);
		msgpack_pack_array(&pk, 1);
		msgpack_pack_uint64(&pk, seg);
		sh_client_call(c, SH_OP_ABORT, true, &m);
	}
}

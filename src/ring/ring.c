/* SPSC record rings in shared memory with spin-then-sleep doorbells; the
 * protocol and the trust rules are in ring.h. Indices are byte counts that
 * only grow (64-bit: they never wrap); the offset of one is its value
 * modulo the power-of-two capacity. A record that would run past the end
 * of the data area is preceded by a pad record to the end, so every
 * payload is contiguous and can be parsed where it lies. */
#include "ring/ring.h"

#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>

#define RING_MAGIC 0x676e6972u /* "ring" */
#define RING_VERSION 1u
#define REC_DATA 1u
#define REC_PAD 2u
#define DEFAULT_SPIN_NS 10000
#define PEER_SLICE_NS 10000000 /* how often a side asleep looks at its peer and ring */

struct sh_ring_shared {
	_Alignas(64) _Atomic uint64_t tail;	  /* producer's line */
	_Alignas(64) _Atomic uint64_t head;	  /* consumer's line */
	_Alignas(64) _Atomic uint32_t data_wait;  /* the consumer sleeps here */
	_Alignas(64) _Atomic uint32_t space_wait; /* the producer sleeps here */
	_Alignas(64) uint32_t magic;
	uint32_t version;
	uint64_t cap;
	_Atomic uint32_t closed;
};

_Static_assert(sizeof(struct sh_ring_shared) <= SH_RING_HDR_BYTES, "ring header fits");

typedef struct rec_hdr {
	uint32_t len;
	uint32_t kind;
} rec_hdr;

static inline uint64_t round_up8(uint64_t n)
{
	return (n + SH_RING_ALIGN - 1) & ~(uint64_t)(SH_RING_ALIGN - 1);
}

int sh_ring_bytes(size_t cap, size_t *bytes)
{
	if (cap < 4096 || (cap & (cap - 1)) != 0 || cap > ((size_t)1 << 40))
		return SHOAL_EINVAL;
	*bytes = SH_RING_HDR_BYTES + cap;
	return 0;
}

int sh_ring_format(void *mem, size_t bytes)
{
	size_t cap = bytes > SH_RING_HDR_BYTES ? bytes - SH_RING_HDR_BYTES : 0;
	size_t check;
	if (!mem || sh_ring_bytes(cap, &check) != 0)
		return SHOAL_EINVAL;
	sh_ring_shared *h = mem;
	memset(h, 0, sizeof(*h));
	h->magic = RING_MAGIC;
	h->version = RING_VERSION;
	h->cap = cap;
	/* No fence: the memory reaches the other side through fork or a
	 * passed descriptor, system calls that order it. */
	return 0;
}

int sh_ring_attach(sh_ring *r, void *mem, size_t bytes, bool producer)
{
	if (!r || !mem || bytes <= SH_RING_HDR_BYTES)
		return SHOAL_EINVAL;
	sh_ring_shared *h = mem;
	uint64_t cap = bytes - SH_RING_HDR_BYTES;
	if (h->magic != RING_MAGIC || h->version != RING_VERSION || h->cap != cap) {
		sh_warn("ring",
			"bad ring header: expected magic %#x version %u capacity %" PRIu64
			", got %#x %u %" PRIu64,
			RING_MAGIC, RING_VERSION, cap, h->magic, h->version, h->cap);
		return SHOAL_EPROTO;
	}
	size_t check;
	if (sh_ring_bytes(cap, &check) != 0)
		return SHOAL_EPROTO;
	uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
	uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
	if (tail - head > cap || head % SH_RING_ALIGN || tail % SH_RING_ALIGN)
		return SHOAL_EPROTO;
	*r = (sh_ring){.sh = h,
		       .data = (unsigned char *)mem + SH_RING_HDR_BYTES,
		       .cap = cap,
		       .pos = producer ? tail : head,
		       .peer = head,
		       .spin_ns = DEFAULT_SPIN_NS,
		       .producer = producer,
		       .wait_efd = -1,
		       .wait_wfd = -1,
		       .wake_efd = -1,
		       .fiber_efd = -1,
		       .wake_fiber_efd = -1,
		       .peer_fd = -1};
	return 0;
}

size_t sh_ring_max_payload(const sh_ring *r)
{
	return (size_t)(r->cap - sizeof(rec_hdr));
}

/* ---- doorbells ---------------------------------------------------------------- */

/* The fiber doorbell (link.h: efd_conn) is a datagram socket pair whose
 * other end the peer holds: sent to without blocking and without SIGPIPE
 * whatever the peer does to its end (full, blocking, closed: a pipe's
 * writer would get SIGPIPE once the reader is gone). */
static void ring_peer_bell(int fd)
{
	static const char one = 1;
	while (send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* Clears a wait flag that is set and wakes its sleeper, the way it sleeps:
 * on fiber_efd when the flag says a fiber sleeps there and we have it, else
 * on efd when that is a descriptor, else on the flag as a futex. The flag
 * may be the peer's to write: whatever it says, we only ring a doorbell of
 * ours (vmsplice, never blocking) or wake a futex. */
static bool wake_sleeper(_Atomic uint32_t *flag, int efd, int fiber_efd)
{
	uint32_t was = atomic_exchange_explicit(flag, 0, memory_order_seq_cst);
	if (!was)
		return false; /* not asleep, or someone else rang */
	if (was == SH_RING_WAIT_BELL && fiber_efd >= 0)
		ring_peer_bell(fiber_efd);
	else if (efd >= 0)
		sh_bell_ring(efd);
	else
		sh_futex_wake(flag, true);
	return true;
}

/* Empties the fiber doorbell (MSG_DONTWAIT: the peer made the socket and
 * may have made it blocking); a bounded number of rings, the rest are
 * spurious wake-ups at worst. */
static void drain_peer_bell(int fd)
{
	char b;
	for (int i = 0; i < 64 && recv(fd, &b, 1, MSG_DONTWAIT) >= 0; i++)
		;
}

static void ring_bell(sh_ring *r, _Atomic uint32_t *flag)
{
	/* Our index store and this load, the sleeper's flag store and its
	 * index load in ready(), are all seq_cst: either the sleeper sees what
	 * we published, or we see its flag. */
	if (sh_likely(!atomic_load_explicit(flag, memory_order_seq_cst)))
		return;
	if (wake_sleeper(flag, r->wake_efd, r->wake_fiber_efd))
		r->wakes++;
}

/* Has the other side done what we wait for? Producer: room for need bytes;
 * consumer: something past pos. Also true when closed. */
static bool ready(sh_ring *r, uint64_t need)
{
	if (atomic_load_explicit(&r->sh->closed, memory_order_seq_cst))
		return true;
	if (r->producer) {
		uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_seq_cst);
		return head <= r->pos && (r->pos - head) + need <= r->cap;
	}
	return atomic_load_explicit(&r->sh->tail, memory_order_seq_cst) != r->pos;
}

static inline bool expired(int64_t now, int64_t deadline)
{
	return deadline != SHOAL_FOREVER && now >= deadline;
}

/* Spins, then sleeps until ready() or the deadline. 0 when ready. */
static int wait_for(sh_ring *r, uint64_t need, int64_t deadline)
{
	_Atomic uint32_t *flag = r->producer ? &r->sh->space_wait : &r->sh->data_wait;
	int64_t t0 = shoal_now_ns();
	/* A fiber spins by yielding, so the other fibers of its thread (a
	 * server's other connections) keep running while it waits. It sleeps
	 * on a doorbell (its own, or the fiber doorbell the peer made for it),
	 * a thread on the futex or its own doorbell. */
	bool fiber = (r->wait_efd >= 0 || r->fiber_efd >= 0) && shoal_sched_current() != NULL;
	int bell = r->wait_efd >= 0 ? r->wait_efd : fiber ? r->fiber_efd : -1;
	uint32_t mark = bell >= 0 && bell != r->wait_efd ? SH_RING_WAIT_BELL : SH_RING_WAIT_FUTEX;
	for (uint32_t i = 1;; i++) {
		if (ready(r, need))
			return 0;
		if (fiber) {
			/* cancelled: at once, not after the spin */
			if (shoal_yield() == SHOAL_ECANCELED)
				return SHOAL_ECANCELED;
		} else
			sh_cpu_relax();
		/* The clock is read every few rounds, a fiber's too: read at
		 * each of its yields it was a third of a waiting tasklet's
		 * time (clock_gettime is dear on this VM's clock source; a
		 * yield with nothing else runnable is not). Eight yields that
		 * ran other fibers may overrun the spin: they were work. */
		if ((i & (fiber ? 7 : 63)) == 0) {
			int64_t now = shoal_now_ns();
			if (now - t0 >= (int64_t)r->spin_ns || expired(now, deadline))
				break;
		}
	}
	for (;;) {
		atomic_store_explicit(flag, mark, memory_order_seq_cst);
		if (ready(r, need)) {
			atomic_store_explicit(flag, 0, memory_order_relaxed);
			return 0;
		}
		if (expired(shoal_now_ns(), deadline)) {
			atomic_store_explicit(flag, 0, memory_order_relaxed);
			return SHOAL_ETIMEDOUT;
		}
		r->sleeps++;
		if (bell >= 0 && fiber) {
			/* A fiber waits on one descriptor at a time: with a peer to
			 * watch it sleeps in slices and looks at the peer between. */
			int64_t until = deadline;
			if (r->peer_fd >= 0) {
				int64_t slice = shoal_deadline_in(PEER_SLICE_NS);
				if (until == SHOAL_FOREVER || slice < until)
					until = slice;
			}
			int rc = shoal_fd_wait(bell, SHOAL_FD_IN, until, NULL);
			if (rc == 0 && bell == r->wait_efd)
				sh_bell_drain(bell);
			else if (rc == 0)
				drain_peer_bell(bell);
			else if (rc != SHOAL_ETIMEDOUT) {
				atomic_store_explicit(flag, 0, memory_order_relaxed);
				return rc; /* cancelled */
			}
			struct pollfd pp = {.fd = r->peer_fd, .events = POLLIN};
			if (r->peer_fd >= 0 && poll(&pp, 1, 0) == 1) {
				atomic_store_explicit(flag, 0, memory_order_relaxed);
				return ready(r, need) ? 0 : SHOAL_ECONNRESET;
			}
		} else if (r->wait_efd >= 0) {
			/* A thread: poll the doorbell and the peer's liveness
			 * descriptor together, so a dead peer wakes us at once. */
			struct pollfd p[2] = {{.fd = r->wait_efd, .events = POLLIN},
					      {.fd = r->peer_fd, .events = POLLIN}};
			int64_t left = deadline == SHOAL_FOREVER ? -1 : deadline - shoal_now_ns();
			/* Not on the peer's doorbell alone: one that lost or never
			 * rings it (an extension that dup2()s over it) costs a
			 * slice, not the whole wait. */
			if (r->peer_fd >= 0 && (left < 0 || left > PEER_SLICE_NS))
				left = PEER_SLICE_NS;
			int ms = left < 0 ? -1 : (int)((left + 999999) / 1000000);
			int n = poll(p, r->peer_fd >= 0 ? 2 : 1, ms);
			if (n > 0 && (p[0].revents & POLLIN))
				sh_bell_drain(r->wait_efd);
			if (n > 0 && r->peer_fd >= 0 && p[1].revents) {
				atomic_store_explicit(flag, 0, memory_order_relaxed);
				if (ready(r, need))
					return 0; /* what it published before it went */
				return SHOAL_ECONNRESET;
			}
		} else {
			sh_futex_wait(flag, 1, deadline, true);
		}
	}
}

/* ---- producer ------------------------------------------------------------------- */

/* Reads and checks the consumer's index: it may only grow, up to our own. */
static int refresh_head(sh_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_acquire);
	if (head < r->peer || head > r->pos || head % SH_RING_ALIGN) {
		sh_warn("ring", "consumer index %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]",
			head, r->peer, r->pos);
		return SHOAL_EPROTO;
	}
	r->peer = head;
	return 0;
}

size_t sh_ring_room(sh_ring *r)
{
	if (!r->producer || refresh_head(r) != 0)
		return 0;
	return (size_t)(r->cap - (r->pos - r->peer));
}

static void publish_tail(sh_ring *r)
{
	atomic_store_explicit(&r->sh->tail, r->pos, memory_order_seq_cst);
	ring_bell(r, &r->sh->data_wait);
}

int sh_ring_reserve(sh_ring *r, size_t len, void **buf, int64_t deadline)
{
	if (!r || !r->producer || !buf)
		return SHOAL_EINVAL;
	if (len > sh_ring_max_payload(r))
		return SHOAL_EMSGSIZE;
	uint64_t size = sizeof(rec_hdr) + round_up8(len);
	for (;;) {
		if (atomic_load_explicit(&r->sh->closed, memory_order_acquire))
			return SHOAL_ECLOSED;
		uint64_t off = r->pos & (r->cap - 1);
		uint64_t contig = r->cap - off;
		uint64_t need = size <= contig ? size : contig + size;
		if (need > r->cap)
			need = contig; /* first the pad alone, then the record at 0 */
		if ((r->pos - r->peer) + need > r->cap) {
			int rc = refresh_head(r);
			if (rc)
				return rc;
		}
		if ((r->pos - r->peer) + need > r->cap) {
			if (deadline == SHOAL_NOWAIT)
				return SHOAL_EAGAIN;
			int rc = wait_for(r, need, deadline);
			if (rc)
				return rc;
			continue;
		}
		if (size > contig) {
			rec_hdr pad = {.len = (uint32_t)(contig - sizeof(rec_hdr)),
				       .kind = REC_PAD};
			memcpy(r->data + off, &pad, sizeof(pad));
			r->pos += contig;
			if (need == contig)
				publish_tail(r); /* the consumer must skip it to make room */
			continue;
		}
		r->cur = size;
		*buf = r->data + off + sizeof(rec_hdr);
		return 0;
	}
}

void sh_ring_commit(sh_ring *r, size_t len)
{
	SH_ASSERT(r->cur && sizeof(rec_hdr) + round_up8(len) <= r->cur);
	rec_hdr h = {.len = (uint32_t)len, .kind = REC_DATA};
	memcpy(r->data + (r->pos & (r->cap - 1)), &h, sizeof(h));
	r->pos += sizeof(rec_hdr) + round_up8(len);
	r->cur = 0;
	publish_tail(r);
}

int sh_ring_write(sh_ring *r, const void *buf, size_t len, int64_t deadline)
{
	void *p;
	int rc = sh_ring_reserve(r, len, &p, deadline);
	if (rc)
		return rc;
	if (len)
		memcpy(p, buf, len);
	sh_ring_commit(r, len);
	return 0;
}

/* ---- consumer ------------------------------------------------------------------- */

static void publish_head(sh_ring *r)
{
	atomic_store_explicit(&r->sh->head, r->pos, memory_order_seq_cst);
	ring_bell(r, &r->sh->space_wait);
}

int sh_ring_peek(sh_ring *r, const void **buf, size_t *len, int64_t deadline)
{
	if (!r || r->producer || !buf || !len)
		return SHOAL_EINVAL;
	for (;;) {
		if (r->peer == r->pos) {
			/* Closed is read before the index: a record published
			 * before the close is still delivered. */
			bool closed = atomic_load_explicit(&r->sh->closed, memory_order_acquire);
			uint64_t tail = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
			if (tail < r->pos || tail - r->pos > r->cap || tail % SH_RING_ALIGN) {
				sh_warn("ring",
					"producer index %" PRIu64 " outside [%" PRIu64 ", %" PRIu64
					"]",
					tail, r->pos, r->pos + r->cap);
				return SHOAL_EPROTO;
			}
			r->peer = tail;
			if (tail == r->pos) {
				if (closed)
					return SHOAL_ECLOSED;
				if (deadline == SHOAL_NOWAIT)
					return SHOAL_EAGAIN;
				int rc = wait_for(r, 0, deadline);
				if (rc)
					return rc;
				continue;
			}
		}
		uint64_t off = r->pos & (r->cap - 1);
		uint64_t contig = r->cap - off;
		uint64_t avail = r->peer - r->pos;
		rec_hdr h;
		memcpy(&h, r->data + off, sizeof(h)); /* once: the peer may rewrite it */
		if (h.kind == REC_PAD && h.len == contig - sizeof(rec_hdr) && contig <= avail) {
			r->pos += contig;
			publish_head(r);
			continue;
		}
		uint64_t size = sizeof(rec_hdr) + round_up8(h.len);
		if (h.kind != REC_DATA || size > contig || size > avail) {
			sh_warn("ring",
				"bad record at %" PRIu64 ": kind %u, %u bytes, with %" PRIu64
				" published and %" PRIu64 " before the end",
				r->pos, h.kind, h.len, avail, contig);
			return SHOAL_EPROTO;
		}
		r->cur = size;
		*buf = r->data + off + sizeof(rec_hdr);
		*len = h.len;
		return 0;
	}
}

void sh_ring_release(sh_ring *r)
{
	SH_ASSERT(r->cur);
	r->pos += r->cur;
	r->cur = 0;
	publish_head(r);
}

void sh_ring_close(sh_ring *r)
{
	atomic_store_explicit(&r->sh->closed, 1, memory_order_seq_cst);
	/* The peer's flag rings its doorbell; ours may have a thread or fiber
	 * of this process asleep on it, woken the way it sleeps. */
	_Atomic uint32_t *mine = r->producer ? &r->sh->space_wait : &r->sh->data_wait;
	_Atomic uint32_t *theirs = r->producer ? &r->sh->data_wait : &r->sh->space_wait;
	ring_bell(r, theirs);
	wake_sleeper(mine, r->wait_wfd >= 0 ? r->wait_wfd : r->wait_efd, -1);
}
